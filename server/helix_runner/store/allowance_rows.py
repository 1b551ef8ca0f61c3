"""The SQL of the projects' egress allowances (held requests approved for a project), for both stores."""

from __future__ import annotations

# SQLite: schema version 11 (PostgreSQL: migration 0014_egress_allowances.sql).
SQLITE_TABLES = (
    """CREATE TABLE IF NOT EXISTS egress_allowances (
    project_id TEXT NOT NULL,
    host TEXT NOT NULL,
    created_by TEXT NOT NULL DEFAULT '',
    create_time_ns INTEGER NOT NULL,
    PRIMARY KEY (project_id, host)
)""",
)
