"""The phase sandbox's seccomp filter: a small deny list, compiled once at server start.

Built with libseccomp (through ``pyseccomp``, which binds Debian's ``libseccomp2`` with ctypes):
it knows every architecture's syscall numbers and emits the architecture check, which a
hand-written BPF program would have to redo. The compiled classic-BPF bytes go to a file; the
shim hands them to ``bwrap --seccomp`` or loads them itself (``seccomp_load.py``), so no phase
pays for compiling. Denied calls fail with ``EPERM`` (``ENOSYS`` for io_uring and ``clone3``, so
programs fall back to what they would use on an older kernel) instead of killing the caller.

Both variants deny: kernel attack surface a tool never needs (io_uring, ``bpf``,
``perf_event_open``, ``userfaultfd``, keyrings, kexec and modules, ``open_by_handle_at``,
``name_to_handle_at``, swap, reboot, ``acct``, ``quotactl``, ``syslog``), and the mount API
and ``setns`` (a sandbox built by bubblewrap must stay as built).

Optional rules, by what the other layers leave open: new user namespaces (``unshare``/``clone``
with ``CLONE_NEWUSER``; ``clone3`` answers ENOSYS, so callers fall back to ``clone``, whose flags
BPF can read), which the server always asks for (under bubblewrap in place of its
``--disable-userns``, which costs a nested user namespace per phase); ``ptrace`` without Landlock
to scope it; when Landlock's TCP rules are the network boundary, every socket they cannot
see: UDP and raw IP sockets, packet sockets, and families other than unix, IPv4, IPv6 and netlink;
and without bubblewrap's IPC namespace, SysV IPC and POSIX message queues (ENOSYS, as on a kernel
built without them): their objects are the host's, named by numbers ``/proc/sysvipc`` lists, and
no Landlock rule covers them.
"""

from __future__ import annotations

import errno
import socket
import tempfile
from pathlib import Path

import pyseccomp as seccomp

_COMMON_DENY = (
    "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key", "kexec_load",
    "kexec_file_load", "init_module", "finit_module", "delete_module", "open_by_handle_at",
    "name_to_handle_at", "swapon", "swapoff", "reboot", "acct", "quotactl", "syslog",
    "mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount",
    "fspick", "mount_setattr", "setns",
)
_NOSYS = ("io_uring_setup", "io_uring_enter", "io_uring_register")
_CLONE_NEWUSER = 0x10000000
_SOCK_TYPE_MASK = 0xF
_ALLOWED_FAMILIES = (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK)
_IPC = ("shmget", "shmat", "shmctl", "semget", "semop", "semtimedop", "semctl", "msgget", "msgsnd", "msgrcv",
        "msgctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr")


def variant_name(*, userns: bool, ptrace: bool, sockets: bool, ipc: bool = False) -> str:
    """The file stem of the variant denying these (e.g. ``seccomp-userns-sockets-ipc``)."""
    flags = (("userns", userns), ("ptrace", ptrace), ("sockets", sockets), ("ipc", ipc))
    return "-".join(["seccomp", *(n for n, on in flags if on)])


# The variants phases get (phase_sandbox.Sandbox.prepare): new user namespaces always refused.
VARIANTS = tuple({"userns": True, "ptrace": p, "sockets": s, "ipc": i}
                 for p in (False, True) for s in (False, True) for i in (False, True))


def _filter(*, userns: bool, ptrace: bool, sockets: bool, ipc: bool = False) -> seccomp.SyscallFilter:
    f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    eperm = seccomp.ERRNO(errno.EPERM)
    for name in _COMMON_DENY:
        f.add_rule(eperm, name)
    for name in _NOSYS:
        f.add_rule(seccomp.ERRNO(errno.ENOSYS), name)
    if userns:
        f.add_rule(eperm, "unshare", seccomp.Arg(0, seccomp.MASKED_EQ, _CLONE_NEWUSER, _CLONE_NEWUSER))
        f.add_rule(eperm, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, _CLONE_NEWUSER, _CLONE_NEWUSER))
        f.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")  # flags live in a struct BPF cannot read
    if ptrace:
        f.add_rule(eperm, "ptrace")
    if ipc:
        for name in _IPC:
            f.add_rule(seccomp.ERRNO(errno.ENOSYS), name)
    if not sockets:
        return f
    for family in (socket.AF_INET, socket.AF_INET6):
        for sock_type in (socket.SOCK_DGRAM, socket.SOCK_RAW):
            f.add_rule(eperm, "socket", seccomp.Arg(0, seccomp.EQ, family),
                       seccomp.Arg(1, seccomp.MASKED_EQ, _SOCK_TYPE_MASK, sock_type))
    # Every other family: allowed ones are below, the rest (AF_PACKET, AF_VSOCK, ...) denied.
    for family in range(0, 64):
        if family not in _ALLOWED_FAMILIES:
            f.add_rule(eperm, "socket", seccomp.Arg(0, seccomp.EQ, family))
    f.add_rule(eperm, "socket", seccomp.Arg(0, seccomp.GE, 64))
    return f


def compile_filter(*, userns: bool = False, ptrace: bool = False, sockets: bool = False, ipc: bool = False) -> bytes:
    """The classic-BPF program denying the common list and the optional groups asked for."""
    with tempfile.TemporaryFile() as out:
        _filter(userns=userns, ptrace=ptrace, sockets=sockets, ipc=ipc).export_bpf(out)
        out.seek(0)
        return out.read()


def write_filters(directory: Path) -> dict[str, Path]:
    """Compiles every variant into ``directory`` (0700, files 0600); returns each path by its stem."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    paths = {}
    for variant in VARIANTS:
        name = variant_name(**variant)
        path = directory / f"{name}.bpf"
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(compile_filter(**variant))
        tmp.chmod(0o600)
        tmp.replace(path)
        paths[name] = path
    return paths
