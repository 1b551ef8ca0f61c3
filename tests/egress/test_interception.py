"""TLS termination in the egress proxy, over real sockets and real TLS: a secret added only on its
bound host (placeholders replaced, keep-alive requests each get it), HTTP rules refused with the
rule named, an untrusted upstream refused, and every other host a tunnel whose bytes are untouched."""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import ssl

import pytest
from support.certs import CertificateAuthority as InternalCA
from support.egress import RecordingSink

from helix_runner.domain.addresses import OperatorExceptions
from helix_runner.domain.egress_secrets import validate
from helix_runner.domain.events import GatewayEventKind
from helix_runner.egress.allowlist import EgressPolicy, parse_pattern
from helix_runner.egress.authority import CertificateAuthority
from helix_runner.egress.capabilities import Capabilities, Grant
from helix_runner.egress.interception import Interceptor
from helix_runner.egress.proxy import EgressProxy, ProxySettings, system_connector
from helix_runner.egress.vault import PhaseCredentials, Vault

TOKEN = b"s3cr3t-token-value"
OTHER_TOKEN = b"other-project-token"
PORTS = frozenset({443})
LOOPBACK = ipaddress.ip_address("127.0.0.1")


class Upstream:
    """A TLS HTTP/1.1 server (keep-alive) that records each request head and every raw byte."""

    def __init__(self, context: ssl.SSLContext | None) -> None:
        self.context = context
        self.heads: list[bytes] = []
        self.raw = bytearray()
        self.server: asyncio.Server | None = None

    async def start(self) -> Upstream:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.context)
        return self

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if self.context is None:  # a raw recorder: what arrives is kept, nothing is answered but an echo
                while data := await reader.read(65536):
                    self.raw += data
                    writer.write(b"seen")
                return
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.heads.append(head)
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                if length:
                    await reader.readexactly(length)
                body = b"ok " + head.split(b" ", 2)[1]
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


@pytest.fixture
async def network(tmp_path):
    """Two TLS upstreams with certificates of an 'internal' CA, a raw one, a proxy that terminates
    with the server's CA and trusts the internal CA upstream; names resolve to loopback."""
    internal = InternalCA(tmp_path / "internal", "internal CA")
    leaf = internal.issue("git", dns=("git.example.test", "api.example.test", "other.example.test"), client=False)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(leaf.cert_file, leaf.key_file)
    git = await Upstream(context).start()
    api = await Upstream(context).start()
    raw = await Upstream(None).start()
    ports = {"git.example.test": git.port, "api.example.test": api.port, "other.example.test": raw.port,
             "untrusted.example.test": git.port}

    async def resolve(host: str, port: int):
        if host not in ports:
            raise OSError(-2, "Name or service not known")
        return [LOOPBACK]

    async def connect(factory, ip, port):
        return await system_connector(factory, ip, port)

    authority = CertificateAuthority(tmp_path / "egress").load_or_create()
    caps = Capabilities()
    # The test's names all answer on port 443 (the connector maps them to the servers' real ports).
    real_connect = connect
    hosts_by_call: list[str] = []

    async def connect_by_name(factory, ip, port):
        return await real_connect(factory, ip, ports[hosts_by_call.pop(0)])

    async def resolve_and_remember(host, port):
        answer = await resolve(host, port)
        hosts_by_call.append(host)
        return answer

    proxy = await EgressProxy(ProxySettings(), caps, resolver=resolve_and_remember, connector=connect_by_name,
                              interceptor=Interceptor(authority, upstream_ca_file=internal.ca_file)).start()
    untrusted_proxy = await EgressProxy(ProxySettings(), caps, resolver=resolve_and_remember,
                                        connector=connect_by_name, interceptor=Interceptor(authority)).start()
    vault = Vault(b"k" * 32)
    git_secret = vault.seal(validate("proj", "GIT_TOKEN", ["git.example.test"], "basic", username="x-access-token"),
                            TOKEN)
    api_secret = vault.seal(validate("proj", "API_KEY", ["api.example.test"], "header", header="X-Api-Key"),
                            OTHER_TOKEN)
    exceptions = OperatorExceptions.parse([f"{h}:443" for h in ports])
    sink = RecordingSink()
    grant = Grant(job_id="job", phase_id="p1", project="proj", sink=sink,
                  egress=EgressPolicy(allowlist=(parse_pattern("GET,HEAD api.example.test/v1/*", PORTS),),
                                      ports=PORTS, exceptions=exceptions),
                  credentials=PhaseCredentials(vault, (git_secret, api_secret)))
    capability = caps.issue(grant)
    yield type("Net", (), dict(proxy=proxy, untrusted_proxy=untrusted_proxy, git=git, api=api, raw=raw,
                               authority=authority, capability=capability, sink=sink, internal=internal))
    for server in (proxy, untrusted_proxy):
        await server.stop()
    for up in (git, api, raw):
        await up.stop()


async def connect_through(proxy_port: int, capability: str, host: str) -> tuple[asyncio.StreamReader,
                                                                                 asyncio.StreamWriter, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
    auth = base64.b64encode(b"phase:" + capability.encode())
    writer.write(b"CONNECT %s:443 HTTP/1.1\r\nhost: %s:443\r\nproxy-authorization: Basic %s\r\n\r\n"
                 % (host.encode(), host.encode(), auth))
    await writer.drain()
    answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    return reader, writer, answer


async def tls_get(net, host: str, requests: list[tuple[str, str, dict[str, str]]], proxy=None):
    """Requests over one CONNECT, trusting the phase's bundle; the answers' (status line, body)."""
    reader, writer, answer = await connect_through((proxy or net.proxy).port, net.capability, host)
    if not answer.startswith(b"HTTP/1.1 200"):
        rest = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        return answer + rest, None
    client = ssl.create_default_context(cafile=str(net.authority.bundle_file))
    await asyncio.wait_for(writer.start_tls(client, server_hostname=host), 10)
    out = []
    for method, path, headers in requests:
        lines = [f"{method} {path} HTTP/1.1", f"host: {host}", "content-length: 0",
                 *(f"{k}: {v}" for k, v in headers.items())]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        out.append((head.split(b"\r\n", 1)[0], await asyncio.wait_for(reader.readexactly(length), 10)))
        if head.lower().find(b"connection: close") >= 0:
            break
    peer = writer.get_extra_info("peercert")
    writer.close()
    return out, peer


async def test_a_bound_host_gets_its_secret_on_every_request_and_the_tool_never_sees_it(network) -> None:
    placeholder = base64.b64encode(b"x-access-token:helix-secret-placeholder:GIT_TOKEN").decode()
    answers, peer = await tls_get(network, "git.example.test", [
        ("GET", "/org/repo.git/info/refs?service=git-upload-pack", {}),
        ("POST", "/org/repo.git/git-receive-pack", {"authorization": f"Basic {placeholder}"}),
        ("GET", "/again", {"authorization": "Bearer something-the-tool-made-up"}),
    ])
    assert [a[0] for a in answers] == [b"HTTP/1.1 200 OK"] * 3  # keep-alive: three requests, one connection
    expected = b"authorization: Basic " + base64.b64encode(b"x-access-token:" + TOKEN)
    assert len(network.git.heads) == 3 and all(expected in h for h in network.git.heads), network.git.heads
    assert all(b"something-the-tool-made-up" not in h and b"proxy-authorization" not in h
               for h in network.git.heads)
    assert OTHER_TOKEN not in b"".join(network.git.heads)  # another host's secret is not sent here
    assert "Helix Runner egress CA" in str(peer["issuer"])  # the server's leaf, trusted through the bundle
    assert all(TOKEN not in body for _, body in answers)


async def test_a_host_whose_rules_allow_get_refuses_post_naming_the_rule(network) -> None:
    answers, _ = await tls_get(network, "api.example.test", [("GET", "/v1/items", {}),
                                                              ("POST", "/v1/items", {})])
    assert answers[0] == (b"HTTP/1.1 200 OK", b"ok /v1/items")
    status, body = answers[1]
    assert status == b"HTTP/1.1 403 Forbidden"
    assert b"POST api.example.test/v1/items matches no HTTP rule" in body and b"GET,HEAD api.example.test/v1/*" in body
    assert len(network.api.heads) == 1 and network.api.heads[0].startswith(b"GET /v1/items")
    assert b"x-api-key: " + OTHER_TOKEN in network.api.heads[0]  # header presentation
    (refusal,) = [e for e in network.sink.events if e.kind is GatewayEventKind.EGRESS_REFUSED]
    assert "matches no HTTP rule" in refusal.message and refusal.destination == "api.example.test:443"
    answers, _ = await tls_get(network, "api.example.test", [("GET", "/v1/../admin", {})])
    assert answers[0][0] == b"HTTP/1.1 403 Forbidden" and b"canonical form" in answers[0][1]


async def test_an_upstream_whose_certificate_is_not_trusted_is_refused_before_the_tool_s_handshake(network) -> None:
    answer, _ = await tls_get(network, "git.example.test", [("GET", "/", {})], proxy=network.untrusted_proxy)
    assert answer.startswith(b"HTTP/1.1 502") and b"is not trusted" in answer
    assert network.git.heads == []


async def test_a_host_without_secrets_or_rules_is_a_tunnel_byte_for_byte(network) -> None:
    reader, writer, answer = await connect_through(network.proxy.port, network.capability, "other.example.test")
    assert answer.startswith(b"HTTP/1.1 200")
    # Bytes no TLS parser would accept: a terminating proxy would fail; a tunnel passes them as they are.
    payload = bytes(range(256)) * 64
    writer.write(payload)
    await writer.drain()
    await asyncio.wait_for(reader.readexactly(4), 10)
    for _ in range(100):
        if len(network.raw.raw) >= len(payload):
            break
        await asyncio.sleep(0.02)
    writer.close()
    assert bytes(network.raw.raw) == payload
