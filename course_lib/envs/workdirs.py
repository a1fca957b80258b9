"""Episode directories: made (with a disk budget), walked and measured, and removed whatever the agent did.

Standard library only, so that any user can load this file alone (a test removes a locked tree as a
non-root user this way). `course_lib.envs.sandbox` runs the commands inside these directories.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import stat
import subprocess
import tempfile
import weakref
from collections.abc import Iterator
from pathlib import Path

MAX_ENTRIES = 16_384  # files and directories an episode directory may hold (tmpfs nr_inodes)
ENTRY_BYTES = 4096  # what `disk_usage` counts for each entry, besides its blocks (an inode, a name)
UNREADABLE = 2**62  # what `disk_usage` says of a tree it could not read whole: over any budget


def make_workdir(prefix: str = "episode-", disk_mb: int | None = None) -> Path:
    """A fresh, empty, private directory for one episode. The caller removes it (`remove_workdir`).

    With `disk_mb`, the directory is its own tmpfs of that size (at most `MAX_ENTRIES` files) when
    we may mount one (root); otherwise a plain directory, which `run_sandboxed` measures instead.
    """
    path = Path(tempfile.mkdtemp(prefix=prefix))
    if disk_mb is not None and _tmpfs_mounts_allowed():
        _mount_tmpfs(path, disk_mb)
    return path


@functools.cache
def _tmpfs_mounts_allowed() -> bool:
    """True if we may mount a tmpfs here (root with CAP_SYS_ADMIN), tried once."""
    if os.geteuid() != 0 or shutil.which("mount") is None or shutil.which("umount") is None:
        return False
    probe = Path(tempfile.mkdtemp(prefix="tmpfs-probe-"))
    try:
        return _mount_tmpfs(probe, 1) and subprocess.run(["umount", str(probe)],
                                                         capture_output=True).returncode == 0
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


def _mount_tmpfs(path: Path, size_mb: int) -> bool:
    options = f"size={size_mb}m,nr_inodes={MAX_ENTRIES},mode=0700"
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "course-episode", str(path)],
                                 capture_output=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return mounted.returncode == 0


def owned_workdir(owner: object, prefix: str, disk_mb: int | None = None) -> tuple[Path, weakref.finalize]:
    """`make_workdir` for an object (an environment) that removes the directory in its `close()`.

    Returns the directory and its remover: calling the remover removes the directory, once (later
    calls do nothing). If nobody calls it, it runs when `owner` is garbage-collected or the
    interpreter exits, so a dropped environment does not leak its directory. It holds the path, not
    `owner`, so it never keeps `owner` alive.
    """
    path = make_workdir(prefix, disk_mb)
    return path, weakref.finalize(owner, remove_workdir, path)


def remove_workdir(path: str | Path) -> None:
    """`rm -rf path`, also when the agent took away its own permissions. Never follows symlinks.

    Any depth: the agent may nest directories past PATH_MAX or past Python's recursion limit, where
    Python 3.11's `os.walk` and `shutil.rmtree` fail, so coreutils walk the tree (by file descriptor).
    """
    path = Path(path)
    if path.is_symlink():
        path.unlink()
        return
    if not path.exists():
        return
    if os.path.ismount(path):  # its own tmpfs: unmounting frees everything in it
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)  # busy: detach now, free later
        if not os.path.ismount(path):
            path.rmdir()
            return
    # A directory without r/x cannot be emptied: give every directory back to its owner first.
    # `chmod -R` skips the symlinks it meets, so it never reaches a file outside the directory.
    subprocess.run(["chmod", "-R", "u+rwx", "--", str(path)], capture_output=True)
    removal = subprocess.run(["rm", "-rf", "--", str(path)], capture_output=True, text=True)
    if path.exists():  # something we could not remove: say so rather than leak silently
        raise OSError(f"could not remove the episode directory {path}: {removal.stderr.strip()}")


def walk_tree(root: str | Path, skip: tuple[str, ...] = (), max_entries: int = MAX_ENTRIES,
              ) -> Iterator[tuple[str, os.stat_result | None]]:
    """Every entry under `root`, as (relative path, lstat or None), sorted; never follows links.

    Iterative (a stack, no recursion): a tree 100,000 directories deep is walked like a flat one.
    A directory that cannot be listed (no permission, a path past PATH_MAX) comes as (path, None).
    Directories named in `skip` are left out; past `max_entries` entries the walk stops, after one
    last pair ("[more than N entries; ...]", None).
    """
    root = str(root)
    stack = [""]
    seen = 0
    while stack:
        rel_dir = stack.pop()
        try:
            with os.scandir(os.path.join(root, rel_dir) if rel_dir else root) as it:
                entries = sorted((e.name, e.stat(follow_symlinks=False)) for e in it if e.name not in skip)
        except OSError:
            yield rel_dir, None
            continue
        subdirs = []
        for name, st in entries:
            seen += 1
            if seen > max_entries:  # say so: a caller must not mistake a cut walk for the whole tree
                yield f"[more than {max_entries} entries; the walk stopped here]", None
                return
            rel = f"{rel_dir}/{name}" if rel_dir else name
            yield rel, st
            if stat.S_ISDIR(st.st_mode):
                subdirs.append(rel)
        stack.extend(reversed(subdirs))


def disk_usage(root: str | Path, limit: int | None = None) -> int:
    """Bytes held by the files under `root`: allocated blocks, and 4 kB per entry (`ENTRY_BYTES`).

    `find` walks the tree by directory file descriptor, so it sees every entry however deep, past
    PATH_MAX too. A directory it cannot read hides what is inside, so it counts as over any budget:
    the result is then `UNREADABLE` (or `limit + 1`, if that is smaller).
    """
    try:
        found = subprocess.run(["find", str(root), "-printf", "%b\\n"], capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        found = None
    if found is None or found.returncode != 0:
        return UNREADABLE if limit is None else min(UNREADABLE, limit + 1)
    blocks = found.stdout.split()
    return len(blocks) * ENTRY_BYTES + 512 * sum(map(int, blocks))
