"""The SQL of checkpoints, transcripts and accepted requests (docs/fork-and-rewind.md), for both stores.

A checkpoint is one row of plain columns (``phase_checkpoints``); a phase's CLI transcript is kept as
append-only chunks keyed by byte offset (``phase_transcripts``, the table the hand-over mirrors into on
PostgreSQL); its accepted request is one encoded RunPhaseRequest (``phase_requests``). Each write is
made in the caller's transaction (a running phase's writes are fenced with its events).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from helix_runner.domain.checkpoints import Checkpoint, CheckpointKind, WorkspaceKind, WorkspaceSnapshot
from helix_runner.store.protocol import TranscriptGapError

# Transcript chunks are written in pieces of at most this many bytes (one row each).
CHUNK_BYTES = 1 << 20

CHECKPOINT_COLUMNS = (
    "job_id", "phase_id", "number", "kind", "sequence", "session_id", "tool_use_id", "tool_name", "turn",
    "resume_at", "call_at", "before_number", "attempt", "time_ns", "rewound", "ws_kind", "ws_tree", "ws_head",
    "ws_commit", "ws_ref", "ws_repository", "ws_reason", "ws_same_as",
)


def checkpoint_values(job_id: str, phase_id: str, c: Checkpoint) -> tuple:
    w = c.workspace
    return (job_id, phase_id, c.number, c.kind.name, c.sequence, c.session_id, c.tool_use_id, c.tool_name, c.turn,
            c.resume_at, c.call_at, c.before, c.attempt, c.time_ns, int(c.rewound), w.kind.name, w.tree, w.head,
            w.commit, w.ref, w.repository, w.reason, w.same_as)


def checkpoint_from_row(r: Sequence[Any]) -> Checkpoint:
    (_, _, number, kind, sequence, session_id, tool_use_id, tool_name, turn, resume_at, call_at, before, attempt,
     time_ns, rewound, ws_kind, tree, head, commit, ref, repository, reason, same_as) = r
    workspace = WorkspaceSnapshot(WorkspaceKind[ws_kind], tree, head, commit, ref, repository, reason, same_as)
    return Checkpoint(number, CheckpointKind[kind], sequence, session_id, workspace, time_ns, tool_use_id, tool_name,
                      turn, resume_at, call_at, before, attempt, bool(rewound))


def insert_checkpoint(dialect, tx: Any, job_id: str, phase_id: str, c: Checkpoint) -> None:
    """Inserts a checkpoint (one already there under its number is kept: a retried batch writes it once)."""
    marks = ",".join("?" * len(CHECKPOINT_COLUMNS))
    tx.execute(dialect.sql(f"INSERT INTO phase_checkpoints ({','.join(CHECKPOINT_COLUMNS)}) VALUES ({marks}) "
                           "ON CONFLICT (job_id, phase_id, number) DO NOTHING"),
               checkpoint_values(job_id, phase_id, c))


def mark_rewound(dialect, tx: Any, job_id: str, phase_id: str, after_number: int) -> None:
    tx.execute(dialect.sql("UPDATE phase_checkpoints SET rewound = 1 WHERE job_id = ? AND phase_id = ? AND number > ?"),
               (job_id, phase_id, after_number))


def append_transcript(dialect, tx: Any, job_id: str, phase_id: str, session_id: str, offset: int, data: bytes,
                      restart: bool) -> None:
    if restart:
        tx.execute(dialect.sql("DELETE FROM phase_transcripts WHERE job_id = ? AND phase_id = ? AND session_id = ?"),
                   (job_id, phase_id, session_id))
    rows = [(job_id, phase_id, session_id, offset + start, data[start:start + CHUNK_BYTES])
            for start in range(0, len(data), CHUNK_BYTES)]
    if rows:
        tx.executemany(dialect.sql("INSERT INTO phase_transcripts (job_id, phase_id, session_id, start_offset, data) "
                                   "VALUES (?,?,?,?,?) ON CONFLICT DO NOTHING"), rows)


def joined_transcript(rows: Sequence[Sequence[Any]], what: str) -> bytes:
    """(start_offset, data) rows in offset order, joined; TranscriptGapError if one is missing."""
    out = bytearray()
    for offset, data in rows:
        if offset != len(out):
            raise TranscriptGapError(f"transcript {what}: chunk at {offset}, expected {len(out)}")
        out += bytes(data)
    return bytes(out)


SQLITE_TABLES = (
    """CREATE TABLE IF NOT EXISTS phase_checkpoints (
    job_id TEXT NOT NULL,
    phase_id TEXT NOT NULL,
    number INTEGER NOT NULL,
    kind TEXT NOT NULL,
    sequence INTEGER NOT NULL,
    session_id TEXT NOT NULL DEFAULT '',
    tool_use_id TEXT NOT NULL DEFAULT '',
    tool_name TEXT NOT NULL DEFAULT '',
    turn INTEGER NOT NULL DEFAULT 0,
    resume_at TEXT NOT NULL DEFAULT '',
    call_at TEXT NOT NULL DEFAULT '',
    before_number INTEGER NOT NULL DEFAULT 0,
    attempt INTEGER NOT NULL DEFAULT 0,
    time_ns INTEGER NOT NULL,
    rewound INTEGER NOT NULL DEFAULT 0,
    ws_kind TEXT NOT NULL,
    ws_tree TEXT NOT NULL DEFAULT '',
    ws_head TEXT NOT NULL DEFAULT '',
    ws_commit TEXT NOT NULL DEFAULT '',
    ws_ref TEXT NOT NULL DEFAULT '',
    ws_repository TEXT NOT NULL DEFAULT '',
    ws_reason TEXT NOT NULL DEFAULT '',
    ws_same_as INTEGER,
    PRIMARY KEY (job_id, phase_id, number)
) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS phase_transcripts (
    job_id TEXT NOT NULL,
    phase_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    start_offset INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (job_id, phase_id, session_id, start_offset)
) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS phase_requests (
    job_id TEXT NOT NULL,
    phase_id TEXT NOT NULL,
    request_pb BLOB NOT NULL,
    PRIMARY KEY (job_id, phase_id)
) WITHOUT ROWID""",
)
