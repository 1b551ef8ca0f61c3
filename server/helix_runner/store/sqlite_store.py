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
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import fields
from pathlib import Path

from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.tool_tracker import ToolCallStatus, ToolStats
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

__all__ = [
    "ACTIVE_STATUSES",
    "AlreadyExistsError",
    "EventRow",
    "JobRow",
    "ModelCostRow",
    "PhaseCostSums",
    "PhaseRow",
    "SqliteStore",
    "StoreError",
    "ToolCallRow",
]

# Version 1: the unversioned schema (a `meta` table said so). Version 2: blob columns named for
# their protobuf content (*_pb), options_json dropped, tool_calls.duration_ns for SQL statistics.
# Version 3: jobs.view_version, bumped by every write that changes a job's view but appended events
# (the read model's job-view cache; JobRow). Version 4: phases.attempts_pb, the phase's ended
# attempts (store/protocol.py PhaseRow), so recovery and reads keep them after a crash.
SCHEMA_VERSION = 5

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

_FINISHED = ",".join(f"'{s.name}'" for s in FINISHED_TOOL_STATUSES)
# Compound SELECTs per statement (SQLite's SQLITE_MAX_COMPOUND_SELECT is 500).
_MAX_UNION = 400
# Covers the statistics: per tool, finished durations in order (the p95 is a seek, not a sort).
_DURATION_INDEX = (
    "CREATE INDEX tool_calls_by_duration ON tool_calls (job_id, name, duration_ns, status, phase_id)"
)
# Finished calls a version-1 database recorded without a duration (it was only inside the body);
# ``backfill_tool_call_durations`` fills them in and drops this index when done.
_BACKFILL_INDEX = "tool_calls_duration_backfill"

# Version 3 (PostgreSQL: migration 0004_job_view_version.sql).
_ADD_VIEW_VERSION = "ALTER TABLE jobs ADD COLUMN view_version INTEGER NOT NULL DEFAULT 0"
# Version 4 (PostgreSQL: migration 0005_phase_attempts.sql).
_ADD_ATTEMPTS = "ALTER TABLE phases ADD COLUMN attempts_pb BLOB"
# Version 5 (PostgreSQL: migration 0007_model_costs_default_project.sql): per-model costs of phases
# without a project_id were written under project "" instead of the "default" every other record
# names, so the default project's totals had no per-model breakdown (issue 22, item 14).
_DEFAULT_PROJECT_MODEL_COSTS = "UPDATE model_costs SET project_id = 'default' WHERE project_id = ''"

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
        f"CREATE INDEX {_BACKFILL_INDEX} ON tool_calls (job_id) "
        f"WHERE duration_ns IS NULL AND status IN ({_FINISHED})",
        "DROP TABLE meta",  # held only schema_version, now PRAGMA user_version
    ),
    (_ADD_VIEW_VERSION,),
    (_ADD_ATTEMPTS,),
    (_DEFAULT_PROJECT_MODEL_COSTS,),
)
assert len(_MIGRATIONS) == SCHEMA_VERSION - 1


# last_sequence is not stored: it is MAX(sequence) of the phase's events (an index lookup), so an
# append is a single statement on the hot path. It is PhaseRow's last field: a row is PhaseRow(*r).
_PHASE_COLUMNS = tuple(f.name for f in fields(PhaseRow))[:-1]
assert fields(PhaseRow)[-1].name == "last_sequence"
_SELECT_PHASES = (
    f"SELECT {','.join(_PHASE_COLUMNS)}, (SELECT COALESCE(MAX(e.sequence), 0) FROM events e "
    "WHERE e.job_id = phases.job_id AND e.phase_id = phases.phase_id) FROM phases"
)
_JOB_COLUMNS = "job_id, project_id, status, create_time_ns, update_time_ns, view_version"
# A job row with its sequence_sum (JobRow): one MAX seek per phase (the events primary key).
_SELECT_JOBS = (
    f"SELECT {_JOB_COLUMNS}, (SELECT COALESCE(SUM((SELECT MAX(e.sequence) FROM events e WHERE "
    "e.job_id = p.job_id AND e.phase_id = p.phase_id)), 0) FROM phases p WHERE p.job_id = jobs.job_id) FROM jobs"
)



class SqliteStore:
    """Thread-safe access to one SQLite database file (one connection, serialised by a lock)."""

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

    # -- schema -----------------------------------------------------------------------------

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
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            return None
        if version == SCHEMA_VERSION:
            return None
        for step in range(version, SCHEMA_VERSION):
            with self._transaction() as tx:
                for statement in _MIGRATIONS[step - 1]:
                    tx.execute(statement)
                tx.execute(f"PRAGMA user_version = {step + 1}")
        return version

    def backfill_tool_call_durations(
        self, duration_of: Callable[[bytes], int | None], batch: int = 1000
    ) -> int:
        """Fills in the duration of finished calls a version-1 database holds only in their encoded body.

        ``duration_of`` decodes a call's body (the store does not know the encoding). Runs once
        after the migration to version 2 (until then the statistics leave those calls' durations
        out); afterwards it returns at once. Returns the number of calls filled in.
        """
        with self._lock:
            if not self._db.execute(
                "SELECT 1 FROM sqlite_master WHERE name = ?", (_BACKFILL_INDEX,)
            ).fetchone():
                return 0
        filled, last_rowid = 0, 0
        while True:
            with self._lock:
                rows = self._db.execute(
                    f"SELECT rowid, body FROM tool_calls WHERE duration_ns IS NULL AND status IN ({_FINISHED}) "
                    "AND rowid > ? ORDER BY rowid LIMIT ?",
                    (last_rowid, batch),
                ).fetchall()
            if not rows:
                break
            last_rowid = rows[-1][0]
            updates = [
                (duration, rowid) for rowid, body in rows if (duration := duration_of(body)) is not None
            ]
            with self._transaction() as tx:
                tx.executemany("UPDATE tool_calls SET duration_ns = ? WHERE rowid = ?", updates)
            filled += len(updates)
        with self._lock:
            self._db.execute(f"DROP INDEX IF EXISTS {_BACKFILL_INDEX}")
        return filled

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

    # -- jobs -------------------------------------------------------------------------------

    def get_or_create_job(self, job_id: str, project_id: str, now_ns: int) -> tuple[JobRow, bool]:
        """Returns the job, creating it on first use; the bool says whether it was created."""
        with self._lock:
            row = self._job(job_id)
            if row is not None:
                return row, False
            self._db.execute(
                f"INSERT INTO jobs ({_JOB_COLUMNS}) VALUES (?,?,?,?,?,0)",
                (job_id, project_id, PhaseStatus.PENDING.name, now_ns, now_ns),
            )
            return JobRow(job_id, project_id, PhaseStatus.PENDING, now_ns, now_ns), True

    def get_job(self, job_id: str) -> JobRow | None:
        with self._lock:
            return self._job(job_id)

    def _job(self, job_id: str) -> JobRow | None:
        r = self._db.execute(f"{_SELECT_JOBS} WHERE job_id = ?", (job_id,)).fetchone()
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
            where.append("project_id = ?")
            args.append(project_id)
        if statuses:
            where.append(f"status IN ({','.join('?' * len(statuses))})")
            args.extend(s.name for s in statuses)
        if after is not None:
            where.append("(create_time_ns < ? OR (create_time_ns = ? AND job_id < ?))")
            args.extend([after[0], after[0], after[1]])
        sql = _SELECT_JOBS
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY create_time_ns DESC, job_id DESC LIMIT ?"
        args.append(limit)
        with self._lock:
            return [job_row(r) for r in self._db.execute(sql, args).fetchall()]

    # -- phases -----------------------------------------------------------------------------

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
                    f"INSERT INTO phases ({','.join(_PHASE_COLUMNS)}) VALUES ({','.join('?' * len(_PHASE_COLUMNS))})",
                    [phase_value(c, getattr(row, c)) for c in _PHASE_COLUMNS],
                )
                tx.execute(
                    "UPDATE jobs SET status = ?, update_time_ns = ?, view_version = view_version + 1 "
                    "WHERE job_id = ?",
                    (status, row.create_time_ns, row.job_id),
                )
        except sqlite3.IntegrityError:
            raise AlreadyExistsError(f"phase {row.phase_id} already exists in job {row.job_id}") from None
        return row

    def update_phase(self, job_id: str, phase_id: str, now_ns: int, **values: object) -> None:
        """Updates phase columns; a status change also becomes the job's status if this is its latest phase."""
        unknown = set(values) - set(_PHASE_COLUMNS)
        if unknown:
            raise ValueError(f"unknown phase columns: {sorted(unknown)}")
        if not values:
            return
        stored = {k: phase_value(k, v) for k, v in values.items()}
        sets = ",".join(f"{k} = ?" for k in stored)
        with self._transaction() as tx:
            tx.execute(
                f"UPDATE phases SET {sets} WHERE job_id = ? AND phase_id = ?",
                [*stored.values(), job_id, phase_id],
            )
            if "status" in stored:
                tx.execute(
                    "UPDATE jobs SET status = ?, update_time_ns = ? WHERE job_id = ? AND ? = "
                    "(SELECT phase_id FROM phases WHERE job_id = ? ORDER BY ordinal DESC LIMIT 1)",
                    (stored["status"], now_ns, job_id, phase_id, job_id),
                )
                _bump_view_versions(tx, [job_id])  # also when it is not the latest phase
            else:
                tx.execute(
                    "UPDATE jobs SET update_time_ns = ?, view_version = view_version + 1 WHERE job_id = ?",
                    (now_ns, job_id),
                )

    def get_phase(self, job_id: str, phase_id: str) -> PhaseRow | None:
        with self._lock:
            r = self._db.execute(
                f"{_SELECT_PHASES} WHERE job_id = ? AND phase_id = ?", (job_id, phase_id)
            ).fetchone()
        return phase_row(r) if r else None

    def phases_of_jobs(self, job_ids: Sequence[str]) -> list[PhaseRow]:
        """The phases of all these jobs in one query, by job then ordinal."""
        if not job_ids:
            return []
        marks = ",".join("?" * len(job_ids))
        with self._lock:
            rows = self._db.execute(
                f"{_SELECT_PHASES} WHERE job_id IN ({marks}) ORDER BY job_id, ordinal", list(job_ids)
            ).fetchall()
        return [phase_row(r) for r in rows]

    def active_phases(self) -> list[PhaseRow]:
        """Phases whose status is not final (after a crash: the ones to mark INTERRUPTED)."""
        marks = ",".join("?" * len(ACTIVE_STATUSES))
        with self._lock:
            rows = self._db.execute(
                f"{_SELECT_PHASES} WHERE status IN ({marks})", [s.name for s in ACTIVE_STATUSES]
            ).fetchall()
        return [phase_row(r) for r in rows]

    # -- events -----------------------------------------------------------------------------

    def append_events(self, batches: Sequence[tuple[str, str, Sequence[EventRow]]]) -> None:
        """Appends the events of one or more phases in one transaction (group commit)."""
        rows = [
            (job_id, phase_id, e.sequence, e.receive_time_ns, e.kind, e.body)
            for job_id, phase_id, events in batches
            for e in events
        ]
        if not rows:
            return
        with self._transaction() as tx:
            tx.executemany(
                "INSERT INTO events (job_id, phase_id, sequence, receive_time_ns, kind, body) VALUES (?,?,?,?,?,?)",
                rows,
            )

    def read_events(self, job_id: str, phase_id: str, after_sequence: int, limit: int) -> list[EventRow]:
        with self._lock:
            rows = self._db.execute(
                "SELECT sequence, receive_time_ns, kind, body FROM events "
                "WHERE job_id = ? AND phase_id = ? AND sequence > ? ORDER BY sequence LIMIT ?",
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
        with self._lock:
            self._db.executemany(
                "INSERT INTO tool_calls (job_id, phase_id, tool_use_id, name, status, start_sequence, body, "
                "duration_ns) VALUES (?,?,?,?,?,?,?,?) ON CONFLICT (job_id, phase_id, tool_use_id) DO UPDATE SET "
                "name = excluded.name, status = excluded.status, body = excluded.body, "
                "duration_ns = excluded.duration_ns",
                rows,
            )

    def mark_tool_calls_unfinished(self, job_id: str, phase_id: str) -> int:
        """After a crash: calls still RUNNING or HELD will never finish; returns how many."""
        with self._lock:
            cur = self._db.execute(
                "UPDATE tool_calls SET status = ? WHERE job_id = ? AND phase_id = ? AND status IN (?, ?)",
                (
                    ToolCallStatus.UNFINISHED.name,
                    job_id,
                    phase_id,
                    ToolCallStatus.RUNNING.name,
                    ToolCallStatus.HELD.name,
                ),
            )
            return cur.rowcount

    @staticmethod
    def _tool_call_filter(
        job_id: str, phase_id: str | None, tool_name: str | None, statuses: Sequence[ToolCallStatus]
    ) -> tuple[list[str], list[object]]:
        where, args = ["t.job_id = ?"], [job_id]
        if phase_id:
            where.append("t.phase_id = ?")
            args.append(phase_id)
        if tool_name:
            where.append("t.name = ?")
            args.append(tool_name)
        if statuses:
            where.append(f"t.status IN ({','.join('?' * len(statuses))})")
            args.extend(s.name for s in statuses)
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
            where.append(
                "(p.ordinal > ? OR (p.ordinal = ? AND (t.start_sequence > ? OR "
                "(t.start_sequence = ? AND t.tool_use_id > ?))))"
            )
            args.extend([after[0], after[0], after[1], after[1], after[2]])
        sql = (
            "SELECT t.tool_use_id, t.name, t.status, t.start_sequence, t.body, t.phase_id, t.duration_ns, p.ordinal "
            "FROM tool_calls t JOIN phases p ON p.job_id = t.job_id AND p.phase_id = t.phase_id WHERE "
            + " AND ".join(where)
            + " ORDER BY p.ordinal, t.start_sequence, t.tool_use_id LIMIT ?"
        )
        args.append(limit)
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        return [tool_call_row(r) for r in rows]

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

    # -- costs ------------------------------------------------------------------------------

    def replace_model_costs(
        self, job_id: str, phase_id: str, project_id: str, rows: Sequence[ModelCostRow]
    ) -> None:
        """Replaces the per-model cost rows of a phase (costs are snapshots, never summed)."""
        with self._transaction() as tx:
            tx.execute("DELETE FROM model_costs WHERE job_id = ? AND phase_id = ?", (job_id, phase_id))
            tx.executemany(
                "INSERT INTO model_costs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                [model_cost_values(job_id, phase_id, project_id, r) for r in rows],
            )
            _bump_view_versions(tx, [job_id])

    def phase_cost_sums(
        self, *, project_id: str | None = None, job_id: str | None = None, phase_id: str | None = None
    ) -> PhaseCostSums:
        where, args = _scope(project_id, [job_id] if job_id else [], phase_id)
        sql = (
            "SELECT COUNT(*), COALESCE(SUM(reported_usd), 0), COALESCE(SUM(computed_usd), 0), "
            "COALESCE(SUM(computed_only != 0), 0) FROM phases"
        )
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self._lock:
            count, reported, computed, computed_only = self._db.execute(sql, args).fetchone()
        return PhaseCostSums(count, float(reported), float(computed), computed_only)

    def model_cost_sums(
        self, *, project_id: str | None = None, job_ids: Sequence[str] = (), phase_id: str | None = None
    ) -> list[tuple[str, ModelCostRow]]:
        where, args = _scope(project_id, job_ids, phase_id)
        key = "job_id" if job_ids else "''"
        sql = (
            f"SELECT {key}, model, SUM(input_tokens), SUM(output_tokens), SUM(cache_read_input_tokens), "
            "SUM(cache_write_5m_input_tokens), SUM(cache_write_1h_input_tokens), SUM(web_search_requests), "
            "SUM(reported_usd), SUM(computed_usd), pricing_source FROM model_costs"
        )
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" GROUP BY {key}, model, pricing_source"
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        return [(r[0], model_cost_row(r[1:])) for r in rows]

    # -- retention ---------------------------------------------------------------------------

    def expired_jobs(self, cutoff_ns: int, limit: int) -> list[tuple[str, list[str]]]:
        """Jobs untouched since ``cutoff_ns`` with no active phase, oldest first: (job_id, recording dirs)."""
        marks = ",".join("?" * len(ACTIVE_STATUSES))
        with self._lock:
            jobs = [
                r[0]
                for r in self._db.execute(
                    f"SELECT job_id FROM jobs WHERE update_time_ns < ? AND NOT EXISTS (SELECT 1 FROM phases p "
                    f"WHERE p.job_id = jobs.job_id AND p.status IN ({marks})) ORDER BY update_time_ns LIMIT ?",
                    (cutoff_ns, *(s.name for s in ACTIVE_STATUSES), limit),
                ).fetchall()
            ]
            return [
                (
                    job,
                    [
                        r[0]
                        for r in self._db.execute(
                            "SELECT recording_dir FROM phases WHERE job_id = ? AND recording_dir != ''",
                            (job,),
                        )
                    ],
                )
                for job in jobs
            ]

    def delete_jobs(self, job_ids: Sequence[str]) -> int:
        """Deletes jobs with their phases, events, tool calls and costs, in one transaction; returns phases deleted."""
        if not job_ids:
            return 0
        marks = ",".join("?" * len(job_ids))
        with self._transaction() as tx:
            for table in ("events", "tool_calls", "model_costs"):
                tx.execute(f"DELETE FROM {table} WHERE job_id IN ({marks})", job_ids)
            phases = tx.execute(f"DELETE FROM phases WHERE job_id IN ({marks})", job_ids).rowcount
            tx.execute(f"DELETE FROM jobs WHERE job_id IN ({marks})", job_ids)
        return phases

    def finished_recordings(self) -> list[tuple[str, str, str]]:
        """(job_id, phase_id, recording_dir) of finished phases that still have a recording, oldest end first."""
        marks = ",".join("?" * len(ACTIVE_STATUSES))
        with self._lock:
            return [
                tuple(r)
                for r in self._db.execute(
                    f"SELECT job_id, phase_id, recording_dir FROM phases WHERE recording_dir != '' "
                    f"AND status NOT IN ({marks}) ORDER BY COALESCE(end_time_ns, create_time_ns), job_id, phase_id",
                    [s.name for s in ACTIVE_STATUSES],
                ).fetchall()
            ]

    def forget_recording(self, job_id: str, phase_id: str) -> None:
        """Notes that a phase's recording was deleted (without counting as activity on its job)."""
        with self._lock:
            self._db.execute(
                "UPDATE phases SET recording_dir = '' WHERE job_id = ? AND phase_id = ?", (job_id, phase_id)
            )

    def referenced_recordings(self, recording_dirs: Sequence[str]) -> set[str]:
        """Those of ``recording_dirs`` some phase row still names (retention's orphan check)."""
        found: set[str] = set()
        with self._lock:
            for start in range(0, len(recording_dirs), 500):  # below SQLite's bound on parameters
                chunk = list(recording_dirs[start : start + 500])
                marks = ",".join("?" * len(chunk))
                found.update(r[0] for r in self._db.execute(
                    f"SELECT recording_dir FROM phases WHERE recording_dir IN ({marks})", chunk))
        return found


def _bump_view_versions(tx: sqlite3.Connection, job_ids: Iterable[str]) -> None:
    """Bumps ``jobs.view_version`` of these jobs, inside the write's own transaction.

    Every write that changes what a job's view shows (``PhaseQueries``: the job row, its phases'
    columns, its per-model costs) calls this, so a view cached under a version is never returned
    after such a write commits (``JobRow.view_version``). Appended events change only the phases'
    last sequences, which ``JobRow.sequence_sum`` follows without a write.
    """
    ids = sorted(job_ids)
    if ids:
        tx.execute(f"UPDATE jobs SET view_version = view_version + 1 WHERE job_id IN ({','.join('?' * len(ids))})", ids)


def _scope(
    project_id: str | None, job_ids: Sequence[str], phase_id: str | None
) -> tuple[list[str], list[object]]:
    """WHERE terms for a cost scope: one phase (one job + phase), jobs, or a project."""
    if job_ids:
        terms, args = [f"job_id IN ({','.join('?' * len(job_ids))})"], list(job_ids)
        if phase_id:
            terms.append("phase_id = ?")
            args.append(phase_id)
        return terms, args
    if project_id is not None:
        return ["project_id = ?"], [project_id]
    return [], []
