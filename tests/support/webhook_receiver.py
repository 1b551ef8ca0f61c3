"""A real HTTP(S) webhook receiver for tests: verifies every request's signature with ``standardwebhooks``.

``WebhookReceiver(secret)`` serves on 127.0.0.1 (a thread of its own, ``http.server``), records each
request (headers, body, whether its signature verified, when it arrived) and answers from a script of
responses (``respond``: status, Retry-After, delay, body size), then 200. ``down()`` stops listening
(a receiver that is down: connections are refused) and ``start()`` listens on the same port again;
``stop()`` closes it for good. While down, the port stays bound to a socket that does not listen:
closed outright, its number was free for the next listener on the machine, and CI once saw the
runner's own egress proxy take it (the "down" receiver answered 407).
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import orjson
from standardwebhooks import Webhook, WebhookVerificationError


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: bytes
    verified: bool
    time_ns: int
    answered: int

    @property
    def json(self) -> dict:
        return orjson.loads(self.body)

    @property
    def webhook_id(self) -> str:
        return self.headers.get("webhook-id", "")


@dataclass(frozen=True)
class Response:
    status: int = 200
    retry_after: str | None = None
    delay_s: float = 0.0
    body_bytes: int = 2


@dataclass
class WebhookReceiver:
    secret: str
    port: int = 0
    tls: tuple[Path, Path] | None = None  # (cert, key)
    received: list[Received] = field(default_factory=list)
    script: deque[Response] = field(default_factory=deque)
    _server: ThreadingHTTPServer | None = None
    _held: socket.socket | None = None  # the port, bound and not listening, while stopped
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> WebhookReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                try:
                    Webhook(receiver.secret).verify(body, headers)
                    verified = True
                except (WebhookVerificationError, ValueError, KeyError):
                    verified = False
                with receiver._lock:
                    answer = receiver.script.popleft() if receiver.script else Response()
                if answer.delay_s:
                    time.sleep(answer.delay_s)
                with receiver._lock:
                    receiver.received.append(Received(headers, body, verified, time.time_ns(), answer.status))
                self.send_response(answer.status)
                if answer.retry_after is not None:
                    self.send_header("retry-after", answer.retry_after)
                self.send_header("content-length", str(answer.body_bytes))
                self.end_headers()
                remaining = answer.body_bytes
                try:
                    while remaining > 0:
                        chunk = min(remaining, 65536)
                        self.wfile.write(b"x" * chunk)
                        remaining -= chunk
                except OSError:
                    pass  # the sender stopped reading (its response-size cap)

            def log_message(self, *args: object) -> None:
                pass

        if self._held is not None:
            self._held.close()
            self._held = None
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        if self.tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*self.tls)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def down(self) -> None:
        """Refuses connections until ``start()``, keeping the port number to itself meanwhile."""
        self.stop()
        held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("127.0.0.1", self.port))  # no listen(): a connect is refused
        self._held = held

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._held is not None:
            self._held.close()
            self._held = None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/hook"

    @property
    def allow(self) -> str:
        """The ``webhook_private_allow`` entry that lets the server reach this loopback receiver."""
        return f"127.0.0.1:{self.port}"

    def respond(self, *answers: Response) -> None:
        with self._lock:
            self.script.extend(answers)

    def snapshot(self) -> list[Received]:
        with self._lock:
            return list(self.received)

    def wait_for(self, count: int, timeout: float = 30.0) -> list[Received]:
        """The first ``count`` requests, waiting at most ``timeout`` seconds for them (AssertionError otherwise)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.snapshot()
            if len(got) >= count:
                return got
            time.sleep(0.01)
        raise AssertionError(f"the receiver got {len(self.snapshot())} requests, not {count}, within {timeout} s")

    async def arrived(self, count: int, timeout: float = 30.0) -> list[Received]:
        """``wait_for`` for a test on the event loop (the server under test runs on it)."""
        import asyncio

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.snapshot()
            if len(got) >= count:
                return got
            await asyncio.sleep(0.01)
        raise AssertionError(f"the receiver got {len(self.snapshot())} requests, not {count}, within {timeout} s")
