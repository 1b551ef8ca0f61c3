"""Helpers for the gateway and egress proxy tests: a recording grant sink, a tiny HTTP client, and
a raw upstream whose every byte and pause the test controls."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import h11

from helix_runner.domain.events import GatewayEvent
from helix_runner.domain.usage import TokenUsage


@dataclass
class RecordingSink:
    """A ``GrantSink`` that keeps what it was told."""

    responses: list[tuple[str, int, TokenUsage | None]] = field(default_factory=list)
    events: list[GatewayEvent] = field(default_factory=list)
    connections: list[str] = field(default_factory=list)
    limits: list[str] = field(default_factory=list)

    def on_response(self, model: str, status: int, usage: TokenUsage | None) -> None:
        self.responses.append((model, status, usage))

    def on_event(self, event: GatewayEvent) -> None:
        self.events.append(event)

    def on_egress_connection(self, destination: str) -> None:
        self.connections.append(destination)

    def on_egress_limit(self, reason: str) -> None:
        self.limits.append(reason)


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes
    chunks: list[bytes]


class HttpClient:
    """One keep-alive HTTP/1.1 connection (h11), for talking to the gateway in a test."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.conn = h11.Connection(h11.CLIENT)

    @classmethod
    async def connect(cls, port: int, host: str = "127.0.0.1") -> HttpClient:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    async def request(self, method: str, target: str, headers: dict[str, str] | None = None, body: bytes = b"",
                      on_chunk: Callable[[bytes], Awaitable[None] | None] | None = None,
                      timeout: float = 10.0) -> Response:
        if self.conn.our_state is h11.DONE:
            self.conn.start_next_cycle()
        hdrs = [("host", "gateway"), ("content-length", str(len(body))), *(headers or {}).items()]
        self.writer.write(self.conn.send(h11.Request(method=method, target=target, headers=hdrs)))
        self.writer.write(self.conn.send(h11.Data(data=body)) + self.conn.send(h11.EndOfMessage()))
        await self.writer.drain()
        return await asyncio.wait_for(self._response(on_chunk), timeout)

    async def _response(self, on_chunk) -> Response:
        head = None
        chunks: list[bytes] = []
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                data = await self.reader.read(65536)
                self.conn.receive_data(data)
                continue
            if isinstance(event, h11.Response):
                head = event
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
                if on_chunk is not None:
                    result = on_chunk(bytes(event.data))
                    if asyncio.iscoroutine(result):
                        await result
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                assert head is not None
                headers = {k.decode(): v.decode() for k, v in head.headers}
                return Response(head.status_code, headers, b"".join(chunks), chunks)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()


class RawUpstream:
    """An HTTP server that reads one request per connection and answers with what ``script`` writes.

    ``script(request_head, body, writer)`` is awaited per request; ``requests`` keeps (head, body),
    and ``incomplete`` (head, the body's bytes) of each request whose connection ended before the
    body its ``content-length`` announced was whole (nothing answers those).
    """

    def __init__(self, script: Callable[[bytes, bytes, asyncio.StreamWriter], Awaitable[None]]) -> None:
        self.script = script
        self.requests: list[tuple[bytes, bytes]] = []
        self.incomplete: list[tuple[bytes, bytes]] = []
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> RawUpstream:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                try:
                    body = await reader.readexactly(length)
                except asyncio.IncompleteReadError as cut:
                    self.incomplete.append((head, cut.partial))
                    raise
                self.requests.append((head, body))
                await self.script(head, body, writer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def header_value(head: bytes, name: bytes) -> bytes | None:
    """A header of a raw request head (first match, case-insensitive)."""
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return None
