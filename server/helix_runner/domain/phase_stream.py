"""The facade the supervisor drives: raw stdout bytes in, sequenced domain events out.

``PhaseStream`` composes the line framer, the stream parser, the tool tracker and the cost ledger.
Events are returned from ``feed`` as soon as their line is complete (the CLI's stdout is never
waited on to end), numbered with a per-phase ``sequence`` that is gap-free from 1 across ``feed``,
``finish`` and ``emit``. Derived events follow the line that caused them: a ``CostUpdate`` after
each turn result and after the first line of each new API message (the cost changed), and a final
one from ``finish`` if the cost changed since the last.

Every line completed by one ``feed`` call gets that call's receive time (they arrived together).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from helix_runner.domain.cost_ledger import CostLedger, PhaseCostSnapshot
from helix_runner.domain.events import (
    CostUpdate,
    Event,
    HookEvent,
    ParseError,
    Payload,
    SessionInit,
    ToolCallFinished,
    ToolCallStarted,
    TurnResult,
)
from helix_runner.domain.line_framer import DEFAULT_MAX_LINE_BYTES, LineFramer
from helix_runner.domain.pricing import ModelPrice, PriceTable
from helix_runner.domain.stream_parser import StreamParser
from helix_runner.domain.tool_tracker import ToolTracker


@dataclass(frozen=True)
class PhaseStreamOptions:
    """How to read one phase's stdout.

    ``max_line_bytes`` caps a single line (longer lines are skipped without buffering and reported);
    ``include_partial_messages`` mirrors the CLI flag: when False, ``stream_event`` lines give no
    events (their usage still counts); ``include_raw_unknown`` puts the bounded original JSON into
    ``Unknown`` events; ``price_overrides`` prices models the price table does not know (or
    overrides it), by model id.
    """

    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    include_partial_messages: bool = False
    include_raw_unknown: bool = False
    price_overrides: Mapping[str, ModelPrice] = field(default_factory=dict)


class PhaseStream:
    """Turns the bytes a ``claude`` process writes into typed, bounded, ordered events."""

    def __init__(
        self,
        options: PhaseStreamOptions = PhaseStreamOptions(),
        clock_ns: Callable[[], int] = time.time_ns,
        *,
        price_table: PriceTable | None = None,
    ) -> None:
        self._options = options
        self._clock = clock_ns
        self._framer = LineFramer(options.max_line_bytes)
        self._parser = StreamParser(
            include_partial_messages=options.include_partial_messages,
            include_raw_unknown=options.include_raw_unknown,
        )
        self._tools = ToolTracker()
        self._ledger = CostLedger(price_table or PriceTable(options.price_overrides))
        self._sequence = 0
        self._session_id: str | None = None
        self._results: list[TurnResult] = []
        self._parse_errors = 0
        self._stdout_bytes = 0
        self._last_cost: PhaseCostSnapshot | None = None
        self._finished = False

    # ----------------------------------------------------------------------------------------------
    # Input.

    def feed(self, chunk: bytes) -> list[Event]:
        """Consume a chunk of stdout; return the events of every line it completed."""
        if self._finished:
            raise RuntimeError("PhaseStream.feed after finish")
        self._stdout_bytes += len(chunk)
        items = self._framer.push(chunk)
        if not items:
            return []
        now = self._clock()
        out: list[Event] = []
        parse = self._parser.parse
        for item in items:
            if item.__class__ is ParseError:
                self._parse_errors += 1
                out.append(self._event(now, "", "", "", item))  # type: ignore[arg-type]
                continue
            line, line_number, offset = item  # type: ignore[misc]
            parsed = parse(line, line_number, offset)
            usage = parsed.usage
            new_message = False
            if usage is not None:
                if usage.final_output:
                    self._ledger.observe_output(usage.message_id, usage.usage)
                else:
                    new_message = self._ledger.observe_message(usage.message_id, usage.model, usage.usage)
            payloads = parsed.payloads
            if not payloads:
                if new_message:
                    self._cost_event(now, out)
                continue
            sid = parsed.session_id
            if sid:
                if self._session_id is None:
                    self._session_id = sid
            else:
                sid = self._session_id or ""
            parent = parsed.parent_tool_use_id
            agent = parsed.agent_id
            uid = parsed.uuid
            for payload in payloads:
                cls = payload.__class__
                if cls is ToolCallStarted:
                    event = self._event(now, sid, parent, agent, payload, uid)
                    self._tools.start(
                        payload.tool_use_id,
                        payload.name,
                        time_ns=now,
                        sequence=event.sequence,
                        input_json=payload.input_json,
                        input_bytes=payload.input_bytes,
                        input_truncated=payload.input_truncated,
                        parent_tool_use_id=parent,
                        agent_id=agent,
                        server_tool=payload.server_tool,
                    )
                    out.append(event)
                elif cls is ToolCallFinished:
                    out.append(self._tool_finished(now, sid, parent, agent, uid, payload))
                elif cls is TurnResult:
                    self._results.append(payload)
                    self._ledger.on_result(payload)
                    out.append(self._event(now, sid, parent, agent, payload, uid))
                    new_message = True  # a CostUpdate follows the result
                elif cls is ParseError:
                    self._parse_errors += 1
                    out.append(self._event(now, sid, parent, agent, payload, uid))
                else:
                    if cls is SessionInit and parsed.session_id:
                        self._session_id = parsed.session_id  # latest init wins (resume id)
                    elif cls is HookEvent and payload.duration_ms is not None:
                        self._tools.add_hook_duration(
                            payload.duration_ms, tool_use_id=payload.tool_use_id, hook_name=payload.hook_name
                        )
                    out.append(self._event(now, sid, parent, agent, payload, uid))
            if new_message:
                self._cost_event(now, out)
        return out

    def finish(self) -> list[Event]:
        """End of stdout: report a truncated last line, close open calls, send the final cost."""
        if self._finished:
            return []
        now = self._clock()
        out: list[Event] = []
        for error in self._framer.finish():
            self._parse_errors += 1
            out.append(self._event(now, self._session_id or "", "", "", error))
        self._tools.finish_phase()
        self._finished = True
        if self._ledger.snapshot() != self._last_cost:
            self._cost_event(now, out)
        return out

    def emit(self, payload: Payload) -> Event:
        """Sequence a service event (stderr, status change, control, ...) into the phase's stream."""
        return self._event(self._clock(), self._session_id or "", "", "", payload)

    # ----------------------------------------------------------------------------------------------
    # State.

    @property
    def last_sequence(self) -> int:
        """Sequence of the last event produced (0 before the first)."""
        return self._sequence

    @property
    def session_id(self) -> str | None:
        """The CLI's session id from the latest ``system/init`` (or the first line carrying one)."""
        return self._session_id

    @property
    def results(self) -> list[TurnResult]:
        """Every turn result seen, in order (a copy)."""
        return list(self._results)

    @property
    def tools(self) -> ToolTracker:
        """Tool calls, statistics and the current call."""
        return self._tools

    @property
    def cost(self) -> PhaseCostSnapshot:
        """Reported and computed cost now."""
        return self._ledger.snapshot()

    @property
    def parse_error_count(self) -> int:
        """Stdout lines that could not be parsed (each also produced a ParseError event)."""
        return self._parse_errors

    @property
    def stdout_bytes(self) -> int:
        """Bytes of stdout fed so far."""
        return self._stdout_bytes

    @property
    def finished(self) -> bool:
        """Whether ``finish`` was called."""
        return self._finished

    # ----------------------------------------------------------------------------------------------
    # Internals.

    def _event(self, now: int, sid: str, parent: str, agent: str, payload: Payload, uid: str = "") -> Event:
        self._sequence += 1
        return Event(self._sequence, now, sid, parent, agent, uid, payload)

    def _cost_event(self, now: int, out: list[Event]) -> None:
        snapshot = self._ledger.snapshot()
        self._last_cost = snapshot
        out.append(self._event(now, self._session_id or "", "", "", CostUpdate(snapshot)))

    def _tool_finished(
        self, now: int, sid: str, parent: str, agent: str, uid: str, payload: ToolCallFinished
    ) -> Event:
        sequence = self._sequence + 1
        call = self._tools.finish(
            payload.tool_use_id,
            is_error=payload.is_error,
            time_ns=now,
            sequence=sequence,
            result_preview=payload.content_preview,
            result_bytes=payload.content_bytes,
            result_truncated=payload.content_truncated,
            structured_result_json=payload.structured_result_json,
            structured_result_truncated=payload.structured_result_truncated,
        )
        if call is not None:
            payload = replace(
                payload, name=call.name, duration_ns=call.duration_ns, hook_duration_ms=call.hook_duration_ms
            )
        return self._event(now, sid, parent, agent, payload, uid)
