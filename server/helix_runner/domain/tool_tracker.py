"""Tool calls of a phase: pairing ``tool_use`` with ``tool_result``, durations, per-tool statistics.

A call opens on a ``tool_use`` block (key: its id) and closes on the ``tool_result`` with that
``tool_use_id``, which may come many lines later, after other calls' results (parallel calls,
corpus localcli-03 and -24) or from a subagent (``parent_tool_use_id`` set, localcli-09).
Durations are the difference of the two lines' receive times. A call still open when the phase
ends is UNFINISHED — never a success.

Memory is bounded whatever the stream length (a phase can write gigabytes):

* ``calls`` keeps the most recent ``max_calls`` records (default 2,048; open or finished). Older
  records are dropped; statistics still count them. An open call pushed out this way counts as
  unfinished in the statistics (its result, if it ever comes, is then an orphan). A record holds
  at most 64 KiB of input, a 4 KiB preview and 16 KiB of structured result, so the records take
  at most ~170 MiB, and typically ~1 KiB per call (about 2 MiB).
* per tool, durations are kept exactly for the first ``exact_durations`` finished calls (default
  4,096), so mean and p95 are exact for them; beyond that they go into a log-scale histogram with
  buckets 2 % wide (about 1,300 buckets per tool cover 1 µs to a day), so p95 is then accurate to
  2 %. Total and mean stay exact.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from collections.abc import Iterable
from typing import Any

import msgspec

from helix_runner.domain.events import ToolCallFinished, ToolCallStarted

# Bucket width of the duration histogram used past the exact limit.
_LOG_BASE = math.log(1.02)


class ToolCallStatus(enum.IntEnum):
    """State of one tool call (``resources.proto`` ToolCallStatus)."""

    UNSPECIFIED = 0
    RUNNING = 1
    HELD = 2
    SUCCEEDED = 3
    FAILED = 4
    UNFINISHED = 5


RUNNING, SUCCEEDED, FAILED = ToolCallStatus.RUNNING, ToolCallStatus.SUCCEEDED, ToolCallStatus.FAILED


class ToolCall(msgspec.Struct, frozen=True, gc=False):
    """One tool invocation (mirrors ``resources.proto`` ToolCall, minus job/phase ids)."""

    tool_use_id: str
    name: str
    input_json: str
    input_bytes: int
    input_truncated: bool
    parent_tool_use_id: str
    status: ToolCallStatus
    start_time_ns: int
    start_sequence: int
    agent_id: str = ""
    server_tool: bool = False
    end_time_ns: int | None = None
    end_sequence: int = 0
    result_preview: str = ""
    result_bytes: int = 0
    result_truncated: bool = False
    structured_result_json: str = ""
    structured_result_truncated: bool = False
    hook_duration_ms: int | None = None
    held_by_breakpoint_id: str = ""

    @property
    def duration_ns(self) -> int | None:
        """end - start receive time; None while the call runs."""
        return None if self.end_time_ns is None else self.end_time_ns - self.start_time_ns


class ToolStats(msgspec.Struct, frozen=True, gc=False):
    """Summary of one tool's calls (mirrors ``resources.proto`` ToolStats); durations in ns."""

    name: str
    count: int
    failures: int
    unfinished: int
    total_duration_ns: int
    mean_duration_ns: int
    p95_duration_ns: int


class _Durations:
    """Finished-call durations of one tool: exact up to a limit, then a 2 % log histogram."""

    __slots__ = ("exact", "limit", "histogram", "total", "count")

    def __init__(self, limit: int) -> None:
        self.exact: list[int] = []
        self.limit = limit
        self.histogram: dict[int, int] | None = None
        self.total = 0
        self.count = 0

    def add(self, duration_ns: int) -> None:
        self.total += duration_ns
        self.count += 1
        if self.histogram is None:
            self.exact.append(duration_ns)
            if len(self.exact) > self.limit:
                self.histogram = {}
                for value in self.exact:
                    self._bucket(value)
                self.exact = []
        else:
            self._bucket(duration_ns)

    def _bucket(self, value: int) -> None:
        assert self.histogram is not None
        key = -1 if value <= 0 else int(math.log(value) / _LOG_BASE)
        self.histogram[key] = self.histogram.get(key, 0) + 1

    def p95(self) -> int:
        """Nearest-rank 95th percentile (ceil(0.95 n)-th smallest)."""
        if self.count == 0:
            return 0
        rank = math.ceil(0.95 * self.count)
        if self.histogram is None:
            return sorted(self.exact)[rank - 1]
        seen = 0
        for key in sorted(self.histogram):
            seen += self.histogram[key]
            if seen >= rank:
                return 0 if key < 0 else int(math.exp((key + 1) * _LOG_BASE))  # bucket's upper edge
        return 0  # pragma: no cover - counts always reach the rank


class _ToolTally:
    __slots__ = ("started", "finished", "failures", "durations")

    def __init__(self, exact_limit: int) -> None:
        self.started = 0
        self.finished = 0
        self.failures = 0
        self.durations = _Durations(exact_limit)


# One call's mutable record is a list (the cheapest object to create on the hot path); the public
# ToolCall is built from it only when asked for. Indices:
(
    _STARTED,
    _PARENT,
    _AGENT,
    _START_NS,
    _START_SEQ,
    _STATUS,
    _FINISHED,
    _END_NS,
    _END_SEQ,
    _HOOK_MS,
    _HELD_BY,
) = range(11)


def _freeze(call: list[Any]) -> ToolCall:
    started: ToolCallStarted = call[_STARTED]
    finished: ToolCallFinished | None = call[_FINISHED]
    if finished is None:
        result: tuple[str, int, bool, str, bool] = ("", 0, False, "", False)
    else:
        result = (
            finished.content_preview,
            finished.content_bytes,
            finished.content_truncated,
            finished.structured_result_json,
            finished.structured_result_truncated,
        )
    return ToolCall(
        started.tool_use_id,
        started.name,
        started.input_json,
        started.input_bytes,
        started.input_truncated,
        call[_PARENT],
        call[_STATUS],
        call[_START_NS],
        call[_START_SEQ],
        call[_AGENT],
        started.server_tool,
        call[_END_NS],
        call[_END_SEQ],
        *result,
        call[_HOOK_MS],
        call[_HELD_BY],
    )


class ToolTracker:
    """Pairs tool calls with their results and keeps bounded records and per-tool statistics."""

    def __init__(self, *, max_calls: int = 2048, exact_durations: int = 4096) -> None:
        self._max_calls = max_calls
        self._exact_limit = exact_durations
        self._calls: dict[str, list[Any]] = {}  # the most recent records, in start order
        self._order: deque[str] = deque()  # ids of _calls, oldest first (O(1) eviction)
        self._open: dict[str, list[Any]] = {}  # running or held calls, in start order
        self._tallies: dict[str, _ToolTally] = {}
        self._orphans = 0

    # ----------------------------------------------------------------------------------------------
    # Updates.

    def start(
        self,
        started: ToolCallStarted,
        time_ns: int,
        sequence: int,
        parent_tool_use_id: str = "",
        agent_id: str = "",
    ) -> None:
        """Open a call from its ``tool_use`` (a repeated id replaces the open record, counted once)."""
        tool_use_id = started.tool_use_id
        call = [started, parent_tool_use_id, agent_id, time_ns, sequence, RUNNING, None, None, 0, None, ""]
        open_calls = self._open
        known = open_calls.get(tool_use_id)
        if known is None:
            tally = self._tallies.get(started.name)
            if tally is None:
                tally = self._tallies[started.name] = _ToolTally(self._exact_limit)
            tally.started += 1
        else:  # keep the first start's time, sequence and name (its statistics)
            call[_START_NS] = known[_START_NS]
            call[_START_SEQ] = known[_START_SEQ]
            call[_STARTED] = known[_STARTED] if known[_STARTED].name != started.name else started
        open_calls[tool_use_id] = call
        calls = self._calls
        retained = len(calls)
        calls[tool_use_id] = call
        if len(calls) > retained:  # a new id (a repeated one keeps its place in the order)
            self._order.append(tool_use_id)
            if retained >= self._max_calls:
                oldest = self._order.popleft()
                del calls[oldest]
                # Still open and pushed out: forget it; it stays counted as unfinished (see module doc).
                open_calls.pop(oldest, None)

    def finish(
        self, finished: ToolCallFinished, time_ns: int, sequence: int
    ) -> tuple[str, int, int | None] | None:
        """Close a call with its ``tool_result``: returns (name, duration ns, hook ms), None for an orphan.

        An orphan is a result whose start was never seen (or was pushed out): it is counted in
        ``orphan_results`` but not in any tool's statistics, since its tool name is unknown.
        """
        call = self._open.pop(finished.tool_use_id, None)
        if call is None:
            self._orphans += 1
            return None
        is_error = finished.is_error
        call[_STATUS] = FAILED if is_error else SUCCEEDED
        call[_FINISHED] = finished
        call[_END_NS] = time_ns
        call[_END_SEQ] = sequence
        duration = time_ns - call[_START_NS]
        if duration < 0:
            duration = 0
        name = call[_STARTED].name
        tally = self._tallies[name]
        tally.finished += 1
        if is_error:
            tally.failures += 1
        durations = tally.durations
        exact = durations.exact
        if durations.histogram is None and len(exact) < durations.limit:  # _Durations.add, inlined
            exact.append(duration)
            durations.total += duration
            durations.count += 1
        else:
            durations.add(duration)
        return name, duration, call[_HOOK_MS]

    def add_hook_duration(self, duration_ms: int, *, tool_use_id: str = "", hook_name: str = "") -> None:
        """Attach a hook's reported ``duration_ms`` to the open call it ran for.

        The call is found by ``tool_use_id`` when the hook line has one; otherwise by tool name
        from ``hook_name`` (``PreToolUse:Bash`` → the most recent open ``Bash`` call; localcli-14).
        Several hooks of one call add up.
        """
        call = self._open.get(tool_use_id) if tool_use_id else None
        if call is None and ":" in hook_name:
            tool = hook_name.split(":", 1)[1]
            for candidate in reversed(self._open.values()):
                if candidate[_STARTED].name == tool:
                    call = candidate
                    break
        if call is not None:
            call[_HOOK_MS] = (call[_HOOK_MS] or 0) + duration_ms

    def mark_held(self, tool_use_id: str, breakpoint_id: str = "") -> ToolCall | None:
        """Mark an open call HELD (by a pause or a breakpoint); for the supervisor."""
        return self._set_open_status(tool_use_id, ToolCallStatus.HELD, breakpoint_id)

    def mark_running(self, tool_use_id: str) -> ToolCall | None:
        """Release a HELD call back to RUNNING; for the supervisor."""
        return self._set_open_status(tool_use_id, ToolCallStatus.RUNNING, "")

    def _set_open_status(
        self, tool_use_id: str, status: ToolCallStatus, breakpoint_id: str
    ) -> ToolCall | None:
        call = self._open.get(tool_use_id)
        if call is None:
            return None
        call[_STATUS] = status
        call[_HELD_BY] = breakpoint_id
        return _freeze(call)

    def finish_phase(self) -> list[ToolCall]:
        """The phase ended: every open call becomes UNFINISHED (never a success). Returns them."""
        for call in self._open.values():
            call[_STATUS] = ToolCallStatus.UNFINISHED
        unfinished = [_freeze(call) for call in self._open.values()]
        self._open.clear()
        return unfinished

    # ----------------------------------------------------------------------------------------------
    # Queries.

    @property
    def calls(self) -> list[ToolCall]:
        """The retained call records (most recent ``max_calls``), in start order."""
        return [_freeze(call) for call in self._calls.values()]

    def get(self, tool_use_id: str) -> ToolCall | None:
        """A retained record by id."""
        call = self._calls.get(tool_use_id)
        return None if call is None else _freeze(call)

    @property
    def current(self) -> ToolCall | None:
        """The most recently started call that is still running or held, if any."""
        if not self._open:
            return None
        return _freeze(next(reversed(self._open.values())))

    @property
    def open_calls(self) -> list[ToolCall]:
        """Calls still running or held, in start order."""
        return [_freeze(call) for call in self._open.values()]

    @property
    def orphan_results(self) -> int:
        """Results whose call was never seen (e.g. a log that lost lines, corpus hivemind-8)."""
        return self._orphans

    @property
    def unfinished_count(self) -> int:
        """Calls without a result (still running, or unfinished once the phase ended)."""
        return sum(t.started - t.finished for t in self._tallies.values())

    def stats(self) -> list[ToolStats]:
        """Per-tool statistics, by tool name."""
        return [_stats_of(name, tally) for name, tally in sorted(self._tallies.items())]


def summarize_calls(
    calls: Iterable[tuple[str, ToolCallStatus, int | None]], *, exact_durations: int = 4096
) -> list[ToolStats]:
    """Per-tool statistics of recorded calls (name, status, duration in ns if finished), by tool name.

    The same rules as a live ``ToolTracker``: answers for calls read back from the store.
    """
    tallies: dict[str, _ToolTally] = {}
    for name, status, duration_ns in calls:
        tally = tallies.get(name) or tallies.setdefault(name, _ToolTally(exact_durations))
        tally.started += 1
        if status in (ToolCallStatus.SUCCEEDED, ToolCallStatus.FAILED):
            tally.finished += 1
            tally.failures += status is ToolCallStatus.FAILED
            if duration_ns is not None:
                tally.durations.add(duration_ns)
    return [_stats_of(name, tally) for name, tally in sorted(tallies.items())]


def _stats_of(name: str, tally: _ToolTally) -> ToolStats:
    durations = tally.durations
    mean = durations.total // durations.count if durations.count else 0
    return ToolStats(
        name,
        tally.started,
        tally.failures,
        tally.started - tally.finished,
        durations.total,
        mean,
        durations.p95(),
    )
