"""Placement by free slots: which replica a new phase should run on when this one is full.

A ``RunPhase`` lands on whichever replica the Service picked. When that replica would have to
queue the phase because of its *own* limit (``max_running_phases``) while another live replica
has room, the API layer forwards the RunPhase to the replica with the most room
(``api/placement.py``), which then owns, runs and streams the phase. This module only decides:
``would_queue_here`` reads the local admission queue, ``choose_replica`` picks among the
replicas' published capacities (``store/postgres_cluster.py`` ``replica_capacity``). Design and
limits: docs/scale-out.md, "Cluster admission" → "Placement by free slots".
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from helix_runner.phases.admission import AdmissionQueue


class ReplicaRoom(Protocol):
    """A replica's published capacity (implemented by ``store.postgres_cluster.ReplicaCapacity``)."""

    @property
    def replica_id(self) -> str: ...

    @property
    def address(self) -> str: ...

    @property
    def max_running(self) -> int: ...

    @property
    def active(self) -> int: ...

    @property
    def live(self) -> bool: ...


@dataclass(frozen=True)
class PlacementTarget:
    """Where to send a RunPhase: the replica, its address, and how many free slots it showed."""

    replica_id: str
    address: str
    free: int


def would_queue_here(queue: AdmissionQueue) -> bool:
    """Whether a new phase would wait for this replica's own running limit.

    Every slot is taken by a running (or starting) phase or promised to one already waiting. The
    per-project and start limits are not placement reasons: the first is rarely the binding one
    on a shared cluster, the second frees within seconds.
    """
    return queue.running + queue.queued >= queue.limits.max_running


def choose_replica(
    replicas: Iterable[ReplicaRoom], me: str, pending: Mapping[str, int] | None = None
) -> PlacementTarget | None:
    """The other live replica with the most free slots, or None when none has any.

    Excluded: this replica, replicas whose lease ran out, replicas without an address or that
    publish no capacity (0: not advertised yet, an older server, or draining). ``pending`` counts
    the phases this replica is placing on each replica right now (sent, not yet written there, so
    not in its count): they take its slots too. Ties go to the replica with fewer active phases,
    then by id (a stable choice).
    """
    pending = pending or {}
    best: tuple[tuple[int, int, str], ReplicaRoom, int] | None = None
    for replica in replicas:
        if replica.replica_id == me or not replica.live or not replica.address or replica.max_running <= 0:
            continue
        active = replica.active + pending.get(replica.replica_id, 0)
        free = replica.max_running - active
        if free <= 0:
            continue
        rank = (-free, active, replica.replica_id)
        if best is None or rank < best[0]:
            best = (rank, replica, free)
    if best is None:
        return None
    _, replica, free = best
    return PlacementTarget(replica.replica_id, replica.address, free)


class Placements:
    """The phases this replica is placing right now, per target (``choose_replica``'s ``pending``).

    A burst of RunPhases reaching a full replica reads the registry before any of them is written
    on the target; without this count they would all go to the one replica with room.
    """

    def __init__(self) -> None:
        self.pending: Counter[str] = Counter()

    @contextlib.contextmanager
    def placing(self, target: PlacementTarget) -> Iterator[None]:
        """Counts one placement on ``target`` until the target has answered (written the phase or refused)."""
        self.pending[target.replica_id] += 1
        try:
            yield
        finally:
            self.pending[target.replica_id] -= 1
            if not self.pending[target.replica_id]:
                del self.pending[target.replica_id]
