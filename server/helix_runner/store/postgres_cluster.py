"""Replicas on one PostgreSQL database: registry with heartbeat leases, phase fences, the sweep.

A replica registers itself (id, address, lease on the database's clock) and renews the lease from
a background thread. The replica that inserts a phase owns it under a fencing number; every write
of that phase's history first locks the phase row (``FOR SHARE``) and goes ahead only if the
fence is still the one this replica holds and its lease is live, so a replica that was paused
past its lease and taken over can never write that phase again. A replica whose lease ran out
registers again under a new id. The sweep marks the active phases of expired owners INTERRUPTED
under a new fence. The design, with the races it closes: docs/scale-out.md.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg_pool import ConnectionPool

from helix_runner.store.protocol import DEFAULT_LEASE_SECONDS, FencedError

# Defined with the protocol (the application handles them; the config reads the lease); imported from here too.
__all__ = ["DEFAULT_LEASE_SECONDS", "FencedError"]

log = logging.getLogger(__name__)

# Expired registry rows are kept this long (for "who owned this phase" answers), then pruned.
PRUNE_AFTER_SECONDS = 3600


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


def new_replica_id() -> str:
    """``<host>-<random>``: unique per registration, readable in logs and in the registry."""
    host = (os.environ.get("HOSTNAME") or socket.gethostname() or "replica")[:48]
    return f"{host}-{uuid.uuid4().hex[:10]}"


class ReplicaMembership:
    """This process's registration: replica id, lease, and the fences of the phases it owns."""

    def __init__(
        self,
        pool: ConnectionPool,
        *,
        replica_id: str | None = None,
        address: str = "",
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ):
        if lease_seconds <= 0:
            raise ValueError("lease_seconds must be positive")
        self.pool = pool
        self.address = address
        self.lease_seconds = lease_seconds
        self._lock = threading.Lock()
        self._fences: dict[tuple[str, str], int] = {}
        # A stable id (e.g. a StatefulSet pod's name) survives restarts; without one, each start
        # registers a new id.
        self.stable = replica_id is not None
        self._replica_id = replica_id or new_replica_id()
        # Published for placement (advertise_capacity); kept so a re-registration publishes it again.
        self.max_running = 0
        # Fences of the active phases a previous incarnation under this stable id left behind.
        self._adopted: dict[tuple[str, str], int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def replica_id(self) -> str:
        return self._replica_id

    # -- registration and lease ----------------------------------------------------------------

    def register(self, active_statuses: Sequence[str] = ()) -> None:
        """Registers at start. Under a stable id, also adopts what the previous incarnation left.

        A previous process under the same id is dead or a zombie (paused, partitioned): its active
        phases get new fences held by this process, so it may record them INTERRUPTED at once
        (``adopted``), and the zombie, whose owner id and lease now look valid, is refused by the
        fence alone.
        """
        with self.pool.connection() as conn, conn.transaction():
            self._register(conn)
            if self.stable:
                rows = conn.execute(
                    "UPDATE phases SET fence = nextval('phase_fence') WHERE owner_id = %s AND status = ANY(%s) "
                    "RETURNING job_id, phase_id, fence",
                    (self._replica_id, list(active_statuses)),
                ).fetchall()
                with self._lock:
                    for job_id, phase_id, fence in rows:
                        self._fences[(job_id, phase_id)] = fence
                        self._adopted[(job_id, phase_id)] = fence

    def _register(self, conn: psycopg.Connection) -> None:
        conn.execute(
            "INSERT INTO replicas (replica_id, address, lease_expires_at, max_running_phases) "
            "VALUES (%s, %s, now() + make_interval(secs => %s), %s) ON CONFLICT (replica_id) DO UPDATE SET "
            "address = excluded.address, started_at = now(), heartbeat_at = now(), "
            "lease_expires_at = excluded.lease_expires_at, max_running_phases = excluded.max_running_phases",
            (self._replica_id, self.address, self.lease_seconds, self.max_running),
        )

    def advertise(self, address: str) -> None:
        """Records the address other replicas forward this one's control RPCs to (known once the port is bound)."""
        self.address = address
        with self.pool.connection() as conn:
            conn.execute("UPDATE replicas SET address = %s WHERE replica_id = %s", (address, self._replica_id))

    def advertise_capacity(self, max_running: int) -> None:
        """Publishes how many phases this replica runs at most, for placement (0: place nothing here)."""
        self.max_running = max_running
        with self.pool.connection() as conn:
            conn.execute(
                "UPDATE replicas SET max_running_phases = %s WHERE replica_id = %s", (max_running, self._replica_id)
            )

    def adopted(self) -> dict[tuple[str, str], int]:
        """(job, phase) -> fence of the phases adopted at registration and not yet swept."""
        with self._lock:
            return dict(self._adopted)

    def forget_adopted(self, keys: Iterable[tuple[str, str]]) -> None:
        with self._lock:
            for key in keys:
                self._adopted.pop(key, None)

    def renew(self) -> bool:
        """Extends the lease; False when it had already run out (then everything owned is lost)."""
        with self.pool.connection() as conn:
            return self._renew(conn)

    def _renew(self, conn: psycopg.Connection) -> bool:
        cur = conn.execute(
            "UPDATE replicas SET heartbeat_at = now(), lease_expires_at = now() + make_interval(secs => %s) "
            "WHERE replica_id = %s AND lease_expires_at > now()",
            (self.lease_seconds, self._replica_id),
        )
        return cur.rowcount == 1

    def ensure_live(self, conn: psycopg.Connection) -> None:
        """Renews the lease, or registers again under a new id if it ran out (before taking a phase)."""
        if self._renew(conn):
            return
        self._reincarnate(conn)

    def _reincarnate(self, conn: psycopg.Connection) -> None:
        # The fences stay: under a new id they name an owner that is not us, so every write they
        # guard is refused until the phases are swept (a revived replica must not slip in
        # unfenced writes). Under a stable id the phases nobody swept meanwhile stay ours.
        with self._lock:
            lost = len(self._fences)
            old = self._replica_id
            if not self.stable:
                self._replica_id = new_replica_id()
        log.warning(
            "replica lease ran out; registering again under a new id",
            extra={"fields": {"old_replica_id": old, "replica_id": self._replica_id, "phases_lost": lost}},
        )
        self._register(conn)

    def expire(self) -> None:
        """Ends the lease now (clean shutdown), so other replicas may sweep at once."""
        with self.pool.connection() as conn:
            conn.execute(
                "UPDATE replicas SET lease_expires_at = now() WHERE replica_id = %s", (self._replica_id,)
            )

    def start_heartbeat(self) -> None:
        self._thread = threading.Thread(target=self._heartbeat_loop, name="replica-heartbeat", daemon=True)
        self._thread.start()

    def stop_heartbeat(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _heartbeat_loop(self) -> None:
        # A third of the lease: two renewals may fail (a slow database) before the lease runs out.
        interval = self.lease_seconds / 3
        while not self._stop.wait(interval):
            try:
                with self.pool.connection() as conn:
                    if not self._renew(conn):
                        self._reincarnate(conn)
            except psycopg.Error as exc:
                log.warning("replica heartbeat failed", extra={"fields": {"error": type(exc).__name__}})

    # -- fences --------------------------------------------------------------------------------

    def hold(self, job_id: str, phase_id: str, fence: int) -> None:
        with self._lock:
            self._fences[(job_id, phase_id)] = fence

    def release(self, job_id: str, phase_id: str) -> None:
        """Forgets a phase's fence (its run is over here); this handle cannot write it any more."""
        with self._lock:
            self._fences.pop((job_id, phase_id), None)

    def held_fence(self, job_id: str, phase_id: str) -> int | None:
        with self._lock:
            return self._fences.get((job_id, phase_id))

    def lock_for_write(
        self, cur: psycopg.Cursor, keys: Iterable[tuple[str, str]]
    ) -> tuple[set[tuple[str, str]], list[tuple[str, str]]]:
        """Locks the phases' rows until commit and splits them into (writable, refused).

        Writable: this handle holds the phase's current fence, owns it under its current replica id
        and its lease is live; or it holds no fence and the phase has no owner (never had one, or
        was swept). A phase whose owner died is written only by the sweep, which takes a new
        fence. A phase that does not exist is refused.
        ``FOR SHARE`` holds off a takeover's fence change until this transaction ends; in READ
        COMMITTED a locking read that waited sees the newest row, so it sees a new fence.
        """
        keys = list(dict.fromkeys(keys))
        if not keys:
            return set(), []
        rows = cur.execute(
            "SELECT p.job_id, p.phase_id, p.fence, p.owner_id, COALESCE(r.lease_expires_at > now(), false) "
            "FROM phases p LEFT JOIN replicas r ON r.replica_id = p.owner_id "
            "WHERE (p.job_id, p.phase_id) IN (SELECT * FROM unnest(%s::text[], %s::text[])) "
            "FOR SHARE OF p",
            ([k[0] for k in keys], [k[1] for k in keys]),
        ).fetchall()
        with self._lock:
            held = {k: self._fences.get(k) for k in keys}
            me = self._replica_id
        writable = set()
        for job_id, phase_id, fence, owner, owner_live in rows:
            mine = held[(job_id, phase_id)]
            if mine is not None:
                ok = fence == mine and owner == me and owner_live
            else:
                ok = owner is None
            if ok:
                writable.add((job_id, phase_id))
        return writable, [k for k in keys if k not in writable]

    def require_writable(
        self, cur: psycopg.Cursor, job_id: str, phase_id: str, *, missing_ok: bool = False
    ) -> bool:
        """Locks one phase for a write; FencedError if refused. Returns whether the phase exists."""
        writable, refused = self.lock_for_write(cur, [(job_id, phase_id)])
        if writable:
            return True
        if (
            missing_ok
            and cur.execute(
                "SELECT 1 FROM phases WHERE job_id = %s AND phase_id = %s", (job_id, phase_id)
            ).fetchone()
            is None
        ):
            return False
        raise FencedError(refused)

    # -- queries about the cluster ----------------------------------------------------------------

    def live_replicas(self) -> list[ReplicaRow]:
        with self.pool.connection() as conn:
            rows = conn.execute(
                "SELECT replica_id, address, started_at, heartbeat_at, lease_expires_at, true FROM replicas "
                "WHERE lease_expires_at > now() ORDER BY replica_id"
            ).fetchall()
        return [ReplicaRow(*r) for r in rows]

    def replica_capacity(self, active_statuses: Sequence[str]) -> list[ReplicaCapacity]:
        """Every registered replica with an address: its published limit, its active phases, its lease.

        One query; the active phases are counted once for all owners (through ``phases_by_status``:
        benchmarks/bench_placement.py, about 0.5 ms with 20 000 finished phases).
        """
        with self.pool.connection() as conn:
            rows = conn.execute(
                "SELECT r.replica_id, r.address, r.max_running_phases, COALESCE(c.n, 0), r.lease_expires_at > now() "
                "FROM replicas r LEFT JOIN (SELECT owner_id, count(*) AS n FROM phases "
                "WHERE status = ANY(%s) AND owner_id IS NOT NULL GROUP BY owner_id) c ON c.owner_id = r.replica_id "
                "WHERE r.address <> '' ORDER BY r.replica_id",
                (list(active_statuses),),
            ).fetchall()
        return [ReplicaCapacity(*r) for r in rows]

    def phase_owner(self, job_id: str, phase_id: str) -> PhaseOwner | None:
        """The phase's owner (for forwarding control RPCs); None if there is no such phase."""
        with self.pool.connection() as conn:
            r = conn.execute(
                "SELECT p.owner_id, COALESCE(r.address, ''), p.fence, COALESCE(r.lease_expires_at > now(), false) "
                "FROM phases p LEFT JOIN replicas r ON r.replica_id = p.owner_id "
                "WHERE p.job_id = %s AND p.phase_id = %s",
                (job_id, phase_id),
            ).fetchone()
        return PhaseOwner(*r) if r else None


def prune_expired_replicas(cur: psycopg.Cursor, active_statuses: Sequence[str]) -> int:
    """Deletes registry rows expired long ago that own no active phase; returns how many."""
    return cur.execute(
        "DELETE FROM replicas r WHERE lease_expires_at < now() - make_interval(secs => %s) "
        "AND NOT EXISTS (SELECT 1 FROM phases p WHERE p.owner_id = r.replica_id AND p.status = ANY(%s))",
        (PRUNE_AFTER_SECONDS, list(active_statuses)),
    ).rowcount
