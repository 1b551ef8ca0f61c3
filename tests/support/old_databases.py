"""Databases as older servers left them, to test migrations and the backfill on each store.

Both hold the same rows: job ``j`` with one finished phase ``a`` (result ``0a01``) and three Bash
calls recorded before tool calls had a duration column: ``t1`` SUCCEEDED with body
``duration=40``, ``t2`` RUNNING, ``t3`` FAILED with body ``bad``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

SQLITE_V1_SCHEMA = (Path(__file__).parents[1] / "fixtures" / "store" / "schema_v1.sql").read_text()


def sqlite_version_1(path: Path) -> str:
    """A SQLite database as servers before schema versioning wrote it; its URL."""
    db = sqlite3.connect(path)
    db.executescript(SQLITE_V1_SCHEMA)
    db.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    db.execute("INSERT INTO jobs VALUES ('j', 'p', 'SUCCEEDED', 1, 2)")
    db.execute(
        "INSERT INTO phases (job_id, phase_id, ordinal, project_id, status, create_time_ns, result_json, cost_json, "
        "tool_stats_json, computed_usd) VALUES ('j', 'a', 1, 'p', 'SUCCEEDED', 1, x'0a01', x'0b02', x'0c03', 0.25)"
    )
    db.executemany(
        "INSERT INTO tool_calls VALUES ('j', 'a', ?, 'Bash', ?, ?, ?)",
        [("t1", "SUCCEEDED", 3, b"duration=40"), ("t2", "RUNNING", 5, b"running"), ("t3", "FAILED", 7, b"bad")],
    )
    db.commit()
    db.close()
    return f"sqlite://{path}"


def postgres_version_1(url: str) -> str:
    """A PostgreSQL database as the first PostgreSQL store left it (migration 1 only); its URL."""
    import psycopg

    from helix_runner.store.postgres_migrations import known_migrations, migrate

    with psycopg.connect(url) as conn:
        assert migrate(conn, known_migrations()[:1]) == 1
        conn.execute("INSERT INTO jobs VALUES ('j', 'p', 'SUCCEEDED', 1, 2)")
        conn.execute("INSERT INTO phases (job_id, phase_id, ordinal, project_id, status, create_time_ns, "
                     "options_json, result_pb) VALUES ('j', 'a', 1, 'p', 'SUCCEEDED', 1, 'o', '\\x0a01')")
        conn.execute("INSERT INTO tool_calls VALUES ('j', 'a', 't1', 'Bash', 'SUCCEEDED', 3, 'duration=40'), "
                     "('j', 'a', 't2', 'Bash', 'RUNNING', 5, 'running'), ('j', 'a', 't3', 'Bash', 'FAILED', 7, 'bad')")
    return url
