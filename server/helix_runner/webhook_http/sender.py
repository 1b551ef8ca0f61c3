"""One webhook POST, to an address checked after DNS resolution, with timeouts and a response-size cap.

The HTTP/1.1 client is ``httpcore2`` (the connection pool under ``httpx2``, which the server already
installs through ``genai-prices`` and ``mcp``), given a network backend of our own
(``CheckedBackend``): asked to connect to ``host:port``, it resolves the name once, checks every
address with the egress proxy's rules (``domain/addresses.py``: no loopback, private, link-local,
metadata, multicast or unspecified address unless ``webhook_private_allow`` names that host:port),
and connects to an address it checked, never to the name. So a name that answers a public address
to the check and a private one afterwards (DNS rebinding) gains nothing: the pool's TLS handshake
then runs on that connection with the URL's host as SNI and for certificate verification, and a
kept-alive connection is one that was checked when it was made. Redirects are not followed.

Bounded: the whole exchange within ``timeout_s`` (connect within ``connect_timeout_s``), at most
``max_response_bytes`` of the answer read (the rest is dropped with the connection); only the
status and ``Retry-After`` matter.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpcore2

from helix_runner.domain.addresses import IPAddress, OperatorExceptions, parse_ip, refusal

USER_AGENT = "helix-runner-webhooks/1"

Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]
# Opens a TCP connection to exactly this address (never a name: that would be resolved again).
Connector = Callable[[IPAddress, int, float | None, Iterable | None], Awaitable[httpcore2.AsyncNetworkStream]]


class DestinationRefused(httpcore2.ConnectError):
    """The URL's host resolved only to addresses the rules refuse (the message says which and why)."""


async def system_resolver(host: str, port: int) -> list[IPAddress]:
    """The host's addresses, in the resolver's order, each once (OSError when it has none)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses: list[IPAddress] = []
    for *_, sockaddr in infos:
        ip = parse_ip(str(sockaddr[0]))
        if ip is not None and ip not in addresses:
            addresses.append(ip)
    return addresses


_ANYIO = httpcore2.AnyIOBackend()


async def system_connector(ip: IPAddress, port: int, timeout: float | None,  # noqa: ASYNC109 (httpcore's)
                           socket_options: Iterable | None) -> httpcore2.AsyncNetworkStream:
    return await _ANYIO.connect_tcp(str(ip), port, timeout=timeout, socket_options=socket_options)


class CheckedBackend(httpcore2.AsyncNetworkBackend):
    """httpcore's network backend: resolve once, check every address, connect to a checked one."""

    def __init__(self, exceptions: OperatorExceptions, resolver: Resolver, connector: Connector):
        self.exceptions = exceptions
        self.resolver = resolver
        self.connector = connector

    # httpcore's interface passes its connect timeout in (hence ASYNC109).
    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,  # noqa: ASYNC109
                          local_address: str | None = None, socket_options: Iterable | None = None) -> httpcore2.AsyncNetworkStream:
        literal = parse_ip(host)
        if literal is not None:
            addresses = [literal]
        else:
            try:
                addresses = await asyncio.wait_for(self.resolver(host, port), timeout)
            except TimeoutError:
                raise httpcore2.ConnectTimeout(f"cannot resolve {host}: no answer within {timeout:g} s") from None
            except OSError as exc:
                raise httpcore2.ConnectError(f"cannot resolve {host}: {exc.strerror or exc}") from None
        allowed, reasons = [], []
        for ip in addresses:
            why = refusal(ip)
            if why is not None and not self.exceptions.allows(host, port, ip):
                reasons.append(f"{host} resolved to {ip}, a {why} address")
            else:
                allowed.append(ip)
        if not allowed:
            raise DestinationRefused(reasons[0] if reasons else f"{host} has no address")
        failure: Exception | None = None
        for ip in allowed:  # only addresses checked above; the name is never resolved again
            try:
                return await self.connector(ip, port, timeout, socket_options)
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout, OSError) as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(self, path: str, timeout: float | None = None,  # noqa: ASYNC109
                                  socket_options: Iterable | None = None) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.ConnectError("webhooks are delivered over TCP only")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


@dataclass(frozen=True)
class SenderSettings:
    timeout_s: float = 10.0
    connect_timeout_s: float = 5.0
    max_response_bytes: int = 64 * 1024
    exceptions: OperatorExceptions = field(default_factory=OperatorExceptions)
    # A PEM CA bundle to verify receivers' certificates with instead of the system's roots.
    ca_file: Path | None = None
    max_connections: int = 64


@dataclass(frozen=True)
class SendResult:
    """What one POST got: the status (None: no answer, ``error`` says why), its Retry-After, how long it took."""

    status_code: int | None
    latency_ns: int
    retry_after: str | None = None
    error: str = ""


class WebhookSender:
    """Posts webhook bodies; one connection pool (kept-alive connections per receiver) for the server."""

    def __init__(self, settings: SenderSettings, *, resolver: Resolver = system_resolver,
                 connector: Connector = system_connector):
        self.settings = settings
        context = (ssl.create_default_context(cafile=str(settings.ca_file)) if settings.ca_file is not None
                   else httpcore2.default_ssl_context())
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=context, max_connections=settings.max_connections, keepalive_expiry=30.0, retries=0,
            network_backend=CheckedBackend(settings.exceptions, resolver, connector))

    async def post(self, url: str, headers: Mapping[str, str], body: bytes) -> SendResult:
        s = self.settings
        start = time.monotonic_ns()
        request_headers = [(b"content-type", b"application/json"), (b"user-agent", USER_AGENT.encode()),
                           *((k.encode(), v.encode()) for k, v in headers.items())]
        timeouts = {"connect": s.connect_timeout_s, "read": s.timeout_s, "write": s.timeout_s, "pool": s.timeout_s}
        status, retry_after, error = None, None, ""
        try:
            async with asyncio.timeout(s.timeout_s):
                async with self._pool.stream("POST", url, headers=request_headers, content=body,
                                             extensions={"timeout": timeouts}) as response:
                    status = response.status
                    retry_after = next((v.decode("latin-1") for k, v in response.headers
                                        if k.lower() == b"retry-after"), None)
                    read = 0
                    async for chunk in response.aiter_stream():  # drained, so the connection can be reused
                        read += len(chunk)
                        if read > s.max_response_bytes:
                            break  # the rest is dropped with the connection
        except DestinationRefused as exc:
            error = f"destination refused: {exc}"
        except TimeoutError:
            error = f"no complete answer within {s.timeout_s:g} s"
        except httpcore2.TimeoutException as exc:
            error = f"timed out: {exc or type(exc).__name__}"
        except (httpcore2.NetworkError, httpcore2.ProtocolError, httpcore2.UnsupportedProtocol, ssl.SSLError,
                OSError) as exc:
            error = f"{type(exc).__name__}: {exc}"[:500] if str(exc) else type(exc).__name__
        if status is not None and error:
            error = ""  # the status line came; a body cut short does not change what it said
        return SendResult(status, time.monotonic_ns() - start, retry_after, error)

    async def close(self) -> None:
        await self._pool.aclose()
