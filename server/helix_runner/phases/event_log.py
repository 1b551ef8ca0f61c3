"""The ordered, persisted events of one live phase, fanned out to any number of subscribers.

``publish`` writes a batch to the store (one transaction) and only then offers it to
subscribers, so anything a watcher has seen survives a crash of the server. It never waits for a
subscriber: each has a bounded queue, and one that falls behind is dropped from live delivery
and catches up from the store by cursor, then rejoins. History then live has no gap and no
duplicate at the seam because a subscriber registers before it reads history up to the
sequence published at registration time.

Encode once: the bytes written to the store (encoded by the record encoder) are the bytes every
subscriber receives; with a ``frame`` function (the encoder's ``frame_events``) each published batch
is also framed once as one stream message, shared by every subscriber. A subscriber that is behind
gets everything queued for it, up to ``BATCH_BYTES``, as one delivery: the framed batches joined
(framing is concatenable), so catching up costs one message, not one per batch.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

from helix_runner.store.protocol import EventRow, FencedError, OutboxRow, Store

HISTORY_PAGE = 500
DEFAULT_QUEUE_EVENTS = 8192
# At most this many bytes of queued batches are joined into one delivery for a watcher behind (a
# single batch above it goes alone, as it came). Below the API's response limit (api.wire).
BATCH_BYTES = 256 * 1024

# Frames encoded events as one stream message; must be concatenable (``RecordEncoder.frame_events``).
Framer = Callable[[Sequence[bytes]], bytes]


class EventWriter:
    """Group commit: event appends of every phase in one loop turn go into one transaction.

    A transaction per stdout chunk cost each event far more than parsing it under load; batching
    per event-loop turn keeps persist-before-publish while paying one commit for all phases.
    Callbacks run in submission order once their rows are committed.
    """

    def __init__(self, store: Store):
        self.store = store
        self._pending: list[tuple[str, str, Sequence[EventRow], Callable[[], None]]] = []
        # Webhook deliveries the pending events cause: committed in the same transaction.
        self._outbox: list[OutboxRow] = []
        self.on_outbox: Callable[[], None] = lambda: None  # rows were committed: the dispatcher's wake-up
        self._scheduled = False
        self.commit_timer: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext  # telemetry hook
        # A shared database refused some phases' appends (another replica took them over): told
        # once per refused phase per flush, so their runs can be stopped (PhaseService.on_fenced).
        self.on_fenced: Callable[[str, str], None] = lambda job_id, phase_id: None

    def submit(self, job_id: str, phase_id: str, rows: Sequence[EventRow], on_durable: Callable[[], None],
               outbox: Sequence[OutboxRow] = ()) -> None:
        self._pending.append((job_id, phase_id, rows, on_durable))
        if outbox:
            self._outbox.extend(outbox)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Commits everything pending, then runs its callbacks (also called at shutdown)."""
        self._scheduled = False
        pending, self._pending = self._pending, []
        outbox, self._outbox = self._outbox, []
        if not pending:
            return
        refused: set[tuple[str, str]] = set()
        try:
            with self.commit_timer():
                batches = [(job, phase, rows) for job, phase, rows, _ in pending if rows]
                if outbox:
                    self.store.append_events(batches, outbox=outbox)
                else:  # the call as it was before webhooks (a store without them needs nothing new)
                    self.store.append_events(batches)
        except FencedError as exc:  # the other phases' rows are committed (store/protocol.py)
            refused = set(exc.refused)
        if outbox:
            self.on_outbox()
        for job, phase, _, on_durable in pending:
            if (job, phase) not in refused:
                on_durable()  # a refused phase's rows are not in the store: never offered to watchers
        for job, phase in sorted(refused):
            self.on_fenced(job, phase)


@dataclass(frozen=True, slots=True)
class Delivery:
    """What a subscriber receives: encoded events in order, or (last) the encoded result.

    ``message`` is the events framed as one stream message when the log has a framer (built once
    per published batch and shared by every subscriber); None: the transport frames ``events``.
    """

    events: tuple[bytes, ...] = ()
    first_sequence: int = 0
    last_sequence: int = 0
    result: bytes | None = None
    message: bytes | None = None


def _framed(frame: Framer | None, bodies: tuple[bytes, ...]) -> bytes | None:
    """The events as one message, or None: no framer, or above BATCH_BYTES (the transport splits it)."""
    if frame is None:
        return None
    message = frame(bodies)
    return message if len(message) <= BATCH_BYTES else None


class _Batch:
    """One published batch as queued for every subscriber (shared, never copied per subscriber)."""

    __slots__ = ("first", "bodies", "message", "nbytes")

    def __init__(self, first: int, bodies: tuple[bytes, ...], message: bytes | None) -> None:
        self.first = first
        self.bodies = bodies
        self.message = message
        self.nbytes = len(message) if message is not None else sum(map(len, bodies))


class _Subscriber:
    __slots__ = ("queue", "size", "limit", "wakeup", "lagged")

    def __init__(self, limit: int) -> None:
        self.queue: deque[_Batch] = deque()
        self.size = 0
        self.limit = limit
        self.wakeup = asyncio.Event()
        self.lagged = False

    def offer(self, batch: _Batch) -> bool:
        if self.size + len(batch.bodies) > self.limit:
            self.lagged = True
            self.queue.clear()
            self.size = 0
            self.wakeup.set()
            return False
        self.queue.append(batch)
        self.size += len(batch.bodies)
        self.wakeup.set()
        return True

    def take(self, cursor: int, frame: Framer | None) -> Delivery | None:
        """Everything queued after ``cursor`` as one delivery (up to ``BATCH_BYTES``); None if nothing is."""
        queue = self.queue
        while queue:
            batch = queue.popleft()
            self.size -= len(batch.bodies)
            skip = cursor - batch.first + 1
            if skip < len(batch.bodies):
                break
        else:
            return None
        if skip > 0:  # overlaps what history gave (not expected: queued batches follow the registration)
            batch = _Batch(batch.first + skip, batch.bodies[skip:], _framed(frame, batch.bodies[skip:]))
        first, bodies, message, nbytes = batch.first, batch.bodies, batch.message, batch.nbytes
        if queue:
            # Behind: join the batches queued meanwhile (they continue the sequence) into one message.
            messages, joined = [message], list(bodies)
            while queue and nbytes + queue[0].nbytes <= BATCH_BYTES and (queue[0].message is None) is (message is None):
                nxt = queue.popleft()
                self.size -= len(nxt.bodies)
                nbytes += nxt.nbytes
                messages.append(nxt.message)
                joined.extend(nxt.bodies)
            if len(messages) > 1:
                bodies = tuple(joined)
                message = b"".join(messages) if message is not None else None
        return Delivery(bodies, first, first + len(bodies) - 1, message=message)


class PhaseEventLog:
    """Persist-then-publish hub for one phase's encoded events."""

    # Watchers of any phase ever dropped from live delivery for lagging (read by telemetry).
    lagged_total = 0

    def __init__(self, store: Store, job_id: str, phase_id: str, *, last_sequence: int = 0,
                 queue_events: int = DEFAULT_QUEUE_EVENTS, writer: EventWriter | None = None,
                 frame: Framer | None = None):
        self.store = store
        self.writer = writer
        self.frame = frame
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

    def publish(self, rows: Sequence[EventRow], outbox: Sequence[OutboxRow] = ()) -> None:
        """Persists the rows (sequences must continue the log), then offers them to subscribers.

        ``outbox``: the webhook deliveries these events cause, written in the same transaction.
        """
        if not rows or self.fenced:
            return
        if rows[0].sequence != self.submitted_sequence + 1:
            raise ValueError(f"sequence gap: expected {self.submitted_sequence + 1}, got {rows[0].sequence}")
        self.submitted_sequence = rows[-1].sequence
        if self.writer is None:
            if outbox:
                self.store.append_events([(self.job_id, self.phase_id, rows)], outbox=outbox)
            else:
                self.store.append_events([(self.job_id, self.phase_id, rows)])
            self._offer(rows)
        else:
            self.writer.submit(self.job_id, self.phase_id, rows, lambda: self._offer(rows), outbox)

    def _offer(self, rows: Sequence[EventRow]) -> None:
        if self.fenced:
            return
        self.last_sequence = rows[-1].sequence
        if not self._subscribers:
            return
        bodies = tuple(r.body for r in rows)
        # Framed once for all subscribers; a batch above BATCH_BYTES is left to the transport to split.
        batch = _Batch(rows[0].sequence, bodies, _framed(self.frame, bodies))
        for sub in list(self._subscribers):
            if not sub.offer(batch):
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
                    while (delivery := sub.take(cursor, self.frame)) is not None:
                        cursor = delivery.last_sequence
                        yield delivery
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
