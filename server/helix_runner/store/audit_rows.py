"""The SQL of the audit trail's table, for both stores: append-only, enforced by triggers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from helix_runner.domain.audit import AuditEntry

COLUMNS = ("time_ns", "principal", "principal_source", "action", "project_id", "job_id", "phase_id", "target",
           "detail", "peer", "outcome")

# SQLite: schema version 9 (PostgreSQL: migration 0012_audit_entries.sql).
SQLITE_TABLES = (
    """CREATE TABLE IF NOT EXISTS audit_entries (
    entry_id INTEGER PRIMARY KEY AUTOINCREMENT,
    time_ns INTEGER NOT NULL,
    principal TEXT NOT NULL,
    principal_source TEXT NOT NULL,
    action TEXT NOT NULL,
    project_id TEXT NOT NULL,
    job_id TEXT NOT NULL DEFAULT '',
    phase_id TEXT NOT NULL DEFAULT '',
    target TEXT NOT NULL DEFAULT '',
    detail TEXT NOT NULL DEFAULT '',
    peer TEXT NOT NULL DEFAULT '',
    outcome TEXT NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS audit_entries_project ON audit_entries (project_id, entry_id)",
    # Append-only: a row once written is neither changed nor deleted, by the server or anyone with
    # the file (short of dropping the trigger, which an audit of the schema shows).
    """CREATE TRIGGER IF NOT EXISTS audit_entries_no_update BEFORE UPDATE ON audit_entries
BEGIN SELECT RAISE(ABORT, 'audit entries are append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS audit_entries_no_delete BEFORE DELETE ON audit_entries
BEGIN SELECT RAISE(ABORT, 'audit entries are append-only'); END""",
)


def values(entry: AuditEntry) -> tuple:
    return (entry.time_ns, entry.principal, entry.principal_source, entry.action, entry.project_id, entry.job_id,
            entry.phase_id, entry.target, entry.detail, entry.peer, entry.outcome)


def from_row(r: Sequence[Any]) -> AuditEntry:
    entry_id, *rest = r
    return AuditEntry(*rest, entry_id=entry_id)
