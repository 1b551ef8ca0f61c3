"""P6: time to first event with the real Claude Code CLI, three ways side by side.

* **cli**: the CLI on its own — ``Popen`` of the bundled ``claude`` in stream-json mode, the prompt
  line written at once, until its first stdout line (``system/init``);
* **sdk**: ``claude_agent_sdk.query()`` (its own process) until its first message (the init
  ``SystemMessage``);
* **helix**: a ``RunPhase`` call on the real server until the first ``StreamEvent`` at the client
  (``first``: a status change the server emits before the CLI starts) and until the ``session_init``
  event (``init``: the CLI's first line, through shim, parser, store and gRPC);
* **helix warm**: the same on a server with a warm pool (``warm_pool``, size 2) declared for
  exactly this request, so the phase runs on a CLI started ahead (the pool refills between rounds).

Every CLI talks to the scripted Messages API (``helix_runner.offline``; the server runs its own with
``--offline-script``), so nothing leaves the machine. The three run interleaved round by round, the
order rotating, after one warm-up round (the first start of the 200 MB CLI reads it from disk).
Overhead = helix init - cli init, per round, median. The goal (performance issue, P6): overhead
<= 5 ms, and with a warm start >= 2x faster than the SDK.

With ``--baseline REF`` a server of another commit (its ``server/`` exported, the same venv) runs
cold in the same rounds: ``base init`` and ``base overhead``, side by side.

Usage: .venv/bin/python benchmarks/bench_first_event.py [--rounds 10] [--baseline REF] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from server_process import ServerProcess, export_baseline

REPO_ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = REPO_ROOT / ".venv" / "bin"
SCRIPT = {"turns": [{"content": [{"type": "text", "text": "ok"}], "times": 1000}]}
PROMPT = "say ok"


def quantiles(values: list[float]) -> dict[str, float]:
    v = sorted(values)
    if not v:
        return {"median": float("nan"), "q1": float("nan"), "q3": float("nan"), "n": 0}
    q = statistics.quantiles(v, n=4) if len(v) > 1 else [v[0], v[0], v[0]]
    return {"median": statistics.median(v), "q1": q[0], "q3": q[2], "n": len(v)}


def cli_env(base_url: str, home: Path) -> dict[str, str]:
    from helix_runner.offline.env import cli_env as offline_env

    return offline_env(base_url, home=home)


INITIALIZE = (b'{"type":"control_request","request_id":"req_1","request":{"subtype":"initialize","hooks":'
              b'{"PreToolUse":[{"hookCallbackIds":["helix_pre_tool_use"],"timeout":86400}]}}}\n')


def cli_first_line(claude: str, env: dict[str, str], workdir: Path, initialize: bool = False) -> float:
    """Popen -> the init line (ms), the prompt written right after the spawn, as the server does;
    ``initialize``: after the server's ``initialize`` control request (its hook registration)."""
    from helix_runner.process.claude_command import BASE_ARGS, prompt_line

    t0 = time.perf_counter()
    proc = subprocess.Popen([claude, *BASE_ARGS], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, cwd=workdir, env=env, start_new_session=True)
    watchdog = threading.Timer(120, proc.kill)  # bounded, whatever the CLI does
    watchdog.start()
    try:
        proc.stdin.write((INITIALIZE if initialize else b"") + prompt_line(PROMPT) + b"\n")
        proc.stdin.flush()
        first = proc.stdout.readline()
        if initialize and b'"control_response"' in first:
            first = proc.stdout.readline()
        elapsed = (time.perf_counter() - t0) * 1000
        if not first.startswith(b'{"type":"system","subtype":"init"'):
            raise RuntimeError(f"unexpected first line: {first[:200]!r}")
        for line in proc.stdout:  # to the result, then let it exit
            if json.loads(line).get("type") == "result":
                break
        proc.stdin.close()
        proc.wait(30)
        return elapsed
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def sdk_main(cfg: dict) -> dict:
    from claude_agent_sdk import ClaudeAgentOptions, query

    options = ClaudeAgentOptions(cli_path=cfg["claude"], cwd=cfg["workdir"])
    t0 = time.perf_counter()
    first = None
    async for _msg in query(prompt=PROMPT, options=options):
        if first is None:
            first = (time.perf_counter() - t0) * 1000
    return {"first_ms": first}


def sdk_first_message(claude: str, env: dict[str, str], workdir: Path) -> float:
    """query() -> first message (ms), in its own process with the offline environment as its whole env."""
    cfg = json.dumps({"claude": claude, "workdir": str(workdir)})
    done = subprocess.run([str(VENV_BIN / "python"), str(Path(__file__).resolve()), "--sdk", cfg],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"sdk run failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["first_ms"]


async def helix_first_events(address: str, workdir: Path, tag: str) -> tuple[float, float]:
    """RunPhase call -> (first event, session_init event) at the client, ms."""
    import grpc

    from helix.runner.v1 import runner_service_pb2 as pb
    from helix.runner.v1 import runner_service_pb2_grpc as pb_grpc

    async with grpc.aio.insecure_channel(address) as channel:
        await asyncio.wait_for(channel.channel_ready(), 20)
        stub = pb_grpc.RunnerServiceStub(channel)
        req = pb.RunPhaseRequest(job_id=tag, phase_id="p", prompt=PROMPT, working_dir=str(workdir))
        t0 = time.perf_counter()
        first = init = None
        async for resp in stub.RunPhase(req, timeout=120):
            now = (time.perf_counter() - t0) * 1000
            for ev in resp.events:
                if first is None:
                    first = now
                if init is None and ev.WhichOneof("payload") == "session_init":
                    init = now
            if resp.HasField("result"):
                break
        return first, init


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="4 rounds")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    ap.add_argument("--baseline", metavar="REF", help="also a cold server of this git ref, in the same rounds")
    ap.add_argument("--sdk", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.sdk:
        print(json.dumps(asyncio.run(sdk_main(json.loads(args.sdk)))))
        return 0
    rounds = 4 if args.quick else args.rounds
    from helix_runner.process.claude_locator import bundled_claude_path

    claude = str(bundled_claude_path())
    tmp = Path(tempfile.mkdtemp(prefix="helix-first-event-"))
    workdir = tmp / "ws"
    workdir.mkdir()
    script = tmp / "script.json"
    script.write_text(json.dumps(SCRIPT))
    api = subprocess.Popen([str(VENV_BIN / "python"), "-m", "helix_runner.offline", "--script", str(script)],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    server = warm = base = None
    try:
        base_url = api.stdout.readline().strip().partition("=")[2]
        env = cli_env(base_url, tmp / "home")
        server = ServerProcess(tmp, "p6", Path(claude), workdir, extra_args=("--offline-script", str(script)),
                               env_extra={"HELIX_RUNNER_API_KEY_HELPER": "false"})
        pool = json.dumps({"size": 2, "working_dir": str(workdir)})
        warm = ServerProcess(tmp, "p6-warm", Path(claude), workdir, extra_args=("--offline-script", str(script)),
                             env_extra={"HELIX_RUNNER_API_KEY_HELPER": "false", "HELIX_RUNNER_WARM_POOL": pool})
        if args.baseline:
            base = ServerProcess(tmp, "p6-base", Path(claude), workdir, extra_args=("--offline-script", str(script)),
                                 env_extra={"HELIX_RUNNER_API_KEY_HELPER": "false"},
                                 server_src=export_baseline(args.baseline, tmp))
        print(f"# bench_first_event: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}, "
              f"{rounds} rounds (+1 warm-up), claude {claude}", flush=True)
        runs: dict[str, list[float]] = {"cli": [], "cli+initialize": [], "sdk": [], "helix first": [], "helix init": [],
                                        "warm first": [], "warm init": []}
        overhead: list[float] = []
        base_overhead: list[float] = []
        contenders = ["cli", "sdk", "helix", "warm", "cli+initialize", *(["base"] if base else [])]
        if base:
            runs.update({"base first": [], "base init": []})
        for rnd in range(rounds + 1):
            order = contenders[rnd % len(contenders):] + contenders[:rnd % len(contenders)]
            got: dict[str, float] = {}
            for who in order:
                if who == "cli":
                    got["cli"] = cli_first_line(claude, env, workdir)
                elif who == "cli+initialize":
                    got["cli+initialize"] = cli_first_line(claude, env, workdir, initialize=True)
                elif who == "sdk":
                    got["sdk"] = sdk_first_message(claude, env, workdir)
                elif who == "helix":
                    got["helix first"], got["helix init"] = asyncio.run(
                        helix_first_events(server.address, workdir, f"p6-{rnd}"))
                elif who == "base":
                    got["base first"], got["base init"] = asyncio.run(
                        helix_first_events(base.address, workdir, f"p6b-{rnd}"))
                else:
                    got["warm first"], got["warm init"] = asyncio.run(
                        helix_first_events(warm.address, workdir, f"p6w-{rnd}"))
            if rnd == 0:
                continue  # warm-up
            for k, v in got.items():
                runs[k].append(v)
            overhead.append(got["helix init"] - got["cli"])
            if base:
                base_overhead.append(got["base init"] - got["cli"])
    finally:
        for srv in (server, warm, base):
            if srv is not None:
                srv.stop()
        api.terminate()
        api.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)

    summary = {k: quantiles(v) for k, v in runs.items()}
    summary["overhead"] = quantiles(overhead)
    if base:
        summary["base overhead"] = quantiles(base_overhead)
    sdk = summary["sdk"]["median"]
    print("\n## Time to first event, real CLI against the scripted API (ms; median, IQR over rounds)")
    print(f"{'path':<48} {'median':>8} {'q1':>8} {'q3':>8}")
    labels = {
        "cli": "CLI alone: spawn -> first line (init)",
        "cli+initialize": "CLI alone after the server's initialize request",
        "sdk": "SDK query() -> first message (init)",
        "helix first": "RunPhase call -> first event at the client",
        "helix init": "RunPhase call -> session_init event at the client",
        "overhead": "overhead: helix init - CLI alone (per round)",
        "warm first": "warm pool: RunPhase call -> first event",
        "warm init": "warm pool: RunPhase call -> session_init event",
    }
    if base:
        labels.update({"base first": f"{args.baseline}: RunPhase call -> first event",
                       "base init": f"{args.baseline}: RunPhase call -> session_init event",
                       "base overhead": f"{args.baseline}: overhead (per round)"})
    for key, label in labels.items():
        s = summary[key]
        print(f"{label:<48} {s['median']:>8.1f} {s['q1']:>8.1f} {s['q3']:>8.1f}")
    print(f"SDK / helix init: {sdk / summary['helix init']['median']:.2f}x (cold), "
          f"{sdk / summary['warm init']['median']:.2f}x (warm start; goal >= 2x)")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
