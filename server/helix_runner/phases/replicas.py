"""Which replica answers for a phase: the questions routing asks the application (docs/scale-out.md).

On a shared database a phase's process and recording live on the replica that owns it. The API's
routing table (``api/routing.py``) asks here which replica owns a phase (``locate``: its control
goes there while it runs, and its diff is read there once it ended), which replica a new phase should run on when this
one is full (``placement_target``) and whether a replica that refused a placed phase wrote it
(``recorded``). Everything is asked of the ``Cluster`` port; alone on its database
(``SingleNode``) a replica owns every phase and places nothing. This module is handed callables
(is the phase live here? would a new one queue here?), not the phase service, so it stays a leaf.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from helix_runner.phases.placement import Placements, PlacementTarget, choose_replica
from helix_runner.store.cluster import Cluster
from helix_runner.store.protocol import ACTIVE_STATUSES, PhaseRow, Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RemoteOwner:
    """The replica running a phase that does not run here (a shared database): where its control goes."""

    replica_id: str
    address: str
    live: bool  # its lease is current


@dataclass(frozen=True)
class Located:
    """A phase another replica owns: its row as read now, and that replica."""

    row: PhaseRow
    owner: RemoteOwner

    @property
    def running(self) -> bool:
        """The phase is not final: its process (if any) is on the owner, so is its control."""
        return self.row.status in ACTIVE_STATUSES


class Replicas:
    """This replica's view of the others, for routing; one per server."""

    def __init__(self, cluster: Cluster, store: Store, *, runs_here: Callable[[str, str], bool],
                 full_here: Callable[[], bool]):
        self.cluster = cluster
        self.store = store
        self._runs_here = runs_here  # the phase runs in this process now
        self._full_here = full_here  # a new phase would wait for this replica's own limit (or it drains)
        # Placement by free slots: the RunPhases being sent to other replicas right now (placement.py).
        self.placements = Placements()

    def locate(self, job_id: str, phase_id: str) -> Located | None:
        """The phase and the other replica that owns it (runs it, or ran it last), in two reads; None
        when it runs here, does not exist, has no owner (swept), this replica owns it, or nothing is
        shared."""
        if self._runs_here(job_id, phase_id):
            return None
        owner = self.cluster.phase_owner(job_id, phase_id)
        if owner is None or owner.replica_id is None or owner.replica_id == self.cluster.replica_id:
            return None
        row = self.store.get_phase(job_id, phase_id)
        return None if row is None else Located(row, RemoteOwner(owner.replica_id, owner.address, owner.live))

    def placement_target(self) -> PlacementTarget | None:
        """Another replica to run a new phase on, when this one would queue it for its own limit.

        None when this replica has room, is draining, or no other live replica
        has a free slot (docs/scale-out.md, "Placement by free slots").
        """
        if not self._full_here():
            return None
        try:
            replicas = self.cluster.replica_capacity()
        except Exception:  # the database's error: nothing is placed, the phase is admitted here
            log.warning("reading the replicas' capacity failed; the phase is admitted here", exc_info=True)
            return None
        return choose_replica(replicas, self.cluster.replica_id, self.placements.pending)

    def recorded(self, job_id: str, phase_id: str) -> bool:
        """Whether the phase has a row (a replica that refused a placed RunPhase may have written it)."""
        return self.store.get_phase(job_id, phase_id) is not None
