"""Cluster admission on PostgreSQL: the queue and the limits every replica shares.

One row per phase attempt in ``admission_ledger`` (migration 0003): ``queued`` while it waits,
``running`` while it holds a cluster slot. Every call is one transaction that first takes one
transaction-scoped advisory lock, so two replicas admitting at once see each other's grants (the
limits are counted, then raised, under the lock; no double grant). Rows of replicas whose lease
ran out are deleted at the start of each pass and by the dead-replica sweep, so a crashed replica
never holds a slot longer than its lease.

Fairness is the local queue's rule (domain/fair_order.py, used by phases/admission.py too) across
the cluster: among the entries that their replica could start now but for the cluster's limits
("ready"), the project served least recently goes next (``admission_turns``), retries first, then
first come first served. A replica
grants only its own entries; when another replica's entry is next it stops and NOTIFYs
``helix_admission`` (payload ``turn:<replica>``) so that replica runs its own pass; a release
sends ``released:<replica>`` (store/postgres_notify.py delivers both).
Design and why the phase stays on the replica that received it: docs/scale-out.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from helix_runner.domain.fair_order import Turns
from helix_runner.store.cluster import AdmissionCandidate, AdmissionPass, ClusterLimits, LedgerFullError
from helix_runner.store.protocol import StoreError

log = logging.getLogger(__name__)

ADMISSION_CHANNEL = "helix_admission"
# An arbitrary constant naming "helix-runner cluster admission" among advisory locks.
_LOCK_KEY = 0x48454C4941  # "HELIA"
# A ready mark outlives a replica's admission passes (it re-marks on each, at least every few
# seconds while it waits, phases/cluster_admission.py), so only a stuck replica's marks lapse.
READY_SECONDS = 10.0

_LIVE = "EXISTS (SELECT 1 FROM replicas r WHERE r.replica_id = l.replica_id AND r.lease_expires_at > now())"


class PostgresAdmissionLedger:
    """One replica's handle on the ledger (``store.protocol.AdmissionLedger``)."""

    def __init__(self, pool: ConnectionPool, replica_id: Callable[[], str]):
        self._pool = pool
        self._replica_id = replica_id  # the registration's id (it changes if the lease was lost)

    @property
    def replica_id(self) -> str:
        return self._replica_id()

    def _transaction(self, work):
        try:
            with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
                return work(cur)
        except (psycopg.Error, PoolTimeout) as exc:
            raise StoreError(f"cluster admission: {type(exc).__name__}") from exc

    def enqueue(self, job_id: str, phase_id: str, project: str, credential: str, *, retry: bool,
                limits: ClusterLimits) -> None:
        def work(cur: psycopg.Cursor) -> None:
            _drop_dead(cur)
            if not retry and limits.max_queued:
                waiting = cur.execute(
                    "SELECT count(*) FROM admission_ledger WHERE state = 'queued' AND NOT retry"
                ).fetchone()[0]
                if waiting >= limits.max_queued:
                    raise LedgerFullError("cluster", limits.max_queued, waiting)
            cur.execute(
                "INSERT INTO admission_ledger (job_id, phase_id, replica_id, project_id, credential, state, retry) "
                "VALUES (%s, %s, %s, %s, %s, 'queued', %s) ON CONFLICT (job_id, phase_id) DO UPDATE SET "
                "replica_id = excluded.replica_id, state = 'queued', retry = excluded.retry, "
                "enqueued_at = now(), admitted_at = NULL, ready_until = NULL, seq = nextval("
                "pg_get_serial_sequence('admission_ledger', 'seq')) "
                # Another replica's row for the same phase is left alone: that request is about to be
                # refused ALREADY_EXISTS, and its release must not free the other replica's slot.
                "WHERE admission_ledger.replica_id = excluded.replica_id",
                (job_id, phase_id, self.replica_id, project, credential, retry),
            )

        self._transaction(work)

    def admit(self, candidates: Sequence[AdmissionCandidate], *, local_room: int,
              local_project_room: dict[str, int] | None, limits: ClusterLimits) -> AdmissionPass:
        me = self.replica_id

        def work(cur: psycopg.Cursor) -> AdmissionPass:
            _drop_dead(cur)
            # This replica's ready set is exactly this pass's candidates.
            # (Only rows that are candidates or were marked: a long queue is not rewritten on every pass.)
            cur.execute(
                "WITH c AS (SELECT * FROM unnest(%s::text[], %s::text[]) AS c(job_id, phase_id)) "
                "UPDATE admission_ledger l SET ready_until = CASE WHEN (l.job_id, l.phase_id) IN "
                "(SELECT job_id, phase_id FROM c) THEN now() + make_interval(secs => %s) END "
                "WHERE l.replica_id = %s AND l.state = 'queued' AND (l.ready_until IS NOT NULL OR "
                "(l.job_id, l.phase_id) IN (SELECT job_id, phase_id FROM c))",
                ([c.job_id for c in candidates], [c.phase_id for c in candidates], READY_SECONDS, me),
            )
            present = {(j, p) for j, p in cur.execute(
                "SELECT job_id, phase_id FROM admission_ledger WHERE replica_id = %s AND state = 'queued'", (me,)
            ).fetchall()}
            missing = tuple((c.job_id, c.phase_id) for c in candidates if (c.job_id, c.phase_id) not in present)
            running_by_project: dict[str, int] = dict(cur.execute(
                "SELECT project_id, count(*) FROM admission_ledger WHERE state = 'running' GROUP BY project_id"
            ).fetchall())
            queued = cur.execute("SELECT count(*) FROM admission_ledger WHERE state = 'queued'").fetchone()[0]
            cur.execute("DELETE FROM admission_holds WHERE until <= now()")
            holds = {credential: (float(left), why) for credential, left, why in cur.execute(
                "SELECT credential, extract(epoch FROM until - now()), why FROM admission_holds"
            ).fetchall()}
            ready = cur.execute(
                "SELECT job_id, phase_id, replica_id, project_id, seq FROM admission_ledger "
                "WHERE state = 'queued' AND ready_until > now() AND credential <> ALL(%s) ORDER BY retry DESC, seq",
                (list(holds),),
            ).fetchall()
            lanes: dict[str, list[tuple]] = {}
            for row in ready:
                lanes.setdefault(row[3], []).append(row)
            served = dict(cur.execute(
                "SELECT project_id, last_served FROM admission_turns WHERE project_id = ANY(%s)", (list(lanes),)
            ).fetchall())
            # The fair order (domain/fair_order.py); a project never served goes by its oldest ready entry.
            turns = Turns(lanes, served, {p: min(r[4] for r in rows) for p, rows in lanes.items()})
            room = local_room
            project_room = dict(local_project_room) if local_project_room is not None else None
            running = sum(running_by_project.values())
            granted: list[tuple[str, str]] = []
            unready: list[tuple[str, str]] = []
            waiting_for = ""

            def not_mine(row: tuple) -> bool:
                return row[2] != me

            per_project = limits.max_running_per_project
            while turns:
                if limits.max_running and running >= limits.max_running:
                    waiting_for = "server"
                    break
                project = turns.next(lambda p: not per_project or running_by_project.get(p, 0) < per_project)
                if project is None:
                    waiting_for = "project"
                    break
                job_id, phase_id, replica, _, _ = turns.head(project)
                if replica != me:
                    waiting_for = "turn"
                    cur.execute("SELECT pg_notify(%s, %s)", (ADMISSION_CHANNEL, f"turn:{replica}"))
                    break
                # This replica cannot start these after all: out of this pass, and not ready for others'.
                if room <= 0:  # no room left here: the next entry may be another replica's
                    unready.extend((r[0], r[1]) for r in turns.drop(not_mine))
                    continue
                if project_room is not None and project_room.get(project, 0) <= 0:
                    unready.extend((r[0], r[1]) for r in turns.drop(not_mine, project))  # its own limit here
                    continue
                cur.execute(
                    "UPDATE admission_ledger SET state = 'running', admitted_at = now(), ready_until = NULL "
                    "WHERE job_id = %s AND phase_id = %s",
                    (job_id, phase_id),
                )
                turn = cur.execute(
                    "INSERT INTO admission_turns (project_id, last_served) VALUES (%s, nextval('admission_turn')) "
                    "ON CONFLICT (project_id) DO UPDATE SET last_served = excluded.last_served RETURNING last_served",
                    (project,),
                ).fetchone()[0]
                turns.take(project, turn)
                granted.append((job_id, phase_id))
                running += 1
                running_by_project[project] = running_by_project.get(project, 0) + 1
                room -= 1
                if project_room is not None:
                    project_room[project] -= 1
            if unready:
                cur.execute(
                    "UPDATE admission_ledger SET ready_until = NULL WHERE (job_id, phase_id) IN "
                    "(SELECT * FROM unnest(%s::text[], %s::text[]))",
                    ([j for j, _ in unready], [p for _, p in unready]),
                )
            return AdmissionPass(tuple(granted), waiting_for, running, running_by_project, queued - len(granted),
                                 holds, missing)

        return self._transaction(work)

    def release(self, job_id: str, phase_id: str) -> bool:
        def work(cur: psycopg.Cursor) -> bool:
            gone = cur.execute(
                "DELETE FROM admission_ledger WHERE job_id = %s AND phase_id = %s AND replica_id = %s "
                "RETURNING state", (job_id, phase_id, self.replica_id),
            ).fetchone()
            if gone is not None:
                # Some replica may start a phase now (a slot, or another's turn, freed up).
                cur.execute("SELECT pg_notify(%s, %s)", (ADMISSION_CHANNEL, f"released:{self.replica_id}"))
            return gone is not None

        return self._transaction(work)

    def hold(self, credential: str, seconds: float, why: str) -> None:
        def work(cur: psycopg.Cursor) -> None:
            cur.execute(
                "INSERT INTO admission_holds (credential, until, why) "
                "VALUES (%s, now() + make_interval(secs => %s), %s) ON CONFLICT (credential) DO UPDATE SET "
                "until = excluded.until, why = excluded.why WHERE admission_holds.until < excluded.until",
                (credential, max(0.0, seconds), why[:1024]),
            )

        self._transaction(work)

    def clear(self) -> int:
        def work(cur: psycopg.Cursor) -> int:
            n = cur.execute("DELETE FROM admission_ledger WHERE replica_id = %s", (self.replica_id,)).rowcount
            if n:
                cur.execute("SELECT pg_notify(%s, %s)", (ADMISSION_CHANNEL, f"released:{self.replica_id}"))
            return n

        return self._transaction(work)

    def entries(self) -> list[tuple[str, str, str, str, str]]:
        """(job_id, phase_id, replica_id, project_id, state) of every entry, in arrival order (tests, status)."""
        with self._pool.connection() as conn:
            return [tuple(r) for r in conn.execute(
                "SELECT job_id, phase_id, replica_id, project_id, state FROM admission_ledger ORDER BY seq"
            ).fetchall()]


def _drop_dead(cur: psycopg.Cursor) -> int:
    """Deletes the entries of replicas whose lease ran out (they would otherwise hold slots)."""
    n = cur.execute(f"DELETE FROM admission_ledger l WHERE NOT {_LIVE}").rowcount
    if n:
        log.warning("released cluster admission entries of replicas that are gone", extra={"fields": {"count": n}})
    return n


def drop_dead_entries(cur: psycopg.Cursor) -> int:
    """For the dead-replica sweep (PostgresCluster.sweep_expired_owners): the same, in its transaction."""
    return _drop_dead(cur)
