"""Run an untrusted command in a throwaway directory, with limits.

Every command a model writes runs through :func:`run_sandboxed`. Four layers keep it from doing harm:

1. **Resource limits, always.** CPU seconds, address space, file size and core dumps are set with
   ``setrlimit`` in the child before it starts; the number of processes is capped with
   ``RLIMIT_NPROC``; a wall clock stops the command; output is read in chunks and cut at
   ``output_bytes``. The command runs in its own session, and when it ends (or is stopped) every
   process it started is killed: nothing is left running in the background.
2. **Namespaces, where bubblewrap (``bwrap``) works** (`course_lib.envs.bwrap`). The command gets its
   own mount, PID, IPC, UTS and network namespaces. Inside, the filesystem is built from scratch::

       /workspace            the episode directory, read-write; the working directory and $HOME
       /usr /etc /bin /lib*  the host's system, read-only
       <python prefixes>     the running interpreter and its virtual environment, read-only, at
                             their host paths, so `sys.executable` (and pandas) work inside
       /tmp /dev/shm         small private tmpfs, each capped at 4 x the file size limit (bwrap >= 0.7)
       /proc /dev            the sandbox's own; /dev read-only

   Nothing else of the host exists in there: not /root, /home or /work, nor the directory of any
   other episode. The episode directory always appears at the same path, /workspace, so the same
   state gives the same observation in every episode (GiGPO's anchor states recur).

3. **A seccomp filter, with bwrap.** Built with libseccomp (the `pyseccomp` bindings) and handed to
   bwrap (``--seccomp FD``), it makes the calls an agent never needs fail with EPERM (see
   `course_lib.envs.seccomp`). First the kernel keyring (``add_key``, ``keyctl``, ``request_key``): it is not
   namespaced, so a key written in one command could be read in any other, across episodes, users
   and the two grading runs of code_fix. Then new namespaces (``unshare``, ``setns``, ``clone`` with a
   namespace flag; ``clone3``, whose flags a filter cannot read, says "not implemented" so that the C
   library falls back to ``clone``), mounts, tracing, BPF, io_uring and the calls that administer
   the machine.
4. **A disk budget per episode** (``Limits.disk_mb``). An episode directory made with
   ``make_workdir(disk_mb=...)`` is, when we are root and may mount, its own size-limited tmpfs: the
   kernel refuses to write past the budget (ENOSPC) or past ``MAX_ENTRIES`` files. Otherwise the
   directory is measured every half second while a command runs, and the command is stopped once
   the files pass the budget (it may overshoot by what it writes in half a second).

Memory. Where this process may make control groups (`course_lib.envs.cgroups`), each command runs in
a fresh one whose memory ceiling is ``Limits.memory_mb`` (512 MB) for everything it holds: all its
processes, and what the kernel keeps for them (its /tmp and /dev/shm, memfds, socket and pipe
buffers, extended attributes); past it the kernel kills one of its processes (`SandboxResult.
out_of_memory`). Elsewhere ``RLIMIT_AS`` limits each process and ``RLIMIT_NPROC`` their number, so
one command holds at most max_processes x memory_mb plus its in-memory /tmp and /dev/shm
(``Limits.memory_budget_mb``); the seccomp filter then also refuses memfds and extended attributes,
which no rlimit counts. ``RLIMIT_NOFILE`` is 256 either way, which bounds socket and pipe buffers.

What every sandbox still shares with every other: the kernel's page cache (which pages of a system
file are in memory), file locks and inotify on the read-only system files. One command can signal
another through them, so no verifier may put a secret where the agent's code runs: code_fix's hidden
expected values stay on the host, and terminal's check runs after the agent's last command, with no
code of the agent in it.

Who runs the command. ``RLIMIT_NPROC`` counts processes per user and does not apply to root, so a
fork bomb run by root is only stopped by the clock. When we are root we therefore let bwrap set up
the sandbox as root and then switch to a fresh user id, unused by anything else, with no
capabilities (``setpriv``); inside it is named ``agent``. The episode directory is handed to that
user before each command, so the agent owns its files and may chmod, rename or replace any of them:
what the verifier must trust stays out of the episode directory (the terminal check is never written
there). When we are not root, bwrap runs unprivileged in its own user namespace. In
both cases the process limit is set inside the sandbox (``prlimit``), so it counts the processes of
this one command only, not those of other episodes running at the same time.

Where bwrap is missing or does not run, commands run with the limits only (a warning says so once):
they can then read and write whatever the calling user can, reach the network, and signal the
caller's processes.

Not contained: CPU time summed over several processes (each one is limited; the wall clock bounds
the sum).
"""

from __future__ import annotations

import contextlib
import os
import resource
import secrets
import selectors
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from course_lib.envs import cgroups
from course_lib.envs.bwrap import (
    WORKSPACE,
    bwrap_argv,
    bwrap_available,
    default_env,
    fresh_uid,
    hand_over,
    warn_limits_only,
    warn_no_seccomp,
)
from course_lib.envs.seccomp import DENIED_SYSCALLS, seccomp_program  # noqa: F401 (re-exported)
from course_lib.envs.workdirs import (  # noqa: F401 (re-exported: the sandbox's public interface)
    MAX_ENTRIES,
    disk_usage,
    make_workdir,
    owned_workdir,
    remove_workdir,
    walk_tree,
)

_MARKER = "COURSE_SANDBOX_RUN"  # env var that tags every process of one run (limits-only mode)
OPEN_FILES = 256  # file descriptors per process (RLIMIT_NOFILE): each socket or pipe holds buffers
_BWRAP_PROCESSES = 2  # bwrap outside the sandbox, and its init inside: counted by the command's pids.max
_DISK_POLL_SECONDS = 0.5  # how often a directory without a tmpfs of its own is measured


@dataclass
class Limits:
    """Resource limits of one sandboxed command."""

    cpu_seconds: int = 5  # CPU time per process (RLIMIT_CPU)
    memory_mb: int = 512  # all memory of the command (its cgroup), and address space per process (RLIMIT_AS)
    max_processes: int = 16  # processes and threads at once (RLIMIT_NPROC, and pids.max of its cgroup)
    file_size_mb: int = 16  # largest file a process may write (RLIMIT_FSIZE)
    wall_seconds: float = 10.0  # wall-clock time of the whole command
    output_bytes: int = 16_000  # stdout+stderr kept; the command is stopped past this
    disk_mb: int = 64  # all files of the episode directory together (see the module docstring)

    @property
    def memory_budget_mb(self) -> int:
        """The most memory one command can hold: `memory_mb` where a control group counts all of it;
        otherwise max_processes x memory_mb (RLIMIT_NPROC x RLIMIT_AS) plus its /tmp and /dev/shm."""
        if cgroups.available():
            return self.memory_mb
        return self.max_processes * self.memory_mb + 2 * 4 * self.file_size_mb


@dataclass
class SandboxResult:
    """What a sandboxed command did."""

    output: str  # stdout+stderr interleaved, decoded UTF-8 with errors="replace", capped at output_bytes
    returncode: int  # as a shell reports it: 128+N for a process killed by signal N
    timed_out: bool  # stopped at the wall-clock limit
    truncated: bool  # output went past output_bytes; the rest was dropped and the command stopped
    limits: Limits = field(default_factory=Limits, repr=False)  # the limits it ran under (for the notes)
    disk_full: bool = False  # stopped because the episode directory passed limits.disk_mb (no tmpfs)
    out_of_memory: bool = False  # the kernel killed one of its processes at the memory ceiling (cgroup)

    def text(self) -> str:
        """The observation a model sees: the output, then one short note on how the command ended."""
        limits = self.limits
        if self.truncated:
            note = f"[output cut at {limits.output_bytes} bytes; the command was stopped]"
        elif self.disk_full:
            note = f"[stopped: the directory's files passed the disk limit of {limits.disk_mb} MB]"
        elif self.timed_out:
            note = f"[stopped: wall-clock limit of {limits.wall_seconds:g} s]"
        else:
            note = f"[exit code {self.returncode}]"
            reason = {
                128 + signal.SIGXCPU: f"CPU time limit of {limits.cpu_seconds} s",
                128 + signal.SIGXFSZ: f"file size limit of {limits.file_size_mb} MB",
                128 + signal.SIGKILL: "killed",
            }.get(self.returncode)
            if self.out_of_memory:
                reason = f"memory limit of {limits.memory_mb} MB, a process was killed"
            if reason:
                note = f"[exit code {self.returncode}: {reason}]"
        if not self.output:
            return note
        return self.output + ("" if self.output.endswith("\n") else "\n") + note


# ----- limits, run and read -----------------------------------------------------------------------


def _set_limits(limits: Limits, max_processes: int | None,
                group: cgroups.CommandGroup | None) -> Callable[[], None]:
    """The function the child runs before `exec`: join the command's control group, set
    the resource limits."""
    mb = 2**20

    def apply() -> None:
        if group is not None:
            group.join()
        # The soft CPU limit sends SIGXCPU (a clear reason); the hard one, a second later, SIGKILL.
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 1))
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_mb * mb, limits.memory_mb * mb))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_size_mb * mb, limits.file_size_mb * mb))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))
        if max_processes is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (max_processes, max_processes))

    return apply


def _processes_of_this_user() -> int:
    uid = os.getuid()
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                count += os.stat(f"/proc/{name}").st_uid == uid
    return count


def _stop(proc: subprocess.Popen, sandboxed: bool, token: str) -> None:
    """Kill everything the command started (it may have finished already)."""
    if sandboxed:
        # bwrap's child is the init of the sandbox's PID namespace. When it dies the kernel kills
        # every process in the namespace, and bwrap exits only after that: once bwrap is gone,
        # nothing of the command is left.
        with contextlib.suppress(OSError):
            for pid in open(f"/proc/{proc.pid}/task/{proc.pid}/children").read().split():
                with contextlib.suppress(OSError):
                    os.kill(int(pid), signal.SIGKILL)
        deadline = time.monotonic() + 2.0
        while not _has_exited(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.005)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # the command's process group (Popen made it a session)
    if not sandboxed:
        _kill_marked(token)


def _kill_marked(token: str) -> None:
    """Kill every process whose environment carries this run's marker (limits-only mode).

    Catches what escaped the process group with `setsid` or `nohup` but kept its environment.
    """
    needle = f"{_MARKER}={token}".encode()
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if needle in f.read():
                        os.kill(int(name), signal.SIGKILL)
            except OSError:
                continue


def _has_exited(pid: int) -> bool:
    # WNOWAIT: look without reaping, so the pid (= the process group id) cannot be reused before
    # we kill the group.
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _read_bounded(proc: subprocess.Popen, limits: Limits, cleanup: Callable[[], None],
                  over_disk: Callable[[], bool] | None = None) -> tuple[bytes, bool, bool, bool]:
    """Read the command's output until it ends, up to `output_bytes` and `wall_seconds`.

    Returns (output, timed_out, truncated, disk_full). Never holds more than `output_bytes` (+ one
    chunk). `over_disk`, if given, is asked every half second; True stops the command.
    """
    deadline = time.monotonic() + limits.wall_seconds
    output = bytearray()
    timed_out = truncated = disk_full = False
    finished_at: float | None = None
    next_disk_check = time.monotonic()
    fd = proc.stdout.fileno()
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if now >= deadline:
                timed_out = finished_at is None
                break
            if finished_at is None and _has_exited(proc.pid):
                finished_at = now
                cleanup()  # background processes of a finished command must not outlive it
            if finished_at is not None and now - finished_at > 1.0:
                break  # the command is over; something we could not kill still holds the pipe
            if over_disk is not None and finished_at is None and now >= next_disk_check:
                next_disk_check = now + _DISK_POLL_SECONDS
                if over_disk():
                    disk_full = True
                    break
            if not selector.select(timeout=min(0.05, deadline - now)):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            output += chunk
            if len(output) > limits.output_bytes:
                del output[limits.output_bytes:]
                truncated = True
                break
    return bytes(output), timed_out, truncated, disk_full


def run_sandboxed(argv: list[str], workdir: str | Path, *,
                  limits: Limits = Limits(),  # noqa: B008 (read, never mutated)
                  stdin: str | None = None, env: dict[str, str] | None = None,
                  network: bool = False) -> SandboxResult:
    """Run `argv` in `workdir` under `limits`; see the module docstring for the sandbox.

    With bwrap the command sees `workdir` as /workspace (its working directory); without, it runs
    in `workdir` itself. `env` is added to a small default environment (PATH, HOME, LANG).
    Never raises because of what the command does: every failure comes back in the result.
    """
    if not argv:
        raise ValueError("argv is empty; pass the command as a list, e.g. ['bash', '-c', 'ls']")
    workdir = Path(workdir).resolve()
    if not workdir.is_dir():
        raise FileNotFoundError(f"workdir {workdir} does not exist; create it with make_workdir()")

    sandboxed = bwrap_available()
    token = secrets.token_hex(8)
    # Its own control group where the machine allows one: a memory ceiling over everything the command
    # holds, and a process ceiling (bwrap's own two processes are in it too).
    group = cgroups.command_group(limits.memory_mb,
                                  limits.max_processes + (_BWRAP_PROCESSES if sandboxed else 0))
    if sandboxed:
        uid = fresh_uid() if os.geteuid() == 0 else None
        if uid is not None:
            hand_over(workdir, uid)
        if seccomp_program() is None:
            warn_no_seccomp()
        prefix, fds = bwrap_argv(workdir, file_size_mb=limits.file_size_mb,
                                 max_processes=limits.max_processes, network=network, uid=uid,
                                 memory_counted=group is not None)
        command = prefix + list(argv)
        full_env = default_env(WORKSPACE) | (env or {})
        # The process limit is set inside the sandbox (prlimit), see bwrap_argv.
        preexec = _set_limits(limits, max_processes=None, group=group)
    else:
        warn_limits_only()
        command, fds = list(argv), []
        full_env = default_env(str(workdir)) | (env or {}) | {_MARKER: token}
        # RLIMIT_NPROC counts all processes of the user, so allow the ones already running.
        preexec = _set_limits(limits,
                              max_processes=limits.max_processes + _processes_of_this_user(), group=group)

    try:
        result = _run(command, workdir, limits, full_env, stdin, fds, preexec, sandboxed, token)
    finally:
        if group is not None:
            result.out_of_memory = group.out_of_memory()
            group.remove()
    return result


def _run(command: list[str], workdir: Path, limits: Limits, full_env: dict[str, str], stdin: str | None,
         fds: list[int], preexec: Callable[[], None], sandboxed: bool, token: str) -> SandboxResult:
    """Start the command, read its output within the limits, stop everything it started."""
    with tempfile.TemporaryFile() as stdin_file:
        # From a file, not a pipe: a command that never reads its input cannot block us.
        stdin_file.write((stdin or "").encode())
        stdin_file.seek(0)
        try:
            proc = subprocess.Popen(command, cwd=workdir, env=full_env,
                                    stdin=stdin_file, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=preexec,
                                    pass_fds=fds)
        except OSError as exc:  # e.g. the program does not exist (limits-only mode)
            return SandboxResult(f"{command[0]}: {exc.strerror}\n", 127, False, False, limits)
        finally:
            for fd in fds:
                os.close(fd)

        # A directory that is not its own size-limited tmpfs is measured while the command runs.
        budget = limits.disk_mb * 2**20
        over_disk = None if os.path.ismount(workdir) else (lambda: disk_usage(workdir, budget) > budget)
        try:
            raw, timed_out, truncated, disk_full = _read_bounded(proc, limits,
                                                                 lambda: _stop(proc, sandboxed, token),
                                                                 over_disk)
        finally:
            _stop(proc, sandboxed, token)
            proc.stdout.close()
            returncode = proc.wait()
    if returncode < 0:  # killed by a signal: report it the way a shell would
        returncode = 128 - returncode
    return SandboxResult(raw.decode("utf-8", errors="replace"), returncode, timed_out, truncated, limits,
                         disk_full)
