"""The cluster port: what the application asks about the other replicas sharing its database.

A server either owns its database alone (``SingleNode``: the embedded SQLite file) or is one of
several replicas on a PostgreSQL database (``store/postgres_cluster.PostgresCluster``: leases,
fences, the admission ledger, LISTEN/NOTIFY). ``store/factory.open_storage`` returns the store
and its cluster together, so the phases layer and the composition root ask this port and never
look at which store they were given (docs/scale-out.md). Its values are plain data, like the
store's rows; no database driver is imported here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from helix_runner.store.protocol import EventRow, OutboxRow, PhaseRow, StoreError


@dataclass(frozen=True)
class ReplicaRow:
    replica_id: str
    address: str
    started_at: datetime
    heartbeat_at: datetime
    lease_expires_at: datetime
    live: bool


@dataclass(frozen=True)
class ReplicaCapacity:
    """A registered replica's room for new phases (placement by free slots, ``replica_capacity``)."""

    replica_id: str
    address: str
    max_running: int  # its local max_running_phases; 0 = it takes no placed phases
    active: int  # phases it owns that are not final (running, starting, queued, paused, ...)
    live: bool  # its lease is current

    @property
    def free(self) -> int:
        return self.max_running - self.active


@dataclass(frozen=True)
class PhaseOwner:
    """Who runs a phase: where to forward its control RPCs, and whether that replica is alive."""

    replica_id: str | None
    address: str
    fence: int
    live: bool


# A sweep's callback gets the phase and the sequence its terminal event must carry; it returns that
# event and the phase's other new columns (reason, end time, encoded result).
Interrupt = Callable[[PhaseRow, int], tuple[EventRow, dict[str, object]]]
# The webhook deliveries a swept phase's terminal event causes (same arguments as ``Interrupt``).
SweepOutbox = Callable[[PhaseRow, int], Sequence[OutboxRow]]


# -- cluster admission (docs/scale-out.md "Cluster admission") ---------------------------------------


@dataclass(frozen=True)
class ClusterLimits:
    """Admission limits that hold for every replica on one database together; 0 means none."""

    max_running: int = 0
    max_running_per_project: int = 0
    max_queued: int = 0

    @property
    def enabled(self) -> bool:
        return bool(self.max_running or self.max_running_per_project or self.max_queued)


@dataclass(frozen=True)
class AdmissionCandidate:
    """A queued entry of this replica that its own limits would let start now."""

    job_id: str
    phase_id: str
    project: str


@dataclass(frozen=True)
class AdmissionPass:
    """One admission pass: what this replica may start, and why the rest of its candidates wait.

    ``waiting_for``: "" (nothing waits), "server" (the cluster runs ``max_running``), "project"
    (the candidates' projects are at the per-project limit) or "turn" (another replica's entry is
    next in the cluster's order; it was woken to start it).
    """

    granted: tuple[tuple[str, str], ...]
    waiting_for: str
    running: int
    running_by_project: dict[str, int]
    queued: int
    holds: dict[str, tuple[float, str]] = field(default_factory=dict)
    """Rate-limit holds in force cluster-wide: credential → (seconds left, why)."""
    missing: tuple[tuple[str, str], ...] = ()
    """Candidates without an entry (their enqueue failed, or a sweep dropped them): enqueue them again."""


class LedgerFullError(StoreError):
    """The cluster's admission queue (or a project's share of it) is full."""

    def __init__(self, scope: str, limit: int, waiting: int):
        self.scope, self.limit, self.waiting = scope, limit, waiting
        super().__init__(f"the cluster's admission queue is full ({waiting} waiting; the limit is {limit})")


class AdmissionLedger(Protocol):
    """Cluster-wide admission kept in the database (``store/postgres_admission.py``).

    Every method is one transaction under one advisory lock, so the limits hold whichever
    replicas call at once. Entries of replicas whose lease ran out count for nothing.
    """

    replica_id: str

    def enqueue(self, job_id: str, phase_id: str, project: str, credential: str, *, retry: bool,
                limits: ClusterLimits) -> None:
        """Adds a queued entry of this replica; ``LedgerFullError`` when the queue is full (never for a retry)."""
        ...

    def admit(self, candidates: Sequence[AdmissionCandidate], *, local_room: int,
              local_project_room: dict[str, int] | None, limits: ClusterLimits) -> AdmissionPass:
        """Marks ``candidates`` ready, then grants slots in the cluster's fair order while they last.

        ``local_room``: how many more this replica may start; ``local_project_room``: per candidate
        project, when this replica has a per-project limit (None: it has none). Entries whose
        credential is held (``hold``) are passed over.
        """
        ...

    def release(self, job_id: str, phase_id: str) -> bool:
        """Deletes an entry (queued or running) and wakes the other replicas; False if there was none."""
        ...

    def hold(self, credential: str, seconds: float, why: str) -> None:
        """Holds new starts on ``credential`` on every replica for ``seconds`` (a longer hold wins)."""
        ...

    def clear(self) -> int:
        """Deletes every entry of this replica (a restart under the same id, or a close)."""
        ...


# -- hand-over (docs/scale-out.md "Hand-over") ---------------------------------------------------------


@dataclass(frozen=True)
class HandoverState:
    """What a phase needs to continue on another replica; the bytes are encoded by the phases layer."""

    job_id: str
    phase_id: str
    request: bytes  # the phase's spec and retry policy
    control: bytes  # job control state: breakpoints with hit counts, pause, step credits, held calls
    session_id: str  # the CLI session the next attempt resumes ("" before the CLI named it)
    workspace: bytes  # where the work is: mode, branch, shared volume
    movable: bool = True
    not_movable_reason: str = ""


@dataclass(frozen=True)
class HandoverClaim:
    """A phase this replica took over to continue it (its owner released it or died)."""

    state: HandoverState
    status: str  # the phase's status when it was claimed (RUNNING, QUEUED, ...)
    from_replica: str  # the replica that ran it
    drained: bool  # released by a draining replica (else: its owner was lost)
    reason: str  # why it was released
    fence: int
    moves: int  # how many times the phase has moved, this one included


class PhaseHandover(Protocol):
    """Durable phase state and its hand-over between replicas (``store/postgres_handover.py``)."""

    def save(self, job_id: str, phase_id: str, **values: object) -> None: ...

    def mirror_transcript(self, job_id: str, phase_id: str, session_id: str, offset: int, data: bytes) -> None: ...

    def drop_transcript(self, job_id: str, phase_id: str, session_id: str) -> None: ...

    def release(self, job_id: str, phase_id: str, reason: str) -> bool: ...

    def claim(self, limit: int) -> list[HandoverClaim]: ...

    def give_up(self, job_id: str, phase_id: str, why: str) -> None: ...

    def forget(self, job_id: str, phase_id: str) -> None: ...

    def transcript(self, job_id: str, phase_id: str, session_id: str) -> bytes: ...

    def state(self, job_id: str, phase_id: str) -> HandoverState | None: ...

    def record_decision(self, job_id: str, phase_id: str, tool_use_id: str, decision: bytes) -> str: ...

    def take_decisions(self, job_id: str, phase_id: str) -> dict[str, bytes]: ...


# -- news from the other replicas ---------------------------------------------------------------------


class ReplicaFeed(Protocol):
    """News from the other replicas: their phases' committed events and admission changes.

    On PostgreSQL one LISTEN connection per replica (``store/postgres_notify.EventListener``).
    """

    async def start(self) -> ReplicaFeed:
        """Connects; returns once it listens (the caller bounds the wait)."""
        ...

    async def stop(self) -> None: ...

    def on_admission_change(self, callback: Callable[[str], None]) -> None:
        """Calls ``callback(payload)`` on the loop when another replica freed an admission slot or
        woke this one to take its turn; with "" after a reconnect (a wake-up may have been lost)."""
        ...

    def follow(self, job_id: str, phase_id: str, after_sequence: int) -> AsyncIterator[list[EventRow]]:
        """A phase another replica runs: its committed events after the cursor, then live, in pages,
        ending once the phase is final."""
        ...


class Cluster(Protocol):
    """The replicas on this server's database, as the application asks about them."""

    @property
    def shared(self) -> bool:
        """Other server processes use this database too: phases have owners, writes are fenced."""
        ...

    @property
    def replica_id(self) -> str:
        """This process's name among the replicas ("" when it is alone)."""
        ...

    def phase_owner(self, job_id: str, phase_id: str) -> PhaseOwner | None:
        """The replica that owns the phase (it runs it, or ran it last); None: no such phase, or no owners."""
        ...

    def replica_capacity(self) -> list[ReplicaCapacity]:
        """Registered replicas with an address: their room for new phases (placement by free slots)."""
        ...

    def live_replicas(self) -> list[ReplicaRow]: ...

    def advertise(self, address: str) -> None:
        """This replica's gRPC address, for control RPCs other replicas forward to it."""
        ...

    def advertise_capacity(self, max_running: int) -> None:
        """This replica's local limit, for placement by free slots (0: place nothing here)."""
        ...

    def admission_ledger(self) -> AdmissionLedger | None:
        """The cluster-wide admission queue and limits; None when there is no cluster to share them with."""
        ...

    def sweep_expired_owners(self, interrupt: Interrupt, *, limit: int = 100,
                             outbox: SweepOutbox | None = None) -> list[PhaseRow]:
        """Records the active phases of replicas whose lease ran out INTERRUPTED (each with the event and
        columns ``interrupt`` makes, and the webhook deliveries ``outbox`` makes, in the same transaction);
        returns them as they were."""
        ...

    def feed(self) -> ReplicaFeed | None:
        """News from the other replicas (not started yet); None when there are none."""
        ...

    def handover(self) -> PhaseHandover | None:
        """Durable phase state and hand-over; None when there is no other replica to hand over to."""
        ...


class SingleNode:
    """The cluster of a server that owns its database alone: no other replica, nothing to share.

    Every phase in the database is this process's (``phases.recovery.recover`` marks those a previous
    process left active at start), so nothing has another owner and nothing is ever swept.
    """

    shared = False
    replica_id = ""

    def phase_owner(self, job_id: str, phase_id: str) -> PhaseOwner | None:
        return None

    def replica_capacity(self) -> list[ReplicaCapacity]:
        return []

    def live_replicas(self) -> list[ReplicaRow]:
        return []

    def advertise(self, address: str) -> None:
        pass

    def advertise_capacity(self, max_running: int) -> None:
        pass

    def admission_ledger(self) -> AdmissionLedger | None:
        return None

    def sweep_expired_owners(self, interrupt: Interrupt, *, limit: int = 100,
                             outbox: SweepOutbox | None = None) -> list[PhaseRow]:
        return []

    def feed(self) -> ReplicaFeed | None:
        return None

    def handover(self) -> PhaseHandover | None:
        return None


SINGLE_NODE: Cluster = SingleNode()
