"""Checkpoints, transcripts and accepted requests in both stores (store/checkpoint_rows.py)."""

from __future__ import annotations

import pytest

from helix_runner.domain.checkpoints import Checkpoint, CheckpointKind, WorkspaceKind, WorkspaceSnapshot
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.store.protocol import (
    AppendTranscript,
    InsertCheckpoint,
    MarkRewound,
    PhaseRow,
    TranscriptGapError,
    UpdatePhase,
)


def _phase(store, job="j", pid="a") -> None:
    store.get_or_create_job(job, "p", 1)
    store.insert_phase(PhaseRow(job_id=job, phase_id=pid, ordinal=0, project_id="p", status=PhaseStatus.RUNNING,
                                create_time_ns=1))


def _cp(n: int, kind=CheckpointKind.TOOL_CALL, same_as=None) -> Checkpoint:
    ws = WorkspaceSnapshot(WorkspaceKind.GIT_COMMIT, tree=f"tree{n}", head="h", commit=f"c{n}",
                           ref=f"refs/helix/checkpoints/j/a/{n}", repository="/repo", same_as=same_as)
    return Checkpoint(n, kind, 10 * n, "sess", ws, 1000 + n, tool_use_id=f"toolu_{n}", tool_name="Bash", turn=n,
                      resume_at=f"u{n}", call_at=f"a{n}", before=max(0, n - 1), attempt=1)


def test_checkpoints_are_kept_in_order_with_the_writes_they_follow_and_marked_when_rewound(store):
    _phase(store)
    start = Checkpoint(0, CheckpointKind.START, 0, "", WorkspaceSnapshot(WorkspaceKind.NONE, reason="why"), 5)
    assert store.write_phases([InsertCheckpoint("j", "a", start), InsertCheckpoint("j", "a", _cp(2)),
                               InsertCheckpoint("j", "a", _cp(1, same_as=None)),
                               UpdatePhase("j", "a", 2, {"status_reason": "x"})]) == set()
    store.write_phases([InsertCheckpoint("j", "a", _cp(1))])  # written again (a retried batch): kept once
    store.write_phases([InsertCheckpoint("j", "a", _cp(3, same_as=2))])
    assert store.list_checkpoints("j", "a") == [start, _cp(1), _cp(2), _cp(3, same_as=2)]
    store.write_phases([MarkRewound("j", "a", 1)])
    assert [(c.number, c.rewound) for c in store.list_checkpoints("j", "a")] == [
        (0, False), (1, False), (2, True), (3, True)]
    assert store.list_checkpoints("j", "other") == []


def test_a_transcript_is_kept_as_appended_chunks_and_a_gap_is_refused(store):
    _phase(store)
    store.write_phases([AppendTranscript("j", "a", "s1", 0, b"line1\n"), AppendTranscript("j", "a", "s1", 6, b"l2\n")])
    store.write_phases([AppendTranscript("j", "a", "s1", 6, b"l2\n")])  # the same chunk again: kept once
    assert store.read_transcript("j", "a", "s1") == b"line1\nl2\n"
    store.write_phases([AppendTranscript("j", "a", "s1", 0, b"rewritten\n", restart=True)])
    assert store.read_transcript("j", "a", "s1") == b"rewritten\n"
    assert store.read_transcript("j", "a", "none") == b""
    store.write_phases([AppendTranscript("j", "a", "s2", 5, b"after a gap\n")])
    with pytest.raises(TranscriptGapError):
        store.read_transcript("j", "a", "s2")


def test_the_accepted_request_and_the_fork_origin_are_kept_and_deleted_with_the_job(store):
    _phase(store)
    assert store.get_phase_request("j", "a") is None
    store.save_phase_request("j", "a", b"\x0a\x01j")
    store.update_phase("j", "a", 3, fork_pb=b"origin")
    assert store.get_phase_request("j", "a") == b"\x0a\x01j"
    assert store.get_phase("j", "a").fork_pb == b"origin"
    store.write_phases([InsertCheckpoint("j", "a", _cp(1)), AppendTranscript("j", "a", "s", 0, b"x\n")])
    assert store.delete_jobs(["j"]) == 1
    _phase(store)  # the same ids again: nothing of the deleted phase is left
    assert (store.get_phase_request("j", "a"), store.list_checkpoints("j", "a"),
            store.read_transcript("j", "a", "s")) == (None, [], b"")
