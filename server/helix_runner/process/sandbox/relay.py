"""The phase shim's relay from the phase's private loopback to the host's (``netns.py``).

Standard library only: the phase shim imports it. Each listening socket (inside the phase's
network namespace) gets an accept thread; each accepted connection is joined to a new
connection to the host's ``127.0.0.1:<port>`` by two threads that copy bytes as they arrive
(blocking ``recv``/``sendall``: no batching, no timer, so no delay is added to a chunk, which
matters for the model API's server-sent events). The threads are daemons: they end with the shim,
which outlives every process of its phase. The shim's signals stay blocked in them (they are
started after the shim blocked its signals), so its ``sigtimedwait`` loop still receives them.
"""

from __future__ import annotations

import socket
import threading

_CHUNK = 64 * 1024


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(_CHUNK):
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _join(inside: socket.socket, port: int) -> None:
    try:
        outside = socket.create_connection(("127.0.0.1", port), timeout=10)
        outside.settimeout(None)
    except OSError:
        inside.close()
        return
    for sock in (inside, outside):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    back = threading.Thread(target=_pump, args=(outside, inside), daemon=True)
    back.start()
    _pump(inside, outside)
    back.join()
    inside.close()
    outside.close()


def _accept(listener: socket.socket, port: int) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=_join, args=(conn, port), daemon=True).start()


def start(listeners: list[socket.socket], ports: list[int]) -> None:
    """Relays every connection to ``listeners[i]`` to the host's ``127.0.0.1:<port of listener i>``."""
    for listener in listeners:
        port = listener.getsockname()[1]
        if port not in ports:
            continue
        threading.Thread(target=_accept, args=(listener, port), daemon=True).start()
