"""Admission: which waiting phase attempt may start its CLI now, and why the others wait.

A phase that cannot start at once is not refused: it waits in a bounded queue (status QUEUED) until

* the server runs fewer than ``max_running`` phases (phases being started count as running),
* its project runs fewer than ``max_running_per_project`` (when set),
* fewer than ``max_starting`` CLI processes are being spawned (starting the CLI is the expensive,
  bursty part: a Node process loading a large bundle),
* its API credential is not held after a rate limit (``hold``), and
* the backoff before its next attempt, if it is a retry, has passed (``not_before``).

Projects take turns (round-robin over the projects with a startable entry); within a project it is
first come, first served, with retries ahead of new phases (they were admitted once already). Only a
full queue refuses a phase: RESOURCE_EXHAUSTED ``QUEUE_FULL`` with a retry hint. A retry is never
refused, whatever the queue's size. Design and wiring: ``docs/retries-and-admission.md``.

``AdmissionQueue`` is the decision logic: synchronous, no I/O, on an injected clock, so it can be
tested exactly. One pass (``pump``) reads the clock once, picks the entries the local rules would
start (``_candidates``) and asks its ``Grant`` which of them may: on one server nobody else has a
say (``LOCAL_GRANT`` grants them all); on a shared database the cluster's ledger decides too
(``phases/cluster_admission.LedgerGrant``, docs/scale-out.md "Cluster admission"). ``AsyncAdmission``
wraps it for the event loop: ``await acquire(...)`` returns when the entry is admitted, a timer
re-checks the queue when a backoff or a hold ends, and while the grant holds entries back a poll
asks again (another replica's NOTIFY, ``wake``, asks at once). It has no store or gRPC
dependency; the application layer turns its state changes into QUEUED events.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from helix_runner.domain.events import QueueReason, QueueState
from helix_runner.domain.fair_order import Turns
from helix_runner.errors import ErrorKind, RunnerError

Clock = Callable[[], float]

# While the grant holds entries back (``Grant.pending``) they are offered again after 0.5 s, the
# wait doubling to 4 s while nothing happens: a lost wake-up from another replica costs that much.
POLL_MIN_S = 0.5
POLL_MAX_S = 4.0
# Turn records of projects with nothing waiting or running kept (least recently served dropped first).
IDLE_TURNS_KEPT = 4096


@dataclass(frozen=True)
class AdmissionLimits:
    """Limits of the admission queue; a per-project limit of 0 means none."""

    max_running: int = 64
    max_running_per_project: int = 0
    max_starting: int = 4
    max_queued: int = 1000
    max_queued_per_project: int = 0
    retry_hint_min_s: float = 1.0
    retry_hint_max_s: float = 60.0
    retry_hint_default_s: float = 5.0
    """The retry hint before any admission has been timed."""

    def __post_init__(self) -> None:
        for name in ("max_running", "max_starting", "max_queued"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        for name in ("max_running_per_project", "max_queued_per_project"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if not 0 < self.retry_hint_min_s <= self.retry_hint_max_s:
            raise ValueError("retry hints need 0 < retry_hint_min_s <= retry_hint_max_s")


class TicketState(enum.Enum):
    """Where an entry is: waiting, admitted and spawning, admitted and running, or gone."""

    QUEUED = "queued"
    STARTING = "starting"
    RUNNING = "running"
    DONE = "done"
    CANCELLED = "cancelled"


class Ticket:
    """One phase attempt's place in admission; the application keeps it until the attempt ends."""

    __slots__ = (
        "key",
        "project",
        "credential",
        "attempt",
        "retry",
        "enqueued_at",
        "not_before",
        "state",
        "_seq",
        "_reported",
        "_waiter",
    )

    def __init__(
        self,
        key: Hashable,
        project: str,
        credential: str,
        attempt: int,
        retry: bool,
        enqueued_at: float,
        not_before: float | None,
        seq: int,
    ) -> None:
        self.key = key
        self.project = project
        self.credential = credential
        self.attempt = attempt
        self.retry = retry
        self.enqueued_at = enqueued_at
        self.not_before = not_before
        self.state = TicketState.QUEUED
        self._seq = seq
        self._reported: tuple[QueueReason, float | None] | None = None
        self._waiter: asyncio.Future[None] | None = None

    def __repr__(self) -> str:
        return f"Ticket({self.key!r}, {self.project!r}, attempt={self.attempt}, {self.state.name})"


@dataclass(frozen=True)
class QueueStatus:
    """Why a queued entry waits; times are on the queue's clock (see :meth:`AdmissionQueue.queue_state`)."""

    reason: QueueReason
    detail: str
    position: int
    queued_count: int
    not_before: float | None
    enqueued_at: float
    attempt: int


@dataclass(frozen=True)
class Granted:
    """What a grant allows in one pass: the candidates that start (in the order offered), and the
    rate-limit holds in force elsewhere (credential → seconds left, why) that apply here too."""

    tickets: Sequence[Ticket] = ()
    holds: Mapping[str, tuple[float, str]] = field(default_factory=dict)


NOTHING_GRANTED = Granted()


class GrantRefused(Exception):
    """The grant will not queue this entry: its queue (``scope``) is full. Becomes QUEUE_FULL."""

    def __init__(self, scope: str, limit: int, waiting: int, what: str):
        super().__init__(what)
        self.scope, self.limit, self.waiting, self.what = scope, limit, waiting, what


class Grant(Protocol):
    """Who else must agree before a queued entry starts: the queue's one strategy for that.

    Every method is called on the queue's thread, synchronously, as part of the queue's own call.
    """

    @property
    def pending(self) -> bool:
        """Entries the local rules would start are held back: offer them again soon."""
        ...

    def entered(self, ticket: Ticket) -> None:
        """A new entry is about to be queued; raises ``GrantRefused`` (or a ``RunnerError``) to refuse it."""
        ...

    def left(self, ticket: Ticket) -> None:
        """An entry left the queue: cancelled while it waited, or released after it was admitted."""
        ...

    def share_hold(self, credential: str, seconds: float, why: str) -> None:
        """A rate-limit hold set here; it is for the others to know too."""
        ...

    def decide(self, candidates: list[Ticket], room: int, project_room: dict[str, int] | None) -> Granted:
        """Which of ``candidates`` start now (at most ``room``; ``project_room``: per candidate project,
        when there is a per-project limit). The candidates are what the local rules would start, in
        the order they would start them."""
        ...

    def why(self, key: Hashable) -> tuple[QueueReason, str] | None:
        """Why a candidate it did not grant waits, if it is the grant that holds it back."""
        ...

    def concerns(self, news: str) -> bool:
        """Whether a wake-up from another replica (its payload) may change this replica's pass."""
        ...


class LocalGrant:
    """One server alone: what the local rules would start, starts."""

    pending = False

    def entered(self, ticket: Ticket) -> None:
        pass

    def left(self, ticket: Ticket) -> None:
        pass

    def share_hold(self, credential: str, seconds: float, why: str) -> None:
        pass

    def decide(self, candidates: list[Ticket], room: int, project_room: dict[str, int] | None) -> Granted:
        return Granted(candidates[:room]) if candidates else NOTHING_GRANTED

    def why(self, key: Hashable) -> tuple[QueueReason, str] | None:
        return None

    def concerns(self, news: str) -> bool:
        return True


LOCAL_GRANT: Grant = LocalGrant()


class AdmissionQueue:
    """The admission decisions, on an injected clock (seconds, monotonic)."""

    def __init__(
        self,
        limits: AdmissionLimits = AdmissionLimits(),
        *,
        grant: Grant = LOCAL_GRANT,
        clock: Clock = time.monotonic,
        wall_clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self.limits = limits
        self.grant = grant
        self.clock = clock
        self._wall_clock_ns = wall_clock_ns
        self._seq = itertools.count()
        self._tickets: dict[Hashable, Ticket] = {}  # every entry not DONE/CANCELLED
        # Per project: retries first, then new phases; each in arrival order.
        self._waiting: dict[str, tuple[deque[Ticket], deque[Ticket]]] = {}
        # Turns: the project served least recently goes next (never served: first, by arrival), so a
        # project that arrives while another holds a long queue is served at the next free slot.
        self._admissions = itertools.count()
        self._last_served: dict[str, int] = {}  # project → number of its latest admission
        self._joined: dict[str, int] = {}  # project → when its current waiting entries began
        self._idle_turns: set[str] = set()  # projects whose turn record is kept while idle
        self._queued = 0
        self._queued_fresh: dict[str, int] = {}
        self._running = 0  # admitted entries (starting ones included)
        self._running_by_project: dict[str, int] = {}
        self._starting = 0
        self._holds: dict[str, tuple[float, str]] = {}  # credential → (until, why)
        self._last_admit_at: float | None = None
        self._admit_interval: float | None = None  # moving average of the time between admissions
        # The clock of the latest pump: next_wakeup reports every backoff or hold end that pump has
        # not yet seen pass, also one that passed since (the clock moves between the two calls).
        self._pumped_at = float("-inf")

    # ----------------------------------------------------------------------------------------------
    # Entries.

    def submit(
        self,
        key: Hashable,
        project: str,
        credential: str = "",
        *,
        attempt: int = 1,
        not_before: float | None = None,
        retry: bool = False,
    ) -> Ticket:
        """Queue an attempt; call :meth:`pump` (or use ``AsyncAdmission``) to admit what can start.

        ``credential`` is an opaque, non-secret name of the API credential the CLI will use (for
        rate-limit holds). ``retry`` marks a later attempt of an admitted phase: it goes ahead of its
        project's new phases and is never refused for a full queue. Raises RESOURCE_EXHAUSTED
        ``QUEUE_FULL`` (with a retry hint) when the queue, or the project's share of it, is full.
        """
        if key in self._tickets:
            raise ValueError(f"{key!r} is already in admission")
        if not retry:
            self._check_room(project)
        ticket = Ticket(key, project, credential, attempt, retry, self.clock(), not_before, next(self._seq))
        try:
            self.grant.entered(ticket)
        except GrantRefused as refused:
            self._refuse(refused.scope, refused.limit, refused.waiting, refused.what)
        lanes = self._waiting.get(project)
        if lanes is None:
            lanes = self._waiting[project] = (deque(), deque())
            self._joined[project] = ticket._seq
            self._idle_turns.discard(project)
        lanes[0 if retry else 1].append(ticket)
        self._tickets[key] = ticket
        self._queued += 1
        if not retry:
            self._queued_fresh[project] = self._queued_fresh.get(project, 0) + 1
        return ticket

    def cancel(self, key: Hashable) -> bool:
        """Remove a queued entry (a cancelled phase); False when it is not queued (admitted or unknown)."""
        ticket = self._tickets.get(key)
        if ticket is None or ticket.state is not TicketState.QUEUED:
            return False
        self._unqueue(ticket)
        ticket.state = TicketState.CANCELLED
        del self._tickets[key]
        self._forget_if_idle(ticket.project)
        self.grant.left(ticket)
        return True

    def started(self, ticket: Ticket) -> None:
        """The attempt's CLI is up (its first output, or its end): the start slot is free again."""
        if ticket.state is TicketState.STARTING:
            ticket.state = TicketState.RUNNING
            self._starting -= 1

    def release(self, ticket: Ticket) -> None:
        """The attempt ended: its slots are free (a queued entry is cancelled instead)."""
        if ticket.state is TicketState.QUEUED:
            self.cancel(ticket.key)
            return
        if ticket.state not in (TicketState.STARTING, TicketState.RUNNING):
            return
        if ticket.state is TicketState.STARTING:
            self._starting -= 1
        self._running -= 1
        left = self._running_by_project[ticket.project] - 1
        if left:
            self._running_by_project[ticket.project] = left
        else:
            del self._running_by_project[ticket.project]
        ticket.state = TicketState.DONE
        del self._tickets[ticket.key]
        self._forget_if_idle(ticket.project)
        self.grant.left(ticket)

    def get(self, key: Hashable) -> Ticket | None:
        """The live entry for ``key`` (queued or admitted), if any."""
        return self._tickets.get(key)

    def waiting(self) -> Iterator[Ticket]:
        """The queued entries, project by project (retries first, then arrival order)."""
        for retries, fresh in self._waiting.values():
            yield from retries
            yield from fresh

    # ----------------------------------------------------------------------------------------------
    # Rate-limit holds.

    def hold(self, credential: str, until: float, why: str) -> None:
        """Hold new starts on ``credential`` until ``until`` (queue clock); a longer hold wins. The
        grant shares it (on a shared database, every replica holds the credential)."""
        self._hold_here(credential, until, why)
        self.grant.share_hold(credential, until - self.clock(), why)

    def _hold_here(self, credential: str, until: float, why: str) -> None:
        current = self._holds.get(credential)
        if current is None or current[0] < until:
            self._holds[credential] = (until, why)

    def release_hold(self, credential: str) -> None:
        self._holds.pop(credential, None)

    def held_until(self, credential: str) -> float | None:
        hold = self._holds.get(credential)
        if hold is None:
            return None
        if hold[0] <= self.clock():
            del self._holds[credential]
            return None
        return hold[0]

    # ----------------------------------------------------------------------------------------------
    # Decisions.

    def pump(self) -> list[Ticket]:
        """Admit every entry that may start now, projects taking turns; returns them in order.

        One pass on one clock reading: the local rules pick the candidates, the grant decides.
        """
        limits = self.limits
        now = self._pass_clock()
        for credential in [c for c, (until, _) in self._holds.items() if until <= now]:
            del self._holds[credential]  # ended holds go, so the table stays as small as the live ones
        room = max(0, min(limits.max_starting - self._starting, limits.max_running - self._running))
        candidates = self._candidates(now, room)
        project_room = None
        if limits.max_running_per_project and candidates:
            project_room = {t.project: limits.max_running_per_project - self.running_in(t.project) for t in candidates}
        granted = self.grant.decide(candidates, room, project_room)
        for credential, (left, why) in granted.holds.items():  # in force on another replica: here too
            self._hold_here(credential, now + left, why)
        for ticket in granted.tickets:
            self._admit(ticket, now)
        return list(granted.tickets)

    def next_wakeup(self) -> float | None:
        """When a backoff or a hold that keeps a queued entry waiting ends (None: nothing timed).

        An end the latest ``pump`` had not reached counts even when it has passed since (then the
        caller pumps again at once): else an entry whose backoff ended between the two calls would
        wait for the next unrelated change.
        """
        seen = self._pumped_at
        times = [
            t
            for ticket in self.waiting()
            for t in (ticket.not_before, self._hold_end(ticket.credential, seen))
            if t is not None and t > seen
        ]
        return min(times, default=None)

    def _pass_clock(self) -> float:
        """The clock for one admission pass (``pump``), remembered for ``next_wakeup``."""
        self._pumped_at = self.clock()
        return self._pumped_at

    def status(self, key: Hashable) -> QueueStatus | None:
        """Why a queued entry waits, and where it stands; None when it is not queued."""
        ticket = self._tickets.get(key)
        if ticket is None or ticket.state is not TicketState.QUEUED:
            return None
        now = self.clock()
        return self._status(ticket, now, self._positions(now))

    def changes(self) -> list[tuple[Ticket, QueueStatus]]:
        """Queued entries whose reason (or the end of their hold or backoff) changed since the last call.

        The first call reports every entry. Position and the wording of ``detail`` alone are not
        changes: they move with every admission and every second, and callers read them on demand.
        """
        now = self.clock()
        positions = self._positions(now)
        changed = []
        for ticket in self.waiting():
            status = self._status(ticket, now, positions)
            seen = (status.reason, status.not_before)
            if ticket._reported != seen:
                ticket._reported = seen
                changed.append((ticket, status))
        return changed

    def queue_state(self, status: QueueStatus) -> QueueState:
        """The contract's view of a status, with wall-clock times (ns since the epoch)."""
        offset_ns = self._wall_clock_ns() - round(self.clock() * 1e9)
        return QueueState(
            reason=status.reason,
            detail=status.detail,
            position=status.position,
            queued_count=status.queued_count,
            not_before_ns=None if status.not_before is None else offset_ns + round(status.not_before * 1e9),
            enqueue_time_ns=offset_ns + round(status.enqueued_at * 1e9),
            next_attempt=status.attempt,
        )

    @property
    def running(self) -> int:
        return self._running

    @property
    def starting(self) -> int:
        return self._starting

    @property
    def queued(self) -> int:
        return self._queued

    def running_in(self, project: str) -> int:
        return self._running_by_project.get(project, 0)

    def retry_hint_s(self) -> float:
        """How long a refused caller should wait: about the time until the next admission frees room."""
        limits = self.limits
        estimate = limits.retry_hint_default_s if self._admit_interval is None else self._admit_interval
        return min(max(estimate, limits.retry_hint_min_s), limits.retry_hint_max_s)

    # ----------------------------------------------------------------------------------------------
    # Internals.

    def _check_room(self, project: str) -> None:
        limits = self.limits
        if self._queued >= limits.max_queued:
            self._refuse("server", limits.max_queued, self._queued, "the admission queue is full")
        per_project = limits.max_queued_per_project
        if per_project and self._queued_fresh.get(project, 0) >= per_project:
            self._refuse(
                "project", per_project, self._queued_fresh[project], f"project {project!r} has its queue full"
            )

    def _refuse(self, scope: str, limit: int, waiting: int, what: str) -> None:
        hint = self.retry_hint_s()
        raise RunnerError(
            ErrorKind.RESOURCE_EXHAUSTED,
            "QUEUE_FULL",
            f"{what} (phases waiting: {waiting}; the limit is {limit}); retry in about {hint:.0f} s",
            {"limit": limit, "scope": scope, "retry_after_ms": round(hint * 1000)},
            retry_after_s=hint,
        )

    def _hold_end(self, credential: str, now: float) -> float | None:
        hold = self._holds.get(credential)
        return hold[0] if hold is not None and hold[0] > now else None

    def _startable(self, ticket: Ticket, now: float) -> bool:
        if ticket.not_before is not None and ticket.not_before > now:
            return False
        return self._hold_end(ticket.credential, now) is None

    def _candidates(self, now: float, room: int) -> list[Ticket]:
        """The entries the local rules would start now, in the order they would start them.

        Projects take turns (domain/fair_order.py), each up to ``room`` and its per-project room;
        within a project retries first, then by arrival. The first ``room`` of them are what starts
        when nobody else has a say.
        """
        if room <= 0:
            return []
        per_project = self.limits.max_running_per_project
        lanes = {}
        for project, waiting in self._waiting.items():
            share = room if not per_project else min(room, per_project - self._running_by_project.get(project, 0))
            if share > 0:
                lanes[project] = itertools.islice(
                    (t for lane in waiting for t in lane if self._startable(t, now)), share)
        return Turns(lanes, self._last_served, self._joined).order()

    def _admit(self, ticket: Ticket, now: float) -> None:
        self._unqueue(ticket)
        self._last_served[ticket.project] = next(self._admissions)
        ticket.state = TicketState.STARTING
        self._starting += 1
        self._running += 1
        self._running_by_project[ticket.project] = self._running_by_project.get(ticket.project, 0) + 1
        if self._last_admit_at is not None:
            interval = now - self._last_admit_at
            average = self._admit_interval
            self._admit_interval = interval if average is None else 0.8 * average + 0.2 * interval
        self._last_admit_at = now

    def _unqueue(self, ticket: Ticket) -> None:
        lanes = self._waiting[ticket.project]
        lanes[0 if ticket.retry else 1].remove(ticket)
        self._queued -= 1
        if not ticket.retry:
            left = self._queued_fresh[ticket.project] - 1
            if left:
                self._queued_fresh[ticket.project] = left
            else:
                del self._queued_fresh[ticket.project]
        if not lanes[0] and not lanes[1]:
            del self._waiting[ticket.project]
            del self._joined[ticket.project]

    def _forget_if_idle(self, project: str) -> None:
        """Keeps the turn record of a project with nothing waiting or running (so it does not count as
        never served when it comes back, as the cluster's ledger keeps it), up to ``IDLE_TURNS_KEPT``
        of them: beyond that the least recently served idle record goes (memory stays bounded)."""
        if project in self._waiting or project in self._running_by_project:
            return
        self._idle_turns.add(project)
        while len(self._idle_turns) > IDLE_TURNS_KEPT:
            oldest = min(self._idle_turns, key=lambda p: self._last_served.get(p, -1))
            self._idle_turns.remove(oldest)
            self._last_served.pop(oldest, None)

    def _positions(self, now: float) -> dict[Hashable, int]:
        """1-based order in which the startable entries would start if slots were free now."""
        lanes = {project: [t for lane in waiting for t in lane if self._startable(t, now)]
                 for project, waiting in self._waiting.items()}
        order = Turns(lanes, self._last_served, self._joined).order()
        return {t.key: i for i, t in enumerate(order, start=1)}

    def _status(self, ticket: Ticket, now: float, positions: dict[Hashable, int]) -> QueueStatus:
        limits = self.limits
        not_before = None
        if ticket.not_before is not None and ticket.not_before > now:
            reason = QueueReason.RETRY_BACKOFF
            not_before = ticket.not_before
            detail = f"attempt {ticket.attempt} waits out its backoff ({not_before - now:.1f} s left)"
        elif (hold_end := self._hold_end(ticket.credential, now)) is not None:
            reason = QueueReason.RATE_LIMITED
            not_before = hold_end
            why = self._holds[ticket.credential][1]
            detail = f"new starts on its API credential are held for {hold_end - now:.0f} s: {why}"
        elif limits.max_running_per_project and (
            self._running_by_project.get(ticket.project, 0) >= limits.max_running_per_project
        ):
            reason = QueueReason.PROJECT_LIMIT
            detail = (
                f"phases running in project {ticket.project!r}: {self._running_by_project[ticket.project]}; "
                f"its limit is {limits.max_running_per_project}"
            )
        elif self._starting >= limits.max_starting and self._running < limits.max_running:
            reason = QueueReason.START_LIMIT
            detail = f"phases starting: {self._starting}; at most {limits.max_starting} start at once"
        elif self._running < limits.max_running and (held := self.grant.why(ticket.key)) is not None:
            reason, detail = held  # this replica has room: the grant holds it back (the cluster)
        else:
            reason = QueueReason.SERVER_LIMIT
            detail = f"phases running: {self._running}; the server's limit is {limits.max_running}"
        return QueueStatus(
            reason,
            detail,
            positions.get(ticket.key, 0),
            self._queued,
            not_before,
            ticket.enqueued_at,
            ticket.attempt,
        )


class AdmissionClosedError(Exception):
    """The entry left the queue without being admitted (cancelled, or the server is closing)."""


class AsyncAdmission:
    """``AdmissionQueue`` for the event loop: awaitable admission, a timer for backoffs and holds, and
    a bounded poll while the grant holds entries back.

    ``on_change(ticket, status)`` is called (synchronously, on the loop) for every queued entry
    whose reason changed; the application turns it into a QUEUED control event and ``Phase.queue``.
    All methods must be called on the loop's thread.
    """

    def __init__(
        self,
        queue: AdmissionQueue,
        *,
        on_change: Callable[[Ticket, QueueStatus], None] | None = None,
        gate: Callable[[], None] | None = None,
    ) -> None:
        self.queue = queue
        self._on_change = on_change
        # Raises RESOURCE_EXHAUSTED when the server is too loaded to take a new phase (the event
        # loop's lag, telemetry.loop_lag); retries of admitted phases pass, as for a full queue.
        self._gate = gate
        self._timer: asyncio.TimerHandle | None = None
        self._poll: asyncio.TimerHandle | None = None
        self._poll_delay = POLL_MIN_S
        self._wake_pending = False
        self._closed = False

    async def acquire(
        self,
        key: Hashable,
        project: str,
        credential: str = "",
        *,
        attempt: int = 1,
        not_before: float | None = None,
        retry: bool = False,
    ) -> Ticket:
        """Wait until the attempt may start; the caller must ``release`` the ticket when it ends.

        Raises RESOURCE_EXHAUSTED at once when the queue is full, ``AdmissionClosedError`` when the
        entry is cancelled or the admission closes, and cancelling the waiting task cancels the entry.
        """
        ticket = self.submit(key, project, credential, attempt=attempt, not_before=not_before, retry=retry)
        await self.wait(ticket)
        return ticket

    def submit(
        self,
        key: Hashable,
        project: str,
        credential: str = "",
        *,
        attempt: int = 1,
        not_before: float | None = None,
        retry: bool = False,
    ) -> Ticket:
        """The synchronous half of ``acquire``: queue the entry (admitting it if it can start now).

        A refusal (``QUEUE_FULL``) happens here, so a caller can refuse a request before it answers
        anything; then ``await wait(ticket)``.
        """
        if self._closed:
            raise AdmissionClosedError("admission is closed")
        if self._gate is not None and not retry:
            self._gate()
        ticket = self.queue.submit(
            key, project, credential, attempt=attempt, not_before=not_before, retry=retry
        )
        ticket._waiter = asyncio.get_running_loop().create_future()
        self.kick()
        return ticket

    async def wait(self, ticket: Ticket) -> None:
        """Wait until a submitted entry is admitted; cancelling the waiting task cancels the entry."""
        waiter = ticket._waiter
        assert waiter is not None, "wait() needs a ticket from submit()"
        try:
            await waiter
        except BaseException:
            # Cancelled while waiting, or admitted in the same moment: either way the entry goes.
            self.queue.release(ticket)
            self.kick()
            raise

    def cancel(self, key: Hashable) -> bool:
        """Cancel a queued entry; its ``acquire`` raises ``AdmissionClosedError``."""
        ticket = self.queue.get(key)
        if ticket is None or not self.queue.cancel(key):
            return False
        if ticket._waiter is not None and not ticket._waiter.done():
            ticket._waiter.set_exception(AdmissionClosedError(f"{key!r} was cancelled while queued"))
        self.kick()
        return True

    def started(self, ticket: Ticket) -> None:
        self.queue.started(ticket)
        self.kick()

    def release(self, ticket: Ticket) -> None:
        self.queue.release(ticket)
        self.kick()

    def hold(self, credential: str, until: float, why: str) -> None:
        self.queue.hold(credential, until, why)
        self.kick()

    def kick(self) -> None:
        """Admit what can start, report changed reasons, and arm the timer for the next timed change
        (and the poll, while the grant holds entries back)."""
        self._poll_delay = POLL_MIN_S
        self._pass()

    def wake(self, news: str = "") -> None:
        """Another replica changed the cluster's admission (``ReplicaFeed.on_admission_change``): one
        pass soon, unless the grant says the news does not concern this replica. Wake-ups arriving
        together make one pass."""
        if self._wake_pending or self._closed or not self.queue.grant.concerns(news):
            return
        self._wake_pending = True
        asyncio.get_running_loop().call_soon(self._woken)

    def _woken(self) -> None:
        self._wake_pending = False
        self.kick()

    def _polled(self) -> None:
        self._poll = None
        self._poll_delay = min(self._poll_delay * 2, POLL_MAX_S)
        self._pass()

    def _pass(self) -> None:
        if self._closed:
            return
        for ticket in self.queue.pump():
            waiter = ticket._waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        if self._on_change is not None:
            for ticket, status in self.queue.changes():
                self._on_change(ticket, status)
        self._arm()

    def close(self, why: str = "the server is shutting down") -> None:
        """Fail every waiting ``acquire``; admitted tickets stay valid until released."""
        self._closed = True
        for timer in (self._timer, self._poll):
            if timer is not None:
                timer.cancel()
        self._timer = self._poll = None
        for ticket in list(self.queue.waiting()):
            self.queue.cancel(ticket.key)
            if ticket._waiter is not None and not ticket._waiter.done():
                ticket._waiter.set_exception(AdmissionClosedError(why))

    def _arm(self) -> None:
        loop = asyncio.get_running_loop()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        wake = self.queue.next_wakeup()
        if wake is not None:
            delay = max(0.0, wake - self.queue.clock())
            self._timer = loop.call_later(delay, self.kick)
        if self._poll is not None:
            self._poll.cancel()
            self._poll = None
        if self.queue.grant.pending:
            self._poll = loop.call_later(self._poll_delay, self._polled)
