"""The egress proxy: authentication, the policy on names and on resolved addresses, DNS rebinding,
tunnels and forwarded plain HTTP, refusals reported to the phase."""

from __future__ import annotations

import asyncio
import base64
import ipaddress

import pytest
from support.egress import RecordingSink

from helix_runner.domain.addresses import OperatorExceptions
from helix_runner.domain.events import GatewayEventKind
from helix_runner.egress.allowlist import DomainPattern, EgressPolicy
from helix_runner.egress.capabilities import Capabilities, Grant
from helix_runner.egress.proxy import EgressProxy, ProxySettings, system_connector

PUBLIC = ipaddress.ip_address("93.184.216.34")
OTHER_PUBLIC = ipaddress.ip_address("151.101.0.223")
PRIVATE = ipaddress.ip_address("10.0.0.7")
METADATA = ipaddress.ip_address("169.254.169.254")


class World:
    """A pretend network: a resolver answering from a table (or a sequence per name), and a connector
    that records every address it is asked for and reaches the test's local server for the public ones."""

    def __init__(self, target_port: int, answers: dict[str, list]) -> None:
        self.target_port = target_port
        self.answers = answers
        self.resolved: list[str] = []
        self.connected: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
        self.unreachable: set = set()

    async def resolve(self, host: str, port: int):
        self.resolved.append(host)
        answer = self.answers.get(host)
        if answer is None:
            raise OSError(-2, "Name or service not known")
        if callable(answer):
            return answer()
        return list(answer)

    async def connect(self, factory, ip, port):
        self.connected.append(ip)
        if ip in self.unreachable:
            raise OSError(113, "No route to host")
        if ip.is_loopback:  # the operator's exception in a test: the local server itself
            return await system_connector(factory, ip, port)
        return await system_connector(factory, ipaddress.ip_address("127.0.0.1"), self.target_port)


@pytest.fixture
async def echo_server():
    """A TCP server that answers a plain HTTP request with what it saw, or echoes raw bytes."""
    seen: list[bytes] = []

    async def serve(reader, writer):
        data = await reader.read(65536)
        seen.append(data)
        if data.startswith((b"GET ", b"POST ")):
            body = b"got:" + data.split(b"\r\n", 1)[0]
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        else:
            writer.write(b"echo:" + data)
            while data := await reader.read(65536):
                writer.write(b"echo:" + data)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    server.seen = seen
    yield server
    server.close()


async def ended(sink: RecordingSink, limit_s: float = 5.0) -> list:
    """The sink's events once a connection's end was reported (bounded wait)."""
    deadline = asyncio.get_running_loop().time() + limit_s
    while not any(e.kind is GatewayEventKind.EGRESS_CONNECTION for e in sink.events):
        assert asyncio.get_running_loop().time() < deadline, sink.events
        await asyncio.sleep(0.01)
    return list(sink.events)


def auth(capability: str) -> bytes:
    return b"Proxy-Authorization: Basic " + base64.b64encode(b"phase:" + capability.encode()) + b"\r\n"


async def exchange(port: int, request: bytes, then: bytes | None = None) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    if then is None:
        answer = await asyncio.wait_for(reader.read(), 5)
    else:
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        writer.write(then)
        await writer.drain()
        answer += await asyncio.wait_for(reader.readexactly(len(b"echo:") + len(then)), 5)
    writer.close()
    return answer


@pytest.fixture
async def proxy(echo_server):
    caps = Capabilities()
    world = World(echo_server.sockets[0].getsockname()[1], {
        "pypi.org": [PUBLIC],
        "files.pythonhosted.org": [OTHER_PUBLIC],
        "internal.example.com": [PRIVATE],
        "metadata.example.com": [METADATA],
        "localhost.example.com": [ipaddress.ip_address("127.0.0.1")],
    })
    server = await EgressProxy(ProxySettings(), caps, resolver=world.resolve, connector=world.connect).start()
    server.world, server.caps = world, caps
    yield server
    await server.stop()


def policy(**kwargs) -> EgressPolicy:
    return EgressPolicy(allowlist=(DomainPattern("pypi.org"), DomainPattern("pythonhosted.org", wildcard=True),
                                   DomainPattern("internal.example.com"), DomainPattern("metadata.example.com"),
                                   DomainPattern("localhost.example.com")), **kwargs)


def phase_grant(sink: RecordingSink, phase: str = "p1", **kwargs) -> Grant:
    return Grant(job_id="job", phase_id=phase, project="proj", sink=sink, egress=policy(**kwargs))


async def test_a_request_without_a_live_capability_is_refused_407(proxy) -> None:
    revoked = proxy.caps.issue(phase_grant(RecordingSink()))
    proxy.caps.revoke(revoked)
    for header in (b"", auth("helix-cap-guessed"), auth(revoked)):
        answer = await exchange(proxy.port, b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n" + header + b"\r\n")
        assert answer.startswith(b"HTTP/1.1 407 ") and b'proxy-authenticate: Basic realm="helix-runner egress"' in answer
    assert proxy.world.resolved == [] and proxy.world.connected == []


async def test_an_allowed_name_gets_a_tunnel_to_its_checked_address(proxy, echo_server) -> None:
    sink = RecordingSink()
    cap = proxy.caps.issue(phase_grant(sink))
    answer = await exchange(proxy.port, b"CONNECT files.pythonhosted.org:443 HTTP/1.1\r\n" + auth(cap) + b"\r\n",
                            then=b"\x16\x03\x01hello")
    assert answer == b"HTTP/1.1 200 Connection Established\r\n\r\necho:\x16\x03\x01hello"
    assert proxy.world.connected == [OTHER_PUBLIC]
    assert sink.connections == ["files.pythonhosted.org:443"]
    # Once it ended, the phase's stream is told what went through: no refusal, one connection.
    (event,) = await ended(sink)
    assert (event.kind, event.destination, event.method, event.path) == (
        GatewayEventKind.EGRESS_CONNECTION, "files.pythonhosted.org:443", "CONNECT", "")
    assert (event.bytes_sent, event.bytes_received) == (len(b"\x16\x03\x01hello"), len(b"echo:\x16\x03\x01hello"))
    assert event.duration_ns > 0


async def test_plain_http_is_forwarded_without_the_proxy_credentials(proxy, echo_server) -> None:
    sink = RecordingSink()
    cap = proxy.caps.issue(phase_grant(sink))
    answer = await exchange(proxy.port, b"GET http://pypi.org/simple/pkg/?x=1 HTTP/1.1\r\nHost: pypi.org\r\n"
                            + auth(cap) + b"Proxy-Connection: keep-alive\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 OK") and answer.endswith(b"got:GET /simple/pkg/?x=1 HTTP/1.1")
    (forwarded,) = echo_server.seen
    assert b"proxy-authorization" not in forwarded.lower() and b"proxy-connection" not in forwarded.lower()
    assert cap.encode() not in forwarded
    assert b"connection: close" in forwarded
    (event,) = await ended(sink)
    assert (event.kind, event.destination, event.method, event.path) == (
        GatewayEventKind.EGRESS_CONNECTION, "pypi.org:80", "GET", "/simple/pkg/")
    assert event.bytes_sent == len(forwarded) and event.bytes_received == len(answer)


@pytest.mark.parametrize(("target", "why"), [
    (b"evil.example.net:443", b"not in the phase's egress allowlist"),
    (b"pythonhosted.org:443", b"not in the phase's egress allowlist"),  # the wildcard is below it only
    (b"pypi.org:22", b"port 22 is not allowed"),
    (b"93.184.216.34:443", b"IP addresses are not allowed"),
    (b"internal.example.com:443", b"a private address"),
    (b"metadata.example.com:80", b"a link-local address"),
    (b"localhost.example.com:443", b"a loopback address"),
    (b"[::1]:443", b"IP addresses are not allowed"),
])  # fmt: skip
async def test_refused_destinations_are_answered_403_and_reported(proxy, target, why) -> None:
    sink = RecordingSink()
    cap = proxy.caps.issue(phase_grant(sink))
    answer = await exchange(proxy.port, b"CONNECT " + target + b" HTTP/1.1\r\n" + auth(cap) + b"\r\n")
    assert answer.startswith(b"HTTP/1.1 403 Forbidden") and why in answer
    assert proxy.world.connected == []
    (event,) = sink.events
    assert event.kind is GatewayEventKind.EGRESS_REFUSED and event.destination.encode() == target
    assert why.decode() in event.message


async def test_a_name_answering_public_then_private_cannot_rebind_the_connection(proxy) -> None:
    """The check and the connection use one resolution: a resolver that answers a public address
    first and a private one the second time never gets its private address connected to."""
    answers = iter([[PUBLIC], [PRIVATE]])
    proxy.world.answers["rebind.pypi.org"] = lambda: next(answers)
    sink = RecordingSink()
    cap = proxy.caps.issue(Grant(job_id="job", phase_id="p", project="proj", sink=sink,
                                 egress=policy().with_entries([DomainPattern("pypi.org", wildcard=True)])))
    answer = await exchange(proxy.port, b"CONNECT rebind.pypi.org:443 HTTP/1.1\r\n" + auth(cap) + b"\r\n",
                            then=b"x")
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert proxy.world.resolved == ["rebind.pypi.org"] and proxy.world.connected == [PUBLIC]


async def test_a_private_address_behind_an_unreachable_public_one_is_never_tried(proxy) -> None:
    """One answer, public first and private second: when the public address does not answer, the
    proxy does not fall back to the private one (it was refused at the check)."""
    proxy.world.answers["multi.pypi.org"] = [PUBLIC, PRIVATE, METADATA]
    proxy.world.unreachable.add(PUBLIC)
    sink = RecordingSink()
    cap = proxy.caps.issue(Grant(job_id="job", phase_id="p", project="proj", sink=sink,
                                 egress=policy().with_entries([DomainPattern("pypi.org", wildcard=True)])))
    answer = await exchange(proxy.port, b"CONNECT multi.pypi.org:443 HTTP/1.1\r\n" + auth(cap) + b"\r\n")
    assert answer.startswith(b"HTTP/1.1 502 ")
    assert proxy.world.connected == [PUBLIC]


async def test_operator_exceptions_open_one_private_host_port_but_never_the_server_s_own(proxy, echo_server) -> None:
    echo_port = echo_server.sockets[0].getsockname()[1]
    sink = RecordingSink()
    exceptions = OperatorExceptions.parse([f"127.0.0.1:{echo_port}", f"127.0.0.1:{proxy.port}"])
    cap = proxy.caps.issue(phase_grant(sink, exceptions=exceptions, own_ports=frozenset({proxy.port})))
    ok = await exchange(proxy.port, f"CONNECT 127.0.0.1:{echo_port} HTTP/1.1\r\n".encode() + auth(cap) + b"\r\n",
                        then=b"ping")
    assert ok.endswith(b"echo:ping")
    own = await exchange(proxy.port, f"CONNECT 127.0.0.1:{proxy.port} HTTP/1.1\r\n".encode() + auth(cap) + b"\r\n")
    assert own.startswith(b"HTTP/1.1 403 ") and b"the server's own ports" in own
    other = await exchange(proxy.port, f"CONNECT 127.0.0.1:{echo_port + 1} HTTP/1.1\r\n".encode() + auth(cap)
                           + b"\r\n")
    assert other.startswith(b"HTTP/1.1 403 ")


async def test_each_phase_has_its_own_policy(proxy) -> None:
    narrow = Grant(job_id="job", phase_id="p2", project="proj", sink=RecordingSink(),
                   egress=EgressPolicy(allowlist=(DomainPattern("files.pythonhosted.org"),)))
    cap = proxy.caps.issue(narrow)
    refused = await exchange(proxy.port, b"CONNECT pypi.org:443 HTTP/1.1\r\n" + auth(cap) + b"\r\n")
    assert refused.startswith(b"HTTP/1.1 403 ")


async def test_requests_that_are_not_proxy_requests_are_answered_400(proxy) -> None:
    cap = proxy.caps.issue(phase_grant(RecordingSink()))
    origin_form = await exchange(proxy.port, b"GET /simple/ HTTP/1.1\r\nHost: pypi.org\r\n" + auth(cap) + b"\r\n")
    assert origin_form.startswith(b"HTTP/1.1 400 ")
    garbage = await exchange(proxy.port, b"\x16\x03\x01 not http\r\n\r\n")
    assert garbage.startswith(b"HTTP/1.1 400 ")
    huge = await exchange(proxy.port, b"CONNECT pypi.org:443 HTTP/1.1\r\nX-Big: " + b"y" * 20_000 + b"\r\n\r\n")
    assert huge.startswith(b"HTTP/1.1 400 ")
    assert proxy.world.connected == []
