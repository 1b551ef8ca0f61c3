"""The ordered, persisted events of one live phase, fanned out to any number of subscribers.

``publish`` hands a batch to the event writer and offers it to subscribers only once it is
committed, so anything a watcher has seen survives a crash of the server. It never waits for a
subscriber: each has a bounded queue, and one that falls behind is dropped from live delivery
and catches up from the store by cursor, then rejoins. History then live has no gap and no
duplicate at the seam because a subscriber registers before it reads history up to the
sequence published at registration time.

Encode once: the bytes written to the store (encoded by the record encoder) are the bytes every
subscriber receives; with a ``frame`` function (the encoder's ``frame_events``) each published batch
is also framed once as one stream message, shared by every subscriber. A subscriber that is behind
gets everything queued for it, up to ``BATCH_BYTES``, as one delivery: the framed batches joined
(framing is concatenable), so catching up costs one message, not one per batch.

Durability (``EventWriter``): a watcher only ever sees committed events. What a crash of the server
can lose is what the writer holds and has not committed: at most its backlog (``BACKLOG_BYTES``,
plus one stdout chunk per phase), usually one batch. A run's writes (its events, status, tool
calls, costs, result) are committed in the order it made them, each batch in one transaction, so
what survives a crash is a prefix of each phase's writes: never a status or a result without the
events before it. The webhook deliveries a batch of events causes (issue 26) are handed over with
it and commit in its transaction: a delivery is never queued for an event that is not stored, nor
lost for one that is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from helix_runner.store.protocol import (
    AppendEvents,
    EventRow,
    InsertOutbox,
    ModelCostRow,
    OutboxRow,
    PhaseWrite,
    ReplaceModelCosts,
    Store,
    StoreError,
    StoreUnavailable,
    ToolCallRow,
    UpdatePhase,
    UpsertToolCalls,
)

log = logging.getLogger(__name__)

HISTORY_PAGE = 500
DEFAULT_QUEUE_EVENTS = 8192
# At most this many bytes of queued batches are joined into one delivery for a watcher behind (a
# single batch above it goes alone, as it came). Below the API's response limit (api.wire).
BATCH_BYTES = 256 * 1024

# Frames encoded events as one stream message; must be concatenable (``RecordEncoder.frame_events``).
Framer = Callable[[Sequence[bytes]], bytes]

# The writer's backlog: bytes of writes handed to it and not yet committed. Past it the phases'
# output readers wait (``EventWriter.room``): a database slower than the phases slows the phases
# instead of piling their events up in memory (the reverted async store queued them for seconds).
BACKLOG_BYTES = 4 * 1024 * 1024
# What an event costs besides its encoded body (its row, the callback that offers it), and a row
# write (a status, tool calls, costs), roughly: the backlog counts memory, not items.
_EVENT_OVERHEAD = 200
_ROW_WRITE_SIZE = 512
# A database that cannot be reached is retried (the same batch, ``retry=True``) after these waits.
RETRY_DELAYS_S = (0.05, 0.2, 0.5, 1.0, 2.0)
# How long closing the writer waits for an unreachable database before it drops what it holds.
CLOSE_TIMEOUT_S = 10.0

# One write handed to the writer: the write (None: a marker, ``committed``), what to run once it
# is committed, its backlog size.
_Entry = tuple[PhaseWrite | None, Callable[[], None] | None, int]


@dataclass(slots=True)
class _Outcome:
    """How a batch ended: the phases the store refused (fenced), those whose writes it would not
    take at all (lost), and those whose row writes it would not take (their events are committed,
    with the webhook deliveries they cause)."""

    refused: set[tuple[str, str]] = field(default_factory=set)
    lost: set[tuple[str, str]] = field(default_factory=set)
    rows_dropped: set[tuple[str, str]] = field(default_factory=set)


class EventWriter:
    """Every running phase's writes, committed in batches: one transaction per batch, in order.

    A run hands over its events (``submit``) and its row writes (``write``: status, tool calls,
    costs, result) without waiting; everything handed over in one loop turn forms a batch, and
    every write of a phase is committed in the order it was made. Callbacks (offering events to
    watchers, closing a log) run on the loop, in order, once their batch is committed.

    Where a commit runs is the store's call (``Committer.off_loop``): on the loop at the end of the
    turn (SQLite: a commit is microseconds of CPU), or on a thread of its own (PostgreSQL: a commit
    is mostly waiting for the database, which the loop must not do). That thread takes every batch
    handed over while it was committing the previous one as one transaction, so batches grow with
    the load and a commit's round trips are paid per batch, not per phase or event.

    The backlog (written, not committed) is bounded: ``room()`` makes the phases' output readers
    wait past ``backlog_bytes``, and lets them go in turn as it drains.
    """

    def __init__(self, store: Store, *, backlog_bytes: int = BACKLOG_BYTES):
        self.store = store
        self.backlog_bytes = backlog_bytes
        self._committer = store.committer()
        self._pending: list[_Entry] = []
        self._scheduled = False
        self._backlog = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._granted = False  # a waiting reader was let go and has not run yet
        self._worker: _CommitThread | None = None
        self._closed = False
        self.commit_timer: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext  # telemetry hook
        # A shared database refused some phases' writes (another replica took them over): told
        # once per refused phase per batch, so their runs can be stopped (PhaseService.on_fenced).
        self.on_fenced: Callable[[str, str], None] = lambda job_id, phase_id: None
        # A batch that carried webhook deliveries was committed: the dispatcher's wake-up.
        self.on_outbox: Callable[[], None] = lambda: None
        # The last status of each phase handed over and not committed yet (``pending_statuses``).
        self._statuses: dict[tuple[str, str], UpdatePhase] = {}

    @property
    def off_loop(self) -> bool:
        """The store's writes (and calls) wait on a database server: they run off the event loop."""
        return self._committer.off_loop

    @property
    def backlog(self) -> int:
        """Bytes handed over and not yet committed (and their callbacks not yet run)."""
        return self._backlog

    # -- what a run hands over -----------------------------------------------------------------

    def submit(self, job_id: str, phase_id: str, rows: Sequence[EventRow], on_durable: Callable[[], None],
               outbox: Sequence[OutboxRow] = ()) -> None:
        """Events of a phase (none: a marker), and what to run once they are committed.

        ``outbox``: the webhook deliveries these events cause, handed over with them: the same
        batch, so the same transaction (a batch is never split), and refused with them.
        """
        size = _EVENT_OVERHEAD * len(rows)
        for row in rows:
            size += len(row.body)
        self._add((AppendEvents(job_id, phase_id, rows), on_durable, size))
        if outbox:
            self._add((InsertOutbox(job_id, phase_id, outbox), None,
                       sum(_EVENT_OVERHEAD + len(row.body) for row in outbox)))

    def write(self, write: PhaseWrite) -> None:
        """A row write of a running phase, committed after everything it handed over before."""
        if type(write) is UpdatePhase and "status" in write.values:
            self._statuses[(write.job_id, write.phase_id)] = write
        self._add((write, None, _ROW_WRITE_SIZE))

    def pending_statuses(self, job_id: str) -> dict[str, object]:
        """The statuses of the job's phases handed over and not committed yet (phase id -> the last
        one): newer than what the store has. A webhook's ``job.finished`` asks whether every other
        phase of the job is final, before the status of one that just ended may be committed."""
        return {phase: w.values["status"] for (job, phase), w in self._statuses.items() if job == job_id}

    # The store calls a ``PhaseRun`` makes (``RunStore``), queued behind its events. A write the
    # database refuses because another replica took the phase over reaches ``on_fenced``.

    def update_phase(self, job_id: str, phase_id: str, now_ns: int, **values: object) -> None:
        if values:
            self.write(UpdatePhase(job_id, phase_id, now_ns, values))

    def upsert_tool_calls(self, job_id: str, phase_id: str, calls: Iterable[ToolCallRow]) -> None:
        calls = list(calls)
        if calls:
            self.write(UpsertToolCalls(job_id, phase_id, calls))

    def replace_model_costs(self, job_id: str, phase_id: str, project_id: str, rows: Sequence[ModelCostRow]) -> None:
        self.write(ReplaceModelCosts(job_id, phase_id, project_id, list(rows)))

    async def committed(self) -> None:
        """Returns once everything handed over before the call is committed and its callbacks ran.

        For read-your-writes: a control RPC that changed a phase answers with the phase as the
        store has it after the change (on this replica and any other).
        """
        if not self._pending and not self._backlog and (self._worker is None or self._worker.idle):
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._add((None, lambda: done.done() or done.set_result(None), 0))
        await done

    def _add(self, entry: _Entry) -> None:
        self._pending.append(entry)
        self._backlog += entry[2]
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._hand_off)

    async def room(self) -> None:
        """Returns once the backlog has room: at once below the bound, else in turn (FIFO).

        A released reader lets the next one go only after it has run (a loop turn later), so
        while the backlog is full readers are let through one chunk at a time as it drains,
        never all at once: the bound is overshot by one chunk at most.
        """
        if self._backlog < self.backlog_bytes and not self._waiters and not self._granted:
            return
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)
            if waiter.done() and not waiter.cancelled():
                self._granted = False
                self._release()  # it was our turn: pass it on
            raise
        self._granted = False
        loop.call_soon(self._release)  # the next reader goes once this one has handed its chunk over

    def _release(self) -> None:
        """Lets the first waiting reader go if there is room and no reader let go has run yet."""
        while not self._granted and self._waiters and self._backlog < self.backlog_bytes:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                self._granted = True

    # -- committing ----------------------------------------------------------------------------

    def _hand_off(self) -> None:
        """End of a loop turn: the turn's writes become a batch, committed here or by the thread."""
        self._scheduled = False
        batch, self._pending = self._pending, []
        if not batch:
            return
        if self._closed:  # after the server's last commit: nothing may be written any more
            log.error("phase writes after the writer was closed were dropped", extra={"fields": {"writes": len(batch)}})
            self._finish(batch, _Outcome(lost={(w.job_id, w.phase_id) for w, _, _ in batch if w is not None}))
        elif self._committer.off_loop:
            if self._worker is None:
                self._worker = _CommitThread(self, asyncio.get_running_loop())
            self._worker.put(batch)
        else:
            self._finish(batch, self._commit(batch))

    def _commit(self, batch: list[_Entry], *, retry: bool = False) -> _Outcome:
        """Commits a batch (raises ``StoreUnavailable``); a batch the database will not take is
        committed phase by phase, so one phase's bad write costs no other phase its writes."""
        writes = [entry[0] for entry in batch if entry[0] is not None]
        if not writes:  # markers only (``committed``)
            return _Outcome()
        try:
            with self.commit_timer():
                return _Outcome(refused=self._committer.commit(writes, retry=retry))
        except StoreUnavailable:
            raise
        except StoreError:
            log.exception("the database refused a batch of phase writes; committing it phase by phase")
        outcome = _Outcome()
        by_phase: dict[tuple[str, str], list[PhaseWrite]] = {}
        for write in writes:
            by_phase.setdefault((write.job_id, write.phase_id), []).append(write)
        for key, phase_writes in by_phase.items():
            try:
                outcome.refused |= self._committer.commit(phase_writes, retry=retry)
                continue
            except StoreUnavailable:
                raise
            except StoreError:
                pass
            # Its events at least (they are its history; a row write is what the database refused),
            # with the webhook deliveries they cause (never committed apart from them).
            events = [w for w in phase_writes if type(w) is AppendEvents or type(w) is InsertOutbox]
            try:
                outcome.refused |= self._committer.commit(events, retry=retry)
                outcome.rows_dropped.add(key)
            except StoreUnavailable:
                raise
            except StoreError:
                outcome.lost.add(key)
        for key in sorted(outcome.rows_dropped):
            log.error("the database refused a phase's row writes (status, tool calls or costs); its events are "
                      "kept", extra={"fields": {"job_id": key[0], "phase_id": key[1]}})
        for key in sorted(outcome.lost):
            log.error("the database refused a phase's events; the phase is stopped",
                      extra={"fields": {"job_id": key[0], "phase_id": key[1]}})
        return outcome

    def _finish(self, batch: list[_Entry], outcome: _Outcome) -> None:
        """On the loop, once a batch is committed: its callbacks in order, then the refused phases."""
        stopped = outcome.refused | outcome.lost
        deliveries = False
        for write, on_durable, size in batch:
            self._backlog -= size
            kind = type(write)
            if kind is UpdatePhase and self._statuses.get((write.job_id, write.phase_id)) is write:
                del self._statuses[(write.job_id, write.phase_id)]  # committed, or never will be
            elif kind is InsertOutbox and (write.job_id, write.phase_id) not in stopped:
                deliveries = True
            if on_durable is not None and (write is None or (write.job_id, write.phase_id) not in stopped):
                try:
                    on_durable()  # a refused phase's rows are not in the store: never offered to watchers
                except Exception:
                    log.exception("a callback of committed phase writes failed")
        if deliveries:  # after their commit: the dispatcher finds them
            self.on_outbox()
        # A phase whose writes the database will not take is stopped as a fenced one is: nothing
        # more of it is written or offered, its watchers end, its process is stopped.
        for job, phase in sorted(stopped):
            self.on_fenced(job, phase)
        self._release()

    def _collect(self) -> None:
        """On the loop: the batches the thread has committed since, in order."""
        if self._worker is not None:
            for batch, outcome in self._worker.take_done():
                self._finish(batch, outcome)

    def flush(self, timeout: float | None = None) -> None:
        """Commits everything handed over and runs its callbacks before returning (blocking; for
        shutdown and tests). With the thread: waits for it, at most ``timeout`` seconds."""
        self._hand_off()
        if self._worker is not None:
            self._worker.wait_idle(timeout)
            self._collect()

    def close(self) -> None:
        """Commits what is left (giving an unreachable database ``CLOSE_TIMEOUT_S``) and stops the thread."""
        self._hand_off()
        self._closed = True
        if self._worker is not None:
            self._worker.close(CLOSE_TIMEOUT_S)
            self._collect()
            self._worker = None


class _CommitThread:
    """The writer's thread: commits what the loop hands over, one transaction per drain."""

    def __init__(self, writer: EventWriter, loop: asyncio.AbstractEventLoop):
        self._writer = writer
        self._loop = loop
        self._cond = threading.Condition()
        self._queue: list[list[_Entry]] = []
        self._done: deque[tuple[list[_Entry], _Outcome]] = deque()
        self._busy = False
        self._give_up_at: float | None = None  # closing: when to stop retrying an unreachable database
        self._thread = threading.Thread(target=self._run, name="helix-store-writer", daemon=True)
        self._thread.start()

    def put(self, batch: list[_Entry]) -> None:
        with self._cond:
            self._queue.append(batch)
            self._cond.notify_all()

    @property
    def idle(self) -> bool:
        """Nothing queued, nothing being committed."""
        with self._cond:
            return not self._queue and not self._busy

    def take_done(self) -> list[tuple[list[_Entry], _Outcome]]:
        with self._cond:
            done = list(self._done)
            self._done.clear()
        return done

    def wait_idle(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._queue or self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self, timeout: float) -> None:
        with self._cond:
            self._give_up_at = time.monotonic() + timeout
            self._cond.notify_all()
        self._thread.join(timeout + 5)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and self._give_up_at is None:
                    self._cond.wait()
                if not self._queue:
                    return  # closing, nothing left
                batches, self._queue = self._queue, []
                self._busy = True
            # Everything handed over while the last drain was committed: one transaction.
            batch = [entry for handed in batches for entry in handed]
            outcome = self._commit(batch)
            with self._cond:
                self._done.append((batch, outcome))
                self._busy = False
                self._cond.notify_all()
            try:
                self._loop.call_soon_threadsafe(self._writer._collect)
            except RuntimeError:
                pass  # the loop is closed: flush() or close() collects

    def _commit(self, batch: list[_Entry]) -> _Outcome:
        """Commits a drain, retrying while the database cannot be reached (until closing gives up)."""
        retry = False
        for attempt in range(1_000_000_000):
            try:
                return self._writer._commit(batch, retry=retry)
            except StoreUnavailable as exc:
                if self._give_up_at is not None and time.monotonic() >= self._give_up_at:
                    keys = sorted({(w.job_id, w.phase_id) for w, _, _ in batch if w is not None})
                    log.error("the database stayed unreachable; writes of these phases were not committed",
                              extra={"fields": {"phases": len(keys), "writes": len(batch), "error": str(exc)}})
                    return _Outcome(lost=set(keys))
                delay = RETRY_DELAYS_S[min(attempt, len(RETRY_DELAYS_S) - 1)]
                if attempt == 0 or delay == RETRY_DELAYS_S[-1]:
                    log.warning("the database is unreachable; retrying the commit",
                                extra={"fields": {"error": str(exc), "retry_in_s": delay}})
                retry = True
                with self._cond:
                    self._cond.wait_for(lambda: self._give_up_at is not None and time.monotonic() >= self._give_up_at,
                                        delay)
            except Exception:  # a bug must not end the thread (every later write would wait forever)
                log.exception("committing phase writes failed")
                return _Outcome(lost={(w.job_id, w.phase_id) for w, _, _ in batch if w is not None})
        raise AssertionError("unreachable")


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
    # Instead of a result: the phase moved to another replica (a drain handed it over); the stream
    # ends with PHASE_MOVED and the watcher continues with WatchPhase elsewhere (docs/scale-out.md).
    moved: Moved | None = None


@dataclass(frozen=True, slots=True)
class Moved:
    """Why a phase's stream on this replica ends without its result: it continues on another replica."""

    from_replica: str
    retry_after_s: float


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
        self._moved: Moved | None = None  # handed over to another replica (``close_moved``)

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

    async def room(self) -> None:
        """Returns once the writer's backlog has room for more of this phase's output."""
        if self.writer is not None:
            await self.writer.room()

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

    def flushed(self, then: Callable[[], None]) -> None:
        """Runs ``then`` once everything submitted for the phase so far is committed."""
        if self.writer is not None:
            self.writer.submit(self.job_id, self.phase_id, (), then)
        else:
            then()

    def end_moved(self, moved: Moved) -> None:
        """The phase was handed over (its events committed): subscribers end after them with ``moved``."""
        if self.fenced:
            return
        self._moved = moved
        self._close(b"")

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
                        yield Delivery(moved=self._moved) if self._moved is not None else Delivery(result=self._result)
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
