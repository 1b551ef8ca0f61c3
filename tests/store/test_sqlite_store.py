"""The SQLite store: job status follows the latest phase, paging, scopes, durability across reopen."""

from __future__ import annotations

import pytest

from helix_runner.store.sqlite_store import (
    AlreadyExistsError,
    EventRow,
    ModelCostRow,
    PhaseRow,
    SqliteStore,
    StoreError,
    ToolCallRow,
)


def phase(job: str, pid: str, project: str = "p", status: str = "PENDING", t: int = 1) -> PhaseRow:
    return PhaseRow(job_id=job, phase_id=pid, ordinal=0, project_id=project, status=status, create_time_ns=t)


@pytest.fixture
def store(tmp_path):
    s = SqliteStore(tmp_path / "db.sqlite3")
    yield s
    s.close()


def test_job_created_once_and_status_follows_latest_phase(store):
    job, created = store.get_or_create_job("j", "p", 10)
    assert created and job.status == "PENDING"
    assert store.get_or_create_job("j", "other", 20)[1] is False
    store.insert_phase(phase("j", "a"))
    store.insert_phase(phase("j", "b"))
    assert [p.ordinal for p in store.list_phases("j")] == [1, 2]
    store.update_phase("j", "a", 30, status="FAILED")  # not the latest: the job keeps b's status
    assert store.get_job("j").status == "PENDING"
    store.update_phase("j", "b", 40, status="SUCCEEDED")
    assert store.get_job("j").status == "SUCCEEDED" and store.get_job("j").update_time_ns == 40
    with pytest.raises(AlreadyExistsError):
        store.insert_phase(phase("j", "a"))
    with pytest.raises(ValueError):
        store.update_phase("j", "a", 50, nonsense=1)


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
    store.append_events("j", "a", [EventRow(1, 1, "k", b"x"), EventRow(2, 2, "k", b"y")])
    assert store.get_phase("j", "a").last_sequence == 2
    assert [e.body for e in store.read_events("j", "a", 1, 10)] == [b"y"]
    store.upsert_tool_calls("j", "a", [ToolCallRow("t1", "Bash", "RUNNING", 3, b"1"),
                                       ToolCallRow("t2", "Read", "SUCCEEDED", 5, b"2")])
    store.upsert_tool_calls("j", "a", [ToolCallRow("t2", "Read", "FAILED", 5, b"2b")])
    assert store.mark_tool_calls_unfinished("j", "a") == 1
    calls = store.list_tool_calls("j", None, None, [], 10)
    assert [(c.tool_use_id, c.status) for c in calls] == [("t1", "UNFINISHED"), ("t2", "FAILED")]
    assert [c.tool_use_id for c in store.list_tool_calls("j", "a", None, [], 10, after=(1, 3, "t1"))] == ["t2"]
    row = ModelCostRow("m", 10, 5, 0, 0, 0, 0, 0.5, 0.4, "PRICE_TABLE")
    store.replace_model_costs("j", "a", "proj", [row])
    store.replace_model_costs("j", "a", "proj", [row])  # a snapshot replaces, never adds
    assert len(store.model_costs(job_id="j")) == 1
    assert len(store.model_costs(project_id="proj")) == 1 and store.model_costs(project_id="x") == []


def test_committed_data_survives_reopen(tmp_path):
    path = tmp_path / "db.sqlite3"
    s = SqliteStore(path)
    s.get_or_create_job("j", "p", 1)
    s.insert_phase(phase("j", "a", status="RUNNING"))
    s.append_events("j", "a", [EventRow(1, 1, "k", b"x")])
    # No close(): as after kill -9, only what was committed is there, and all of it.
    again = SqliteStore(path)
    assert [p.phase_id for p in again.active_phases()] == ["a"]
    assert again.read_events("j", "a", 0, 10)[0].body == b"x"


def test_unusable_path_is_a_store_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreError, match="cannot"):
        SqliteStore(blocker / "db.sqlite3")
