"""How an exercise check answers: one rule for every `check_*` in
`course_lib.course.exercises`.

A notebook's exercise cell ships as a stub: a function whose body raises `NotImplementedError` (or a value
left at `None`). Its check cell reads `my_fn = check_my_fn(my_fn)`, and the check prints one line:

- a stub:          "Not implemented yet: <what to write>";
- a wrong answer:  "Not yet: <a hint about what is wrong>";
- a right answer:  "Correct! <what it shows>".

The check returns what the cells below should use: your function when it passed, otherwise the reference
solution from `course_lib.course.solutions` (and says so), so the rest of the notebook runs either way.

With the environment variable COURSE_SOLUTIONS=1 (set by `make test`) a stub is replaced by the reference
solution and graded, printing the same "Correct!" line; a reference that fails its own check raises
`ExerciseFailed`, so CI catches it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any


class ExerciseFailed(AssertionError):
    """Raised by a grader with a hint; the check turns it into a "Not yet:" line."""


def solutions_mode() -> bool:
    """True when COURSE_SOLUTIONS is set to a non-empty value other than 0."""
    return os.environ.get("COURSE_SOLUTIONS", "") not in ("", "0")


def reference(name: str) -> Any:
    """The reference solution `name` from `course_lib.course.solutions`."""
    from course_lib.course import solutions

    return getattr(solutions, name)


def graded(answer: Any, name: str, todo: str, grade: Callable[[Any], str]) -> Any:
    """Grade `answer` (a function, or a value) with `grade`, print one line, return what to use next.

    `grade(answer)` returns the success message or raises `ExerciseFailed(hint)`; a stub is `None` or a
    function that raises `NotImplementedError` when `grade` calls it.
    """
    if answer is not None:
        try:
            message = grade(answer)
        except NotImplementedError:
            pass  # a stub: handled below
        except ExerciseFailed as failure:
            return _fall_back(name, f"Not yet: {failure}")
        except Exception as error:  # the learner's code crashed: say how, without a traceback wall
            return _fall_back(name, f"Not yet: checking your {name} failed with "
                                    f"{type(error).__name__}: {error}")
        else:
            print(f"Correct! {message}")
            return answer
    if solutions_mode():
        solution = reference(name)
        print(f"Correct! {grade(solution)}")  # a failing reference raises: CI must see it
        return solution
    return _fall_back(name, f"Not implemented yet: {todo}")


def _fall_back(name: str, line: str) -> Any:
    """Print `line` and hand back the reference solution (under COURSE_SOLUTIONS=1: raise instead)."""
    if solutions_mode():
        raise ExerciseFailed(line)
    print(line)
    print(f"  (the cells below use the reference solution: from course_lib.course.solutions import {name})")
    return reference(name)
