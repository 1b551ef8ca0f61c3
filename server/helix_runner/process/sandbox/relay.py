"""The phase shim's relay from the phase's private loopback to the host's (``netns.py``).

Standard library only, and only its C modules (``_socket``, ``_thread``): the phase shim imports
it. Each listening socket (inside the phase's network namespace) gets an accept thread; each
accepted connection is joined to a new connection to the host's ``127.0.0.1:<port>`` by two
threads that copy bytes as they arrive (blocking ``recv``/``sendall``: no batching, no timer, so
no delay is added to a chunk, which matters for the model API's server-sent events). The threads
end with the shim, which outlives every process of its phase. The shim starts them after it has
reported the CLI's pid (the listeners queue connections until then) and after it blocked its
signals, which they inherit blocked, so its ``sigtimedwait`` loop still receives them.
"""

from __future__ import annotations

import _socket
import _thread

_CHUNK = 64 * 1024
CONNECT_TIMEOUT_S = 10.0


def _pump(src: _socket.socket, dst: _socket.socket, done) -> None:
    try:
        while data := src.recv(_CHUNK):
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(_socket.SHUT_WR)
    except OSError:
        pass
    if done is not None:
        done.release()


def _join(inside: _socket.socket, port: int) -> None:
    outside = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    try:
        outside.settimeout(CONNECT_TIMEOUT_S)
        outside.connect(("127.0.0.1", port))
        outside.settimeout(None)
    except OSError:
        outside.close()
        inside.close()
        return
    for sock in (inside, outside):
        sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
    back = _thread.allocate_lock()
    back.acquire()
    _thread.start_new_thread(_pump, (outside, inside, back))
    _pump(inside, outside, None)
    back.acquire()  # until the other direction is done too
    inside.close()
    outside.close()


def _accept(listener: _socket.socket, port: int) -> None:
    while True:
        try:
            fd, _ = listener._accept()
        except OSError:
            return
        _thread.start_new_thread(_join, (_socket.socket(fileno=fd), port))


def start(listeners: list[int], ports: list[int]) -> None:
    """Relays every connection to ``listeners[i]`` (file descriptors) to the host's
    ``127.0.0.1:<the port listener i is bound to>``, if that port is one of ``ports``."""
    for fd in listeners:
        listener = _socket.socket(fileno=fd)
        port = listener.getsockname()[1]
        if port not in ports:
            listener.close()
            continue
        _thread.start_new_thread(_accept, (listener, port))
