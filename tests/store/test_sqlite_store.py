"""The SQLite store: job status follows the latest phase, paging, scopes, durability across reopen."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.pricing import PricingSource
from helix_runner.domain.tool_tracker import ToolCallStatus
from helix_runner.store.protocol import (
    AlreadyExistsError,
    EventRow,
    ModelCostRow,
    PhaseRow,
    StoreError,
    ToolCallRow,
)
from helix_runner.store.sqlite_store import SCHEMA_VERSION, SqliteStore


def phase(
    job: str, pid: str, project: str = "p", status: PhaseStatus = PhaseStatus.PENDING, t: int = 1
) -> PhaseRow:
    return PhaseRow(job_id=job, phase_id=pid, ordinal=0, project_id=project, status=status, create_time_ns=t)


@pytest.fixture
def store(tmp_path):
    s = SqliteStore(tmp_path / "db.sqlite3")
    yield s
    s.close()


def test_job_created_once_and_status_follows_latest_phase(store):
    job, created = store.get_or_create_job("j", "p", 10)
    assert created and job.status is PhaseStatus.PENDING
    assert store.get_or_create_job("j", "other", 20)[1] is False
    store.insert_phase(phase("j", "a"))
    store.insert_phase(phase("j", "b"))
    assert [p.ordinal for p in store.phases_of_jobs(["j"])] == [1, 2]
    store.update_phase("j", "a", 30, status=PhaseStatus.FAILED)  # not the latest: the job keeps b's status
    assert store.get_job("j").status is PhaseStatus.PENDING
    store.update_phase("j", "b", 40, status=PhaseStatus.SUCCEEDED)
    assert store.get_job("j").status is PhaseStatus.SUCCEEDED and store.get_job("j").update_time_ns == 40
    with pytest.raises(AlreadyExistsError):
        store.insert_phase(phase("j", "a"))
    with pytest.raises(ValueError):
        store.update_phase("j", "a", 50, nonsense=1)
    with pytest.raises(TypeError):  # statuses are the domain enum, never a bare string
        store.update_phase("j", "a", 50, status="FAILED")
    assert store.get_phase("j", "a").status is PhaseStatus.FAILED


def test_list_jobs_pages_newest_first(store):
    for i in range(7):
        store.get_or_create_job(f"j{i}", "even" if i % 2 == 0 else "odd", 100 + i // 2)  # ties on time
    seen, after = [], None
    while True:
        page = store.list_jobs(None, [], 3, after)
        seen += [j.job_id for j in page]
        if len(page) < 3:
            break
        after = (page[-1].create_time_ns, page[-1].job_id)
    assert seen == ["j6", "j5", "j4", "j3", "j2", "j1", "j0"]
    assert [j.job_id for j in store.list_jobs("odd", [], 10)] == ["j5", "j3", "j1"]


def test_events_tool_calls_and_cost_scopes(store):
    store.get_or_create_job("j", "proj", 1)
    store.insert_phase(phase("j", "a", "proj"))
    store.append_events([("j", "a", [EventRow(1, 1, "k", b"x"), EventRow(2, 2, "k", b"y")])])
    assert store.get_phase("j", "a").last_sequence == 2
    assert [e.body for e in store.read_events("j", "a", 1, 10)] == [b"y"]
    store.upsert_tool_calls(
        "j",
        "a",
        [
            ToolCallRow("t1", "Bash", ToolCallStatus.RUNNING, 3, b"1"),
            ToolCallRow("t2", "Read", ToolCallStatus.SUCCEEDED, 5, b"2", duration_ns=7),
        ],
    )
    store.upsert_tool_calls(
        "j", "a", [ToolCallRow("t2", "Read", ToolCallStatus.FAILED, 5, b"2b", duration_ns=9)]
    )
    assert store.mark_tool_calls_unfinished("j", "a") == 1
    calls = store.list_tool_calls("j", None, None, [], 10)
    assert [(c.tool_use_id, c.status, c.duration_ns, c.phase_ordinal) for c in calls] == [
        ("t1", ToolCallStatus.UNFINISHED, None, 1),
        ("t2", ToolCallStatus.FAILED, 9, 1),
    ]
    assert [c.tool_use_id for c in store.list_tool_calls("j", "a", None, [], 10, after=(1, 3, "t1"))] == [
        "t2"
    ]
    row = ModelCostRow("m", 10, 5, 0, 0, 0, 0, 0.5, 0.4, PricingSource.PRICE_TABLE)
    store.replace_model_costs("j", "a", "proj", [row])
    store.replace_model_costs("j", "a", "proj", [row])  # a snapshot replaces, never adds
    assert store.model_cost_sums(job_ids=["j"]) == [("j", row)]
    assert (
        store.model_cost_sums(project_id="proj") == [("", row)]
        and store.model_cost_sums(project_id="x") == []
    )


def test_committed_data_survives_reopen(tmp_path):
    path = tmp_path / "db.sqlite3"
    s = SqliteStore(path)
    s.get_or_create_job("j", "p", 1)
    s.insert_phase(phase("j", "a", status=PhaseStatus.RUNNING))
    s.append_events([("j", "a", [EventRow(1, 1, "k", b"x")])])
    # No close(): as after kill -9, only what was committed is there, and all of it.
    again = SqliteStore(path)
    assert [p.phase_id for p in again.active_phases()] == ["a"]
    assert again.read_events("j", "a", 0, 10)[0].body == b"x"


def test_unusable_path_is_a_store_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreError, match="cannot"):
        SqliteStore(blocker / "db.sqlite3")


V1_SCHEMA = (Path(__file__).parents[1] / "fixtures" / "store" / "schema_v1.sql").read_text()


def write_v1_database(path: Path) -> None:
    """A database as servers before schema versioning wrote it: one finished phase with two calls."""
    db = sqlite3.connect(path)
    db.executescript(V1_SCHEMA)
    db.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    db.execute("INSERT INTO jobs VALUES ('j', 'p', 'SUCCEEDED', 1, 2)")
    db.execute(
        "INSERT INTO phases (job_id, phase_id, ordinal, project_id, status, create_time_ns, result_json, cost_json, "
        "tool_stats_json, computed_usd) VALUES ('j', 'a', 1, 'p', 'SUCCEEDED', 1, x'0a01', x'0b02', x'0c03', 0.25)"
    )
    db.executemany(
        "INSERT INTO tool_calls VALUES ('j', 'a', ?, 'Bash', ?, ?, ?)",
        [
            ("t1", "SUCCEEDED", 3, b"duration=40"),
            ("t2", "RUNNING", 5, b"running"),
            ("t3", "FAILED", 7, b"bad"),
        ],
    )
    db.commit()
    db.close()


def test_a_version_1_database_is_migrated_in_place_and_keeps_its_data(tmp_path):
    path = tmp_path / "db.sqlite3"
    write_v1_database(path)
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

        # Finished calls get their duration from their body, once; a body without one stays without.
        decoded = []

        def duration_of(body: bytes) -> int | None:
            decoded.append(body)
            return int(body.split(b"=")[1]) if body.startswith(b"duration=") else None

        assert store.backfill_tool_call_durations(duration_of, batch=1) == 1
        assert sorted(decoded) == [b"bad", b"duration=40"]  # only finished calls are decoded
        assert [(c.tool_use_id, c.duration_ns) for c in store.list_tool_calls("j", None, None, [], 10)] == [
            ("t1", 40),
            ("t2", None),
            ("t3", None),
        ]
        assert store.backfill_tool_call_durations(duration_of) == 0 and len(decoded) == 2  # done for good
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


def test_a_failed_write_rolls_back_whole_and_the_store_stays_usable(store):
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
    write_v1_database(tmp_path / "old.sqlite3")
    old, new = SqliteStore(tmp_path / "old.sqlite3"), SqliteStore(tmp_path / "new.sqlite3")
    try:
        old.backfill_tool_call_durations(lambda body: None)
        assert schema_of(old._db) == schema_of(new._db)
    finally:
        old.close()
        new.close()
