"""The egress proxy: a phase's only way to the network besides the model API, on 127.0.0.1.

An HTTP proxy: ``CONNECT host:port`` opens a tunnel (HTTPS, git, anything over TLS), an
absolute-URI request (``GET http://host/path``) is forwarded once over a new connection (plain
HTTP). Every request must carry its phase's capability as ``Proxy-Authorization: Basic`` (the
phase's ``HTTP(S)_PROXY`` is ``http://phase:<capability>@127.0.0.1:<port>``), so each phase gets
its own policy and nothing else on the host can use the proxy as an open relay.

For each request the proxy checks the name against the phase's policy (allowlist.py), resolves it
itself, checks every address it would connect to (addresses.py: no loopback, private, link-local,
metadata, multicast or unspecified address unless the operator allowed that host:port; never one of
the server's own ports), and connects only to an address it checked, so a name that answers
differently the second time (DNS rebinding) gains nothing. Refusals are answered with a short text
saying why (403) and reported to the phase's grant, which shows them in its stream.

A ``CONNECT`` to a host the phase has vault secrets or HTTP rules for is terminated instead of
tunnelled (interception.py): the proxy verifies the upstream, answers with a leaf of the server's
CA, and reads each request inside, checks it against the rules, adds the secrets and forwards it.
A plain HTTP request is checked against the rules too; a secret is never added to one.

Bounded: a head of at most 16 KiB within 30 s, a connection within 10 s, a tunnel idle for at
most 5 minutes, at most 128 connections per phase (``egress_max_connections_per_phase``: the next
is answered 503) and 1024 in all, and optionally a number of bytes per phase
(``egress_max_bytes_per_phase``: past it the phase's connections are closed and it is stopped); each direction pauses reading
while the other side's write buffer is full (asyncio's high-water mark), so no buffer grows
beyond a socket's worth.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httptools

from helix_runner.domain.addresses import IPAddress, parse_ip, split_host_port
from helix_runner.domain.events import GatewayEvent, GatewayEventKind
from helix_runner.egress.capabilities import Capabilities, Grant, presented_proxy_capability, tell
from helix_runner.egress.idle_timer import IdleTimer
from helix_runner.egress.interception import Interceptor, with_secrets
from helix_runner.egress.log_throttle import LogThrottle

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 16 * 1024
HEAD_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 10.0
IDLE_TIMEOUT_S = 300.0
MAX_CONNECTIONS = 1024
MAX_CONNECTIONS_PER_PHASE = 128
CLIENT_GONE_POLL_S = 0.5  # how often a held request's client is checked for having gone away
_HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"proxy-authorization",
                         b"proxy-authenticate", b"te", b"trailer", b"upgrade"})

Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]
Connector = Callable[[Callable[[], asyncio.Protocol], IPAddress, int], Awaitable[tuple[asyncio.Transport, asyncio.Protocol]]]


async def system_resolver(host: str, port: int) -> list[IPAddress]:
    """The host's addresses, in the resolver's order, each once (OSError when it has none)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses: list[IPAddress] = []
    for _, _, _, _, sockaddr in infos:
        ip = parse_ip(str(sockaddr[0]))
        if ip is not None and ip not in addresses:
            addresses.append(ip)
    return addresses


async def system_connector(factory: Callable[[], asyncio.Protocol], ip: IPAddress, port: int):
    """A TCP connection to exactly ``ip`` (never a name: that would be resolved again)."""
    return await asyncio.get_running_loop().create_connection(factory, str(ip), port)


def is_local_address(ip: IPAddress) -> bool:
    """Whether ``ip`` is one of this machine's addresses (the kernel lets a socket bind only to those)."""
    if ip.is_loopback or ip.is_unspecified:
        return True
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind((str(ip), 0))
        except OSError:
            return False
    return True


@dataclass(frozen=True)
class ProxySettings:
    port: int = 0
    # Per phase: proxied connections open at once, and bytes moved both ways in all (0: no cap).
    max_connections_per_phase: int = MAX_CONNECTIONS_PER_PHASE
    max_bytes_per_phase: int = 0


class EgressProxy:
    """The proxy's listening socket and what its connections share."""

    def __init__(self, settings: ProxySettings, capabilities: Capabilities, *, resolver: Resolver | None = None,
                 connector: Connector = system_connector,
                 is_local: Callable[[IPAddress], bool] = is_local_address,
                 interceptor: Interceptor | None = None) -> None:
        self.settings = settings
        self.capabilities = capabilities
        self.interceptor = interceptor  # None: no TLS termination (a host with rules is then refused)
        self.resolver = resolver or system_resolver  # looked up now: a test may stand in for DNS
        self.connector = connector
        self.is_local = is_local
        self._server: asyncio.Server | None = None
        self.connections: set[_ProxyClient] = set()
        self.per_phase: dict[tuple[str, str], int] = {}
        self.unauthenticated = LogThrottle(log, "egress proxy: a request without a live phase capability")

    async def start(self) -> EgressProxy:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _ProxyClient(self), "127.0.0.1", self.settings.port)
        return self

    @property
    def port(self) -> int:
        assert self._server is not None, "the proxy is not started"
        return self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for conn in list(self.connections):
                conn.abort()
            await self._server.wait_closed()
            self._server = None


class _Upstream(asyncio.Protocol):
    """The connection to the destination: what it sends goes to the client as it is."""

    def __init__(self, client: _ProxyClient) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.client.from_upstream(data)

    def eof_received(self) -> bool | None:
        self.client.upstream_eof()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.upstream_lost()

    def pause_writing(self) -> None:
        if self.client.transport is not None:
            self.client.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.client.transport is not None and not self.client.closed:
            self.client.transport.resume_reading()


class _ProxyClient(asyncio.Protocol):
    """One connection of a phase's tool to the proxy: its request, then a tunnel or one forwarded exchange."""

    def __init__(self, proxy: EgressProxy) -> None:
        self.proxy = proxy
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.parser = httptools.HttpRequestParser(self)
        self.state = "head"  # head -> connecting -> tunnel | forward | handshake -> intercept
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_bytes = 0
        self.pending: list[bytes] = []  # the client's bytes that came before the destination answered
        self.chunked = False
        self.messages = 0  # a forwarded connection carries one request; what follows it is dropped
        self.grant: Grant | None = None
        self.destination = ""
        self.host = ""
        self.port = 0
        self.request_path = "/"  # a forwarded request's (the rules check it)
        self.upstream: _Upstream | None = None
        self._counted: tuple[str, str] | None = None
        self._gating: asyncio.Future | None = None  # the phase deciding on a held request (egress_gate)
        self._timer = IdleTimer(HEAD_TIMEOUT_S, self.close)
        # What the phase's stream is told when the connection ends (an EGRESS_CONNECTION event):
        # bytes each way once the destination answered, since when, and the last request seen.
        self.sent = 0
        self.received = 0
        self.opened_ns = 0
        self.method = ""
        self.path = ""
        self.rule = ""  # what let it through (EgressPolicy.deciding_entry, or an approval)

    # -- asyncio.Protocol ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if len(self.proxy.connections) >= MAX_CONNECTIONS:
            transport.abort()  # type: ignore[attr-defined]
            return
        self.proxy.connections.add(self)
        self._arm(HEAD_TIMEOUT_S)

    def data_received(self, data: bytes) -> None:
        if self.state == "tunnel":
            self._arm(IDLE_TIMEOUT_S)
            self._to_upstream(data)
            return
        if self.state == "handshake":  # a request that came with the tool's handshake: read once it is done
            self.pending.append(data)
            return
        if self.state in ("forward", "intercept"):
            self._arm(IDLE_TIMEOUT_S)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:
            if self.state == "intercept":
                self._answer(400, "protocol upgrades are not passed on a host the proxy terminates TLS for")
            elif self.parser.get_method() != b"CONNECT":
                self._answer(400, "upgrades are not proxied")
                return
            self.pending.append(data[upgrade.args[0]:])  # e.g. a TLS ClientHello sent right away
            self._begin(connect=True)
        except httptools.HttpParserError:
            self._answer(400, "the request is not valid HTTP/1.1")

    def eof_received(self) -> bool | None:
        if self.state == "tunnel" and self.upstream is not None and self.upstream.transport is not None \
                and self.upstream.transport.can_write_eof():
            self.upstream.transport.write_eof()  # the client is done sending; the answer may still come
            return True
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._disarm()
        if self._gating is not None and not self._gating.done():
            self._gating.cancel()  # a held request whose client went away is held no longer
        self.proxy.connections.discard(self)
        if self.grant is not None and self.opened_ns:
            opened, self.opened_ns = self.opened_ns, 0
            tell(self.grant.sink.on_event, GatewayEvent(
                kind=GatewayEventKind.EGRESS_CONNECTION, destination=self.destination, bytes_sent=self.sent,
                bytes_received=self.received, duration_ns=time.monotonic_ns() - opened,
                method=self.method, path=self.path[:1024], rule=self.rule[:1024]))
        if self._counted is not None:
            left = self.proxy.per_phase.get(self._counted, 1) - 1
            if left > 0:
                self.proxy.per_phase[self._counted] = left
            else:
                self.proxy.per_phase.pop(self._counted, None)
            self._counted = None
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()

    def pause_writing(self) -> None:
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.resume_reading()

    # -- httptools callbacks (the request head, then a forwarded request's body) ----------------------
    def on_message_begin(self) -> None:
        self.messages += 1
        if self.state == "intercept":  # each request inside a terminated connection is read anew
            self.url, self.headers, self.head_bytes, self.chunked = b"", [], 0, False

    def _ignored(self) -> bool:
        """A forwarded connection carries one request: what follows it is dropped."""
        return self.messages > 1 and self.state != "intercept"

    def on_url(self, url: bytes) -> None:
        if self._ignored():
            return
        self.url += url
        self._count(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._ignored():
            return
        self._count(len(name) + len(value))
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        if self.state == "intercept":
            self._intercepted_request()
        elif self.state == "head" and self.parser.get_method() != b"CONNECT":
            self._begin(connect=False)

    def on_body(self, body: bytes) -> None:
        if self._ignored():
            return
        if self.state not in ("forward", "intercept"):
            self.pending.append(self._frame(body))
        else:
            self._to_upstream(self._frame(body))

    def on_message_complete(self) -> None:
        if self.chunked and not self._ignored():
            if self.state in ("forward", "intercept"):
                self._to_upstream(b"0\r\n\r\n")
            else:
                self.pending.append(b"0\r\n\r\n")

    def _count(self, n: int) -> None:
        self.head_bytes += n
        if self.head_bytes > MAX_HEAD_BYTES:
            raise ValueError("head too large")  # httptools turns it into a parser error: answered 400

    def _frame(self, body: bytes) -> bytes:
        return b"%x\r\n%s\r\n" % (len(body), body) if self.chunked else body

    # -- the request ----------------------------------------------------------------------------
    def _begin(self, *, connect: bool) -> None:
        if self.transport is not None:
            self.transport.pause_reading()  # nothing more until the destination is decided
        self.state = "connecting"
        self.grant = self.proxy.capabilities.grant(
            presented_proxy_capability(next((v for k, v in self.headers if k == b"proxy-authorization"), None)))
        if self.grant is None:
            self.proxy.unauthenticated.warning(target=self.url[:200].decode("latin-1"))
            self._answer(407, "this proxy serves only the phases of this server (Proxy-Authorization: the phase's "
                              "capability)")
            return
        try:
            host, port, head = self._target(connect)
        except ValueError as exc:
            self._answer(400, str(exc))
            return
        self.destination = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.host, self.port = host, port
        key = (self.grant.job_id, self.grant.phase_id)
        if self.grant.traffic.over_limit:
            self._answer(403, self.grant.traffic.over_limit)
            return
        cap = self.proxy.settings.max_connections_per_phase
        if self.proxy.per_phase.get(key, 0) >= cap:
            why = f"the phase has {cap} proxied connections open already (egress_max_connections_per_phase)"
            tell(self.grant.sink.on_event, GatewayEvent(kind=GatewayEventKind.EGRESS_REFUSED, http_status=503,
                                                        message=why, destination=self.destination))
            self._answer(503, why)
            return
        self.proxy.per_phase[key] = self.proxy.per_phase.get(key, 0) + 1
        self._counted = key
        self._disarm()
        asyncio.ensure_future(self._open(host, port, head, connect))

    def _target(self, connect: bool) -> tuple[str, int, bytes]:
        """Host, port and (plain HTTP) the head to send on; ValueError saying what is wrong."""
        if connect:
            host, port = split_host_port(self.url.decode("latin-1"))
            if port is None or not host:
                raise ValueError("CONNECT needs host:port")
            return host, port, b""
        try:
            url = httptools.parse_url(self.url)
        except httptools.HttpParserInvalidURLError:
            raise ValueError("the request target is not a URL") from None
        if url.schema != b"http" or not url.host:
            raise ValueError("this is a proxy: send CONNECT host:port, or an absolute http:// URL")
        host = url.host.decode("latin-1")
        port = url.port or 80
        target = (url.path or b"/") + (b"?" + url.query if url.query else b"")
        self.request_path = _path_of(target)
        lines = [b"%s %s HTTP/1.1" % (self.parser.get_method(), target)]
        lines += [k + b": " + v for k, v in self.headers if k not in _HOP_BY_HOP]
        lines.append(b"connection: close")  # one exchange per connection: its end is the answer's end
        self.chunked = any(k == b"transfer-encoding" and b"chunked" in v.lower() for k, v in self.headers)
        return host, port, b"\r\n".join(lines) + b"\r\n\r\n"

    async def _open(self, host: str, port: int, head: bytes, connect: bool) -> None:
        grant = self.grant
        assert grant is not None
        policy = grant.egress
        why = policy.check_name(host, port)
        gate = getattr(grant.sink, "egress_gate", None)
        if gate is not None:  # network breakpoints and approvals (phases/egress_holds.py): may wait
            method = "CONNECT" if connect else self.parser.get_method().decode("latin-1")
            self._gating = asyncio.ensure_future(gate(host, port, method, "" if connect else self.request_path, why))
            watcher = asyncio.ensure_future(self._watch_client_gone(self._gating))
            try:
                why = await self._gating
            except asyncio.CancelledError:
                if self.closed:  # the tool gave up while its request was held (connection_lost)
                    return
                raise
            finally:
                self._gating = None
                watcher.cancel()
            if self.closed:
                return
            if why is not None and why.startswith("denied: "):
                self._refused(why.removeprefix("denied: "), denied=True)
                return
        addresses: list[IPAddress] = []
        if why is None:
            literal = parse_ip(host)
            if literal is not None:
                addresses = [literal]
            else:
                try:
                    addresses = await asyncio.wait_for(self.proxy.resolver(host, port), CONNECT_TIMEOUT_S)
                except (OSError, TimeoutError) as exc:
                    self._answer(502, f"cannot resolve {host}: {getattr(exc, 'strerror', None) or 'no answer'}")
                    return
            reasons = []
            allowed = []
            for ip in addresses:
                refused = policy.check_address(host, port, ip, local=port in policy.own_ports
                                               and self.proxy.is_local(ip))
                if refused is None:
                    allowed.append(ip)
                else:
                    reasons.append(refused)
            if not allowed:
                why = reasons[0] if reasons else f"{host} has no address"
            addresses = allowed
        if why is None and not connect:
            why = policy.check_request(host, port, self.parser.get_method().decode("latin-1"), self.request_path)
        intercept = connect and self._intercepts(grant, host, port)
        if why is None and intercept and self.proxy.interceptor is None:
            why = f"{host} has HTTP rules or secrets, and this server does not terminate TLS (no CA)"
        if why is not None:
            self._refused(why)
            return
        failure = ""
        for ip in addresses:  # only addresses checked above; the name is never resolved again
            if self.closed:
                return
            try:
                transport, upstream = await asyncio.wait_for(
                    self.proxy.connector(lambda: _Upstream(self), ip, port), CONNECT_TIMEOUT_S)
            except TimeoutError:
                failure = f"no connection to {ip}:{port} within {CONNECT_TIMEOUT_S:g} s"
                continue
            except OSError as exc:
                failure = f"cannot connect to {ip}:{port}: {exc.strerror or exc}"
                continue
            self.upstream = upstream  # type: ignore[assignment]
            break
        else:
            self._answer(502, failure or f"cannot connect to {self.destination}")
            return
        if self.closed:
            transport.close()
            return
        tell(grant.sink.on_egress_connection, self.destination)
        self.opened_ns = time.monotonic_ns()
        self.rule = policy.deciding_entry(host, port, "" if connect else self.parser.get_method().decode("latin-1"),
                                          "" if connect else self.request_path) or "approved (network breakpoint)"
        if connect and not intercept:
            self.method = "CONNECT"  # a tunnel: what goes through it is the tool's own TLS
        elif not connect:
            self.method, self.path = self.parser.get_method().decode("latin-1"), self.request_path
        log.debug("egress proxy connected", extra={"fields": {"job_id": grant.job_id, "phase_id": grant.phase_id,
                                                              "destination": self.destination,
                                                              "terminated": intercept}})
        if intercept:
            await self._intercept(host, transport)
            return
        if connect:
            self._write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            self.state = "tunnel"
        else:
            self._to_upstream(head)
            self.state = "forward"
        pending, self.pending = self.pending, []
        for part in pending:
            if part:
                self._to_upstream(part)
        self._arm(IDLE_TIMEOUT_S)
        if self.transport is not None:
            self.transport.resume_reading()

    async def _watch_client_gone(self, gating: asyncio.Future) -> None:
        """While a request is held the client's reading is paused, so its going away would go unseen:
        peek at the socket now and then, and end the hold when it closed (curl -m, a killed tool)."""
        sock = self.transport.get_extra_info("socket") if self.transport is not None else None
        if sock is None:
            return
        peek = socket.socket(fileno=os.dup(sock.fileno()))  # a second descriptor: closing it keeps the first
        try:
            peek.setblocking(False)
            while not gating.done():
                await asyncio.sleep(CLIENT_GONE_POLL_S)
                try:
                    if peek.recv(1, socket.MSG_PEEK) == b"":
                        self.closed = True
                        gating.cancel()
                        if self.transport is not None:
                            self.transport.close()
                        return
                except (BlockingIOError, InterruptedError):
                    continue  # still there, nothing sent
                except OSError:
                    self.closed = True
                    gating.cancel()
                    return
        finally:
            peek.close()

    # -- TLS termination (interception.py) ---------------------------------------------------------
    @staticmethod
    def _intercepts(grant: Grant, host: str, port: int) -> bool:
        return bool(grant.egress.http_rules(host, port)) or (
            grant.credentials is not None and grant.credentials.bound(host, port))

    async def _intercept(self, host: str, transport: asyncio.Transport) -> None:
        """TLS to the upstream (verified), the ``CONNECT`` answered, TLS with the tool (the server's
        leaf), then requests are read one by one (``_intercepted_request``)."""
        interceptor = self.proxy.interceptor
        assert interceptor is not None and self.upstream is not None
        if any(self.pending):
            self._answer(400, "a host the proxy terminates TLS for: send the handshake after the CONNECT answer")
            return
        loop = asyncio.get_running_loop()
        try:
            upstream_tls = await loop.start_tls(transport, self.upstream, interceptor.upstream_context,
                                                server_hostname=host, ssl_handshake_timeout=CONNECT_TIMEOUT_S)
        except ssl.SSLCertVerificationError as exc:
            self._answer(502, f"the certificate of {self.destination} is not trusted: "
                              f"{exc.verify_message or exc.reason}")
            return
        except (ssl.SSLError, OSError, TimeoutError) as exc:
            self._answer(502, f"no TLS with {self.destination}: {getattr(exc, 'reason', None) or 'handshake failed'}")
            return
        if self.closed or upstream_tls is None:
            return
        self.upstream.transport = upstream_tls  # type: ignore[assignment]
        self._write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        client = self.transport
        assert client is not None
        self.state = "handshake"  # what the TLS layer hands over before start_tls returns waits in pending
        try:
            client_tls = await loop.start_tls(client, self, interceptor.server_context(host), server_side=True,
                                              ssl_handshake_timeout=HEAD_TIMEOUT_S)
        except (ssl.SSLError, OSError, TimeoutError, ConnectionError):
            self.close()  # the tool does not trust the server's CA, or spoke no TLS
            return
        if client_tls is None or self.closed:
            return
        self.transport = client_tls  # type: ignore[assignment]
        self.state = "intercept"
        self.parser = httptools.HttpRequestParser(self)
        self.messages = 0
        self._arm(IDLE_TIMEOUT_S)
        pending, self.pending = self.pending, []
        for part in pending:
            if self.closed:
                return
            self.data_received(part)

    def _intercepted_request(self) -> None:
        """One request inside a terminated connection: checked against the host's rules, given its
        secrets, and forwarded (its body follows through ``on_body``)."""
        grant = self.grant
        assert grant is not None
        method = self.parser.get_method()
        target = self.url
        if not target.startswith(b"/"):  # absolute-form inside the tunnel: its path is what counts
            try:
                url = httptools.parse_url(target)
            except httptools.HttpParserInvalidURLError:
                self._answer(400, "the request target is not a URL")
                return
            target = (url.path or b"/") + (b"?" + url.query if url.query else b"")
        self.method, self.path = method.decode("latin-1"), _path_of(target)
        why = grant.egress.check_request(self.host, self.port, self.method, self.path)
        if why is not None:
            self._refused(why)
            return
        secrets = grant.credentials.for_host(self.host, self.port) if grant.credentials is not None else []
        headers = with_secrets(self.headers, secrets)
        self.chunked = any(k == b"transfer-encoding" and b"chunked" in v.lower() for k, v in headers)
        version = self.parser.get_http_version().encode("latin-1") or b"1.1"
        lines = [b"%s %s HTTP/%s" % (method, target, version), *(k + b": " + v for k, v in headers)]
        self._to_upstream(b"\r\n".join(lines) + b"\r\n\r\n")

    # -- relaying -------------------------------------------------------------------------------
    def _to_upstream(self, data: bytes) -> None:
        if self.upstream is not None and self.upstream.transport is not None and self._metered(len(data)):
            self.sent += len(data)
            self.upstream.transport.write(data)

    def from_upstream(self, data: bytes) -> None:
        self._arm(IDLE_TIMEOUT_S)
        if self._metered(len(data)):
            self.received += len(data)
            self._write(data)

    def _metered(self, n: int) -> bool:
        """Counts ``n`` bytes to the phase; False (and every connection of the phase closed, the phase
        told) once they pass ``max_bytes_per_phase``."""
        grant = self.grant
        if grant is None:
            return True
        traffic = grant.traffic
        traffic.bytes += n
        cap = self.proxy.settings.max_bytes_per_phase
        if not cap or traffic.bytes <= cap:
            return not traffic.over_limit
        if not traffic.over_limit:
            traffic.over_limit = (f"the phase moved more than {cap} bytes through the egress proxy "
                                  "(egress_max_bytes_per_phase)")
            log.warning("egress proxy: a phase passed its byte cap; its connections are closed", extra={
                "fields": {"job_id": grant.job_id, "phase_id": grant.phase_id, "limit": cap}})
            tell(grant.sink.on_event, GatewayEvent(kind=GatewayEventKind.EGRESS_REFUSED, http_status=403,
                                                   message=traffic.over_limit, destination=self.destination))
            tell(grant.sink.on_egress_limit, traffic.over_limit)
            for conn in [c for c in self.proxy.connections if c.grant is grant]:
                conn.abort()
        return False

    def upstream_eof(self) -> None:
        if self.state == "tunnel" and self.transport is not None and self.transport.can_write_eof():
            self.transport.write_eof()  # half-close, as TCP does: the client may still send
        else:
            self.close()

    def upstream_lost(self) -> None:
        self.close()

    # -- endings ----------------------------------------------------------------------------------
    def _refused(self, why: str, *, denied: bool = False) -> None:
        """A 403 saying why; ``denied``: a person refused the held request (its EGRESS_DENIED event
        is in the stream already), and the body is their reason, for the model to read."""
        grant = self.grant
        assert grant is not None
        log.info("egress proxy refused a destination", extra={"fields": {
            "job_id": grant.job_id, "phase_id": grant.phase_id, "destination": self.destination, "reason": why}})
        if denied:
            self._answer(403, f"egress to {self.destination} denied by the operator: {why}")
            return
        tell(grant.sink.on_event, GatewayEvent(kind=GatewayEventKind.EGRESS_REFUSED, http_status=403,
                                               message=why[:1024], destination=self.destination, rule=why[:1024],
                                               method=self._method_seen(),
                                               path="" if self._method_seen() in ("", "CONNECT") else self.request_path))
        self._answer(403, f"egress to {self.destination} refused: {why}")

    def _method_seen(self) -> str:
        """The method of the request being decided ("" before a request line was read)."""
        try:
            return self.parser.get_method().decode("latin-1") if self.url else ""
        except Exception:  # noqa: BLE001 - httptools raises before a method was parsed
            return ""

    def _answer(self, status: int, text: str) -> None:
        reason = {400: b"Bad Request", 403: b"Forbidden", 407: b"Proxy Authentication Required",
                  502: b"Bad Gateway", 503: b"Service Unavailable"}.get(status, b"Error")
        body = f"helix-runner egress proxy: {text}\n".encode()
        head = [b"HTTP/1.1 %d %s" % (status, reason), b"content-type: text/plain; charset=utf-8",
                b"content-length: %d" % len(body), b"connection: close"]
        if status == 407:
            head.append(b'proxy-authenticate: Basic realm="helix-runner egress"')
        self._write(b"\r\n".join(head) + b"\r\n\r\n" + body)
        self.close()

    def _write(self, data: bytes) -> None:
        if not self.closed and self.transport is not None:
            self.transport.write(data)

    def close(self) -> None:
        if not self.closed and self.transport is not None:
            self.closed = True
            self.transport.close()
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()
        if self.upstream is not None and self.upstream.transport is not None:
            with contextlib.suppress(Exception):
                self.upstream.transport.abort()

    def _arm(self, seconds: float) -> None:
        """Closes the connection after ``seconds`` without traffic (each call counts as traffic)."""
        self._timer.start(seconds)

    def _disarm(self) -> None:
        self._timer.cancel()


def _path_of(target: bytes) -> str:
    """A request target's path (no query, no fragment), as the server reads it."""
    return target.split(b"?", 1)[0].split(b"#", 1)[0].decode("latin-1") or "/"
