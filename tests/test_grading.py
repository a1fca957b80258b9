"""How every exercise check answers (`course_lib.course.grading`), on a toy exercise whose reference is a
real solution (`course_lib.course.solutions.discounted`)."""

from __future__ import annotations

import pytest

from course_lib.course import solutions
from course_lib.course.grading import ExerciseFailed, graded, solutions_mode


def _grade(fn) -> str:
    if fn([1.0], 0.5) != [1.0]:
        raise ExerciseFailed("a one-step return is its reward")
    return "right."


def _stub(rewards, gamma):
    raise NotImplementedError


@pytest.fixture(autouse=True)
def learner_mode(monkeypatch):
    monkeypatch.delenv("COURSE_SOLUTIONS", raising=False)


def test_right_wrong_stub_and_crash(capsys):
    right = lambda r, g: list(r)  # noqa: E731
    assert graded(right, "discounted", "write it.", _grade) is right
    assert capsys.readouterr().out == "Correct! right.\n"
    assert graded(lambda r, g: [0.0], "discounted", "write it.", _grade) is solutions.discounted
    out = capsys.readouterr().out
    assert out.startswith("Not yet: a one-step return is its reward\n")
    assert "from course_lib.course.solutions import discounted" in out
    assert graded(_stub, "discounted", "write it.", _grade) is solutions.discounted
    assert capsys.readouterr().out.startswith("Not implemented yet: write it.\n")
    assert graded(lambda r, g: 1 / 0, "discounted", "write it.", _grade) is solutions.discounted
    assert "failed with ZeroDivisionError" in capsys.readouterr().out


def test_solutions_mode(monkeypatch, capsys):
    monkeypatch.setenv("COURSE_SOLUTIONS", "0")
    assert not solutions_mode()
    monkeypatch.setenv("COURSE_SOLUTIONS", "1")
    assert graded(_stub, "discounted", "write it.", _grade) is solutions.discounted
    assert capsys.readouterr().out == "Correct! right.\n"
    with pytest.raises(ExerciseFailed, match="one-step"):
        graded(lambda r, g: [0.0], "discounted", "write it.", _grade)
