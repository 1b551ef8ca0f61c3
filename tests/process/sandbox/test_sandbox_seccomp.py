"""The phase sandbox's seccomp filter (process/sandbox/seccomp_filter.py), compiled as at server
start and loaded as the shim loads it (seccomp_load.py), in a child process that then tries what
the filter refuses and what it must let through."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helix_runner.process.sandbox.seccomp_filter import VARIANTS, compile_filter, variant_name

# Loads the filter (argv[1], hex) with no_new_privs, then reports each attempt's errno (0: allowed).
_TRY = r"""
import ctypes, errno, json, os, socket, sys
sys.path.insert(0, sys.argv[2])
from sandbox import seccomp_load
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
seccomp_load.load(bytes.fromhex(sys.argv[1]))

def call(number, *args):
    ctypes.set_errno(0)
    return 0 if libc.syscall(number, *args) >= 0 else ctypes.get_errno()

def made(number, remove, *args):  # a SysV IPC object made and removed (IPC_RMID), or the errno
    ctypes.set_errno(0)
    made = libc.syscall(number, *args)
    if made < 0:
        return ctypes.get_errno()
    libc.syscall(remove, made, 0, None)
    return 0

def sock(family, kind):
    try:
        socket.socket(family, kind).close()
        return 0
    except OSError as exc:
        return exc.errno

out = {
    "io_uring_setup": call(425, 1, None),
    "unshare_user": call(272, 0x10000000),
    "keyctl": call(250, 0, -1, 0),
    "mount": call(165, b"none", b"/tmp", b"tmpfs", 0, None),
    "ptrace": call(101, 16, -1, 0, 0),  # PTRACE_ATTACH to no process: ESRCH (3) unless refused first
    "tcp": sock(socket.AF_INET, socket.SOCK_STREAM),
    "udp": sock(socket.AF_INET, socket.SOCK_DGRAM),
    "unix": sock(socket.AF_UNIX, socket.SOCK_STREAM),
    "packet": sock(socket.AF_PACKET, socket.SOCK_RAW),
    "shmget": made(29, 31, 0, 4096, 0o1600),  # IPC_PRIVATE, IPC_CREAT | 0600; removed by shmctl
    "msgget": made(68, 71, 0, 0o1600),  # ... msgctl
    "mq_open": call(240, b"helix-test-none", 0, 0, None),  # O_RDONLY, no such queue (the syscall takes no "/"): ENOENT (2) unless refused
    "fork": os.waitpid(pid, 0)[1] if (pid := os.fork()) else os._exit(0),
}
print(json.dumps(out))
"""


def attempts(**variant) -> dict[str, int]:
    from helix_runner.process.sandbox.phase_sandbox import SHIM_DIR

    program = compile_filter(**variant)
    done = subprocess.run([sys.executable, "-c", _TRY, program.hex(), str(SHIM_DIR)], capture_output=True,
                          text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.skipif(sys.platform != "linux" or __import__("platform").machine() != "x86_64",
                    reason="the raw syscall numbers here are x86_64's")
def test_what_every_variant_refuses_and_allows():
    tried = attempts(userns=True, ptrace=False, sockets=False)
    assert tried["io_uring_setup"] == 38  # ENOSYS, so programs fall back to what older kernels offer
    assert tried["unshare_user"] == tried["keyctl"] == tried["mount"] == 1  # EPERM
    assert tried["tcp"] == tried["udp"] == tried["unix"] == tried["fork"] == 0  # ordinary work goes on
    assert tried["ptrace"] == 3  # ESRCH: allowed through (Landlock scopes ptrace where this variant is used)
    assert tried["shmget"] == tried["msgget"] == 0 and tried["mq_open"] == 2  # an IPC namespace keeps them apart


@pytest.mark.skipif(__import__("platform").machine() != "x86_64", reason="x86_64 syscall numbers")
def test_without_an_ipc_namespace_sysv_ipc_and_message_queues_are_refused():
    tried = attempts(userns=True, ptrace=False, sockets=True, ipc=True)
    assert tried["shmget"] == tried["msgget"] == tried["mq_open"] == 38  # ENOSYS: as a kernel without them
    assert tried["tcp"] == tried["unix"] == tried["fork"] == 0


@pytest.mark.skipif(__import__("platform").machine() != "x86_64", reason="x86_64 syscall numbers")
def test_the_landlock_only_variants_add_ptrace_and_non_tcp_sockets():
    tried = attempts(userns=True, ptrace=True, sockets=True)
    assert tried["ptrace"] == 1
    assert tried["udp"] == tried["packet"] == 1  # Landlock's TCP rules cannot see these
    assert tried["tcp"] == tried["unix"] == 0


def test_the_variants_compiled_at_start_are_the_ones_phases_get():
    assert {variant_name(**v) for v in VARIANTS} == {
        "seccomp-userns", "seccomp-userns-ptrace", "seccomp-userns-sockets", "seccomp-userns-ptrace-sockets",
        "seccomp-userns-ipc", "seccomp-userns-ptrace-ipc", "seccomp-userns-sockets-ipc",
        "seccomp-userns-ptrace-sockets-ipc"}
