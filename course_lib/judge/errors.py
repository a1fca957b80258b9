"""The judge's errors, in a module of their own so that both the judge and its backends can raise them.

Layering: ``errors`` <- ``backends`` <- ``scoring`` <- ``quality`` (modules of `course_lib.judge`); nothing
here imports the judge.
"""

from __future__ import annotations


class JudgeUnavailable(RuntimeError):
    """The judge endpoint could not be reached (refused, timed out) after bounded retries, or refused us
    for a configuration reason (a wrong key, model or URL). Raised, never counted as a bad group."""


class JudgeAnswerError(ValueError):
    """A judge answer that cannot be used; its message is sent back to the judge on a retry."""


class JudgeRequestRejected(ValueError):
    """The judge refused this one request (HTTP 400, 413, 422; a prompt that cannot fit): its group fails,
    the run goes on. Not re-asked: the re-ask would be longer still."""
