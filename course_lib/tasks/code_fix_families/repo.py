"""What a code-fix family makes, and the helpers every family uses.

A family is a function `(rng) -> Repo`: the correct module source, the bugs that can be planted
in it (each a pair of texts: the correct snippet and its buggy replacement) and the test cases.
A test case is ("eq", call) -- the expected value is computed by running the correct code, so it
can never be wrong -- or ("raises", call, message) for a ValueError whose message must match.
`fill` writes a module from its template, `ints` draws the numbers of a test call.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from string import Template
from typing import Any


@dataclass
class Repo:
    """One family instance: a correct module, the bugs that can be planted in it, and its test cases."""

    family: str
    module: str  # file name without ".py", inside the package
    source: str  # the correct module
    imports: list[str]  # the names the tests import from the module
    bugs: list[tuple[str, str, str]]  # (bug kind, correct snippet, buggy snippet)
    visible: list[tuple[str, ...]]
    hidden: list[tuple[str, ...]]


PACKAGES = ["toolbox", "utilkit", "corelib", "helpers", "pyutils", "basics", "smallkit", "workbench",
             "common", "handy", "bits", "everyday"]


def fill(template: str, **names: Any) -> str:
    return Template(template).substitute({k: str(v) for k, v in names.items()})


def ints(rng: random.Random, n: int, lo: int = -20, hi: int = 50) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(n)]
