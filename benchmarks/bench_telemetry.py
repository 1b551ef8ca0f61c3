"""What telemetry costs on the event path: raw stdout bytes -> domain events -> ``PhaseTelemetry``.

Replays real CLI transcripts (``tests/fixtures/telemetry`` by default, or every CLI stdout file of
a corpus with ``--corpus``) many times and runs, side by side in one process on the same chunks:

* ``off``            — ``PhaseStream.feed`` and an observer with metrics and tracing off (the floor);
* ``metrics``        — metrics on, no tracer: what runs when no exporter is configured (``tracing =
  "auto"`` without ``OTEL_*`` exporter settings, or ``OTEL_TRACES_EXPORTER=none``: no span is built);
* ``trace, no exp.`` — metrics plus an SDK ``TracerProvider`` without any span processor: spans are
  built and dropped, i.e. the cost of building them;
* ``trace, memory``  — metrics plus a ``SimpleSpanProcessor`` into an ``InMemorySpanExporter`` (every
  span is built, ended and handed to an exporter synchronously: an upper bound for a batch exporter).

Usage: .venv/bin/python benchmarks/bench_telemetry.py [--seconds N] [--clock wall|cpu] [--corpus DIR]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "server"))

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from helix_runner.domain.phase_result import PhaseResult  # noqa: E402
from helix_runner.domain.phase_status import PhaseStatus  # noqa: E402
from helix_runner.domain.phase_stream import PhaseStream, PhaseStreamOptions  # noqa: E402
from helix_runner.domain.pricing import PriceTable  # noqa: E402
from helix_runner.telemetry import PhaseTelemetry, Telemetry  # noqa: E402

CHUNK = 64 * 1024
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "telemetry"


def transcripts(corpus: str | None) -> list[bytes]:
    """The fixture transcripts, or every CLI stdout file in ``<corpus>/real``."""
    folder = Path(corpus) / "real" if corpus else FIXTURES
    files = sorted(p for p in folder.glob("*.jsonl") if not p.name.endswith((".both.jsonl", ".stdin.jsonl")))
    if not files:
        sys.exit(f"no transcripts in {folder}")
    return [p.read_bytes() for p in files]


class Contender:
    """One way to observe a phase; ``run`` replays every transcript once and returns the event count."""

    def __init__(
        self, name: str, make: Callable[[str], PhaseTelemetry], after: Callable[[], None] = lambda: None
    ):
        self.name = name
        self.make = make
        self.after = after
        self.times: list[float] = []
        self.events = 0


def replay(data: list[bytes], observer_for: Callable[[str], PhaseTelemetry], prices: PriceTable) -> int:
    n = 0
    for i, transcript in enumerate(data):
        observer = observer_for(f"phase-{i}")
        stream = PhaseStream(PhaseStreamOptions(), price_table=prices)
        observer.on_start()
        for start in range(0, len(transcript), CHUNK):
            events = stream.feed(transcript[start : start + CHUNK])
            observer.on_events(events)
            n += len(events)
        events = stream.finish()
        observer.on_events(events)
        n += len(events)
        observer.on_end(
            PhaseResult(
                job_id="job",
                phase_id=f"phase-{i}",
                status=PhaseStatus.SUCCEEDED,
                reason="",
                cost=stream.cost,
                tool_stats=tuple(stream.tools.stats()),
                start_time_ns=time.time_ns(),
                end_time_ns=time.time_ns(),
            )
        )
    return n


def contenders() -> list[Contender]:
    metrics_only = Telemetry()
    no_exporter = Telemetry(tracer_provider=TracerProvider())
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    in_memory = Telemetry(tracer_provider=provider)

    def observer(telemetry: Telemetry | None) -> Callable[[str], PhaseTelemetry]:
        if telemetry is None:
            return lambda phase: PhaseTelemetry(None, None, job_id="job", phase_id=phase, project_id="p")
        return lambda phase: telemetry.phase("job", phase, "p")

    return [
        Contender("off", observer(None)),
        Contender("metrics", observer(metrics_only)),
        Contender("trace, no exp.", observer(no_exporter)),
        Contender("trace, memory", observer(in_memory), after=exporter.clear),
    ]


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(values, n=4)
    return q[0], statistics.median(values), q[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="how long to measure (default 10)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    parser.add_argument("--corpus", help="a corpus directory holding real/ (default: the test fixtures)")
    args = parser.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter

    data = transcripts(args.corpus)
    size = sum(len(d) for d in data)
    prices = PriceTable()
    runners = contenders()
    for c in runners:  # warm up: price lookups, label children, code paths
        replay(data, c.make, prices)
        c.after()
    gc.collect()
    deadline = time.perf_counter() + args.seconds
    rounds = 0
    while time.perf_counter() < deadline or rounds < 5:
        order = runners[rounds % len(runners) :] + runners[: rounds % len(runners)]
        for c in order:
            started = clock()
            c.events = replay(data, c.make, prices)
            c.times.append(clock() - started)
            c.after()
        rounds += 1

    base = runners[0]
    events = base.events
    print(
        f"{len(data)} transcripts, {size / 1e3:.1f} kB, {events} events per replay; {rounds} replays each, "
        f"{args.clock} clock\n"
    )
    print("| contender | µs per replay (median) | events/s | µs per event over `off` | × `off` (IQR) |")
    print("|---|---|---|---|---|")
    for c in runners:
        ratios = [t / b for t, b in zip(c.times, base.times, strict=True)]
        lo, mid, hi = quartiles(ratios)
        median = statistics.median(c.times)
        over = (median - statistics.median(base.times)) / events * 1e6
        print(
            f"| {c.name} | {median * 1e6:,.0f} | {events / median:,.0f} | {over:+.2f} | "
            f"{mid:.2f}× ({lo:.2f}-{hi:.2f}) |"
        )


if __name__ == "__main__":
    main()
