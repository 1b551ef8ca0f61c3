"""The store contract, run against every implementation: SQLite (embedded) and PostgreSQL (replicas).

Each test opens stores through ``open_store`` with the store's database URL, as the server does,
so both implementations answer the same calls with the same rows. The PostgreSQL cluster is a
throwaway one per test session (tests/support/postgres.py), a fresh database per test.
"""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

from helix_runner.store.factory import open_store
from helix_runner.store.sqlite_store import (
    ACTIVE_STATUSES,
    AlreadyExistsError,
    EventRow,
    ModelCostRow,
    PhaseRow,
    ToolCallRow,
)


def phase(job: str, pid: str, project: str = "p", status: str = "PENDING", t: int = 1) -> PhaseRow:
    return PhaseRow(job_id=job, phase_id=pid, ordinal=0, project_id=project, status=status, create_time_ns=t)


def events(first: int, count: int, kind: str = "k") -> list[EventRow]:
    return [EventRow(s, 1000 + s, kind, f"e{s}".encode()) for s in range(first, first + count)]


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'db.sqlite3'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def opener(database_url):
    """``opener()`` opens another handle on the test's database (a restarted server, another replica)."""
    opened = []

    def open_handle():
        store = open_store(database_url)
        opened.append(store)
        return store

    yield open_handle
    for store in opened:
        store.close()


@pytest.fixture
def store(opener):
    return opener()


def test_job_created_once_and_status_follows_latest_phase(store):
    job, created = store.get_or_create_job("j", "p", 10)
    assert created and (job.status, job.create_time_ns, job.update_time_ns) == ("PENDING", 10, 10)
    again, created = store.get_or_create_job("j", "other", 20)
    assert not created and again.project_id == "p"
    assert store.insert_phase(phase("j", "a", status="RUNNING")).ordinal == 1
    assert store.get_job("j").status == "RUNNING"
    assert store.insert_phase(phase("j", "b")).ordinal == 2
    assert [p.ordinal for p in store.list_phases("j")] == [1, 2]
    store.update_phase("j", "a", 30, status="FAILED")  # not the latest: the job keeps b's status
    assert store.get_job("j").status == "PENDING"
    assert store.get_phase("j", "a").status == "FAILED"
    store.update_phase("j", "b", 40, status="SUCCEEDED", status_reason="done", end_time_ns=41, result_json=b"r")
    job = store.get_job("j")
    assert (job.status, job.update_time_ns) == ("SUCCEEDED", 40)
    b = store.get_phase("j", "b")
    assert (b.status_reason, b.end_time_ns, b.result_json) == ("done", 41, b"r")
    store.update_phase("j", "b", 50, cost_json=b"c", computed_usd=0.25, computed_only=1)  # no status: time only
    assert store.get_job("j").update_time_ns == 50 and store.get_job("j").status == "SUCCEEDED"
    assert (store.get_phase("j", "b").cost_json, store.get_phase("j", "b").computed_usd) == (b"c", 0.25)
    with pytest.raises(AlreadyExistsError):
        store.insert_phase(phase("j", "a"))
    with pytest.raises(ValueError, match="unknown phase columns"):
        store.update_phase("j", "a", 50, nonsense=1)
    assert store.get_job("nope") is None and store.get_phase("j", "nope") is None
    assert store.phase_ordinal("j", "b") == 2 and store.phase_ordinal("j", "nope") == 0


def test_phase_columns_round_trip(store):
    store.get_or_create_job("j", "p", 1)
    row = PhaseRow(job_id="j", phase_id="a", ordinal=0, project_id="p", status="RUNNING", create_time_ns=5,
                   start_time_ns=6, session_id="s", model="m", working_dir="/w", prompt="hi", options_json=b"\x00o",
                   on_disconnect="CONTINUE", recording_dir="/r", reported_usd=None, pid=123, pid_start_ticks=2**40)
    store.insert_phase(row)
    got = store.get_phase("j", "a")
    assert got == PhaseRow(**{**row.__dict__, "ordinal": 1, "last_sequence": 0})


def test_list_jobs_pages_newest_first_and_filters(store):
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
    store.insert_phase(phase("j3", "a", "odd", status="RUNNING"))
    assert [j.job_id for j in store.list_jobs(None, ["RUNNING"], 10)] == ["j3"]
    assert [j.job_id for j in store.list_jobs("even", ["RUNNING", "FAILED"], 10)] == []


def test_events_append_and_read_in_sequence_order(store):
    store.get_or_create_job("j", "p", 1)
    store.insert_phase(phase("j", "a"))
    store.insert_phase(phase("j", "b"))
    store.append_events("j", "a", events(1, 3))
    # Group commit: several phases, one call; each phase's sequence continues its own log.
    store.append_events_many([("j", "a", events(4, 2)), ("j", "b", events(1, 4)), ("j", "a", [])])
    assert store.get_phase("j", "a").last_sequence == 5 and store.get_phase("j", "b").last_sequence == 4
    assert [e.sequence for e in store.read_events("j", "a", 0, 100)] == [1, 2, 3, 4, 5]
    page = store.read_events("j", "a", 2, 2)
    assert page == [EventRow(3, 1003, "k", b"e3"), EventRow(4, 1004, "k", b"e4")]
    assert store.read_events("j", "a", 5, 10) == [] and store.read_events("j", "nope", 0, 10) == []
    assert [e.body for e in store.read_events("j", "b", 3, 10)] == [b"e4"]
    # A sequence is written once: a duplicate is refused and history keeps the first.
    with pytest.raises((sqlite3.IntegrityError, psycopg.errors.UniqueViolation)):
        store.append_events("j", "a", [EventRow(5, 1, "k", b"dup")])
    assert store.read_events("j", "a", 4, 10) == [EventRow(5, 1005, "k", b"e5")]


def test_tool_calls_upsert_filter_page_and_unfinished(store):
    store.get_or_create_job("j", "p", 1)
    store.insert_phase(phase("j", "a"))
    store.insert_phase(phase("j", "b"))
    store.upsert_tool_calls("j", "a", [ToolCallRow("t1", "Bash", "RUNNING", 3, b"1"),
                                       ToolCallRow("t2", "Read", "SUCCEEDED", 5, b"2")])
    store.upsert_tool_calls("j", "b", [ToolCallRow("t0", "Bash", "HELD", 1, b"0")])
    store.upsert_tool_calls("j", "a", [ToolCallRow("t2", "Read", "FAILED", 5, b"2b")])
    store.upsert_tool_calls("j", "a", [])
    assert store.mark_tool_calls_unfinished("j", "a") == 1
    calls = store.list_tool_calls("j", None, None, [], 10)
    # Phase ordinal first, then start sequence: b's call (sequence 1) comes after all of a's.
    assert [(c.phase_id, c.tool_use_id, c.status, c.body) for c in calls] == [
        ("a", "t1", "UNFINISHED", b"1"), ("a", "t2", "FAILED", b"2b"), ("b", "t0", "HELD", b"0")]
    assert [c.tool_use_id for c in store.list_tool_calls("j", None, None, [], 10, after=(1, 3, "t1"))] == ["t2", "t0"]
    assert [c.tool_use_id for c in store.list_tool_calls("j", None, None, [], 1, after=(1, 5, "t2"))] == ["t0"]
    assert [c.tool_use_id for c in store.list_tool_calls("j", "b", None, [], 10)] == ["t0"]
    assert [c.tool_use_id for c in store.list_tool_calls("j", None, "Bash", [], 10)] == ["t1", "t0"]
    assert [c.tool_use_id for c in store.list_tool_calls("j", None, None, ["FAILED", "HELD"], 10)] == ["t2", "t0"]
    assert store.mark_tool_calls_unfinished("j", "b") == 1
    assert store.mark_tool_calls_unfinished("j", "b") == 0


def test_model_costs_replace_and_scopes(store):
    store.get_or_create_job("j", "proj", 1)
    store.get_or_create_job("k", "other", 2)
    store.insert_phase(phase("j", "a", "proj"))
    store.insert_phase(phase("j", "b", "proj"))
    store.insert_phase(phase("k", "c", "other"))
    row = ModelCostRow("m", 10, 5, 1, 2, 3, 4, 0.5, 0.4, "PRICE_TABLE")
    store.replace_model_costs("j", "a", "proj", [row, ModelCostRow("n", 1, 1, 0, 0, 0, 0, None, 0.1, "OVERRIDE")])
    store.replace_model_costs("j", "a", "proj", [row])  # a snapshot replaces, never adds
    store.replace_model_costs("j", "b", "proj", [row])
    store.replace_model_costs("k", "c", "other", [row])
    assert store.model_costs(job_id="j", phase_id="a") == [("j", "a", row)]
    assert sorted((j, p) for j, p, _ in store.model_costs(job_id="j")) == [("j", "a"), ("j", "b")]
    assert len(store.model_costs(project_id="proj")) == 2 and store.model_costs(project_id="x") == []
    assert len(store.model_costs()) == 3
    store.replace_model_costs("j", "b", "proj", [])
    assert [p for _, p, _ in store.model_costs(job_id="j")] == ["a"]
    assert sorted(p.phase_id for p in store.phases_in_scope(project_id="proj")) == ["a", "b"]
    assert [p.phase_id for p in store.phases_in_scope(job_id="j", phase_id="b")] == ["b"]
    assert len(store.phases_in_scope()) == 3


def test_active_phases_and_recovery(store):
    """What recovery reads and writes: active phases, their last sequence, unfinished calls."""
    store.get_or_create_job("j", "p", 1)
    for pid, status in [("a", "RUNNING"), ("b", "SUCCEEDED"), ("c", "PAUSED"), ("d", "AWAITING_APPROVAL")]:
        store.insert_phase(phase("j", pid, status=status))
    store.append_events("j", "a", events(1, 2))
    active = {p.phase_id: p for p in store.active_phases()}
    assert set(active) == {"a", "c", "d"} and all(p.status in ACTIVE_STATUSES for p in active.values())
    assert active["a"].last_sequence == 2
    store.upsert_tool_calls("j", "a", [ToolCallRow("t", "Bash", "RUNNING", 2, b"t")])
    store.append_events("j", "a", [EventRow(3, 5, "status", b"interrupted")])
    assert store.mark_tool_calls_unfinished("j", "a") == 1
    store.update_phase("j", "a", 9, status="INTERRUPTED", status_reason="stopped", end_time_ns=9, result_json=b"r")
    assert {p.phase_id for p in store.active_phases()} == {"c", "d"}
    assert store.get_phase("j", "a").last_sequence == 3


def test_retention_queries(store):
    store.get_or_create_job("old", "p", 1)
    store.insert_phase(phase("old", "a", status="SUCCEEDED"))
    store.update_phase("old", "a", 10, recording_dir="/rec/old-a", end_time_ns=10)
    store.append_events("old", "a", events(1, 2))
    store.upsert_tool_calls("old", "a", [ToolCallRow("t", "Bash", "SUCCEEDED", 1, b"t")])
    store.replace_model_costs("old", "a", "p", [ModelCostRow("m", 1, 1, 0, 0, 0, 0, None, 0.1, "PRICE_TABLE")])
    store.get_or_create_job("busy", "p", 1)
    store.insert_phase(phase("busy", "b", status="RUNNING"))
    store.update_phase("busy", "b", 10, recording_dir="/rec/busy-b")
    store.get_or_create_job("new", "p", 1000)
    store.insert_phase(phase("new", "c", status="FAILED", t=1000))
    store.update_phase("new", "c", 1000, recording_dir="/rec/new-c", end_time_ns=1000)
    # A job with an active phase is never expired; one touched after the cutoff neither.
    assert store.expired_jobs(500, 10) == [("old", ["/rec/old-a"])]
    assert store.finished_recordings() == [("old", "a", "/rec/old-a"), ("new", "c", "/rec/new-c")]
    store.forget_recording("new", "c")
    assert store.get_job("new").update_time_ns == 1000  # not activity
    assert store.finished_recordings() == [("old", "a", "/rec/old-a")]
    assert store.delete_jobs(["old"]) == 1 and store.delete_jobs([]) == 0
    assert store.get_job("old") is None and store.read_events("old", "a", 0, 10) == []
    assert store.list_tool_calls("old", None, None, [], 10) == [] and store.model_costs(job_id="old") == []
    assert store.expired_jobs(2**62, 10) == [("new", [])]


def test_committed_data_survives_reopen(opener):
    first = opener()
    first.get_or_create_job("j", "p", 1)
    first.insert_phase(phase("j", "a", status="RUNNING"))
    first.append_events("j", "a", events(1, 1))
    # Without closing the first handle (as after kill -9): what was committed is there, all of it.
    again = opener()
    assert [p.phase_id for p in again.active_phases()] == ["a"]
    assert again.read_events("j", "a", 0, 10)[0].body == b"e1"
