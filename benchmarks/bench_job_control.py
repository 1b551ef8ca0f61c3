"""Job-control benchmark: control RPC -> effect latency, pause take-hold, and one-phase fan-out.

Three kinds of process, as in production:

* the real server (``helix-runner serve``), one instance, its own data dir;
* a fake ``claude`` (a ``python -I -S`` script written to a temp dir) that speaks the stdin control
  protocol like the real CLI (docs/claude-cli-protocol.md §3, corpus capture localcli-23): it answers
  ``initialize``, reads the prompt, writes ``system/init``, then per tool call an ``assistant``
  line with a ``tool_use`` block, a ``hook_callback`` ``control_request`` for the registered
  PreToolUse callback, and BLOCKS reading stdin until the ``control_response`` with that
  request id arrives; it takes ``time.time_ns()`` just before writing the request and just after
  reading the answer, appends both to a timestamp file (and puts the receive time in the
  tool_result text), then writes the ``user`` tool_result line (the deny shape when the hook
  denied) and goes on. At the end a text line and a ``result`` line, then exit 0 at stdin EOF.
  In text mode it writes paced ``assistant`` text lines carrying a counter and their write time;
* a gRPC client in another process (this file with ``--client``).

Scenarios (one phase each):

* ``resolve``: a tool-name breakpoint holds every Bash call; the client waits for each
  BREAKPOINT_HIT control event and calls ResolveToolCall(approve).
* ``step``: the client pauses the phase once, then for each PAUSED event calls StepPhase.
* ``pause`` (calls --gap-ms apart, "model streaming") and ``pause-b2b`` (calls back to back):
  the client repeatedly sleeps a random 0..gap, calls PausePhase, waits for PAUSED, calls
  ResumePhase. ``missed`` counts calls written after PausePhase returned that ran unheld.
* ``fanout``: text lines at a set rate; W WatchPhase streams (raw bytes, by default one TCP
  connection each) plus the RunPhase caller read them; every stream must carry identical bytes.
  A run with no watcher at the same rate gives the ingest-only server CPU.

Effect time = the child's receipt of the answer (same host clock as the client's RPC timestamps,
CLOCK_REALTIME). "effect - rpc_return" is signed: the server writes the answer to stdin before or
while it sends the RPC response, so the child often has it before the client returns.

CPU: utime+stime of the server process from /proc/<pid>/stat over each measured window, and the
time its threads were runnable but had no CPU (/proc/<pid>/task/*/schedstat): on a shared
machine that second number says how much of a latency is someone else's load.

Usage: .venv/bin/python benchmarks/bench_job_control.py [--quick] [--samples N] [--gap-ms G]
           [--watchers W] [--channels C] [--rates R1,R2] [--seconds S] [--skip a,b] [--wait-idle S]
       .venv/bin/python benchmarks/bench_job_control.py --profile   # server under cProfile (CPU time)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from bench_run_phase import pct
from server_process import ServerProcess, export_baseline

REPO_ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = REPO_ROOT / ".venv" / "bin"
CLK_TCK = os.sysconf("SC_CLK_TCK")

# ------------------------------------------------------------------------------------------------
# The fake claude. No third-party imports, so it starts with -I -S in ~20 ms.

FAKE_CLAUDE = r'''#!{python} -IS
# Fake `claude` for benchmarks/bench_job_control.py (generated; do not edit).
import os, sys, time
from json import dumps, loads

ENV = os.environ
MODE = ENV.get("HELIX_BENCH_MODE", "tools")
CALLS = int(ENV.get("HELIX_BENCH_CALLS", "10"))
GAP = float(ENV.get("HELIX_BENCH_GAP_MS", "0")) / 1000.0
STOP = ENV.get("HELIX_BENCH_STOP_FILE", "")
GO = ENV.get("HELIX_BENCH_GO_FILE", "")
TS = ENV.get("HELIX_BENCH_TS_FILE", "")
LINES = int(ENV.get("HELIX_BENCH_LINES", "10"))
RATE = float(ENV.get("HELIX_BENCH_RATE", "100"))
PID = os.getpid()
SID = "b0000000-0000-4000-8000-%012x" % PID
MODEL = "claude-opus-5-5"
CWD = os.getcwd()
write = os.write
inp = sys.stdin.buffer
_n = [0]


def uid():
    _n[0] += 1
    return "%08x-0000-4000-8000-%012x" % (PID & 0xFFFFFFFF, _n[0])


def out(obj):
    data = dumps(obj, separators=(",", ":")).encode() + b"\n"
    view = memoryview(data)
    while view:
        view = view[write(1, view):]


def now_iso():
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%03dZ" % (int(t * 1000) % 1000)


def usage(out_tokens=1):
    return {"input_tokens": 1074, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
            "output_tokens": out_tokens, "service_tier": "standard"}


def assistant(msg_id, block):
    out({"type": "assistant", "message": {"id": msg_id, "type": "message", "role": "assistant", "model": MODEL,
         "content": [block], "stop_reason": None, "stop_sequence": None, "usage": usage(),
         "context_management": None}, "parent_tool_use_id": None, "session_id": SID, "uuid": uid(),
         "timestamp": now_iso(), "request_id": "req_bench_%x" % _n[0]})


def answer_host_request(msg):
    """The host asked something (interrupt, get_context_usage, ...): a plain success."""
    sub = (msg.get("request") or {}).get("subtype")
    body = {}
    if sub == "get_context_usage":
        body = {"totalTokens": 1074, "maxTokens": 200000, "percentage": 0.537}
    elif sub == "interrupt":
        body = {"still_queued": []}
    out({"type": "control_response", "response": {"subtype": "success", "request_id": msg.get("request_id"),
                                                  "response": body}})


# -- start-up: `initialize` (registers our hook callback id), then the prompt ---------------------
callback_id = "helix_pre_tool_use"
while True:
    line = inp.readline()
    if not line:
        sys.stderr.write("fake claude: stdin closed before a user line\n")
        sys.exit(3)
    if not line.strip():
        continue
    msg = loads(line)
    if msg.get("type") == "user":
        break
    if msg.get("type") == "control_request":
        req = msg.get("request") or {}
        if req.get("subtype") == "initialize":
            for matcher in (req.get("hooks") or {}).get("PreToolUse") or []:
                ids = matcher.get("hookCallbackIds") or []
                if ids:
                    callback_id = ids[0]
            out({"type": "control_response", "response": {"subtype": "success", "request_id": msg["request_id"],
                 "response": {"commands": [], "agents": [], "output_style": "default", "models": [],
                              "pid": PID, "claude_code_version": "2.1.330", "current_permission_mode": "default",
                              "hooks_applied": True, "session_state": "idle", "capabilities": []}}})
        else:
            answer_host_request(msg)

out({"type": "system", "subtype": "init", "cwd": CWD, "session_id": SID, "tools": ["Bash", "Read", "Edit"],
     "mcp_servers": [], "model": MODEL, "permissionMode": "default", "slash_commands": [],
     "apiKeySource": "ANTHROPIC_API_KEY", "claude_code_version": "2.1.330", "output_style": "default",
     "agents": [], "skills": [], "plugins": [], "capabilities": [], "uuid": uid()})

denials = []
turns = 1
if MODE == "tools":
    ts_fd = os.open(TS, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if TS else -1
    for i in range(1, CALLS + 1):
        if STOP and os.path.exists(STOP):
            break
        if GAP:
            time.sleep(GAP)  # the model streams before it asks for the next tool
        tid = "toolu_bench%08x%06d" % (PID & 0xFFFFFFFF, i)
        tool_input = {"command": "echo call-%d" % i, "description": "benchmark call %d" % i}
        assistant("msg_bench_%08x_%06d" % (PID & 0xFFFFFFFF, i),
                  {"type": "tool_use", "id": tid, "name": "Bash", "input": tool_input})
        rid = uid()
        hook_req = {"type": "control_request", "request_id": rid, "request": {
            "subtype": "hook_callback", "callback_id": callback_id, "input": {
                "session_id": SID, "transcript_path": "/tmp/%s.jsonl" % SID, "cwd": CWD, "prompt_id": SID,
                "permission_mode": "default", "effort": {"level": "medium"}, "hook_event_name": "PreToolUse",
                "tool_name": "Bash", "tool_input": tool_input, "tool_use_id": tid},
            "tool_use_id": tid}}
        t_req = time.time_ns()
        out(hook_req)
        while True:  # the real CLI blocks this tool call until the host answers the hook
            line = inp.readline()
            t_recv = time.time_ns()
            if not line:
                sys.stderr.write("fake claude: stdin closed while a hook callback was pending\n")
                sys.exit(4)
            if not line.strip():
                continue
            msg = loads(line)
            kind = msg.get("type")
            if kind == "control_response" and (msg.get("response") or {}).get("request_id") == rid:
                break
            if kind == "control_request":
                answer_host_request(msg)
            # user lines are queued turns; control_cancel_request for our own ids does not happen here
        resp = msg["response"]
        hso = (resp.get("response") or {}).get("hookSpecificOutput") or {}
        decision = "allow"
        if resp.get("subtype") != "success":
            decision, reason = "deny", "hook callback failed: %s" % resp.get("error")
        elif hso.get("permissionDecision") == "deny":
            decision, reason = "deny", hso.get("permissionDecisionReason") or "denied"
        elif "updatedInput" in hso:
            decision, tool_input = "edit", hso["updatedInput"]
        if ts_fd >= 0:
            os.write(ts_fd, ("%s %d %d %s\n" % (tid, t_req, t_recv, decision)).encode())
        turns += 1
        if decision == "deny":
            text = "PreToolUse:Bash hook error: %s" % reason
            denials.append({"tool_name": "Bash", "tool_use_id": tid, "tool_input": tool_input})
            out({"type": "user", "message": {"role": "user", "content": [
                {"type": "tool_result", "content": text, "is_error": True, "tool_use_id": tid}]},
                 "parent_tool_use_id": None, "session_id": SID, "uuid": uid(), "timestamp": now_iso(),
                 "tool_use_result": "Error: " + text,
                 "tool_result_meta": [{"id": tid, "non_execution_kind": "permission-rule",
                                       "permission_decision": {"decision": "reject", "source": "hook",
                                                               "reason_type": "hook"}}]})
        else:
            stdout = "%s\nhook answer received at %d" % (tool_input.get("command", ""), t_recv)
            out({"type": "user", "message": {"role": "user", "content": [
                {"tool_use_id": tid, "type": "tool_result", "content": stdout, "is_error": False}]},
                 "parent_tool_use_id": None, "session_id": SID, "uuid": uid(), "timestamp": now_iso(),
                 "tool_use_result": {"stdout": stdout, "stderr": "", "interrupted": False, "isImage": False,
                                     "noOutputExpected": False},
                 "tool_result_meta": [{"id": tid, "permission_decision": {"decision": "accept", "source": "config",
                                                                         "reason_type": "rule"}}]})
    assistant("msg_bench_%08x_final" % (PID & 0xFFFFFFFF), {"type": "text", "text": "Done."})
else:  # text: wait for the go file, then LINES text lines at RATE on an absolute schedule
    parent, deadline = os.getppid(), time.monotonic() + 300
    while GO and not os.path.exists(GO):
        if os.getppid() != parent or time.monotonic() > deadline:
            sys.exit(5)  # the server went away (or the benchmark did): do not linger
        time.sleep(0.001)
    period = 1.0 / RATE
    t0 = time.monotonic()
    for i in range(1, LINES + 1):
        delay = t0 + (i - 1) * period - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        assistant("msg_bench_%08x_%06d" % (PID & 0xFFFFFFFF, i),
                  {"type": "text", "text": "bench i=%d t=%d" % (i, time.time_ns())})

out({"type": "result", "subtype": "success", "is_error": False, "duration_ms": 1000, "duration_api_ms": 900,
     "num_turns": turns, "result": "Done.", "stop_reason": "end_turn", "session_id": SID, "total_cost_usd": 0.01,
     "usage": usage(10), "modelUsage": {MODEL: {"inputTokens": 1074, "outputTokens": 10, "cacheReadInputTokens": 0,
     "cacheCreationInputTokens": 0, "webSearchRequests": 0, "costUSD": 0.01, "contextWindow": 1000000,
     "maxOutputTokens": 128000}}, "permission_denials": denials, "terminal_reason": "completed", "uuid": uid()})

while True:  # like the real CLI: stay until stdin EOF, answering late host requests
    line = inp.readline()
    if not line:
        break
    if line.strip():
        msg = loads(line)
        if msg.get("type") == "control_request":
            answer_host_request(msg)
sys.exit(0)
'''


def write_fake_claude(directory: Path) -> Path:
    path = directory / "claude"
    python = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    path.write_text(FAKE_CLAUDE.replace("{python}", python))
    path.chmod(0o755)
    return path


# ------------------------------------------------------------------------------------------------
# Small statistics helpers.


def dist_ms(ns_values: list[int]) -> dict:
    v = sorted(x / 1e6 for x in ns_values)
    if not v:
        return {"n": 0}
    return {"n": len(v), "min": v[0], "p1": pct(v, 1), "p50": pct(v, 50), "p90": pct(v, 90), "p99": pct(v, 99),
            "p999": pct(v, 99.9), "max": v[-1], "mean": sum(v) / len(v),
            "neg": sum(1 for x in v if x < 0) / len(v)}


def self_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def proc_cpu_s(pid: int, tid: int | None = None) -> float:
    """utime + stime of a process (all its threads), or of one thread, from /proc/<pid>[/task/<tid>]/stat."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of stat(5)


def machine_cpu() -> tuple[float, float]:
    """(busy s, total s) over all CPUs, from /proc/stat."""
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:]]
    total = sum(vals[:8])
    return (total - vals[3] - vals[4]) / CLK_TCK, total / CLK_TCK


def touch(path: Path) -> None:
    """Creates a signal file for the fake claude (a tmpfs-sized, instant write)."""
    path.touch()


def ts_of(stamp) -> int:
    return stamp.seconds * 1_000_000_000 + stamp.nanos


def sched_wait_s(pid: int) -> float:
    """Time the process's threads spent runnable but waiting for a CPU (/proc/<pid>/task/*/schedstat)."""
    total = 0
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[1])
    return total / 1e9


class Meter:
    """CPU, run-queue wait (contention) of the server and this client, and machine load over a window."""

    def __init__(self, server_pid: int):
        self.server_pid = server_pid

    def start(self) -> None:
        self.t0 = time.time_ns()
        self.s0 = self._sample()

    def _sample(self) -> tuple[float, ...]:
        return (proc_cpu_s(self.server_pid), sched_wait_s(self.server_pid), self_cpu_s(), sched_wait_s(os.getpid()),
                *machine_cpu(), proc_cpu_s(self.server_pid, self.server_pid))

    def stop(self) -> dict:
        d = [b - a for a, b in zip(self.s0, self._sample(), strict=True)]
        return {"wall_s": (time.time_ns() - self.t0) / 1e9, "server_cpu_s": d[0], "server_wait_s": d[1],
                "client_cpu_s": d[2], "client_wait_s": d[3], "machine_busy_s": d[4], "machine_total_s": d[5],
                "server_loop_cpu_s": d[6]}


# ------------------------------------------------------------------------------------------------
# Client process (--client): one scenario, results as one JSON line on stdout.


def _grpc():
    import grpc

    from helix.runner.v1 import events_pb2 as ev
    from helix.runner.v1 import resources_pb2 as res
    from helix.runner.v1 import runner_service_pb2 as pb
    from helix.runner.v1 import runner_service_pb2_grpc as pb_grpc
    return grpc, ev, res, pb, pb_grpc


class ControlStream:
    """A RunPhase call read in the background; control events (with client receive time) in a queue."""

    def __init__(self, stub, request, timeout: float):
        self.queue: asyncio.Queue = asyncio.Queue()
        self.result = None
        self.first_event = asyncio.Event()
        self.events = 0
        self._task = asyncio.create_task(self._read(stub.RunPhase(request, timeout=timeout)))

    async def _read(self, call) -> None:
        try:
            async for response in call:
                now = time.time_ns()
                self.events += len(response.events)
                for e in response.events:
                    if e.HasField("control"):
                        self.queue.put_nowait((now, e))
                self.first_event.set()
                if response.HasField("result"):
                    self.result = response.result
        finally:
            self.first_event.set()
            self.queue.put_nowait(None)  # end of stream

    async def next_control(self, kinds: tuple[int, ...], limit: float = 30.0):
        """The next control event of one of these kinds as (client ns, event); None at end of stream."""
        async with asyncio.timeout(limit):
            while True:
                item = await self.queue.get()
                if item is None:
                    self.queue.put_nowait(None)
                    return None
                if item[1].control.kind in kinds:
                    return item

    async def finish(self, limit: float = 60.0):
        await asyncio.wait_for(self._task, limit)
        return self.result


async def client_control(cfg: dict) -> dict:
    grpc, ev, res, pb, pb_grpc = _grpc()
    scenario, target, warmup = cfg["scenario"], cfg["samples"], cfg["warmup"]
    stop_file = Path(cfg["stop_file"])
    channel = grpc.aio.insecure_channel(cfg["address"])
    await asyncio.wait_for(channel.channel_ready(), 20)
    stub = pb_grpc.RunnerServiceStub(channel)
    job = cfg["job_id"]
    ids = {"job_id": job, "phase_id": "p"}
    env = {"HELIX_BENCH_MODE": "tools", "HELIX_BENCH_CALLS": str(cfg["max_calls"]),
           "HELIX_BENCH_GAP_MS": str(cfg["gap_ms"]), "HELIX_BENCH_STOP_FILE": str(stop_file),
           "HELIX_BENCH_TS_FILE": cfg["ts_file"]}
    options = pb.PhaseOptions(allowed_tools=["Bash"], env=env)
    if scenario == "resolve":
        options.breakpoints.append(res.Breakpoint(breakpoint_id="every-bash", tool_name="Bash"))
    stream = ControlStream(stub, pb.RunPhaseRequest(**ids, prompt="benchmark", working_dir=cfg["workdir"],
                                                    options=options), timeout=cfg["timeout"])
    await asyncio.wait_for(stream.first_event.wait(), 20)
    meter = Meter(cfg["server_pid"])  # over the counted samples only (no start-up, warm-up or wind-down)
    ctx: dict = {}
    samples: list[dict] = []
    rng = random.Random(7)
    K = ev.ControlEventKind

    def done() -> bool:
        if len(samples) == warmup and not hasattr(meter, "t0"):
            meter.start()
        if len(samples) >= target + warmup and not stop_file.exists():
            stop_file.touch()
            ctx.update(meter.stop())
        return len(samples) >= target + warmup

    if scenario == "resolve":
        while True:
            item = await stream.next_control((K.CONTROL_EVENT_KIND_BREAKPOINT_HIT,))
            if item is None:
                break
            seen, e = item
            t0 = time.time_ns()
            await stub.ResolveToolCall(pb.ResolveToolCallRequest(**ids, tool_use_id=e.control.tool_use_id,
                                                                 approve=pb.ApproveDecision()), timeout=10)
            t1 = time.time_ns()
            if len(samples) < target + warmup:
                samples.append({"tool": e.control.tool_use_id, "emit": ts_of(e.receive_time), "seen": seen,
                                "rpc_start": t0, "rpc_return": t1})
            done()
    elif scenario == "step":
        await stub.PausePhase(pb.PausePhaseRequest(**ids), timeout=10)
        while not done():
            item = await stream.next_control((K.CONTROL_EVENT_KIND_PAUSED,))
            if item is None:
                break
            seen, e = item
            t0 = time.time_ns()
            await stub.StepPhase(pb.StepPhaseRequest(**ids), timeout=10)
            t1 = time.time_ns()
            samples.append({"tool": e.control.tool_use_id, "emit": ts_of(e.receive_time), "seen": seen,
                            "rpc_start": t0, "rpc_return": t1})
        if stream.result is None:
            await stub.ResumePhase(pb.ResumePhaseRequest(**ids), timeout=10)
    elif scenario == "pause":
        gap_s = cfg["gap_ms"] / 1000.0
        while not done() and stream.result is None:
            await asyncio.sleep(rng.uniform(0.0, gap_s))
            t0 = time.time_ns()
            paused = await stub.PausePhase(pb.PausePhaseRequest(**ids), timeout=10)
            t1 = time.time_ns()
            item = await stream.next_control((K.CONTROL_EVENT_KIND_PAUSED,))
            if item is None:
                break
            seen, e = item
            t2 = time.time_ns()
            await stub.ResumePhase(pb.ResumePhaseRequest(**ids), timeout=10)
            t3 = time.time_ns()
            samples.append({"tool": e.control.tool_use_id, "emit": ts_of(e.receive_time), "seen": seen,
                            "pause_start": t0, "pause_return": t1,
                            "pause_status": res.PhaseStatus.Name(paused.phase.status),
                            "rpc_start": t2, "rpc_return": t3})
    touch(stop_file)
    result = await stream.finish(cfg["timeout"])
    if not ctx and hasattr(meter, "t0"):
        ctx.update(meter.stop())
    await channel.close()
    return {"samples": samples[warmup:], "warmup": warmup, "ctx": ctx,
            "status": res.PhaseStatus.Name(result.status) if result else None,
            "reason": result.reason if result else "no result"}


async def client_fanout(cfg: dict) -> dict:
    grpc, ev, res, pb, pb_grpc = _grpc()
    watchers, n_channels, server_pid = cfg["watchers"], cfg["channels"], cfg["server_pid"]
    go_file = Path(cfg["go_file"])
    opts = [("grpc.use_local_subchannel_pool", 1), ("grpc.max_receive_message_length", 64 << 20)]
    main = grpc.aio.insecure_channel(cfg["address"], options=opts)
    await asyncio.wait_for(main.channel_ready(), 20)
    ids = {"job_id": cfg["job_id"], "phase_id": "p"}
    env = {"HELIX_BENCH_MODE": "text", "HELIX_BENCH_LINES": str(cfg["lines"]), "HELIX_BENCH_RATE": str(cfg["rate"]),
           "HELIX_BENCH_GO_FILE": str(go_file)}
    # Stream 0 is the RunPhase caller, 1..W the watchers. Both RPCs send the same stored event
    # encodings (field 1) and the result (field 2), so all streams must carry identical bytes.
    n = watchers + 1
    recs: list[list[tuple[int, int]]] = [[] for _ in range(n)]  # per stream: (client ns, bytes) per message
    hashes = [hashlib.blake2b(digest_size=16) for _ in range(n)]
    results: list[bytes | None] = [None] * n
    errors: list[str | None] = [None] * n
    reference = bytearray()  # stream 0's bytes
    attached = [asyncio.Event() for _ in range(n)]

    async def read(k: int, call) -> None:
        append, update = recs[k].append, hashes[k].update
        keep = reference.extend if k == 0 else None
        try:
            async for raw in call:
                now = time.time_ns()
                if raw[:1] == b"\x12":
                    results[k] = raw
                    break
                append((now, len(raw)))
                update(raw)
                if keep is not None:
                    keep(raw)
                attached[k].set()
        except grpc.aio.AioRpcError as exc:
            errors[k] = f"{exc.code().name}: {exc.details()}"
        finally:
            attached[k].set()

    run_call = main.unary_stream("/helix.runner.v1.RunnerService/RunPhase",
                                 request_serializer=pb.RunPhaseRequest.SerializeToString,
                                 response_deserializer=None)(
        pb.RunPhaseRequest(**ids, prompt="benchmark", working_dir=cfg["workdir"], options=pb.PhaseOptions(env=env)),
        timeout=cfg["timeout"])
    tasks = [asyncio.create_task(read(0, run_call))]
    await asyncio.wait_for(attached[0].wait(), 20)
    channels = [main] + [grpc.aio.insecure_channel(cfg["address"], options=opts + [("helix.bench.ch", i)])
                         for i in range(1, n_channels)]
    await asyncio.gather(*(asyncio.wait_for(c.channel_ready(), 20) for c in channels[1:]))
    watch_req = pb.WatchPhaseRequest(**ids, after_sequence=0)
    for w in range(watchers):
        call = channels[w % n_channels].unary_stream(
            "/helix.runner.v1.RunnerService/WatchPhase", request_serializer=pb.WatchPhaseRequest.SerializeToString,
            response_deserializer=None)(watch_req, timeout=cfg["timeout"])
        tasks.append(asyncio.create_task(read(w + 1, call)))
    await asyncio.wait_for(asyncio.gather(*(a.wait() for a in attached)), 60)
    await asyncio.sleep(0.5)  # every watcher is registered for live delivery (it has read history)
    meter = Meter(server_pid)
    meter.start()
    t_go = meter.t0
    touch(go_file)
    await asyncio.wait_for(asyncio.gather(*tasks), cfg["timeout"])
    ctx = meter.stop()
    for c in channels:
        await c.close()

    # -- analysis (after the measured window) -----------------------------------------------------
    events = []  # (end offset in the stream, sequence, counter, child write ns, server receive ns)
    off, buf = 0, bytes(reference)
    while off < len(buf):
        assert buf[off] == 0x0A, "unexpected field in a response"
        off += 1
        length = shift = 0
        while True:
            b = buf[off]
            off += 1
            length |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        e = ev.StreamEvent.FromString(buf[off:off + length])
        off += length
        counter = t_write = 0
        if e.WhichOneof("payload") == "assistant_text" and e.assistant_text.text.startswith("bench i="):
            i, t = e.assistant_text.text.split(" ")[1:]
            counter, t_write = int(i[2:]), int(t[2:])
        events.append((off, e.sequence, counter, t_write, ts_of(e.receive_time)))
    seqs = [x[1] for x in events]
    counters = [x[2] for x in events if x[2]]
    identical = sum(1 for h in hashes if h.digest() == hashes[0].digest())
    statuses, last_seqs = {}, set()
    for r in results:
        if r is None:
            statuses["(no result)"] = statuses.get("(no result)", 0) + 1
            continue
        result = pb.WatchPhaseResponse.FromString(r).result
        name = res.PhaseStatus.Name(result.status)
        statuses[name] = statuses.get(name, 0) + 1
        last_seqs.add(result.last_sequence)
    go_seq = next((x[1] for x in events if x[2]), 0)  # the window starts at the first text event
    measured = range(1, n) if watchers else range(0, 1)  # latency over the watchers (or the caller alone)
    lat, per_stream_p99, messages, delivered, received = [], [], 0, 0, 0
    for k in range(n):
        idx, pos, mine = 0, 0, []
        for t_recv, size in recs[k]:
            pos += size
            if t_recv >= t_go:
                messages += 1
            while idx < len(events) and events[idx][0] <= pos:
                _, seq, counter, t_write, _ = events[idx]
                delivered += k > 0 and seq >= go_seq  # to watchers (the RunPhase caller is not one)
                received += seq >= go_seq  # to every stream
                if counter:
                    mine.append(t_recv - t_write)
                idx += 1
        if k in measured:
            lat.extend(mine)
            if mine:
                mine.sort()
                per_stream_p99.append(pct(mine, 99) / 1e6)
    return {
        "watchers": watchers, "channels": n_channels, "lines": cfg["lines"], "rate": cfg["rate"],
        "ctx": ctx, **ctx,
        "window_events": sum(1 for x in events if x[1] >= go_seq), "delivered": delivered, "received": received,
        "messages": messages,
        "latency": dist_ms(lat), "lat_in": dist_ms([x[4] - x[3] for x in events if x[2]]),
        "per_stream_p99_max": max(per_stream_p99) if per_stream_p99 else float("nan"),
        "streams": n, "identical": identical, "gap_free": seqs == list(range(1, len(seqs) + 1)),
        "counters_ok": counters == list(range(1, cfg["lines"] + 1)),
        "last_seq_ok": bool(seqs) and last_seqs == {seqs[-1]},
        "statuses": statuses, "errors": [e for e in errors if e][:5], "n_errors": sum(1 for e in errors if e),
    }


def client_main(cfg: dict) -> None:
    fn = client_fanout if cfg["scenario"] == "fanout" else client_control
    out = asyncio.run(fn(cfg))
    sys.stdout.write(json.dumps(out) + "\n")


# ------------------------------------------------------------------------------------------------
# Driver: server lifecycle, scenarios, tables.


class Server(ServerProcess):
    """The server under test, with room for many phases."""

    def __init__(self, tmp: Path, fake: Path, workdir: Path, profile_out: Path | None, name: str = "control",
                 server_src: str | Path | None = None):
        super().__init__(tmp, name, fake, workdir, profile_out=profile_out, server_src=server_src,
                         env_extra={"HELIX_RUNNER_MAX_CONCURRENT_PHASES": "300"})


def run_client(cfg: dict, limit: float) -> dict:
    proc = subprocess.Popen([str(VENV_BIN / "python"), str(Path(__file__).resolve()), "--client", json.dumps(cfg)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise RuntimeError(f"client {cfg['scenario']} timed out after {limit:g} s:\n{err[-3000:]}") from None
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"client {cfg['scenario']} failed ({proc.returncode}):\n{err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1])


def read_ts(path: Path) -> dict[str, tuple[int, int, str]]:
    calls = {}
    if path.exists():
        for line in path.read_text().splitlines():
            tid, t_req, t_recv, decision = line.split()
            calls[tid] = (int(t_req), int(t_recv), decision)
    return calls


def fmt(x: float, digits: int = 2) -> str:
    if x != x:  # nan
        return "-"
    return f"{x:.{digits}f}"


def print_table(title: str, header: list[str], rows: list[list[str]], note: str = "") -> None:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    print(f"\n{title}")
    line = "  ".join(h.ljust(widths[0]) if i == 0 else h.rjust(widths[i]) for i, h in enumerate(header))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(str(c).ljust(widths[0]) if i == 0 else str(c).rjust(widths[i]) for i, c in enumerate(r)))
    if note:
        print(textwrap.fill(note.replace("\n", " "), 118, break_on_hyphens=False))


def analyse_control(name: str, out: dict, calls: dict) -> dict:
    """Joins the client's RPC timestamps with the child's receive times."""
    rows = []
    for s in out["samples"]:
        t_req, t_recv, _ = calls.get(s["tool"], (0, 0, ""))
        if not t_recv:
            continue
        rows.append({**s, "t_req": t_req, "t_recv": t_recv})
    a = {
        "name": name, "n": len(rows), "status": out["status"], "reason": out["reason"],
        "rtt": dist_ms([r["rpc_return"] - r["rpc_start"] for r in rows]),
        "after_return": dist_ms([r["t_recv"] - r["rpc_return"] for r in rows]),
        "after_start": dist_ms([r["t_recv"] - r["rpc_start"] for r in rows]),
        "hold_seen": dist_ms([r["seen"] - r["t_req"] for r in rows]),
        "hold_in": dist_ms([r["emit"] - r["t_req"] for r in rows]),
        "hold_out": dist_ms([r["seen"] - r["emit"] for r in rows]),
        "unmatched": len(out["samples"]) - len(rows), "ctx": out["ctx"], "calls": len(calls),
    }
    if rows and "pause_return" in rows[0]:
        ordered = sorted(calls.values())
        missed = before = 0
        for r in rows:
            # A call whose hook was written after PausePhase returned must be held; a call written
            # before it may legitimately pass (or be held, if the server had not read it yet).
            missed += sum(1 for t_req, _, _ in ordered if r["pause_return"] < t_req < r["t_req"])
            before += r["t_req"] < r["pause_return"]
        a.update({
            "pause_rtt": dist_ms([r["pause_return"] - r["pause_start"] for r in rows]),
            "pause_to_seen": dist_ms([r["seen"] - r["pause_return"] for r in rows]),
            "pause_to_hookwrite": dist_ms([r["t_req"] - r["pause_return"] for r in rows]),
            "missed": missed, "held_written_before_return": before,
            "statuses": sorted({r["pause_status"] for r in rows}),
        })
    return a


def fanout_summary(fanouts: list[dict]) -> list[dict]:
    """Per (server, W, rate): median, min and max over the rounds of the fan-out figures."""
    groups: dict[tuple[str, int, float], list[dict]] = {}
    for f in fanouts:
        groups.setdefault((f["server"], f["watchers"], f["rate"]), []).append(f)

    def spread(values: list[float]) -> dict:
        values = sorted(v for v in values if v == v)
        if not values:
            return {"median": NAN, "min": NAN, "max": NAN}
        mid = len(values) // 2
        median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
        return {"median": median, "min": values[0], "max": values[-1], "all": values}

    out = []
    for (label, w, rate), runs in groups.items():
        out.append({"server": label, "watchers": w, "rate": rate, "runs": len(runs),
                    "p50": spread([g(f["latency"], "p50") for f in runs]),
                    "p99": spread([g(f["latency"], "p99") for f in runs]),
                    "us_per_delivery": spread([f["server_cpu_s"] / f["delivered"] * 1e6 if f["delivered"] else NAN
                                               for f in runs]),
                    "ev_per_msg": spread([f["received"] / f["messages"] if f["messages"] else NAN for f in runs]),
                    "identical": all(f.get("ok", False) for f in runs)})
    return out


def wait_idle(limit_s: float, busy_below: float = 0.35) -> str:
    """Waits (at most limit_s) for a 1 s window in which the machine is less than busy_below busy."""
    deadline = time.monotonic() + limit_s
    while True:
        b0, t0 = machine_cpu()
        time.sleep(1.0)
        b1, t1 = machine_cpu()
        busy = (b1 - b0) / max(t1 - t0, 1e-9)
        if busy < busy_below:
            return f"machine {100 * busy:.0f}% busy before start"
        if time.monotonic() >= deadline:
            return f"machine still {100 * busy:.0f}% busy after waiting {limit_s:g} s"


NAN = float("nan")


def g(d: dict, key: str) -> float:
    return d.get(key, NAN)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--client", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="50 samples, one 3 s fan-out rate (under a minute)")
    ap.add_argument("--samples", type=int, help="samples per control scenario (default 200, quick 50)")
    ap.add_argument("--gap-ms", type=float, default=20.0, help="time between tool calls in the pause scenario")
    ap.add_argument("--watchers", type=int, default=200)
    ap.add_argument("--channels", type=int, default=0, help="client connections for the watchers (0: one each)")
    ap.add_argument("--rates", help="fan-out text lines per second, comma list (default 50,200; quick 200)")
    ap.add_argument("--seconds", type=float, help="fan-out duration per rate (default 10, quick 3)")
    ap.add_argument("--skip", default="", help="comma list of scenarios to skip: resolve,step,pause,fanout,baseline")
    ap.add_argument("--wait-idle", type=float, default=0.0, metavar="S",
                    help="before each scenario wait up to S s for a quiet second (machine < 35%% busy)")
    ap.add_argument("--profile", action="store_true", help="run the server under cProfile (event-loop thread CPU time); print its top functions")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (server log, data, timestamps)")
    ap.add_argument("--baseline", metavar="REF",
                    help="fan-out also against the server code of this git ref (e.g. merge-base: the commit this "
                         "branch started from), a second server, runs alternating with this tree's")
    ap.add_argument("--repeat", type=int, default=1, help="fan-out runs per rate and server (medians and spread)")
    ap.add_argument("--json", metavar="FILE", help="write the fan-out figures as JSON (run_all.py reads them)")
    args = ap.parse_args()
    if args.baseline == "merge-base":
        args.baseline = subprocess.run(["git", "-C", str(REPO_ROOT), "merge-base", "HEAD", "main"], check=True,
                                       capture_output=True, text=True).stdout.strip()[:12]
    if args.client:
        client_main(json.loads(args.client))
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the clean-up below on a plain kill

    samples = args.samples or (50 if args.quick else 200)
    seconds = args.seconds or (3.0 if args.quick else 10.0)
    rates = [float(r) for r in (args.rates or ("200" if args.quick else "50,200")).split(",")]
    channels = args.channels or args.watchers
    skip = set(filter(None, args.skip.split(",")))
    warmup = 5

    tmp = Path(tempfile.mkdtemp(prefix="helix-bench-jc-"))
    try:
        run(args, tmp, samples, seconds, rates, channels, skip, warmup)
    finally:
        if args.keep:
            print(f"\nkept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def run(args: argparse.Namespace, tmp: Path, samples: int, seconds: float, rates: list[float], channels: int,
        skip: set[str], warmup: int) -> None:
    workdir = tmp / "ws"
    workdir.mkdir()
    fake = write_fake_claude(tmp)
    profile_out = tmp / "server.prof" if args.profile else None
    t_begin = time.monotonic()
    load0 = os.getloadavg()
    mach0 = machine_cpu()
    server = Server(tmp, fake, workdir, profile_out)
    servers = [("after", server)]
    base_cfg = {"address": server.address, "workdir": str(workdir), "timeout": 180.0, "server_pid": server.pid}
    control: list[dict] = []
    fanouts: list[dict] = []
    quiet: dict[str, str] = {}
    try:
        print(f"helix-runner job-control benchmark: server pid {server.pid} at {server.address}; "
              f"{os.cpu_count()} CPUs; load average before {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}",
              flush=True)
        # (name, client scenario, ms between tool calls in the fake)
        plan = [("resolve", "resolve", 0.0), ("step", "step", 0.0), ("pause", "pause", args.gap_ms),
                ("pause-b2b", "pause", 0.0)]
        for name, scenario, gap in plan:
            if name in skip or scenario in skip:
                continue
            if args.wait_idle:
                quiet[name] = wait_idle(args.wait_idle)
            ts_file = tmp / f"ts-{name}.txt"
            cfg = {**base_cfg, "scenario": scenario, "job_id": f"jc-{name}", "samples": samples,
                   "warmup": warmup, "gap_ms": gap, "max_calls": 20 * (samples + warmup) + 100,
                   "stop_file": str(tmp / f"stop-{name}"), "ts_file": str(ts_file)}
            t0 = time.monotonic()
            out = run_client(cfg, 180.0)
            control.append(analyse_control(name, out, read_ts(ts_file)))
            control[-1]["gap_ms"] = gap
            print(f"  {name}: {control[-1]['n']} samples in {time.monotonic() - t0:.1f} s, "
                  f"phase {out['status']}", flush=True)
        if args.baseline and "fanout" not in skip:
            servers.append((f"before {args.baseline}", Server(tmp, fake, workdir, None, "before",
                                                              export_baseline(args.baseline, tmp))))
        for rate in rates:
            lines = max(1, int(round(rate * seconds)))
            for w in ([0] if "baseline" not in skip else []) + ([args.watchers] if "fanout" not in skip else []):
                for rnd in range(args.repeat):
                    # Each round alternates which server goes first, so neither always runs after the other.
                    for label, srv in (servers if rnd % 2 == 0 else servers[::-1]):
                        name = f"fanout W={w} {rate:g}/s"
                        if args.wait_idle:
                            quiet[name] = wait_idle(args.wait_idle)
                        tag = f"{w}-{rate:g}-{srv.data.name}-{rnd}"
                        cfg = {**base_cfg, "address": srv.address, "server_pid": srv.pid, "scenario": "fanout",
                               "job_id": f"jc-fanout-{tag}", "watchers": w, "channels": max(1, min(channels, w)),
                               "lines": lines, "rate": rate, "go_file": str(tmp / f"go-{tag}")}
                        t0 = time.monotonic()
                        fanouts.append({**run_client(cfg, 300.0), "server": label})
                        print(f"  {name} ({label}): {time.monotonic() - t0:.1f} s", flush=True)
    finally:
        for _, srv in servers:
            srv.stop()
    mach1 = machine_cpu()
    load1 = os.getloadavg()

    # -- tables --------------------------------------------------------------------------------
    if control:
        rpc_name = {"resolve": "ResolveToolCall (breakpoint)", "step": "StepPhase (paused)",
                    "pause": f"ResumePhase (calls {args.gap_ms:g} ms apart)",
                    "pause-b2b": "ResumePhase (calls back to back)"}
        rows = []
        for a in control:
            r, ar, st = a["rtt"], a["after_return"], a["after_start"]
            rows.append([rpc_name[a["name"]], a["n"], fmt(g(r, "p50")), fmt(g(r, "p99")), fmt(g(ar, "min")),
                         fmt(g(ar, "p50")), fmt(g(ar, "p99")), fmt(g(ar, "max")), f"{100 * ar.get('neg', 0):.0f}%",
                         fmt(g(st, "p50")), fmt(g(st, "p99"))])
        print_table("Control RPC -> effect (the child read the hook answer), ms",
                    ["RPC", "n", "rtt p50", "rtt p99", "eff-ret min", "eff-ret p50", "eff-ret p99", "eff-ret max",
                     "eff<ret", "eff-issue p50", "eff-issue p99"], rows,
                    "rtt = RPC issued -> RPC returned at the client; eff-ret = child's receipt of the answer - RPC "
                    "return (signed: negative =\nthe child had it before the client's await returned); eff<ret = "
                    "share of negative eff-ret; eff-issue = receipt - RPC issued.")
        hold_name = {"resolve": "BREAKPOINT_HIT", "step": "PAUSED (step)",
                     "pause": f"PAUSED (pause, {args.gap_ms:g} ms apart)", "pause-b2b": "PAUSED (pause, back to back)"}
        rows = [[hold_name[a["name"]], a["n"]] + [fmt(g(a[k], p)) for k in ("hold_seen", "hold_in", "hold_out")
                                                  for p in ("p50", "p99")] for a in control]
        print_table("Hold notification: the child wrote the hook_callback -> the control event reached the client, ms",
                    ["event", "n", "total p50", "total p99", "in p50", "in p99", "out p50", "out p99"], rows,
                    "in = hook_callback written -> server emitted the event (its receive_time); out = emitted -> "
                    "received by the client.")
    pauses = [a for a in control if a["name"].startswith("pause") and a["n"]]
    if pauses:
        rows = [[f"calls {a['gap_ms']:g} ms apart" if a["gap_ms"] else "calls back to back", a["n"],
                 fmt(a["pause_rtt"]["p50"]), fmt(a["pause_rtt"]["p99"]), fmt(a["pause_to_seen"]["p50"]),
                 fmt(a["pause_to_seen"]["p99"]), fmt(a["hold_seen"]["p50"]), fmt(a["hold_seen"]["p99"]),
                 a["held_written_before_return"], a["missed"], "/".join(s.removeprefix("PHASE_STATUS_")
                                                                        for s in a["statuses"])] for a in pauses]
        print_table("Pause take-hold (PausePhase, before the next tool call), ms",
                    ["", "n", "rtt p50", "rtt p99", "ret->PAUSED p50", "ret->PAUSED p99", "hook->PAUSED p50",
                     "hook->PAUSED p99", "held<ret", "missed", "answered"], rows,
                    "ret->PAUSED = PausePhase returned -> PAUSED received by the client; it includes waiting for "
                    "the next tool call, so with calls G ms apart it measures the fake's pacing (0..G) more than "
                    "the server; back to back, the next call is at most one call round trip away. hook->PAUSED = "
                    "the held call's hook_callback written -> PAUSED received: the server's part. held<ret = held "
                    "calls whose hook was written before PausePhase returned (in flight, still caught); missed = "
                    "calls written after PausePhase returned that ran unheld (must be 0). answered = the phase "
                    "status PausePhase returned.")
    base_by_rate = {(f["server"], f["rate"]): f for f in fanouts if f["watchers"] == 0}
    if fanouts:
        rows = []
        for f in fanouts:
            lat, w, base = f["latency"], f["watchers"], base_by_rate.get((f["server"], f["rate"]))
            per_ev = f["server_cpu_s"] / f["delivered"] * 1e6 if f["delivered"] else NAN
            marginal = ((f["server_cpu_s"] - base["server_cpu_s"]) / (f["window_events"] * w) * 1e6
                        if base and w and f["window_events"] else NAN)
            ok = f["identical"] == f["streams"] and f["gap_free"] and f["counters_ok"] and f["last_seq_ok"] \
                and f["statuses"] == {"PHASE_STATUS_SUCCEEDED": f["streams"]} and not f["n_errors"]
            f["ok"] = ok
            rows.append([f["server"], w, f"{f['lines']}@{f['rate']:g}/s", f["window_events"], f["delivered"], fmt(g(lat, "p50")),
                         fmt(g(lat, "p99")), fmt(g(lat, "p999")), fmt(g(lat, "max")), fmt(g(f["lat_in"], "p50")),
                         fmt(g(f["lat_in"], "p99")), fmt(f["server_cpu_s"]), fmt(per_ev, 1), fmt(marginal, 1),
                         fmt(f["received"] / f["messages"], 1) if f["messages"] else "-", "yes" if ok else "NO"])
        print_table("Fan-out: one phase, W WatchPhase streams + the RunPhase caller (client in its own process), "
                    "latency ms",
                    ["server", "W", "lines", "events", "delivered", "p50", "p99", "p99.9", "max", "in p50", "in p99",
                     "srv CPU s", "µs/deliv", "µs/deliv marg", "ev/msg", "identical"], rows,
                    "latency = client receive - the child's write time, over every text event x watcher (W=0: the "
                    "RunPhase caller); in = child\nwrite -> server read (receive_time). events = the phase's "
                    "events from the first text line on; delivered = events x W (the RunPhase\ncaller is served "
                    "too but not counted). srv CPU = utime+stime of the server process from the first line until "
                    "every\nstream ended; µs/deliv = srv CPU / delivered; marg = (srv CPU - srv CPU of the W=0 run) / (events x W): what one more "
                    "watcher costs per event. ev/msg =\nevents per response message (the server batches when a "
                    "watcher is behind). identical = all W + 1 streams carried the same\nbytes, sequences 1..N "
                    "gap-free, counters 1..lines in order, all ended SUCCEEDED with the same last_sequence.")
        summary = fanout_summary(fanouts)
        if args.repeat > 1 or len(servers) > 1:
            print_table("Fan-out over the rounds: median [min-max] per server (runs alternate between servers)",
                        ["server", "W", "rate", "runs", "p50 ms", "p99 ms", "µs/deliv", "ev/msg", "all identical"],
                        [[x["server"], x["watchers"], f"{x['rate']:g}/s", x["runs"],
                          f"{x['p50']['median']:.2f} [{x['p50']['min']:.2f}-{x['p50']['max']:.2f}]",
                          f"{x['p99']['median']:.2f} [{x['p99']['min']:.2f}-{x['p99']['max']:.2f}]",
                          f"{x['us_per_delivery']['median']:.1f}", f"{x['ev_per_msg']['median']:.1f}",
                          "yes" if x["identical"] else "NO"] for x in summary])
        if args.json:
            Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
        for f in fanouts:
            if f["n_errors"] or f["statuses"] != {"PHASE_STATUS_SUCCEEDED": f["streams"]}:
                print(f"  W={f['watchers']}: statuses {f['statuses']}, {f['n_errors']} errors {f['errors']}")
            if f["watchers"]:
                print(f"  W={f['watchers']} at {f['rate']:g}/s: worst single-watcher p99 "
                      f"{fmt(f['per_stream_p99_max'])} ms; {f['channels']} client connections; delivery took "
                      f"{f['wall_s']:.1f} s for {f['lines'] / f['rate']:.1f} s of output")
    rows = []
    for a in control:
        c = a["ctx"]
        if not c:
            continue
        rows.append([a["name"], f"{c['wall_s']:.1f}", f"{c['server_cpu_s']:.2f}", f"{c['server_loop_cpu_s']:.2f}",
                     f"{100 * c['server_cpu_s'] / c['wall_s']:.0f}%", f"{c['server_wait_s']:.2f}",
                     f"{c['client_cpu_s']:.2f}", f"{c['client_wait_s']:.2f}",
                     f"{100 * c['machine_busy_s'] / max(c['machine_total_s'], 1e-9):.0f}%",
                     f"{1e6 * c['server_cpu_s'] / a['n']:.0f} µs/sample" if a["n"] else "-",
                     quiet.get(a["name"], "")])
    for f in fanouts:
        c = f["ctx"]
        rows.append([f"fanout W={f['watchers']} {f['rate']:g}/s {f['server'].split()[0]}", f"{c['wall_s']:.1f}", f"{c['server_cpu_s']:.2f}",
                     f"{c['server_loop_cpu_s']:.2f}",
                     f"{100 * c['server_cpu_s'] / c['wall_s']:.0f}%", f"{c['server_wait_s']:.2f}",
                     f"{c['client_cpu_s']:.2f}", f"{c['client_wait_s']:.2f}",
                     f"{100 * c['machine_busy_s'] / max(c['machine_total_s'], 1e-9):.0f}%",
                     f"{1e6 * c['server_cpu_s'] / f['window_events']:.0f} µs/event" if f["window_events"] else "-",
                     quiet.get(f"fanout W={f['watchers']} {f['rate']:g}/s", "")])
    if rows:
        print_table("Where the CPU went (per scenario window; wait = runnable but no CPU free, from schedstat)",
                    ["scenario", "wall s", "srv CPU s", "loop CPU s", "srv CPU", "srv wait s", "cli CPU s", "cli wait s",
                     "machine busy", "srv CPU per", "note"], rows,
                    "control rows: over the counted samples only (a sample = one held call and its RPC; pause: "
                    "one pause/resume cycle,\nwhich also runs the unheld calls in between). srv CPU = all threads of "
                    "the server process; loop CPU = its main\n(event-loop) thread; srv CPU % = of one CPU. machine busy counts "
                    "every process on the "
                    f"{os.cpu_count()} CPUs (this benchmark, the fake claude, and anything else running).")
    busy, total = mach1[0] - mach0[0], mach1[1] - mach0[1]
    print(f"\nmachine: {os.cpu_count()} CPUs, {100 * busy / total:.0f}% busy over the whole run "
          f"({time.monotonic() - t_begin:.0f} s); load average before {load0[0]:.2f}, after {load1[0]:.2f}")
    for a in control:
        if a["status"] != "PHASE_STATUS_SUCCEEDED" or a["unmatched"]:
            print(f"  {a['name']}: phase {a['status']} ({a['reason']}); {a['unmatched']} samples without a child "
                  "timestamp")
    if profile_out is not None and profile_out.exists():
        import pstats

        print("\nserver profile (cProfile of the event-loop thread, CPU time, whole run incl. start-up), "
              "top 30 by internal time:")
        pstats.Stats(str(profile_out)).sort_stats("tottime").print_stats(30)


if __name__ == "__main__":
    main()
