"""The old name of `course_lib.tasks`'s command line, kept so that `python -m course_lib.data` still works.

    python -m course_lib.data --check     # the same as: python -m course_lib.tasks --check
"""

from __future__ import annotations

import sys

from course_lib.tasks import ENV_NAMES, check, compare_trees, generate_all, main, write_jsonl

__all__ = ["ENV_NAMES", "check", "compare_trees", "generate_all", "main", "write_jsonl"]

if __name__ == "__main__":
    sys.exit(main(prog="python -m course_lib.data"))
