"""Loaded into a benchmarked server (``bench_replicas.py --turn-probe``): how long each event-loop turn
keeps the loop busy, i.e. runs callbacks and task steps, without the time it sleeps in ``select``.

The loop-lag probe (telemetry/loop_lag.py) measures how late a timer fires: the loop's own work
ahead of it, plus the time the process waits for a CPU or the GIL. This measures the first part
alone, so a late wake-up can be told from a long turn. It wraps asyncio's ``Handle._run`` and
``BaseEventLoop._run_once`` (about a microsecond per callback) and, at exit, writes the turns'
busy-time percentiles and what ran in turns over 10 ms to ``$HELIX_TURN_PROBE_OUT.<pid>.json``.
Inactive in any process but ``helix-runner serve``.
"""

import os
import sys

if os.environ.get("HELIX_TURN_PROBE_OUT") and "serve" in sys.argv[1:2]:
    import asyncio
    import asyncio.base_events
    import asyncio.events
    import atexit
    import collections
    import json
    import time

    _out = f"{os.environ['HELIX_TURN_PROBE_OUT']}.{os.getpid()}.json"
    _busy = [0.0]
    _parts: collections.Counter = collections.Counter()
    _long: collections.Counter = collections.Counter()
    _long_count: collections.Counter = collections.Counter()
    _turns: list[float] = []
    _clock = time.perf_counter
    _run = asyncio.events.Handle._run
    _run_once = asyncio.base_events.BaseEventLoop._run_once

    def _name(handle) -> str:
        try:
            callback = handle._callback
            task = getattr(callback, "__self__", None)
            if isinstance(task, asyncio.Task):
                coro, frames = task.get_coro(), []
                while coro is not None and len(frames) < 4:
                    frames.append(str(getattr(coro, "__qualname__", None) or type(coro).__name__))
                    coro = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None)
                return "task " + " > ".join(frames)
            return str(getattr(callback, "__qualname__", None) or repr(callback))[:80]
        except Exception:  # noqa: BLE001 - a probe must never break the server it measures
            return "?"

    def _timed_run(self):
        started = _clock()
        try:
            return _run(self)
        finally:
            took = _clock() - started
            _busy[0] += took
            if took > 0.0005:
                _parts[_name(self)] += took

    def _timed_run_once(self):
        _busy[0] = 0.0
        _parts.clear()
        _run_once(self)
        _turns.append(_busy[0])
        if _busy[0] > 0.010:
            for name, took in _parts.items():
                _long[name] += took
                _long_count[name] += 1

    def _dump() -> None:
        turns = sorted(_turns)

        def pct(p: float) -> float:
            return turns[min(len(turns) - 1, int(p * len(turns)))] * 1000 if turns else 0.0

        with open(_out, "w") as f:
            json.dump({
                "turns": len(turns), "busy_s": sum(turns), "p50_ms": pct(0.5), "p99_ms": pct(0.99),
                "p999_ms": pct(0.999), "max_ms": pct(1.0), "over_10ms": sum(1 for t in turns if t > 0.010),
                "in_turns_over_10ms": [(name, _long_count[name], round(_long[name] * 1000, 1))
                                       for name, _ in _long.most_common(15)],
            }, f, indent=1)

    asyncio.events.Handle._run = _timed_run
    asyncio.base_events.BaseEventLoop._run_once = _timed_run_once
    atexit.register(_dump)
