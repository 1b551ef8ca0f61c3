"""The SQL both stores share: each query written once, over a small dialect object.

``SqliteStore`` and ``PostgresStore`` keep the same tables and columns (``store/rows.py`` maps their
rows), so most of the ``Store`` protocol is the same SQL with other tokens: placeholders, how a list
is bound (``IN (?, ?)`` against one array parameter, ``= ANY(?)``) and how to ask whether an index
exists. ``SqlStore`` holds those queries; a store subclasses it and supplies its connection handling
(``_reading``, ``_transaction``), what a shared database adds to a write of a phase's history
(``_lock_phases``, ``_fence``, ``_announce``), how it inserts many events at once
(``_insert_events``), and the few methods written for its database alone (``insert_phase``,
``tool_call_stats``). Every write of a running phase's history (events, phase columns, tool calls,
costs, the webhook deliveries its events cause) is one ``_write_phases_in`` over a transaction,
whoever commits it: the single-write methods, ``append_events``, ``write_phases``, or a PostgreSQL
writer's own connection (store/postgres_writer.py). Shared queries use ``?`` placeholders; the
PostgreSQL dialect turns them into psycopg's ``%s`` once per query text. The model: openfga's
``pkg/storage/sqlcommon`` under its sqlite/postgres/mysql datastores, procrastinate's one
``queries.sql`` run by every connector. The contract suite (tests/store/test_store_contract.py)
runs every query on both databases.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, fields
from typing import Any

from helix_runner.domain.audit import AuditEntry
from helix_runner.domain.checkpoints import Checkpoint
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.quotas import ProjectQuota, Spend
from helix_runner.domain.tool_tracker import ToolCallStatus
from helix_runner.store import audit_rows, checkpoint_rows, egress_secret_rows
from helix_runner.store.protocol import (
    ACTIVE_STATUSES,
    FINISHED_TOOL_STATUSES,
    AlreadyExistsError,
    AppendEvents,
    AppendTranscript,
    EgressSecretRow,
    EventRow,
    FencedError,
    InsertCheckpoint,
    InsertOutbox,
    JobRow,
    MarkRewound,
    ModelCostRow,
    OutboxRow,
    PhaseCostSums,
    PhaseRow,
    PhaseWrite,
    ReplaceModelCosts,
    SaveRequest,
    ToolCallRow,
    UpdatePhase,
    UpsertToolCalls,
    WebhookAttemptRow,
    WebhookDeliveryRow,
    WebhookRow,
)
from helix_runner.store.quota_rows import PHASE_SPEND
from helix_runner.store.rows import (
    WEBHOOK_COLUMNS,
    job_row,
    model_cost_row,
    model_cost_values,
    phase_row,
    phase_value,
    tool_call_row,
    webhook_attempt_row,
    webhook_delivery_row,
    webhook_row,
    webhook_values,
)

# PhaseRow fields are the phases table's columns; last_sequence, the last field, is not stored: it is
# MAX(sequence) of the phase's events (an index seek), so an append is one statement on the hot path.
PHASE_COLUMNS = tuple(f.name for f in fields(PhaseRow))[:-1]
assert fields(PhaseRow)[-1].name == "last_sequence"
SELECT_PHASES = (
    f"SELECT {','.join('p.' + c for c in PHASE_COLUMNS)}, (SELECT COALESCE(MAX(e.sequence), 0) FROM events e "
    "WHERE e.job_id = p.job_id AND e.phase_id = p.phase_id) FROM phases p"
)
JOB_COLUMNS = "job_id, project_id, status, create_time_ns, update_time_ns, view_version"
# A job row with its sequence_sum (JobRow): one MAX seek per phase (the events primary key).
SELECT_JOBS = (
    f"SELECT {JOB_COLUMNS}, (SELECT CAST(COALESCE(SUM((SELECT MAX(e.sequence) FROM events e WHERE "
    "e.job_id = p.job_id AND e.phase_id = p.phase_id)), 0) AS BIGINT) FROM phases p WHERE p.job_id = jobs.job_id) "
    "FROM jobs"
)
# Finished calls a database from before tool_calls.duration_ns holds without one (only in their
# body); ``backfill_tool_call_durations`` fills them in and drops this index when done. Made by
# SQLite's migration to version 2 and PostgreSQL's migration 0002.
BACKFILL_INDEX = "tool_calls_duration_backfill"
ACTIVE = [s.name for s in ACTIVE_STATUSES]
FINISHED = [s.name for s in FINISHED_TOOL_STATUSES]
UNFINISHED_FROM = [ToolCallStatus.RUNNING.name, ToolCallStatus.HELD.name]
# Values bound in one statement at most (SQLite's default bound is 32 766 parameters).
_CHUNK = 500


@dataclass(frozen=True)
class Dialect:
    """What the shared queries need to know about the database they run on."""

    name: str
    placeholder: str
    arrays: bool
    """A list is bound as one array parameter (``= ANY(?)``); else as one parameter per value."""
    index_exists: str
    """A query with one parameter, the index's name, that returns a row when the index exists."""
    skip_locked: str = ""
    """Appended to a SELECT whose rows one writer claims: rows another transaction locked are skipped
    (PostgreSQL's ``FOR UPDATE SKIP LOCKED``; SQLite has one writer at a time and needs none)."""

    def sql(self, text: str) -> str:
        """``text`` with ``?`` placeholders in the driver's style."""
        return text if self.placeholder == "?" else _format_style(text)

    def in_list(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """A WHERE term matching ``column`` against ``values``, and its parameters."""
        if self.arrays:
            return f"{column} = ANY(?)", [list(values)]
        return f"{column} IN ({','.join('?' * len(values))})", list(values)

    def not_in_list(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        term, args = self.in_list(column, values)
        return f"NOT ({term})", args


OUTBOX_COLUMNS = "delivery_id, subscription_id, event_type, job_id, phase_id, sequence, body, create_time_ns"
DELIVERY_COLUMNS = (f"id, {OUTBOX_COLUMNS}, state, attempts, next_attempt_ns, last_status_code, last_error, "
                    "end_time_ns")


# A PENDING delivery of the same subscription and phase before ``d`` (which then waits: in-order delivery).
_EARLIER_PENDING = ("SELECT 1 FROM webhook_deliveries e WHERE e.state = 'PENDING' AND e.subscription_id = d.subscription_id "
                    "AND e.job_id = d.job_id AND e.phase_id = d.phase_id AND e.id < d.id")


def insert_outbox(dialect: Dialect, tx: Any, rows: Sequence[OutboxRow]) -> None:
    """In ``tx``: new PENDING deliveries, due now, in the order given (their ``id`` order).

    A delivery id already stored is skipped: the writer sends a batch again when it cannot know
    whether the first try committed (``StoreUnavailable``), and a delivery must be queued once.
    """
    if rows:
        tx.executemany(
            dialect.sql(f"INSERT INTO webhook_deliveries ({OUTBOX_COLUMNS}, state, next_attempt_ns) "
                        "VALUES (?,?,?,?,?,?,?,?,'PENDING',?) ON CONFLICT (delivery_id) DO NOTHING"),
            [(r.delivery_id, r.subscription_id, r.event_type, r.job_id, r.phase_id, r.sequence, r.body,
              r.create_time_ns, r.create_time_ns) for r in rows],
        )


def mark_unfinished(dialect: Dialect, tx: Any, job_id: str, phase_id: str) -> int:
    """In ``tx``: the phase's RUNNING or HELD tool calls become UNFINISHED (they never will); how many."""
    term, args = dialect.in_list("status", UNFINISHED_FROM)
    return tx.execute(
        dialect.sql(f"UPDATE tool_calls SET status = ? WHERE job_id = ? AND phase_id = ? AND {term}"),
        (ToolCallStatus.UNFINISHED.name, job_id, phase_id, *args),
    ).rowcount


@functools.lru_cache(maxsize=1024)
def _format_style(text: str) -> str:
    # psycopg's placeholders are %s; a literal % must be doubled.
    return text.replace("%", "%%").replace("?", "%s")


# The method of ``SqlStore`` that applies each kind of row write (``_write_phases_in``).
_APPLY = {
    UpdatePhase: "_update_phase_in",
    UpsertToolCalls: "_upsert_tool_calls_in",
    ReplaceModelCosts: "_replace_model_costs_in",
    InsertOutbox: "_insert_outbox_in",
    InsertCheckpoint: "_insert_checkpoint_in",
    MarkRewound: "_mark_rewound_in",
    AppendTranscript: "_append_transcript_in",
    SaveRequest: "_save_request_in",
}

SQLITE = Dialect("sqlite", "?", arrays=False,
                 index_exists="SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?")
POSTGRESQL = Dialect("postgresql", "%s", arrays=True, index_exists="SELECT 1 WHERE to_regclass(?) IS NOT NULL",
                     skip_locked=" FOR UPDATE SKIP LOCKED")


class SqlStore:
    """The ``Store`` methods both databases answer with the same SQL (see the module docstring).

    A subclass sets ``dialect`` and implements the connection hooks below; every method here is one
    transaction or one read.
    """

    dialect: Dialect

    # -- what a store supplies ---------------------------------------------------------------------

    def _reading(self) -> AbstractContextManager[Any]:
        """A connection to read from (``execute(sql, args)`` returns a cursor)."""
        raise NotImplementedError

    def _transaction(self) -> AbstractContextManager[Any]:
        """One write transaction (``execute``, ``executemany``): committed on success, rolled back on an error."""
        raise NotImplementedError

    def _fence(self, tx: Any, job_id: str, phase_id: str, *, missing_ok: bool = False) -> bool:
        """Lets a write of this phase's history go ahead in ``tx``, or raises ``FencedError``.

        On a shared database only the phase's owner may write it (``store/postgres_cluster.py``);
        alone, a process writes every phase. Returns False only when ``missing_ok`` and the phase
        is known not to exist.
        """
        return True

    def _lock_phases(self, tx: Any, keys: Sequence[tuple[str, str]]) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
        """(writable, existing) of these phases, held so until ``tx`` ends (``_fence`` for many).

        Alone, a process writes every phase; whether one exists does not matter (an update of a
        missing phase changes no row).
        """
        return set(keys), set(keys)

    def _insert_events(self, tx: Any, rows: list[tuple], *, retry: bool) -> None:
        """Inserts (job_id, phase_id, sequence, receive_time_ns, kind, body) rows; with ``retry``,
        rows already there (the same rows, committed by the attempt that was retried) are skipped."""
        conflict = " ON CONFLICT (job_id, phase_id, sequence) DO NOTHING" if retry else ""
        tx.executemany(
            self.dialect.sql("INSERT INTO events (job_id, phase_id, sequence, receive_time_ns, kind, body) "
                             f"VALUES (?,?,?,?,?,?){conflict}"),
            rows,
        )

    def _announce(self, tx: Any, pointers: Sequence[tuple[str, str, int]], changed: Sequence[tuple[str, str]]) -> None:
        """Tells other processes, when ``tx`` commits, that these phases have events up to the given
        sequence (job, phase, sequence), and that these other phases' status or result changed."""

    def _now_ns(self, tx: Any) -> int:
        """The clock claims and retry times are kept by: this process's, alone; the database's, shared
        (so the replicas' clocks never have to agree)."""
        return time.time_ns()

    # -- helpers -----------------------------------------------------------------------------------

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        with self._reading() as db:
            return db.execute(self.dialect.sql(sql), args).fetchall()

    def _read_one(self, sql: str, args: Sequence[Any] = ()) -> Any:
        with self._reading() as db:
            return db.execute(self.dialect.sql(sql), args).fetchone()

    # -- jobs --------------------------------------------------------------------------------------

    def get_or_create_job(self, job_id: str, project_id: str, now_ns: int) -> tuple[JobRow, bool]:
        """Returns the job, creating it on first use; the bool says whether it was created."""
        q = self.dialect.sql
        with self._transaction() as tx:
            created = tx.execute(
                q(f"INSERT INTO jobs ({JOB_COLUMNS}) VALUES (?,?,?,?,?,0) ON CONFLICT (job_id) DO NOTHING "
                  f"RETURNING {JOB_COLUMNS}"),
                (job_id, project_id, PhaseStatus.PENDING.name, now_ns, now_ns),
            ).fetchone()
            if created:
                return job_row(created), True
            return job_row(tx.execute(q(f"{SELECT_JOBS} WHERE job_id = ?"), (job_id,)).fetchone()), False

    def get_job(self, job_id: str) -> JobRow | None:
        r = self._read_one(f"{SELECT_JOBS} WHERE job_id = ?", (job_id,))
        return job_row(r) if r else None

    def list_jobs(
        self,
        project_id: str | Sequence[str] | None,
        statuses: Sequence[PhaseStatus],
        limit: int,
        after: tuple[int, str] | None = None,
    ) -> list[JobRow]:
        """Jobs newest first; ``after`` is the (create_time_ns, job_id) of the last row of the previous page."""
        where: list[str] = []
        args: list[Any] = []
        if isinstance(project_id, str) and project_id:
            where.append("project_id = ?")
            args.append(project_id)
        elif project_id is not None and not isinstance(project_id, str):  # the projects a caller may see
            term, values = self.dialect.in_list("project_id", list(project_id) or [""])
            where.append(term)
            args.extend(values)
        if statuses:
            term, values = self.dialect.in_list("status", [s.name for s in statuses])
            where.append(term)
            args.extend(values)
        if after is not None:
            where.append("(create_time_ns, job_id) < (?, ?)")  # a row value: one index seek on both
            args.extend(after)
        sql = SELECT_JOBS
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [job_row(r) for r in self._read(sql + " ORDER BY create_time_ns DESC, job_id DESC LIMIT ?",
                                               [*args, limit])]

    # -- phases ------------------------------------------------------------------------------------

    def update_phase(self, job_id: str, phase_id: str, now_ns: int, **values: object) -> None:
        """Updates phase columns; a status change also becomes the job's status if this is its latest phase."""
        write = UpdatePhase(job_id, phase_id, now_ns, values)  # ValueError for an unknown column
        if values:
            self._write_one(write)

    def _write_one(self, write: PhaseWrite) -> None:
        """One write in a transaction of its own; ``FencedError`` when it was refused."""
        refused = self.write_phases([write])
        if refused:
            raise FencedError(sorted(refused))

    # -- a running phase's writes ------------------------------------------------------------------

    def write_phases(self, writes: Sequence[PhaseWrite]) -> set[tuple[str, str]]:
        """Applies a running phase's writes (of one or more phases) in order, in one transaction;
        returns the refused phases (``Committer.commit``: none of their writes is applied)."""
        if not writes:
            return set()
        with self._transaction() as tx:
            return self._write_phases_in(tx, writes)

    def _write_phases_in(self, tx: Any, writes: Sequence[PhaseWrite], *, retry: bool = False) -> set[tuple[str, str]]:
        """``write_phases`` in ``tx``: one fence check for every phase, one insert for every event,
        each other write as its own method would, one announcement; returns the refused phases."""
        keys = list(dict.fromkeys((w.job_id, w.phase_id) for w in writes))
        writable, existing = self._lock_phases(tx, keys)
        refused = set()
        if len(writable) < len(keys):
            for w in writes:
                key = (w.job_id, w.phase_id)
                # An update of a phase that does not exist is no refusal (update_phase's rule).
                if key not in writable and (key in existing or type(w) is not UpdatePhase):
                    refused.add(key)
        events: list[tuple] = []
        last: dict[tuple[str, str], int] = {}
        for w in writes:
            if type(w) is AppendEvents and w.rows and (w.job_id, w.phase_id) in writable:
                job_id, phase_id = w.job_id, w.phase_id
                events.extend((job_id, phase_id, e.sequence, e.receive_time_ns, e.kind, e.body) for e in w.rows)
                last[(job_id, phase_id)] = max(last.get((job_id, phase_id), 0), w.rows[-1].sequence)
        if events:
            self._insert_events(tx, events, retry=retry)
        changed: dict[tuple[str, str], None] = {}
        for w in writes:
            key = (w.job_id, w.phase_id)
            if key not in writable or type(w) is AppendEvents:
                continue
            # Each other kind of write by its own statements, in order, in this transaction: a kind
            # (e.g. InsertOutbox, the deliveries that must commit with the change that causes them) is
            # a record in store/protocol.py's PhaseWrite and its method here, fenced with its phase.
            getattr(self, _APPLY[type(w)])(tx, w)
            if type(w) is UpdatePhase and ("status" in w.values or "result_pb" in w.values):
                changed[key] = None
        if last or changed:
            self._announce(tx, [(j, p, s) for (j, p), s in last.items()],
                           [key for key in changed if key not in last])
        return refused

    def _insert_outbox_in(self, tx: Any, w: InsertOutbox) -> None:
        insert_outbox(self.dialect, tx, w.rows)

    # -- checkpoints, transcripts, accepted requests (docs/fork-and-rewind.md) -----------------------

    def _insert_checkpoint_in(self, tx: Any, w: InsertCheckpoint) -> None:
        checkpoint_rows.insert_checkpoint(self.dialect, tx, w.job_id, w.phase_id, w.checkpoint)

    def _mark_rewound_in(self, tx: Any, w: MarkRewound) -> None:
        checkpoint_rows.mark_rewound(self.dialect, tx, w.job_id, w.phase_id, w.after_number)

    def _append_transcript_in(self, tx: Any, w: AppendTranscript) -> None:
        checkpoint_rows.append_transcript(self.dialect, tx, w.job_id, w.phase_id, w.session_id, w.offset, w.data,
                                          w.restart)

    def insert_checkpoint(self, job_id: str, phase_id: str, checkpoint: Checkpoint) -> None:
        """One checkpoint, in a transaction of its own (a running phase's go through its writer)."""
        self._write_one(InsertCheckpoint(job_id, phase_id, checkpoint))

    def list_checkpoints(self, job_id: str, phase_id: str) -> list[Checkpoint]:
        rows = self._read(f"SELECT {','.join(checkpoint_rows.CHECKPOINT_COLUMNS)} FROM phase_checkpoints "
                          "WHERE job_id = ? AND phase_id = ? ORDER BY number", (job_id, phase_id))
        return [checkpoint_rows.checkpoint_from_row(r) for r in rows]

    def read_transcript(self, job_id: str, phase_id: str, session_id: str) -> bytes:
        rows = self._read("SELECT start_offset, data FROM phase_transcripts WHERE job_id = ? AND phase_id = ? "
                          "AND session_id = ? ORDER BY start_offset", (job_id, phase_id, session_id))
        return checkpoint_rows.joined_transcript(rows, f"{session_id} of {job_id}/{phase_id}")

    def save_phase_request(self, job_id: str, phase_id: str, request_pb: bytes) -> None:
        self._write_one(SaveRequest(job_id, phase_id, request_pb))

    def _save_request_in(self, tx: Any, w: SaveRequest) -> None:
        tx.execute(self.dialect.sql("INSERT INTO phase_requests (job_id, phase_id, request_pb) VALUES (?,?,?) "
                                    "ON CONFLICT (job_id, phase_id) DO UPDATE SET request_pb = excluded.request_pb"),
                   (w.job_id, w.phase_id, w.request_pb))

    def get_phase_request(self, job_id: str, phase_id: str) -> bytes | None:
        r = self._read_one("SELECT request_pb FROM phase_requests WHERE job_id = ? AND phase_id = ?",
                           (job_id, phase_id))
        return bytes(r[0]) if r else None

    def _update_phase_in(self, tx: Any, w: UpdatePhase) -> None:
        if not w.values:
            return
        stored = {k: phase_value(k, v) for k, v in w.values.items()}
        q = self.dialect.sql
        sets = ",".join(f"{k} = ?" for k in stored)
        tx.execute(q(f"UPDATE phases SET {sets} WHERE job_id = ? AND phase_id = ?"),
                   [*stored.values(), w.job_id, w.phase_id])
        if "status" in stored:
            tx.execute(
                q("UPDATE jobs SET status = ?, update_time_ns = ? WHERE job_id = ? AND ? = "
                  "(SELECT phase_id FROM phases WHERE job_id = ? ORDER BY ordinal DESC LIMIT 1)"),
                (stored["status"], w.now_ns, w.job_id, w.phase_id, w.job_id),
            )
            # Also when it is not the latest phase: the job's view shows every phase.
            tx.execute(q("UPDATE jobs SET view_version = view_version + 1 WHERE job_id = ?"), (w.job_id,))
        else:
            tx.execute(q("UPDATE jobs SET update_time_ns = ?, view_version = view_version + 1 WHERE job_id = ?"),
                       (w.now_ns, w.job_id))

    def get_phase(self, job_id: str, phase_id: str) -> PhaseRow | None:
        r = self._read_one(f"{SELECT_PHASES} WHERE p.job_id = ? AND p.phase_id = ?", (job_id, phase_id))
        return phase_row(r) if r else None

    def phases_of_jobs(self, job_ids: Sequence[str]) -> list[PhaseRow]:
        """The phases of all these jobs in one query, by job then ordinal."""
        if not job_ids:
            return []
        term, args = self.dialect.in_list("p.job_id", job_ids)
        return [phase_row(r) for r in self._read(f"{SELECT_PHASES} WHERE {term} ORDER BY p.job_id, p.ordinal", args)]

    def active_phases(self) -> list[PhaseRow]:
        """Phases whose status is not final (after a crash: the ones to mark INTERRUPTED)."""
        term, args = self.dialect.in_list("p.status", ACTIVE)
        return [phase_row(r) for r in self._read(f"{SELECT_PHASES} WHERE {term}", args)]

    # -- events ------------------------------------------------------------------------------------

    def append_events(self, batches: Sequence[tuple[str, str, Sequence[EventRow]]],
                      outbox: Sequence[OutboxRow] = ()) -> None:
        """Appends the events of one or more phases in one transaction (group commit), with the
        webhook deliveries they cause (``outbox``).

        Phases this handle may not write are left out, their deliveries with them, and named by the
        ``FencedError`` raised after the others were committed.
        """
        writes: list[PhaseWrite] = [AppendEvents(job_id, phase_id, rows) for job_id, phase_id, rows in batches if rows]
        by_phase: dict[tuple[str, str], list[OutboxRow]] = {}
        for row in outbox:
            by_phase.setdefault((row.job_id, row.phase_id), []).append(row)
        writes += [InsertOutbox(job_id, phase_id, rows) for (job_id, phase_id), rows in by_phase.items()]
        refused = self.write_phases(writes)
        if refused:
            raise FencedError([key for key in dict.fromkeys((w.job_id, w.phase_id) for w in writes) if key in refused])

    def read_events(self, job_id: str, phase_id: str, after_sequence: int, limit: int) -> list[EventRow]:
        rows = self._read(
            "SELECT sequence, receive_time_ns, kind, body FROM events "
            "WHERE job_id = ? AND phase_id = ? AND sequence > ? ORDER BY sequence LIMIT ?",
            (job_id, phase_id, after_sequence, limit),
        )
        return [EventRow(*r) for r in rows]

    # -- tool calls --------------------------------------------------------------------------------

    def upsert_tool_calls(self, job_id: str, phase_id: str, calls: Iterable[ToolCallRow]) -> None:
        calls = list(calls)
        if calls:
            self._write_one(UpsertToolCalls(job_id, phase_id, calls))

    def _upsert_tool_calls_in(self, tx: Any, w: UpsertToolCalls) -> None:
        job_id, phase_id = w.job_id, w.phase_id
        rows = [
            (job_id, phase_id, c.tool_use_id, c.name, c.status.name, c.start_sequence, c.body, c.duration_ns)
            for c in w.calls
        ]
        if rows:
            tx.executemany(
                self.dialect.sql(
                    "INSERT INTO tool_calls (job_id, phase_id, tool_use_id, name, status, start_sequence, body, "
                    "duration_ns) VALUES (?,?,?,?,?,?,?,?) ON CONFLICT (job_id, phase_id, tool_use_id) DO UPDATE "
                    "SET name = excluded.name, status = excluded.status, body = excluded.body, "
                    "duration_ns = excluded.duration_ns"),
                rows,
            )

    def mark_tool_calls_unfinished(self, job_id: str, phase_id: str) -> int:
        """After a crash: calls still RUNNING or HELD will never finish; returns how many."""
        with self._transaction() as tx:
            if not self._fence(tx, job_id, phase_id, missing_ok=True):
                return 0
            return mark_unfinished(self.dialect, tx, job_id, phase_id)

    def _tool_call_filter(
        self, job_id: str, phase_id: str | None, tool_name: str | None, statuses: Sequence[ToolCallStatus]
    ) -> tuple[list[str], list[Any]]:
        where, args = ["t.job_id = ?"], [job_id]
        if phase_id:
            where.append("t.phase_id = ?")
            args.append(phase_id)
        if tool_name:
            where.append("t.name = ?")
            args.append(tool_name)
        if statuses:
            term, values = self.dialect.in_list("t.status", [s.name for s in statuses])
            where.append(term)
            args.extend(values)
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
            where.append("(p.ordinal, t.start_sequence, t.tool_use_id) > (?, ?, ?)")
            args.extend(after)
        rows = self._read(
            "SELECT t.tool_use_id, t.name, t.status, t.start_sequence, t.body, t.phase_id, t.duration_ns, p.ordinal "
            "FROM tool_calls t JOIN phases p ON p.job_id = t.job_id AND p.phase_id = t.phase_id WHERE "
            + " AND ".join(where)
            + " ORDER BY p.ordinal, t.start_sequence, t.tool_use_id LIMIT ?",
            [*args, limit],
        )
        return [tool_call_row(r) for r in rows]

    def backfill_tool_call_durations(self, duration_of: Callable[[bytes], int | None], batch: int = 1000) -> int:
        """Fills in the duration of finished calls a database from before the duration column holds
        only in their encoded body (SQLite schema version 1, PostgreSQL migration 1).

        ``duration_of`` decodes a call's body (the store does not know the encoding). Runs while the
        ``BACKFILL_INDEX`` its migration made exists (until then the statistics leave those calls'
        durations out), then drops it; afterwards it returns at once. Finished calls are never
        rewritten by their phase, so this needs no fence, and replicas doing it at once write the
        same values. Returns the number of calls filled in.
        """
        if self._read_one(self.dialect.index_exists, (BACKFILL_INDEX,)) is None:
            return 0
        finished, finished_args = self.dialect.in_list("status", FINISHED)
        filled, last = 0, ("", "", "")
        while True:
            rows = self._read(
                f"SELECT job_id, phase_id, tool_use_id, body FROM tool_calls WHERE duration_ns IS NULL AND {finished} "
                "AND (job_id, phase_id, tool_use_id) > (?, ?, ?) ORDER BY job_id, phase_id, tool_use_id LIMIT ?",
                (*finished_args, *last, batch),
            )
            if not rows:
                break
            last = tuple(rows[-1][:3])
            updates = [(d, j, p, t) for j, p, t, body in rows if (d := duration_of(body)) is not None]
            if updates:
                with self._transaction() as tx:
                    tx.executemany(self.dialect.sql(
                        "UPDATE tool_calls SET duration_ns = ? WHERE job_id = ? AND phase_id = ? AND tool_use_id = ?"),
                        updates)
            filled += len(updates)
        with self._transaction() as tx:
            tx.execute(f"DROP INDEX IF EXISTS {BACKFILL_INDEX}")
        return filled

    # -- costs -------------------------------------------------------------------------------------

    def replace_model_costs(self, job_id: str, phase_id: str, project_id: str, rows: Sequence[ModelCostRow]) -> None:
        """Replaces the per-model cost rows of a phase (costs are snapshots, never summed)."""
        self._write_one(ReplaceModelCosts(job_id, phase_id, project_id, list(rows)))

    def _replace_model_costs_in(self, tx: Any, w: ReplaceModelCosts) -> None:
        q = self.dialect.sql
        job_id, phase_id = w.job_id, w.phase_id
        tx.execute(q("DELETE FROM model_costs WHERE job_id = ? AND phase_id = ?"), (job_id, phase_id))
        if w.rows:
            tx.executemany(q("INSERT INTO model_costs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)"),
                           [model_cost_values(job_id, phase_id, w.project_id, r) for r in w.rows])
        tx.execute(q("UPDATE jobs SET view_version = view_version + 1 WHERE job_id = ?"), (job_id,))

    def _scope(
        self, project_id: str | None, job_ids: Sequence[str], phase_id: str | None
    ) -> tuple[list[str], list[Any]]:
        """WHERE terms for a cost scope: one phase (one job + phase), jobs, or a project."""
        if job_ids:
            term, args = self.dialect.in_list("job_id", job_ids)
            terms = [term]
            if phase_id:
                terms.append("phase_id = ?")
                args.append(phase_id)
            return terms, args
        if project_id is not None:
            return ["project_id = ?"], [project_id]
        return [], []

    def phase_cost_sums(
        self, *, project_id: str | None = None, job_id: str | None = None, phase_id: str | None = None
    ) -> PhaseCostSums:
        where, args = self._scope(project_id, [job_id] if job_id else [], phase_id)
        sql = (
            "SELECT COUNT(*), COALESCE(SUM(reported_usd), 0), COALESCE(SUM(computed_usd), 0), "
            "COALESCE(SUM(CASE WHEN computed_only <> 0 THEN 1 ELSE 0 END), 0) FROM phases"
        )
        if where:
            sql += " WHERE " + " AND ".join(where)
        count, reported, computed, computed_only = self._read_one(sql, args)
        return PhaseCostSums(count, float(reported), float(computed), int(computed_only))

    def model_cost_sums(
        self, *, project_id: str | None = None, job_ids: Sequence[str] = (), phase_id: str | None = None
    ) -> list[tuple[str, ModelCostRow]]:
        where, args = self._scope(project_id, job_ids, phase_id)
        # A project's rows group by model and source only (PostgreSQL refuses a constant in GROUP BY).
        key, group = ("job_id", "job_id, ") if job_ids else ("''", "")
        total = "CAST(SUM({}) AS BIGINT)".format  # SUM of bigint is numeric on PostgreSQL
        sql = (
            f"SELECT {key}, model, {total('input_tokens')}, {total('output_tokens')}, "
            f"{total('cache_read_input_tokens')}, {total('cache_write_5m_input_tokens')}, "
            f"{total('cache_write_1h_input_tokens')}, {total('web_search_requests')}, "
            "SUM(reported_usd), SUM(computed_usd), pricing_source FROM model_costs"
        )
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" GROUP BY {group}model, pricing_source"
        return [(r[0], model_cost_row(r[1:])) for r in self._read(sql, args)]

    # -- retention ---------------------------------------------------------------------------------

    def expired_jobs(self, cutoff_ns: int, limit: int) -> list[tuple[str, list[str]]]:
        """Jobs untouched since ``cutoff_ns`` with no active phase, oldest first: (job_id, recording dirs)."""
        active, active_args = self.dialect.in_list("p.status", ACTIVE)
        q = self.dialect.sql
        with self._reading() as db:
            jobs = [r[0] for r in db.execute(
                q(f"SELECT j.job_id FROM jobs j WHERE j.update_time_ns < ? AND NOT EXISTS (SELECT 1 FROM phases p "
                  f"WHERE p.job_id = j.job_id AND {active}) ORDER BY j.update_time_ns LIMIT ?"),
                (cutoff_ns, *active_args, limit),
            ).fetchall()]
            if not jobs:
                return []
            term, args = self.dialect.in_list("job_id", jobs)
            dirs: dict[str, list[str]] = {}
            for job, recording_dir in db.execute(
                q(f"SELECT job_id, recording_dir FROM phases WHERE {term} AND recording_dir <> '' "
                  "ORDER BY job_id, ordinal"), args
            ).fetchall():
                dirs.setdefault(job, []).append(recording_dir)
        return [(job, dirs.get(job, [])) for job in jobs]

    def delete_jobs(self, job_ids: Sequence[str]) -> int:
        """Deletes jobs with their phases, events, tool calls and costs, in one transaction; returns phases deleted."""
        if not job_ids:
            return 0
        term, args = self.dialect.in_list("job_id", job_ids)
        q = self.dialect.sql
        with self._transaction() as tx:
            # Explicit deletes in dependency order (cheaper than row-by-row cascades on events).
            tx.execute(q(f"DELETE FROM webhook_attempts WHERE delivery_id IN (SELECT delivery_id FROM "
                         f"webhook_deliveries WHERE {term})"), args)
            for table in ("events", "tool_calls", "model_costs", "webhook_deliveries", "phase_checkpoints",
                          "phase_transcripts", "phase_requests"):
                tx.execute(q(f"DELETE FROM {table} WHERE {term}"), args)
            phases = tx.execute(q(f"DELETE FROM phases WHERE {term}"), args).rowcount
            tx.execute(q(f"DELETE FROM jobs WHERE {term}"), args)
        return phases

    def finished_recordings(self) -> list[tuple[str, str, str]]:
        """(job_id, phase_id, recording_dir) of finished phases that still have a recording, oldest end first."""
        term, args = self.dialect.not_in_list("status", ACTIVE)
        return [tuple(r) for r in self._read(
            f"SELECT job_id, phase_id, recording_dir FROM phases WHERE recording_dir <> '' AND {term} "
            "ORDER BY COALESCE(end_time_ns, create_time_ns), job_id, phase_id", args)]

    def forget_recording(self, job_id: str, phase_id: str) -> None:
        """Notes that a phase's recording was deleted (without counting as activity on its job)."""
        with self._transaction() as tx:
            tx.execute(self.dialect.sql("UPDATE phases SET recording_dir = '' WHERE job_id = ? AND phase_id = ?"),
                       (job_id, phase_id))

    def referenced_recordings(self, recording_dirs: Sequence[str]) -> set[str]:
        """Those of ``recording_dirs`` some phase row still names (retention's orphan check)."""
        found: set[str] = set()
        for start in range(0, len(recording_dirs), _CHUNK):
            term, args = self.dialect.in_list("recording_dir", recording_dirs[start : start + _CHUNK])
            found.update(r[0] for r in self._read(f"SELECT recording_dir FROM phases WHERE {term}", args))
        return found

    # -- per-project quotas --------------------------------------------------------------------------

    def put_quota(self, quota: ProjectQuota) -> None:
        q = self.dialect.sql
        with self._transaction() as tx:
            tx.execute(q("INSERT INTO project_quotas (project_id, spend_usd_per_day, spend_usd_per_month, "
                         "update_time_ns, updated_by) VALUES (?, ?, ?, ?, ?) ON CONFLICT (project_id) DO UPDATE SET "
                         "spend_usd_per_day = excluded.spend_usd_per_day, "
                         "spend_usd_per_month = excluded.spend_usd_per_month, "
                         "update_time_ns = excluded.update_time_ns, updated_by = excluded.updated_by"),
                       (quota.project_id, quota.spend_usd_per_day, quota.spend_usd_per_month, quota.update_time_ns,
                        quota.updated_by))

    def get_quota(self, project_id: str) -> ProjectQuota | None:
        r = self._read_one("SELECT project_id, spend_usd_per_day, spend_usd_per_month, update_time_ns, updated_by "
                           "FROM project_quotas WHERE project_id = ?", (project_id,))
        return ProjectQuota(r[0], float(r[1]), float(r[2]), int(r[3]), r[4]) if r else None

    def project_spend(self, project_id: str, day_start_ns: int, month_start_ns: int) -> Spend:
        r = self._read_one(
            f"SELECT COALESCE(SUM(CASE WHEN create_time_ns >= ? THEN {PHASE_SPEND} ELSE 0 END), 0), "
            f"COALESCE(SUM({PHASE_SPEND}), 0) FROM phases WHERE project_id = ? AND create_time_ns >= ?",
            (day_start_ns, project_id, month_start_ns))
        return Spend(float(r[0]), float(r[1]))

    # -- egress allowances ---------------------------------------------------------------------------

    def add_egress_allowance(self, project_id: str, host: str, created_by: str, now_ns: int) -> None:
        q = self.dialect.sql
        with self._transaction() as tx:
            tx.execute(q("INSERT INTO egress_allowances (project_id, host, created_by, create_time_ns) "
                         "VALUES (?, ?, ?, ?) ON CONFLICT (project_id, host) DO NOTHING"),
                       (project_id, host, created_by, now_ns))

    def list_egress_allowances(self, project_id: str) -> list[tuple[str, str, str, int]]:
        return [tuple(r) for r in self._read(
            "SELECT project_id, host, created_by, create_time_ns FROM egress_allowances WHERE project_id = ? "
            "ORDER BY host", (project_id,))]

    def delete_egress_allowance(self, project_id: str, host: str) -> bool:
        q = self.dialect.sql
        with self._transaction() as tx:
            return tx.execute(q("DELETE FROM egress_allowances WHERE project_id = ? AND host = ?"),
                              (project_id, host)).rowcount > 0

    # -- the audit trail ---------------------------------------------------------------------------

    def append_audit(self, entry: AuditEntry) -> None:
        q = self.dialect.sql
        with self._transaction() as tx:
            tx.execute(q(f"INSERT INTO audit_entries ({','.join(audit_rows.COLUMNS)}) "
                         f"VALUES ({','.join('?' * len(audit_rows.COLUMNS))})"), audit_rows.values(entry))

    def list_audit(self, projects: Sequence[str] | None, job_id: str, principal: str, limit: int,
                   before_id: int | None) -> list[AuditEntry]:
        where: list[str] = []
        args: list[Any] = []
        if projects is not None:
            term, values = self.dialect.in_list("project_id", list(projects) or [""])
            where.append(term)
            args.extend(values)
        for column, value in (("job_id", job_id), ("principal", principal)):
            if value:
                where.append(f"{column} = ?")
                args.append(value)
        if before_id is not None:
            where.append("entry_id < ?")
            args.append(before_id)
        sql = f"SELECT entry_id,{','.join(audit_rows.COLUMNS)} FROM audit_entries"
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [audit_rows.from_row(r) for r in self._read(sql + " ORDER BY entry_id DESC LIMIT ?", [*args, limit])]

    # -- the credential vault ----------------------------------------------------------------------

    def put_egress_secret(self, row: EgressSecretRow, max_per_project: int) -> bool:
        q = self.dialect.sql
        columns = ",".join(egress_secret_rows.COLUMNS)
        with self._transaction() as tx:
            (others,) = tx.execute(q("SELECT count(*) FROM egress_secrets WHERE project_id = ? AND name <> ?"),
                                   (row.project_id, row.name)).fetchone()
            if others >= max_per_project:
                return False
            tx.execute(q(f"INSERT INTO egress_secrets ({columns}) VALUES ({','.join('?' * 10)}) "
                         "ON CONFLICT (project_id, name) DO UPDATE SET hosts = excluded.hosts, "
                         "presentation = excluded.presentation, header = excluded.header, "
                         "username = excluded.username, key_id = excluded.key_id, nonce = excluded.nonce, "
                         "ciphertext = excluded.ciphertext, create_time_ns = excluded.create_time_ns"),
                       egress_secret_rows.values(row))
        return True

    def list_egress_secrets(self, project_id: str) -> list[EgressSecretRow]:
        rows = self._read(f"SELECT {','.join(egress_secret_rows.COLUMNS)} FROM egress_secrets WHERE project_id = ? "
                          "ORDER BY name", (project_id,))
        return [egress_secret_rows.from_row(r) for r in rows]

    def delete_egress_secret(self, project_id: str, name: str) -> bool:
        q = self.dialect.sql
        with self._transaction() as tx:
            return tx.execute(q("DELETE FROM egress_secrets WHERE project_id = ? AND name = ?"),
                              (project_id, name)).rowcount > 0

    # -- webhooks ----------------------------------------------------------------------------------

    def create_webhook(self, row: WebhookRow) -> None:
        q = self.dialect.sql
        with self._transaction() as tx:
            created = tx.execute(
                q(f"INSERT INTO webhook_subscriptions ({WEBHOOK_COLUMNS}) VALUES ({','.join('?' * 13)}) "
                  "ON CONFLICT (subscription_id) DO NOTHING RETURNING subscription_id"), webhook_values(row),
            ).fetchone()
        if created is None:
            raise AlreadyExistsError(f"webhook {row.subscription_id} already exists")

    def get_webhook(self, subscription_id: str) -> WebhookRow | None:
        r = self._read_one(f"SELECT {WEBHOOK_COLUMNS} FROM webhook_subscriptions WHERE subscription_id = ?",
                           (subscription_id,))
        return webhook_row(r) if r else None

    def list_webhooks(self, project_id: str | None = None) -> list[WebhookRow]:
        sql, args = f"SELECT {WEBHOOK_COLUMNS} FROM webhook_subscriptions", []
        if project_id:
            sql, args = sql + " WHERE project_id IN (?, '')", [project_id]
        return [webhook_row(r) for r in self._read(sql + " ORDER BY create_time_ns, subscription_id", args)]

    def delete_webhook(self, subscription_id: str, now_ns: int) -> int | None:
        q = self.dialect.sql
        with self._transaction() as tx:
            if tx.execute(q("DELETE FROM webhook_subscriptions WHERE subscription_id = ?"),
                          (subscription_id,)).rowcount == 0:
                return None
            return tx.execute(
                q("UPDATE webhook_deliveries SET state = 'CANCELLED', end_time_ns = ?, claimed_by = '', "
                  "claimed_until_ns = 0, last_error = 'the webhook was deleted' "
                  "WHERE subscription_id = ? AND state = 'PENDING'"), (now_ns, subscription_id)).rowcount

    def replace_config_webhooks(self, rows: Sequence[WebhookRow]) -> None:
        q = self.dialect.sql
        with self._transaction() as tx:
            old = {r[0]: (r[1], r[2]) for r in tx.execute(
                q("SELECT subscription_id, url, secret FROM webhook_subscriptions WHERE source = 'config'")).fetchall()}
            keep = [r.subscription_id for r in rows]
            gone = [sid for sid in old if sid not in keep]
            if gone:
                term, args = self.dialect.in_list("subscription_id", gone)
                tx.execute(q(f"DELETE FROM webhook_subscriptions WHERE {term}"), args)
                tx.execute(q("UPDATE webhook_deliveries SET state = 'CANCELLED', last_error = 'the webhook was "
                             f"removed from the config file' WHERE state = 'PENDING' AND {term}"), args)
            for row in rows:
                if row.subscription_id not in old:
                    tx.execute(q(f"INSERT INTO webhook_subscriptions ({WEBHOOK_COLUMNS}) VALUES ({','.join('?' * 13)}) "
                                 "ON CONFLICT (subscription_id) DO NOTHING"), webhook_values(row))
                    continue
                changed = old[row.subscription_id] != (row.url, row.secret)
                tx.execute(q(
                    "UPDATE webhook_subscriptions SET project_id = ?, url = ?, secret = ?, events = ?, statuses = ?, "
                    "cost_threshold_usd = ?, format = ?, description = ?"
                    + (", disabled_reason = '', disabled_time_ns = NULL" if changed else "")
                    + " WHERE subscription_id = ? AND source = 'config'"),
                    (row.project_id, row.url, row.secret, ",".join(row.events), ",".join(row.statuses),
                     row.cost_threshold_usd, row.format, row.description, row.subscription_id))

    def enqueue_webhooks(self, rows: Sequence[OutboxRow]) -> None:
        if rows:
            with self._transaction() as tx:
                insert_outbox(self.dialect, tx, rows)

    def claim_webhook_deliveries(self, owner: str, limit: int, lease_s: float) -> list[WebhookDeliveryRow]:
        q = self.dialect.sql
        with self._transaction() as tx:
            now = self._now_ns(tx)
            rows = tx.execute(q(
                "UPDATE webhook_deliveries SET claimed_by = ?, claimed_until_ns = ? WHERE id IN ("
                "SELECT d.id FROM webhook_deliveries d WHERE d.state = 'PENDING' AND d.next_attempt_ns <= ? "
                f"AND d.claimed_until_ns <= ? AND NOT EXISTS ({_EARLIER_PENDING}) "
                f"ORDER BY d.next_attempt_ns, d.id LIMIT ?{self.dialect.skip_locked}) RETURNING {DELIVERY_COLUMNS}"),
                (owner, now + round(lease_s * 1e9), now, now, limit)).fetchall()
        return sorted((webhook_delivery_row(r) for r in rows), key=lambda d: d.order)

    def finish_webhook_attempt(self, owner: str, attempt: WebhookAttemptRow, state: str,
                               retry_in_s: float | None, disable_reason: str = "") -> bool:
        q = self.dialect.sql
        with self._transaction() as tx:
            now = self._now_ns(tx)
            tx.execute(q("INSERT INTO webhook_attempts (delivery_id, attempt, time_ns, status_code, latency_ns, error, "
                         "replica_id) VALUES (?,?,?,?,?,?,?)"),
                       (attempt.delivery_id, attempt.attempt, attempt.time_ns, attempt.status_code, attempt.latency_ns,
                        attempt.error, attempt.replica_id))
            next_ns = now + round((retry_in_s or 0.0) * 1e9)
            end = None if state == "PENDING" else now
            row = tx.execute(q(
                "UPDATE webhook_deliveries SET attempts = attempts + 1, state = ?, next_attempt_ns = ?, claimed_by = '', "
                "claimed_until_ns = 0, last_status_code = ?, last_error = ?, end_time_ns = ? "
                "WHERE delivery_id = ? AND claimed_by = ? AND state = 'PENDING' RETURNING subscription_id"),
                (state, next_ns, attempt.status_code, attempt.error, end, attempt.delivery_id, owner)).fetchone()
            if row is not None and disable_reason:
                tx.execute(q("UPDATE webhook_subscriptions SET disabled_reason = ?, disabled_time_ns = ? "
                             "WHERE subscription_id = ? AND disabled_time_ns IS NULL"), (disable_reason, now, row[0]))
                tx.execute(q("UPDATE webhook_deliveries SET state = 'DEAD', end_time_ns = ?, last_error = ?, "
                             "claimed_by = '', claimed_until_ns = 0 WHERE subscription_id = ? AND state = 'PENDING'"),
                           (now, f"the webhook was disabled: {disable_reason}", row[0]))
        return row is not None

    def release_webhook_claims(self, owner: str) -> int:
        with self._transaction() as tx:
            return tx.execute(self.dialect.sql(
                "UPDATE webhook_deliveries SET claimed_by = '', claimed_until_ns = 0 "
                "WHERE claimed_by = ? AND state = 'PENDING'"), (owner,)).rowcount

    def next_webhook_due_s(self) -> float | None:
        with self._reading() as db:
            now = self._now_ns(db)
            # Only the first PENDING delivery of each subscription and phase can be due (in order).
            (due,) = db.execute(self.dialect.sql(
                "SELECT MIN(CASE WHEN d.claimed_until_ns > d.next_attempt_ns THEN d.claimed_until_ns "
                "ELSE d.next_attempt_ns END) FROM webhook_deliveries d WHERE d.state = 'PENDING' AND NOT EXISTS "
                f"({_EARLIER_PENDING})")).fetchone()
        return None if due is None else (due - now) / 1e9

    def list_webhook_deliveries(self, subscription_id: str | None, job_id: str | None, phase_id: str | None,
                                states: Sequence[str], limit: int, before: int | None = None
                                ) -> list[WebhookDeliveryRow]:
        where: list[str] = []
        args: list[Any] = []
        for column, value in (("subscription_id", subscription_id), ("job_id", job_id), ("phase_id", phase_id)):
            if value:
                where.append(f"{column} = ?")
                args.append(value)
        if states:
            term, values = self.dialect.in_list("state", list(states))
            where.append(term)
            args.extend(values)
        if before is not None:
            where.append("id < ?")
            args.append(before)
        sql = f"SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries"
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [webhook_delivery_row(r) for r in self._read(sql + " ORDER BY id DESC LIMIT ?", [*args, limit])]

    def webhook_attempts(self, delivery_ids: Sequence[str]) -> list[WebhookAttemptRow]:
        found: list[WebhookAttemptRow] = []
        for start in range(0, len(delivery_ids), _CHUNK):
            term, args = self.dialect.in_list("delivery_id", delivery_ids[start : start + _CHUNK])
            found += [webhook_attempt_row(r) for r in self._read(
                "SELECT delivery_id, attempt, time_ns, status_code, latency_ns, error, replica_id FROM webhook_attempts "
                f"WHERE {term} ORDER BY delivery_id, time_ns, attempt", args)]
        return found
