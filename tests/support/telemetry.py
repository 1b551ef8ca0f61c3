"""Telemetry test helpers: finished spans as a tree, metric samples, and a transcript replayer.

The replayer feeds a recorded CLI transcript through ``PhaseStream`` into a ``PhaseTelemetry``
with a scripted clock.

Line ``k`` (1-based) of a transcript is received at ``T0 + STEP_NS * k * (k + 1) / 2`` — each line
``k`` ms after the previous one — so every duration in the resulting spans and histograms is known
in advance and differs from line to line.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from helix_runner.domain.events import Event, Payload
from helix_runner.domain.phase_result import PhaseResult
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.phase_stream import PhaseStream, PhaseStreamOptions
from helix_runner.domain.pricing import PriceTable
from helix_runner.telemetry import PhaseTelemetry, Telemetry

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "telemetry"
T0 = 1_700_000_000_000_000_000
STEP_NS = 1_000_000


def line_time(k: int) -> int:
    """Receive time of line ``k`` (1-based) of a replayed transcript."""
    return T0 + STEP_NS * k * (k + 1) // 2


@dataclass
class Replay:
    """What a replay produced: every event, in order, and the final result."""

    events: list[Event] = field(default_factory=list)
    result: PhaseResult | None = None


def transcript(name: str) -> list[bytes]:
    """The lines of a fixture transcript (newlines kept)."""
    return (FIXTURES / name).read_bytes().splitlines(keepends=True)


def replay(
    lines: str | list[bytes],
    telemetry: PhaseTelemetry,
    *,
    status: PhaseStatus = PhaseStatus.SUCCEEDED,
    inject: Callable[[int], list[tuple[int, Payload]]] | None = None,
) -> Replay:
    """Feeds a transcript (a fixture name, or lines) line by line, then ends the phase with ``status``.

    ``inject(k)`` returns service events to emit after line k, each as (ns after line k, payload).
    """
    now = [T0]
    stream = PhaseStream(PhaseStreamOptions(), clock_ns=lambda: now[0], price_table=_prices())
    out = Replay()

    def publish(events: list[Event]) -> None:
        out.events.extend(events)
        telemetry.on_events(events)

    telemetry.on_start(T0)
    lines = transcript(lines) if isinstance(lines, str) else lines
    k = 0
    for k, line in enumerate(lines, start=1):
        now[0] = line_time(k)
        publish(stream.feed(line))
        for offset, payload in inject(k) if inject else ():
            now[0] = line_time(k) + offset
            publish([stream.emit(payload)])
    now[0] = line_time(k + 1)
    publish(stream.finish())
    tools = stream.tools
    out.result = PhaseResult(
        job_id="job-1",
        phase_id="p1",
        status=status,
        reason="replayed",
        session_id=stream.session_id or "",
        cost=stream.cost,
        tool_stats=tuple(tools.stats()),
        start_time_ns=T0,
        end_time_ns=now[0],
        last_sequence=stream.last_sequence,
    )
    telemetry.on_end(out.result)
    return out


_PRICES: list[PriceTable] = []


def _prices() -> PriceTable:
    """One price table for every replay (loading genai-prices' table takes most of a second)."""
    if not _PRICES:
        _PRICES.append(PriceTable())
    return _PRICES[0]


class Spans:
    """Finished spans of one test, with tree helpers."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def all(self) -> list[ReadableSpan]:
        return sorted(self.exporter.get_finished_spans(), key=lambda s: (s.start_time, s.name))

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.all() if s.name.startswith(prefix)]

    def one(self, prefix: str) -> ReadableSpan:
        (span,) = self.named(prefix)
        return span

    def children(self, parent: ReadableSpan) -> list[ReadableSpan]:
        return [s for s in self.all() if s.parent is not None and s.parent.span_id == parent.context.span_id]

    def parent_of(self, span: ReadableSpan) -> ReadableSpan | None:
        assert span.parent is not None
        return next((s for s in self.all() if s.context.span_id == span.parent.span_id), None)


def sample(telemetry: Telemetry, name: str, **labels: str) -> float:
    """A sample's value in the telemetry's registry (0 when the series does not exist yet)."""
    return telemetry.metrics.registry.get_sample_value(name, labels) or 0.0


class OtlpJsonReceiver:
    """A loopback OTLP/HTTP receiver for ``http/json`` trace exports (what the CLI's own SDK sends).

    ``spans()`` flattens every received export into dicts with ``name``, hex ``trace_id``,
    ``span_id``, ``parent_span_id`` and the export's ``resource`` attributes (string values).
    """

    def __init__(self) -> None:
        bodies: list[bytes] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                bodies.append(self.rfile.read(int(self.headers.get("content-length", 0))))
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: object) -> None:
                pass

        self._bodies = bodies
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def __enter__(self) -> OtlpJsonReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def spans(self) -> list[dict]:
        out = []
        for body in list(self._bodies):
            for resource_spans in json.loads(body).get("resourceSpans", []):
                resource = {
                    a["key"]: a["value"].get("stringValue") for a in resource_spans["resource"]["attributes"]
                }
                for scope in resource_spans.get("scopeSpans", []):
                    for span in scope.get("spans", []):
                        out.append(
                            {
                                "name": span["name"],
                                "trace_id": span["traceId"],
                                "span_id": span["spanId"],
                                "parent_span_id": span.get("parentSpanId", ""),
                                "resource": resource,
                            }
                        )
        return out
