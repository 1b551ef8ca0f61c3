"""The SQL of the per-project quotas table, for both stores; the spend a quota is checked against."""

from __future__ import annotations

# SQLite: schema version 10 (PostgreSQL: migration 0013_project_quotas.sql).
SQLITE_TABLES = (
    """CREATE TABLE IF NOT EXISTS project_quotas (
    project_id TEXT PRIMARY KEY,
    spend_usd_per_day REAL NOT NULL DEFAULT 0,
    spend_usd_per_month REAL NOT NULL DEFAULT 0,
    update_time_ns INTEGER NOT NULL,
    updated_by TEXT NOT NULL DEFAULT ''
)""",
    "CREATE INDEX IF NOT EXISTS phases_by_project_time ON phases (project_id, create_time_ns)",
)

# A phase's cost as the cost totals count it: what the CLI reported, else what the tokens cost.
PHASE_SPEND = "CASE WHEN reported_usd > 0 THEN reported_usd ELSE COALESCE(computed_usd, 0) END"
