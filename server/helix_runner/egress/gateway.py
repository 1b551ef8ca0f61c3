"""The model-API gateway: the CLI's ``ANTHROPIC_BASE_URL``, on 127.0.0.1, holding the real API key.

A phase's CLI sends its Messages API requests here with its capability as the key
(capabilities.py). The gateway refuses a request without a live capability (401), a path other
than the Messages and Models API (404), and a model outside its project's allowlist (403); it
forwards the rest to the API (``api_upstream_url``; offline mode's scripted API) with the real key
in place of the capability, and streams the answer back as it arrives: each chunk the API's socket
yields is written to the client's in the same call (upstream.py), so the SSE passes through byte
for byte and without delay. On its way the answer is metered (usage_meter.py) and its 429 / 529
seen; both go to the phase's grant (``GrantSink``): its stream, its report, the metrics.

Errors are answered in the API's own shape (``{"type": "error", "error": {"type", "message"}}``),
which the CLI shows as ``API Error: <status> ...``; refusals carry ``x-should-retry: false`` so
the CLI does not retry what cannot succeed.

HTTP/1.1 with llhttp (``httptools``) behind asyncio protocols: ~0.4 ms added to a first token here,
where h11 (pure Python) added ~0.9 ms, aiohttp ~1.1 ms and starlette with httpx ~2.7 ms (README,
"API gateway and egress proxy").
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httptools
import msgspec

from helix_runner.domain.api_features import FEATURES, BodyError, refused
from helix_runner.domain.events import GatewayEvent, GatewayEventKind
from helix_runner.egress.capabilities import Capabilities, Grant, presented_api_capability, tell
from helix_runner.egress.idle_timer import IdleTimer
from helix_runner.egress.log_throttle import LogThrottle
from helix_runner.egress.upstream import UpstreamConnection, UpstreamError, UpstreamPool, UpstreamUrl
from helix_runner.egress.usage_meter import UsageMeter

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 1024
MAX_HEAD_BYTES = 64 * 1024
MAX_HEADERS = 128
DEFAULT_MAX_REQUEST_BYTES = 32 * 1024 * 1024  # the Messages API's own limit
REQUEST_TIMEOUT_S = 60.0  # from a request's first byte to its last
KEEPALIVE_IDLE_S = 300.0  # an idle client connection is closed after this
UPSTREAM_IDLE_S = 600.0  # the API may think (or stream nothing) this long before the gateway gives up
MAX_EVENT_MESSAGE = 1024

# Not forwarded either way: hop-by-hop headers, the framing (re-done here), the client's credential.
_HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"proxy-authorization",
                         b"proxy-authenticate", b"te", b"trailer", b"transfer-encoding", b"upgrade",
                         b"content-length", b"host", b"expect"})
_REPLACED = frozenset({b"x-api-key", b"authorization", b"accept-encoding"})
_REASONS = {400: b"Bad Request", 401: b"Unauthorized", 403: b"Forbidden", 404: b"Not Found",
            405: b"Method Not Allowed", 408: b"Request Timeout", 413: b"Payload Too Large",
            431: b"Request Header Fields Too Large", 502: b"Bad Gateway", 503: b"Service Unavailable",
            504: b"Gateway Timeout"}
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 405: "invalid_request_error", 408: "timeout_error",
                413: "request_too_large", 431: "invalid_request_error", 502: "api_error", 503: "api_error",
                504: "timeout_error"}


def served(method: bytes, path: str) -> bool:
    """The Messages and Models API: what the CLI uses, and nothing else the key could do."""
    if method == b"POST":
        return path in ("/v1/messages", "/v1/messages/count_tokens")
    return method == b"GET" and (path == "/v1/models" or path.startswith("/v1/models/"))


ALL_FEATURES = frozenset(FEATURES)


class _RequestHead(msgspec.Struct):
    model: str = ""


_decode_head = msgspec.json.Decoder(_RequestHead).decode
_decode_top = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_decode_key = msgspec.json.Decoder(str).decode
_WS = re.compile(rb"[ \t\n\r]*")  # JSON's whitespace (RFC 8259)
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


def duplicate_key(plain: bytes, fields: dict[str, msgspec.Raw]) -> str | None:
    """A top-level key that the JSON object ``plain`` holds more than once, else None.

    ``fields`` is ``plain`` decoded (so ``plain`` is valid JSON, an object), with the last value of
    each key, as msgspec keeps it. The object's members are walked in order (C-speed matches and
    comparisons, one Python step per member): each key must be new, and its value exactly the bytes
    kept for it, up to a "," or the closing "}" (so ``12`` is not taken for a kept ``1``): an earlier
    member of a repeated key is caught either as a repeat or by a value that is not the kept one. How
    the key is spelled does not matter (``"mod\\u0065l"`` is ``model``). ValueError if ``plain`` is
    not what ``fields`` was decoded from.
    """
    i = _WS.match(plain, 0).end() + 1  # past "{"
    i = _WS.match(plain, i).end()
    if plain[i:i + 1] == b"}":
        return None
    seen: set[str] = set()
    while True:
        quoted = _STRING.match(plain, i)
        if quoted is None:
            raise ValueError(f"no key at byte {i}")
        key = _decode_key(quoted.group())
        if key in seen:
            return key
        seen.add(key)
        i = _WS.match(plain, _WS.match(plain, quoted.end()).end() + 1).end()  # past ":"
        value = fields.get(key)
        if value is None:
            raise ValueError(f"the key {key!r} was not decoded")
        if not plain.startswith(value, i):
            return key
        i = _WS.match(plain, i + len(value)).end()
        after = plain[i:i + 1]
        if after == b"}":
            return None
        if after != b",":
            return key
        i = _WS.match(plain, i + 1).end()


@dataclass(frozen=True)
class GatewaySettings:
    """Where the API is and how to authenticate to it (read by the composition root from the config)."""

    upstream: UpstreamUrl
    api_key: Callable[[], str] | None  # the real key, read per request (a rotated key file takes effect)
    ca_file: Path | None = None
    port: int = 0
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES


class ApiGateway:
    """The gateway's listening socket and what its connections share."""

    def __init__(self, settings: GatewaySettings, capabilities: Capabilities) -> None:
        self.settings = settings
        self.capabilities = capabilities
        self.pool = UpstreamPool(settings.upstream, settings.ca_file)
        self._server: asyncio.Server | None = None
        self.connections: set[_ClientConnection] = set()
        self.refused = 0  # requests answered here with an error (any reason)
        self.unauthenticated = LogThrottle(log, "gateway refused a request without a live capability")

    async def start(self) -> ApiGateway:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _ClientConnection(self), "127.0.0.1", self.settings.port)
        return self

    @property
    def port(self) -> int:
        assert self._server is not None, "the gateway is not started"
        return self._server.sockets[0].getsockname()[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for conn in list(self.connections):
                conn.abort()
            await self._server.wait_closed()
            self._server = None
        self.pool.close()


@dataclass
class _Request:
    url: bytes = b""
    method: bytes = b""
    headers: list[tuple[bytes, bytes]] | None = None
    head_bytes: int = 0
    body: list[bytes] | None = None
    body_bytes: int = 0
    keep_alive: bool = True
    problem: tuple[int, str] | None = None  # answered with this error instead of forwarded


class _ClientConnection(asyncio.Protocol):
    """One connection from a CLI (or from anything that found the port)."""

    def __init__(self, gateway: ApiGateway) -> None:
        self.gateway = gateway
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.closed = False
        self._request = _Request()
        self._receiving = False
        self._queue: deque[_Request] = deque()
        self._exchange: _Exchange | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()

    # -- asyncio.Protocol ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if len(self.gateway.connections) >= MAX_CONNECTIONS:
            transport.abort()  # type: ignore[attr-defined]
            return
        self.gateway.connections.add(self)
        self._arm(KEEPALIVE_IDLE_S)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._answer_and_close(400, "upgrades are not served")
        except httptools.HttpParserError:
            self._answer_and_close(400, "the request is not valid HTTP/1.1")

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.gateway.connections.discard(self)
        self._disarm()
        if self._exchange is not None:
            self._exchange.client_gone()

    def pause_writing(self) -> None:
        if self._exchange is not None:
            self._exchange.pause()

    def resume_writing(self) -> None:
        if self._exchange is not None:
            self._exchange.resume()

    # -- httptools callbacks ----------------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._request = _Request(headers=[], body=[])
        self._receiving = True
        if self._exchange is None:
            self._arm(REQUEST_TIMEOUT_S)

    def on_url(self, url: bytes) -> None:
        self._request.url += url
        self._request.head_bytes += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        req = self._request
        req.head_bytes += len(name) + len(value)
        assert req.headers is not None
        if req.head_bytes > MAX_HEAD_BYTES or len(req.headers) >= MAX_HEADERS:
            req.problem = req.problem or (431, "the request's head is too large")
            return
        req.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        # curl and others wait for this before they send a body (the body is read here in full anyway).
        expect = next((v for k, v in self._request.headers or () if k == b"expect"), None)
        if expect is not None and expect.lower() == b"100-continue" and self._request.problem is None:
            self.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        req = self._request
        req.body_bytes += len(body)
        if req.body_bytes > self.gateway.settings.max_request_bytes:
            req.problem = req.problem or (413, f"the request body exceeds {self.gateway.settings.max_request_bytes} "
                                               "bytes")
            req.body = None
        elif req.body is not None:
            req.body.append(body)

    def on_message_complete(self) -> None:
        req = self._request
        self._receiving = False
        req.method = self.parser.get_method()
        req.keep_alive = self.parser.should_keep_alive()
        self._queue.append(req)
        if self._exchange is None:
            self._next()
        elif self.transport is not None:
            self.transport.pause_reading()  # one at a time: a pipelining client waits in the kernel

    # -- serving --------------------------------------------------------------------------------
    def _next(self) -> None:
        if self.closed or not self._queue:
            return
        req = self._queue.popleft()
        self._disarm()
        self._exchange = _Exchange(self, req)
        self._exchange.start()

    def exchange_done(self, keep_alive: bool) -> None:
        self._exchange = None
        if not keep_alive or self.closed:
            self.close()
            return
        if self.transport is not None:
            self.transport.resume_reading()
        self._arm(KEEPALIVE_IDLE_S)
        self._next()

    def write(self, data: bytes) -> None:
        if not self.closed and self.transport is not None:
            self.transport.write(data)

    def answer_error(self, status: int, message: str, *, keep_alive: bool, retry: bool = False,
                     request_id: str = "") -> None:
        """An Anthropic-shaped error answer of the gateway's own."""
        self.gateway.refused += 1
        request_id = request_id or "req_gateway_" + secrets.token_hex(12)
        body = msgspec.json.encode({"type": "error", "error": {"type": _ERROR_TYPES.get(status, "api_error"),
                                                               "message": message}, "request_id": request_id})
        head = [b"HTTP/1.1 %d %s" % (status, _REASONS.get(status, b"Error")),
                b"content-type: application/json", b"content-length: %d" % len(body),
                b"request-id: " + request_id.encode(), b"x-should-retry: " + (b"true" if retry else b"false")]
        if not keep_alive:
            head.append(b"connection: close")
        self.write(b"\r\n".join(head) + b"\r\n\r\n" + body)

    def _answer_and_close(self, status: int, message: str) -> None:
        self.answer_error(status, message, keep_alive=False)
        self.close()

    def close(self) -> None:
        if not self.closed and self.transport is not None:
            self.closed = True
            self.transport.close()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._timer = self._loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        if self._exchange is None and self._receiving:
            self._answer_and_close(408, f"the request did not arrive within {REQUEST_TIMEOUT_S:g} s")
        else:
            self.close()


class _Exchange:
    """One request: checked, forwarded, and its answer streamed back and metered (upstream.Receiver)."""

    def __init__(self, client: _ClientConnection, request: _Request) -> None:
        self.client = client
        self.request = request
        self.gateway = client.gateway
        self.grant: Grant | None = None
        self.model: str | None = None
        self._plain = b""
        self.status = 0
        self.meter: UsageMeter | None = None
        self.upstream: UpstreamConnection | None = None
        self.request_id = ""
        self.retry_after_ns: int | None = None
        self._chunked = False
        self._sent_head = False
        self._retried = False
        self._done = False
        self._timer: IdleTimer | None = None
        self._head: bytes = b""
        self._body: bytes = b""
        self._held = 0  # where the part of the body held back until the check passed starts

    def start(self) -> None:
        req = self.request
        if req.problem is not None:
            self._refuse(*req.problem)
            return
        try:
            url = httptools.parse_url(req.url)
        except httptools.HttpParserInvalidURLError:
            self._refuse(400, "the request target is not a valid URL")
            return
        path = url.path.decode("latin-1")
        if not served(req.method, path):
            self._refuse(404, f"the gateway serves the Messages and Models API only, not {req.method.decode()} {path}")
            return
        self.grant = self.gateway.capabilities.grant(presented_api_capability(req.headers or []))
        if self.grant is None:
            self._refuse(401, "invalid x-api-key: this gateway accepts only the capability of a running phase")
            return
        body = b"".join(req.body or ())
        target = self.gateway.settings.upstream.base_path.encode() + url.path
        if url.query:
            target += b"?" + url.query
        head: bytes | None = None
        try:
            head = self._upstream_head(req.method, target, req.headers or [], len(body))
        except (OSError, ValueError) as exc:  # the key file: unreadable or empty (logged, no key in it)
            unreadable = UpstreamError(f"the server cannot read its API key ({type(exc).__name__})")
        if req.method == b"POST":
            early = self._send_before_check(head, body, req.headers or []) if head is not None else None
            if self._checked_body(body, req.headers or []) is None:
                if early is not None:  # the rest never goes: the API holds no whole body, nor JSON
                    early.abort()
                    self.upstream = None
                return
            if early is not None:
                self._head, self._body = head, body  # for a retry on a new connection
                early.send_more(memoryview(body)[self._held:])
                return
        if head is None:
            self._upstream_failed(unreadable)
            return
        self._head, self._body = head, body
        idle = self.gateway.pool.idle()
        if idle is None:
            asyncio.ensure_future(self._forward())
        else:  # the usual case: no task, no turn of the loop before the request is on its way
            self._send(idle)

    def _send_before_check(self, head: bytes, body: bytes, headers: list[tuple[bytes, bytes]]) -> UpstreamConnection | None:
        """When the body's model is to be checked (a project allowlist) and a kept-alive API
        connection is idle: writes the head and the body up to its last ``}`` now, so the API
        receives it while the gateway parses (over a network, the transfer is most of the time);
        the caller sends the rest once the check passed, or closes the connection. What the API
        then holds is a body its ``content-length`` says is incomplete and no complete JSON value
        (a valid body's last ``}`` closes it), so neither a server that checks its framing nor one
        that parses what it got can run it. Not for a compressed body, whose cut stream might still
        inflate to all of it; not on a new connection (nothing could be sent before it is made)."""
        if self.grant is None or self.grant.models is None or self.client.closed:
            return None
        encoding = next((v.lower() for k, v in headers if k == b"content-encoding"), b"identity")
        cut = body.rfind(b"}")
        if encoding != b"identity" or cut <= 0:
            return None
        connection = self.gateway.pool.idle()
        if connection is None:
            return None
        self.upstream = connection
        self._held = cut
        self._arm()
        connection.send(head, memoryview(body)[:cut], self)
        return connection

    def _checked_body(self, body: bytes, headers: list[tuple[bytes, bytes]]) -> bytes | None:
        """The body to forward (as it came), once its model passed the project's allowlist; None
        once refused."""
        assert self.grant is not None
        plain = body
        encoding = next((v.lower() for k, v in headers if k == b"content-encoding"), b"identity")
        if encoding in (b"gzip", b"deflate"):
            try:
                inflater = zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib, detected
                plain = inflater.decompress(body, self.gateway.settings.max_request_bytes)
                if inflater.unconsumed_tail:
                    self._refuse(413, "the decompressed request body is too large")
                    return None
            except zlib.error:
                self._refuse(400, "the request body does not decompress")
                return None
        elif encoding != b"identity":
            self._refuse(400, f"content-encoding {encoding.decode('latin-1')} is not supported by the gateway")
            return None
        self._plain = plain  # the model is read from it only when something needs it (request_model)
        allowlist = self.grant.models
        features = self.grant.features
        check_features = not features >= ALL_FEATURES
        if allowlist is None and not check_features:
            return body
        try:
            fields = _decode_top(plain)
        except (msgspec.DecodeError, msgspec.ValidationError):
            self._refuse(400, "the request body is not a JSON object; the gateway cannot check it")
            return None
        # The API gets these bytes: a key twice could show this check one model and the API another
        # (parsers keep the first or the last), so each top-level key must come once.
        try:
            twice = duplicate_key(plain, fields)
        except ValueError as exc:  # not expected of a body msgspec decoded; refused all the same
            log.warning("gateway could not walk a request body's keys", extra={"fields": {**self._fields(),
                                                                                       "error": str(exc)}})
            twice = "(unreadable)"
        if twice is not None:
            self._refuse(400, f"the request body has the top-level key {twice!r} twice; the gateway forwards a "
                              "body only when every reader reads it alike")
            return None
        if check_features and self._refused_feature(plain, features):
            return None
        if allowlist is None:
            return body
        raw = fields.get("model")
        value = msgspec.json.decode(raw) if raw is not None else ""
        self.model = value if isinstance(value, str) else ""
        if not isinstance(value, str) or not allowlist.allows(value):
            shown = value if isinstance(value, str) else "(not a string)"
            message = (f"model {shown or '(none)'} is not allowed for project {self.grant.project}; allowed: "
                       f"{', '.join(allowlist.patterns) or 'none'}")
            log.info("gateway refused a model", extra={"fields": {**self._fields(), "model": shown}})
            self._notify(GatewayEventKind.MODEL_REFUSED, 403, message)
            self._refuse(403, message, counted=True)
            return None
        return body

    def _refused_feature(self, plain: bytes, allowed: frozenset[str]) -> bool:
        """Refuses the request (400, the API's error shape, and a FEATURE_REFUSED event) when it uses a
        feature that makes the API reach out and the grant does not allow it (domain/api_features.py)."""
        try:
            found = refused(plain, allowed)
        except BodyError as exc:
            self._refuse(400, f"the request body is not a Messages request the gateway can check: {exc}")
            return True
        if not found:
            return False
        first = found[0]
        others = sorted({f.feature for f in found[1:]} - {first.feature})
        message = (f"the gateway refused {first.feature} at {first.where} ({FEATURES[first.feature]}): the API would "
                   f"reach out with this phase's data; allow it by name in PhaseOptions.api_features or the server's "
                   f"api_features_allow" + (f" (also used: {', '.join(others)})" if others else ""))
        log.info("gateway refused an API feature", extra={"fields": {**self._fields(), "feature": first.feature,
                                                                     "where": first.where}})
        self._notify(GatewayEventKind.FEATURE_REFUSED, 400, message)
        self._refuse(400, message, counted=True)
        return True

    def _upstream_head(self, method: bytes, target: bytes, headers: list[tuple[bytes, bytes]], length: int) -> bytes:
        settings = self.gateway.settings
        lines = [b"%s %s HTTP/1.1" % (method, target), b"host: " + settings.upstream.host_header]
        lines += [k + b": " + v for k, v in headers if k not in _HOP_BY_HOP and k not in _REPLACED]
        if settings.api_key is not None:
            lines.append(b"x-api-key: " + settings.api_key().encode())
        # The answer is metered as it passes: ask for it uncompressed (the CLI accepts that too).
        lines += [b"accept-encoding: identity", b"content-length: %d" % length]
        return b"\r\n".join(lines) + b"\r\n\r\n"

    async def _forward(self) -> None:
        try:
            connection = await self.gateway.pool.connection()
        except UpstreamError as exc:
            self._upstream_failed(exc)
            return
        self._send(connection)

    def _send(self, connection: UpstreamConnection) -> None:
        self.upstream = connection
        if self.client.closed:
            connection.abort()
            self._finish(keep_alive=False)
            return
        self._arm()
        connection.send(self._head, self._body, self)

    @property
    def request_model(self) -> str:
        """The request's ``model`` (read from its body the first time it is asked for)."""
        if self.model is None:
            try:
                self.model = _decode_head(self._plain).model
            except (msgspec.DecodeError, msgspec.ValidationError):
                self.model = ""
        return self.model

    # -- upstream.Receiver -------------------------------------------------------------------------
    def on_head(self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]]) -> None:
        self._arm()
        self.status = status
        content_type = b""
        length = None
        lines = [b"HTTP/1.1 %d %s" % (status, reason)]
        for name, value in headers:
            if name == b"content-length":
                length = value
            elif name == b"content-type":
                content_type = value
            elif name == b"request-id":
                self.request_id = value.decode("latin-1")
            elif name == b"retry-after":
                self.retry_after_ns = _seconds_ns(value)
            if name not in _HOP_BY_HOP:
                lines.append(name + b": " + value)
        self.meter = UsageMeter(streaming=content_type.startswith(b"text/event-stream"))
        if length is not None:
            lines.append(b"content-length: " + length)
        elif status in (204, 304) or status < 200:
            pass  # no body, no framing
        else:
            self._chunked = True
            lines.append(b"transfer-encoding: chunked")
        if not self.request.keep_alive:
            lines.append(b"connection: close")
        self._sent_head = True
        self.client.write(b"\r\n".join(lines) + b"\r\n\r\n")

    def on_body(self, chunk: bytes) -> None:
        self._arm()
        self.client.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if self._chunked else chunk)
        if self.meter is not None:
            self.meter.feed(chunk)

    def on_end(self) -> None:
        if self._chunked:
            self.client.write(b"0\r\n\r\n")
        self._report()
        self._finish(keep_alive=self.request.keep_alive)

    def on_failure(self, error: UpstreamError, answered: bool) -> None:
        if self._done:
            return
        upstream, self.upstream = self.upstream, None
        if not answered and upstream is not None and upstream.reused and not self._retried:
            # A kept-alive connection the API had closed meanwhile: nothing was answered, try a new one.
            self._retried = True
            asyncio.ensure_future(self._reconnect())
            return
        if self._sent_head:  # the client has part of an answer: cut its connection so it sees the break
            log.warning("the API broke off an answer", extra={"fields": {**self._fields(), "error": str(error)}})
            self._report()
            self.client.abort()
            self._finish(keep_alive=False)
        else:
            self._upstream_failed(error)

    async def _reconnect(self) -> None:
        try:
            self.upstream = await self.gateway.pool.connect()
        except UpstreamError as exc:
            self._upstream_failed(exc)
            return
        self._arm()
        self.upstream.send(self._head, self._body, self)

    # -- flow control and the client -------------------------------------------------------------
    def pause(self) -> None:
        if self.upstream is not None:
            self.upstream.pause()

    def resume(self) -> None:
        if self.upstream is not None:
            self.upstream.resume()

    def client_gone(self) -> None:
        if self._done:
            return
        if self.upstream is not None:
            self.upstream.abort()
        if self._sent_head:
            self._report()
        self._finish(keep_alive=False)

    # -- endings ----------------------------------------------------------------------------------
    def _refuse(self, status: int, message: str, *, counted: bool = False) -> None:
        if self.grant is not None and not counted:
            log.info("gateway refused a request", extra={"fields": {**self._fields(), "status": status,
                                                                   "reason": message}})
        elif not counted:
            self.gateway.unauthenticated.warning(status=status, reason=message)
        keep_alive = self.request.keep_alive and status not in (400, 408, 413, 431)
        self.client.answer_error(status, message, keep_alive=keep_alive)
        self._finish(keep_alive=keep_alive)

    def _upstream_failed(self, error: UpstreamError) -> None:
        log.error("the gateway cannot reach the API", extra={"fields": {**self._fields(), "error": str(error)}})
        self._notify(GatewayEventKind.UPSTREAM_FAILED, 502, str(error))
        self.client.answer_error(502, f"the gateway cannot reach the API: {error}", keep_alive=self.request.keep_alive,
                                 retry=True)
        self._finish(keep_alive=self.request.keep_alive)

    def _report(self) -> None:
        """The answer is over: its usage and, for a 429 / 529 or an error mid-stream, an event."""
        if self.grant is None or self.meter is None:
            return
        meter = self.meter
        meter.finish()
        model = meter.model or self.request_model
        tell(self.grant.sink.on_response, model, self.status, meter.usage)
        kind = None
        if self.status == 429:
            kind = GatewayEventKind.RATE_LIMITED
        elif self.status == 529 or meter.error_type == "overloaded_error":
            kind = GatewayEventKind.OVERLOADED
        if kind is not None:
            where = " (mid-stream)" if self.status == 200 else ""
            message = f"{meter.error_type or 'error'}{where}: {meter.error_message}".strip(": ")
            log.warning("the API answered a phase's request with a rate limit or an overload",
                        extra={"fields": {**self._fields(), "status": self.status, "model": model,
                                          "retry_after_ns": self.retry_after_ns, "request_id": self.request_id}})
            self._notify(kind, self.status, message, model=model)

    def _notify(self, kind: GatewayEventKind, status: int, message: str, *, model: str | None = None) -> None:
        if self.grant is None:
            return
        tell(self.grant.sink.on_event, GatewayEvent(
            kind=kind, http_status=status, model=model if model is not None else self.request_model,
            message=message[:MAX_EVENT_MESSAGE], retry_after_ns=self.retry_after_ns, request_id=self.request_id))

    def _finish(self, *, keep_alive: bool) -> None:
        if self._done:
            return
        self._done = True
        if self._timer is not None:
            self._timer.cancel()
        self.client.exchange_done(keep_alive)

    def _arm(self) -> None:
        """The API is still there (its answer moved): the idle timeout starts over."""
        if self._timer is None:
            self._timer = IdleTimer(UPSTREAM_IDLE_S, self._idle)
            self._timer.start()
        else:
            self._timer.touch()

    def _idle(self) -> None:
        if self.upstream is not None:
            self.upstream.abort()
            self.upstream = None
        self.on_failure(UpstreamError(f"the API sent nothing for {UPSTREAM_IDLE_S:g} s"), self._sent_head)

    def _fields(self) -> dict[str, str]:
        if self.grant is None:
            return {}
        return {"job_id": self.grant.job_id, "phase_id": self.grant.phase_id, "project": self.grant.project}


def _seconds_ns(value: bytes) -> int | None:
    try:
        seconds = float(value)
    except ValueError:
        return None
    return int(seconds * 1e9) if 0 <= seconds < 86400 * 7 else None

