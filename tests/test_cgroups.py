"""`course_lib.envs.cgroups`: one command's control group, with its memory and process ceilings written where
the kernel reads them. That the kernel then enforces them is tested in test_attacks.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from course_lib.envs import cgroups


def test_a_groups_directory_is_found_under_its_hierarchys_mount():
    assert cgroups._directory(("/", "/sys/fs/cgroup/memory"), "/a/b") == Path("/sys/fs/cgroup/memory/a/b")
    # a container sees the subtree /box only, mounted at the mount point
    assert cgroups._directory(("/box", "/sys/fs/cgroup"), "/box/a") == Path("/sys/fs/cgroup/a")
    assert cgroups._directory(("/box", "/sys/fs/cgroup"), "/box") == Path("/sys/fs/cgroup")
    assert cgroups._directory(("/box", "/sys/fs/cgroup"), "/boxer") == Path("/sys/fs/cgroup/boxer")


def test_this_process_has_a_group_in_each_hierarchy_it_reads():
    groups = cgroups._own_groups()
    assert groups and all(path.startswith("/") for path in groups.values())
    assert cgroups.available() in ("v1", "v2", None)


@pytest.mark.skipif(not cgroups.available(), reason="this machine gives no control group to a command")
def test_a_command_group_holds_its_ceilings_and_the_process_that_joins_it():
    group = cgroups.command_group(memory_mb=64, max_processes=5)
    assert group is not None
    try:
        assert all(d.is_dir() and d.name.startswith("course-sandbox-") for d in group.dirs)
        if group.kind == "v2":
            (directory,) = group.dirs
            assert (directory / "memory.max").read_text().strip() == str(64 * 2**20)
            assert (directory / "pids.max").read_text().strip() == "5"
        else:
            memory, pids = group.dirs
            assert (memory / "memory.limit_in_bytes").read_text().strip() == str(64 * 2**20)
            assert (pids / "pids.max").read_text().strip() == "5"
        shown = subprocess.run([sys.executable, "-c", "print(open('/proc/self/cgroup').read())"],
                               preexec_fn=group.join, capture_output=True, text=True, check=True).stdout
        assert group.dirs[0].name in shown
        assert not group.out_of_memory()
    finally:
        group.remove()
    assert not any(d.exists() for d in group.dirs)
