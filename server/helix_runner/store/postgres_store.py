"""PostgreSQL persistence with the public methods and semantics of ``SqliteStore``, for many replicas.

Plain data in, plain data out, like the SQLite store: the row types are shared and nested values
arrive already encoded. Each method is one transaction on a connection from a psycopg 3
``ConnectionPool``: the interface is synchronous today (called from the event loop, with appends
group-committed by ``event_log.EventWriter``), and psycopg's async pool takes over unchanged SQL
when it becomes async (docs/scale-out.md, "Driver"). What SQLite does not need: every write of a
phase's history is fenced (``postgres_cluster``), and appends NOTIFY other replicas
(``postgres_notify``).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import fields
from enum import Enum

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool, PoolTimeout

from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.tool_tracker import ToolCallStatus, ToolStats
from helix_runner.store.postgres_admission import PostgresAdmissionLedger, drop_dead_entries
from helix_runner.store.postgres_cluster import (
    DEFAULT_LEASE_SECONDS,
    FencedError,
    PhaseOwner,
    ReplicaCapacity,
    ReplicaMembership,
    ReplicaRow,
    prune_expired_replicas,
)
from helix_runner.store.postgres_migrations import migrate_from
from helix_runner.store.postgres_notify import EventPointer, notify
from helix_runner.store.protocol import (
    ACTIVE_STATUSES,
    FINISHED_TOOL_STATUSES,
    AlreadyExistsError,
    EventRow,
    JobRow,
    ModelCostRow,
    PhaseCostSums,
    PhaseRow,
    StoreError,
    ToolCallRow,
)
from helix_runner.store.rows import (
    job_row,
    model_cost_row,
    model_cost_values,
    phase_row,
    phase_value,
    tool_call_row,
)

log = logging.getLogger(__name__)

# PhaseRow fields are the phases table's columns; last_sequence, the last field, is derived on read
# (the phase's highest event sequence), as in SqliteStore.
_PHASE_COLUMNS = tuple(f.name for f in fields(PhaseRow))[:-1]
assert fields(PhaseRow)[-1].name == "last_sequence"
_SELECT_PHASES = (
    f"SELECT {','.join('p.' + c for c in _PHASE_COLUMNS)}, (SELECT COALESCE(MAX(e.sequence), 0) FROM events e "
    "WHERE e.job_id = p.job_id AND e.phase_id = p.phase_id) FROM phases p"
)
# Statuses are stored by their enum names (as in SqliteStore), so both databases read alike.
_ACTIVE = [s.name for s in ACTIVE_STATUSES]
_FINISHED = [s.name for s in FINISHED_TOOL_STATUSES]
_JOB_COLUMNS = "job_id, project_id, status, create_time_ns, update_time_ns, view_version"
# A job row with its sequence_sum (JobRow): one MAX seek per phase (the events primary key).
_SELECT_JOBS = (
    f"SELECT {_JOB_COLUMNS}, (SELECT COALESCE(SUM((SELECT MAX(e.sequence) FROM events e WHERE "
    "e.job_id = p.job_id AND e.phase_id = p.phase_id)), 0)::bigint FROM phases p WHERE p.job_id = jobs.job_id) FROM jobs"
)
# Finished calls migration 2 found without a duration (backfill_tool_call_durations drops it when done).
_BACKFILL_INDEX = "tool_calls_duration_backfill"

# An interrupt callback gets the phase and the sequence its terminal event must carry; it returns
# that event and the phase's other new columns (reason, end time, encoded result).
Interrupt = Callable[[PhaseRow, int], tuple[EventRow, dict[str, object]]]



def _names(statuses: Iterable[Enum]) -> list[str]:
    return [s.name for s in statuses]


def _scope(
    project_id: str | None, job_ids: Sequence[str], phase_id: str | None
) -> tuple[list[str], list[object]]:
    """WHERE terms for a cost scope: one phase (one job + phase), jobs, or a project."""
    if job_ids:
        terms, args = ["job_id = ANY(%s)"], [list(job_ids)]
        if phase_id:
            terms.append("phase_id = %s")
            args.append(phase_id)
        return terms, args
    if project_id is not None:
        return ["project_id = %s"], [project_id]
    return [], []


def _bump_view_versions(cur: psycopg.Cursor, job_ids: Iterable[str]) -> None:
    """Bumps ``jobs.view_version`` of these jobs, inside the write's own transaction.

    As in ``SqliteStore``: every write that changes what a job's view shows (appended events
    aside: ``JobRow.sequence_sum``) calls this, so a view cached by any replica under the old
    version is not served once the write commits. Several jobs (a takeover's sweep) are locked in
    job-id order first, so two transactions over the same jobs cannot deadlock on the job rows.
    """
    ids = sorted(job_ids)
    if len(ids) == 1:
        cur.execute("UPDATE jobs SET view_version = view_version + 1 WHERE job_id = %s", (ids[0],))
    elif ids:
        cur.execute(
            "UPDATE jobs SET view_version = view_version + 1 WHERE job_id IN "
            "(SELECT job_id FROM jobs WHERE job_id = ANY(%s) ORDER BY job_id FOR NO KEY UPDATE)",
            (ids,),
        )


class PostgresStore:
    """One replica's handle on the shared database: pooled connections, its registration, its fences."""

    def __init__(
        self,
        conninfo: str,
        *,
        replica_id: str | None = None,
        address: str = "",
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        pool_size: int = 4,
        connect_timeout: float = 10.0,
        heartbeat: bool = True,
    ):
        self.conninfo = conninfo
        self._pool = ConnectionPool(
            conninfo,
            min_size=1,
            max_size=max(2, pool_size),
            open=False,
            kwargs={"autocommit": False},
            name="helix-store",
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
            with self._pool.connection() as conn:
                # migrated_from: the version an existing database had if this start migrated it.
                self.schema_version, self.migrated_from = migrate_from(conn)
            self.replica = ReplicaMembership(
                self._pool, replica_id=replica_id, address=address, lease_seconds=lease_seconds
            )
            self.replica.register(_ACTIVE)
        except (psycopg.Error, PoolTimeout) as exc:
            self._pool.close()
            raise StoreError(f"cannot open the PostgreSQL database: {_describe(exc)}") from None
        except BaseException:
            self._pool.close()
            raise
        if heartbeat:
            self.replica.start_heartbeat()

    def close(self) -> None:
        self.replica.stop_heartbeat()
        try:
            self.replica.expire()
        except (psycopg.Error, PoolTimeout):
            pass  # the lease runs out by itself
        self._pool.close()

    @property
    def replica_id(self) -> str:
        return self.replica.replica_id

    def backfill_tool_call_durations(
        self, duration_of: Callable[[bytes], int | None], batch: int = 1000
    ) -> int:
        """Fills in the duration of finished calls recorded before migration 2 (only in their body).

        As ``SqliteStore.backfill_tool_call_durations``: ``duration_of`` decodes a body; runs while
        the ``tool_calls_duration_backfill`` index exists (made by migration 2), then drops it.
        Finished calls are never rewritten by their phase, so this needs no fence; replicas doing
        it at once write the same values. Returns the number of calls filled in.
        """
        with self._pool.connection() as conn:
            (pending,) = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (_BACKFILL_INDEX,)).fetchone()
        if not pending:
            return 0
        filled, last = 0, ("", "", "")
        while True:
            with self._pool.connection() as conn:
                rows = conn.execute(
                    "SELECT job_id, phase_id, tool_use_id, body FROM tool_calls WHERE duration_ns IS NULL "
                    "AND status = ANY(%s) AND (job_id, phase_id, tool_use_id) > (%s, %s, %s) "
                    "ORDER BY job_id, phase_id, tool_use_id LIMIT %s",
                    (_FINISHED, *last, batch),
                ).fetchall()
            if not rows:
                break
            last = rows[-1][:3]
            updates = [(d, j, p, t) for j, p, t, body in rows if (d := duration_of(body)) is not None]
            with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
                cur.executemany(
                    "UPDATE tool_calls SET duration_ns = %s WHERE job_id = %s AND phase_id = %s AND tool_use_id = %s",
                    updates,
                )
            filled += len(updates)
        with self._pool.connection() as conn:
            conn.execute(f"DROP INDEX IF EXISTS {_BACKFILL_INDEX}")
        return filled

    # -- jobs -------------------------------------------------------------------------------

    def get_or_create_job(self, job_id: str, project_id: str, now_ns: int) -> tuple[JobRow, bool]:
        """Returns the job, creating it on first use; the bool says whether it was created."""
        with self._pool.connection() as conn:
            created = conn.execute(
                f"INSERT INTO jobs ({_JOB_COLUMNS}) VALUES (%s,%s,'PENDING',%s,%s,0) ON CONFLICT (job_id) DO NOTHING "
                f"RETURNING {_JOB_COLUMNS}",
                (job_id, project_id, now_ns, now_ns),
            ).fetchone()
            if created:
                return job_row(created), True
            return self._job(conn, job_id), False

    def get_job(self, job_id: str) -> JobRow | None:
        with self._pool.connection() as conn:
            return self._job(conn, job_id)

    @staticmethod
    def _job(conn: psycopg.Connection, job_id: str) -> JobRow | None:
        r = conn.execute(f"{_SELECT_JOBS} WHERE job_id = %s", (job_id,)).fetchone()
        return job_row(r) if r else None

    def list_jobs(
        self,
        project_id: str | None,
        statuses: Sequence[PhaseStatus],
        limit: int,
        after: tuple[int, str] | None = None,
    ) -> list[JobRow]:
        """Jobs newest first; ``after`` is the (create_time_ns, job_id) of the last row of the previous page."""
        where, args = [], []
        if project_id:
            where.append("project_id = %s")
            args.append(project_id)
        if statuses:
            where.append("status = ANY(%s)")
            args.append(_names(statuses))
        if after is not None:
            where.append("(create_time_ns, job_id) < (%s, %s)")
            args.extend([after[0], after[1]])
        sql = _SELECT_JOBS
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY create_time_ns DESC, job_id DESC LIMIT %s"
        args.append(limit)
        with self._pool.connection() as conn:
            return [job_row(r) for r in conn.execute(sql, args).fetchall()]

    # -- phases -----------------------------------------------------------------------------

    def insert_phase(self, row: PhaseRow) -> PhaseRow:
        """Inserts a new phase owned by this replica (ordinal and fence assigned here); it becomes the job's latest."""
        cols = [c for c in _PHASE_COLUMNS if c != "ordinal"]
        values = [phase_value(c, getattr(row, c)) for c in cols]
        try:
            with self._pool.connection() as conn, conn.transaction():
                self.replica.ensure_live(conn)
                # The job row lock serialises ordinals across replicas adding phases to one job.
                if (
                    conn.execute("SELECT 1 FROM jobs WHERE job_id = %s FOR UPDATE", (row.job_id,)).fetchone()
                    is None
                ):
                    raise StoreError(f"job {row.job_id} does not exist")
                (count,) = conn.execute(
                    "SELECT COUNT(*) FROM phases WHERE job_id = %s", (row.job_id,)
                ).fetchone()
                (fence,) = conn.execute(
                    f"INSERT INTO phases ({','.join(cols)}, ordinal, owner_id, fence) "
                    f"VALUES ({','.join(['%s'] * len(cols))}, %s, %s, nextval('phase_fence')) RETURNING fence",
                    [*values, count + 1, self.replica.replica_id],
                ).fetchone()
                conn.execute(
                    "UPDATE jobs SET status = %s, update_time_ns = %s, view_version = view_version + 1 "
                    "WHERE job_id = %s",
                    (row.status.name, row.create_time_ns, row.job_id),
                )
        except pg_errors.UniqueViolation:
            raise AlreadyExistsError(f"phase {row.phase_id} already exists in job {row.job_id}") from None
        row.ordinal = count + 1
        self.replica.hold(row.job_id, row.phase_id, fence)
        return row

    def update_phase(self, job_id: str, phase_id: str, now_ns: int, **values: object) -> None:
        """Updates phase columns; a status change also becomes the job's status if this is its latest phase."""
        unknown = set(values) - set(_PHASE_COLUMNS)
        if unknown:
            raise ValueError(f"unknown phase columns: {sorted(unknown)}")
        if not values:
            return
        values = {k: phase_value(k, v) for k, v in values.items()}
        sets = ",".join(f"{k} = %s" for k in values)
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            exists = self.replica.require_writable(cur, job_id, phase_id, missing_ok=True)
            cur.execute(
                f"UPDATE phases SET {sets} WHERE job_id = %s AND phase_id = %s",
                [*values.values(), job_id, phase_id],
            )
            if "status" in values:
                cur.execute(
                    "UPDATE jobs SET status = %s, update_time_ns = %s WHERE job_id = %s AND %s = "
                    "(SELECT phase_id FROM phases WHERE job_id = %s ORDER BY ordinal DESC LIMIT 1)",
                    (values["status"], now_ns, job_id, phase_id, job_id),
                )
                _bump_view_versions(cur, [job_id])  # also when it is not the latest phase
            else:
                cur.execute(
                    "UPDATE jobs SET update_time_ns = %s, view_version = view_version + 1 WHERE job_id = %s",
                    (now_ns, job_id),
                )
            if exists and ("status" in values or "result_pb" in values):
                # Wakes followers on other replicas: a phase's end is news even without a new event.
                self._notify_current(cur, job_id, phase_id)

    @staticmethod
    def _notify_current(cur: psycopg.Cursor, job_id: str, phase_id: str) -> None:
        (last,) = cur.execute(
            "SELECT COALESCE(MAX(sequence), 0) FROM events WHERE job_id = %s AND phase_id = %s",
            (job_id, phase_id),
        ).fetchone()
        notify(cur, [EventPointer(job_id, phase_id, last)])

    def get_phase(self, job_id: str, phase_id: str) -> PhaseRow | None:
        with self._pool.connection() as conn:
            r = conn.execute(
                f"{_SELECT_PHASES} WHERE p.job_id = %s AND p.phase_id = %s", (job_id, phase_id)
            ).fetchone()
        return phase_row(r) if r else None

    def phases_of_jobs(self, job_ids: Sequence[str]) -> list[PhaseRow]:
        """The phases of all these jobs in one query, by job then ordinal."""
        if not job_ids:
            return []
        with self._pool.connection() as conn:
            rows = conn.execute(
                f"{_SELECT_PHASES} WHERE p.job_id = ANY(%s) ORDER BY p.job_id, p.ordinal", (list(job_ids),)
            ).fetchall()
        return [phase_row(r) for r in rows]

    def active_phases(self) -> list[PhaseRow]:
        """Phases whose status is not final, on every replica (for takeover: ``sweep_expired_owners``)."""
        with self._pool.connection() as conn:
            rows = conn.execute(f"{_SELECT_PHASES} WHERE p.status = ANY(%s)", (_ACTIVE,)).fetchall()
        return [phase_row(r) for r in rows]

    # -- events -----------------------------------------------------------------------------

    def append_events(self, batches: Sequence[tuple[str, str, Sequence[EventRow]]]) -> None:
        """Appends the events of one or more phases in one transaction (group commit), then notifies.

        Phases this replica may not write are left out and named by the ``FencedError`` raised
        after the others were committed.
        """
        batches = [b for b in batches if b[2]]
        if not batches:
            return
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            writable, refused = self.replica.lock_for_write(cur, [(j, p) for j, p, _ in batches])
            cols: tuple[list, ...] = ([], [], [], [], [], [])
            last: dict[tuple[str, str], int] = {}
            for job_id, phase_id, events in batches:
                if (job_id, phase_id) not in writable:
                    continue
                for e in events:
                    for col, v in zip(
                        cols, (job_id, phase_id, e.sequence, e.receive_time_ns, e.kind, e.body), strict=True
                    ):
                        col.append(v)
                last[(job_id, phase_id)] = max(last.get((job_id, phase_id), 0), events[-1].sequence)
            if last:
                # One statement for the whole group commit, whatever its size.
                cur.execute(
                    "INSERT INTO events (job_id, phase_id, sequence, receive_time_ns, kind, body) "
                    "SELECT * FROM unnest(%s::text[], %s::text[], %s::bigint[], %s::bigint[], %s::text[], %s::bytea[])",
                    cols,
                )
                notify(cur, [EventPointer(j, p, s) for (j, p), s in last.items()])
        if refused:
            raise FencedError(refused)

    def read_events(self, job_id: str, phase_id: str, after_sequence: int, limit: int) -> list[EventRow]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT sequence, receive_time_ns, kind, body FROM events "
                "WHERE job_id = %s AND phase_id = %s AND sequence > %s ORDER BY sequence LIMIT %s",
                (job_id, phase_id, after_sequence, limit),
            ).fetchall()
        return [EventRow(*r) for r in rows]

    # -- tool calls -------------------------------------------------------------------------

    def upsert_tool_calls(self, job_id: str, phase_id: str, calls: Iterable[ToolCallRow]) -> None:
        rows = [
            (job_id, phase_id, c.tool_use_id, c.name, c.status.name, c.start_sequence, c.body, c.duration_ns)
            for c in calls
        ]
        if not rows:
            return
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            self.replica.require_writable(cur, job_id, phase_id)
            cur.executemany(
                "INSERT INTO tool_calls (job_id, phase_id, tool_use_id, name, status, start_sequence, body, "
                "duration_ns) VALUES (%s,%s,%s,%s,%s,%s,%s,%s) ON CONFLICT (job_id, phase_id, tool_use_id) DO UPDATE "
                "SET name = excluded.name, status = excluded.status, body = excluded.body, "
                "duration_ns = excluded.duration_ns",
                rows,
            )

    def mark_tool_calls_unfinished(self, job_id: str, phase_id: str) -> int:
        """After a crash: calls still RUNNING or HELD will never finish; returns how many."""
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            if not self.replica.require_writable(cur, job_id, phase_id, missing_ok=True):
                return 0
            return self._mark_unfinished(cur, job_id, phase_id)

    @staticmethod
    def _mark_unfinished(cur: psycopg.Cursor, job_id: str, phase_id: str) -> int:
        return cur.execute(
            "UPDATE tool_calls SET status = %s WHERE job_id = %s AND phase_id = %s AND status = ANY(%s)",
            (
                ToolCallStatus.UNFINISHED.name,
                job_id,
                phase_id,
                [ToolCallStatus.RUNNING.name, ToolCallStatus.HELD.name],
            ),
        ).rowcount

    @staticmethod
    def _tool_call_filter(
        job_id: str, phase_id: str | None, tool_name: str | None, statuses: Sequence[ToolCallStatus]
    ) -> tuple[list[str], list[object]]:
        where, args = ["t.job_id = %s"], [job_id]
        if phase_id:
            where.append("t.phase_id = %s")
            args.append(phase_id)
        if tool_name:
            where.append("t.name = %s")
            args.append(tool_name)
        if statuses:
            where.append("t.status = ANY(%s)")
            args.append(_names(statuses))
        return where, args

    def list_tool_calls(
        self,
        job_id: str,
        phase_id: str | None,
        tool_name: str | None,
        statuses: Sequence[ToolCallStatus],
        limit: int,
        after: tuple[int, int, str] | None = None,
    ) -> list[ToolCallRow]:
        """Tool calls in (phase ordinal, start sequence) order; ``after`` is the last row's key."""
        where, args = self._tool_call_filter(job_id, phase_id, tool_name, statuses)
        if after is not None:
            where.append("(p.ordinal, t.start_sequence, t.tool_use_id) > (%s, %s, %s)")
            args.extend(after)
        sql = (
            "SELECT t.tool_use_id, t.name, t.status, t.start_sequence, t.body, t.phase_id, t.duration_ns, p.ordinal "
            "FROM tool_calls t JOIN phases p ON p.job_id = t.job_id AND p.phase_id = t.phase_id WHERE "
            + " AND ".join(where)
            + " ORDER BY p.ordinal, t.start_sequence, t.tool_use_id LIMIT %s"
        )
        args.append(limit)
        with self._pool.connection() as conn:
            rows = conn.execute(sql, args).fetchall()
        return [tool_call_row(r) for r in rows]

    def tool_call_stats(
        self,
        job_id: str,
        phase_id: str | None,
        tool_name: str | None,
        statuses: Sequence[ToolCallStatus],
    ) -> list[ToolStats]:
        """Per-tool statistics of the matching calls in one statement (see ``Store.tool_call_stats``).

        The counts and sums are one aggregate; each tool's p95 is a LATERAL seek into
        ``tool_calls_by_duration`` (its finished durations in order) at the nearest rank
        ceil(0.95 n), in integers as in ``SqliteStore`` ((95 n + 99) / 100; ``percentile_disc``
        would compute the rank in floating point).
        """
        where, args = self._tool_call_filter(job_id, phase_id, tool_name, statuses)
        condition = " AND ".join(where)
        sql = (
            "WITH tallies AS (SELECT t.name, COUNT(*) AS calls, COUNT(*) FILTER (WHERE t.status = %s) AS failures, "
            "COUNT(*) FILTER (WHERE t.status = ANY(%s)) AS done, "
            "COALESCE(SUM(t.duration_ns) FILTER (WHERE t.status = ANY(%s)), 0)::bigint AS total, "
            "COUNT(t.duration_ns) FILTER (WHERE t.status = ANY(%s)) AS timed "
            f"FROM tool_calls t WHERE {condition} GROUP BY t.name) "
            "SELECT s.name, s.calls, s.failures, s.done, s.total, s.timed, COALESCE(p95.duration_ns, 0) "
            "FROM tallies s LEFT JOIN LATERAL (SELECT t.duration_ns FROM tool_calls t "
            f"WHERE {condition} AND t.name = s.name AND t.status = ANY(%s) AND t.duration_ns IS NOT NULL "
            "ORDER BY t.duration_ns OFFSET GREATEST((95 * s.timed + 99) / 100 - 1, 0) LIMIT 1) p95 ON true "
            "ORDER BY s.name"
        )
        params = [ToolCallStatus.FAILED.name, _FINISHED, _FINISHED, _FINISHED, *args, *args, _FINISHED]
        with self._pool.connection() as conn:
            rows = conn.execute(sql, params).fetchall()
        return [
            ToolStats(name, calls, failures, calls - done, total, total // timed if timed else 0, p95)
            for name, calls, failures, done, total, timed, p95 in rows
        ]

    # -- costs ------------------------------------------------------------------------------

    def replace_model_costs(
        self, job_id: str, phase_id: str, project_id: str, rows: Sequence[ModelCostRow]
    ) -> None:
        """Replaces the per-model cost rows of a phase (costs are snapshots, never summed)."""
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            self.replica.require_writable(cur, job_id, phase_id)
            cur.execute("DELETE FROM model_costs WHERE job_id = %s AND phase_id = %s", (job_id, phase_id))
            if rows:
                cur.executemany(
                    "INSERT INTO model_costs VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                    [model_cost_values(job_id, phase_id, project_id, r) for r in rows],
                )
            _bump_view_versions(cur, [job_id])

    def phase_cost_sums(
        self, *, project_id: str | None = None, job_id: str | None = None, phase_id: str | None = None
    ) -> PhaseCostSums:
        where, args = _scope(project_id, [job_id] if job_id else [], phase_id)
        sql = (
            "SELECT COUNT(*), COALESCE(SUM(reported_usd), 0), COALESCE(SUM(computed_usd), 0), "
            "COUNT(*) FILTER (WHERE computed_only <> 0) FROM phases"
        )
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self._pool.connection() as conn:
            count, reported, computed, computed_only = conn.execute(sql, args).fetchone()
        return PhaseCostSums(count, float(reported), float(computed), computed_only)

    def model_cost_sums(
        self, *, project_id: str | None = None, job_ids: Sequence[str] = (), phase_id: str | None = None
    ) -> list[tuple[str, ModelCostRow]]:
        where, args = _scope(project_id, job_ids, phase_id)
        # PostgreSQL refuses a constant in GROUP BY: a project's rows group by model and source only.
        key, group = ("job_id", "job_id, ") if job_ids else ("''", "")
        sql = (
            f"SELECT {key}, model, SUM(input_tokens)::bigint, SUM(output_tokens)::bigint, "
            "SUM(cache_read_input_tokens)::bigint, SUM(cache_write_5m_input_tokens)::bigint, "
            "SUM(cache_write_1h_input_tokens)::bigint, SUM(web_search_requests)::bigint, "
            "SUM(reported_usd), SUM(computed_usd), pricing_source FROM model_costs"
        )
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" GROUP BY {group}model, pricing_source"
        with self._pool.connection() as conn:
            rows = conn.execute(sql, args).fetchall()
        return [(r[0], model_cost_row(r[1:])) for r in rows]

    # -- retention ---------------------------------------------------------------------------

    def expired_jobs(self, cutoff_ns: int, limit: int) -> list[tuple[str, list[str]]]:
        """Jobs untouched since ``cutoff_ns`` with no active phase, oldest first: (job_id, recording dirs)."""
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT j.job_id, COALESCE((SELECT array_agg(p.recording_dir ORDER BY p.ordinal) FROM phases p "
                "WHERE p.job_id = j.job_id AND p.recording_dir <> ''), '{}') FROM jobs j "
                "WHERE j.update_time_ns < %s AND NOT EXISTS (SELECT 1 FROM phases p WHERE p.job_id = j.job_id "
                "AND p.status = ANY(%s)) ORDER BY j.update_time_ns LIMIT %s",
                (cutoff_ns, _ACTIVE, limit),
            ).fetchall()
        return [(job, list(dirs)) for job, dirs in rows]

    def delete_jobs(self, job_ids: Sequence[str]) -> int:
        """Deletes jobs with their phases, events, tool calls and costs, in one transaction; returns phases deleted."""
        if not job_ids:
            return 0
        with self._pool.connection() as conn, conn.transaction():
            ids = list(job_ids)
            # Explicit deletes in dependency order (cheaper than row-by-row cascades on events).
            for table in ("events", "tool_calls", "model_costs"):
                conn.execute(f"DELETE FROM {table} WHERE job_id = ANY(%s)", (ids,))
            phases = conn.execute("DELETE FROM phases WHERE job_id = ANY(%s)", (ids,)).rowcount
            conn.execute("DELETE FROM jobs WHERE job_id = ANY(%s)", (ids,))
        return phases

    def finished_recordings(self) -> list[tuple[str, str, str]]:
        """(job_id, phase_id, recording_dir) of finished phases that still have a recording, oldest end first."""
        with self._pool.connection() as conn:
            return [
                tuple(r)
                for r in conn.execute(
                    "SELECT job_id, phase_id, recording_dir FROM phases WHERE recording_dir <> '' "
                    "AND NOT (status = ANY(%s)) ORDER BY COALESCE(end_time_ns, create_time_ns), job_id, phase_id",
                    (_ACTIVE,),
                ).fetchall()
            ]

    def forget_recording(self, job_id: str, phase_id: str) -> None:
        """Notes that a phase's recording was deleted (without counting as activity on its job)."""
        with self._pool.connection() as conn:
            conn.execute(
                "UPDATE phases SET recording_dir = '' WHERE job_id = %s AND phase_id = %s", (job_id, phase_id)
            )

    def referenced_recordings(self, recording_dirs: Sequence[str]) -> set[str]:
        """Those of ``recording_dirs`` some phase row still names (retention's orphan check)."""
        if not recording_dirs:
            return set()
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT recording_dir FROM phases WHERE recording_dir = ANY(%s)", (list(recording_dirs),)
            ).fetchall()
        return {r[0] for r in rows}

    # -- replicas ----------------------------------------------------------------------------

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
        return self.replica.replica_capacity(_ACTIVE)

    def release_phase(self, job_id: str, phase_id: str) -> None:
        """Forgets the fence of a phase whose run is over here."""
        self.replica.release(job_id, phase_id)

    def sweep_expired_owners(self, interrupt: Interrupt, *, limit: int = 100) -> list[PhaseRow]:
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
                    f"{_SELECT_PHASES} WHERE p.status = ANY(%s) AND (p.owner_id IS NULL OR NOT EXISTS "
                    "(SELECT 1 FROM replicas r WHERE r.replica_id = p.owner_id AND r.lease_expires_at > now()) "
                    "OR (p.owner_id = %s AND p.fence = ANY(%s::bigint[]))) "
                    "ORDER BY p.create_time_ns LIMIT %s FOR UPDATE OF p SKIP LOCKED",
                    (_ACTIVE, self.replica.replica_id, adopted, limit),
                ).fetchall()
            ]
            pointers = []
            for row in rows:
                seq = row.last_sequence + 1
                event, values = interrupt(row, seq)
                if event.sequence != seq:
                    raise ValueError(f"the terminal event must have sequence {seq}, not {event.sequence}")
                values = {**values, "status": PhaseStatus.INTERRUPTED}
                unknown = set(values) - set(_PHASE_COLUMNS)
                if unknown:
                    raise ValueError(f"unknown phase columns: {sorted(unknown)}")
                values = {k: phase_value(k, v) for k, v in values.items()}
                cur.execute(
                    "INSERT INTO events (job_id, phase_id, sequence, receive_time_ns, kind, body) "
                    "VALUES (%s,%s,%s,%s,%s,%s)",
                    (row.job_id, row.phase_id, event.sequence, event.receive_time_ns, event.kind, event.body),
                )
                self._mark_unfinished(cur, row.job_id, row.phase_id)
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
            prune_expired_replicas(cur, _ACTIVE)
        self.replica.forget_adopted((r.job_id, r.phase_id) for r in rows)
        for row in rows:
            log.warning(
                "phase interrupted: the replica that ran it is gone",
                extra={"fields": {"job_id": row.job_id, "phase_id": row.phase_id, "was": row.status.name}},
            )
        return rows

    # -- cluster admission (postgres_admission.py; docs/scale-out.md "Cluster admission") ------

    @functools.cached_property
    def admission_ledger(self) -> PostgresAdmissionLedger:
        """The cluster-wide admission queue and limits, kept in this database."""
        return PostgresAdmissionLedger(self._pool, lambda: self.replica.replica_id)


def _describe(exc: BaseException) -> str:
    """A one-line reason without the connection string (it may hold a password)."""
    if isinstance(exc, PoolTimeout):
        return "no connection could be made in time (is the server running and the URL right?)"
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
