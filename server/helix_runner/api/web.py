"""The dashboard's HTTP port: the web page's static assets and RunnerService over Connect.

One ASGI application on the gRPC server's event loop (uvicorn, HTTP/1.1): requests under
``/helix.runner.v1.RunnerService/`` go to the Connect application (``connect_app``), everything
else is one of the page's built files (``web_assets/``, built from ``web/`` by
``scripts/build-web``). The port follows the gRPC port's rules: loopback by default, and off
loopback only with the bearer token (``config.validate``); HTTPS with the gRPC port's certificate
when that one has TLS. Without a token, requests must name a
loopback host, so a web page elsewhere cannot reach the API through DNS rebinding.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import socket
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn

from helix_runner.api.connect_app import build_connect_app
from helix_runner.api.servicer import RunnerServicer
from helix_runner.api.tls import CertificateFiles

log = logging.getLogger(__name__)

ASSETS_DIR = Path(__file__).parent / "web_assets"
_CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".json": "application/json",
}
# The page loads nothing from elsewhere and must not be framed (it has Approve buttons).
_SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
# Names the gRPC port of this server on every answer (see WebApp).
GRPC_PORT_HEADER = b"x-helix-runner-grpc-port"
_NOT_BUILT = (
    b"<!doctype html><title>Helix Runner</title><p>The dashboard's assets are not built: "
    b"run <code>scripts/build-web</code>.</p>"
)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class _Asset:
    body: bytes
    content_type: str
    etag: bytes


def load_assets(directory: Path = ASSETS_DIR) -> dict[str, _Asset]:
    """The page's files by URL path (``/`` is ``index.html``), read once: they are small and fixed."""
    assets: dict[str, _Asset] = {}
    if directory.is_dir():
        for path in sorted(directory.iterdir()):
            if path.is_file() and path.suffix in _CONTENT_TYPES:
                body = path.read_bytes()
                etag = b'"' + hashlib.sha256(body).hexdigest()[:32].encode() + b'"'
                assets["/" + path.name] = _Asset(body, _CONTENT_TYPES[path.suffix], etag)
    if "/index.html" in assets:
        assets["/"] = assets["/index.html"]
    else:
        assets["/"] = _Asset(_NOT_BUILT, _CONTENT_TYPES[".html"], b'"not-built"')
    return assets


def _host_name(headers: list[tuple[bytes, bytes]]) -> str:
    raw = next((v for k, v in headers if k == b"host"), b"").decode("latin-1").strip().lower()
    if raw.startswith("["):  # [::1]:8080
        return raw[1 : raw.find("]")] if "]" in raw else raw
    return raw.rsplit(":", 1)[0] if raw.count(":") == 1 else raw


class WebApp:
    """ASGI: the Connect service under its path, the page's assets elsewhere, nothing else."""

    def __init__(
        self,
        servicer: RunnerServicer,
        *,
        extra_hosts: tuple[str, ...] = (),
        assets: dict[str, _Asset] | None = None,
        grpc_port: int | None = None,
    ):
        self.connect = build_connect_app(servicer)
        # Every answer names the server's gRPC port: a client pointed at this port by mistake (the
        # helix-runner CLI's --server) can say which one to use (cli/common.py).
        self._grpc_port_header = (
            None if grpc_port is None else (GRPC_PORT_HEADER, str(grpc_port).encode())
        )
        self._prefix = self.connect.path + "/"
        self._assets = load_assets() if assets is None else assets
        # With credentials the API is protected by them; without, only loopback host names are served.
        protected = not servicer.access.authenticator.open
        self._hosts = (
            None if protected else _LOOPBACK_NAMES | {h.lower().strip("[]") for h in extra_hosts}
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # no websockets and no lifespan (uvicorn runs with lifespan="off")
        if self._grpc_port_header is not None:
            send = _with_header(send, self._grpc_port_header)
        if self._hosts is not None and _host_name(scope["headers"]) not in self._hosts:
            await _plain(send, 403, b"unexpected Host header: this port only answers loopback names\n")
            return
        path = scope["path"]
        if path.startswith(self._prefix):
            await self.connect(scope, receive, send)
            return
        asset = self._assets.get(path)
        if asset is None:
            await _plain(send, 404, b"not found\n")
            return
        if scope["method"] not in ("GET", "HEAD"):
            await _plain(send, 405, b"method not allowed\n", [(b"allow", b"GET, HEAD")])
            return
        headers = [
            (b"content-type", asset.content_type.encode()),
            (b"etag", asset.etag),
            (b"cache-control", b"no-cache"),
            *_SECURITY_HEADERS,
        ]
        if next((v for k, v in scope["headers"] if k == b"if-none-match"), None) == asset.etag:
            await send({"type": "http.response.start", "status": 304, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return
        headers.append((b"content-length", str(len(asset.body)).encode()))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else asset.body})


def _with_header(send: Send, header: tuple[bytes, bytes]) -> Send:
    """``send`` adding ``header`` to the response's start."""

    async def sending(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), header]}
        await send(message)

    return sending


async def _plain(
    send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class _EmbeddedServer(uvicorn.Server):
    """uvicorn on an event loop it does not own: the runner's ``serve()`` handles SIGTERM/SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@dataclass
class WebServer:
    """A started dashboard port."""

    server: uvicorn.Server
    task: asyncio.Task
    port: int
    url: str

    async def stop(self, grace: float = 2.0) -> None:
        """Stops accepting, lets responses in flight end for up to ``grace`` seconds, then cancels them."""
        self.server.config.timeout_graceful_shutdown = grace
        self.server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(self.task), grace + 5.0)
        except TimeoutError:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task


def bind_web(host: str, port: int) -> socket.socket:
    """The dashboard's listening socket; raises OSError (port in use, bad address) before anything is served."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def _url(host: str, port: int, scheme: str = "http") -> str:
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else ("[::1]" if host == "::" else host)
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    return f"{scheme}://{shown}:{port}/"


async def start_web(
    servicer: RunnerServicer,
    *,
    host: str,
    port: int = 0,
    sock: socket.socket | None = None,
    shutdown_grace: float = 2.0,
    tls: CertificateFiles | None = None,
    grpc_port: int | None = None,
) -> WebServer:
    """Serves the dashboard on the running loop, on ``sock`` (from ``bind_web``) or on ``host:port``
    (0: a free port); over HTTPS with ``tls`` (the gRPC port's certificate, reloaded the same way).
    The socket is closed if it cannot start."""
    sock = bind_web(host, port) if sock is None else sock
    app = WebApp(servicer, extra_hosts=(host,), grpc_port=grpc_port)
    config = uvicorn.Config(
        app,
        lifespan="off",
        log_config=None,
        access_log=False,
        http="h11",
        ws="none",
        server_header=False,
        proxy_headers=False,
        timeout_graceful_shutdown=shutdown_grace,
        ssl_context_factory=None if tls is None else (lambda _config, _default: tls.https_context()),
    )
    # uvicorn's own start/stop lines are not about the service; its warnings and errors are.
    logging.getLogger("uvicorn.error").setLevel(max(logging.WARNING, logging.getLogger().level))
    server = _EmbeddedServer(config)
    task = asyncio.create_task(server.serve(sockets=[sock]), name="helix-runner-web")
    try:
        async with asyncio.timeout(10):
            while not server.started:
                if task.done():
                    task.result()  # raises what stopped it
                    raise OSError("the web server stopped during startup")
                await asyncio.sleep(0.01)
    except BaseException:
        server.should_exit = True
        sock.close()
        raise
    bound = sock.getsockname()[1]
    return WebServer(server, task, bound, _url(host, bound, "http" if tls is None else "https"))
