"""Retention: old finished jobs and excess recordings are removed; running phases and new jobs stay."""

from __future__ import annotations

import asyncio
import logging
import os

from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.pricing import PricingSource
from helix_runner.domain.tool_tracker import ToolCallStatus
from helix_runner.phases.retention import RetentionPolicy, RetentionSweeper
from helix_runner.store.protocol import EventRow, ModelCostRow, PhaseRow, ToolCallRow

DAY_NS = 86400 * 10**9
NOW = 100 * DAY_NS




def add_phase(store, recordings, job, phase, *, status, day, size=100):
    """A phase of ``job`` last touched on ``day`` with events, a tool call, a cost row and a recording."""
    t = day * DAY_NS
    store.get_or_create_job(job, "proj", t)
    rec = recordings / job / f"{phase}-rec"
    rec.mkdir(parents=True)
    (rec / "stdout.jsonl").write_bytes(b"x" * size)
    store.insert_phase(
        PhaseRow(
            job_id=job,
            phase_id=phase,
            ordinal=0,
            project_id="proj",
            status=PhaseStatus.RUNNING,
            create_time_ns=t,
            recording_dir=str(rec),
        )
    )
    store.append_events([(job, phase, [EventRow(1, t, "k", b"e")])])
    store.upsert_tool_calls(job, phase, [ToolCallRow("tu", "Bash", ToolCallStatus.SUCCEEDED, 1, b"c")])
    store.replace_model_costs(
        job, phase, "proj", [ModelCostRow("m", 1, 1, 0, 0, 0, 0, None, 0.5, PricingSource.PRICE_TABLE)]
    )
    status = PhaseStatus[status]
    store.update_phase(job, phase, t, status=status, end_time_ns=t if status is not PhaseStatus.RUNNING else None)
    return rec


def sweeper(store, recordings, *, shared=False, **policy):
    return RetentionSweeper(store, recordings, RetentionPolicy(**policy), clock_ns=lambda: NOW, shared=shared)


def test_old_finished_jobs_go_with_all_their_rows_and_recordings(store, tmp_path):
    recordings = tmp_path / "data" / "recordings"
    old = add_phase(store, recordings, "old", "p1", status="SUCCEEDED", day=10)
    add_phase(store, recordings, "old", "p2", status="FAILED", day=11)
    running = add_phase(store, recordings, "old-but-running", "p1", status="RUNNING", day=10)
    new = add_phase(store, recordings, "new", "p1", status="SUCCEEDED", day=95)

    report = sweeper(store, recordings, max_age_s=30 * 86400).sweep()

    assert (report.jobs_deleted, report.phases_deleted, report.recordings_deleted) == (1, 2, 2)
    assert report.bytes_freed == 200
    assert store.get_job("old") is None and store.phases_of_jobs(["old"]) == []
    assert store.read_events("old", "p1", 0, 10) == [] and store.model_cost_sums(job_ids=["old"]) == []
    assert store.list_tool_calls("old", None, None, [], 10) == []
    assert not old.exists() and not old.parent.exists()
    assert store.get_job("old-but-running") is not None and running.exists()
    assert store.get_job("new") is not None and new.exists()
    assert store.read_events("new", "p1", 0, 10)


def test_recordings_over_the_cap_go_oldest_first_and_their_phases_stay(store, tmp_path):
    recordings = tmp_path / "data" / "recordings"
    oldest = add_phase(store, recordings, "a", "p1", status="SUCCEEDED", day=1)
    middle = add_phase(store, recordings, "b", "p1", status="CANCELLED", day=2)
    running = add_phase(store, recordings, "c", "p1", status="RUNNING", day=0)
    newest = add_phase(store, recordings, "d", "p1", status="SUCCEEDED", day=3)

    report = sweeper(store, recordings, recordings_max_bytes=250).sweep()

    assert (report.recordings_deleted, report.bytes_freed, report.recordings_bytes) == (2, 200, 200)
    assert not oldest.exists() and not middle.exists()
    assert running.exists() and newest.exists()  # a running phase's recording is never touched
    assert store.get_phase("a", "p1").recording_dir == "" and store.get_phase("a", "p1").status is PhaseStatus.SUCCEEDED
    assert store.get_job("a").update_time_ns == 1 * DAY_NS  # forgetting a recording is not activity
    assert sweeper(store, recordings, recordings_max_bytes=250).sweep().recordings_deleted == 0


def test_nothing_outside_the_recordings_directory_is_deleted(store, tmp_path):
    recordings = tmp_path / "data" / "recordings"
    add_phase(store, recordings, "a", "p1", status="SUCCEEDED", day=1)
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "f").write_text("keep")
    store.update_phase("a", "p1", DAY_NS, recording_dir=str(recordings / ".." / ".." / "precious"))
    report = sweeper(store, recordings, max_age_s=86400).sweep()
    assert report.jobs_deleted == 1 and report.errors == 1
    assert (outside / "f").read_text() == "keep"


async def test_the_sweeper_runs_in_the_background_and_logs_each_sweep(store, tmp_path, caplog):
    recordings = tmp_path / "data" / "recordings"
    add_phase(store, recordings, "old", "p1", status="SUCCEEDED", day=1)
    task = asyncio.create_task(sweeper(store, recordings, max_age_s=86400, interval_s=0.05).run())
    caplog.set_level(logging.INFO, logger="helix_runner.phases.retention")
    try:
        async with asyncio.timeout(30):
            for _ in iter(lambda: sum(r.msg == "retention sweep" for r in caplog.records) >= 2, True):
                await asyncio.sleep(0.02)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    first = next(r for r in caplog.records if r.msg == "retention sweep")
    assert first.fields["jobs_deleted"] == 1 and store.get_job("old") is None


def age(recording, day):
    """Sets the recording's files and directory to ``day`` (what the age rule reads on disk)."""
    t = day * DAY_NS
    for path in (*recording.iterdir(), recording):
        os.utime(path, ns=(t, t))


def test_on_a_shared_database_the_size_rule_keeps_other_replicas_recordings(store, tmp_path):
    # Every replica has the same recordings path; a phase recorded on replica B names a directory
    # that exists only on B's disk. Replica A's sweep must neither count it nor forget it.
    recordings = tmp_path / "data" / "recordings"
    on_b = add_phase(store, recordings, "b", "p1", status="SUCCEEDED", day=1)
    for f in on_b.iterdir():
        f.unlink()
    on_b.rmdir()  # not on A's disk
    mine = add_phase(store, recordings, "a", "p1", status="SUCCEEDED", day=2, size=300)
    add_phase(store, recordings, "a", "p2", status="SUCCEEDED", day=3)

    report = sweeper(store, recordings, recordings_max_bytes=250, shared=True).sweep()

    assert (report.recordings_deleted, report.bytes_freed, report.recordings_bytes) == (1, 300, 100)
    assert not mine.exists()
    assert store.get_phase("b", "p1").recording_dir == str(on_b)  # B's sweep still finds it


def test_recordings_no_phase_names_go_with_the_age_rule(store, tmp_path):
    # Another replica's sweep deleted job "gone" (its rows), so this replica's own recording of it
    # is named by no row: the age rule removes it here. Young or still-named recordings stay.
    recordings = tmp_path / "data" / "recordings"
    gone = add_phase(store, recordings, "gone", "p1", status="SUCCEEDED", day=10)
    assert store.delete_jobs(["gone"]) == 1
    young = add_phase(store, recordings, "young", "p1", status="SUCCEEDED", day=10)
    assert store.delete_jobs(["young"]) == 1
    named = add_phase(store, recordings, "kept", "p1", status="SUCCEEDED", day=10)
    add_phase(store, recordings, "kept", "p2", status="SUCCEEDED", day=95)  # the job is recent
    age(gone, 10)
    age(named, 10)

    report = sweeper(store, recordings, max_age_s=30 * 86400, shared=True).sweep()

    assert (report.jobs_deleted, report.recordings_deleted, report.bytes_freed) == (0, 1, 100)
    assert not gone.exists() and not gone.parent.exists()
    assert young.exists() and named.exists()


def test_an_expired_jobs_checkpoints_go_with_it_their_hidden_refs_too(store, tmp_path):
    from support.git_repos import make_repo, sh

    from helix_runner.domain.checkpoints import Checkpoint, CheckpointKind, WorkspaceKind
    from helix_runner.process.checkpoint_git import WorkspaceSnapshots, checkpoint_ref
    from helix_runner.store.protocol import InsertCheckpoint

    recordings = tmp_path / "data" / "recordings"
    repo = make_repo(tmp_path / "repo")
    add_phase(store, recordings, "old", "p1", status="SUCCEEDED", day=10)
    add_phase(store, recordings, "new", "p1", status="SUCCEEDED", day=95)
    for job in ("old", "new"):
        snaps = WorkspaceSnapshots(WorkspaceKind.GIT_COMMIT, repo, repo, tmp_path / job, job, "p1")
        snaps.start()
        (repo / f"{job}.txt").write_text(job)
        snap = snaps.take(1)
        snaps.close()
        store.write_phases([InsertCheckpoint(job, "p1", Checkpoint(1, CheckpointKind.TOOL_CALL, 1, "s", snap, 1))])
    sweeper(store, recordings, max_age_s=30 * 86400).sweep()
    assert store.list_checkpoints("old", "p1") == [] and len(store.list_checkpoints("new", "p1")) == 1
    refs = sh(repo, "for-each-ref", "--format=%(refname)", "refs/helix").split()
    assert refs == [checkpoint_ref("new", "p1", 0), checkpoint_ref("new", "p1", 1)]
