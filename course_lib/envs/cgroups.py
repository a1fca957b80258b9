"""A memory and process ceiling per sandboxed command, from the kernel's control groups.

``RLIMIT_AS`` bounds one process's address space, and nothing more: a command can still hold memory
in many processes, in memfds it never maps, in socket and pipe buffers, in extended attributes of
files on a tmpfs. A control group counts all of it: every page and kernel object charged to the
processes in the group, whichever of them made it. Where this process may create groups (cgroup v2
with the memory and pids controllers delegated, or the v1 `memory` and `pids` hierarchies, which is
what these course machines have), each command runs in a fresh group with

    memory ceiling = Limits.memory_mb    (memory.max, or memory.limit_in_bytes; no swap on top)
    process ceiling = Limits.max_processes   (pids.max)

and past the memory ceiling the kernel's OOM killer stops a process of that group, no other.
`available()` says which kind this machine has (probed once); `CommandGroup` is one command's group.

Standard library only, like `workdirs`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import time
from pathlib import Path

_PREFIX = "course-sandbox-"


def _own_groups() -> dict[str, str]:
    """This process's cgroup path per hierarchy: {"": path} for v2, {"memory": path, "pids": path} for v1."""
    groups = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            groups[name] = path
    return groups


def _mount_points() -> dict[str, tuple[str, str]]:
    """Where each hierarchy is mounted, and which of its groups is the mount's root:
    {"": (root, mount point) of cgroup2, "memory": ..., "pids": ...}."""
    mounts: dict[str, tuple[str, str]] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        separator = fields.index("-")
        fstype, options, root, point = fields[separator + 1], fields[separator + 3], fields[3], fields[4]
        if fstype == "cgroup2":
            mounts.setdefault("", (root, point))
        elif fstype == "cgroup":
            for name in ("memory", "pids"):
                if name in options.split(","):
                    mounts.setdefault(name, (root, point))
    return mounts


def _directory(mount: tuple[str, str], group: str) -> Path:
    """The directory of `group` (a path as /proc/self/cgroup gives it) under its hierarchy's mount."""
    root, point = mount
    if root != "/" and (group == root or group.startswith(root + "/")):
        group = group[len(root):]  # the mount shows a subtree only
    return Path(point + "/" + group.lstrip("/"))


@functools.cache
def _parents() -> tuple[str, dict[str, Path]] | None:
    """("v2" or "v1", {controller: the directory under which this process may make groups}), or None."""
    try:
        own, mounts = _own_groups(), _mount_points()
    except (OSError, ValueError, IndexError):
        return None
    if "" in mounts and "" in own:
        parent = _directory(mounts[""], own[""])
        controllers = (parent / "cgroup.controllers")
        with contextlib.suppress(OSError):
            if {"memory", "pids"} <= set(controllers.read_text().split()):
                return "v2", {"": parent}
    if all(name in mounts and name in own for name in ("memory", "pids")):
        return "v1", {name: _directory(mounts[name], own[name]) for name in ("memory", "pids")}
    return None


class CommandGroup:
    """A fresh control group for one command: `join()` in the child before exec, `remove()` after.

    Raises OSError when it cannot be made (no permission, no controller).
    """

    def __init__(self, kind: str, parents: dict[str, Path], memory_mb: int, max_processes: int):
        self.kind = kind
        name = _PREFIX + secrets.token_hex(6)
        self.dirs = [parent / name for parent in parents.values()]
        limit = str(memory_mb * 2**20)
        try:
            for directory in self.dirs:
                directory.mkdir()
            if kind == "v2":
                (directory,) = self.dirs
                _enable_controllers(directory.parent)
                _write(directory / "memory.max", limit)
                _write(directory / "memory.swap.max", "0", optional=True)
                _write(directory / "pids.max", str(max_processes))
            else:
                memory, pids = self.dirs
                _write(memory / "memory.limit_in_bytes", limit)
                _write(memory / "memory.memsw.limit_in_bytes", limit, optional=True)  # with swap: no more
                _write(pids / "pids.max", str(max_processes))
        except OSError:
            self.remove()
            raise
        self._procs = [str(directory / "cgroup.procs") for directory in self.dirs]

    def join(self) -> None:
        """Move the calling process into the group (its children follow). Run in the child, before exec."""
        pid = str(os.getpid())
        for path in self._procs:
            with open(path, "w") as f:
                f.write(pid)

    def out_of_memory(self) -> bool:
        """True if the kernel killed a process of this group for passing the memory ceiling."""
        events = self.dirs[0] / ("memory.events" if self.kind == "v2" else "memory.oom_control")
        with contextlib.suppress(OSError, ValueError):
            for line in events.read_text().splitlines():
                key, value = line.split()
                if key == "oom_kill":
                    return int(value) > 0
        return False

    def remove(self) -> None:
        """Remove the group once its processes are gone (the kernel may take a moment to reap them)."""
        deadline = time.monotonic() + 2.0
        for directory in self.dirs:
            while directory.exists():
                try:
                    directory.rmdir()
                except OSError:
                    if time.monotonic() > deadline:
                        break  # left behind, empty of processes soon; a later probe does not mind
                    time.sleep(0.01)


def _write(path: Path, value: str, optional: bool = False) -> None:
    if optional and not path.exists():
        return
    path.write_text(value)


def _enable_controllers(parent: Path) -> None:
    control = parent / "cgroup.subtree_control"
    if not {"memory", "pids"} <= set(control.read_text().split()):
        control.write_text("+memory +pids")  # fails where this process's own group holds processes


@functools.cache
def available() -> str | None:
    """"v2" or "v1" if each command can get a group of its own here (tried once), else None."""
    found = _parents()
    if found is None:
        return None
    try:
        CommandGroup(*found, memory_mb=64, max_processes=4).remove()
    except OSError:
        return None
    return found[0]


def command_group(memory_mb: int, max_processes: int) -> CommandGroup | None:
    """A fresh group with these ceilings, or None where the machine does not allow one."""
    if available() is None:
        return None
    kind, parents = _parents()
    try:
        return CommandGroup(kind, parents, memory_mb, max_processes)
    except OSError:
        return None
