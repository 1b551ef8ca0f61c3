"""The model-API gateway's cost: time to first token, delay per chunk, and event throughput.

Side by side in one run, interleaved request by request (ratios and differences hold on a noisy
machine, absolute figures do not):

* **direct**: a client talking to the scripted Messages API (``python -m helix_runner.offline``,
  its own process), as a CLI did before the gateway;
* **gateway**: the same client through an ``ApiGateway`` (its own process, as in the server: one
  asyncio loop) with a live capability, the real key added, the answer metered;
* **gateway + allowlist**: the same with a model allowlist, so the body's top level is decoded and
  re-encoded (the duplicate-key guard).

The request body is CLI-sized (~80 KB: a long system prompt and 40 tool schemas), streamed
(``stream: true``). Time to first token = request sent -> the first ``content_block_delta`` read.
Per-chunk delay: the script sends its events ``--chunk-delay`` apart; each event's arrival is taken
relative to the first event's, and the gateway's offsets are compared with the direct ones at the
same index: a gateway that held chunks back would add to later offsets, one that batched them would
shrink the gaps to zero.

Event throughput: P2 of bench_run_phase.py (a fake CLI writing assistant lines as fast as it can,
one RunPhase client in another process) against a server with the gateway and proxy on (the
default; a key in its environment so the gateway starts and every phase gets a capability) and one
with both off (key-helper mode, the previous default), rounds alternating.

``--before CHECKOUT`` adds the gateways of an earlier checkout (its ``server/``) to the same
interleaved rounds, rows marked "(before)", so a change is read side by side on the same noisy
machine. ``--profile`` has each gateway process record ``time.perf_counter_ns()`` marks per request
(CLOCK_MONOTONIC, comparable with the client's across processes) and prints where the time to
first token goes: client send -> the gateway parses the head -> the body is complete -> the first
and the last byte written upstream -> the API's answer head -> its first chunk -> the client's
first token.

Usage: .venv/bin/python benchmarks/bench_gateway.py [--quick] [--requests N] [--rounds R] [--json FILE]
       [--before CHECKOUT] [--profile] [--skip-throughput]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PYTHON = REPO_ROOT / ".venv" / "bin" / "python"
if not PYTHON.exists():
    PYTHON = Path(sys.executable)

CAPABILITY_LINE = "capability="


# ------------------------------------------------------------------------------------------------
# The gateway process (--serve-gateway URL [--allowlist]): prints its port and a live capability.


def serve_gateway(upstream: str, allowlist: bool, server_src: Path, profile: Path | None) -> None:
    sys.path.insert(0, str(server_src))
    if profile is not None:
        marks = instrument()
    from helix_runner.egress.capabilities import Capabilities, Grant, ModelAllowlist
    from helix_runner.egress.gateway import ApiGateway, GatewaySettings
    from helix_runner.egress.upstream import UpstreamUrl

    class Sink:  # what a phase's grant does with reports, minus the stream
        def __init__(self) -> None:
            self.responses = 0

        def on_response(self, model, status, usage) -> None:
            self.responses += 1

        def on_event(self, event) -> None:
            pass

        def on_egress_connection(self, destination) -> None:
            pass

    async def main() -> None:
        caps = Capabilities()
        gateway = await ApiGateway(GatewaySettings(UpstreamUrl.parse(upstream), lambda: "sk-ant-bench"), caps).start()
        grant = Grant("bench", "p", "proj", Sink(), models=ModelAllowlist(("claude-*",)) if allowlist else None)
        print(f"port={gateway.port}", flush=True)
        print(CAPABILITY_LINE + caps.issue(grant), flush=True)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        if profile is not None:
            with open(profile, "w") as out:  # noqa: ASYNC230 - the loop serves nobody any more
                json.dump(marks, out)

    asyncio.run(main())


# The gateway's marks, per request: (name, where it is taken). "upstream write" is the first and the
# last call that hands request bytes to the upstream connection, whatever the version calls it.
PROFILE_MARKS = ("begin", "complete", "first upstream write", "last upstream write", "answer head", "first chunk")


def instrument() -> list[dict[str, int]]:
    """Wraps the gateway's methods (of whichever checkout is imported) to record the marks."""
    from helix_runner.egress import gateway, upstream

    requests: list[dict[str, int]] = []
    now = time.perf_counter_ns

    def wrap(cls, name: str, before=None, after=None) -> None:
        original = getattr(cls, name)

        def wrapper(self, *args, **kwargs):
            if before is not None:
                before()
            result = original(self, *args, **kwargs)
            if after is not None:
                after()
            return result

        setattr(cls, name, wrapper)

    def begin() -> None:
        requests.append({"begin": now()})

    def mark(name: str, first_only: bool = False):
        def record() -> None:
            if requests and not (first_only and name in requests[-1]):
                requests[-1][name] = now()
        return record

    def upstream_write() -> None:
        if requests:
            requests[-1].setdefault("first upstream write", now())
            requests[-1]["last upstream write"] = now()

    wrap(gateway._ClientConnection, "on_message_begin", before=begin)
    wrap(gateway._ClientConnection, "on_message_complete", before=mark("complete"))
    for name in dir(upstream.UpstreamConnection):
        if name.startswith(("send", "write")) and callable(getattr(upstream.UpstreamConnection, name)):
            wrap(upstream.UpstreamConnection, name, after=upstream_write)
    wrap(gateway._Exchange, "on_head", before=mark("answer head"))
    wrap(gateway._Exchange, "on_body", before=mark("first chunk", first_only=True))
    return requests


# ------------------------------------------------------------------------------------------------
# The client side.


BODY_SCALE = 1.0  # --body-scale: 1 = the CLI's size, 0 = a minimal request


def cli_sized_body() -> bytes:
    """A Messages API request of about the size the CLI sends (system prompt and tool schemas)."""
    n = round(40 * BODY_SCALE)
    tools = [{"name": f"Tool{i}", "description": "Does a thing. " * 60,
              "input_schema": {"type": "object", "properties": {
                  f"arg{j}": {"type": "string", "description": "An argument of the tool. " * 4} for j in range(8)},
                  "required": ["arg0"]}} for i in range(n)]
    body = {"model": "claude-sonnet-4-5", "max_tokens": 32000, "stream": True,
            "system": [{"type": "text", "text": "You are Claude Code. " * round(1000 * BODY_SCALE)}], "tools": tools,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Say something."}]}]}
    return json.dumps(body).encode()


class Client:
    """One keep-alive connection; ``request`` returns arrival times of every SSE event (ns since send)."""

    def __init__(self, port: int, key: str, body: bytes) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sent: list[tuple[int, int]] = []
        self.request_bytes = (
            b"POST /v1/messages?beta=true HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n"
            b"anthropic-version: 2023-06-01\r\nx-api-key: %s\r\ncontent-length: %d\r\n\r\n%s"
            % (key.encode(), len(body), body))

    def request(self) -> tuple[int, list[int]]:
        """(ns to the first content_block_delta, ns of each event's arrival, relative to the send);
        ``sent`` keeps each request's send time and first token, absolute (``--profile``)."""
        t0 = time.perf_counter_ns()
        self.sock.sendall(self.request_bytes)
        buffer = b""
        arrivals: list[int] = []
        first_token = 0
        while True:
            data = self.sock.recv(65536)
            now = time.perf_counter_ns() - t0
            if not data:
                raise RuntimeError("the server closed the connection")
            buffer += data
            if not first_token and b"content_block_delta" in buffer:
                first_token = now
            arrivals.extend([now] * (data.count(b"\n\n")))
            if buffer.endswith(b"0\r\n\r\n"):
                if b" 200 " not in buffer[:20]:
                    raise RuntimeError(f"answer: {buffer[:200]!r}")
                self.sent.append((t0, t0 + first_token))
                return first_token, arrivals


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(p / 100 * (len(s) - 1) + 0.5))]


def start(cmd: list[str], first_lines: int) -> tuple[subprocess.Popen, list[str]]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO_ROOT)
    lines = [proc.stdout.readline().strip() for _ in range(first_lines)]  # type: ignore[union-attr]
    return proc, lines


SERVER_SRC = REPO_ROOT / "server"


def latency(requests: int, chunk_delay: float, words: int, before: Path | None = None,
            profile: dict | None = None) -> dict:
    """TTFT and per-chunk spacing: direct, gateway, gateway + allowlist (and those of ``before``);
    requests interleaved. ``profile``: filled with each gateway's segments (``--profile``)."""
    script = {"fallback": {"content": [{"type": "text", "text": " ".join(f"w{i}" for i in range(words))}],
                           "chunk_delay": chunk_delay}}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "script.json"
        path.write_text(json.dumps(script))
        api, (line,) = start([str(PYTHON), "-m", "helix_runner.offline", "--script", str(path)], 1)
        upstream = line.split("=", 1)[1]
        procs = [api]
        try:
            clients = {"direct": Client(int(upstream.rsplit(":", 1)[1]), "sk-ant-bench", cli_sized_body())}
            pids = {"direct": api.pid}
            gateways = [("gateway", [], SERVER_SRC), ("gateway + allowlist", ["--allowlist"], SERVER_SRC)]
            if before is not None:
                gateways += [(f"{name} (before)", extra, before / "server") for name, extra, _ in gateways]
            marks: dict[str, Path] = {}
            for name, extra, src in gateways:
                cmd = [str(PYTHON), __file__, "--serve-gateway", upstream, "--server-src", str(src), *extra]
                if profile is not None:
                    marks[name] = Path(tmp) / f"marks-{len(marks)}.json"
                    cmd += ["--profile-file", str(marks[name])]
                proc, (port, cap) = start(cmd, 2)
                procs.append(proc)
                pids[name] = proc.pid
                clients[name] = Client(int(port.split("=")[1]), cap.split("=", 1)[1], cli_sized_body())
            for client in clients.values():  # warm: connections, imports, the scripted API's threads
                for _ in range(5):
                    client.request()
            ttft: dict[str, list[float]] = {n: [] for n in clients}
            offsets: dict[str, list[list[float]]] = {n: [] for n in clients}
            order = list(clients)
            cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
            for i in range(requests):
                for name in order[i % len(order):] + order[: i % len(order)]:  # rotate who goes first
                    first, arrivals = clients[name].request()
                    ttft[name].append(first / 1e6)
                    offsets[name].append([(a - arrivals[0]) / 1e6 for a in arrivals])
            # CPU per request of each server process: for the gateways their whole cost, robust to load
            # (the scripted API's is the baseline every path pays).
            cpu = {name: (cpu_seconds(pid) - cpu0[name]) / requests * 1e3
                   for name, pid in pids.items()}
            cpu["direct"] /= len(clients)  # the scripted API served every path's requests
        finally:
            for proc in procs:
                proc.terminate()  # a gateway writes its marks on SIGTERM
            for proc in procs:
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
        if profile is not None:
            for name, path in marks.items():
                profile[name] = segments(json.loads(path.read_text()), clients[name].sent)
    out = {}
    direct = offsets["direct"]
    for name in clients:
        gaps = [b - a for run in offsets[name] for a, b in zip(run, run[1:], strict=False)]
        # Per chunk: this server's offset of event i minus the direct one's, same request round.
        shifts = [run[i] - ref[i] for run, ref in zip(offsets[name], direct, strict=True)
                  for i in range(min(len(run), len(ref)))]
        last = [run[-1] - ref[-1] for run, ref in zip(offsets[name], direct, strict=True)]
        out[name] = {"ttft_p50": pct(ttft[name], 50), "ttft_p99": pct(ttft[name], 99),
                     "gap_p50": pct(gaps, 50), "gap_p99": pct(gaps, 99),
                     "shift_p50": pct(shifts, 50), "last_shift_p50": pct(last, 50), "events": len(offsets[name][0]),
                     "cpu_ms_per_request": cpu[name]}
    for name in clients:
        out[name]["ttft_added_p50"] = out[name]["ttft_p50"] - out["direct"]["ttft_p50"]
        # Paired per request (the same round): the added time of each, then its median.
        paired = [a - b for a, b in zip(ttft[name], ttft["direct"], strict=True)]
        out[name]["ttft_added_paired_p50"] = pct(paired, 50)
    return out


def segments(marks: list[dict[str, int]], sent: list[tuple[int, int]]) -> dict[str, float]:
    """Median ms of each step of the time to first token (the gateway's marks, request by request,
    between the client's send and its first token)."""
    if len(marks) != len(sent):
        raise RuntimeError(f"{len(marks)} requests marked by the gateway, {len(sent)} sent")
    steps = ("send", *PROFILE_MARKS, "client's first token")
    out: dict[str, list[float]] = {}
    for request, (t0, token) in zip(marks, sent, strict=True):
        at = {"send": t0, **request, "client's first token": token}
        present = [step for step in steps if step in at]
        for a, b in zip(present, present[1:], strict=False):
            out.setdefault(f"{a} -> {b}", []).append((at[b] - at[a]) / 1e6)
        out.setdefault("total", []).append((token - t0) / 1e6)
    return {step: statistics.median(values) for step, values in out.items()}


def print_profile(profile: dict) -> None:
    print("\n## Where the time to first token goes (median ms per step, events back to back)")
    names = list(profile)
    steps = list(dict.fromkeys(step for name in names for step in profile[name]))
    print(f"{'step':<44}" + "".join(f"{name:>30}" for name in names))
    for step in steps:
        print(f"{step:<44}" + "".join(f"{profile[name].get(step, float('nan')):>30.3f}" for name in names))


def throughput(rounds: int, lines: int) -> dict:
    """bench_run_phase's single-phase throughput with the gateway on and off, rounds alternating."""
    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    import bench_run_phase as brp
    from server_process import ServerProcess

    tmp = Path(tempfile.mkdtemp(prefix="helix-bench-gateway-"))
    workdir = tmp / "work"
    workdir.mkdir()
    fake = brp.write_fake_claude(tmp)
    base = {"HELIX_RUNNER_MAX_CONCURRENT_PHASES": "300", "HELIX_RUNNER_DEFAULT_IDLE_TIMEOUT_SECONDS": "120",
            "ANTHROPIC_API_KEY": "sk-ant-bench", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}
    servers = {
        "gateway on": ServerProcess(tmp, "gw-on", fake, workdir, env_extra=base),
        "gateway off": ServerProcess(tmp, "gw-off", fake, workdir, env_extra={
            **base, "HELIX_RUNNER_API_GATEWAY": "false", "HELIX_RUNNER_EGRESS_PROXY": "false"}),
    }
    runs: dict[str, list[float]] = {n: [] for n in servers}
    cpu: dict[str, list[float]] = {n: [] for n in servers}  # server CPU per event, µs: steadier than events/s
    try:
        for name, server in servers.items():
            brp.warm_up(server, workdir, name.replace(" ", "-"))
        for rnd in range(rounds):
            names = list(servers) if rnd % 2 == 0 else list(reversed(servers))
            for name in names:
                cfg = {"address": servers[name].address, "k": 1, "lines": lines, "rate": 0.0,
                       "workdir": str(workdir), "tag": f"tput-{name.replace(' ', '-')}-{rnd}", "timeout": 600.0}
                cpu0 = brp.proc_cpu(servers[name].pid)[0]
                r = brp.run_subprocess_json(brp.client_args("--client", cfg), 660)
                if r["failed"] or r["lost"] or r["reordered"]:
                    raise RuntimeError(f"{name}: {r['errors']}")
                runs[name].append(brp.rates(r, lines)[0])
                cpu[name].append((brp.proc_cpu(servers[name].pid)[0] - cpu0) / lines * 1e6)
    finally:
        for server in servers.values():
            server.stop()
    ratios = [a / b for a, b in zip(runs["gateway on"], runs["gateway off"], strict=True)]
    return {"on": runs["gateway on"], "off": runs["gateway off"], "ratio_median": statistics.median(ratios),
            "ratios": ratios, "cpu_us_on": cpu["gateway on"], "cpu_us_off": cpu["gateway off"],
            "cpu_ratio_median": statistics.median(a / b for a, b in zip(cpu["gateway on"], cpu["gateway off"],
                                                                        strict=True))}


def print_latency(title: str, lat: dict) -> None:
    print(f"\n## {title}, interleaved request by request")
    hdr = (f"{'path':<30} {'TTFT p50':>9} {'p99':>8} {'added p50':>10} {'paired':>8} {'gap p50':>8} "
           f"{'gap p99':>8} {'shift p50':>10} {'last shift':>11} {'cpu/req':>8}")
    print(hdr)
    print("-" * len(hdr))
    for name, r in lat.items():
        print(f"{name:<30} {r['ttft_p50']:>9.3f} {r['ttft_p99']:>8.3f} {r['ttft_added_p50']:>10.3f} "
              f"{r['ttft_added_paired_p50']:>8.3f} {r['gap_p50']:>8.3f} {r['gap_p99']:>8.3f} {r['shift_p50']:>10.3f} "
              f"{r['last_shift_p50']:>11.3f} {r['cpu_ms_per_request']:>8.3f}")
    print("added = TTFT p50 minus direct's; paired = median of the per-round difference; gap = time between\n"
          "consecutive events at the client; shift = an event's offset from the first event, minus direct's\n"
          "at the same index (0: no delay per chunk); last shift = that for the last event; cpu/req = the\n"
          "server process's CPU per request (direct: the scripted API's, which every path pays).")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--serve-gateway", metavar="URL", help=argparse.SUPPRESS)
    ap.add_argument("--allowlist", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--server-src", type=Path, default=SERVER_SRC, help=argparse.SUPPRESS)
    ap.add_argument("--profile-file", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--before", type=Path, metavar="CHECKOUT",
                    help="an earlier checkout whose gateways join the same rounds (git worktree add /tmp/x <commit>)")
    ap.add_argument("--profile", action="store_true", help="print where the time to first token goes")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--requests", type=int, help="requests per server and run (default 250, quick 100)")
    ap.add_argument("--chunk-delay", type=float, default=0.005, help="seconds between SSE events (default 0.005)")
    ap.add_argument("--words", type=int, default=30, help="words in the answer (one text delta each)")
    ap.add_argument("--body-scale", type=float, default=1.0,
                    help="request body size: 1 = CLI-sized (~80 KB), 0 = minimal")
    ap.add_argument("--rounds", type=int, help="throughput rounds (default 5, quick 3)")
    ap.add_argument("--lines", type=int, help="throughput lines (default 20000, quick 5000)")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    if args.serve_gateway:
        serve_gateway(args.serve_gateway, args.allowlist, args.server_src, args.profile_file)
        return 0
    global BODY_SCALE
    BODY_SCALE = args.body_scale
    requests = args.requests or (100 if args.quick else 250)
    load = os.getloadavg()[0]
    print(f"# gateway benchmark: {requests} requests per server and run, "
          f"request body {len(cli_sized_body()) // 1024} KiB, load average {load:.2f}, {os.cpu_count()} CPUs", flush=True)
    # Time to first token with the events back to back (no scripted sleep in the figure), then the
    # spacing with the events --chunk-delay apart.
    profile: dict | None = {} if args.profile else None
    first = latency(requests, 0.0, args.words, args.before, profile)
    print_latency("Time to first token (ms), events back to back", first)
    if profile is not None:
        print_profile(profile)
    spaced = latency(requests, args.chunk_delay, args.words, args.before)
    print_latency(f"Chunk spacing (ms), events {args.chunk_delay * 1000:g} ms apart", spaced)
    lat = {name: {**spaced[name], **{k: v for k, v in first[name].items() if k.startswith("ttft")}}
           for name in first}
    summary: dict = {"latency": lat}
    if not args.skip_throughput:
        rounds = args.rounds or (3 if args.quick else 5)
        lines = args.lines or (5000 if args.quick else 20000)
        print(f"\n# throughput: {rounds} rounds x {lines} lines per server ...", flush=True)
        tput = throughput(rounds, lines)
        summary["throughput"] = tput
        print("\n## Single-phase event throughput (bench_run_phase P2), events/s")
        print(f"{'gateway on':<14} median {statistics.median(tput['on']):>8.0f}  rounds "
              + ", ".join(f"{x:.0f}" for x in tput["on"]))
        print(f"{'gateway off':<14} median {statistics.median(tput['off']):>8.0f}  rounds "
              + ", ".join(f"{x:.0f}" for x in tput["off"]))
        print(f"ratio on/off (median of rounds): {tput['ratio_median']:.3f}  (per round: "
              + ", ".join(f"{x:.2f}" for x in tput["ratios"]) + ")")
        print(f"server CPU per event, us: on {statistics.median(tput['cpu_us_on']):.1f} "
              f"(rounds {', '.join(f'{x:.1f}' for x in tput['cpu_us_on'])}), off "
              f"{statistics.median(tput['cpu_us_off']):.1f} (rounds {', '.join(f'{x:.1f}' for x in tput['cpu_us_off'])}); "
              f"ratio on/off {tput['cpu_ratio_median']:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
