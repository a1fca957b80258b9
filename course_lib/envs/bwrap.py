"""Bubblewrap for the sandbox: is it usable here, and the command line that builds the sandbox.

`bwrap_available` starts a real sandbox once per process to find out whether bwrap (and prlimit,
and setpriv when we are root) works on this machine; `seccomp_enabled` adds whether libseccomp is
there; `isolation` says in one line what sandboxed commands get. `bwrap_argv` is the command line
that `course_lib.envs.sandbox.run_sandboxed` puts in front of every command: the namespaces, the
filesystem built from scratch (the episode directory at `WORKSPACE`, the host's system and this
Python read-only, small private /tmp and /dev/shm), the seccomp filter, and, as root, the switch to
a fresh user id (`fresh_uid`, `hand_over`). The design and what each layer keeps out are in the
docstring of `course_lib.envs.sandbox`. This module does not import it: `run_sandboxed` passes the
two limits the command line needs (file size, processes) as numbers.
"""

from __future__ import annotations

import functools
import itertools
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

from course_lib.envs import cgroups
from course_lib.envs.seccomp import seccomp_program
from course_lib.envs.workdirs import make_workdir, remove_workdir

# Where the episode directory appears inside the sandbox (bwrap only).
WORKSPACE = "/workspace"
# The host's system directories, bound read-only (or recreated as the same symlinks).
_SYSTEM_DIRS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Fresh user ids for sandboxed commands when we are root; far above any real account.
_UID_BASE = 1_000_000_000


# ----- is bubblewrap usable here? ----------------------------------------------------------------


@functools.cache
def bwrap_available() -> bool:
    """True if `bwrap` exists and actually starts a sandbox here (cached for the process)."""
    if shutil.which("bwrap") is None or shutil.which("prlimit") is None:
        return False
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        return False
    probe = make_workdir("bwrap-probe-")
    try:
        uid = fresh_uid() if os.geteuid() == 0 else None
        if uid is not None:
            hand_over(probe, uid)
        # The probe runs `true`: the default limits of `Limits` (16 MB files, 16 processes) are ample.
        argv, fds = bwrap_argv(probe, file_size_mb=16, max_processes=16, network=False, uid=uid,
                               memory_counted=False)
        try:
            result = subprocess.run(argv + ["true"], stdin=subprocess.DEVNULL, capture_output=True,
                                    timeout=20, env=default_env(WORKSPACE), pass_fds=fds)
        finally:
            for fd in fds:
                os.close(fd)
        return result.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        remove_workdir(probe)


_warned_limits_only = False


def warn_no_seccomp() -> None:
    global _warned_no_seccomp
    if not _warned_no_seccomp:
        _warned_no_seccomp = True
        warnings.warn("libseccomp (or its `pyseccomp` bindings) is missing, so sandboxed "
                      "commands run without the seccomp filter: they can use the kernel keyring, which is "
                      "shared by every episode. Install libseccomp2 and `pip install pyseccomp`.",
                      RuntimeWarning, stacklevel=3)


_warned_no_seccomp = False


def warn_limits_only() -> None:
    global _warned_limits_only
    if _warned_limits_only:
        return
    _warned_limits_only = True
    message = ("bubblewrap (bwrap) is not available or does not run here, so sandboxed commands run with "
               "resource limits only: they can read and write the files you can, and reach the network. "
               "Install bubblewrap (apt-get install bubblewrap) for full isolation.")
    if os.geteuid() == 0:
        message += " Running as root, the process limit (fork bombs) is enforced only by the wall clock."
    warnings.warn(message, RuntimeWarning, stacklevel=3)


# ----- building the command ----------------------------------------------------------------------


_run_counter = itertools.count()


def fresh_uid() -> int:
    """A user id that no other process uses, so RLIMIT_NPROC counts this run's processes only.

    Unique among concurrent runs: the pid separates processes, the counter the runs of one process
    (up to 64 at once).
    """
    return _UID_BASE + (os.getpid() % 4_194_304) * 64 + next(_run_counter) % 64


def hand_over(workdir: Path, uid: int) -> None:
    """Make the sandbox user the owner of everything in the episode directory (root only).

    `chown -R` walks any depth (see `remove_workdir`); -h -P: change the agent's symlinks themselves,
    never follow them. An entry it cannot change stays with the previous run's user: that costs the
    agent only, so the command runs anyway.
    """
    subprocess.run(["chown", "-R", "-h", "-P", f"{uid}:{uid}", "--", str(workdir)], capture_output=True)


def _python_prefixes() -> list[str]:
    """Host directories that make this Python work inside: the venv and the interpreter it links to."""
    real_prefix = os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))
    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, real_prefix}
    prefixes: list[str] = []
    for path in sorted(os.path.realpath(p) for p in candidates):
        if any(path == d or path.startswith(d + "/") for d in (*_SYSTEM_DIRS, *prefixes)):
            continue  # already visible through a system dir or a shorter prefix
        prefixes.append(path)
    return prefixes


@functools.cache
def _tmpfs_size_supported() -> bool:
    # `--size` appeared in bubblewrap 0.7; older versions still sandbox fine without it.
    try:
        return "--size" in subprocess.run(["bwrap", "--help"], capture_output=True,
                                          text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return False


def seccomp_enabled() -> bool:
    """True if sandboxed commands run under the seccomp filter (bwrap works and libseccomp is here)."""
    return bwrap_available() and seccomp_program() is not None


def isolation() -> str:
    """One line that says which isolation sandboxed commands get on this machine, and what it means."""
    memory = (f"memory counted per command by a cgroup ({cgroups.available()})" if cgroups.available() else
              "memory limited per process (no cgroup here: memfds and xattrs refused)")
    if seccomp_enabled():
        return ("sandbox: bubblewrap + seccomp: each command sees only its episode's folder and a read-only "
                f"system, no network, no kernel keyring, under resource limits; {memory}")
    if bwrap_available():
        return ("sandbox: bubblewrap without seccomp (libseccomp missing): namespaces and resource limits, "
                f"but the kernel keyring is shared by every episode; {memory}")
    return ("sandbox: resource limits only (bubblewrap missing): commands run as you, can "
            f"read your files and reach the network; install bubblewrap for isolation; {memory}")


def _data_fd(name: str, data: bytes) -> int:
    """A file descriptor (memfd) holding `data`, positioned at its start, for bwrap to read."""
    fd = os.memfd_create(name)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def bwrap_argv(workdir: Path, *, file_size_mb: int, max_processes: int, network: bool,
               uid: int | None, memory_counted: bool) -> tuple[list[str], list[int]]:
    """The bwrap command line that runs a command inside the sandbox (append the command to it).

    Also returns the file descriptors bwrap reads from: pass them to the child, then close them.
    """
    argv = ["bwrap", "--die-with-parent", "--new-session",
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not network:
        argv.append("--unshare-net")
    if uid is None:
        # Not root: bwrap needs a user namespace to do anything. As root we skip it on purpose, since
        # there every uid inside maps to root outside, where RLIMIT_NPROC does not apply.
        argv.append("--unshare-user-try")

    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    # /dev is a tmpfs too: read-only, or many files each below the file size limit could fill memory.
    argv += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev"]
    # /dev/shm holds the semaphores of Python's multiprocessing.
    for path in ("/tmp", "/dev/shm"):
        if _tmpfs_size_supported():
            argv += ["--size", str(4 * file_size_mb * 2**20)]  # it lives in memory: bound it
        argv += ["--perms", "1777", "--tmpfs", path]

    made: set[str] = set()
    for prefix in _python_prefixes():
        argv += _parent_dirs(prefix, made) + ["--ro-bind", prefix, prefix]

    argv += ["--bind", str(workdir), WORKSPACE, "--chdir", WORKSPACE]

    fds: list[int] = []
    program = seccomp_program(memory_counted)
    if program is not None:  # applied by bwrap to the command it starts (setpriv, then the command)
        fds.append(_data_fd("seccomp", program))
        argv += ["--seccomp", str(fds[-1])]
    if uid is not None:
        # Name the fresh uid "agent", so `ls -l` and `whoami` read the same in every run and episode.
        for path, entry in (("/etc/passwd", f"agent:x:{uid}:{uid}:agent:{WORKSPACE}:/bin/bash\n"),
                            ("/etc/group", f"agent:x:{uid}:\n")):
            fds.append(_data_fd(os.path.basename(path), Path(path).read_bytes() + entry.encode()))
            argv += ["--perms", "0644", "--ro-bind-data", str(fds[-1]), path]
        # Drop root for good: fresh uid, no groups, no capabilities.
        argv += [shutil.which("setpriv") or "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                 "--inh-caps=-all", "--bounding-set=-all", "--"]
    # Set inside, after the uid switch and namespaces, so it counts this command's processes only.
    argv += [shutil.which("prlimit") or "prlimit", f"--nproc={max_processes}", "--"]
    return argv, fds


def _parent_dirs(path: str, made: set[str]) -> list[str]:
    """`--dir` for each missing parent of `path`, world-readable (bwrap would create them 0700)."""
    argv: list[str] = []
    parent = os.path.dirname(path)
    parents = []
    while parent not in ("/", ""):
        parents.append(parent)
        parent = os.path.dirname(parent)
    for directory in reversed(parents):
        if directory not in made:
            made.add(directory)
            argv += ["--perms", "0755", "--dir", directory]
    return argv


def default_env(home: str) -> dict[str, str]:
    python_bin = os.path.dirname(sys.executable)  # the venv's bin first: `python` is this Python
    return {
        "PATH": f"{python_bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": home,
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "PYTHONUNBUFFERED": "1",  # so a traceback lands in the output where it happened
        "PYTHONDONTWRITEBYTECODE": "1",  # no __pycache__ litter in the episode directory
        # Each BLAS/OpenMP thread reserves address space, which RLIMIT_AS counts.
        "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
    }


