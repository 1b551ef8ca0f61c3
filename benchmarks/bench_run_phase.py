"""End-to-end RunPhase benchmark: live latency, loss/order, server memory, single-phase throughput.

Everything runs as separate processes, as in production:

* a fake ``claude`` written to a temp dir (a ``python -I -S`` script, ~20 ms to start) that reads
  its stdin (answering any ``control_request`` such as ``initialize`` with a success), and after
  the user line prints ``system/init``, N ``assistant`` text lines, each carrying its per-phase
  counter and the ``time.time_ns()`` taken just before the line's ``write(2)``, then a ``result``
  success line, and exits 0 at stdin EOF. Rate and count come from the request environment
  (``HELIX_BENCH_LINES``, ``HELIX_BENCH_RATE``; rate 0 = as fast as it can, in 64 KiB writes);
* the real server (``helix-runner serve``), a fresh instance per scenario with its own data dir,
  ``HELIX_RUNNER_MAX_CONCURRENT_PHASES=300``;
* a gRPC client in another process (this file with ``--client``) that opens K concurrent
  ``RunPhase`` streams on one channel, stamps every ``assistant_text`` event on arrival and checks
  per phase: counters 1..N complete and in order, ``sequence`` gap-free, the result last and
  ``SUCCEEDED``;
* for throughput, the official ``claude-agent-sdk`` (``query(prompt, ClaudeAgentOptions(cli_path=
  FAKE))``) consuming the same fake child in its own process (this file with ``--sdk-client``);
* a wake-up meter (``--hiccup``): how late a trivial process wakes from a 1 ms sleep during each
  latency run, i.e. the scheduling noise of the machine, a floor under any latency measured here.

Latency = client receive time - the child's embedded write time (same host clock). It is split
into "in" (child write -> server read, the StreamEvent's ``receive_time``) and "out" (server read
-> client receive). "steady" keeps the events received while every phase that streams at all was
streaming (after the last first text, before the first phase's last text): no spawn storm at the
start, no phases finishing at the end.

Server memory: VmRSS of the server process only (children are other processes), idle after a
warm-up phase vs. the median while all K phases stream; per phase = (median - idle) / K.

Usage: .venv/bin/python benchmarks/bench_run_phase.py [--quick] [--ks 1,50,200,200@5] [--rate R]
                                                      [--seconds S] [--tput-lines M] [--rounds R]
                                                      [--baseline REF]  # throughput beside git REF's server
       .venv/bin/python benchmarks/bench_run_phase.py --profile 50   # server under cProfile
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import shutil
import signal
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
CLK_TCK = os.sysconf("SC_CLK_TCK")

# ------------------------------------------------------------------------------------------------
# The fake claude. Kept free of third-party imports so it starts with -I -S in ~20 ms.

FAKE_CLAUDE = r"""#!{python} -IS
# Fake `claude` for benchmarks/bench_run_phase.py (generated; do not edit).
import os, sys, time
from json import dumps, loads

N = int(os.environ.get("HELIX_BENCH_LINES", "10"))
RATE = float(os.environ.get("HELIX_BENCH_RATE", "0"))
PID = os.getpid()
SID = "b0000000-0000-4000-8000-%012x" % PID
write = os.write


def out(data):
    view = memoryview(data)
    while view:
        view = view[write(1, view):]


def answer(msg):
    if msg.get("type") == "control_request":
        out(dumps({{"type": "control_response", "response": {{"subtype": "success",
                   "request_id": msg.get("request_id"), "response": {{}}}}}}).encode() + b"\n")


inp = sys.stdin.buffer
while True:  # the prompt; the Agent SDK sends `initialize` first and waits for its answer
    line = inp.readline()
    if not line:
        sys.stderr.write("fake claude: stdin closed before a user line\n")
        sys.exit(3)
    line = line.strip()
    if line:
        msg = loads(line)
        if msg.get("type") == "user":
            break
        answer(msg)

out(('{{"type":"system","subtype":"init","cwd":%s,"session_id":"%s","tools":["Bash","Read","Edit"],'
     '"mcp_servers":[],"model":"claude-sonnet-4-5","permissionMode":"default","slash_commands":[],'
     '"apiKeySource":"ANTHROPIC_API_KEY","claude_code_version":"2.1.330","output_style":"default",'
     '"agents":[],"skills":[],"plugins":[],"capabilities":[],"uuid":"%s"}}\n'
     % (dumps(os.getcwd()), SID, SID)).encode())

A = ('{{"type":"assistant","message":{{"id":"msg_bench_%d_%d","type":"message","role":"assistant",'
     '"model":"claude-sonnet-4-5","content":[{{"type":"text","text":"bench i=%d t=%d"}}],"stop_reason":null,'
     '"stop_sequence":null,"usage":{{"input_tokens":1074,"cache_creation_input_tokens":0,'
     '"cache_read_input_tokens":0,"output_tokens":1,"service_tier":"standard"}},'
     '"context_management":null}},"parent_tool_use_id":null,"session_id":"' + SID + '",'
     '"uuid":"a0000000-0000-4000-8000-%06x%06x","timestamp":"2026-01-01T00:00:00.000Z",'
     '"request_id":"req_bench"}}\n')
if RATE > 0:  # paced on an absolute schedule; the first line right after init
    period = 1.0 / RATE
    t0 = time.monotonic()
    for i in range(1, N + 1):
        delay = t0 + (i - 1) * period - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        out((A % (PID, i, i, time.time_ns(), PID & 0xFFFFFF, i)).encode())
else:  # as fast as possible, in 64 KiB writes (the timestamp is when the line was formatted)
    buf, size = [], 0
    for i in range(1, N + 1):
        s = A % (PID, i, i, time.time_ns(), PID & 0xFFFFFF, i)
        buf.append(s)
        size += len(s)
        if size >= 65536:
            out("".join(buf).encode())
            buf, size = [], 0
    if buf:
        out("".join(buf).encode())

out(('{{"type":"result","subtype":"success","is_error":false,"duration_ms":%d,"duration_api_ms":%d,'
     '"num_turns":1,"result":"done","stop_reason":"end_turn","session_id":"%s","total_cost_usd":0.01,'
     '"usage":{{"input_tokens":1074,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,'
     '"output_tokens":%d,"service_tier":"standard"}},"modelUsage":{{"claude-sonnet-4-5":{{"inputTokens":1074,'
     '"outputTokens":%d,"cacheReadInputTokens":0,"cacheCreationInputTokens":0,"webSearchRequests":0,'
     '"costUSD":0.01,"contextWindow":200000,"maxOutputTokens":32000}}}},"permission_denials":[],'
     '"terminal_reason":"completed","uuid":"c0000000-0000-4000-8000-%012x"}}\n'
     % (N, N, SID, N, N, PID)).encode())

while True:  # stay until stdin EOF, like the real CLI; answer late control requests
    line = inp.readline()
    if not line:
        break
    line = line.strip()
    if line:
        answer(loads(line))
sys.exit(0)
"""


def write_fake_claude(directory: Path) -> Path:
    path = directory / "claude"
    python = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    path.write_text(FAKE_CLAUDE.format(python=python))
    path.chmod(0o755)
    return path


def parse_text(text: str) -> tuple[int, int]:
    """(counter, write time ns) from ``bench i=<counter> t=<ns>``."""
    _, i, t = text.split(" ")
    return int(i[2:]), int(t[2:])


def pct(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return float("nan")
    k = max(0, min(len(sorted_values) - 1, int(round(p / 100 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[k]


def summarize(ns: list[int]) -> dict[str, float]:
    v = sorted(x / 1e6 for x in ns)
    if not v:
        return {"n": 0}
    return {
        "n": len(v),
        "p50": pct(v, 50),
        "p90": pct(v, 90),
        "p99": pct(v, 99),
        "p999": pct(v, 99.9),
        "max": v[-1],
        "mean": statistics.fmean(v),
    }


def cpu_seconds() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


# ------------------------------------------------------------------------------------------------
# Client process (--client): K concurrent RunPhase streams.


def emit_line(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def client_main(cfg: dict) -> dict:
    import grpc

    from helix.runner.v1 import resources_pb2 as res
    from helix.runner.v1 import runner_service_pb2 as pb
    from helix.runner.v1 import runner_service_pb2_grpc as pb_grpc

    k, n, rate = cfg["k"], cfg["lines"], cfg["rate"]
    channel = grpc.aio.insecure_channel(
        cfg["address"], options=[("grpc.max_receive_message_length", 64 << 20)]
    )
    await asyncio.wait_for(channel.channel_ready(), 20)
    stub = pb_grpc.RunnerServiceStub(channel)

    # Per event: (phase, client receive ns, child write ns, server receive ns). Analysis at the end.
    records: list[tuple[int, int, int, int]] = []
    rec = records.append
    kinds: dict[str, int] = {}
    buckets: dict[int, int] = {}  # all events received per 10 ms (client clock), for per-event server CPU
    phases = [
        {
            "counters": [],
            "seq_gaps": 0,
            "after_result": 0,
            "status": None,
            "error": None,
            "events": 0,
            "first_text_ns": 0,
            "last_text_ns": 0,
            "result_ns": 0,
        }
        for _ in range(k)
    ]
    cpu0 = cpu_seconds()
    t_start = time.time_ns()

    async def one(idx: int) -> None:
        ph = phases[idx]
        counters = ph["counters"]
        req = pb.RunPhaseRequest(
            job_id=f"{cfg['tag']}-{idx}",
            phase_id="p",
            prompt="benchmark",
            working_dir=cfg["workdir"],
            options=pb.PhaseOptions(env={"HELIX_BENCH_LINES": str(n), "HELIX_BENCH_RATE": repr(rate)}),
        )
        last_seq = 0
        got_result = False
        try:
            async for resp in stub.RunPhase(req, timeout=cfg["timeout"]):
                now = time.time_ns()
                if got_result:
                    ph["after_result"] += 1
                for ev in resp.events:
                    if ev.sequence != last_seq + 1:
                        ph["seq_gaps"] += 1
                    last_seq = ev.sequence
                    kind = ev.WhichOneof("payload")
                    kinds[kind] = kinds.get(kind, 0) + 1
                    if kind == "assistant_text":
                        i, t_write = parse_text(ev.assistant_text.text)
                        counters.append(i)
                        rt = ev.receive_time
                        rec((idx, now, t_write, rt.seconds * 1_000_000_000 + rt.nanos))
                        if not ph["first_text_ns"]:
                            ph["first_text_ns"] = now
                        ph["last_text_ns"] = now
                ph["events"] += len(resp.events)
                b = now // 10_000_000
                buckets[b] = buckets.get(b, 0) + len(resp.events)
                if resp.HasField("result"):
                    got_result = True
                    ph["result_ns"] = now
                    ph["status"] = res.PhaseStatus.Name(resp.result.status)
                    ph["reason"] = resp.result.reason
        except grpc.aio.AioRpcError as exc:
            ph["error"] = (
                f"{exc.code().name}: {exc.details()} after {(time.time_ns() - t_start) / 1e9:.1f} s "
                f"({ph['events']} events received)"
            )
        if not got_result and ph["error"] is None:
            ph["error"] = "stream ended without a result"

    await asyncio.gather(*(one(i) for i in range(k)))
    t_end = time.time_ns()
    cpu = cpu_seconds() - cpu0
    await channel.close()

    lost = reordered = dup = failed = gaps = after = 0
    errors: list[str] = []
    for ph in phases:
        c = ph["counters"]
        seen = set(c)
        lost += n - len(seen & set(range(1, n + 1)))
        dup += len(c) - len(seen)
        reordered += sum(1 for a, b in itertools.pairwise(c) if b < a)
        gaps += ph["seq_gaps"]
        after += ph["after_result"]
        if ph["status"] != "PHASE_STATUS_SUCCEEDED":
            failed += 1
            if len(errors) < 5:
                errors.append(ph["error"] or f"{ph['status']}: {ph.get('reason')}")

    total = [r[1] - r[2] for r in records]
    lat_in = [r[3] - r[2] for r in records]
    lat_out = [r[1] - r[3] for r in records]
    # Steady window: every phase that streams at all is streaming (after the last first text, before
    # the first phase's last text), so neither the spawn storm nor phases finishing are in it.
    firsts = [ph["first_text_ns"] for ph in phases if ph["first_text_ns"]]
    lasts = [ph["last_text_ns"] for ph in phases if ph["counters"] and ph["counters"][-1] == n]
    w0, w1 = (max(firsts), min(lasts)) if firsts and lasts else (0, 0)
    if w1 <= w0:
        w0 = w1 = 0
    steady = [r[1] - r[2] for r in records if w0 and w0 <= r[1] <= w1]
    out = {
        "event": "done",
        "k": k,
        "lines": n,
        "rate": rate,
        "texts": len(records),
        "events": sum(ph["events"] for ph in phases),
        "kinds": kinds,
        "lost": lost,
        "reordered": reordered,
        "duplicates": dup,
        "seq_gaps": gaps,
        "after_result": after,
        "failed": failed,
        "errors": errors,
        "latency": summarize(total),
        "lat_in": summarize(lat_in),
        "lat_out": summarize(lat_out),
        "steady": summarize(steady),
        "steady_window_s": (w1 - w0) / 1e9 if w0 and w1 and w1 > w0 else 0.0,
        "wall_s": (t_end - t_start) / 1e9,
        "client_cpu_s": cpu,
        "buckets": buckets,
        "window": [w0, w1],
        "phases_streaming": len(firsts),
        "records": records,  # removed by client_process (written to cfg["dump"] when set)
    }
    if k == 1:  # throughput figures for the single-phase run
        ph = phases[0]
        out["t_start"], out["t_first"], out["t_last"], out["t_result"] = (
            t_start,
            ph["first_text_ns"],
            ph["last_text_ns"],
            ph["result_ns"],
        )
    return out


def client_process(cfg: dict) -> dict:
    out = asyncio.run(client_main(cfg))
    records = out.pop("records")
    if cfg.get("dump"):  # raw records for a closer look (--keep): phase, client ns, child write ns, server ns
        Path(cfg["dump"]).write_text(json.dumps(records))
    return out


# ------------------------------------------------------------------------------------------------
# SDK process (--sdk-client): the official claude-agent-sdk consuming the same fake child.


async def sdk_main(cfg: dict) -> dict:
    from claude_agent_sdk import AssistantMessage, ClaudeAgentOptions, ResultMessage, TextBlock, query

    n = cfg["lines"]
    options = ClaudeAgentOptions(
        cli_path=cfg["fake"],
        cwd=cfg["workdir"],
        env={"HELIX_BENCH_LINES": str(n), "HELIX_BENCH_RATE": repr(cfg["rate"])},
    )
    counters: list[int] = []
    lat: list[int] = []
    first = last = result_ns = 0
    result_ok = False
    cpu0 = cpu_seconds()
    t_start = time.time_ns()
    async for msg in query(prompt="benchmark", options=options):
        now = time.time_ns()
        if isinstance(msg, AssistantMessage):
            for block in msg.content:
                if isinstance(block, TextBlock):
                    i, t_write = parse_text(block.text)
                    counters.append(i)
                    lat.append(now - t_write)
                    if not first:
                        first = now
                    last = now
        elif isinstance(msg, ResultMessage):
            result_ns = now
            result_ok = msg.subtype == "success" and not msg.is_error
    t_end = time.time_ns()
    seen = set(counters)
    return {
        "event": "done",
        "texts": len(counters),
        "lost": n - len(seen & set(range(1, n + 1))),
        "reordered": sum(1 for a, b in itertools.pairwise(counters) if b < a),
        "result_ok": result_ok,
        "t_start": t_start,
        "t_first": first,
        "t_last": last,
        "t_result": result_ns,
        "t_end": t_end,
        "client_cpu_s": cpu_seconds() - cpu0,
        "latency": summarize(lat),
    }


# ------------------------------------------------------------------------------------------------
# Wake-up meter (--hiccup): how late a trivial process wakes from a 1 ms sleep on this machine right
# now. The server waits in epoll the same way, so this is a floor under its latency on a busy box.


def hiccup_main() -> dict:
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    emit_line({"event": "ready"})
    late: list[int] = []
    clock, sleep = time.perf_counter_ns, time.sleep
    while not stop:
        t = clock()
        sleep(0.001)
        late.append(clock() - t - 1_000_000)
    v = sorted(x / 1e6 for x in late)
    return {
        "event": "done",
        "wakeups": len(v),
        "p50": pct(v, 50),
        "p99": pct(v, 99),
        "p999": pct(v, 99.9),
        "max": v[-1] if v else float("nan"),
        "over_2ms": sum(1 for x in v if x > 2),
        "over_5ms": sum(1 for x in v if x > 5),
    }


class HiccupMeter:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [str(VENV_BIN / "python"), str(Path(__file__).resolve()), "--hiccup"],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.proc.stdout.readline()  # ready

    def stop(self) -> dict:
        if self.proc.poll() is not None:
            return {}
        self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            return {}
        return json.loads(out.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------------
# Driver: server lifecycle, /proc sampling, scenarios, tables.


def read_rss_kb(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def proc_cpu(pid: int) -> tuple[float, float]:
    """(self CPU s, reaped children CPU s) of a process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is state (field 3); utime, stime, cutime, cstime are fields 14-17.
    ut, st, cut, cst = (int(x) for x in fields[11:15])
    return (ut + st) / CLK_TCK, (cut + cst) / CLK_TCK


def proc_cpu_ns(pid: int) -> int:
    """CPU time of a process's live threads in nanoseconds (``/proc/PID/task/*/schedstat``): the
    100 Hz ticks of ``proc_cpu`` are 10 ms apart, too coarse for a phase of a few thousand events.
    A thread that ended is not counted (the server's threads live as long as it does)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended meanwhile
    return total


def machine_cpu() -> tuple[float, float]:
    """(busy s, total s) summed over all CPUs, from /proc/stat."""
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:]]
    idle = vals[3] + vals[4]
    total = sum(vals[:8])
    return (total - idle) / CLK_TCK, total / CLK_TCK


class Server(ServerProcess):
    """The server under test, with a phase limit and idle timeout fit for hundreds of phases."""

    server_src: str | None = None  # --server-src: a directory holding another helix_runner package

    def __init__(self, tmp: Path, name: str, fake: Path, workdir: Path, profile_out: Path | None = None,
                 server_src: str | Path | None = None):
        super().__init__(tmp, name, fake, workdir, profile_out=profile_out, server_src=server_src or self.server_src,
                         env_extra={"HELIX_RUNNER_MAX_CONCURRENT_PHASES": "300",
                                    "HELIX_RUNNER_DEFAULT_IDLE_TIMEOUT_SECONDS": "120"})


def run_subprocess_json(args: list[str], timeout: float, on_line=None) -> dict:
    """Runs this file in another mode; returns its final JSON line. Other JSON lines go to on_line."""
    proc = subprocess.Popen(
        [str(VENV_BIN / "python"), str(Path(__file__).resolve()), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    final: dict | None = None
    err_chunks: list[str] = []
    err_thread = threading.Thread(target=lambda: err_chunks.append(proc.stderr.read()), daemon=True)
    err_thread.start()
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        for line in proc.stdout:
            with contextlib.suppress(ValueError):
                msg = json.loads(line)
                if msg.get("event") == "done":
                    final = msg
                elif on_line is not None:
                    on_line(msg)
        proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err_thread.join(5)
    if final is None:
        raise RuntimeError(f"{args[0]} process failed (rc={proc.returncode}):\n{''.join(err_chunks)[-3000:]}")
    return final


class Sampler(threading.Thread):
    """Samples the server's VmRSS and CPU time every 50 ms."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid = pid
        self.samples: list[tuple[float, int, float]] = []  # (time, VmRSS kB, server CPU s)
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            rss = read_rss_kb(self.pid)
            if rss is not None:
                with contextlib.suppress(OSError):
                    self.samples.append((time.time(), rss, proc_cpu(self.pid)[0]))
            self._halt.wait(0.05)

    def stop(self) -> None:
        self._halt.set()
        self.join(2)

    def in_window(self, w0_ns: int, w1_ns: int) -> list[tuple[float, int, float]]:
        if not w0_ns:
            return []
        return [s for s in self.samples if w0_ns / 1e9 <= s[0] <= w1_ns / 1e9]


def server_version(server_src: str | None) -> str:
    """Which server code runs: --server-src, or the repo's commit and whether server/ has local changes."""
    if server_src:
        return f"helix_runner from {Path(server_src).resolve()}"
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--", "server"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return "unknown (git failed)"
    return f"repo server/ at {head}" + (
        f" plus {len(dirty)} uncommitted change(s) in server/" if dirty else ""
    )


def client_args(mode: str, cfg: dict) -> list[str]:
    return [mode, json.dumps(cfg)]


def warm_up(server: Server, workdir: Path, tag: str) -> None:
    """One short phase so imports, the channel and SQLite are warm before the idle measurement."""
    cfg = {
        "address": server.address,
        "k": 1,
        "lines": 20,
        "rate": 0.0,
        "workdir": str(workdir),
        "tag": f"warm-{tag}",
        "timeout": 60.0,
    }
    r = run_subprocess_json(client_args("--client", cfg), 90)
    if r["failed"]:
        raise RuntimeError(f"warm-up phase failed: {r['errors']}\n{server.log_tail()}")


def latency_scenario(
    tmp: Path,
    fake: Path,
    workdir: Path,
    k: int,
    lines: int,
    rate: float,
    profile_out: Path | None = None,
    dump: bool = False,
) -> dict:
    server = Server(tmp, f"lat-k{k}-r{rate:g}", fake, workdir, profile_out)
    try:
        warm_up(server, workdir, f"k{k}-r{rate:g}")
        time.sleep(0.5)
        idle_samples = []
        for _ in range(5):
            idle_samples.append(read_rss_kb(server.pid) or 0)
            time.sleep(0.02)
        idle = statistics.median(idle_samples)
        sampler = Sampler(server.pid)
        sampler.start()
        meter = HiccupMeter()
        cpu0, mach0, load0 = proc_cpu(server.pid), machine_cpu(), os.getloadavg()
        cfg = {
            "address": server.address,
            "k": k,
            "lines": lines,
            "rate": rate,
            "workdir": str(workdir),
            "tag": f"lat-k{k}-r{rate:g}",
            "timeout": lines / rate + 180.0,
            "dump": str(tmp / f"records-k{k}-r{rate:g}.json") if dump else None,
        }
        try:
            r = run_subprocess_json(client_args("--client", cfg), lines / rate + 240.0)
            cpu1, mach1 = proc_cpu(server.pid), machine_cpu()
        finally:
            hiccup = meter.stop()
            sampler.stop()
        r["hiccup"] = hiccup
        window = sampler.in_window(*r["window"])
        r["rss_idle_mb"] = idle / 1024
        r["rss_running_mb"] = statistics.median(s[1] for s in window) / 1024 if window else float("nan")
        r["rss_peak_mb"] = max(s[1] for s in sampler.samples) / 1024
        # Marginal server cost per event while all K phases stream (no spawning, no finishing).
        buckets = {int(b): c for b, c in r.pop("buckets").items()}
        r["steady_srv_us_per_event"] = r["steady_srv_cores"] = float("nan")
        r["steady_events_per_s"] = float("nan")
        if len(window) >= 3:
            (ta, _, ca), (tb, _, cb) = window[0], window[-1]
            n_ev = sum(c for b, c in buckets.items() if ta * 100 <= b < tb * 100)
            if n_ev:
                r["steady_srv_us_per_event"] = (cb - ca) / n_ev * 1e6
                r["steady_srv_cores"] = (cb - ca) / (tb - ta)
                r["steady_events_per_s"] = n_ev / (tb - ta)
        r["rss_window_samples"] = len(window)
        # Without a steady window (phases never all streamed at once), fall back to the peak: an upper
        # bound, flagged in the table.
        r["mb_from_peak"] = not window
        basis = r["rss_peak_mb"] if not window else r["rss_running_mb"]
        r["mb_per_phase"] = (basis - r["rss_idle_mb"]) / k
        r["server_cpu_s"] = cpu1[0] - cpu0[0]
        r["children_cpu_s"] = cpu1[1] - cpu0[1]
        busy = mach1[0] - mach0[0]
        r["machine_busy_s"] = busy
        r["machine_cpus_busy"] = busy / r["wall_s"]
        r["other_cpu_s"] = busy - r["server_cpu_s"] - r["children_cpu_s"] - r["client_cpu_s"]
        r["loadavg_before"] = load0[0]
        return r
    finally:
        server.stop()


def throughput_rounds(
    tmp: Path, fake: Path, workdir: Path, m: int, rounds: int, baseline_src: Path | None = None
) -> tuple[list[dict], list[dict], list[dict]]:
    """Rounds of one phase each: this tree's server, the SDK, and (``baseline_src``) a baseline
    server, in an order that rotates from round to round; returns their runs."""
    servers = {"grpc": Server(tmp, "tput", fake, workdir)}
    if baseline_src is not None:
        servers["baseline"] = Server(tmp, "tput-baseline", fake, workdir, server_src=baseline_src)
    runs: dict[str, list[dict]] = {"grpc": [], "sdk": [], "baseline": []}
    try:
        for who, server in servers.items():
            warm_up(server, workdir, f"tput-{who}")
        contenders = [*servers, "sdk"]
        for rnd in range(rounds):
            order = contenders[rnd % len(contenders):] + contenders[: rnd % len(contenders)]  # who goes first rotates
            for who in order:
                if who == "sdk":
                    cfg = {"lines": m, "rate": 0.0, "workdir": str(workdir), "fake": str(fake)}
                    runs["sdk"].append(run_subprocess_json(client_args("--sdk-client", cfg), 660))
                    continue
                server = servers[who]
                cpu0 = proc_cpu(server.pid)
                cfg = {
                    "address": server.address,
                    "k": 1,
                    "lines": m,
                    "rate": 0.0,
                    "workdir": str(workdir),
                    "tag": f"tput-{who}-{rnd}",
                    "timeout": 600.0,
                }
                r = run_subprocess_json(client_args("--client", cfg), 660)
                r["server_cpu_s"] = proc_cpu(server.pid)[0] - cpu0[0]
                runs[who].append(r)
    finally:
        for server in servers.values():
            server.stop()
    return runs["grpc"], runs["sdk"], runs["baseline"]


def rates(r: dict, m: int) -> tuple[float, float]:
    """(end-to-end events/s: call start -> last text; streaming events/s: first -> last text)."""
    e2e = m / ((r["t_last"] - r["t_start"]) / 1e9) if r["t_last"] else 0.0
    stream = (m - 1) / ((r["t_last"] - r["t_first"]) / 1e9) if r["t_last"] > r["t_first"] else 0.0
    return e2e, stream


NAN = float("nan")


def print_latency_table(results: list[dict]) -> None:
    print("\n## Live latency (child write -> event in a separate-process gRPC client), ms")
    hdr = (
        f"{'K':>4} {'rate':>4} {'events':>7} {'lost':>5} {'reord':>5} {'fail':>4} {'p50':>7} {'p99':>7} "
        f"{'max':>8} {'p99 in':>7} {'p99 out':>8} {'st.p50':>7} {'st.p99':>7} {'st.max':>7}"
    )
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        lat, st = r["latency"], r["steady"]
        print(
            f"{r['k']:>4} {r['rate']:>4g} {r['texts']:>7} {r['lost']:>5} {r['reordered']:>5} "
            f"{r['failed']:>4} {lat.get('p50', NAN):>7.2f} {lat.get('p99', NAN):>7.2f} "
            f"{lat.get('max', NAN):>8.2f} {r['lat_in'].get('p99', NAN):>7.2f} "
            f"{r['lat_out'].get('p99', NAN):>8.2f} {st.get('p50', NAN):>7.2f} {st.get('p99', NAN):>7.2f} "
            f"{st.get('max', NAN):>7.2f}"
        )
    print(
        "rate = assistant lines/s per phase; events = assistant_text events received; lost / reord =\n"
        "counters missing / out of order, over all phases; fail = phases not SUCCEEDED;\n"
        "in = child write -> server read (StreamEvent.receive_time); out = server read -> client receive;\n"
        "st.* = steady window: every phase that streams is streaming (after the last phase's first text,\n"
        "before the first phase's last text), so spawning and finishing phases are outside it."
    )
    for r in results:
        extra = []
        if r["duplicates"] or r["seq_gaps"] or r["after_result"]:
            extra.append(
                f"duplicates={r['duplicates']} seq_gaps={r['seq_gaps']} after_result={r['after_result']}"
            )
        if r["failed"]:
            extra.append(f"{r['phases_streaming']} of {r['k']} phases streamed; first errors: {r['errors']}")
        if extra:
            print(f"  K={r['k']}@{r['rate']:g}: " + "; ".join(extra))

    print("\n## Server memory (VmRSS of the server process only) and CPU per event")
    hdr = (
        f"{'K':>4} {'rate':>4} {'idle MB':>8} {'run MB':>7} {'peak MB':>8} {'MB/phase':>8} {'all ev':>7} "
        f"{'srv us/ev':>9} {'st.us/ev':>8} {'st.ev/s':>7} {'st.cores':>8} {'cli us/ev':>9} {'child s':>7} "
        f"{'other s':>7} {'busy':>5} {'wall s':>6}"
    )
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        ev = max(1, r["events"])
        print(
            f"{r['k']:>4} {r['rate']:>4g} {r['rss_idle_mb']:>8.1f} {r['rss_running_mb']:>7.1f} "
            f"{r['rss_peak_mb']:>8.1f} {r['mb_per_phase']:>7.3f}{'*' if r['mb_from_peak'] else ' '} "
            f"{r['events']:>7} "
            f"{r['server_cpu_s'] / ev * 1e6:>9.0f} {r['steady_srv_us_per_event']:>8.0f} "
            f"{r['steady_events_per_s']:>7.0f} {r['steady_srv_cores']:>8.2f} "
            f"{r['client_cpu_s'] / ev * 1e6:>9.0f} {r['children_cpu_s']:>7.1f} {r['other_cpu_s']:>7.1f} "
            f"{r['machine_cpus_busy']:>5.2f} {r['wall_s']:>6.1f}"
        )
    print(
        "run MB = median VmRSS over the steady window; MB/phase = (run - idle) / K, or * (peak - idle) / K\n"
        "when there was no steady window; all ev = every event\n"
        "delivered (text, init, status, cost, turn result...); srv/cli us/ev = server/client process CPU\n"
        "over the whole run / all ev (spawning and finishing included); st.us/ev = server CPU / events\n"
        "received in the steady window = the marginal cost of an event arriving on its own; st.ev/s and\n"
        "st.cores = event rate and server CPU cores there; child s = CPU of the fake claude processes;\n"
        "other s = CPU used outside this benchmark during the run (other users of the machine);\n"
        f"busy = average busy CPUs of the whole machine (it has {os.cpu_count()})."
    )
    print("\n## Machine noise floor: how late a trivial process wakes from a 1 ms sleep during each run")
    for r in results:
        h = r.get("hiccup") or {}
        if h:
            print(
                f"  K={r['k']}@{r['rate']:g}: {h['wakeups']} wake-ups, late by p50 {h['p50']:.2f} ms, "
                f"p99 {h['p99']:.2f} ms, p99.9 {h['p999']:.2f} ms, max {h['max']:.2f} ms; "
                f"{h['over_2ms']} over 2 ms, {h['over_5ms']} over 5 ms"
            )
    for r in results:
        print(
            f"  K={r['k']}@{r['rate']:g}: event mix {r['kinds']}; load average before "
            f"{r['loadavg_before']:.2f}; steady window {r['steady_window_s']:.1f} s, "
            f"{r['rss_window_samples']} RSS samples"
        )


def print_throughput_table(grpc_runs: list[dict], sdk_runs: list[dict], m: int,
                           baseline_runs: list[dict] | None = None, baseline: str = "") -> None:
    print(f"\n## Single-phase throughput: {m} assistant lines written as fast as the child can")
    hdr = f"{'consumer':<44} {'events/s':>10} {'stream ev/s':>11} {'cpu us/ev':>9} {'ok':>4}"
    print(hdr)
    print("-" * len(hdr))
    med: dict[str, float] = {}
    rows = [
        ("helix gRPC (separate-process client)", grpc_runs),
        ("claude-agent-sdk query() (in-process)", sdk_runs),
    ]
    if baseline_runs:
        rows.append((f"helix gRPC, server of {baseline}", baseline_runs))
    for name, runs in rows:
        e2e = [rates(r, m)[0] for r in runs]
        st = [rates(r, m)[1] for r in runs]
        cpu = [r["client_cpu_s"] / m * 1e6 for r in runs]
        ok = all(
            r["lost"] == 0 and r["reordered"] == 0 and (r.get("result_ok") or r.get("failed") == 0)
            for r in runs
        )
        med[name] = statistics.median(e2e)
        print(
            f"{name:<44} {statistics.median(e2e):>10.0f} {statistics.median(st):>11.0f} "
            f"{statistics.median(cpu):>9.1f} {'yes' if ok else 'NO':>4}"
        )
        print(f"{'  per round events/s':<44} " + ", ".join(f"{x:.0f}" for x in e2e))
    g, s = list(med.values())[:2]
    ratios = [rates(a, m)[0] / rates(b, m)[0] for a, b in zip(grpc_runs, sdk_runs, strict=True)]
    srv = statistics.median(r["server_cpu_s"] / m * 1e6 for r in grpc_runs)
    print(f"ratio helix/sdk (medians): {g / s:.2f}  (per round: {', '.join(f'{x:.2f}' for x in ratios)})")
    print(f"server CPU per event in the gRPC runs: {srv:.1f} us (client CPU is the 'cpu us/ev' column)")
    if baseline_runs:
        b = list(med.values())[2]
        ratios = [rates(a, m)[0] / rates(c, m)[0] for a, c in zip(grpc_runs, baseline_runs, strict=True)]
        srv_b = statistics.median(r["server_cpu_s"] / m * 1e6 for r in baseline_runs)
        print(f"ratio this tree/{baseline} (medians): {g / b:.2f}  (per round: "
              f"{', '.join(f'{x:.2f}' for x in ratios)}); server CPU per event {srv:.1f} vs {srv_b:.1f} us")
    print(
        "events/s = lines / (call start -> last text received), child startup included; stream ev/s =\n"
        "between the first and last text received."
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short run (under a minute)")
    ap.add_argument(
        "--ks",
        default=None,
        help="latency runs: K concurrent phases, or K@RATE to override --rate for that run "
        "(default 1,50,200,200@5; --quick: 1,50,200@5)",
    )
    ap.add_argument("--rate", type=float, default=20.0, help="assistant lines per second per phase")
    ap.add_argument(
        "--seconds",
        type=float,
        default=None,
        help="how long each phase streams in the latency runs (lines = rate x seconds)",
    )
    ap.add_argument("--lines", type=int, default=None, help="assistant lines per phase (overrides --seconds)")
    ap.add_argument("--tput-lines", type=int, default=None, help="lines of the throughput phase")
    ap.add_argument("--rounds", type=int, default=None, help="throughput rounds (gRPC and SDK each)")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--profile", type=int, metavar="K", help="run K phases with the server under cProfile")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (server logs, databases)")
    ap.add_argument(
        "--server-src",
        metavar="DIR",
        help="run the server from this directory's helix_runner (e.g. `git archive HEAD server`)",
    )
    ap.add_argument(
        "--baseline",
        metavar="REF",
        help="throughput: also the server of git REF, round by round beside this tree's (e.g. main)",
    )
    ap.add_argument("--client", metavar="JSON", help=argparse.SUPPRESS)
    ap.add_argument("--sdk-client", metavar="JSON", help=argparse.SUPPRESS)
    ap.add_argument("--hiccup", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.client:
        emit_line(client_process(json.loads(args.client)))
        return 0
    if args.hiccup:
        emit_line(hiccup_main())
        return 0
    if args.sdk_client:
        emit_line(asyncio.run(sdk_main(json.loads(args.sdk_client))))
        return 0

    seconds = args.seconds or (3.0 if args.quick else 15.0)
    if args.ks is None:
        args.ks = "1,50,200@5" if args.quick else "1,50,200,200@5"
    m = args.tput_lines or (20_000 if args.quick else 60_000)
    rounds = args.rounds or (1 if args.quick else 5)
    runs: list[tuple[int, float, int]] = []  # (K, rate, lines per phase)
    for spec in filter(None, args.ks.split(",")):
        k_text, _, rate_text = spec.partition("@")
        rate = float(rate_text) if rate_text else args.rate
        runs.append((int(k_text), rate, args.lines or max(1, round(rate * seconds))))

    tmp = Path(tempfile.mkdtemp(prefix="helix-bench-"))
    workdir = tmp / "ws"
    workdir.mkdir()
    fake = write_fake_claude(tmp)
    started = time.monotonic()
    if args.server_src:
        Server.server_src = str(Path(args.server_src).resolve())
    print(f"# server under test: {server_version(args.server_src)}")
    print(
        f"# bench_run_phase: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}, "
        f"latency runs {args.ks} at {args.rate:g} lines/s/phase unless K@RATE, {seconds:g} s of "
        f"streaming per phase; throughput {m} lines x {rounds} rounds"
    )
    print(f"# temp dir {tmp}")
    try:
        if args.profile:
            import pstats

            out = tmp / "server.prof"
            lines = args.lines or max(1, round(args.rate * seconds))
            r = latency_scenario(tmp, fake, workdir, args.profile, lines, args.rate, profile_out=out)
            print_latency_table([r])
            deadline = time.monotonic() + 10
            while not out.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            stats = pstats.Stats(str(out))
            stats.sort_stats("tottime").print_stats(30)
            stats.sort_stats("cumulative").print_stats(40)
            return 0
        if not args.skip_latency:
            results = []
            for k, rate, lines in runs:
                print(f"# latency run K={k} at {rate:g} lines/s, {lines} lines per phase ...", flush=True)
                results.append(latency_scenario(tmp, fake, workdir, k, lines, rate, dump=args.keep))
            print_latency_table(results)
        if not args.skip_throughput:
            print(f"\n# throughput runs ({rounds} rounds) ...", flush=True)
            baseline_src = export_baseline(args.baseline, tmp) if args.baseline else None
            grpc_runs, sdk_runs, baseline_runs = throughput_rounds(tmp, fake, workdir, m, rounds, baseline_src)
            print_throughput_table(grpc_runs, sdk_runs, m, baseline_runs, args.baseline or "")
    finally:
        if args.keep:
            print(f"# kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n# total time {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
