"""What only the SQLite store has: its file, its schema versions and migrations, its transactions.

Everything the ``Store`` protocol promises is in the contract suite (test_store_contract.py), run
on SQLite and PostgreSQL alike; the durations backfill of an old database too.
"""

from __future__ import annotations

import sqlite3

import pytest
from support.old_databases import sqlite_version_1

from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.store.protocol import (
    EventRow,
    PhaseRow,
    StoreError,
)
from helix_runner.store.sqlite_store import SCHEMA_VERSION, SqliteStore


def phase(
    job: str, pid: str, project: str = "p", status: PhaseStatus = PhaseStatus.PENDING, t: int = 1
) -> PhaseRow:
    return PhaseRow(job_id=job, phase_id=pid, ordinal=0, project_id=project, status=status, create_time_ns=t)


def test_unusable_path_is_a_store_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreError, match="cannot"):
        SqliteStore(blocker / "db.sqlite3")


def test_a_version_1_database_is_migrated_in_place_and_keeps_its_data(tmp_path):
    path = tmp_path / "db.sqlite3"
    sqlite_version_1(path)
    store = SqliteStore(path)
    try:
        assert store.migrated_from == 1
        row = store.get_phase("j", "a")
        assert (row.result_pb, row.cost_pb, row.tool_stats_pb) == (b"\x0a\x01", b"\x0b\x02", b"\x0c\x03")
        assert row.status is PhaseStatus.SUCCEEDED and row.computed_usd == 0.25
        columns = {r[1] for r in store._db.execute("PRAGMA table_info(phases)")}
        assert "options_json" not in columns and "result_json" not in columns
        assert store._db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert store.get_job("j").view_version == 0  # version 3 added it to existing jobs
        assert row.attempts_pb is None  # version 4 added the column; old phases recorded none
        assert not store._db.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone()

    finally:
        store.close()
    again = SqliteStore(path)  # reopening a current database migrates nothing
    assert again.migrated_from is None and again.get_phase("j", "a").result_pb == b"\x0a\x01"
    again.close()


def test_a_new_database_is_created_at_the_current_version(tmp_path):
    store = SqliteStore(tmp_path / "db.sqlite3")
    assert store.migrated_from is None
    assert store._db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    assert store.backfill_tool_call_durations(lambda body: pytest.fail("nothing to fill in")) == 0
    store.close()


def test_a_database_from_a_newer_server_is_refused_untouched(tmp_path):
    path = tmp_path / "db.sqlite3"
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(StoreError, match="newer server"):
        SqliteStore(path)
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION + 1,)


def test_a_failed_write_rolls_back_whole_and_the_store_stays_usable(tmp_path):
    store = SqliteStore(tmp_path / "db.sqlite3")
    store.get_or_create_job("j", "p", 1)
    store.insert_phase(phase("j", "a"))
    store.insert_phase(phase("j", "b"))
    store.append_events([("j", "a", [EventRow(1, 1, "k", b"x")])])
    with pytest.raises(sqlite3.IntegrityError):  # b's events are fine, a's repeat sequence 1
        store.append_events(
            [("j", "b", [EventRow(1, 1, "k", b"y")]), ("j", "a", [EventRow(1, 1, "k", b"z")])]
        )
    assert store.read_events("j", "b", 0, 10) == []
    store.append_events([("j", "b", [EventRow(1, 1, "k", b"y")])])  # no transaction was left open
    assert [e.body for e in store.read_events("j", "b", 0, 10)] == [b"y"]
    store.close()


def schema_of(db: sqlite3.Connection) -> dict:
    """Every table's columns and every index's columns (not the SQL text, which ALTER TABLE rewrites)."""
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    return {
        table: (
            list(db.execute(f"PRAGMA table_info({table})")),
            sorted(
                (index[1], index[2], index[4], [c[2] for c in db.execute(f"PRAGMA index_info({index[1]})")])
                for index in db.execute(f"PRAGMA index_list({table})")
            ),
        )
        for table in tables
    }


def test_a_migrated_database_has_the_schema_of_a_new_one(tmp_path):
    sqlite_version_1(tmp_path / "old.sqlite3")
    old, new = SqliteStore(tmp_path / "old.sqlite3"), SqliteStore(tmp_path / "new.sqlite3")
    try:
        old.backfill_tool_call_durations(lambda body: None)
        assert schema_of(old._db) == schema_of(new._db)
    finally:
        old.close()
        new.close()


def test_version_5_files_the_default_projects_per_model_costs_under_its_name(tmp_path):
    """Issue 22 item 14: phases without a project_id wrote their per-model costs under project ""."""
    path = tmp_path / "db.sqlite3"
    SqliteStore(path).close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 4")
    db.executemany("INSERT INTO model_costs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", [
        ("j", "a", "", "m", 1, 2, 0, 0, 0, 0, None, 0.5, "PRICE_TABLE"),
        ("k", "b", "alpha", "m", 1, 2, 0, 0, 0, 0, None, 0.25, "PRICE_TABLE"),
    ])
    db.commit()
    db.close()
    store = SqliteStore(path)
    try:
        assert store.migrated_from == 4
        assert [(p, r.computed_usd) for p, r in store.model_cost_sums(project_id="default")] == [("", 0.5)]
        assert [r.computed_usd for _, r in store.model_cost_sums(project_id="alpha")] == [0.25]
    finally:
        store.close()
