"""A stand-in for a Kubernetes Service in front of replicas: one loopback address whose *new*
connections go to the replicas the test marks ready (the Service's endpoints), while connections
already open stay where they are, as kube-proxy keeps them. Taking a draining replica out of
``endpoints`` is what the endpoints controller does when its readiness fails.
"""

from __future__ import annotations

import asyncio
import contextlib


class ServiceProxy:
    """Forwards each new connection to 127.0.0.1:<the first port in ``endpoints`` that accepts>."""

    def __init__(self, endpoints: list[int]):
        self.endpoints = list(endpoints)
        self.port = 0
        self.connections: list[int] = []
        """The backend port of each connection made, in order."""
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def __aenter__(self) -> ServiceProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            with contextlib.suppress(Exception):
                writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), 5)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream = None
        for port in list(self.endpoints):
            with contextlib.suppress(OSError):
                upstream = await asyncio.open_connection("127.0.0.1", port)
                self.connections.append(port)
                break
        if upstream is None:  # no ready endpoint: refused, as a Service without endpoints does
            writer.transport.abort()
            return
        up_reader, up_writer = upstream
        self._writers |= {writer, up_writer}
        pipes = [asyncio.ensure_future(_pipe(reader, up_writer)), asyncio.ensure_future(_pipe(up_reader, writer))]
        self._tasks.update(pipes)
        try:
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pipes:
                task.cancel()
                self._tasks.discard(task)
            for w in (writer, up_writer):
                self._writers.discard(w)
                with contextlib.suppress(Exception):
                    w.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, asyncio.IncompleteReadError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
