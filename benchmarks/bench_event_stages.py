"""Where a server's event loop spends its CPU per event, step by step, beside another commit's server.

A cProfile of the loop multiplies the cost of every Python call, which is most of what the event
path is made of, and a sampling profile of a server whose other threads sit idle mis-reads them.
This bench instead runs each server with a thin timer (``time.thread_time_ns``, the loop thread's
CPU, around each call) on the few coarse steps a batch of events goes through: the stdout read
(``PhaseRun.on_stdout``, and inside it the parser ``PhaseStream.feed`` and each observer of the
run's fan-out, ``step:<observer>``), the writer's commit (``EventWriter.flush`` in older trees,
``_hand_off``/``_commit``/``_finish`` since the event writer), and every callback and task step
the loop runs (``H <callback or coroutine>``: the gRPC handler that sends the stream is
``H task:_handle_exceptions``). A step is a batch (~100 events of a fast phase), so the timers
add a fraction of a percent.

Phases: the fake CLI of bench_run_phase.py writing ``--lines`` assistant lines as fast as it can
(P2), one at a time, ``--phases`` of them per server after a warm-up phase. Figures: loop CPU in
ns per event of the phases (the server's start is in ``H task:serve``), and the number of calls.

Usage: .venv/bin/python benchmarks/bench_event_stages.py [--baseline d7c7a82] [--phases 3]
       [--lines 20000] [--top 40]
It measures and prints; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "benchmarks"))

import bench_run_phase as brp  # noqa: E402
import server_process  # noqa: E402
from server_process import ServerProcess, export_baseline  # noqa: E402

# Run as the server's main (ServerProcess's profile wrapper): argv[1] is where the totals go.
TIMER_WRAPPER = r'''
import asyncio.base_events, asyncio.events, atexit, collections, json, sys, time
from helix_runner.cli import main
out, argv = sys.argv[1], sys.argv[2:]
T, N = collections.Counter(), collections.Counter()
cpu = time.thread_time_ns

def timed(name, fn):
    def call(*a, **k):
        t0 = cpu()
        try:
            return fn(*a, **k)
        finally:
            T[name] += cpu() - t0
            N[name] += 1
    return call

def patch(module, cls, meth):
    try:
        owner = getattr(__import__(module, fromlist=["_"]), cls)
    except (ImportError, AttributeError):
        return  # not in this tree
    if meth in vars(owner):
        setattr(owner, meth, timed(f"{cls}.{meth}", getattr(owner, meth)))

for module, cls, meth in [
    ("helix_runner.phases.run", "PhaseRun", "on_stdout"),
    ("helix_runner.domain.phase_stream", "PhaseStream", "feed"),
    ("helix_runner.phases.event_log", "EventWriter", "flush"),
    ("helix_runner.phases.event_log", "EventWriter", "_hand_off"),
    ("helix_runner.phases.event_log", "EventWriter", "_commit"),
    ("helix_runner.phases.event_log", "EventWriter", "_finish"),
    ("helix_runner.phases.event_log", "EventWriter", "submit"),
    ("helix_runner.phases.event_log", "PhaseEventLog", "publish"),
    ("helix_runner.phases.event_log", "PhaseEventLog", "_offer"),
]:
    patch(module, cls, meth)

import helix_runner.phases.fanout as fanout
_init = fanout.Fanout.__init__
def _fanout_init(self, observers):
    _init(self, [timed("step:" + str(getattr(o, "__qualname__", None) or type(o).__name__), o) for o in observers])
fanout.Fanout.__init__ = _fanout_init
asyncio.base_events.BaseEventLoop._run_once = timed("loop total (_run_once)",
                                                    asyncio.base_events.BaseEventLoop._run_once)

def _handle_name(handle):
    cb = handle._callback
    owner = getattr(cb, "__self__", None)
    if owner is not None and hasattr(owner, "get_coro"):
        coro = owner.get_coro()
        return "H task:" + str(getattr(coro, "__qualname__", None) or type(coro).__name__)
    return "H " + str(getattr(cb, "__qualname__", None) or type(cb).__name__)
_run = asyncio.events.Handle._run
def _timed_run(self):
    t0 = cpu()
    try:
        return _run(self)
    finally:
        name = _handle_name(self)
        T[name] += cpu() - t0
        N[name] += 1
asyncio.events.Handle._run = _timed_run

def dump():
    with open(out, "w") as f:
        json.dump({"T": T, "N": N}, f)
atexit.register(dump)
code = main(argv)
dump()
sys.exit(code)
'''


def measure(tmp: Path, name: str, src: Path | None, phases: int, lines: int) -> dict:
    """One server's totals: warm-up phase, then ``phases`` P2 phases of ``lines`` lines each."""
    workdir = tmp / "work"
    workdir.mkdir(exist_ok=True)
    fake = brp.write_fake_claude(tmp)
    out = tmp / f"stages-{name}.json"
    env = {"HELIX_RUNNER_MAX_CONCURRENT_PHASES": "300", "HELIX_RUNNER_DEFAULT_IDLE_TIMEOUT_SECONDS": "120"}
    saved, server_process.PROFILE_WRAPPER = server_process.PROFILE_WRAPPER, TIMER_WRAPPER
    try:
        server = ServerProcess(tmp, name, fake, workdir, env_extra=env, server_src=src, profile_out=out)
    finally:
        server_process.PROFILE_WRAPPER = saved
    try:
        brp.warm_up(server, workdir, name)
        for i in range(phases):
            cfg = {"address": server.address, "k": 1, "lines": lines, "rate": 0.0, "workdir": str(workdir),
                   "tag": f"stages-{name}-{i}", "timeout": 600.0}
            r = brp.run_subprocess_json(brp.client_args("--client", cfg), 660)
            if r["failed"]:
                raise RuntimeError(f"{name}: {r['errors']}")
    finally:
        server.stop()
    return json.loads(out.read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default="d7c7a82", help="git ref of the other server ('' for none)")
    ap.add_argument("--phases", type=int, default=3)
    ap.add_argument("--lines", type=int, default=20000)
    ap.add_argument("--top", type=int, default=40, help="rows (the costliest first)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="helix-bench-stages-"))
    results = {"this tree": measure(tmp, "this", None, args.phases, args.lines)}
    if args.baseline:
        results[args.baseline] = measure(tmp, "baseline", export_baseline(args.baseline, tmp), args.phases,
                                         args.lines)
    events = args.phases * args.lines
    keys = sorted({k for r in results.values() for k in r["T"]},
                  key=lambda k: -max(r["T"].get(k, 0) for r in results.values()))
    print(f"\n## Event-loop CPU per event (ns) and calls, {args.phases} phases x {args.lines} lines "
          "(warm-up and the server's start included)")
    print(f"{'step':<62}" + "".join(f"{name[:20]:>22}" for name in results))
    for key in keys[:args.top]:
        print(f"{key[:62]:<62}" + "".join(f"{r['T'].get(key, 0) / events:>12.0f} {r['N'].get(key, 0):>9}"
                                          for r in results.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
