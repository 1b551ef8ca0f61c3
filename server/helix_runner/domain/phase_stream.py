"""The facade the supervisor drives: raw stdout bytes in, sequenced domain events out.

``PhaseStream`` composes the line framer, the stream parser, the tool tracker and the cost ledger.
Events are returned from ``feed`` as soon as their line is complete (the CLI's stdout is never
waited on to end), numbered with a per-phase ``sequence`` that is gap-free from 1 across ``feed``,
``finish`` and ``emit``. Derived events follow the line that caused them: a ``CostUpdate`` after
each turn result, after a new API message between results (at most one a second, see
``COST_UPDATE_INTERVAL_NS``), and a final one from ``finish`` if the cost changed since the last.

Every line completed by one ``feed`` call gets that call's receive time (they arrived together).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import orjson

from helix_runner.domain.attempt_cost import carried_usage, own_cost, sum_costs
from helix_runner.domain.cost import PhaseCostSnapshot
from helix_runner.domain.cost_ledger import CostLedger
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
from helix_runner.domain.stream_lines import decode_line as _decode_line
from helix_runner.domain.stream_parser import SHAPE_ERRORS, TYPED_MISSES, StreamParser
from helix_runner.domain.tool_tracker import ToolTracker

# A real phase writes one result per turn; the bound only keeps pathological streams flat in memory.
MAX_RESULTS_KEPT = 1000
# Between results, a new API message changes the computed cost; report that at most once a second.
COST_UPDATE_INTERVAL_NS = 1_000_000_000

# Payload classes that update the phase's state besides becoming an event.
_SIDE_EFFECTS = frozenset({ToolCallStarted, ToolCallFinished, TurnResult, SessionInit, HookEvent, ParseError})


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
        self._prices = price_table or PriceTable(options.price_overrides)
        self._ledger = CostLedger(self._prices)
        # Later attempts (docs/retries-and-admission.md §3-4): the finished attempts' own costs, and
        # what this attempt's CLI carried in from the session it resumed (known at its first result).
        self._prior_costs: tuple[PhaseCostSnapshot, ...] = ()
        self._resumed = False
        self._carried: tuple = ()
        self._sequence = 0
        self._session_id: str | None = None
        self._results: deque[TurnResult] = deque(maxlen=MAX_RESULTS_KEPT)
        self._result_count = 0
        self._parse_errors = 0
        self._long_lines = 0
        self._stdout_bytes = 0
        self._last_cost: PhaseCostSnapshot | None = None
        self._last_cost_ns: int | None = None
        self._finished = False

    @property
    def line_over_cap(self) -> bool:
        """Whether a line went past ``max_line_bytes``: one was dropped, or the unfinished current
        one is being dropped now (the CLI never writes one; a process that writes into its stdout
        might, to grow the server's memory)."""
        return self._long_lines > 0 or self._framer.over_cap

    # ----------------------------------------------------------------------------------------------
    # Input.

    def feed(self, chunk: bytes) -> list[Event]:
        """Consume a chunk of stdout; return the events of every line it completed."""
        if self._finished:
            raise RuntimeError("PhaseStream.feed after finish")
        self._stdout_bytes += len(chunk)
        lines, line_no, offsets = self._framer.push_lines(chunk)
        if not lines:
            return []
        now = self._clock()
        out: list[Event] = []
        append = out.append
        parser = self._parser
        typed = parser.typed_handlers
        handlers = parser.handlers
        ledger = self._ledger
        tools = self._tools
        # msgspec does not validate UTF-8 in what it skips: lines of a chunk with non-ASCII bytes
        # are validated one by one (the first line may also hold bytes of earlier chunks).
        ascii_chunk = chunk.isascii()
        seq = self._sequence  # kept in a local on the hot path; written back before any other use
        for i, line in enumerate(lines):
            # StreamParser.parse, inlined: the common line costs one typed decode and one handler;
            # every other line takes the generic path (orjson, dict handlers), and anything
            # unusual the parser's own exact slow paths.
            try:
                msg = _decode_line(line)  # TypeError for a framer's ParseError entry
                if not ascii_chunk or not i:
                    str(line, "utf-8")  # after decoding: a line of another type fails before this
                payloads, usage = typed[msg.__class__](msg)
            except _TYPED_MISSES:
                try:
                    obj = _loads(line)
                except _JSONDecodeError:  # also what orjson raises for a framer's ParseError entry
                    if line.__class__ is ParseError:  # over-long line, reported by the framer
                        self._parse_errors += 1
                        self._long_lines += 1
                        seq += 1
                        append(Event(seq, now, self._session_id or "", "", "", "", line))
                        continue
                    if not line or bytes(line).isspace():
                        continue  # blank lines are counted (line numbers) but never reported
                    sid, parent, agent, uid, payloads, usage = parser.parse_generic(
                        line, line_no + i, offsets[i]
                    )
                else:
                    try:
                        handler = handlers[obj["type"]]
                    except (KeyError, TypeError):  # not an object, no type, an unknown type
                        sid, parent, agent, uid, payloads, usage = parser.parse_unhandled(
                            obj, line, line_no + i, offsets[i]
                        )
                    else:
                        try:
                            payloads, usage = handler(obj, line)
                        except SHAPE_ERRORS as exc:
                            sid, parent, agent, uid, payloads, usage = parser.parse_failed(
                                obj, exc, line, line_no + i, offsets[i]
                            )
                        else:
                            if payloads:  # the envelope (stream_parser.envelope) is only read for events
                                sid = obj.get("session_id")
                                parent = obj.get("parent_tool_use_id")
                                agent = obj.get("agent_id")
                                uid = obj.get("uuid")
                                if sid.__class__ is not str:
                                    sid = ""
                                if parent.__class__ is not str:
                                    parent = ""
                                if agent.__class__ is not str:
                                    agent = ""
                                if uid.__class__ is not str:
                                    uid = ""
            else:
                if payloads:
                    sid = msg.session_id
                    parent = msg.parent_tool_use_id or ""
                    agent = msg.agent_id or ""
                    uid = msg.uuid or ""
            cost_changed = False
            if usage is not None:
                if usage[3]:
                    ledger.observe_output(usage[0], usage[2])
                else:
                    cost_changed = ledger.observe_message(usage[0], usage[1], usage[2])
            if payloads:
                if sid:
                    if not self._session_id:  # an init without an id (never seen from the CLI) fixes nothing
                        self._session_id = sid
                else:
                    sid = self._session_id or ""
                for payload in payloads:
                    cls = payload.__class__
                    seq += 1
                    if cls not in _SIDE_EFFECTS:  # the common case: text, thinking, system lines
                        append(Event(seq, now, sid, parent, agent, uid, payload))
                        continue
                    if cls is ToolCallStarted:
                        tools.start(payload, now, seq, parent, agent)
                    elif cls is ToolCallFinished:
                        # The event gets the call's name and durations from the tracker. The
                        # parser's payload is fresh and not yet shared, so those three fields are
                        # filled in place (slot setters, past the frozen guard) rather than
                        # building a second ten-field object per tool result.
                        closed = tools.finish(payload, now, seq)
                        if closed is not None:  # else an orphan result: name unknown, no duration
                            _set_name(payload, closed[0])
                            _set_duration(payload, closed[1])
                            _set_hook_ms(payload, closed[2])
                    elif cls is TurnResult:
                        if self._resumed and not self._result_count:
                            self._carried = carried_usage(payload)
                        self._results.append(payload)
                        self._result_count += 1
                        ledger.on_result(payload)
                        self._last_cost_ns = None  # a CostUpdate always follows a result
                        cost_changed = True
                    elif cls is SessionInit:
                        self._session_id = sid  # the latest init wins (it is the resume id)
                    elif cls is HookEvent:
                        if payload.duration_ms is not None:
                            tools.add_hook_duration(
                                payload.duration_ms,
                                tool_use_id=payload.tool_use_id,
                                hook_name=payload.hook_name,
                            )
                    elif cls is ParseError:
                        if not payload.repaired:  # a repaired line's events follow: not lost
                            self._parse_errors += 1
                    append(Event(seq, now, sid, parent, agent, uid, payload))
            if cost_changed and (
                self._last_cost_ns is None or now - self._last_cost_ns >= COST_UPDATE_INTERVAL_NS
            ):
                self._sequence = seq
                self._cost_event(now, out)
                seq = self._sequence
        self._sequence = seq
        return out

    def cost_now(self) -> list[Event]:
        """A CostUpdate with the cost now, if it changed since the last one (updates are at most one
        a second while lines arrive): before a call is held, every view must show what was spent."""
        if self._finished or self.cost == self._last_cost:
            return []
        out: list[Event] = []
        self._cost_event(self._clock(), out)
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
        if self.cost != self._last_cost:
            self._cost_event(now, out)
        return out

    def begin_attempt(self, prior_costs: Sequence[PhaseCostSnapshot], *, resumed: bool) -> None:
        """Start the stdout of the phase's next attempt (a new CLI process).

        The framer, parser, results and cost ledger start afresh; the sequence, the tool calls and
        the session id carry on, so the phase keeps one gap-free stream. ``prior_costs`` are the
        finished attempts' own costs: ``cost`` (and every ``CostUpdate``) is their sum plus this
        attempt's own cost. ``resumed``: the process resumes a session, so its first result may
        carry in the earlier process's totals, which are taken out (``attempt_cost.own_cost``).
        """
        options = self._options
        self._framer = LineFramer(options.max_line_bytes)
        self._parser = StreamParser(
            include_partial_messages=options.include_partial_messages,
            include_raw_unknown=options.include_raw_unknown,
        )
        self._ledger = CostLedger(self._prices)
        self._prior_costs = tuple(prior_costs)
        self._resumed = resumed
        self._carried = ()
        self._results.clear()
        self._result_count = 0
        self._last_cost = None
        self._last_cost_ns = None
        self._finished = False

    @property
    def attempt_cost(self) -> PhaseCostSnapshot:
        """The running attempt's own cost (without what its CLI carried in from a resumed session)."""
        snapshot = self._ledger.snapshot()
        return own_cost(snapshot, self._carried, self._prices) if self._carried else snapshot

    @property
    def prices(self) -> PriceTable:
        return self._prices

    @property
    def carried(self) -> tuple:
        """What this attempt's process carried in from the session it resumed (known at its first result)."""
        return self._carried

    def replace_prior_costs(self, prior_costs: Sequence[PhaseCostSnapshot]) -> None:
        """The finished attempts' own costs, corrected (an attempt stopped without a result, whose true
        figures the resumed process restored: ``attempt_cost.restored_cost``)."""
        self._prior_costs = tuple(prior_costs)

    def continue_from(self, last_sequence: int, session_id: str = "") -> None:
        """A phase taken over from another replica: its next event follows ``last_sequence`` (the
        history written there), in the session it ran (one gap-free stream across the move)."""
        if self._sequence:
            raise ValueError("continue_from must come before the first event")
        self._sequence = last_sequence
        self._session_id = session_id or self._session_id

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
        """The turn results seen, in order (a copy; the most recent ``MAX_RESULTS_KEPT``)."""
        return list(self._results)

    @property
    def result_count(self) -> int:
        """How many turn results were seen in all (``results`` keeps only the most recent ones)."""
        return self._result_count

    @property
    def tools(self) -> ToolTracker:
        """Tool calls, statistics and the current call."""
        return self._tools

    @property
    def cost(self) -> PhaseCostSnapshot:
        """Reported and computed cost now: the phase's, over all its attempts."""
        if not self._prior_costs:
            return self.attempt_cost
        return sum_costs((*self._prior_costs, self.attempt_cost))  # type: ignore[return-value]

    @property
    def parse_error_count(self) -> int:
        """Stdout lines that could not be parsed and were dropped (each produced a ParseError event;
        repaired lines, whose ParseError is only a warning, are not counted)."""
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
        snapshot = self.cost
        self._last_cost = snapshot
        self._last_cost_ns = now
        out.append(self._event(now, self._session_id or "", "", "", CostUpdate(snapshot)))


_TYPED_MISSES = TYPED_MISSES
_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError
# Slot setters of the fields of a ToolCallFinished that only the tracker knows (see feed).
_set_name = ToolCallFinished.name.__set__  # type: ignore[attr-defined]
_set_duration = ToolCallFinished.duration_ns.__set__  # type: ignore[attr-defined]
_set_hook_ms = ToolCallFinished.hook_duration_ms.__set__  # type: ignore[attr-defined]
