"""The store contract, run against every implementation: SQLite (embedded) and PostgreSQL (replicas).

Each test opens stores through ``open_storage`` with the store's database URL, as the server does
(``store`` and ``opener``: tests/store/conftest.py),
so both implementations answer the same calls with the same rows. The PostgreSQL cluster is a
throwaway one per test session (tests/support/postgres.py), a fresh database per test.
"""

from __future__ import annotations

import sqlite3

import psycopg
import pytest
from support.old_databases import postgres_version_1, sqlite_version_1

from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.pricing import PricingSource
from helix_runner.domain.tool_tracker import ToolCallStatus, ToolStats
from helix_runner.store.factory import open_storage
from helix_runner.store.protocol import (
    ACTIVE_STATUSES,
    AlreadyExistsError,
    AppendEvents,
    EventRow,
    ModelCostRow,
    PhaseCostSums,
    PhaseRow,
    ReplaceModelCosts,
    StoreError,
    ToolCallRow,
    UpdatePhase,
    UpsertToolCalls,
)

S = PhaseStatus
T = ToolCallStatus
def phase(job: str, pid: str, project: str = "p", status: PhaseStatus = S.PENDING, t: int = 1) -> PhaseRow:
    return PhaseRow(job_id=job, phase_id=pid, ordinal=0, project_id=project, status=status, create_time_ns=t)


def events(first: int, count: int, kind: str = "k") -> list[EventRow]:
    return [EventRow(s, 1000 + s, kind, f"e{s}".encode()) for s in range(first, first + count)]


def test_job_created_once_and_status_follows_latest_phase(store):
    job, created = store.get_or_create_job("j", "p", 10)
    assert created and (job.status, job.create_time_ns, job.update_time_ns) == (S.PENDING, 10, 10)
    assert job.status is S.PENDING
    again, created = store.get_or_create_job("j", "other", 20)
    assert not created and again.project_id == "p" and again.status is S.PENDING
    assert store.insert_phase(phase("j", "a", status=S.RUNNING)).ordinal == 1
    assert store.get_job("j").status is S.RUNNING
    assert store.insert_phase(phase("j", "b")).ordinal == 2
    assert [p.ordinal for p in store.phases_of_jobs(["j"])] == [1, 2]
    store.update_phase("j", "a", 30, status=S.FAILED)  # not the latest: the job keeps b's status
    assert store.get_job("j").status is S.PENDING
    assert store.get_phase("j", "a").status is S.FAILED
    store.update_phase("j", "b", 40, status=S.SUCCEEDED, status_reason="done", end_time_ns=41, result_pb=b"r")
    job = store.get_job("j")
    assert (job.status, job.update_time_ns) == (S.SUCCEEDED, 40)
    b = store.get_phase("j", "b")
    assert (b.status_reason, b.end_time_ns, b.result_pb) == ("done", 41, b"r")
    store.update_phase("j", "b", 50, cost_pb=b"c", computed_usd=0.25, computed_only=1)  # no status: time only
    assert store.get_job("j").update_time_ns == 50 and store.get_job("j").status is S.SUCCEEDED
    assert (store.get_phase("j", "b").cost_pb, store.get_phase("j", "b").computed_usd) == (b"c", 0.25)
    with pytest.raises(AlreadyExistsError):
        store.insert_phase(phase("j", "a"))
    with pytest.raises(ValueError, match="unknown phase columns"):
        store.update_phase("j", "a", 50, nonsense=1)
    with pytest.raises(ValueError, match="unknown phase columns"):  # renamed to result_pb
        store.update_phase("j", "a", 50, result_json=b"r")
    with pytest.raises(TypeError):  # statuses are the domain enum, never a bare string
        store.update_phase("j", "a", 50, status="FAILED")
    with pytest.raises(TypeError):
        store.insert_phase(phase("j", "c", status="RUNNING"))
    assert store.get_phase("j", "a").status is S.FAILED and store.get_phase("j", "c") is None
    assert store.get_job("nope") is None and store.get_phase("j", "nope") is None


def test_phases_of_jobs_reads_several_jobs_at_once(store):
    for job in ("k", "j", "empty"):
        store.get_or_create_job(job, "p", 1)
    store.insert_phase(phase("k", "k1"))
    store.insert_phase(phase("j", "j1", status=S.RUNNING))
    store.insert_phase(phase("j", "j2"))
    store.append_events([("j", "j2", events(1, 3))])
    rows = store.phases_of_jobs(["k", "j", "empty", "nope"])
    assert [(p.job_id, p.phase_id, p.ordinal, p.status, p.last_sequence) for p in rows] == [
        ("j", "j1", 1, S.RUNNING, 0), ("j", "j2", 2, S.PENDING, 3), ("k", "k1", 1, S.PENDING, 0)]
    assert store.phases_of_jobs([]) == [] and store.phases_of_jobs(["nope"]) == []


def test_phase_columns_round_trip(store):
    store.get_or_create_job("j", "p", 1)
    row = PhaseRow(job_id="j", phase_id="a", ordinal=0, project_id="p", status=S.RUNNING, create_time_ns=5,
                   start_time_ns=6, session_id="s", model="m", working_dir="/w", prompt="hi",
                   on_disconnect="CONTINUE", result_pb=b"\x00r", cost_pb=b"c\x00", tool_stats_pb=b"\xfft",
                   recording_dir="/r", reported_usd=None, computed_usd=0.5, computed_only=1, pid=123,
                   pid_start_ticks=2**40, attempts_pb=b"\x00a")
    store.insert_phase(row)
    got = store.get_phase("j", "a")
    assert got == PhaseRow(**{**row.__dict__, "ordinal": 1, "last_sequence": 0})
    assert got.status is S.RUNNING


def test_attempts_are_written_with_a_status_change_and_survive_a_reopen(store, opener):
    store.get_or_create_job("j", "p", 1)
    store.insert_phase(phase("j", "a", status=S.RUNNING))
    assert store.get_phase("j", "a").attempts_pb is None
    store.update_phase("j", "a", 2, status=S.QUEUED, status_reason="retry", attempts_pb=b"\x01one")
    store.update_phase("j", "a", 3, status=S.RUNNING)  # another change leaves them
    # A restarted server (recovery) or another replica (takeover, reads) sees them.
    (found,) = opener().active_phases()
    assert (found.status, found.attempts_pb) == (S.RUNNING, b"\x01one")
    assert [p.attempts_pb for p in opener().phases_of_jobs(["j"])] == [b"\x01one"]


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
    store.insert_phase(phase("j3", "a", "odd", status=S.RUNNING))
    assert [(j.job_id, j.status) for j in store.list_jobs(None, [S.RUNNING], 10)] == [("j3", S.RUNNING)]
    assert [j.job_id for j in store.list_jobs("even", [S.RUNNING, S.FAILED], 10)] == []


def batch_of_two_phases() -> list:
    """What two running phases hand the writer in one batch: events, row writes, in their order."""
    cost = ModelCostRow("m", 1, 2, 0, 0, 0, 0, 0.5, 0.5, PricingSource.PRICE_TABLE)
    return [
        AppendEvents("j", "a", events(1, 2)),
        UpdatePhase("j", "a", 20, {"status": S.RUNNING, "status_reason": "running", "start_time_ns": 19}),
        AppendEvents("j", "b", events(1, 1)),
        UpsertToolCalls("j", "a", [ToolCallRow("t1", "Bash", T.RUNNING, 2, b"started")]),
        AppendEvents("j", "a", events(3, 1)),
        UpsertToolCalls("j", "a", [ToolCallRow("t1", "Bash", T.SUCCEEDED, 2, b"done", duration_ns=7)]),
        UpdatePhase("j", "b", 21, {"model": "first"}),
        ReplaceModelCosts("j", "a", "p", [cost]),
        UpdatePhase("j", "b", 22, {"model": "second", "session_id": "s"}),
        UpdatePhase("j", "a", 23, {"status": S.SUCCEEDED, "result_pb": b"r", "end_time_ns": 23}),
    ]


def test_a_batch_of_phase_writes_ends_as_the_writes_one_by_one_would(store):
    store.get_or_create_job("j", "p", 1)
    store.insert_phase(phase("j", "a"))
    store.insert_phase(phase("j", "b"))  # b is the job's latest phase
    before = store.get_job("j").view_version
    assert store.write_phases(batch_of_two_phases()) == set()
    assert [e.sequence for e in store.read_events("j", "a", 0, 10)] == [1, 2, 3]
    assert [e.sequence for e in store.read_events("j", "b", 0, 10)] == [1]
    a, b = store.get_phase("j", "a"), store.get_phase("j", "b")
    assert (a.status, a.status_reason, a.start_time_ns, a.end_time_ns, a.result_pb) == (
        S.SUCCEEDED, "running", 19, 23, b"r")
    assert (b.model, b.session_id, b.status) == ("second", "s", S.PENDING)  # later writes win
    [call] = store.list_tool_calls("j", "a", None, [], 10)
    assert (call.status, call.body, call.duration_ns) == (T.SUCCEEDED, b"done", 7)
    assert [m.model for _, m in store.model_cost_sums(job_ids=["j"])] == ["m"]
    job = store.get_job("j")
    # a is not the job's latest phase: the job keeps b's status; b's writes touched it last (22).
    assert (job.status, job.update_time_ns) == (S.PENDING, 22) and job.view_version > before


def test_a_batch_is_all_or_nothing_and_a_retry_of_a_committed_one_changes_nothing(store):
    store.get_or_create_job("j", "p", 1)
    store.insert_phase(phase("j", "a"))
    store.insert_phase(phase("j", "b"))
    committer = store.committer()
    batch = batch_of_two_phases()
    assert committer.commit(batch) == set()
    # Sent again after a lost connection (the commit may have happened): nothing doubles.
    assert committer.commit(batch, retry=True) == set()
    assert [e.sequence for e in store.read_events("j", "a", 0, 10)] == [1, 2, 3]
    # Not a retry: a sequence written twice refuses the whole batch, the model write with it.
    with pytest.raises((StoreError, sqlite3.Error, psycopg.Error)):
        committer.commit([UpdatePhase("j", "b", 30, {"model": "third"}), AppendEvents("j", "b", events(1, 1))])
    assert store.get_phase("j", "b").model == "second" and len(store.read_events("j", "b", 0, 10)) == 1
    committer.commit([UpdatePhase("j", "b", 31, {"model": "fourth"})])  # the committer is usable after
    assert store.get_phase("j", "b").model == "fourth"
    assert committer.commit([]) == set()
    with pytest.raises(ValueError, match="unknown phase columns"):
        UpdatePhase("j", "b", 1, {"last_sequence": 3})


def test_events_append_and_read_in_sequence_order(store):
    store.get_or_create_job("j", "p", 1)
    store.insert_phase(phase("j", "a"))
    store.insert_phase(phase("j", "b"))
    store.append_events([("j", "a", events(1, 3))])
    # Group commit: several phases, one call; each phase's sequence continues its own log.
    store.append_events([("j", "a", events(4, 2)), ("j", "b", events(1, 4)), ("j", "a", [])])
    store.append_events([])
    assert store.get_phase("j", "a").last_sequence == 5 and store.get_phase("j", "b").last_sequence == 4
    assert [e.sequence for e in store.read_events("j", "a", 0, 100)] == [1, 2, 3, 4, 5]
    page = store.read_events("j", "a", 2, 2)
    assert page == [EventRow(3, 1003, "k", b"e3"), EventRow(4, 1004, "k", b"e4")]
    assert store.read_events("j", "a", 5, 10) == [] and store.read_events("j", "nope", 0, 10) == []
    assert [e.body for e in store.read_events("j", "b", 3, 10)] == [b"e4"]
    # A sequence is written once: a duplicate is refused, the whole batch with it, and history
    # keeps the first.
    with pytest.raises((sqlite3.IntegrityError, psycopg.errors.UniqueViolation)):
        store.append_events([("j", "b", events(5, 1)), ("j", "a", [EventRow(5, 1, "k", b"dup")])])
    assert store.read_events("j", "a", 4, 10) == [EventRow(5, 1005, "k", b"e5")]
    assert store.get_phase("j", "b").last_sequence == 4


def test_tool_calls_upsert_filter_page_and_unfinished(store):
    store.get_or_create_job("j", "p", 1)
    store.insert_phase(phase("j", "a"))
    store.insert_phase(phase("j", "b"))
    store.upsert_tool_calls("j", "a", [ToolCallRow("t1", "Bash", T.RUNNING, 3, b"1"),
                                       ToolCallRow("t2", "Read", T.SUCCEEDED, 5, b"2", duration_ns=7)])
    store.upsert_tool_calls("j", "b", [ToolCallRow("t0", "Bash", T.HELD, 1, b"0")])
    store.upsert_tool_calls("j", "a", [ToolCallRow("t2", "Read", T.FAILED, 5, b"2b", duration_ns=9)])
    store.upsert_tool_calls("j", "a", [])
    assert store.mark_tool_calls_unfinished("j", "a") == 1
    calls = store.list_tool_calls("j", None, None, [], 10)
    # Phase ordinal first, then start sequence: b's call (sequence 1) comes after all of a's.
    assert calls == [
        ToolCallRow("t1", "Bash", T.UNFINISHED, 3, b"1", "a", None, 1),
        ToolCallRow("t2", "Read", T.FAILED, 5, b"2b", "a", 9, 1),
        ToolCallRow("t0", "Bash", T.HELD, 1, b"0", "b", None, 2),
    ]
    assert all(isinstance(c.status, ToolCallStatus) for c in calls)
    assert [c.tool_use_id for c in store.list_tool_calls("j", None, None, [], 10, after=(1, 3, "t1"))] == ["t2", "t0"]
    assert [c.tool_use_id for c in store.list_tool_calls("j", None, None, [], 1, after=(1, 5, "t2"))] == ["t0"]
    assert [c.tool_use_id for c in store.list_tool_calls("j", "b", None, [], 10)] == ["t0"]
    assert [c.tool_use_id for c in store.list_tool_calls("j", None, "Bash", [], 10)] == ["t1", "t0"]
    assert [c.tool_use_id for c in store.list_tool_calls("j", None, None, [T.FAILED, T.HELD], 10)] == ["t2", "t0"]
    assert store.mark_tool_calls_unfinished("j", "b") == 1
    assert store.mark_tool_calls_unfinished("j", "b") == 0


def test_tool_call_stats_count_mean_and_nearest_rank_p95(store):
    store.get_or_create_job("j", "p", 1)
    store.insert_phase(phase("j", "a"))
    store.insert_phase(phase("j", "b"))
    # Bash: 21 finished calls with durations 1..21 (shuffled), 2 failed among them, one running.
    # The nearest rank of 21 is ceil(0.95 * 21) = 20: p95 = 20; the mean is floor(231 / 21) = 11.
    durations = [7, 21, 3, 14, 1, 19, 10, 5, 16, 2, 20, 12, 8, 18, 4, 15, 9, 13, 6, 11, 17]
    store.upsert_tool_calls("j", "a", [
        ToolCallRow(f"bash{i}", "Bash", T.FAILED if i in (3, 9) else T.SUCCEEDED, i, b"", duration_ns=d)
        for i, d in enumerate(durations)])
    store.upsert_tool_calls("j", "a", [ToolCallRow("bash-running", "Bash", T.RUNNING, 100, b"")])
    # Read, in phase b: one finished call (p95 is itself), one held, one unfinished, one finished
    # without a known duration (left out of total, mean and p95, counted as finished).
    store.upsert_tool_calls("j", "b", [
        ToolCallRow("r1", "Read", T.SUCCEEDED, 1, b"", duration_ns=5),
        ToolCallRow("r2", "Read", T.HELD, 2, b""),
        ToolCallRow("r3", "Read", T.UNFINISHED, 3, b""),
        ToolCallRow("r4", "Read", T.SUCCEEDED, 4, b""),
    ])
    store.upsert_tool_calls("j", "b", [ToolCallRow("w1", "Write", T.RUNNING, 5, b"")])
    stats = sorted(store.tool_call_stats("j", None, None, []), key=lambda s: s.name)
    assert stats == [
        ToolStats("Bash", 22, 2, 1, 231, 11, 20),
        ToolStats("Read", 4, 0, 2, 5, 5, 5),
        ToolStats("Write", 1, 0, 1, 0, 0, 0),
    ]
    assert store.tool_call_stats("j", "b", "Read", [T.SUCCEEDED]) == [ToolStats("Read", 2, 0, 0, 5, 5, 5)]
    assert store.tool_call_stats("j", None, "Bash", [T.FAILED]) == [ToolStats("Bash", 2, 2, 0, 16, 8, 14)]
    assert store.tool_call_stats("j", "a", None, [T.HELD]) == []
    assert store.tool_call_stats("nope", None, None, []) == []
    # Exact at every count: the nearest rank ceil(0.95 n), computed in integers (no floating point).
    many = [ToolCallRow(f"m{i}", "Many", T.SUCCEEDED, i, b"", duration_ns=i) for i in range(1, 61)]
    for n in (1, 2, 19, 20, 21, 40, 59, 60):
        store.delete_jobs(["m"])
        store.get_or_create_job("m", "p", 1)
        store.insert_phase(phase("m", "x"))
        store.upsert_tool_calls("m", "x", many[:n])
        (s,) = store.tool_call_stats("m", None, None, [])
        assert (s.count, s.p95_duration_ns) == (n, -(-95 * n // 100)), n


def test_model_costs_replace_and_scopes(store):
    store.get_or_create_job("j", "proj", 1)
    store.get_or_create_job("k", "other", 2)
    store.get_or_create_job("l", "proj", 3)
    store.insert_phase(phase("j", "a", "proj"))
    store.insert_phase(phase("j", "b", "proj"))
    store.insert_phase(phase("k", "c", "other"))
    store.insert_phase(phase("l", "d", "proj"))
    row = ModelCostRow("m", 10, 5, 1, 2, 3, 4, 0.5, 0.25, PricingSource.PRICE_TABLE)
    store.replace_model_costs("j", "a", "proj", [
        row, ModelCostRow("n", 1, 1, 0, 0, 0, 0, None, 0.125, PricingSource.OVERRIDE)])
    store.replace_model_costs("j", "a", "proj", [row])  # a snapshot replaces, never adds
    store.replace_model_costs("j", "b", "proj", [row])
    store.replace_model_costs("k", "c", "other", [row])
    store.replace_model_costs("l", "d", "proj", [ModelCostRow("m", 1, 0, 0, 0, 0, 0, None, 0.5,
                                                              PricingSource.PRICE_TABLE)])
    twice = ModelCostRow("m", 20, 10, 2, 4, 6, 8, 1.0, 0.5, PricingSource.PRICE_TABLE)
    assert store.model_cost_sums(job_ids=["j"], phase_id="a") == [("j", row)]
    assert store.model_cost_sums(job_ids=["j"]) == [("j", twice)]
    assert sorted(store.model_cost_sums(job_ids=["j", "l"]), key=lambda r: r[0]) == [
        ("j", twice), ("l", ModelCostRow("m", 1, 0, 0, 0, 0, 0, None, 0.5, PricingSource.PRICE_TABLE))]
    # A project: one row per model and source, no job; reported_usd sums the rows that have one.
    assert store.model_cost_sums(project_id="proj") == [
        ("", ModelCostRow("m", 21, 10, 2, 4, 6, 8, 1.0, 1.0, PricingSource.PRICE_TABLE))]
    assert store.model_cost_sums(project_id="x") == [] and store.model_cost_sums(job_ids=["nope"]) == []
    store.replace_model_costs("j", "b", "proj", [])
    assert store.model_cost_sums(job_ids=["j"]) == [("j", row)]
    for pid, reported, computed, only in (("a", None, 0.25, 0), ("b", 0.5, 0.5, 1), ("c", 2.0, 2.0, 0)):
        job = "k" if pid == "c" else "j"
        store.update_phase(job, pid, 5, reported_usd=reported, computed_usd=computed, computed_only=only)
    assert store.phase_cost_sums(project_id="proj") == PhaseCostSums(3, 0.5, 0.75, 1)
    assert store.phase_cost_sums(job_id="j") == PhaseCostSums(2, 0.5, 0.75, 1)
    assert store.phase_cost_sums(job_id="j", phase_id="a") == PhaseCostSums(1, 0.0, 0.25, 0)
    assert store.phase_cost_sums() == PhaseCostSums(4, 2.5, 2.75, 1)
    assert store.phase_cost_sums(project_id="x") == PhaseCostSums()


def test_active_phases_and_recovery(store):
    """What recovery reads and writes: active phases, their last sequence, unfinished calls."""
    store.get_or_create_job("j", "p", 1)
    for pid, status in [("a", S.RUNNING), ("b", S.SUCCEEDED), ("c", S.PAUSED), ("d", S.AWAITING_APPROVAL),
                        ("e", S.QUEUED)]:
        store.insert_phase(phase("j", pid, status=status))
    store.append_events([("j", "a", events(1, 2))])
    active = {p.phase_id: p for p in store.active_phases()}
    assert set(active) == {"a", "c", "d", "e"} and all(p.status in ACTIVE_STATUSES for p in active.values())
    assert active["a"].last_sequence == 2
    store.upsert_tool_calls("j", "a", [ToolCallRow("t", "Bash", T.RUNNING, 2, b"t")])
    store.append_events([("j", "a", [EventRow(3, 5, "status", b"interrupted")])])
    assert store.mark_tool_calls_unfinished("j", "a") == 1
    store.update_phase("j", "a", 9, status=S.INTERRUPTED, status_reason="stopped", end_time_ns=9, result_pb=b"r")
    assert {p.phase_id for p in store.active_phases()} == {"c", "d", "e"}
    assert store.get_phase("j", "a").last_sequence == 3


def test_retention_queries(store):
    store.get_or_create_job("old", "p", 1)
    store.insert_phase(phase("old", "a", status=S.SUCCEEDED))
    store.update_phase("old", "a", 10, recording_dir="/rec/old-a", end_time_ns=10)
    store.append_events([("old", "a", events(1, 2))])
    store.upsert_tool_calls("old", "a", [ToolCallRow("t", "Bash", T.SUCCEEDED, 1, b"t", duration_ns=1)])
    store.replace_model_costs("old", "a", "p", [ModelCostRow("m", 1, 1, 0, 0, 0, 0, None, 0.1,
                                                             PricingSource.PRICE_TABLE)])
    store.get_or_create_job("busy", "p", 1)
    store.insert_phase(phase("busy", "b", status=S.RUNNING))
    store.update_phase("busy", "b", 10, recording_dir="/rec/busy-b")
    store.get_or_create_job("new", "p", 1000)
    store.insert_phase(phase("new", "c", status=S.FAILED, t=1000))
    store.update_phase("new", "c", 1000, recording_dir="/rec/new-c", end_time_ns=1000)
    # A job with an active phase is never expired; one touched after the cutoff neither.
    assert store.expired_jobs(500, 10) == [("old", ["/rec/old-a"])]
    assert store.finished_recordings() == [("old", "a", "/rec/old-a"), ("new", "c", "/rec/new-c")]
    store.forget_recording("new", "c")
    assert store.get_job("new").update_time_ns == 1000  # not activity
    assert store.finished_recordings() == [("old", "a", "/rec/old-a")]
    assert store.referenced_recordings(["/rec/old-a", "/rec/new-c", "/rec/none"]) == {"/rec/old-a"}
    assert store.referenced_recordings([]) == set()
    assert store.delete_jobs(["old"]) == 1 and store.delete_jobs([]) == 0
    assert store.get_job("old") is None and store.read_events("old", "a", 0, 10) == []
    assert store.list_tool_calls("old", None, None, [], 10) == [] and store.model_cost_sums(job_ids=["old"]) == []
    assert store.tool_call_stats("old", None, None, []) == []
    assert store.expired_jobs(2**62, 10) == [("new", [])]


def test_startup_hooks_on_a_new_database(store):
    """What server.py calls on every store at start: nothing was migrated, nothing to fill in."""
    assert store.migrated_from is None
    assert store.backfill_tool_call_durations(lambda body: pytest.fail("nothing to fill in")) == 0
    assert store.backfill_tool_call_durations(lambda body: pytest.fail("nothing to fill in")) == 0


def test_committed_data_survives_reopen(opener):
    first = opener()
    first.get_or_create_job("j", "p", 1)
    first.insert_phase(phase("j", "a", status=S.RUNNING))
    first.append_events([("j", "a", events(1, 1))])
    # Without closing the first handle (as after kill -9): what was committed is there, all of it.
    again = opener()
    assert [p.phase_id for p in again.active_phases()] == ["a"]
    assert again.read_events("j", "a", 0, 10)[0].body == b"e1"
    assert again.migrated_from is None  # reopening a current database migrates nothing


@pytest.fixture
def version_1_url(database_url, tmp_path):
    """The test's database as a version-1 server of its kind left it (tests/support/old_databases.py)."""
    if database_url.startswith("sqlite://"):
        return sqlite_version_1(tmp_path / "v1.sqlite3")
    return postgres_version_1(database_url)


def test_durations_an_old_database_holds_only_in_bodies_are_filled_in_once(version_1_url):
    store = open_storage(version_1_url).store
    try:
        assert store.migrated_from == 1
        decoded = []

        def duration_of(body: bytes) -> int | None:
            decoded.append(body)
            return int(body.split(b"=")[1]) if body.startswith(b"duration=") else None

        assert store.backfill_tool_call_durations(duration_of, batch=1) == 1
        assert sorted(decoded) == [b"bad", b"duration=40"]  # only finished calls are decoded
        assert [(c.tool_use_id, c.duration_ns) for c in store.list_tool_calls("j", None, None, [], 10)] == [
            ("t1", 40), ("t2", None), ("t3", None)]
        assert [(s.name, s.count, s.total_duration_ns, s.p95_duration_ns)
                for s in store.tool_call_stats("j", None, None, [])] == [("Bash", 3, 40, 40)]
        assert store.backfill_tool_call_durations(duration_of) == 0 and len(decoded) == 2  # done for good
    finally:
        store.close()
    again = open_storage(version_1_url).store
    try:
        assert again.migrated_from is None and again.backfill_tool_call_durations(pytest.fail) == 0
    finally:
        again.close()
