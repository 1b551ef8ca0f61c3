"""A private network for a phase: a new user and network namespace with only its own loopback.

Standard library only, and only its C modules (``_socket``, not ``socket``, whose enums cost a few
ms to build): the phase shim imports it. ``enter`` runs in the shim's forked child before it execs
bubblewrap (which nests its own user namespace inside this one). The phase still reaches the
server's gateway and egress proxy: the child listens on ``127.0.0.1:<port>`` (and ``[::1]``) inside
the new namespace for each allowed port and hands the listening sockets to the shim, which stays
outside and relays every connection to the host's ``127.0.0.1:<port>`` (``relay.py``). Nothing else
on the host's loopback, and no other host, is reachable from inside.

Bringing ``lo`` up takes the kernel from under a millisecond to several on a busy host, so it is
off the child's path: the listeners are bound before the address exists (``IP_FREEBIND``), and the
shim brings ``lo`` up (``loopback_up``) through a socket the child made inside the namespace (an
interface ioctl acts on its socket's namespace) while bubblewrap builds the sandbox. The shim may:
it is in the parent user namespace with the owner's uid, so it holds every capability in the new one.
"""

from __future__ import annotations

import _socket
import ctypes
import os
import sys

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
SOL_IP = 0
SOL_IPV6 = 41
IP_FREEBIND = 15
IPV6_FREEBIND = 78
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ_SIZE = 40  # struct ifreq: a 16-byte name, then a union (flags: a short)

_libc = None


def _c() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _listener(family: int, host: str, port: int) -> int:
    sock = _socket.socket(family, _socket.SOCK_STREAM)
    try:
        if family == _socket.AF_INET:
            sock.setsockopt(SOL_IP, IP_FREEBIND, 1)
        else:
            sock.setsockopt(SOL_IPV6, IPV6_FREEBIND, 1)
        sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock.detach()


def enter(ports: list[int]) -> tuple[int, list[int]]:
    """Moves this process into a new user + network namespace (its uid and gid mapped to
    themselves, so files keep their owners) and returns (a control socket for ``loopback_up``,
    a listening socket on ``127.0.0.1:<port>`` for each port, then ``[::1]:<port>`` where IPv6
    is on), as file descriptors, close-on-exec. Raises OSError."""
    uid, gid = os.getuid(), os.getgid()  # before the unshare: unmapped ids read as the overflow id
    _check(_c().unshare(CLONE_NEWUSER | CLONE_NEWNET), "unshare(user, net)")
    # Without CAP_SETGID in the parent namespace a process may map only its own gid, after
    # giving up setgroups(2) (user_namespaces(7)); as root too, since the maps are written
    # from inside the new namespace.
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")
    control = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM).detach()
    listeners = [_listener(_socket.AF_INET, "127.0.0.1", port) for port in ports]
    for port in ports:
        try:
            listeners.append(_listener(_socket.AF_INET6, "::1", port))
        except OSError:
            break  # no IPv6 in this kernel: IPv4 only
    return control, listeners


def loopback_up(control: int) -> None:
    """Sets ``lo`` up in the network namespace the socket ``control`` belongs to; OSError if refused."""
    req = ctypes.create_string_buffer(b"lo".ljust(_IFREQ_SIZE, b"\0"), _IFREQ_SIZE)
    _check(_c().ioctl(control, _SIOCGIFFLAGS, req), "ioctl(SIOCGIFFLAGS, lo)")
    flags = int.from_bytes(req.raw[16:18], sys.byteorder)
    req.raw = req.raw[:16] + (flags | _IFF_UP).to_bytes(2, sys.byteorder) + req.raw[18:]
    _check(_c().ioctl(control, _SIOCSIFFLAGS, req), "ioctl(SIOCSIFFLAGS, lo)")
