"""Cross-replica live events: NOTIFY in the append transaction, one LISTEN connection per replica.

The payload is a pointer ``{"j": job, "p": phase, "s": last sequence}``, never the event: the
event is read from the table by cursor, so a lost notification (a dropped LISTEN connection)
costs latency, not data. PostgreSQL delivers notifications only when the appending transaction
commits, in commit order, so a pointer never names an event that cannot be read yet.
``follow_phase_events`` is WatchPhase on a replica that does not run the phase: subscribe, read
history, then read by cursor on each pointer; no gap, no duplicate at the seam (docs/scale-out.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

import psycopg

from helix_runner.store.postgres_admission import ADMISSION_CHANNEL
from helix_runner.store.protocol import ACTIVE_STATUSES, EventRow, PhaseRow, Store

log = logging.getLogger(__name__)

CHANNEL = "helix_events"
HISTORY_PAGE = 500


@dataclass(frozen=True)
class EventPointer:
    """Events of (job_id, phase_id) up to ``sequence`` are committed."""

    job_id: str
    phase_id: str
    sequence: int

    def payload(self) -> str:
        return json.dumps({"j": self.job_id, "p": self.phase_id, "s": self.sequence}, separators=(",", ":"))

    @classmethod
    def parse(cls, payload: str) -> EventPointer | None:
        try:
            d = json.loads(payload)
            return cls(str(d["j"]), str(d["p"]), int(d["s"]))
        except (ValueError, KeyError, TypeError):
            return None


def notify(cur: psycopg.Cursor, pointers: Sequence[EventPointer]) -> None:
    """Queues one notification per pointer; PostgreSQL sends them when the transaction commits."""
    if pointers:
        cur.execute(
            "SELECT pg_notify(%s, x) FROM unnest(%s::text[]) AS x",
            (CHANNEL, [p.payload() for p in pointers]),
        )


class _Waiter:
    __slots__ = ("latest", "wakeup")

    def __init__(self) -> None:
        self.latest = 0
        self.wakeup = asyncio.Event()


class EventListener:
    """One LISTEN connection for the whole replica, fanning pointers out to per-phase waiters.

    On a dropped connection it reconnects and wakes every waiter, which then re-reads from its
    cursor: notifications sent while it was gone are not replayed by PostgreSQL.
    """

    def __init__(self, conninfo: str, *, store: Store | None = None, reconnect_delay: float = 1.0):
        self.conninfo = conninfo
        self.store = store  # where ``follow`` reads a phase's events
        self.reconnect_delay = reconnect_delay
        self._waiters: dict[tuple[str, str], set[_Waiter]] = {}
        self._task: asyncio.Task | None = None
        self._listening = asyncio.Event()
        # Cluster admission wake-ups (postgres_admission.ADMISSION_CHANNEL): called on the loop.
        self._admission_callbacks: list[Callable[[str], None]] = []

    async def start(self) -> EventListener:
        self._task = asyncio.create_task(self._run(), name="postgres-listen")
        await self._listening.wait()
        return self

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    await conn.execute(f"LISTEN {ADMISSION_CHANNEL}")
                    self._listening.set()
                    self._wake_all()  # anything sent while we were not listening: re-read by cursor
                    async for note in conn.notifies():
                        if note.channel == ADMISSION_CHANNEL:
                            self._admission_changed(note.payload)
                            continue
                        pointer = EventPointer.parse(note.payload)
                        if pointer is not None:
                            self._deliver(pointer)
            except psycopg.Error as exc:
                log.warning(
                    "LISTEN connection lost; reconnecting", extra={"fields": {"error": type(exc).__name__}}
                )
                self._wake_all()
                await asyncio.sleep(self.reconnect_delay)

    def on_admission_change(self, callback: Callable[[str], None]) -> None:
        """Calls ``callback(payload)`` (on the loop) when a replica freed a cluster admission slot
        (``released:<replica>``) or woke one to take its turn (``turn:<replica>``); with "" after a
        reconnect (a wake-up may have been lost)."""
        self._admission_callbacks.append(callback)

    def _admission_changed(self, payload: str = "") -> None:
        for callback in list(self._admission_callbacks):
            try:
                callback(payload)
            except Exception:
                log.exception("cluster admission wake-up failed")

    def _deliver(self, pointer: EventPointer) -> None:
        for waiter in self._waiters.get((pointer.job_id, pointer.phase_id), ()):
            waiter.latest = max(waiter.latest, pointer.sequence)
            waiter.wakeup.set()

    def _wake_all(self) -> None:
        self._admission_changed()
        for waiters in self._waiters.values():
            for waiter in waiters:
                waiter.wakeup.set()

    def follow(self, job_id: str, phase_id: str, after_sequence: int = 0) -> AsyncIterator[list[EventRow]]:
        """``follow_phase_events`` on this listener and its store (the ``ReplicaFeed`` port)."""
        if self.store is None:
            raise ValueError("this listener was made without a store to follow phases in")
        return follow_phase_events(self.store, self, job_id, phase_id, after_sequence)

    @contextlib.contextmanager
    def subscribe(self, job_id: str, phase_id: str):
        """A waiter for one phase's pointers, registered until the block ends."""
        waiter = _Waiter()
        self._waiters.setdefault((job_id, phase_id), set()).add(waiter)
        try:
            yield waiter
        finally:
            waiters = self._waiters.get((job_id, phase_id))
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiters[(job_id, phase_id)]


async def follow_phase_events(
    store: Store,
    listener: EventListener,
    job_id: str,
    phase_id: str,
    after_sequence: int = 0,
    *,
    poll_seconds: float = 5.0,
) -> AsyncIterator[list[EventRow]]:
    """A phase's events after the cursor, from the table and then live, until the phase is final;
    in pages as read (up to ``HISTORY_PAGE`` rows), so a watcher catching up gets them batched.

    Final means a final status and a result: the owner writes its result after its last event
    is committed, so once both are there every event is in the table.

    ``store`` is any store with ``read_events`` and ``get_phase``. The waiter is registered before
    history is read: an append committing meanwhile still wakes us, and reading by cursor skips
    what was already yielded. ``poll_seconds`` bounds each wait, so a notification lost between
    reconnects delays an event by at most that long.
    """
    cursor = after_sequence
    with listener.subscribe(job_id, phase_id) as waiter:
        while True:
            waiter.wakeup.clear()
            while True:
                rows = store.read_events(job_id, phase_id, cursor, HISTORY_PAGE)
                if not rows:
                    break
                yield rows
                cursor = rows[-1].sequence
                await asyncio.sleep(0)
            phase = store.get_phase(job_id, phase_id)
            if phase is None:
                return
            if _finished(phase) and cursor >= phase.last_sequence:
                return
            if waiter.latest > cursor or phase.last_sequence > cursor:
                continue  # committed while we read: read again before waiting
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter.wakeup.wait(), poll_seconds)


def _finished(phase: PhaseRow) -> bool:
    return phase.status not in ACTIVE_STATUSES and phase.result_pb is not None
