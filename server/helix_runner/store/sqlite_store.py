"""Embedded SQLite persistence for jobs, phases, their events, tool calls and costs (a ``Store``).

The store is plain data in, plain data out: nested domain values (results, costs, event
payloads) arrive already encoded by the record encoder, so this module knows tables, not events.
Statuses are stored as their enum names. WAL mode keeps every committed write across a crash
of the server process (``kill -9``); each append is one transaction, committed before the
events are handed to watchers.

The schema is versioned with ``PRAGMA user_version``: opening a database written by an older
server migrates it in place, step by step, each step in one transaction (``_MIGRATIONS``).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from helix_runner.domain.tool_tracker import ToolCallStatus, ToolStats
from helix_runner.store.allowance_rows import SQLITE_TABLES as ALLOWANCE_TABLES
from helix_runner.store.audit_rows import SQLITE_TABLES as AUDIT_TABLES
from helix_runner.store.checkpoint_rows import SQLITE_TABLES as CHECKPOINT_TABLES
from helix_runner.store.egress_secret_rows import SQLITE_TABLES as EGRESS_SECRET_TABLES
from helix_runner.store.protocol import (
    FINISHED_TOOL_STATUSES,
    AlreadyExistsError,
    PhaseRow,
    PhaseWrite,
    StoreError,
)
from helix_runner.store.quota_rows import SQLITE_TABLES as QUOTA_TABLES
from helix_runner.store.rows import phase_value
from helix_runner.store.sql_store import BACKFILL_INDEX, PHASE_COLUMNS, SQLITE, SqlStore

# Version 1: the unversioned schema (a `meta` table said so). Version 2: blob columns named for
# their protobuf content (*_pb), options_json dropped, tool_calls.duration_ns for SQL statistics.
# Version 3: jobs.view_version, bumped by every write that changes a job's view but appended events
# (the read model's job-view cache; JobRow). Version 4: phases.attempts_pb, the phase's ended
# attempts (store/protocol.py PhaseRow), so recovery and reads keep them after a crash. Version 5:
# per-model costs of phases without a project under "default". Version 6: webhook subscriptions,
# their deliveries (the outbox, written with the events that cause them) and the attempts' log.
# Version 7: checkpoints, the phases' transcripts and accepted requests (forks), phases.fork_pb.
SCHEMA_VERSION = 11

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    project_id TEXT NOT NULL,
    status TEXT NOT NULL,
    create_time_ns INTEGER NOT NULL,
    update_time_ns INTEGER NOT NULL,
    view_version INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_by_project ON jobs (project_id, create_time_ns DESC, job_id DESC);
CREATE INDEX IF NOT EXISTS jobs_by_time ON jobs (create_time_ns DESC, job_id DESC);
CREATE TABLE IF NOT EXISTS phases (
    job_id TEXT NOT NULL REFERENCES jobs(job_id),
    phase_id TEXT NOT NULL,
    ordinal INTEGER NOT NULL,
    project_id TEXT NOT NULL,
    status TEXT NOT NULL,
    status_reason TEXT NOT NULL DEFAULT '',
    create_time_ns INTEGER NOT NULL,
    start_time_ns INTEGER,
    end_time_ns INTEGER,
    session_id TEXT NOT NULL DEFAULT '',
    model TEXT NOT NULL DEFAULT '',
    working_dir TEXT NOT NULL DEFAULT '',
    prompt TEXT NOT NULL DEFAULT '',
    on_disconnect TEXT NOT NULL DEFAULT 'CANCEL',
    result_pb BLOB,
    cost_pb BLOB,
    tool_stats_pb BLOB,
    recording_dir TEXT NOT NULL DEFAULT '',
    reported_usd REAL,
    computed_usd REAL NOT NULL DEFAULT 0,
    computed_only INTEGER NOT NULL DEFAULT 0,
    pid INTEGER,
    pid_start_ticks INTEGER,
    attempts_pb BLOB,
    fork_pb BLOB,
    PRIMARY KEY (job_id, phase_id)
);
CREATE INDEX IF NOT EXISTS phases_by_status ON phases (status);
CREATE TABLE IF NOT EXISTS events (
    job_id TEXT NOT NULL,
    phase_id TEXT NOT NULL,
    sequence INTEGER NOT NULL,
    receive_time_ns INTEGER NOT NULL,
    kind TEXT NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (job_id, phase_id, sequence)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tool_calls (
    job_id TEXT NOT NULL,
    phase_id TEXT NOT NULL,
    tool_use_id TEXT NOT NULL,
    name TEXT NOT NULL,
    status TEXT NOT NULL,
    start_sequence INTEGER NOT NULL,
    body BLOB NOT NULL,
    duration_ns INTEGER,
    PRIMARY KEY (job_id, phase_id, tool_use_id)
);
CREATE INDEX IF NOT EXISTS tool_calls_by_order ON tool_calls (job_id, phase_id, start_sequence);
CREATE INDEX IF NOT EXISTS tool_calls_by_duration ON tool_calls (job_id, name, duration_ns, status, phase_id);
CREATE TABLE IF NOT EXISTS model_costs (
    job_id TEXT NOT NULL,
    phase_id TEXT NOT NULL,
    project_id TEXT NOT NULL,
    model TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cache_read_input_tokens INTEGER NOT NULL,
    cache_write_5m_input_tokens INTEGER NOT NULL,
    cache_write_1h_input_tokens INTEGER NOT NULL,
    web_search_requests INTEGER NOT NULL,
    reported_usd REAL,
    computed_usd REAL NOT NULL,
    pricing_source TEXT NOT NULL,
    PRIMARY KEY (job_id, phase_id, model)
);
CREATE INDEX IF NOT EXISTS model_costs_by_project ON model_costs (project_id);
"""

_WEBHOOKS = (
    """CREATE TABLE IF NOT EXISTS webhook_subscriptions (
    subscription_id TEXT PRIMARY KEY,
    project_id TEXT NOT NULL,
    url TEXT NOT NULL,
    secret TEXT NOT NULL,
    events TEXT NOT NULL,
    statuses TEXT NOT NULL DEFAULT '',
    cost_threshold_usd REAL,
    format TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    source TEXT NOT NULL,
    create_time_ns INTEGER NOT NULL,
    disabled_reason TEXT NOT NULL DEFAULT '',
    disabled_time_ns INTEGER
)""",
    # id: the outbox order (one phase's deliveries go out in it); delivery_id: the webhook-id header.
    """CREATE TABLE IF NOT EXISTS webhook_deliveries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    delivery_id TEXT NOT NULL UNIQUE,
    subscription_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    job_id TEXT NOT NULL,
    phase_id TEXT NOT NULL,
    sequence INTEGER NOT NULL,
    body BLOB NOT NULL,
    create_time_ns INTEGER NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_ns INTEGER NOT NULL,
    claimed_by TEXT NOT NULL DEFAULT '',
    claimed_until_ns INTEGER NOT NULL DEFAULT 0,
    last_status_code INTEGER,
    last_error TEXT NOT NULL DEFAULT '',
    end_time_ns INTEGER
)""",
    "CREATE INDEX IF NOT EXISTS webhook_deliveries_due ON webhook_deliveries (next_attempt_ns) WHERE state = 'PENDING'",
    "CREATE INDEX IF NOT EXISTS webhook_deliveries_in_order ON webhook_deliveries (subscription_id, job_id, phase_id, id) "
    "WHERE state = 'PENDING'",
    "CREATE INDEX IF NOT EXISTS webhook_deliveries_by_phase ON webhook_deliveries (job_id, phase_id)",
    "CREATE INDEX IF NOT EXISTS webhook_deliveries_by_subscription ON webhook_deliveries (subscription_id, id)",
    """CREATE TABLE IF NOT EXISTS webhook_attempts (
    delivery_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    time_ns INTEGER NOT NULL,
    status_code INTEGER,
    latency_ns INTEGER NOT NULL,
    error TEXT NOT NULL DEFAULT '',
    replica_id TEXT NOT NULL DEFAULT ''
)""",
    "CREATE INDEX IF NOT EXISTS webhook_attempts_by_delivery ON webhook_attempts (delivery_id, time_ns)",
)

_FINISHED = ",".join(f"'{s.name}'" for s in FINISHED_TOOL_STATUSES)
# Compound SELECTs per statement (SQLite's SQLITE_MAX_COMPOUND_SELECT is 500).
_MAX_UNION = 400
# Covers the statistics: per tool, finished durations in order (the p95 is a seek, not a sort).
_DURATION_INDEX = (
    "CREATE INDEX tool_calls_by_duration ON tool_calls (job_id, name, duration_ns, status, phase_id)"
)

# Version 3 (PostgreSQL: migration 0004_job_view_version.sql).
_ADD_VIEW_VERSION = "ALTER TABLE jobs ADD COLUMN view_version INTEGER NOT NULL DEFAULT 0"
# Version 4 (PostgreSQL: migration 0005_phase_attempts.sql).
_ADD_ATTEMPTS = "ALTER TABLE phases ADD COLUMN attempts_pb BLOB"
# Version 5 (PostgreSQL: migration 0007_model_costs_default_project.sql): per-model costs of phases
# without a project_id were written under project "" instead of the "default" every other record
# names, so the default project's totals had no per-model breakdown (issue 22, item 14).
_DEFAULT_PROJECT_MODEL_COSTS = "UPDATE model_costs SET project_id = 'default' WHERE project_id = ''"

# Version 7 (PostgreSQL: migration 0010_checkpoints.sql): where a forked phase came from.
_ADD_FORK = "ALTER TABLE phases ADD COLUMN fork_pb BLOB"

# Each step takes the schema from version N to N + 1 (index N - 1); statements, not a script, so
# that the step and the new user_version commit together.
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        "ALTER TABLE phases RENAME COLUMN result_json TO result_pb",
        "ALTER TABLE phases RENAME COLUMN cost_json TO cost_pb",
        "ALTER TABLE phases RENAME COLUMN tool_stats_json TO tool_stats_pb",
        "ALTER TABLE phases DROP COLUMN options_json",  # never written
        "ALTER TABLE tool_calls ADD COLUMN duration_ns INTEGER",
        _DURATION_INDEX,
        # Finished calls without a duration (it was only inside the body): SqlStore.backfill_tool_call_durations.
        f"CREATE INDEX {BACKFILL_INDEX} ON tool_calls (job_id) "
        f"WHERE duration_ns IS NULL AND status IN ({_FINISHED})",
        "DROP TABLE meta",  # held only schema_version, now PRAGMA user_version
    ),
    (_ADD_VIEW_VERSION,),
    (_ADD_ATTEMPTS,),
    (_DEFAULT_PROJECT_MODEL_COSTS,),
    _WEBHOOKS,  # version 6 (PostgreSQL: migration 0008_webhooks.sql)
    (*CHECKPOINT_TABLES, _ADD_FORK),  # version 7 (PostgreSQL: migration 0010_checkpoints.sql)
    EGRESS_SECRET_TABLES,  # version 8 (PostgreSQL: migration 0011_egress_secrets.sql)
    AUDIT_TABLES,  # version 9 (PostgreSQL: migration 0012_audit_entries.sql)
    QUOTA_TABLES,  # version 10 (PostgreSQL: migration 0013_project_quotas.sql)
    ALLOWANCE_TABLES,  # version 11 (PostgreSQL: migration 0014_egress_allowances.sql)
)
assert len(_MIGRATIONS) == SCHEMA_VERSION - 1


def _adds_existing_column(db: sqlite3.Connection, statement: str) -> bool:
    """Whether ``statement`` is ``ALTER TABLE t ADD COLUMN c ...`` for a column ``t`` has already."""
    words = statement.split()
    if [w.upper() for w in words[:2]] != ["ALTER", "TABLE"] or [w.upper() for w in words[3:5]] != ["ADD", "COLUMN"]:
        return False
    return any(row[1] == words[5] for row in db.execute(f"PRAGMA table_info({words[2]})"))


class _Locked:
    """The store's one connection under its lock, as a context manager (``SqliteStore._reading``)."""

    __slots__ = ("_db", "_lock")

    def __init__(self, db: sqlite3.Connection, lock: threading.Lock):
        self._db, self._lock = db, lock

    def __enter__(self) -> sqlite3.Connection:
        self._lock.acquire()
        return self._db

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


class SqliteStore(SqlStore):
    """Thread-safe access to one SQLite database file (one connection, serialised by a lock).

    The queries it shares with ``PostgresStore`` are ``SqlStore``'s; here are the connection, the
    WAL checkpoints, the migrations, and the methods written for SQLite alone.
    """

    dialect = SQLITE

    def __init__(self, path: Path):
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode survives a crash of this process (the OS keeps the WAL pages);
            # only a power loss can drop the last commits.
            self._db.execute("PRAGMA synchronous=NORMAL")
            # Checkpoints (which fsync) run on a background thread, not inside a commit on the
            # event loop: automatic ones made single commits take milliseconds at p99.
            self._db.execute("PRAGMA wal_autocheckpoint=0")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._lock = threading.Lock()
            self._locked = _Locked(self._db, self._lock)
            # The schema version the file had if it was migrated now, else None (new or current).
            self.migrated_from = self._migrate()
        except sqlite3.Error as exc:
            self._close_quietly()
            raise StoreError(f"cannot open database {path}: {exc}") from None
        except OSError as exc:
            raise StoreError(f"cannot create data directory {path.parent}: {exc.strerror}") from None
        except StoreError:
            self._close_quietly()
            raise
        self._closing = threading.Event()
        self._checkpointer = threading.Thread(
            target=self._checkpoint_loop, name="sqlite-checkpoint", daemon=True
        )
        self._checkpointer.start()

    def _close_quietly(self) -> None:
        with contextlib.suppress(AttributeError, sqlite3.Error):
            self._db.close()

    # -- schema -----------------------------------------------------------------------------------

    def _migrate(self) -> int | None:
        """Brings the schema to ``SCHEMA_VERSION``; returns the version it migrated from, if it did."""
        db = self._db
        (version,) = db.execute("PRAGMA user_version").fetchone()
        if version == 0 and db.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone():
            version = 1  # written before versioning
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"database {self.path} has schema version {version}; this server knows versions up to "
                f"{SCHEMA_VERSION} (was it written by a newer server?)"
            )
        if version == 0:
            db.executescript(_SCHEMA)  # idempotent (IF NOT EXISTS), so an interrupted creation redoes it
            for statement in (*_WEBHOOKS, *CHECKPOINT_TABLES, *EGRESS_SECRET_TABLES, *AUDIT_TABLES,
                              *QUOTA_TABLES, *ALLOWANCE_TABLES):
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            return None
        if version == SCHEMA_VERSION:
            return None
        for step in range(version, SCHEMA_VERSION):
            with self._transaction() as tx:
                for statement in _MIGRATIONS[step - 1]:
                    if not _adds_existing_column(tx, statement):  # a step redone finds its column there
                        tx.execute(statement)
                tx.execute(f"PRAGMA user_version = {step + 1}")
        return version

    # -- connection -------------------------------------------------------------------------------

    def _reading(self) -> _Locked:
        return self._locked

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction under the lock: committed on success, rolled back on any exception."""
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise

    def _checkpoint_loop(self, interval_s: float = 1.0) -> None:
        try:
            conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        except sqlite3.Error:
            return
        try:
            while not self._closing.wait(interval_s):
                try:
                    # PASSIVE never blocks writers; it copies what it can and retries next time.
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
                except sqlite3.Error:
                    pass
        finally:
            conn.close()

    def close(self) -> None:
        self._closing.set()
        self._checkpointer.join(timeout=5)
        with self._lock:
            try:
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error:
                pass
            self._db.close()

    # -- written for SQLite ---------------------------------------------------------------------

    def insert_phase(self, row: PhaseRow) -> PhaseRow:
        """Inserts a new phase (its ordinal is assigned here) and makes it the job's latest."""
        status = phase_value("status", row.status)
        try:
            with self._transaction() as tx:
                (count,) = tx.execute(
                    "SELECT COUNT(*) FROM phases WHERE job_id = ?", (row.job_id,)
                ).fetchone()
                row.ordinal = count + 1
                tx.execute(
                    f"INSERT INTO phases ({','.join(PHASE_COLUMNS)}) VALUES ({','.join('?' * len(PHASE_COLUMNS))})",
                    [phase_value(c, getattr(row, c)) for c in PHASE_COLUMNS],
                )
                tx.execute(
                    "UPDATE jobs SET status = ?, update_time_ns = ?, view_version = view_version + 1 "
                    "WHERE job_id = ?",
                    (status, row.create_time_ns, row.job_id),
                )
        except sqlite3.IntegrityError:
            raise AlreadyExistsError(f"phase {row.phase_id} already exists in job {row.job_id}") from None
        return row

    def committer(self) -> SqliteCommitter:
        """Commits on this store's connection, in the caller's thread (``Committer.off_loop`` False)."""
        return SqliteCommitter(self)

    def tool_call_stats(
        self,
        job_id: str,
        phase_id: str | None,
        tool_name: str | None,
        statuses: Sequence[ToolCallStatus],
    ) -> list[ToolStats]:
        """Per-tool statistics of the matching calls in two statements (see ``Store.tool_call_stats``).

        The counts and sums are one aggregate; each tool's p95 is then one seek into
        ``tool_calls_by_duration`` (its finished durations in order) at the nearest rank, all tools
        in one UNION ALL. A window function (ROW_NUMBER) gives the same answer but sorts every
        matching call on each request: five times slower at 2,000 calls.
        """
        where, args = self._tool_call_filter(job_id, phase_id, tool_name, statuses)
        condition = " AND ".join(where)
        finished = f"t.status IN ({_FINISHED})"
        with self._lock:
            tallies = self._db.execute(
                f"SELECT t.name, COUNT(*), SUM(CASE WHEN t.status = '{ToolCallStatus.FAILED.name}' THEN 1 ELSE 0 END), "
                f"SUM({finished}), COALESCE(SUM(CASE WHEN {finished} THEN t.duration_ns END), 0), "
                f"COUNT(CASE WHEN {finished} THEN t.duration_ns END) "
                f"FROM tool_calls t WHERE {condition} GROUP BY t.name",
                args,
            ).fetchall()
            seeks, seek_args = [], []
            for name, *_, timed in tallies:
                if timed:
                    # The nearest rank ceil(0.95 n), in integers: (95 n + 99) // 100 (no floating point).
                    seeks.append(
                        f"SELECT * FROM (SELECT t.name, t.duration_ns FROM tool_calls t WHERE {condition} "
                        f"AND t.name = ? AND {finished} AND t.duration_ns IS NOT NULL "
                        "ORDER BY t.duration_ns LIMIT 1 OFFSET ?)"
                    )
                    seek_args += [*args, name, (95 * timed + 99) // 100 - 1]
            p95: dict[str, int] = {}
            for start in range(0, len(seeks), _MAX_UNION):  # SQLite's limit on compound SELECTs
                p95.update(
                    self._db.execute(
                        " UNION ALL ".join(seeks[start : start + _MAX_UNION]),
                        seek_args[start * (len(args) + 2) : (start + _MAX_UNION) * (len(args) + 2)],
                    ).fetchall()
                )
        return [
            ToolStats(
                name, calls, failures, calls - done, total, total // timed if timed else 0, p95.get(name, 0)
            )
            for name, calls, failures, done, total, timed in tallies
        ]


class SqliteCommitter:
    """A writer's batches committed on the store's one connection, where the writer runs.

    A commit here is microseconds of work that holds the GIL; a thread of its own would cost the
    hand-offs and save nothing (benchmarks/README.md, "The group commit on a writer thread").
    """

    off_loop = False

    def __init__(self, store: SqliteStore):
        self._store = store

    def commit(self, writes: Sequence[PhaseWrite], *, retry: bool = False) -> set[tuple[str, str]]:
        if not writes:
            return set()
        try:
            with self._store._transaction() as tx:
                return self._store._write_phases_in(tx, writes, retry=retry)
        except sqlite3.Error as exc:  # rolled back (a full disk, an I/O error)
            raise StoreError(f"the database refused the writes: {exc}") from exc

    def close(self) -> None:
        pass
