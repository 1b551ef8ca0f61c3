"""The proxy's per-phase caps: connections open at once and bytes moved in all. Only the offender is
refused, each refusal naming the limit; a neighbour phase's tunnel keeps working."""

from __future__ import annotations

import asyncio
import base64

import pytest
from support.egress import RecordingSink

from helix_runner.domain.addresses import OperatorExceptions
from helix_runner.domain.events import GatewayEventKind
from helix_runner.egress.allowlist import EgressPolicy
from helix_runner.egress.capabilities import Capabilities, Grant
from helix_runner.egress.proxy import EgressProxy, ProxySettings


@pytest.fixture
async def echo():
    async def serve(reader, writer):
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


async def tunnel(proxy_port: int, capability: str, target: str):
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
    auth = base64.b64encode(b"phase:" + capability.encode())
    writer.write(b"CONNECT %s HTTP/1.1\r\nproxy-authorization: Basic %s\r\n\r\n" % (target.encode(), auth))
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    return reader, writer, head


async def test_a_phase_past_its_byte_cap_loses_its_connections_and_is_told_why(echo) -> None:
    caps = Capabilities()
    proxy = await EgressProxy(ProxySettings(max_bytes_per_phase=100_000), caps).start()
    target = f"127.0.0.1:{echo}"
    policy = EgressPolicy(exceptions=OperatorExceptions.parse([target]))
    greedy, neighbour = RecordingSink(), RecordingSink()
    greedy_cap = caps.issue(Grant(job_id="j", phase_id="greedy", project="p", sink=greedy, egress=policy))
    neighbour_cap = caps.issue(Grant(job_id="j", phase_id="calm", project="p", sink=neighbour, egress=policy))
    try:
        reader, writer, head = await tunnel(proxy.port, greedy_cap, target)
        n_reader, n_writer, n_head = await tunnel(proxy.port, neighbour_cap, target)
        assert head.startswith(b"HTTP/1.1 200") and n_head.startswith(b"HTTP/1.1 200")
        received = 0
        with pytest.raises((asyncio.IncompleteReadError, ConnectionError)):
            for _ in range(100):
                writer.write(b"x" * 8192)
                await writer.drain()
                received += len(await asyncio.wait_for(reader.readexactly(8192), 5))
        assert received <= 100_000
        (reason,) = greedy.limits
        assert "more than 100000 bytes" in reason and "egress_max_bytes_per_phase" in reason
        refusals = [e for e in greedy.events if e.kind is GatewayEventKind.EGRESS_REFUSED]
        assert "egress_max_bytes_per_phase" in refusals[-1].message
        # A new connection of the offender is refused, naming the limit; the neighbour's tunnel works.
        _, w2, again = await tunnel(proxy.port, greedy_cap, target)
        assert again.startswith(b"HTTP/1.1 403")
        w2.close()
        n_writer.write(b"still here")
        await n_writer.drain()
        assert await asyncio.wait_for(n_reader.readexactly(10), 5) == b"still here"
        assert neighbour.limits == [] and neighbour.events == []
        n_writer.close()
    finally:
        await proxy.stop()


async def test_a_phase_at_its_connection_cap_is_refused_503_naming_it(echo) -> None:
    caps = Capabilities()
    proxy = await EgressProxy(ProxySettings(max_connections_per_phase=2), caps).start()
    target = f"127.0.0.1:{echo}"
    sink = RecordingSink()
    cap = caps.issue(Grant(job_id="j", phase_id="p", project="p", sink=sink,
                           egress=EgressPolicy(exceptions=OperatorExceptions.parse([target]))))
    try:
        opened = [await tunnel(proxy.port, cap, target) for _ in range(2)]
        assert all(h.startswith(b"HTTP/1.1 200") for _, _, h in opened)
        _, writer, head = await tunnel(proxy.port, cap, target)
        assert head.startswith(b"HTTP/1.1 503")
        writer.close()
        refusals = [e for e in sink.events if e.kind is GatewayEventKind.EGRESS_REFUSED]
        assert "egress_max_connections_per_phase" in refusals[-1].message
        assert sink.limits == []  # a refused connection does not end the phase
        for _, w, _ in opened:
            w.close()
    finally:
        await proxy.stop()
