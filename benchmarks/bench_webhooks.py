"""Webhooks (issue 26): how soon a delivery arrives after its event, and what subscriptions cost the stream.

* **Delivery latency**, on a quiet machine: a server process and a receiver in this process
  (``http.server`` in a thread, verifying every signature with ``standardwebhooks``, noting each
  request's arrival). Latency = arrival minus the causing event's receive time (the body's
  ``timestamp``, microseconds; one clock: the same machine). Two kinds, one phase at a time:
  ``phase.finished`` of phases of a fake CLI (many samples, cheap), and
  ``phase.awaiting_approval`` of the real CLI (offline mode, a breakpoint on Bash; the issue's
  "Done when": told within a second), each phase cancelled once its webhook arrived.
* **Event throughput** (P2 of bench_run_phase.py: one phase of a fake CLI writing assistant lines
  as fast as it can, one RunPhase client in another process), end to end (call -> last event, the
  phase's start included) and streaming (first -> last event: the event path), server CPU per event
  from the threads' schedstat (ns, not 10 ms ticks), servers side by side, rounds alternating: this tree with no subscription, this tree with a subscription to every event type
  (each batch of events goes through the mapping; a phase.finished delivery per phase), and the
  server of ``--baseline REF`` (the commit before webhooks). Events/s and server CPU per event.

Usage: .venv/bin/python benchmarks/bench_webhooks.py [--quick] [--phases N] [--approvals N]
       [--baseline REF] [--rounds R] [--lines M] [--skip-throughput] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "benchmarks"))

import bench_run_phase as brp  # noqa: E402
from server_process import ServerProcess, export_baseline  # noqa: E402

# The commit before webhooks (main when this branch started): the throughput baseline.
DEFAULT_BASELINE = "d7c7a82"
GOAL_P99_MS = 200.0


class Receiver:
    """The bench's webhook receiver: verifies signatures, notes (arrival ns, body) per request."""

    def __init__(self, secret: str):
        from standardwebhooks import Webhook

        self.verifier = Webhook(secret)
        self.secret = secret
        self.got: list[tuple[int, dict, bool]] = []
        self.cond = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                arrived = time.time_ns()
                try:
                    receiver.verifier.verify(body, {k.lower(): v for k, v in self.headers.items()})
                    ok = True
                except Exception:  # noqa: BLE001 - any failure to verify counts as unverified
                    ok = False
                self.send_response(204)
                self.send_header("content-length", "0")
                self.end_headers()
                with receiver.cond:
                    receiver.got.append((arrived, json.loads(body), ok))
                    receiver.cond.notify_all()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def wait(self, count: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while len(self.got) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"only {len(self.got)} of {count} webhooks arrived within {timeout} s")
                self.cond.wait(left)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def event_time_ns(body: dict) -> int:
    stamp = datetime.fromisoformat(body["timestamp"].replace("Z", "+00:00"))
    return int(stamp.timestamp()) * 1_000_000_000 + stamp.microsecond * 1000


def summarize(latencies_ms: list[float]) -> dict:
    v = sorted(latencies_ms)
    return {"n": len(v), "p50": brp.pct(v, 50), "p90": brp.pct(v, 90), "p99": brp.pct(v, 99), "max": v[-1],
            "mean": statistics.fmean(v)}


async def subscribe(address: str, url: str, secret: str, events: list[int], **fields) -> None:
    import grpc

    from helix.runner.v1 import runner_service_pb2 as pb
    from helix.runner.v1 import runner_service_pb2_grpc as pb_grpc

    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.RunnerServiceStub(channel)
        await stub.CreateWebhook(pb.CreateWebhookRequest(url=url, events=events, secret=secret, **fields),
                                 timeout=10)


def finished_latency(tmp: Path, fake: Path, workdir: Path, phases: int) -> dict:
    """phase.finished of ``phases`` fake-CLI phases, one at a time."""
    from helix.runner.v1 import resources_pb2 as res
    from helix_runner.webhook_http.signing import new_secret

    receiver = Receiver(new_secret())
    server = ServerProcess(tmp, "latency", fake, workdir, env_extra={
        "HELIX_RUNNER_WEBHOOK_PRIVATE_ALLOW": f"127.0.0.1:{receiver.port}"})
    try:
        asyncio.run(subscribe(server.address, f"http://127.0.0.1:{receiver.port}/h", receiver.secret,
                              [res.WEBHOOK_EVENT_TYPE_PHASE_FINISHED]))
        brp.warm_up(server, workdir, "wh-warm")
        receiver.wait(1)
        start = len(receiver.got)
        for i in range(phases):
            cfg = {"address": server.address, "k": 1, "lines": 20, "rate": 0.0, "workdir": str(workdir),
                   "tag": f"wh-{i}", "timeout": 60.0}
            r = brp.run_subprocess_json(brp.client_args("--client", cfg), 120)
            if r["failed"]:
                raise RuntimeError(str(r["errors"]))
            receiver.wait(start + i + 1)
            time.sleep(0.02)  # a quiet machine between samples
        got = receiver.got[start:]
    finally:
        server.stop()
        receiver.stop()
    assert all(ok for _, _, ok in got), "a signature did not verify"
    return summarize([(arrived - event_time_ns(body)) / 1e6 for arrived, body, _ in got])


def approval_latency(tmp: Path, workdir: Path, phases: int) -> dict:
    """phase.awaiting_approval of ``phases`` real-CLI phases held at a breakpoint, one at a time."""
    import grpc

    from helix.runner.v1 import resources_pb2 as res
    from helix.runner.v1 import runner_service_pb2 as pb
    from helix.runner.v1 import runner_service_pb2_grpc as pb_grpc
    from helix_runner.offline import Reply, Script
    from helix_runner.process.claude_locator import locate_claude
    from helix_runner.webhook_http.signing import new_secret

    claude = locate_claude(None, env=os.environ).path
    script = tmp / "approval-script.json"
    script.write_text(json.dumps(Script([Reply.tool_use("Bash", {"command": "echo deploy"}),
                                         Reply.text("Done.")]).to_dict()))
    receiver = Receiver(new_secret())
    server = ServerProcess(tmp, "approval", Path(claude), workdir, extra_args=("--offline-script", str(script)),
                           env_extra={"HELIX_RUNNER_WEBHOOK_PRIVATE_ALLOW": f"127.0.0.1:{receiver.port}"})

    async def run() -> None:
        await subscribe(server.address, f"http://127.0.0.1:{receiver.port}/h", receiver.secret,
                        [res.WEBHOOK_EVENT_TYPE_PHASE_AWAITING_APPROVAL])
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = pb_grpc.RunnerServiceStub(channel)
            for i in range(phases + 1):  # the first one warms the server up and is not counted
                ids = {"job_id": f"approval-{i}", "phase_id": "p"}
                call = stub.RunPhase(pb.RunPhaseRequest(
                    **ids, prompt="deploy", working_dir=str(workdir), options=pb.PhaseOptions(
                        allowed_tools=["Bash"], breakpoints=[res.Breakpoint(tool_name="Bash", once=True)])),
                    timeout=120)
                reader = asyncio.ensure_future(_drain(call))
                await asyncio.get_running_loop().run_in_executor(None, receiver.wait, i + 1, 60.0)
                await stub.CancelPhase(pb.CancelPhaseRequest(**ids), timeout=30)
                await reader

    try:
        asyncio.run(run())
        got = receiver.got[1:]
    finally:
        server.stop()
        receiver.stop()
    assert all(ok for _, _, ok in got), "a signature did not verify"
    return summarize([(arrived - event_time_ns(body)) / 1e6 for arrived, body, _ in got])


async def _drain(call) -> None:
    try:
        async for _ in call:
            pass
    except Exception:  # noqa: BLE001 - the cancel ends it either way
        pass


def throughput(tmp: Path, fake: Path, workdir: Path, rounds: int, lines: int, baseline: str | None) -> dict:
    """P2 events/s and server CPU per event, servers side by side, rounds alternating."""
    from helix.runner.v1 import resources_pb2 as res
    from helix_runner.webhook_http.signing import new_secret

    receiver = Receiver(new_secret())
    env = {"HELIX_RUNNER_MAX_CONCURRENT_PHASES": "300", "HELIX_RUNNER_DEFAULT_IDLE_TIMEOUT_SECONDS": "120",
           "HELIX_RUNNER_WEBHOOK_PRIVATE_ALLOW": f"127.0.0.1:{receiver.port}"}
    servers = {"no webhook": ServerProcess(tmp, "tput-none", fake, workdir, env_extra=env),
               "every event": ServerProcess(tmp, "tput-all", fake, workdir, env_extra=env)}
    if baseline:
        servers[baseline] = ServerProcess(tmp, "tput-base", fake, workdir, env_extra=env,
                                          server_src=export_baseline(baseline, tmp))
    every = [v for k, v in res.WebhookEventType.items() if k != "WEBHOOK_EVENT_TYPE_UNSPECIFIED"]
    runs: dict[str, list[float]] = {n: [] for n in servers}
    streams: dict[str, list[float]] = {n: [] for n in servers}
    cpu: dict[str, list[float]] = {n: [] for n in servers}
    try:
        asyncio.run(subscribe(servers["every event"].address, f"http://127.0.0.1:{receiver.port}/h",
                              receiver.secret, every, cost_threshold_usd=1000.0))
        for name, server in servers.items():
            brp.warm_up(server, workdir, "tput-warm-" + name.replace(" ", "-"))
        for rnd in range(rounds):
            names = list(servers) if rnd % 2 == 0 else list(reversed(servers))
            for name in names:
                cfg = {"address": servers[name].address, "k": 1, "lines": lines, "rate": 0.0,
                       "workdir": str(workdir), "tag": f"tput-{name.replace(' ', '-')}-{rnd}", "timeout": 600.0}
                cpu0 = brp.proc_cpu_ns(servers[name].pid)
                r = brp.run_subprocess_json(brp.client_args("--client", cfg), 660)
                if r["failed"] or r["lost"] or r["reordered"]:
                    raise RuntimeError(f"{name}: {r['errors']}")
                e2e, stream = brp.rates(r, lines)
                runs[name].append(e2e)
                streams[name].append(stream)
                cpu[name].append((brp.proc_cpu_ns(servers[name].pid) - cpu0) / lines / 1e3)
    finally:
        for server in servers.values():
            server.stop()
        receiver.stop()
    # Two rates: end to end (the RunPhase call to the last event: the phase's start included, which
    # the sandbox lengthens, P6/P9) and streaming (first event to last: the event path itself).
    out: dict = {"rates": runs, "stream_rates": streams, "cpu_us": cpu}
    reference = baseline or "no webhook"
    for name in servers:
        out.setdefault("ratio", {})[name] = statistics.median(
            a / b for a, b in zip(runs[name], runs[reference], strict=True))
        out.setdefault("stream_ratio", {})[name] = statistics.median(
            a / b for a, b in zip(streams[name], streams[reference], strict=True))
        out.setdefault("cpu_ratio", {})[name] = statistics.median(
            a / b for a, b in zip(cpu[name], cpu[reference], strict=True))
    out["reference"] = reference
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--phases", type=int, help="phase.finished samples (default 200, quick 50)")
    ap.add_argument("--approvals", type=int, help="awaiting-approval samples, real CLI (default 30, quick 10)")
    ap.add_argument("--baseline", default=DEFAULT_BASELINE, help="git ref of the throughput baseline ('' for none)")
    ap.add_argument("--rounds", type=int, help="throughput rounds (default 5, quick 3)")
    ap.add_argument("--lines", type=int, help="throughput lines (default 20000, quick too: at 5000 a round streams for"
                    " ~100 ms and two servers of the same code differed by 10%%)")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    phases = args.phases or (50 if args.quick else 200)
    approvals = args.approvals if args.approvals is not None else (10 if args.quick else 30)
    tmp = Path(tempfile.mkdtemp(prefix="helix-bench-webhooks-"))
    workdir = tmp / "work"
    workdir.mkdir()
    fake = brp.write_fake_claude(tmp)
    print(f"# webhooks benchmark: load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs", flush=True)
    summary: dict = {"goal_p99_ms": GOAL_P99_MS}
    summary["finished"] = finished_latency(tmp, fake, workdir, phases)
    if approvals:
        summary["approval"] = approval_latency(tmp, workdir, approvals)
    print("\n## Delivery latency after the event (ms): arrival at the receiver - the event's receive time")
    print(f"{'event':<26} {'n':>4} {'p50':>8} {'p90':>8} {'p99':>8} {'max':>8}   goal p99 <= {GOAL_P99_MS:g} ms")
    for key, name in (("finished", "phase.finished (fake CLI)"), ("approval", "awaiting_approval (real CLI)")):
        if key in summary:
            s = summary[key]
            print(f"{name:<26} {s['n']:>4} {s['p50']:>8.1f} {s['p90']:>8.1f} {s['p99']:>8.1f} {s['max']:>8.1f}   "
                  f"{'met' if s['p99'] <= GOAL_P99_MS else 'NOT met'}")
    if not args.skip_throughput:
        rounds = args.rounds or (3 if args.quick else 5)
        lines = args.lines or 20000
        print(f"\n# throughput: {rounds} rounds x {lines} lines per server ...", flush=True)
        t = throughput(tmp, fake, workdir, rounds, lines, args.baseline or None)
        summary["throughput"] = t
        print(f"\n## Single-phase event throughput (bench_run_phase P2), events/s; ratios to {t['reference']}")
        print(f"{'server':<14} {'e2e':>8} {'ratio':>7} {'stream':>8} {'ratio':>7} {'CPU/event us':>13} "
              f"{'CPU ratio':>10}   e2e rounds")
        for name, rates in t["rates"].items():
            print(f"{name:<14} {statistics.median(rates):>8.0f} {t['ratio'][name]:>7.3f} "
                  f"{statistics.median(t['stream_rates'][name]):>8.0f} {t['stream_ratio'][name]:>7.3f} "
                  f"{statistics.median(t['cpu_us'][name]):>13.1f} {t['cpu_ratio'][name]:>10.3f}   "
                  + ", ".join(f"{x:.0f}" for x in rates))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
