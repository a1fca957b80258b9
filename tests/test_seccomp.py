"""`course_lib.envs.seccomp`: the BPF program the sandbox installs. What it denies inside a command (keyring,
namespaces, mounts) is tested in test_attacks.py."""

from __future__ import annotations

import pytest

from course_lib.envs.seccomp import DENIED_SYSCALLS, UNCOUNTED_MEMORY_SYSCALLS, seccomp_program

needs_libseccomp = pytest.mark.skipif(seccomp_program() is None, reason="libseccomp is not installed")


def test_the_denied_lists_name_each_call_once():
    assert len(set(DENIED_SYSCALLS)) == len(DENIED_SYSCALLS)
    assert not set(DENIED_SYSCALLS) & set(UNCOUNTED_MEMORY_SYSCALLS)
    assert {"keyctl", "unshare", "mount", "ptrace", "bpf"} <= set(DENIED_SYSCALLS)


@needs_libseccomp
def test_the_program_is_bpf_and_denies_more_where_memory_is_not_counted():
    counted, uncounted = seccomp_program(True), seccomp_program(False)
    assert len(counted) % 8 == 0 and len(uncounted) % 8 == 0  # struct sock_filter: 8 bytes an instruction
    assert len(uncounted) > len(counted) > 8 * len(DENIED_SYSCALLS) // 2
    assert seccomp_program(True) is counted  # built once
