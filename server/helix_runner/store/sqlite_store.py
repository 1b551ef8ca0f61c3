"""Embedded SQLite persistence for jobs, phases, their events, tool calls and costs.

The store is plain data in, plain data out: nested domain values (results, costs, event
payloads) arrive already encoded by the domain codec, so this module knows tables, not events.
WAL mode keeps every committed write across a crash of the server process (``kill -9``);
each append is one transaction, committed before the events are handed to watchers.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    project_id TEXT NOT NULL,
    status TEXT NOT NULL,
    create_time_ns INTEGER NOT NULL,
    update_time_ns INTEGER NOT NULL
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
    options_json BLOB,
    on_disconnect TEXT NOT NULL DEFAULT 'CANCEL',
    result_json BLOB,
    cost_json BLOB,
    tool_stats_json BLOB,
    recording_dir TEXT NOT NULL DEFAULT '',
    reported_usd REAL,
    computed_usd REAL NOT NULL DEFAULT 0,
    computed_only INTEGER NOT NULL DEFAULT 0,
    pid INTEGER,
    pid_start_ticks INTEGER,
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
    PRIMARY KEY (job_id, phase_id, tool_use_id)
);
CREATE INDEX IF NOT EXISTS tool_calls_by_order ON tool_calls (job_id, phase_id, start_sequence);
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

# Statuses from which a phase can still change; anything else is final.
ACTIVE_STATUSES = ("PENDING", "QUEUED", "RUNNING", "PAUSING", "PAUSED", "AWAITING_APPROVAL")


class StoreError(Exception):
    """The store cannot be opened or used (unwritable directory, corrupt file)."""


class AlreadyExistsError(StoreError):
    """A row with this key already exists."""


@dataclass
class JobRow:
    job_id: str
    project_id: str
    status: str
    create_time_ns: int
    update_time_ns: int


@dataclass
class PhaseRow:
    job_id: str
    phase_id: str
    ordinal: int
    project_id: str
    status: str
    create_time_ns: int
    status_reason: str = ""
    start_time_ns: int | None = None
    end_time_ns: int | None = None
    session_id: str = ""
    model: str = ""
    working_dir: str = ""
    prompt: str = ""
    options_json: bytes | None = None
    on_disconnect: str = "CANCEL"
    last_sequence: int = 0
    result_json: bytes | None = None
    cost_json: bytes | None = None
    tool_stats_json: bytes | None = None
    recording_dir: str = ""
    reported_usd: float | None = None
    computed_usd: float = 0.0
    computed_only: int = 0
    pid: int | None = None
    pid_start_ticks: int | None = None


# last_sequence is not stored: it is MAX(sequence) of the phase's events (an index lookup), so an
# append is a single statement on the hot path.
_PHASE_COLUMNS = tuple(f.name for f in fields(PhaseRow) if f.name != "last_sequence")
_SELECT_PHASES = (
    f"SELECT {','.join(_PHASE_COLUMNS)}, (SELECT COALESCE(MAX(e.sequence), 0) FROM events e "
    "WHERE e.job_id = phases.job_id AND e.phase_id = phases.phase_id) FROM phases"
)


def _phase_row(r: Sequence[object]) -> PhaseRow:
    return PhaseRow(**dict(zip(_PHASE_COLUMNS, r[:-1], strict=True)), last_sequence=r[-1])


@dataclass
class EventRow:
    sequence: int
    receive_time_ns: int
    kind: str
    body: bytes


@dataclass
class ToolCallRow:
    tool_use_id: str
    name: str
    status: str
    start_sequence: int
    body: bytes
    phase_id: str = ""


@dataclass
class ModelCostRow:
    model: str
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int
    cache_write_5m_input_tokens: int
    cache_write_1h_input_tokens: int
    web_search_requests: int
    reported_usd: float | None
    computed_usd: float
    pricing_source: str


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
            self._db.executescript(_SCHEMA)
            self._db.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open database {path}: {exc}") from None
        except OSError as exc:
            raise StoreError(f"cannot create data directory {path.parent}: {exc.strerror}") from None
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._checkpointer = threading.Thread(target=self._checkpoint_loop, name="sqlite-checkpoint", daemon=True)
        self._checkpointer.start()

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
                "INSERT INTO jobs (job_id, project_id, status, create_time_ns, update_time_ns) VALUES (?,?,?,?,?)",
                (job_id, project_id, "PENDING", now_ns, now_ns),
            )
            return JobRow(job_id, project_id, "PENDING", now_ns, now_ns), True

    def get_job(self, job_id: str) -> JobRow | None:
        with self._lock:
            return self._job(job_id)

    def _job(self, job_id: str) -> JobRow | None:
        r = self._db.execute(
            "SELECT job_id, project_id, status, create_time_ns, update_time_ns FROM jobs WHERE job_id = ?", (job_id,)
        ).fetchone()
        return JobRow(*r) if r else None

    def list_jobs(
        self,
        project_id: str | None,
        statuses: Sequence[str],
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
            args.extend(statuses)
        if after is not None:
            where.append("(create_time_ns < ? OR (create_time_ns = ? AND job_id < ?))")
            args.extend([after[0], after[0], after[1]])
        sql = "SELECT job_id, project_id, status, create_time_ns, update_time_ns FROM jobs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY create_time_ns DESC, job_id DESC LIMIT ?"
        args.append(limit)
        with self._lock:
            return [JobRow(*r) for r in self._db.execute(sql, args).fetchall()]

    # -- phases -----------------------------------------------------------------------------

    def insert_phase(self, row: PhaseRow) -> PhaseRow:
        """Inserts a new phase (its ordinal is assigned here) and makes it the job's latest."""
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                (count,) = self._db.execute("SELECT COUNT(*) FROM phases WHERE job_id = ?", (row.job_id,)).fetchone()
                row.ordinal = count + 1
                cols = ",".join(_PHASE_COLUMNS)
                self._db.execute(
                    f"INSERT INTO phases ({cols}) VALUES ({','.join('?' * len(_PHASE_COLUMNS))})",
                    [getattr(row, c) for c in _PHASE_COLUMNS],
                )
                self._db.execute(
                    "UPDATE jobs SET status = ?, update_time_ns = ? WHERE job_id = ?",
                    (row.status, row.create_time_ns, row.job_id),
                )
                self._db.execute("COMMIT")
            except sqlite3.IntegrityError:
                self._db.execute("ROLLBACK")
                raise AlreadyExistsError(f"phase {row.phase_id} already exists in job {row.job_id}") from None
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return row

    def update_phase(self, job_id: str, phase_id: str, now_ns: int, **values: object) -> None:
        """Updates phase columns; a status change also becomes the job's status if this is its latest phase."""
        unknown = set(values) - set(_PHASE_COLUMNS)
        if unknown:
            raise ValueError(f"unknown phase columns: {sorted(unknown)}")
        if not values:
            return
        sets = ",".join(f"{k} = ?" for k in values)
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    f"UPDATE phases SET {sets} WHERE job_id = ? AND phase_id = ?", [*values.values(), job_id, phase_id]
                )
                if "status" in values:
                    self._db.execute(
                        "UPDATE jobs SET status = ?, update_time_ns = ? WHERE job_id = ? AND ? = "
                        "(SELECT phase_id FROM phases WHERE job_id = ? ORDER BY ordinal DESC LIMIT 1)",
                        (values["status"], now_ns, job_id, phase_id, job_id),
                    )
                else:
                    self._db.execute("UPDATE jobs SET update_time_ns = ? WHERE job_id = ?", (now_ns, job_id))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def get_phase(self, job_id: str, phase_id: str) -> PhaseRow | None:
        with self._lock:
            r = self._db.execute(f"{_SELECT_PHASES} WHERE job_id = ? AND phase_id = ?", (job_id, phase_id)).fetchone()
        return _phase_row(r) if r else None

    def list_phases(self, job_id: str) -> list[PhaseRow]:
        with self._lock:
            rows = self._db.execute(f"{_SELECT_PHASES} WHERE job_id = ? ORDER BY ordinal", (job_id,)).fetchall()
        return [_phase_row(r) for r in rows]

    def active_phases(self) -> list[PhaseRow]:
        """Phases whose status is not final (after a crash: the ones to mark INTERRUPTED)."""
        marks = ",".join("?" * len(ACTIVE_STATUSES))
        with self._lock:
            rows = self._db.execute(f"{_SELECT_PHASES} WHERE status IN ({marks})", ACTIVE_STATUSES).fetchall()
        return [_phase_row(r) for r in rows]

    # -- events -----------------------------------------------------------------------------

    def append_events(self, job_id: str, phase_id: str, events: Sequence[EventRow]) -> None:
        """Appends events in one transaction (the phase's last_sequence follows from them)."""
        if not events:
            return
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(
                    "INSERT INTO events (job_id, phase_id, sequence, receive_time_ns, kind, body) VALUES (?,?,?,?,?,?)",
                    [(job_id, phase_id, e.sequence, e.receive_time_ns, e.kind, e.body) for e in events],
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def append_events_many(self, batches: Sequence[tuple[str, str, Sequence[EventRow]]]) -> None:
        """Appends the events of several phases in one transaction (group commit)."""
        if not batches:
            return
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(
                    "INSERT INTO events (job_id, phase_id, sequence, receive_time_ns, kind, body) VALUES (?,?,?,?,?,?)",
                    [(job_id, phase_id, e.sequence, e.receive_time_ns, e.kind, e.body)
                     for job_id, phase_id, events in batches for e in events],
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

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
        rows = [(job_id, phase_id, c.tool_use_id, c.name, c.status, c.start_sequence, c.body) for c in calls]
        if not rows:
            return
        with self._lock:
            self._db.executemany(
                "INSERT INTO tool_calls (job_id, phase_id, tool_use_id, name, status, start_sequence, body) "
                "VALUES (?,?,?,?,?,?,?) ON CONFLICT (job_id, phase_id, tool_use_id) DO UPDATE SET "
                "name = excluded.name, status = excluded.status, body = excluded.body",
                rows,
            )

    def mark_tool_calls_unfinished(self, job_id: str, phase_id: str) -> int:
        """After a crash: calls still RUNNING or HELD will never finish; returns how many."""
        with self._lock:
            cur = self._db.execute(
                "UPDATE tool_calls SET status = 'UNFINISHED' WHERE job_id = ? AND phase_id = ? "
                "AND status IN ('RUNNING', 'HELD')",
                (job_id, phase_id),
            )
            return cur.rowcount

    def list_tool_calls(
        self,
        job_id: str,
        phase_id: str | None,
        tool_name: str | None,
        statuses: Sequence[str],
        limit: int,
        after: tuple[int, int, str] | None = None,
    ) -> list[ToolCallRow]:
        """Tool calls in (phase ordinal, start sequence) order; ``after`` is the last row's key."""
        where, args = ["t.job_id = ?"], [job_id]
        if phase_id:
            where.append("t.phase_id = ?")
            args.append(phase_id)
        if tool_name:
            where.append("t.name = ?")
            args.append(tool_name)
        if statuses:
            where.append(f"t.status IN ({','.join('?' * len(statuses))})")
            args.extend(statuses)
        if after is not None:
            where.append("(p.ordinal > ? OR (p.ordinal = ? AND (t.start_sequence > ? OR "
                         "(t.start_sequence = ? AND t.tool_use_id > ?))))")
            args.extend([after[0], after[0], after[1], after[1], after[2]])
        sql = (
            "SELECT t.tool_use_id, t.name, t.status, t.start_sequence, t.body, t.phase_id, p.ordinal "
            "FROM tool_calls t JOIN phases p ON p.job_id = t.job_id AND p.phase_id = t.phase_id WHERE "
            + " AND ".join(where)
            + " ORDER BY p.ordinal, t.start_sequence, t.tool_use_id LIMIT ?"
        )
        args.append(limit)
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        return [ToolCallRow(r[0], r[1], r[2], r[3], r[4], r[5]) for r in rows]

    def phase_ordinal(self, job_id: str, phase_id: str) -> int:
        with self._lock:
            r = self._db.execute(
                "SELECT ordinal FROM phases WHERE job_id = ? AND phase_id = ?", (job_id, phase_id)
            ).fetchone()
        return r[0] if r else 0

    # -- costs ------------------------------------------------------------------------------

    def replace_model_costs(self, job_id: str, phase_id: str, project_id: str, rows: Sequence[ModelCostRow]) -> None:
        """Replaces the per-model cost rows of a phase (costs are snapshots, never summed)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute("DELETE FROM model_costs WHERE job_id = ? AND phase_id = ?", (job_id, phase_id))
                self._db.executemany(
                    "INSERT INTO model_costs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    [
                        (job_id, phase_id, project_id, r.model, r.input_tokens, r.output_tokens,
                         r.cache_read_input_tokens, r.cache_write_5m_input_tokens, r.cache_write_1h_input_tokens,
                         r.web_search_requests, r.reported_usd, r.computed_usd, r.pricing_source)
                        for r in rows
                    ],
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def model_costs(
        self, *, project_id: str | None = None, job_id: str | None = None, phase_id: str | None = None
    ) -> list[tuple[str, str, ModelCostRow]]:
        """(job_id, phase_id, row) for every per-model cost row in the scope."""
        where, args = _scope(project_id, job_id, phase_id)
        sql = (
            "SELECT job_id, phase_id, model, input_tokens, output_tokens, cache_read_input_tokens, "
            "cache_write_5m_input_tokens, cache_write_1h_input_tokens, web_search_requests, reported_usd, "
            "computed_usd, pricing_source FROM model_costs"
        )
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        return [(r[0], r[1], ModelCostRow(*r[2:])) for r in rows]

    def phases_in_scope(
        self, *, project_id: str | None = None, job_id: str | None = None, phase_id: str | None = None
    ) -> list[PhaseRow]:
        where, args = _scope(project_id, job_id, phase_id)
        sql = _SELECT_PHASES
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self._lock:
            return [_phase_row(r) for r in self._db.execute(sql, args).fetchall()]


    # -- retention ---------------------------------------------------------------------------

    def expired_jobs(self, cutoff_ns: int, limit: int) -> list[tuple[str, list[str]]]:
        """Jobs untouched since ``cutoff_ns`` with no active phase, oldest first: (job_id, recording dirs)."""
        marks = ",".join("?" * len(ACTIVE_STATUSES))
        with self._lock:
            jobs = [r[0] for r in self._db.execute(
                f"SELECT job_id FROM jobs WHERE update_time_ns < ? AND NOT EXISTS (SELECT 1 FROM phases p "
                f"WHERE p.job_id = jobs.job_id AND p.status IN ({marks})) ORDER BY update_time_ns LIMIT ?",
                (cutoff_ns, *ACTIVE_STATUSES, limit),
            ).fetchall()]
            return [
                (job, [r[0] for r in self._db.execute(
                    "SELECT recording_dir FROM phases WHERE job_id = ? AND recording_dir != ''", (job,))])
                for job in jobs
            ]

    def delete_jobs(self, job_ids: Sequence[str]) -> int:
        """Deletes jobs with their phases, events, tool calls and costs, in one transaction; returns phases deleted."""
        if not job_ids:
            return 0
        marks = ",".join("?" * len(job_ids))
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for table in ("events", "tool_calls", "model_costs"):
                    self._db.execute(f"DELETE FROM {table} WHERE job_id IN ({marks})", job_ids)
                phases = self._db.execute(f"DELETE FROM phases WHERE job_id IN ({marks})", job_ids).rowcount
                self._db.execute(f"DELETE FROM jobs WHERE job_id IN ({marks})", job_ids)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return phases

    def finished_recordings(self) -> list[tuple[str, str, str]]:
        """(job_id, phase_id, recording_dir) of finished phases that still have a recording, oldest end first."""
        marks = ",".join("?" * len(ACTIVE_STATUSES))
        with self._lock:
            return [tuple(r) for r in self._db.execute(
                f"SELECT job_id, phase_id, recording_dir FROM phases WHERE recording_dir != '' "
                f"AND status NOT IN ({marks}) ORDER BY COALESCE(end_time_ns, create_time_ns), job_id, phase_id",
                ACTIVE_STATUSES,
            ).fetchall()]

    def forget_recording(self, job_id: str, phase_id: str) -> None:
        """Notes that a phase's recording was deleted (without counting as activity on its job)."""
        with self._lock:
            self._db.execute(
                "UPDATE phases SET recording_dir = '' WHERE job_id = ? AND phase_id = ?", (job_id, phase_id)
            )


def _scope(project_id: str | None, job_id: str | None, phase_id: str | None) -> tuple[list[str], list[str]]:
    """WHERE terms for a cost scope: a phase (job + phase), a job, or a project."""
    if job_id:
        if phase_id:
            return ["job_id = ?", "phase_id = ?"], [job_id, phase_id]
        return ["job_id = ?"], [job_id]
    if project_id is not None:
        return ["project_id = ?"], [project_id]
    return [], []
