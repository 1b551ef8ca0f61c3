"""What containment costs at phase start and end: the phase shim and the per-phase cgroup.

Contenders, each timed as the server does it (``asyncio.create_subprocess_exec`` with three pipes,
``start_new_session``), interleaved round by round so a noisy machine slows them alike:

* ``direct``: the command itself (how phases started before containment);
* ``shim``: the command under the phase shim (``python -E -s -S -B phase_shim.py``), the forced
  subreaper fallback: a ``ProcessSupervisor`` with ``subreaper_scope()``;
* ``shim+cgroup``: the same with each containment this host offers (cgroup v2, the v1 freezer):
  the cgroup directories made (and limits written) before the spawn, joined by the shim, emptied
  and removed at the end.

Two numbers per contender: ``start`` = from the spawn call to the command's first stdout byte
(the command is ``python -S -c "print(1)"``, so its own start-up is in every row; the
differences are what containment adds), and ``total`` = the whole supervised run including
the end-of-phase kill of the scope and the cgroup's removal. The real CLI takes about a second
to start (see benchmarks/bench_run_phase.py), which puts the shim's cost in proportion.

Usage: .venv/bin/python benchmarks/bench_phase_shim.py [--rounds 30]
It measures and prints a table; it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "server"))

from helix_runner.process.containment import ContainmentError, detect, subreaper_scope  # noqa: E402
from helix_runner.process.supervisor import ProcessLimits, ProcessSupervisor  # noqa: E402

COMMAND = [sys.executable, "-S", "-c", "print(1)"]


class FirstByte:
    """A sink that notes when the first stdout byte arrives."""

    def __init__(self) -> None:
        self.first: float | None = None

    def on_stdout(self, chunk: bytes) -> None:
        if self.first is None:
            self.first = time.perf_counter()

    def on_stderr_line(self, line: bytes, truncated: bool) -> None:
        pass


async def direct() -> tuple[float, float]:
    began = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *COMMAND,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    proc.stdin.close()
    await proc.stdout.read(1)
    first = time.perf_counter()
    await proc.communicate()
    return first - began, time.perf_counter() - began


async def supervised(scope) -> tuple[float, float]:
    sink = FirstByte()
    sup = ProcessSupervisor(
        COMMAND, cwd=Path.cwd(), env=dict(os.environ), sink=sink, limits=ProcessLimits(), scope=scope
    )
    began = time.perf_counter()
    result = await sup.run()
    assert result.exit_code == 0, result
    return (sink.first or began) - began, time.perf_counter() - began


async def main(rounds: int) -> None:
    contenders = {"direct": lambda: direct(), "shim": lambda: supervised(subreaper_scope())}
    made = []
    for setting in ("cgroup-v2", "cgroup-v1"):
        try:
            containment = detect(setting, "helix-runner-bench", f"srv-bench-{uuid.uuid4().hex[:6]}")
        except ContainmentError as exc:
            print(f"{setting}: not available ({exc})")
            continue
        made.append(containment)
        contenders[f"shim+{setting}"] = (lambda c: lambda: supervised(c.scope(uuid.uuid4().hex)))(containment)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in contenders}
    names = list(contenders)
    for r in range(rounds + 2):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            sample = await contenders[name]()
            if r >= 2:  # two warm-up rounds
                times[name].append(sample)
    for c in made:
        c.close()
    base_start = statistics.median(s for s, _ in times["direct"])
    base_total = statistics.median(t for _, t in times["direct"])
    print(f"{rounds} rounds, median (p90) in ms; +ms = over direct\n")
    print(f"{'contender':<18} {'start':>16} {'+ms':>7} {'total':>16} {'+ms':>7}")
    for name, samples in times.items():
        starts = sorted(s * 1000 for s, _ in samples)
        totals = sorted(t * 1000 for _, t in samples)
        p90 = int(len(starts) * 0.9) - 1
        start, total = statistics.median(starts), statistics.median(totals)
        print(
            f"{name:<18} {start:8.1f} ({starts[p90]:5.1f}) {start - base_start * 1000:7.1f} "
            f"{total:8.1f} ({totals[p90]:5.1f}) {total - base_total * 1000:7.1f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    asyncio.run(main(parser.parse_args().rounds))
