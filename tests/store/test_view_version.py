"""``JobRow.view_version`` and ``sequence_sum`` on both stores: every write that changes a job's view
moves one of them (the version in the same transaction; the sum of last sequences with each appended
event), and nothing else does; the read model's job-view cache is keyed by them (phases/queries).

Runs against SQLite and PostgreSQL, opened by database URL as the server does (as the store
contract suite). "Another handle" is another process on the same SQLite file, or another replica.
"""

from __future__ import annotations

from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.pricing import PricingSource
from helix_runner.domain.tool_tracker import ToolCallStatus
from helix_runner.store.factory import open_storage
from helix_runner.store.protocol import EventRow, ModelCostRow, PhaseRow, ToolCallRow

S = PhaseStatus


def phase(job: str, pid: str, status: PhaseStatus = S.RUNNING) -> PhaseRow:
    return PhaseRow(job_id=job, phase_id=pid, ordinal=0, project_id="p", status=status, create_time_ns=1)


def cost(model: str = "m") -> ModelCostRow:
    return ModelCostRow(model, 1, 2, 3, 4, 5, 0, 0.5, 0.25, PricingSource.PRICE_TABLE)


def version(store, job: str) -> int:
    return store.get_job(job).view_version


def mark(store, job: str) -> tuple[int, int]:
    """What the read model's cache compares (besides the creation time)."""
    row = store.get_job(job)
    return row.view_version, row.sequence_sum


def test_every_write_that_changes_a_job_view_moves_its_mark_and_only_its_own(store):
    store.get_or_create_job("j", "p", 1)
    store.get_or_create_job("other", "p", 2)
    store.insert_phase(phase("other", "o"))
    assert store.get_job("j").view_version == 0
    writes = {
        "insert_phase": lambda: store.insert_phase(phase("j", "a")),
        "insert_phase (a second)": lambda: store.insert_phase(phase("j", "b")),
        "update_phase status of the latest phase": lambda: store.update_phase("j", "b", 3, status=S.PAUSED),
        # The job's status follows only its latest phase, but the earlier phase is in the view.
        "update_phase status of an earlier phase": lambda: store.update_phase("j", "a", 4, status=S.SUCCEEDED),
        "update_phase other columns": lambda: store.update_phase("j", "a", 5, cost_pb=b"\x08\x01", model="m"),
        "append_events": lambda: store.append_events([("j", "b", [EventRow(1, 1, "k", b"e1")])]),
        "append_events (another phase)": lambda: store.append_events([("j", "a", [EventRow(1, 1, "k", b"e1")])]),
        "append_events (more)": lambda: store.append_events([("j", "b", [EventRow(2, 2, "k", b"e2")])]),
        "replace_model_costs": lambda: store.replace_model_costs("j", "b", "p", [cost()]),
        "replace_model_costs (to none)": lambda: store.replace_model_costs("j", "b", "p", []),
    }
    other = mark(store, "other")
    for name, write in writes.items():
        before = mark(store, "j")
        write()
        after = mark(store, "j")
        assert after != before and after[0] >= before[0] and after[1] >= before[1], name
        if name.startswith("append_events"):
            assert after[0] == before[0], "appending events writes nothing to the job row"
    assert mark(store, "other") == other  # untouched by writes to "j"
    assert mark(store, "j")[1] == 2 + 1  # phase b's last sequence + phase a's
    # Listing reads both with the row.
    assert {r.job_id: (r.view_version, r.sequence_sum) for r in store.list_jobs(None, [], 10)} == {
        "j": mark(store, "j"),
        "other": other,
    }


def test_writes_outside_the_view_leave_the_version(store):
    store.get_or_create_job("j", "p", 1)
    store.insert_phase(phase("j", "a"))
    before = mark(store, "j")
    store.upsert_tool_calls("j", "a", [ToolCallRow("t", "Bash", ToolCallStatus.RUNNING, 1, b"call")])
    store.mark_tool_calls_unfinished("j", "a")
    store.forget_recording("j", "a")
    assert mark(store, "j") == before


def test_one_group_commit_moves_every_job_it_wrote(store):
    for job in ("j1", "j2", "j3"):
        store.get_or_create_job(job, "p", 1)
        store.insert_phase(phase(job, "a"))
    before = {job: store.get_job(job).sequence_sum for job in ("j1", "j2", "j3")}
    store.append_events(
        [
            ("j2", "a", [EventRow(1, 1, "k", b"1"), EventRow(2, 2, "k", b"2")]),
            ("j1", "a", [EventRow(1, 1, "k", b"1")]),
            ("j3", "a", []),  # nothing to write
        ]
    )
    after = {job: store.get_job(job).sequence_sum for job in ("j1", "j2", "j3")}
    assert after == {"j1": before["j1"] + 1, "j2": before["j2"] + 2, "j3": before["j3"]}


def test_another_handle_sees_the_mark_of_a_committed_write(database_url, store):
    """Both are in the database, not in one process: another server or replica sees them."""
    store.get_or_create_job("j", "p", 1)
    store.insert_phase(phase("j", "a"))
    other = open_storage(database_url).store
    try:
        before = mark(other, "j")
        store.append_events([("j", "a", [EventRow(1, 1, "k", b"e1")])])
        assert mark(other, "j") == (before[0], before[1] + 1)
        store.update_phase("j", "a", 2, status=S.SUCCEEDED)
        assert mark(other, "j") == (before[0] + 1, before[1] + 1)
        assert other.phases_of_jobs(["j"])[0].last_sequence == 1
    finally:
        other.close()


def test_a_takeover_sweep_bumps_the_versions_of_the_jobs_it_interrupts(postgres_url, postgres_cluster):
    from helix_runner.store.postgres_store import PostgresStore

    a, b = (PostgresStore(postgres_url, heartbeat=False) for _ in range(2))
    try:
        for job in ("j1", "j2"):
            a.get_or_create_job(job, "p", 1)
            a.insert_phase(phase(job, "x"))
        before = {job: version(b, job) for job in ("j1", "j2")}
        postgres_cluster.set_lease(postgres_url, a.replica_id, -1)

        def interrupt(row, seq):
            return EventRow(seq, 9, "status", b"interrupted"), {"end_time_ns": 9}

        assert len(b.cluster.sweep_expired_owners(interrupt)) == 2
        assert all(version(b, job) > before[job] for job in ("j1", "j2"))
    finally:
        a.close()
        b.close()
