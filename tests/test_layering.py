"""The shape of `course_lib`: its import graph has no cycles, the layering rules hold, modules stay small.

Data flows one way: models -> protocol -> envs -> trajectory -> rollout -> losses/credit -> train -> viz.
The graph is read from the source with `ast` (imports inside functions count too: a lazy import that
hides a cycle is still a cycle), skipping `if TYPE_CHECKING:` blocks, which never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "course_lib"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The course_lib modules that module `name` imports (a `from pkg import mod` names the module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if _is_type_checking(node):
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return {m for m in found if m in known and m != name}


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, set(modules)) for name, path in modules.items()}


def _reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := dfs(nxt)):
                return cycle
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := dfs(node)):
            return cycle
    return None


GRAPH = import_graph()


def _package_ancestors(module: str) -> set[str]:
    """`course_lib.envs.code_fix` imports its packages' __init__ implicitly; those edges are not layering."""
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def test_the_import_graph_has_no_cycles():
    assert GRAPH.get("course_lib.train.loop"), "the graph reader found no imports"
    assert _find_cycle(GRAPH) is None, f"import cycle: {' -> '.join(_find_cycle(GRAPH))}"


def test_the_cycle_finder_finds_a_cycle():
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


# The modules of the judge package, from the bottom up.
JUDGE_MODULES = ("errors", "answers", "prompts", "backends", "scoring", "turns", "methods", "quality",
                 "server", "warm_start")


def _judge_modules_but(*allowed: str) -> list[str]:
    return [f"course_lib.judge.{m}" for m in JUDGE_MODULES if m not in allowed]


@pytest.mark.parametrize("low, forbidden", [
    # credit takes numbers and returns advantages: no training, judging, warm start or evaluation code
    ("course_lib.credit", ["course_lib.train", "course_lib.judge", "course_lib.sft",
                           "course_lib.evaluate", "course_lib.checkpoint", "course_lib.rollout"]),
    # batching and the model forward know nothing of advantages or configs
    ("course_lib.batching", ["course_lib.credit", "course_lib.train", "course_lib.sft",
                             "course_lib.checkpoint", "course_lib.evaluate", "course_lib.judge"]),
    # checkpoints and the metrics file take plain data, not TrainConfig
    ("course_lib.checkpoint", ["course_lib.train", "course_lib.credit", "course_lib.sft",
                               "course_lib.evaluate"]),
    # the warm start and evaluation sit below the trainer, and know nothing of credit or the judge
    ("course_lib.sft", ["course_lib.train", "course_lib.credit", "course_lib.evaluate", "course_lib.judge"]),
    ("course_lib.evaluate", ["course_lib.train", "course_lib.credit", "course_lib.judge"]),
    # nothing under the judge imports the trainer, evaluation or the course's own helpers
    ("course_lib.judge", ["course_lib.evaluate", "course_lib.train", "course_lib.course"]),
    # inside the judge: errors <- answers, prompts, backends <- scoring <- turns, quality, server, warm_start
    ("course_lib.judge.errors", _judge_modules_but("errors")),
    ("course_lib.judge.answers", _judge_modules_but("errors", "answers")),
    ("course_lib.judge.prompts", _judge_modules_but("errors", "prompts")),
    ("course_lib.judge.backends", _judge_modules_but("errors", "backends")),
    ("course_lib.judge.scoring", ["course_lib.judge.turns", "course_lib.judge.methods",
                                  "course_lib.judge.quality", "course_lib.judge.server",
                                  "course_lib.judge.warm_start"]),
    ("course_lib.judge.turns", ["course_lib.judge.methods", "course_lib.judge.quality",
                                "course_lib.judge.server", "course_lib.judge.warm_start"]),
    ("course_lib.judge.methods", ["course_lib.judge.quality", "course_lib.judge.server",
                                  "course_lib.judge.warm_start"]),
    # environments never import their task generators
    ("course_lib.envs", ["course_lib.tasks"]),
    # a step's rewards are computed below the trainer, which calls them
    ("course_lib.rewards", ["course_lib.train"]),
])
def test_layering_rule(low, forbidden):
    lows = [m for m in GRAPH if m == low or m.startswith(low + ".")]
    assert lows, f"{low} is not a module of course_lib"
    for module in lows:
        reached = _reaches(GRAPH, module) - _package_ancestors(module)
        bad = [f for f in forbidden if any(r == f or r.startswith(f + ".") for r in reached)]
        assert not bad, f"{module} imports (directly or through others) {bad}"


def _is_course(module: str) -> bool:
    return module == "course_lib.course" or module.startswith("course_lib.course.")


def test_no_library_module_imports_the_course_helpers():
    """`course_lib.course` (notebook setup, exercises, grading, solutions, the tabular companion) is what only
    the notebooks need: the library below it never imports it, directly or through another module."""
    assert any(_is_course(m) for m in GRAPH), "course_lib.course is missing"
    library = [m for m in GRAPH if not _is_course(m)]
    bad = {m: found for m in library if (found := sorted(r for r in _reaches(GRAPH, m) if _is_course(r)))}
    assert not bad, f"library modules that import the course helpers: {bad}"


def test_the_course_rule_finds_an_import_of_the_course_helpers():
    graph = {"course_lib.rollout": {"course_lib.viz"}, "course_lib.viz": {"course_lib.course.setup"},
             "course_lib.course.setup": set()}
    assert "course_lib.course.setup" in _reaches(graph, "course_lib.rollout")


def test_task_generators_import_environments_and_selection_lives_with_them():
    tasks = [m for m in GRAPH if m == "course_lib.tasks" or m.startswith("course_lib.tasks.")]
    assert tasks, "course_lib.tasks is missing"
    assert any(dep.startswith("course_lib.envs") for m in tasks for dep in GRAPH[m])
    source = "\n".join(_modules()[m].read_text() for m in tasks)
    assert "def filter_tasks(" in source


def test_environment_modules_hold_no_task_generators():
    for name, path in _modules().items():
        if name.startswith("course_lib.envs."):
            tree = ast.parse(path.read_text())
            defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
            assert not defined & {"make_tasks", "generate"}, (
                f"{name} defines {defined & {'make_tasks', 'generate'}}")


def test_no_module_is_over_the_size_limit():
    long = {name: n for name, path in _modules().items()
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_function_is_over_the_size_limit():
    long = {}
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{name}.{node.name}"] = lines
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def _environment_listings(tree: ast.AST, names: set[str]) -> list[str]:
    """Where a module lists environments itself: a tuple, list, set or dict literal of two or more environment
    names, or a comparison with one (`env == "gridworld"`: a special case that belongs in the table)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            listed = node.elts
        elif isinstance(node, ast.Dict):
            listed = [key for key in node.keys if key is not None]
        elif isinstance(node, ast.Compare):
            listed = [node.left, *node.comparators]
        else:
            continue
        hits = [e.value for e in listed if isinstance(e, ast.Constant) and e.value in names]
        if len(hits) >= 2 or (hits and isinstance(node, ast.Compare)):
            found.append(f"line {node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_one_table_lists_the_environments():
    """`course_lib.envs.ENVIRONMENTS` is the only list of environments: every other module reads it."""
    from course_lib.envs import ENVIRONMENTS

    names = set(ENVIRONMENTS)
    listings = {name: found for name, path in _modules().items() if name != "course_lib.envs"
                and (found := _environment_listings(ast.parse(path.read_text()), names))}
    assert not listings, f"environments listed outside course_lib.envs.ENVIRONMENTS (read it): {listings}"
    assert _environment_listings(ast.parse('ENVS = ("gridworld", "lookup")\nif env == "lookup": pass'), names)


# ----- a method name is dispatched once: in its registry ---------------------------------------------------

# A compared expression that selects a method mentions one of these words (`scale == "group"` does not).
_SELECTOR_WORDS = ("method", "credit", "judg", "turn_reward", "source", "reward")


def _registries() -> dict[str, set[str]]:
    """Registering module -> the method names it registers (credit methods; judging methods, reward
    sources and turn-reward rules)."""
    from course_lib import credit, rewards
    from course_lib.judge.methods import JUDGING_METHODS

    return {"course_lib.credit": set(credit.CREDIT_METHODS), "course_lib.judge.methods": set(JUDGING_METHODS),
            "course_lib.rewards": set(rewards.REWARD_SOURCES) | set(rewards.TURN_REWARD_RULES)}


def _string_literals(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_string_literals(e) for e in node.elts))
    return set()


def method_name_comparisons(source: str, module: str, registries: dict[str, set[str]]) -> list[str]:
    """`==`, `!=`, `in`, `not in` comparisons of a method-selecting expression against a registered name,
    outside the module that registers that name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        for op, left, right in zip(node.ops, operands, operands[1:]):
            if not isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
                continue
            for literal, selector in ((left, right), (right, left)):
                names = _string_literals(literal)
                text = ast.unparse(selector)
                registered = [r for r, known in registries.items() if r != module and names & known]
                if registered and not _string_literals(selector) and any(w in text for w in _SELECTOR_WORDS):
                    found.append(f"{module}:{node.lineno}: {ast.unparse(node)} (names of {registered[0]})")
    return found


def test_no_comparison_against_a_method_name_outside_its_registry():
    registries = _registries()
    found = [hit for name, path in _modules().items()
             for hit in method_name_comparisons(path.read_text(), name, registries)]
    assert not found, "a method name dispatched outside its registry (use the registry):\n" + "\n".join(found)


def test_the_method_name_rule_finds_a_comparison():
    registries = {"course_lib.credit": {"gigpo"}, "course_lib.rewards": {"group"}}
    code = ("if config.credit == 'gigpo': pass\nif judge_method in ('group', 'x'): pass\n"
            "if scale == 'group': pass\n")
    assert len(method_name_comparisons(code, "course_lib.viz", registries)) == 2
    assert len(method_name_comparisons(code, "course_lib.credit", registries)) == 1
