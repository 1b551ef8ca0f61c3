"""A private network for a phase: a new user and network namespace with only its own loopback.

Standard library only: the phase shim imports it. Runs in the shim's forked child, before it
execs bubblewrap (which nests its own user namespace inside this one). The phase still reaches
the server's gateway and egress proxy: this child listens on ``127.0.0.1:<port>`` inside the new
namespace for each allowed port and hands the listening sockets to the shim, which stays outside
and relays every connection to the host's ``127.0.0.1:<port>`` (``relay.py``). Nothing else on
the host's loopback, and no other host, is reachable from inside.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = struct.Struct("16sh22x")


def _unshare(flags: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare: {os.strerror(err)}")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def enter(ports: list[int]) -> list[socket.socket]:
    """Moves this process into a new user + network namespace (its uid and gid mapped to
    themselves, so files keep their owners), brings ``lo`` up and returns a listening socket on
    ``127.0.0.1:<port>`` (and ``[::1]:<port>`` where IPv6 is on) for each port, in that order
    (IPv4 first). Raises OSError."""
    uid, gid = os.getuid(), os.getgid()
    _unshare(CLONE_NEWUSER | CLONE_NEWNET)
    # Without CAP_SETGID in the parent namespace a process may map only its own gid, after
    # giving up setgroups(2) (user_namespaces(7)); as root too, since the maps are written
    # from inside the new namespace.
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = _IFREQ.unpack(fcntl.ioctl(s, _SIOCGIFFLAGS, _IFREQ.pack(b"lo", 0)))[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, _IFREQ.pack(b"lo", flags | _IFF_UP))
    listeners = []
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        for port in ports:
            try:
                sock = socket.socket(family, socket.SOCK_STREAM)
            except OSError:
                if family == socket.AF_INET:
                    raise
                break  # no IPv6 in this kernel
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((host, port))
                sock.listen(128)
            except OSError:
                sock.close()
                if family == socket.AF_INET:
                    raise
                continue
            listeners.append(sock)
    return listeners
