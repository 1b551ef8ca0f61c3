"""Network breakpoints benchmark: how soon a held request goes on once it is approved (issue 31).

What it measures, in-process over the real egress proxy (``egress/proxy.py``) on loopback with a
phase's ``EgressHolds`` (``phases/egress_holds.py``) as its gate, ``--rounds`` CONNECTs each:

* "not held": CONNECT → ``200 Connection Established``, no breakpoint (the floor);
* "held, from the approval": a breakpoint holds the CONNECT; the clock starts when the approval
  is given (``EgressHolds.resolve``, what ResolveEgressHold calls on the owner) and stops when the
  client reads ``200 Connection Established``: the hold → resume latency the issue bounds (≤ 50 ms).

The RPC's own hop (and, through another replica, the forward) comes on top: P7/P8's benchmarks
measure those. The table prints p50 / p90 / max in ms.

Usage: .venv/bin/python benchmarks/bench_network_breakpoints.py [--rounds 200]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))

from helix_runner.domain.addresses import OperatorExceptions
from helix_runner.domain.breakpoints import Breakpoint, BreakpointKind
from helix_runner.domain.egress_hold import EgressDecision, EgressScope
from helix_runner.egress.allowlist import EgressPolicy
from helix_runner.egress.capabilities import Capabilities, Grant
from helix_runner.egress.proxy import EgressProxy, ProxySettings
from helix_runner.phases.egress_holds import EgressHolds


class Sink:
    def __init__(self, holds: EgressHolds | None):
        self.holds = holds

    def on_response(self, *args) -> None: ...
    def on_event(self, event) -> None: ...
    def on_egress_connection(self, destination: str) -> None: ...
    def on_egress_limit(self, reason: str) -> None: ...

    async def egress_gate(self, host, port, method, path, refusal):
        return refusal if self.holds is None else await self.holds.gate(host, port, method, path, refusal)


async def connect_once(proxy_port: int, capability: str, target: str) -> asyncio.StreamReader:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
    token = base64.b64encode(b"phase:" + capability.encode())
    writer.write(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n"
                 % (target.encode(), target.encode(), token))
    await writer.drain()
    return reader, writer


async def main_async(rounds: int) -> None:
    async def hold_open(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.read()  # until the client goes: the tunnel stays up meanwhile
        except (ConnectionError, asyncio.CancelledError):
            pass  # the benchmark ended with tunnels open
        writer.close()

    server = await asyncio.start_server(hold_open, "127.0.0.2", 0)
    port = server.sockets[0].getsockname()[1]
    target = f"127.0.0.2:{port}"
    policy = EgressPolicy(exceptions=OperatorExceptions.parse([target]))
    caps = Capabilities()
    proxy = await EgressProxy(ProxySettings(), caps).start()
    held_bp = Breakpoint.create(kind=BreakpointKind.EGRESS, breakpoint_id="b", egress_host="127.0.0.2")
    holds = EgressHolds(project="p", breakpoints=lambda: [held_bp], emit=lambda e: None, changed=lambda: None,
                        hold_watchdog=lambda held: None)
    plain = caps.issue(Grant(job_id="j", phase_id="plain", project="p", sink=Sink(None), egress=policy))
    gated = caps.issue(Grant(job_id="j", phase_id="held", project="p", sink=Sink(holds), egress=policy))
    results: dict[str, list[float]] = {"not held": [], "held, from the approval": []}
    try:
        for _ in range(rounds):
            start = time.perf_counter()
            reader, writer = await connect_once(proxy.port, plain, target)
            line = await asyncio.wait_for(reader.readline(), 5)
            results["not held"].append((time.perf_counter() - start) * 1000)
            assert line.startswith(b"HTTP/1.1 200"), line
            writer.close()

            reader, writer = await connect_once(proxy.port, gated, target)
            for _ in range(1000):
                if holds.holds:
                    break
                await asyncio.sleep(0.001)
            (hold_id,) = holds.holds
            start = time.perf_counter()
            await holds.resolve(hold_id, EgressDecision(True, EgressScope.ONCE))
            line = await asyncio.wait_for(reader.readline(), 5)
            results["held, from the approval"].append((time.perf_counter() - start) * 1000)
            assert line.startswith(b"HTTP/1.1 200"), line
            writer.close()
    finally:
        await proxy.stop()
        server.close()
        await asyncio.sleep(0.1)
    print(f"{'CONNECT through the proxy':<26} {'rounds':>6} {'p50 ms':>8} {'p90 ms':>8} {'max ms':>8}")
    for name, times in results.items():
        print(f"{name:<26} {len(times):>6} {statistics.median(times):>8.2f} "
              f"{statistics.quantiles(times, n=10)[8]:>8.2f} {max(times):>8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    asyncio.run(main_async(parser.parse_args().rounds))


if __name__ == "__main__":
    main()
