"""Admission across replicas: the local queue, plus limits that hold for the whole cluster.

On a shared database (PostgreSQL) with cluster limits configured (``cluster_max_running_phases``,
``cluster_max_running_phases_per_project``, ``cluster_max_queued_phases``), an attempt starts only
when both agree: this replica's own queue (``phases/admission.py``, the machine's limits, unchanged)
and the cluster's ledger in the database (``store/postgres_admission.py``). A phase waits on the
replica that owns it (the one that received its ``RunPhase``, or the one that replica placed it
on when it was full: ``phases/placement.py``) QUEUED until the ledger grants that replica a slot;
the ledger keeps the cluster fair between projects.

``ClusterQueue`` is the local ``AdmissionQueue`` with the ledger in its decisions: every entry is
also a ledger row (a full cluster queue refuses with QUEUE_FULL, scope ``cluster``); an admission
pass offers the entries this replica could start now and admits those the ledger grants; a
released or cancelled entry leaves the ledger. ``ClusterAdmission`` re-runs the pass when another
replica frees a slot (LISTEN/NOTIFY, ``EventListener.on_admission_change`` → ``wake``) and, as a fallback
for a lost notification, on a timer that backs off from 0.5 s to 4 s while entries wait for the
cluster. Design: docs/scale-out.md, "Cluster admission" (and "Placement by free slots").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable

from helix_runner.config import ServerConfig
from helix_runner.domain.events import QueueReason
from helix_runner.errors import ErrorKind, RunnerError
from helix_runner.phases.admission import (
    AdmissionLimits,
    AdmissionQueue,
    AsyncAdmission,
    QueueStatus,
    Ticket,
    TicketState,
)
from helix_runner.store.cluster import (
    AdmissionCandidate,
    AdmissionLedger,
    AdmissionPass,
    Cluster,
    ClusterLimits,
    LedgerFullError,
)
from helix_runner.store.protocol import StoreError

log = logging.getLogger(__name__)

POLL_MIN_S = 0.5
NO_LIMITS = ClusterLimits()  # an enqueue that is never refused
POLL_MAX_S = 4.0


def cluster_limits(config: ServerConfig) -> ClusterLimits:
    """The cluster-wide limits of the config (all 0: no cluster admission, each replica on its own)."""
    return ClusterLimits(
        max_running=config.cluster_max_running_phases,
        max_running_per_project=config.cluster_max_running_phases_per_project,
        max_queued=config.cluster_max_queued_phases,
    )


def admission_for(replicas: Cluster, local: AdmissionLimits, cluster: ClusterLimits, *,
                  on_change: Callable[[Ticket, QueueStatus], None] | None = None,
                  gate: Callable[[], None] | None = None) -> AsyncAdmission:
    """The server's admission: cluster-wide when the database is shared and cluster limits are set.

    Without a ledger (``SingleNode``: one process) the local queue decides alone, as before. The
    ledger's entries of this replica id are cleared first: a process restarting under a stable id
    (a StatefulSet pod) must not inherit its predecessor's slots.
    """
    ledger = replicas.admission_ledger() if cluster.enabled else None
    if ledger is None:
        return AsyncAdmission(AdmissionQueue(local), on_change=on_change, gate=gate)
    cleared = ledger.clear()
    if cleared:
        log.warning("released cluster admission entries a previous process left",
                    extra={"fields": {"count": cleared}})
    return ClusterAdmission(ClusterQueue(local, ledger, cluster), on_change=on_change, gate=gate)


class ClusterQueue(AdmissionQueue):
    """``AdmissionQueue`` whose admissions also need a slot from the cluster's ledger.

    Keys must be ``(job_id, phase_id)``. Local decisions (turns, retries first, holds, backoff,
    start limit) pick the candidates; the ledger decides which of them start, in the cluster's
    order. The ledger is called synchronously on the loop, like every store call today.
    """

    def __init__(self, limits: AdmissionLimits, ledger: AdmissionLedger, cluster: ClusterLimits, **kwargs) -> None:
        super().__init__(limits, **kwargs)
        self.ledger = ledger
        self.cluster = cluster
        self._cluster_why: dict[Hashable, tuple[QueueReason, str]] = {}
        self._marked = False  # this replica has ready marks in the ledger
        self._unreleased: set[Hashable] = set()  # releases the database did not take yet
        self.last_pass: AdmissionPass | None = None

    # -- entries ------------------------------------------------------------------------------

    def submit(self, key: Hashable, project: str, credential: str = "", *, attempt: int = 1,
               not_before: float | None = None, retry: bool = False) -> Ticket:
        ticket = super().submit(key, project, credential, attempt=attempt, not_before=not_before, retry=retry)
        job_id, phase_id = key  # type: ignore[misc]
        self._unreleased.discard(key)
        try:
            self.ledger.enqueue(job_id, phase_id, project, credential, retry=retry, limits=self.cluster)
        except LedgerFullError as exc:
            super().cancel(key)
            self._refuse(exc.scope, exc.limit, exc.waiting, "the cluster's admission queue is full")
        except StoreError:
            if retry:  # a retry is never refused: it waits here, entered again by the next pass
                log.warning("entering a retry into cluster admission failed; retrying", exc_info=True)
                return ticket
            super().cancel(key)
            log.warning("cluster admission unavailable", exc_info=True)
            raise RunnerError(ErrorKind.UNAVAILABLE, "ADMISSION_UNAVAILABLE",
                              "cluster admission is unavailable (the database did not answer); retry shortly",
                              {"retry_after_ms": 1000}, retry_after_s=1.0) from None
        return ticket

    def cancel(self, key: Hashable) -> bool:
        if not super().cancel(key):
            return False
        self._cluster_why.pop(key, None)
        self._ledger_release(key)
        return True

    def release(self, ticket: Ticket) -> None:
        held_a_slot = ticket.state in (TicketState.STARTING, TicketState.RUNNING)
        super().release(ticket)  # a queued ticket is cancelled: our cancel releases its ledger row
        if held_a_slot:
            self._ledger_release(ticket.key)

    def hold(self, credential: str, until: float, why: str) -> None:
        """Holds ``credential`` here and, through the ledger, on every other replica."""
        super().hold(credential, until, why)
        try:
            self.ledger.hold(credential, until - self.clock(), why)
        except StoreError:
            log.warning("sharing a rate-limit hold failed; it holds on this replica only", exc_info=True)

    def _ledger_release(self, key: Hashable) -> None:
        try:
            self.ledger.release(*key)  # type: ignore[misc]
        except StoreError:
            # Retried on every pass: a slot the database still counts must not leak.
            log.warning("releasing a cluster admission entry failed; retrying", exc_info=True)
            self._unreleased.add(key)

    # -- decisions ----------------------------------------------------------------------------

    @property
    def waiting_for_cluster(self) -> bool:
        """Entries this replica could start but the cluster holds back (re-check them later)."""
        return bool(self._cluster_why) or bool(self._unreleased)

    def pump(self) -> list[Ticket]:
        now = self._pass_clock()
        for credential in [c for c, (until, _) in self._holds.items() if until <= now]:
            del self._holds[credential]
        for key in list(self._unreleased):
            self._unreleased.discard(key)
            self._ledger_release(key)
        limits = self.limits
        room = max(0, min(limits.max_starting - self._starting, limits.max_running - self._running))
        candidates = self._candidates(now, room)
        if not candidates and not self._marked:
            self._cluster_why.clear()
            return []
        project_room = None
        if limits.max_running_per_project:
            project_room = {t.project: limits.max_running_per_project - self.running_in(t.project)
                            for t in candidates}
        try:
            result = self.ledger.admit(
                [AdmissionCandidate(*t.key, t.project) for t in candidates],  # type: ignore[misc]
                local_room=room, local_project_room=project_room, limits=self.cluster)
        except StoreError:
            log.warning("cluster admission pass failed; retrying", exc_info=True)
            self._cluster_why = {t.key: (QueueReason.SERVER_LIMIT,
                                         "cluster admission is unavailable (the database did not answer); retrying")
                                 for t in candidates}
            return []
        self.last_pass = result
        for credential, (left, why) in result.holds.items():  # another replica's holds apply here too
            AdmissionQueue.hold(self, credential, now + left, why)
        for key in result.missing:  # in this queue already: entered again, never refused
            ticket = self._tickets[key]
            try:
                self.ledger.enqueue(*key, ticket.project, ticket.credential, retry=ticket.retry, limits=NO_LIMITS)
            except StoreError:
                log.warning("entering a phase into cluster admission failed; retrying", exc_info=True)
        granted = set(result.granted)
        admitted = []
        for ticket in candidates:
            if ticket.key in granted:
                self._admit(ticket, now)
                admitted.append(ticket)
        waiting = [t for t in candidates if t.key not in granted]
        self._marked = bool(waiting)
        self._cluster_why = {t.key: self._why(t, result) for t in waiting}
        return admitted

    def _candidates(self, now: float, room: int) -> list[Ticket]:
        """The entries this replica could start now (its own limits), at most ``room``, in turn order."""
        if room <= 0:
            return []
        per_project = self.limits.max_running_per_project
        chosen: list[Ticket] = []
        for project in self._turn_order():
            share = room if not per_project else min(room, per_project - self.running_in(project))
            if share <= 0:
                continue
            startable = [t for lane in self._waiting[project] for t in lane if self._startable(t, now)]
            chosen.extend(startable[:share])
        return chosen

    def _why(self, ticket: Ticket, result: AdmissionPass) -> tuple[QueueReason, str]:
        cluster = self.cluster
        if result.waiting_for == "server":
            return QueueReason.SERVER_LIMIT, (f"phases running across the cluster: {result.running}; "
                                              f"the cluster's limit is {cluster.max_running}")
        in_project = result.running_by_project.get(ticket.project, 0)
        if cluster.max_running_per_project and in_project >= cluster.max_running_per_project:
            return QueueReason.PROJECT_LIMIT, (f"phases running in project {ticket.project!r} across the cluster: "
                                               f"{in_project}; its cluster limit is {cluster.max_running_per_project}")
        return QueueReason.SERVER_LIMIT, "waits for its turn in the cluster's queue (other replicas' phases go first)"

    def _status(self, ticket: Ticket, now: float, positions: dict[Hashable, int]) -> QueueStatus:
        status = super()._status(ticket, now, positions)
        why = self._cluster_why.get(ticket.key)
        # The local catch-all (SERVER_LIMIT) while this replica has room means the cluster holds it.
        if why is not None and status.reason is QueueReason.SERVER_LIMIT and self._running < self.limits.max_running:
            return QueueStatus(why[0], why[1], status.position, status.queued_count, status.not_before,
                               status.enqueued_at, status.attempt)
        return status


class ClusterAdmission(AsyncAdmission):
    """``AsyncAdmission`` over a ``ClusterQueue``: also woken by other replicas, with a bounded poll.

    ``kick`` (any local change, or a NOTIFY from another replica) runs a pass at once; while
    entries wait for the cluster a timer runs one more pass after 0.5 s, doubling to at most 4 s
    while nothing happens (a lost notification costs at most that).
    """

    queue: ClusterQueue

    def __init__(self, queue: ClusterQueue, **kwargs) -> None:
        super().__init__(queue, **kwargs)
        self._poll: asyncio.TimerHandle | None = None
        self._poll_delay = POLL_MIN_S
        self._wake_pending = False

    def wake(self, payload: str = "") -> None:
        """A NOTIFY from the ledger (``EventListener.on_admission_change``): run one pass soon.

        Its own releases (it ran a pass already) and other replicas' turns are ignored; wake-ups
        arriving together make one pass.
        """
        me = self.queue.ledger.replica_id
        if payload == f"released:{me}" or (payload.startswith("turn:") and payload != f"turn:{me}"):
            return
        if not self._wake_pending and not self._closed:
            self._wake_pending = True
            asyncio.get_running_loop().call_soon(self._woken)

    def _woken(self) -> None:
        self._wake_pending = False
        self.kick()

    def kick(self) -> None:
        self._poll_delay = POLL_MIN_S
        self._pass()

    def _pass(self) -> None:
        super().kick()
        self._arm_poll()

    def _polled(self) -> None:
        self._poll = None
        self._poll_delay = min(self._poll_delay * 2, POLL_MAX_S)
        self._pass()

    def _arm_poll(self) -> None:
        if self._poll is not None:
            self._poll.cancel()
            self._poll = None
        if not self._closed and self.queue.waiting_for_cluster:
            self._poll = asyncio.get_running_loop().call_later(self._poll_delay, self._polled)

    def close(self, why: str = "the server is shutting down") -> None:
        super().close(why)
        if self._poll is not None:
            self._poll.cancel()
            self._poll = None
