"""Hostile commands against the sandbox: each is contained and comes back as a normal result.

Every test runs an attack through `run_sandboxed` and checks three things: the call returns a
`SandboxResult` (it never raises), the attack failed or was stopped, and the host (this process,
its files, other episodes) is untouched. Limits are small so the whole file runs in seconds.
"""

from __future__ import annotations

import inspect
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import replace
from pathlib import Path

import pytest

from course_lib.envs import bwrap, sandbox, workdirs
from course_lib.envs.bwrap import WORKSPACE, bwrap_available
from course_lib.envs.sandbox import (
    Limits,
    SandboxResult,
    make_workdir,
    remove_workdir,
    run_sandboxed,
)

SMALL = Limits(cpu_seconds=1, memory_mb=256, max_processes=32, file_size_mb=1,
               wall_seconds=3.0, output_bytes=4000)
# CPU limits are measured in CPU time; a loaded machine needs a longer wall clock to reach them.
CPU_BOUND = replace(SMALL, wall_seconds=20.0)
needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap (bwrap) is not available here")
# Root without bwrap cannot enforce RLIMIT_NPROC; everywhere else the process cap holds.
process_cap_enforced = pytest.mark.skipif(not bwrap_available() and os.geteuid() == 0,
                                          reason="RLIMIT_NPROC does not apply to root without bwrap")


@pytest.fixture
def workdir():
    path = make_workdir("test-episode-")
    yield path
    remove_workdir(path)


def sh(command: str, workdir: Path, limits: Limits = SMALL, **kwargs) -> SandboxResult:
    result = run_sandboxed(["bash", "-c", command], workdir, limits=limits, **kwargs)
    assert isinstance(result, SandboxResult)
    return result


def processes_with(marker: str, grace: float = 2.0) -> list[str]:
    """Host processes whose command line contains `marker` (zombies have none and do not count), each
    as "pid: its /proc status lines"; polled for `grace` seconds, since a killed process takes a moment
    to exit on a loaded machine (one CI run saw such a process once, right after the sandbox returned)."""
    deadline = time.monotonic() + grace
    while True:
        found = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    if marker.encode() in Path(f"/proc/{name}/cmdline").read_bytes():
                        status = Path(f"/proc/{name}/status").read_text().splitlines()
                        keep = [line for line in status
                                if line.startswith(("Name", "State", "PPid", "NSpid", "Uid"))]
                        found.append(f"{name}: {'; '.join(keep)}")
                except OSError:
                    continue
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def unique_sleep() -> str:
    """A `sleep` duration that doubles as a marker: no other process has it on its command line."""
    return f"1000.{secrets.randbelow(10**9):09d}"


# ----- CPU, wall clock, processes, memory, files, output ---------------------------------------


def test_infinite_loop_is_stopped_by_cpu_limit(workdir):
    result = sh("while :; do :; done", workdir, limits=CPU_BOUND)
    assert not result.timed_out and result.returncode == 152  # 128 + SIGXCPU
    assert "CPU time limit" in result.text()


def test_sleeping_forever_is_stopped_by_wall_clock(workdir):
    start = time.monotonic()
    result = sh("sleep 100", workdir, limits=Limits(wall_seconds=1.0))
    assert time.monotonic() - start < 5
    assert result.timed_out
    assert result.text().endswith("[stopped: wall-clock limit of 1 s]")


def test_fork_bomb_is_contained_and_leaves_nothing(workdir):
    marker = secrets.token_hex(8)
    start = time.monotonic()
    # The classic bomb, with the first shell kept alive so the bomb runs until the wall clock.
    result = sh(f": {marker}; bomb() {{ bomb | bomb & }}; bomb; sleep 10", workdir,
                limits=Limits(max_processes=32, wall_seconds=2.0))
    assert time.monotonic() - start < 10
    assert result.timed_out or result.truncated  # stopped by us, not finished on its own
    assert processes_with(marker) == []
    assert subprocess.run(["true"]).returncode == 0  # the host can still start processes


@process_cap_enforced
def test_fork_bomb_cannot_exceed_process_limit(workdir):
    marker = secrets.token_hex(8)
    script = f"""# {marker}
import os, time
n = 0
try:
    while n < 500:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        n += 1
except OSError:
    pass
print("forked", n)
"""
    result = run_sandboxed([sys.executable, "-c", script], workdir,
                           limits=Limits(max_processes=16, wall_seconds=15))
    forked = int(result.output.split("forked")[1].split()[0])
    assert forked < 16
    assert processes_with(marker) == []  # the sleeping children died with the command


def test_memory_bomb_fails_inside(workdir):
    script = "blocks = []\nwhile True:\n    blocks.append(bytearray(50 * 2**20))"
    result = run_sandboxed([sys.executable, "-c", script], workdir, limits=Limits(memory_mb=256))
    assert result.returncode != 0 and not result.timed_out
    assert "MemoryError" in result.output


def test_huge_file_is_cut_at_file_size_limit(workdir):
    result = sh("head -c 50M /dev/zero > big.bin", workdir)
    assert (workdir / "big.bin").stat().st_size <= SMALL.file_size_mb * 2**20
    assert result.returncode == 153  # 128 + SIGXFSZ
    assert "file size limit" in result.text()


def test_ten_megabytes_of_output_are_capped(workdir):
    start = time.monotonic()
    result = sh("head -c 10000000 /dev/zero | tr '\\0' x", workdir)
    assert time.monotonic() - start < 5
    assert result.truncated and len(result.output) == SMALL.output_bytes
    assert "output cut at 4000 bytes" in result.text()


def test_endless_output_is_stopped_at_the_cap(workdir):
    start = time.monotonic()
    result = sh("yes hostile", workdir)
    assert time.monotonic() - start < 5
    assert result.truncated and len(result.output.encode()) <= SMALL.output_bytes


def test_non_utf8_output_is_decoded_with_replacement(workdir):
    result = sh(r"printf 'ok \xff\xfe\xc3 end'", workdir)
    assert result.output == "ok \ufffd\ufffd\ufffd end"
    assert result.returncode == 0 and result.text().endswith("[exit code 0]")


# ----- filesystem ---------------------------------------------------------------------------------


@needs_bwrap
def test_writing_system_files_fails(workdir):
    passwd = Path("/etc/passwd").read_bytes()
    result = sh("echo 'evil:x:0:0::/:/bin/sh' >> /etc/passwd; touch /usr/bin/evil /evil; echo done", workdir)
    assert "done" in result.output and ("Read-only" in result.output or "Permission denied" in result.output)
    assert Path("/etc/passwd").read_bytes() == passwd
    assert not Path("/usr/bin/evil").exists() and not Path("/evil").exists()


@needs_bwrap
def test_dev_cannot_fill_memory(workdir):
    # /dev and /dev/shm are tmpfs, in memory: many files, each below the file size limit, must not
    # fill it. /dev is read-only; /dev/shm stays writable (multiprocessing's locks live there), capped.
    result = sh("touch /dev/evil || echo dev-read-only; echo x > /dev/null && head -c 8 "
                "/dev/urandom | wc -c; python -c 'import multiprocessing; multiprocessing.Lock(); "
                "print(\"lock-ok\")'; for i in $(seq 8); do head -c 900000 /dev/zero > /dev/shm/f$i || { "
                "echo shm-full-at-$i; break; }; done",
                workdir)
    lines = result.output.splitlines()
    assert {"dev-read-only", "8", "lock-ok"} <= set(lines), result.output
    if bwrap._tmpfs_size_supported():  # the cap, 4 x file_size_mb = 4 MB, fits four files of 0.9 MB
        assert "shm-full-at-5" in lines, result.output


@needs_bwrap
def test_reading_host_secrets_fails(workdir):
    host_file = Path(tempfile.gettempdir()) / f"host-secret-{secrets.token_hex(6)}"
    host_file.write_text("host secret")
    try:
        result = sh(f"cat /etc/shadow; cat {host_file}; cat {Path(__file__).resolve()}", workdir)
    finally:
        host_file.unlink()
    assert "/etc/shadow: Permission denied" in result.output
    shadow = Path("/etc/shadow").read_text().splitlines() if os.access("/etc/shadow", os.R_OK) else []
    assert not any(line in result.output for line in shadow if line.strip())
    assert "host secret" not in result.output and "No such file" in result.output
    assert "def test_reading_host_secrets_fails" not in result.output  # this repository is not visible


@needs_bwrap
def test_home_and_dotdot_tricks_stay_in_the_episode(workdir):
    name = f"escape-{secrets.token_hex(6)}"
    result = sh(f"echo x > ~/{name}; echo x > ../{name}; echo x > {WORKSPACE}/../{name}; "
                f"cd .. && echo x > {name}; echo x > /tmp/{name}; echo x > {workdir}/{name}; pwd", workdir)
    assert isinstance(result.text(), str)
    assert (workdir / name).exists()  # ~ is the episode directory (HOME=/workspace)
    for outside in (Path.home(), workdir.parent, Path("/"), Path(tempfile.gettempdir())):
        assert not (outside / name).exists()


@needs_bwrap
def test_sibling_episode_is_invisible_and_unwritable(workdir):
    sibling = make_workdir("test-sibling-")
    try:
        secret = secrets.token_hex(16)
        (sibling / "secret.txt").write_text(secret)
        # The grep pattern is assembled at run time, so a copy of this command line (a script file,
        # /proc) can never match it: only the sibling's file could.
        half = len(secret) // 2
        result = sh(f"cat {sibling}/secret.txt; ls {sibling.parent}; "
                    f"grep -r \"$(printf %s {secret[:half]})$(printf %s {secret[half:]})\" /tmp /workspace; "
                    f"echo pwned > {sibling}/secret.txt; rm -rf {sibling}", workdir)
        assert secret not in result.output
        assert (sibling / "secret.txt").read_text() == secret
    finally:
        remove_workdir(sibling)


def test_there_is_no_read_only_bind_option():
    # `ro_binds` protected neither the path (the agent renamed the parent directory and made its own
    # file there) nor the host (a path the agent turned into a symlink was resolved on the host and
    # its target bound in). What the verifier trusts stays out of the episode directory instead.
    assert "ro_binds" not in inspect.signature(run_sandboxed).parameters


def deep_tree(action: str) -> str:
    """A Python command that walks two chains of directories, one deeper than PATH_MAX (25 names of
    200 characters), one deeper than Python's recursion limit (1500 levels), and at the bottom of
    each `make`s them or `write`s to the file `f` there."""
    return ("python3 -c \"import os\ntop = os.getcwd()\nfor depth, name in ((25, 'e' * 200), (1500, 'd')):\n"
            "    for _ in range(depth):\n"
            f"        {'os.mkdir(name); ' if action == 'make' else ''}os.chdir(name)\n"
            "    open('f', 'a').write('x')\n    os.chdir(top)\nprint('reached the bottom')\"")


@needs_bwrap
def test_a_tree_too_deep_for_path_names_and_recursion_is_handed_over_and_removed(workdir):
    # Walked by host path and recursion (os.walk, shutil.rmtree), such a tree broke every later command.
    assert "reached the bottom" in sh(deep_tree("make"), workdir, limits=CPU_BOUND).output
    result = sh(deep_tree("write"), workdir, limits=CPU_BOUND)  # as root: another uid, handed everything
    assert result.returncode == 0 and "reached the bottom" in result.output
    remove_workdir(workdir)
    assert not workdir.exists()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root to become another user")
def test_a_deep_tree_the_agent_locked_is_removed_by_a_non_root_caller():
    # Not root, permissions hold: directories locked (chmod 000) at the top and below PATH_MAX.
    uid = 1_000_000_000 - 7  # below the sandbox's uids, unused
    path = make_workdir("test-locked-")
    os.chown(path, uid, uid)
    # The other user may not be able to read this checkout or its venv (a clone in a 0700 directory):
    # it gets a copy of workdirs.py (standard library only) and the base interpreter.
    module_dir = Path(tempfile.mkdtemp(prefix="test-sandbox-module-"))
    module_dir.chmod(0o755)
    shutil.copy(workdirs.__file__, module_dir / "workdirs.py")
    (module_dir / "workdirs.py").chmod(0o644)
    script = ("import importlib.util, os, sys\n"
              "spec = importlib.util.spec_from_file_location('workdirs', sys.argv[2])\n"
              "workdirs = sys.modules['workdirs'] = importlib.util.module_from_spec(spec)\n"
              "spec.loader.exec_module(workdirs)\npath = sys.argv[1]\n"
              "os.chdir(path)\nfor _ in range(25):\n    os.mkdir('e' * 200); os.chdir('e' * 200)\n"
              "os.mkdir('locked'); open('locked/f', 'w').close(); os.chmod('locked', 0)\n"
              "os.chdir(path); os.makedirs('top/in'); os.chmod('top/in', 0); os.chmod('top', 0)\n"
              "workdirs.remove_workdir(path)\n")
    try:
        result = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                                 getattr(sys, "_base_executable", sys.executable), "-c", script, str(path),
                                 str(module_dir / "workdirs.py")],
                                capture_output=True, text=True, timeout=60, cwd=module_dir)
        assert result.returncode == 0, result.stderr
        assert not path.exists()
    finally:
        subprocess.run(["rm", "-rf", str(path), str(module_dir)])


def test_cleanup_does_not_follow_symlinks_out_of_the_episode(workdir):
    victim = Path(make_workdir("test-victim-"))
    try:
        (victim / "keep.txt").write_text("keep")
        # Links to a host directory (which the agent may not even see), and a directory it locked.
        sh(f"ln -s {victim} link; ln -s {victim}/keep.txt filelink; mkdir -p locked/deep && "
           "touch locked/deep/f && chmod 000 locked/deep locked", workdir)
        remove_workdir(workdir)
        assert not workdir.exists()
        assert (victim / "keep.txt").read_text() == "keep"
    finally:
        remove_workdir(victim)


# ----- network --------------------------------------------------------------------------------------


@needs_bwrap
def test_network_connection_to_local_server_fails(workdir):
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(3)
    port = server.getsockname()[1]
    accepted = []

    def serve() -> None:
        try:
            conn, _ = server.accept()
            accepted.append(conn)
        except OSError:
            pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    connect = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=1); print('CONNECTED')"
    try:
        result = run_sandboxed([sys.executable, "-c", connect], workdir, limits=SMALL)
        assert "CONNECTED" not in result.output and result.returncode != 0
        assert not accepted
        # Control: with network=True the same command reaches the server, so the test can fail.
        allowed = run_sandboxed([sys.executable, "-c", connect], workdir, limits=SMALL, network=True)
        assert "CONNECTED" in allowed.output
    finally:
        server.close()
        thread.join(timeout=5)
        for conn in accepted:
            conn.close()


# ----- processes ----------------------------------------------------------------------------------


@needs_bwrap
def test_killing_the_parent_process_is_harmless(workdir):
    neighbour = subprocess.Popen(["sleep", "30"])  # a host process the attack must not reach
    try:
        result = sh("kill -9 $PPID; python -c 'import os; os.kill(os.getppid(), 9)'; kill -9 -1; echo still",
                    workdir)
        assert isinstance(result.text(), str)
        assert neighbour.poll() is None  # still running, and so is this test
    finally:
        neighbour.kill()
        neighbour.wait()


def test_background_processes_do_not_survive(workdir):
    duration = unique_sleep()
    daemon = (f"import os, time\nif os.fork() == 0:\n    os.setsid()\n"
              f"    if os.fork() == 0:\n        time.sleep({duration})\n")
    start = time.monotonic()
    result = sh(f"sleep {duration} & nohup sleep {duration} >/dev/null 2>&1 & setsid sleep {duration} & "
                f"setsid -f sleep {duration}; (trap '' HUP TERM; sleep {duration}) & "
                f"python -c '{daemon}'; echo started", workdir, limits=replace(SMALL, wall_seconds=20.0))
    assert time.monotonic() - start < 10  # returned when the command ended, not at the wall clock
    assert "started" in result.output and not result.timed_out
    assert processes_with(duration) == []


# ----- Python inside, and the limits-only fallback ------------------------------------------------


def test_python_and_pandas_work_inside(workdir):
    script = "import os, sys, pandas; print(os.getcwd()); print(pandas.DataFrame({'a': [1, 2]}).a.sum())"
    result = run_sandboxed([sys.executable, "-c", script], workdir)
    assert result.returncode == 0, result.output
    assert result.output.split() == [WORKSPACE if bwrap_available() else str(workdir), "3"]


def test_limits_still_apply_without_bwrap_and_warn_once(workdir, monkeypatch):
    monkeypatch.setattr(sandbox, "bwrap_available", lambda: False)  # the name run_sandboxed calls
    monkeypatch.setattr(bwrap, "_warned_limits_only", False)
    duration = unique_sleep()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cpu = sh("while :; do :; done", workdir, limits=CPU_BOUND)
        big = sh("head -c 50M /dev/zero > big.bin", workdir)
        loud = sh("yes", workdir)
        wall = sh("sleep 100", workdir, limits=Limits(wall_seconds=1.0))
        background = sh(f"sleep {duration} & setsid sleep {duration} & echo started", workdir)
    assert cpu.returncode == 152
    assert big.returncode == 153 and (workdir / "big.bin").stat().st_size <= 2**20
    assert loud.truncated and len(loud.output) == SMALL.output_bytes
    assert wall.timed_out
    assert "started" in background.output and processes_with(duration) == []
    assert cpu.output == ""  # limits-only mode runs in the directory itself, no sandbox paths
    limit_warnings = [w for w in caught if "limits only" in str(w.message)]
    assert len(limit_warnings) == 1


def test_result_text_notes():
    limits = Limits(wall_seconds=10, output_bytes=100)
    assert SandboxResult("hi\n", 0, False, False, limits).text() == "hi\n[exit code 0]"
    assert SandboxResult("", 1, False, False, limits).text() == "[exit code 1]"
    assert SandboxResult("x", 137, True, False, limits).text() == "x\n[stopped: wall-clock limit of 10 s]"
    assert SandboxResult("x" * 100, 137, False, True, limits).text().endswith(
        "[output cut at 100 bytes; the command was stopped]")


def test_isolation_line_says_what_this_machine_gives():
    from course_lib.envs.bwrap import bwrap_available, isolation, seccomp_enabled

    line = isolation()
    assert line.startswith("sandbox: ")
    if seccomp_enabled():
        assert "bubblewrap + seccomp" in line and "keyring" in line
    elif bwrap_available():
        assert "without seccomp" in line
    else:
        assert "resource limits only" in line
