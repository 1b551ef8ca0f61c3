"""Admission across replicas: the cluster's ledger as the local queue's grant strategy.

On a shared database (PostgreSQL) with cluster limits configured (``cluster_max_running_phases``,
``cluster_max_running_phases_per_project``, ``cluster_max_queued_phases``), an attempt starts only
when both agree: this replica's own queue (``phases/admission.py``, the machine's limits, unchanged)
and the cluster's ledger in the database (``store/postgres_admission.py``). A phase waits on the
replica that owns it (the one that received its ``RunPhase``, or the one that replica placed it
on when it was full: ``phases/placement.py``) QUEUED until the ledger grants that replica a slot;
the ledger keeps the cluster fair between projects.

``LedgerGrant`` is what the queue asks (its ``Grant``): every entry is also a ledger row (a full
cluster queue refuses with QUEUE_FULL, scope ``cluster``); each pass offers the entries the local
rules would start now and the ledger grants those the cluster's limits and order allow; an entry
that leaves the queue leaves the ledger. The queue's one pump, on one clock reading, does the rest
(turns, retries first, holds, backoff, the start limit). ``AsyncAdmission`` runs another pass when
another replica frees a slot (LISTEN/NOTIFY, ``ReplicaFeed.on_admission_change`` → ``wake``) and,
while the ledger holds entries back, on a poll that backs off from 0.5 s to 4 s (a lost
notification costs at most that). Design: docs/scale-out.md, "Cluster admission" (and "Placement
by free slots").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable

from helix_runner.config import ServerConfig
from helix_runner.domain.events import QueueReason
from helix_runner.errors import ErrorKind, RunnerError
from helix_runner.phases.admission import (
    NOTHING_GRANTED,
    AdmissionLimits,
    AdmissionQueue,
    AsyncAdmission,
    Granted,
    GrantRefused,
    QueueStatus,
    Ticket,
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

NO_LIMITS = ClusterLimits()  # an enqueue that is never refused
UNAVAILABLE = "cluster admission is unavailable (the database did not answer); retrying"


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
    """The server's admission: the ledger's grant when the database is shared and cluster limits are set.

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
    return AsyncAdmission(AdmissionQueue(local, grant=LedgerGrant(ledger, cluster)), on_change=on_change, gate=gate)


class LedgerGrant:
    """The cluster's ledger as the queue's ``Grant``: its limits and fair order decide among the
    entries this replica's own rules would start.

    Keys must be ``(job_id, phase_id)``. The ledger is called synchronously on the loop, like every
    store call today; when the database does not answer, nothing is granted and the entries wait
    (a release that failed is retried on every pass: a slot the database still counts must not leak).
    """

    def __init__(self, ledger: AdmissionLedger, limits: ClusterLimits) -> None:
        self.ledger = ledger
        self.limits = limits
        self._why: dict[Hashable, tuple[QueueReason, str]] = {}  # candidates the ledger holds back
        self._marked = False  # this replica has ready marks in the ledger
        self._unreleased: set[Hashable] = set()  # releases the database did not take yet
        self.last_pass: AdmissionPass | None = None

    @property
    def pending(self) -> bool:
        return bool(self._why) or bool(self._unreleased)

    def entered(self, ticket: Ticket) -> None:
        job_id, phase_id = ticket.key  # type: ignore[misc]
        self._unreleased.discard(ticket.key)
        try:
            self.ledger.enqueue(job_id, phase_id, ticket.project, ticket.credential, retry=ticket.retry,
                                limits=self.limits)
        except LedgerFullError as exc:
            raise GrantRefused(exc.scope, exc.limit, exc.waiting, "the cluster's admission queue is full") from None
        except StoreError:
            if ticket.retry:  # a retry is never refused: it waits here, entered again by the next pass
                log.warning("entering a retry into cluster admission failed; retrying", exc_info=True)
                return
            log.warning("cluster admission unavailable", exc_info=True)
            raise RunnerError(ErrorKind.UNAVAILABLE, "ADMISSION_UNAVAILABLE",
                              "cluster admission is unavailable (the database did not answer); retry shortly",
                              {"retry_after_ms": 1000}, retry_after_s=1.0) from None

    def left(self, ticket: Ticket) -> None:
        self._why.pop(ticket.key, None)
        self._release(ticket.key)

    def share_hold(self, credential: str, seconds: float, why: str) -> None:
        """Holds ``credential`` on every other replica through the ledger."""
        try:
            self.ledger.hold(credential, seconds, why)
        except StoreError:
            log.warning("sharing a rate-limit hold failed; it holds on this replica only", exc_info=True)

    def decide(self, candidates: list[Ticket], room: int, project_room: dict[str, int] | None) -> Granted:
        for key in list(self._unreleased):
            self._unreleased.discard(key)
            self._release(key)
        if not candidates and not self._marked:
            self._why.clear()
            return NOTHING_GRANTED
        try:
            result = self.ledger.admit(
                [AdmissionCandidate(*t.key, t.project) for t in candidates],  # type: ignore[misc]
                local_room=room, local_project_room=project_room, limits=self.limits)
        except StoreError:
            log.warning("cluster admission pass failed; retrying", exc_info=True)
            self._why = {t.key: (QueueReason.SERVER_LIMIT, UNAVAILABLE) for t in candidates}
            return NOTHING_GRANTED
        self.last_pass = result
        by_key = {t.key: t for t in candidates}
        for key in result.missing:  # queued here already: entered again, never refused
            ticket = by_key[key]
            try:
                self.ledger.enqueue(*key, ticket.project, ticket.credential, retry=ticket.retry, limits=NO_LIMITS)
            except StoreError:
                log.warning("entering a phase into cluster admission failed; retrying", exc_info=True)
        granted = set(result.granted)
        waiting = [t for t in candidates if t.key not in granted]
        self._marked = bool(waiting)
        self._why = {t.key: self._reason(t, result) for t in waiting}
        return Granted([t for t in candidates if t.key in granted], result.holds)

    def why(self, key: Hashable) -> tuple[QueueReason, str] | None:
        return self._why.get(key)

    def concerns(self, news: str) -> bool:
        """Its own releases (it ran a pass already) and other replicas' turns are not news here."""
        me = self.ledger.replica_id
        return news != f"released:{me}" and not (news.startswith("turn:") and news != f"turn:{me}")

    def _release(self, key: Hashable) -> None:
        try:
            self.ledger.release(*key)  # type: ignore[misc]
        except StoreError:
            log.warning("releasing a cluster admission entry failed; retrying", exc_info=True)
            self._unreleased.add(key)

    def _reason(self, ticket: Ticket, result: AdmissionPass) -> tuple[QueueReason, str]:
        limits = self.limits
        if result.waiting_for == "server":
            return QueueReason.SERVER_LIMIT, (f"phases running across the cluster: {result.running}; "
                                              f"the cluster's limit is {limits.max_running}")
        in_project = result.running_by_project.get(ticket.project, 0)
        if limits.max_running_per_project and in_project >= limits.max_running_per_project:
            return QueueReason.PROJECT_LIMIT, (f"phases running in project {ticket.project!r} across the cluster: "
                                               f"{in_project}; its cluster limit is {limits.max_running_per_project}")
        return QueueReason.SERVER_LIMIT, "waits for its turn in the cluster's queue (other replicas' phases go first)"
