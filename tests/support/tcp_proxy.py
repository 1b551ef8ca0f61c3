"""A loopback TCP proxy whose connections a test can cut, to drop a client's connection on demand.

Given an ``ssl.SSLContext`` it also terminates TLS in front of a plaintext gRPC server (the
context must offer ALPN ``h2``, which gRPC clients require).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl


class TcpProxy:
    """Forwards 127.0.0.1:<port> to ``target_port``; ``drop()`` resets every open connection.

    It keeps listening after a drop, so a client that reconnects gets through again.
    """

    def __init__(self, target_port: int, *, tls: ssl.SSLContext | None = None):
        self.target_port = target_port
        self.tls = tls
        self.port = 0
        self.drops = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def __aenter__(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.drop()
        assert self._server is not None
        self._server.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), 5)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def drop(self) -> None:
        """Resets every connection open now (RST, like a network failure)."""
        self.drops += 1
        for writer in list(self._writers):
            transport = writer.transport
            with contextlib.suppress(Exception):
                transport.abort()
        self._writers.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.transport.abort()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
        self._writers -= {writer, up_writer}
