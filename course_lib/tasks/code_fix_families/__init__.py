"""Code-fix's function families: small modules with bugs that can be planted in them.

A family is a function `(rng) -> Repo`: the correct module source, the bugs that can be planted
in it (each a pair of texts: the correct snippet and its buggy replacement) and the test cases
(`repo`: the Repo dataclass and the helpers every family uses). A test case is ("eq", call) -- the
expected value is computed by running the correct code, so it can never be wrong -- or
("raises", call, message) for a ValueError whose message must match.
Families: moving average, clamp, running sum, median, percentage, counting in a range, argmax
(`numbers`); word count, pagination, palindrome, fizzbuzz-like labels, dedupe, chunking, truncation
(`texts`). `course_lib.tasks.code_fix` turns an instance into a task.
"""

from __future__ import annotations

from course_lib.tasks.code_fix_families.numbers import (
    argmax,
    clamp,
    count_in_range,
    median,
    moving_average,
    percentage,
    running_sum,
)
from course_lib.tasks.code_fix_families.repo import PACKAGES, Repo
from course_lib.tasks.code_fix_families.texts import (
    chunking,
    dedupe,
    labels,
    pagination,
    palindrome,
    truncate,
    word_count,
)

__all__ = ["FAMILIES", "PACKAGES", "Repo"]

# The order decides which family each task index draws: changing it changes the generated data.
FAMILIES = [moving_average, clamp, running_sum, word_count, median, pagination, palindrome, labels,
            dedupe, chunking, percentage, count_in_range, argmax, truncate]
