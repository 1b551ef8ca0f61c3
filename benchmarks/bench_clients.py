"""Events/s and live latency of the three generated clients, side by side, against the real server.

What it measures: how fast each client (Rust/tonic, TypeScript/Connect, Python/betterproto2 over
grpc.aio) receives the events of one RunPhase stream from the real server, and how late each event
arrives. The server runs a fake ``claude`` (``--claude-path``; written to a temporary directory by
this script) that answers the server's ``initialize`` request, then writes one ``system/init``
line, N assistant text lines stamped ``ts=<unix ns>`` at the moment of writing, and a success
``result``. Each client's program (``clients/<lang>/examples/bench_events.*``) stamps every event
when its loop receives it; latency = receive stamp - write stamp (same machine clock), i.e. CLI
write -> server parse/sequence/record -> gRPC -> client decode -> application loop.

Two phases per client, the clients one after the other (never concurrently, so they do not share
the 2 cores), interleaved over ``--rounds``:

- fast: ``--events`` lines written as fast as the fake CLI can; events/s = events received over the
  span from the first to the last event; its latencies include queueing behind the burst.
- paced: ``--paced-events`` lines at ``--rate`` lines/s; the "live" latency of a client that keeps up.

Usage (build the programs first with ``scripts/test-clients``; the Rust one is built here in release
mode, about two minutes the first time)::

    .venv/bin/python benchmarks/bench_clients.py [--events 20000] [--paced-events 2000] [--rate 500] [--rounds 1]

It measures and prints a table; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FAKE_CLAUDE = r'''#!{python}
"""A fake `claude` for benchmarks: prompt `bench count=N rate=R` -> N stamped assistant texts."""
import json, sys, time, uuid

write = sys.stdout.write
flush = sys.stdout.flush
dumps = json.JSONEncoder(separators=(",", ":")).encode
prompt = ""
for line in sys.stdin:
    message = json.loads(line)
    if message.get("type") == "control_request":
        write(dumps({{"type": "control_response", "response": {{"subtype": "success",
              "request_id": message["request_id"], "response": {{}}}}}}) + "\n")
        flush()
    elif message.get("type") == "user":
        prompt = message["message"]["content"]
        break
params = dict(item.split("=", 1) for item in prompt.split()[1:])
count, rate = int(params["count"]), float(params["rate"])
session = str(uuid.uuid4())
write(dumps({{"type": "system", "subtype": "init", "cwd": ".", "session_id": session, "tools": [],
             "mcp_servers": [], "model": "bench-model", "permissionMode": "default",
             "apiKeySource": "none", "claude_code_version": "0.0.0-bench", "uuid": str(uuid.uuid4())}}) + "\n")
flush()
start = time.monotonic()
for i in range(count):
    if rate:
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    write(dumps({{"type": "assistant", "message": {{"id": f"msg_bench_{{i}}", "type": "message",
                 "role": "assistant", "model": "bench-model",
                 "content": [{{"type": "text", "text": f"ts={{time.time_ns()}} #{{i}}"}}],
                 "stop_reason": None, "usage": {{"input_tokens": 1, "output_tokens": 1}}}},
                 "parent_tool_use_id": None, "session_id": session, "uuid": f"u{{i}}"}}) + "\n")
    flush()
write(dumps({{"type": "result", "subtype": "success", "is_error": False, "duration_ms": 1,
             "duration_api_ms": 1, "num_turns": 1, "result": "done", "session_id": session,
             "total_cost_usd": 0, "usage": {{"input_tokens": count, "output_tokens": count}},
             "modelUsage": {{}}, "permission_denials": [], "uuid": str(uuid.uuid4())}}) + "\n")
flush()
'''

CLIENTS = {
    # An optimized build (prost decoding in a debug build is several times slower); built on demand.
    "rust (tonic)": [str(ROOT / "clients/rust/target/release/examples/bench_events")],
    "typescript (connect-node)": ["node", str(ROOT / "clients/typescript/dist/examples/bench_events.js")],
    "python (betterproto2 + grpc.aio)": [sys.executable, str(ROOT / "clients/python/examples/bench_events.py")],
}


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def start_server(base: Path) -> tuple[subprocess.Popen, str]:
    fake = base / "claude"
    fake.write_text(FAKE_CLAUDE.format(python=sys.executable))
    fake.chmod(0o755)
    (base / "work").mkdir()
    log = base / "server.log"
    argv = [sys.executable, "-m", "helix_runner", "serve", "--port", "0", "--data-dir", str(base / "data"),
            "--workspace-root", str(base / "work"), "--claude-path", str(fake), "--log-format", "json"]
    with log.open("wb") as stderr:
        server = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
                                  env={**os.environ, "HOME": str(base)})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if '"msg":"serving"' in line:
                return server, json.loads(line)["address"]
        if server.poll() is not None:
            break
        time.sleep(0.1)
    server.kill()
    sys.exit(f"the server did not start:\n{log.read_text(errors='replace')}")


def run_client(command: list[str], address: str, workdir: Path, job_id: str, prompt: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "clients/python/src")}
    done = subprocess.run([*command, address, str(workdir), job_id, prompt], capture_output=True, text=True,
                          timeout=600, cwd=ROOT, env=env)
    if done.returncode != 0:
        sys.exit(f"{command} failed:\n{done.stderr}")
    report = json.loads(done.stdout)
    if report["status"] != "PHASE_STATUS_SUCCEEDED":
        sys.exit(f"{command}: the phase ended {report['status']}")
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000, help="lines in the fast phase")
    parser.add_argument("--paced-events", type=int, default=2_000, help="lines in the paced phase")
    parser.add_argument("--rate", type=float, default=500, help="lines/s in the paced phase")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    subprocess.run(["cargo", "build", "--release", "--locked", "--quiet", "--example", "bench_events"],
                   cwd=ROOT / "clients/rust", check=True)
    for name, command in CLIENTS.items():
        if not Path(command[-1]).exists():
            sys.exit(f"{command[-1]} is missing ({name}): run scripts/test-clients first")

    results: dict[str, dict[str, list[float]]] = {name: {"rate": [], "fast": [], "paced": []} for name in CLIENTS}
    with tempfile.TemporaryDirectory(prefix="bench-clients-") as tmp:
        base = Path(tmp)
        server, address = start_server(base)
        try:
            for round_ in range(args.rounds):
                for index, (name, command) in enumerate(CLIENTS.items()):
                    fast = run_client(command, address, base / "work", f"bench-{round_}-{index}-fast",
                                      f"bench count={args.events} rate=0")
                    span = (fast["last_ns"] - fast["first_ns"]) / 1e9
                    results[name]["rate"].append((fast["events"] - 1) / span)
                    results[name]["fast"] += [ns / 1e6 for ns in fast["latencies_ns"]]
                    paced = run_client(command, address, base / "work", f"bench-{round_}-{index}-paced",
                                       f"bench count={args.paced_events} rate={args.rate}")
                    results[name]["paced"] += [ns / 1e6 for ns in paced["latencies_ns"]]
        finally:
            server.terminate()
            server.wait(15)

    print(f"fast phase: {args.events} assistant texts (plus status, init, cost and result events) as fast as possible; paced phase: "
          f"{args.paced_events} at {args.rate:g}/s; {args.rounds} round(s); {os.cpu_count()} CPUs\n")
    header = ("client", "events/s (fast)", "fast p50 ms", "fast p99 ms", "live p50 ms", "live p99 ms", "live max ms")
    rows = []
    for name, r in results.items():
        rows.append((name, f"{statistics.median(r['rate']):,.0f}", f"{percentile(r['fast'], 50):.1f}",
                     f"{percentile(r['fast'], 99):.1f}", f"{percentile(r['paced'], 50):.2f}",
                     f"{percentile(r['paced'], 99):.2f}", f"{max(r['paced']):.2f}"))
    widths = [max(len(str(row[i])) for row in (header, *rows)) for i in range(len(header))]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
