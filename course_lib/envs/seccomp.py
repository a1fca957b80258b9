"""The seccomp filter of the sandbox: the system calls an agent's command never needs, made to fail.

Built with libseccomp (the `pyseccomp` bindings) as a BPF program, which bwrap installs (``--seccomp
FD``) before it starts the command: the kernel runs it on every system call. See
`course_lib.envs.sandbox` for why each group of calls is here.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import tempfile

# Calls an agent's command never needs; the seccomp filter makes them fail with EPERM.
DENIED_SYSCALLS = (
    # The kernel keyring is shared by the whole machine: keys would carry data between runs.
    "add_key", "keyctl", "request_key",
    # New namespaces (a user namespace gives back capabilities inside it), and joining others.
    "unshare", "setns",
    # Mounting and changing the root.
    "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount",
    "fspick", "mount_setattr",
    # Reading or changing other processes.
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    # Large kernel interfaces that have held many exploitable bugs.
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    # Administering the machine: kernel modules, reboot, swap, clocks, logs, quotas, raw I/O ports.
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot", "swapon",
    "swapoff", "syslog", "acct", "quotactl", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    "open_by_handle_at", "name_to_handle_at", "lookup_dcookie", "iopl", "ioperm", "vhangup",
)
# Denied as well where no control group counts a command's memory (`cgroups.available()`): memory that
# RLIMIT_AS does not see, in memfds never mapped and in extended attributes of files on a tmpfs.
UNCOUNTED_MEMORY_SYSCALLS = ("memfd_create", "memfd_secret", "setxattr", "lsetxattr", "fsetxattr")
# clone() flags that create a namespace: clone with any of them fails with EPERM.
_CLONE_NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)


@functools.cache
def seccomp_program(memory_counted: bool = True) -> bytes | None:
    """The seccomp filter as a BPF program (libseccomp builds it), or None if libseccomp is missing.

    Default: allow. Each call of `DENIED_SYSCALLS` (and of `UNCOUNTED_MEMORY_SYSCALLS` unless a control
    group counts the command's memory) and `clone` with a namespace flag fail with EPERM;
    `clone3` fails with ENOSYS, so the C library retries with `clone`, whose flags the filter can see.
    A call this libseccomp does not know is skipped. Other architectures' calls (32-bit) kill the process.
    """
    try:
        import pyseccomp
    except (ImportError, RuntimeError, OSError):  # RuntimeError: libseccomp.so.2 is not installed
        return None
    deny = pyseccomp.ERRNO(errno.EPERM)
    program = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    for name in DENIED_SYSCALLS + (() if memory_counted else UNCOUNTED_MEMORY_SYSCALLS):
        with contextlib.suppress(ValueError, OSError):
            program.add_rule(deny, name)
    for flag in _CLONE_NAMESPACE_FLAGS:
        program.add_rule(deny, "clone", pyseccomp.Arg(0, pyseccomp.MASKED_EQ, flag, flag))
    program.add_rule(pyseccomp.ERRNO(errno.ENOSYS), "clone3")
    with tempfile.TemporaryFile() as f:
        program.export_bpf(f)
        f.seek(0)
        return f.read()
