"""The ordered, persisted events of one live phase, fanned out to any number of subscribers.

``publish`` writes a batch to the store (one transaction) and only then offers it to
subscribers, so anything a watcher has seen survives a crash of the server. It never waits for a
subscriber: each has a bounded queue, and one that falls behind is dropped from live delivery
and catches up from the store by cursor, then rejoins. History then live has no gap and no
duplicate at the seam because a subscriber registers before it reads history up to the
sequence published at registration time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

from helix_runner.store.protocol import EventRow, FencedError, Store

HISTORY_PAGE = 500
DEFAULT_QUEUE_EVENTS = 8192


class EventWriter:
    """Group commit: event appends of every phase in one loop turn go into one transaction.

    A transaction per stdout chunk cost each event far more than parsing it under load; batching
    per event-loop turn keeps persist-before-publish while paying one commit for all phases.
    Callbacks run in submission order once their rows are committed.
    """

    def __init__(self, store: Store):
        self.store = store
        self._pending: list[tuple[str, str, Sequence[EventRow], Callable[[], None]]] = []
        self._scheduled = False
        self.commit_timer: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext  # telemetry hook
        # A shared database refused some phases' appends (another replica took them over): told
        # once per refused phase per flush, so their runs can be stopped (PhaseService.on_fenced).
        self.on_fenced: Callable[[str, str], None] = lambda job_id, phase_id: None

    def submit(self, job_id: str, phase_id: str, rows: Sequence[EventRow], on_durable: Callable[[], None]) -> None:
        self._pending.append((job_id, phase_id, rows, on_durable))
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Commits everything pending, then runs its callbacks (also called at shutdown)."""
        self._scheduled = False
        pending, self._pending = self._pending, []
        if not pending:
            return
        refused: set[tuple[str, str]] = set()
        try:
            with self.commit_timer():
                self.store.append_events([(job, phase, rows) for job, phase, rows, _ in pending if rows])
        except FencedError as exc:  # the other phases' rows are committed (store/protocol.py)
            refused = set(exc.refused)
        for job, phase, _, on_durable in pending:
            if (job, phase) not in refused:
                on_durable()  # a refused phase's rows are not in the store: never offered to watchers
        for job, phase in sorted(refused):
            self.on_fenced(job, phase)


@dataclass(frozen=True)
class Delivery:
    """What a subscriber receives: encoded events in order, or (last) the encoded result."""

    events: tuple[bytes, ...] = ()
    first_sequence: int = 0
    last_sequence: int = 0
    result: bytes | None = None


class _Subscriber:
    __slots__ = ("queue", "size", "limit", "wakeup", "lagged")

    def __init__(self, limit: int) -> None:
        self.queue: deque[tuple[int, tuple[bytes, ...]]] = deque()
        self.size = 0
        self.limit = limit
        self.wakeup = asyncio.Event()
        self.lagged = False

    def offer(self, first_sequence: int, bodies: tuple[bytes, ...]) -> bool:
        if self.size + len(bodies) > self.limit:
            self.lagged = True
            self.queue.clear()
            self.size = 0
            self.wakeup.set()
            return False
        self.queue.append((first_sequence, bodies))
        self.size += len(bodies)
        self.wakeup.set()
        return True


class PhaseEventLog:
    """Persist-then-publish hub for one phase's encoded events."""

    # Watchers of any phase ever dropped from live delivery for lagging (read by telemetry).
    lagged_total = 0

    def __init__(self, store: Store, job_id: str, phase_id: str, *, last_sequence: int = 0,
                 queue_events: int = DEFAULT_QUEUE_EVENTS, writer: EventWriter | None = None):
        self.store = store
        self.writer = writer
        # Highest sequence handed to publish() (gap checks) and highest one committed (what
        # subscribers may read from the store and what they have been offered).
        self.submitted_sequence = last_sequence
        self.job_id = job_id
        self.phase_id = phase_id
        self.last_sequence = last_sequence
        self.queue_events = queue_events
        self._subscribers: set[_Subscriber] = set()
        self._result: bytes | None = None
        self._closed = asyncio.Event()
        self.lag_count = 0
        self.fenced = False  # another replica took the phase over (``fence``)

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def watcher_backlogs(self) -> list[int]:
        """Events queued for each live subscriber, not yet taken by it (telemetry reads this)."""
        return [sub.size for sub in list(self._subscribers)]

    async def wait_closed(self) -> None:
        """Returns once the result is out (every event committed and offered)."""
        await self._closed.wait()

    def fence(self, result: bytes) -> None:
        """Another replica took the phase over: nothing more is written or offered; watchers get ``result``.

        ``result`` is the phase's result as the taker recorded it. Subscribers end after the
        events that were committed while this replica still owned the phase.
        """
        if self.fenced:
            return
        self.fenced = True
        self._close(result)

    def publish(self, rows: Sequence[EventRow]) -> None:
        """Persists the rows (sequences must continue the log), then offers them to subscribers."""
        if not rows or self.fenced:
            return
        if rows[0].sequence != self.submitted_sequence + 1:
            raise ValueError(f"sequence gap: expected {self.submitted_sequence + 1}, got {rows[0].sequence}")
        self.submitted_sequence = rows[-1].sequence
        if self.writer is None:
            self.store.append_events([(self.job_id, self.phase_id, rows)])
            self._offer(rows)
        else:
            self.writer.submit(self.job_id, self.phase_id, rows, lambda: self._offer(rows))

    def _offer(self, rows: Sequence[EventRow]) -> None:
        if self.fenced:
            return
        self.last_sequence = rows[-1].sequence
        bodies = tuple(r.body for r in rows)
        first = rows[0].sequence
        for sub in list(self._subscribers):
            if not sub.offer(first, bodies):
                self._subscribers.discard(sub)
                self.lag_count += 1
                PhaseEventLog.lagged_total += 1

    def close(self, result: bytes) -> None:
        """Marks the log final; subscribers get the result after every event (once they are committed)."""
        if self.fenced:
            return  # watchers had the taker's result already
        if self.writer is not None:
            self.writer.submit(self.job_id, self.phase_id, (), lambda: self._close(result))
        else:
            self._close(result)

    def _close(self, result: bytes) -> None:
        self._result = result
        self._closed.set()
        for sub in self._subscribers:
            sub.wakeup.set()

    async def subscribe(self, after_sequence: int = 0) -> AsyncIterator[Delivery]:
        """Events with a sequence greater than ``after_sequence``, then the result."""
        cursor = after_sequence
        while True:
            sub = _Subscriber(self.queue_events)
            if not self.closed:
                self._subscribers.add(sub)
            live_from = self.last_sequence
            try:
                async for delivery in _history(self.store, self.job_id, self.phase_id, cursor, live_from):
                    cursor = delivery.last_sequence
                    yield delivery
                while True:
                    while sub.queue:
                        first, bodies = sub.queue.popleft()
                        sub.size -= len(bodies)
                        skip = max(0, cursor - first + 1)
                        if skip < len(bodies):
                            kept = bodies[skip:]
                            cursor = first + len(bodies) - 1
                            yield Delivery(kept, first + skip, cursor)
                    if sub.lagged:
                        break  # re-read from the store from our cursor, then rejoin live delivery
                    if self.closed:
                        # Everything published before close reached us or is in the store.
                        async for delivery in _history(self.store, self.job_id, self.phase_id, cursor,
                                                       self.last_sequence):
                            cursor = delivery.last_sequence
                            yield delivery
                        yield Delivery(result=self._result)
                        return
                    sub.wakeup.clear()
                    if not sub.queue and not sub.lagged and not self.closed:
                        await sub.wakeup.wait()
            finally:
                self._subscribers.discard(sub)


async def _history(store: Store, job_id: str, phase_id: str, after: int, upto: int) -> AsyncIterator[Delivery]:
    cursor = after
    while cursor < upto:
        rows = store.read_events(job_id, phase_id, cursor, min(HISTORY_PAGE, upto - cursor))
        if not rows:
            return
        yield Delivery(tuple(r.body for r in rows), rows[0].sequence, rows[-1].sequence)
        cursor = rows[-1].sequence
        await asyncio.sleep(0)  # let the phase and other watchers run between pages


async def replay(store: Store, job_id: str, phase_id: str, after: int, upto: int,
                 result: bytes | None) -> AsyncIterator[Delivery]:
    """A finished phase from the store: its events after the cursor, then its result."""
    async for delivery in _history(store, job_id, phase_id, after, upto):
        yield delivery
    yield Delivery(result=result)
