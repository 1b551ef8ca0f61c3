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

import functools
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Sequence

import psycopg
from psycopg_pool import ConnectionPool

from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.store.cluster import Interrupt, PhaseOwner, ReplicaCapacity, ReplicaRow, SweepOutbox
from helix_runner.store.postgres_admission import PostgresAdmissionLedger, drop_dead_entries
from helix_runner.store.postgres_handover import PostgresHandover
from helix_runner.store.postgres_notify import EventListener, EventPointer, notify
from helix_runner.store.protocol import DEFAULT_LEASE_SECONDS, FencedError, PhaseRow, Store
from helix_runner.store.rows import phase_row, phase_value
from helix_runner.store.sql_store import (
    ACTIVE,
    PHASE_COLUMNS,
    POSTGRESQL,
    SELECT_PHASES,
    insert_outbox,
    mark_unfinished,
)

# Defined with the protocol (the application handles them; the config reads the lease); imported from here too.
__all__ = ["DEFAULT_LEASE_SECONDS", "FencedError"]

log = logging.getLogger(__name__)

# Expired registry rows are kept this long (for "who owned this phase" answers), then pruned.
PRUNE_AFTER_SECONDS = 3600


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
        writable, _ = self.lock_phases(cur, keys)
        return writable, [k for k in keys if k not in writable]

    def lock_phases(
        self, cur: psycopg.Cursor, keys: Sequence[tuple[str, str]]
    ) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
        """``lock_for_write`` answering (writable, existing): the phases this handle may write, and
        those that exist at all. One statement (its rows are the round trip a pipeline waits for)."""
        if not keys:
            return set(), set()
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
        writable, existing = set(), set()
        for job_id, phase_id, fence, owner, owner_live in rows:
            existing.add((job_id, phase_id))
            mine = held[(job_id, phase_id)]
            if mine is not None:
                ok = fence == mine and owner == me and owner_live
            else:
                ok = owner is None
            if ok:
                writable.add((job_id, phase_id))
        return writable, existing

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


class PostgresCluster:
    """The ``Cluster`` port on a shared PostgreSQL database: this replica among the others.

    Made by ``PostgresStore`` with its registration (``ReplicaMembership``); it reads the registry,
    keeps the cluster admission ledger (``postgres_admission``), sweeps the phases of replicas that
    are gone, and hands out the LISTEN connection (``postgres_notify.EventListener``) that brings
    the other replicas' news.
    """

    shared = True

    def __init__(self, store: Store, membership: ReplicaMembership, conninfo: str):
        self._store = store
        self.replica = membership
        self._pool = membership.pool
        self._conninfo = conninfo

    @property
    def replica_id(self) -> str:
        return self.replica.replica_id

    def renew_lease(self) -> bool:
        """Extends this replica's lease now (the heartbeat thread does this every third of it)."""
        return self.replica.renew()

    def live_replicas(self) -> list[ReplicaRow]:
        return self.replica.live_replicas()

    def advertise(self, address: str) -> None:
        """This replica's gRPC address in the registry, for control RPCs forwarded to it."""
        self.replica.advertise(address)

    def phase_owner(self, job_id: str, phase_id: str) -> PhaseOwner | None:
        return self.replica.phase_owner(job_id, phase_id)

    def advertise_capacity(self, max_running: int) -> None:
        """This replica's local limit in the registry, for placement by free slots (0: place nothing here)."""
        self.replica.advertise_capacity(max_running)

    def replica_capacity(self) -> list[ReplicaCapacity]:
        """Registered replicas with an address: their room for new phases (docs/scale-out.md, placement)."""
        return self.replica.replica_capacity(ACTIVE)

    @functools.cached_property
    def _ledger(self) -> PostgresAdmissionLedger:
        return PostgresAdmissionLedger(self._pool, lambda: self.replica.replica_id)

    def admission_ledger(self) -> PostgresAdmissionLedger:
        """The cluster-wide admission queue and limits, kept in this database (one per replica)."""
        return self._ledger

    @functools.cached_property
    def _handover(self) -> PostgresHandover:
        return PostgresHandover(self._pool, self.replica, ACTIVE)

    def handover(self) -> PostgresHandover:
        """Durable phase state and hand-over between replicas (docs/scale-out.md "Hand-over")."""
        return self._handover

    def feed(self) -> EventListener:
        """This replica's LISTEN connection (not started): other replicas' events and admission changes."""
        return EventListener(self._conninfo, store=self._store)


    def sweep_expired_owners(self, interrupt: Interrupt, *, limit: int = 100,
                             outbox: SweepOutbox | None = None) -> list[PhaseRow]:
        """Marks active phases whose owner's lease ran out INTERRUPTED; returns them as they were.

        Also the phases this replica adopted from its previous incarnation (a stable replica id):
        their process died with that incarnation.

        One transaction: the phases are locked ``FOR UPDATE SKIP LOCKED`` (replicas sweeping at once
        split the work; a phase its stale owner is still writing waits for the next sweep), each
        gets the terminal event from ``interrupt`` at its last sequence + 1, its RUNNING/HELD tool
        calls become UNFINISHED, and it gets status INTERRUPTED, no owner and a new fence, so its
        old owner's writes are refused from now on.
        """
        now = time.time_ns()
        adopted = list(self.replica.adopted().values())
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            rows = [
                phase_row(r)
                for r in cur.execute(
                    f"{SELECT_PHASES} WHERE p.status = ANY(%s) AND (p.owner_id IS NULL OR NOT EXISTS "
                    "(SELECT 1 FROM replicas r WHERE r.replica_id = p.owner_id AND r.lease_expires_at > now()) "
                    "OR (p.owner_id = %s AND p.fence = ANY(%s::bigint[]))) "
                    # A phase that can move is claimed by a live replica instead (postgres_handover.py).
                    "AND NOT EXISTS (SELECT 1 FROM phase_handover h WHERE h.job_id = p.job_id "
                    "AND h.phase_id = p.phase_id AND h.movable) "
                    "ORDER BY p.create_time_ns LIMIT %s FOR UPDATE OF p SKIP LOCKED",
                    (ACTIVE, self.replica.replica_id, adopted, limit),
                ).fetchall()
            ]
            pointers = []
            for row in rows:
                seq = row.last_sequence + 1
                event, values = interrupt(row, seq)
                if event.sequence != seq:
                    raise ValueError(f"the terminal event must have sequence {seq}, not {event.sequence}")
                values = {**values, "status": PhaseStatus.INTERRUPTED}
                unknown = set(values) - set(PHASE_COLUMNS)
                if unknown:
                    raise ValueError(f"unknown phase columns: {sorted(unknown)}")
                values = {k: phase_value(k, v) for k, v in values.items()}
                cur.execute(
                    "INSERT INTO events (job_id, phase_id, sequence, receive_time_ns, kind, body) "
                    "VALUES (%s,%s,%s,%s,%s,%s)",
                    (row.job_id, row.phase_id, event.sequence, event.receive_time_ns, event.kind, event.body),
                )
                if outbox is not None:  # the webhook deliveries the terminal event causes
                    insert_outbox(POSTGRESQL, cur, outbox(row, seq))
                mark_unfinished(POSTGRESQL, cur, row.job_id, row.phase_id)
                sets = ",".join(f"{k} = %s" for k in values)
                cur.execute(
                    f"UPDATE phases SET {sets}, owner_id = NULL, fence = nextval('phase_fence') "
                    "WHERE job_id = %s AND phase_id = %s",
                    [*values.values(), row.job_id, row.phase_id],
                )
                cur.execute(
                    "UPDATE jobs SET status = %s, update_time_ns = %s WHERE job_id = %s AND %s = "
                    "(SELECT phase_id FROM phases WHERE job_id = %s ORDER BY ordinal DESC LIMIT 1)",
                    (PhaseStatus.INTERRUPTED.name, now, row.job_id, row.phase_id, row.job_id),
                )
                pointers.append(EventPointer(row.job_id, row.phase_id, seq))
            _bump_view_versions(cur, {r.job_id for r in rows})
            notify(cur, pointers)
            drop_dead_entries(cur)  # cluster admission: a gone replica holds no slot (postgres_admission.py)
            prune_expired_replicas(cur, ACTIVE)
        self.replica.forget_adopted((r.job_id, r.phase_id) for r in rows)
        for row in rows:
            log.warning(
                "phase interrupted: the replica that ran it is gone",
                extra={"fields": {"job_id": row.job_id, "phase_id": row.phase_id, "was": row.status.name}},
            )
        return rows


def _bump_view_versions(cur: psycopg.Cursor, job_ids: Iterable[str]) -> None:
    """Bumps ``jobs.view_version`` of these jobs in the sweep's transaction (``JobRow.view_version``),
    locking them in job-id order first, so two sweeps over the same jobs cannot deadlock on their rows."""
    ids = sorted(job_ids)
    if ids:
        cur.execute(
            "UPDATE jobs SET view_version = view_version + 1 WHERE job_id IN "
            "(SELECT job_id FROM jobs WHERE job_id = ANY(%s) ORDER BY job_id FOR NO KEY UPDATE)",
            (ids,),
        )


def prune_expired_replicas(cur: psycopg.Cursor, active_statuses: Sequence[str]) -> int:
    """Deletes registry rows expired long ago that own no active phase; returns how many."""
    return cur.execute(
        "DELETE FROM replicas r WHERE lease_expires_at < now() - make_interval(secs => %s) "
        "AND NOT EXISTS (SELECT 1 FROM phases p WHERE p.owner_id = r.replica_id AND p.status = ANY(%s))",
        (PRUNE_AFTER_SECONDS, list(active_statuses)),
    ).rowcount
