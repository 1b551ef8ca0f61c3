"""The gateway's connections to the model API: HTTP/1.1 keep-alive, TLS verified, answers streamed.

Each answer is parsed by llhttp (``httptools``) in ``data_received`` and handed to its receiver
chunk by chunk, in the same call: nothing waits in a buffer of ours between the API's socket and
the client's. A connection whose answer ended cleanly with keep-alive goes back to the pool; the
first request on a reused connection that the API had already closed is retried once on a new
one (the usual keep-alive race), as nothing of it was answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

import httptools

CONNECT_TIMEOUT_S = 10.0
MAX_IDLE_CONNECTIONS = 32
MAX_RESPONSE_HEAD_BYTES = 64 * 1024


class UpstreamError(Exception):
    """The API could not be reached or broke off; the message is one line for a person."""


@dataclass(frozen=True)
class UpstreamUrl:
    """Where the API is: scheme, host, port and a base path its paths are appended to."""

    scheme: str
    host: str
    port: int
    base_path: str

    @classmethod
    def parse(cls, url: str) -> UpstreamUrl:
        """``http(s)://host[:port][/base]``; ValueError naming what is wrong."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r} is not an http(s)://host URL")
        if parts.query or parts.fragment or parts.username or parts.password:
            raise ValueError(f"{url!r} must not carry a query, fragment or credentials")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))

    @property
    def host_header(self) -> bytes:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return (host if self.port == default else f"{host}:{self.port}").encode()

    def __str__(self) -> str:
        return f"{self.scheme}://{self.host_header.decode()}{self.base_path}"


class Receiver(Protocol):
    """Who gets one answer: its head, its body chunk by chunk, its end or its failure."""

    def on_head(self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]]) -> None: ...
    def on_body(self, chunk: bytes) -> None: ...
    def on_end(self) -> None: ...
    def on_failure(self, error: UpstreamError, answered: bool) -> None: ...


class UpstreamConnection(asyncio.Protocol):
    """One connection to the API; one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False
        self._receiver: Receiver | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._headers: list[tuple[bytes, bytes]] = []
        self._head_bytes = 0
        self._reason = b""
        self._answered = False
        self._keep_alive = False
        self.on_idle: Callable[[UpstreamConnection], None] | None = None

    # -- asyncio.Protocol ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self._receiver is None:  # bytes nobody asked for: this connection cannot be trusted any more
            self.abort()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamError(f"the API's answer is not valid HTTP: {exc}"))

    def eof_received(self) -> bool | None:
        if self._receiver is not None:
            try:  # an answer delimited by the connection's end ends here
                self._parser.feed_data(b"")
            except httptools.HttpParserError:
                pass
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._receiver is not None:
            self._fail(UpstreamError("the API closed the connection before its answer ended"))

    # -- the request ----------------------------------------------------------------------------
    def send(self, head: bytes, body: bytes | memoryview, receiver: Receiver) -> None:
        """Writes a request (``body``: all of it, or its start: ``send_more`` writes the rest)."""
        assert self.transport is not None and self._receiver is None
        self._receiver, self._answered, self._headers, self._head_bytes = receiver, False, [], 0
        self._parser = httptools.HttpResponseParser(self)
        self.transport.write(head + body if len(body) < 65536 else head)
        if len(body) >= 65536:
            self.transport.write(body)

    def send_more(self, data: bytes | memoryview) -> None:
        """The rest of the request's body (after ``send``)."""
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def pause(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def abort(self) -> None:
        """Drops the connection (the client went away mid-answer, or the answer was bad)."""
        self._receiver = None
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _fail(self, error: UpstreamError) -> None:
        receiver, self._receiver = self._receiver, None
        self.closed = True
        if self.transport is not None:
            self.transport.abort()
        if receiver is not None:
            receiver.on_failure(error, self._answered)

    # -- httptools callbacks ----------------------------------------------------------------------
    def on_status(self, status: bytes) -> None:
        self._reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value)
        if self._head_bytes > MAX_RESPONSE_HEAD_BYTES:
            raise UpstreamError("the API's answer head is too large")
        self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self._answered = True
        self._keep_alive = self._parser.should_keep_alive()
        if self._receiver is not None:
            self._receiver.on_head(self._parser.get_status_code(), self._reason, self._headers)
        self._reason = b""

    def on_body(self, body: bytes) -> None:
        if self._receiver is not None:
            self._receiver.on_body(body)

    def on_message_complete(self) -> None:
        receiver, self._receiver = self._receiver, None
        if receiver is not None:
            receiver.on_end()
        if self._keep_alive and not self.closed and self.on_idle is not None:
            self.on_idle(self)
        elif self.transport is not None:
            self.closed = True
            self.transport.close()


class UpstreamPool:
    """Keep-alive connections to one API endpoint."""

    def __init__(self, url: UpstreamUrl, ca_file: Path | None = None) -> None:
        self.url = url
        self._idle: list[UpstreamConnection] = []
        self._ssl: ssl.SSLContext | None = None
        if url.scheme == "https":
            # Verified against the system's roots (or the operator's CA file): hostname and chain.
            self._ssl = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
            self._ssl.set_alpn_protocols(["http/1.1"])

    def idle(self) -> UpstreamConnection | None:
        """A kept-alive connection to reuse now, if there is one."""
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                conn.reused = True
                return conn
        return None

    async def connection(self) -> UpstreamConnection:
        """An idle connection, or a new one; UpstreamError if none can be made."""
        return self.idle() or await self.connect()

    async def connect(self) -> UpstreamConnection:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(UpstreamConnection, self.url.host, self.url.port, ssl=self._ssl,
                                       server_hostname=self.url.host if self._ssl else None),
                CONNECT_TIMEOUT_S)
        except TimeoutError:
            raise UpstreamError(f"no connection to {self.url} within {CONNECT_TIMEOUT_S:g} s") from None
        except ssl.SSLCertVerificationError as exc:
            raise UpstreamError(f"the TLS certificate of {self.url} is not trusted: {exc.verify_message}") from None
        except (OSError, ssl.SSLError) as exc:
            raise UpstreamError(f"cannot connect to {self.url}: {exc.strerror or exc}") from None
        conn.on_idle = self._release
        return conn

    def _release(self, conn: UpstreamConnection) -> None:
        if len(self._idle) < MAX_IDLE_CONNECTIONS:
            self._idle.append(conn)
        elif conn.transport is not None:
            conn.closed = True
            conn.transport.close()

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            with contextlib.suppress(Exception):
                conn.abort()
