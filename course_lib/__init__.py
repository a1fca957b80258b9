"""course_lib: the library behind "Agentic RL, hands-on".

Modules, in the order the course introduces them: models, protocol, envs, trajectory, rollout,
losses, credit, judge, train, viz, integrations.
"""

import os

__version__ = "0.1.0"


def fast_mode() -> bool:
    """True when COURSE_FAST=1: every experiment shrinks to a tiny size (tests, CI, nbval)."""
    return os.environ.get("COURSE_FAST", "0") not in ("", "0", "false", "False")
