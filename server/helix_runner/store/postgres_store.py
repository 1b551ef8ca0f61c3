"""PostgreSQL persistence for many replicas: the ``Store`` of ``SqliteStore``, on a shared database.

Plain data in, plain data out, like the SQLite store: the row types are shared, nested values arrive
already encoded, and the queries both databases answer alike are ``SqlStore``'s (store/sql_store.py).
Each method is one transaction on a connection from a psycopg 3 ``ConnectionPool``: the interface is
synchronous today (called from the event loop, with appends group-committed by
``event_log.EventWriter``), and psycopg's async pool takes over unchanged SQL when it becomes async
(docs/scale-out.md, "Driver"). What SQLite does not need: every write of a phase's history is fenced
(``_fence``: ``postgres_cluster.ReplicaMembership``), appends and a phase's end NOTIFY the other
replicas (``postgres_notify``), and the replicas themselves are the store's ``cluster``
(``postgres_cluster.PostgresCluster``, the ``Cluster`` port).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool, PoolTimeout

from helix_runner.domain.tool_tracker import ToolCallStatus, ToolStats
from helix_runner.store.postgres_cluster import (
    DEFAULT_LEASE_SECONDS,
    PostgresCluster,
    ReplicaMembership,
)
from helix_runner.store.postgres_migrations import migrate_from
from helix_runner.store.postgres_notify import CHANNEL, EventPointer, notify
from helix_runner.store.postgres_writer import PostgresCommitter
from helix_runner.store.protocol import AlreadyExistsError, PhaseRow, StoreError
from helix_runner.store.rows import phase_value
from helix_runner.store.sql_store import ACTIVE, FINISHED, PHASE_COLUMNS, POSTGRESQL, SqlStore

log = logging.getLogger(__name__)


class PostgresStore(SqlStore):
    """One replica's handle on the shared database: pooled connections, its registration, its fences."""

    dialect = POSTGRESQL

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
        self._committers: list[PostgresCommitter] = []
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
            self.replica.register(ACTIVE)
            self.cluster = PostgresCluster(self, self.replica, conninfo)
        except (psycopg.Error, PoolTimeout) as exc:
            self._pool.close()
            raise StoreError(f"cannot open the PostgreSQL database: {_describe(exc)}") from None
        except BaseException:
            self._pool.close()
            raise
        if heartbeat:
            self.replica.start_heartbeat()

    def close(self) -> None:
        for committer in self._committers:
            committer.close()
        self.replica.stop_heartbeat()
        try:
            self.replica.expire()
        except (psycopg.Error, PoolTimeout):
            pass  # the lease runs out by itself
        self._pool.close()

    @property
    def replica_id(self) -> str:
        return self.replica.replica_id

    # -- connection -------------------------------------------------------------------------------

    def _reading(self):
        return self._pool.connection()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[psycopg.Cursor]:
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            yield cur

    def _fence(self, tx: psycopg.Cursor, job_id: str, phase_id: str, *, missing_ok: bool = False) -> bool:
        return self.replica.require_writable(tx, job_id, phase_id, missing_ok=missing_ok)

    def _lock_phases(
        self, tx: psycopg.Cursor, keys: Sequence[tuple[str, str]]
    ) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
        return self.replica.lock_phases(tx, keys)

    def _insert_events(self, tx: psycopg.Cursor, rows: list[tuple], *, retry: bool) -> None:
        # One statement for the whole group commit, whatever its size: six arrays, one unnest. The
        # arrays go in binary (%b): psycopg builds text-format arrays in Python, escaping element by
        # element, 3-4x the client CPU of binary ones at a few hundred events (benchmarks/README.md).
        conflict = " ON CONFLICT (job_id, phase_id, sequence) DO NOTHING" if retry else ""
        tx.execute(
            "INSERT INTO events (job_id, phase_id, sequence, receive_time_ns, kind, body) "
            "SELECT * FROM unnest(%b::text[], %b::text[], %b::bigint[], %b::bigint[], %b::text[], %b::bytea[])"
            + conflict,
            [list(column) for column in zip(*rows, strict=True)],
        )

    def _announce(
        self, tx: psycopg.Cursor, pointers: Sequence[tuple[str, str, int]], changed: Sequence[tuple[str, str]]
    ) -> None:
        notify(tx, [EventPointer(*p) for p in pointers])
        if changed:
            # Wakes followers on other replicas: a phase's end is news even without a new event. The
            # pointer names its last committed event, read where it is (no round trip of its own).
            tx.execute(
                "SELECT pg_notify(%s, json_build_object('j', k.j, 'p', k.p, 's', (SELECT COALESCE(MAX(e.sequence), 0) "
                "FROM events e WHERE e.job_id = k.j AND e.phase_id = k.p))::text) "
                "FROM unnest(%s::text[], %s::text[]) AS k(j, p)",
                (CHANNEL, [j for j, _ in changed], [p for _, p in changed]),
            )

    def committer(self) -> PostgresCommitter:
        """A writer's own connection, in pipeline mode (store/postgres_writer.py); closed with the store."""
        committer = PostgresCommitter(self.conninfo, self._write_phases_in)
        self._committers.append(committer)
        return committer

    def _now_ns(self, tx) -> int:
        # The database's clock: claims and retry times must mean the same to every replica.
        (now,) = tx.execute("SELECT (extract(epoch FROM clock_timestamp()) * 1e9)::bigint").fetchone()
        return int(now)

    # -- written for PostgreSQL -------------------------------------------------------------------


    def insert_phase(self, row: PhaseRow) -> PhaseRow:
        """Inserts a new phase owned by this replica (ordinal and fence assigned here); it becomes the job's latest."""
        cols = [c for c in PHASE_COLUMNS if c != "ordinal"]
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
        condition = self.dialect.sql(" AND ".join(where))
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
        params = [ToolCallStatus.FAILED.name, FINISHED, FINISHED, FINISHED, *args, *args, FINISHED]
        with self._pool.connection() as conn:
            rows = conn.execute(sql, params).fetchall()
        return [
            ToolStats(name, calls, failures, calls - done, total, total // timed if timed else 0, p95)
            for name, calls, failures, done, total, timed, p95 in rows
        ]


def _describe(exc: BaseException) -> str:
    """A one-line reason without the connection string (it may hold a password)."""
    if isinstance(exc, PoolTimeout):
        return "no connection could be made in time (is the server running and the URL right?)"
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
