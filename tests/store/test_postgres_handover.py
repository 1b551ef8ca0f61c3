"""Durable phase state and hand-over between replicas on PostgreSQL (issue 24; docs/scale-out.md "Hand-over").

Two store handles on one database are two replicas; a crash is played by moving a lease into the past.
"""

from __future__ import annotations

import pytest

from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.store.postgres_cluster import FencedError
from helix_runner.store.postgres_handover import CHUNK_BYTES, TranscriptGapError
from helix_runner.store.protocol import EventRow, PhaseRow

S = PhaseStatus


def phase(job: str, pid: str, status: PhaseStatus = S.RUNNING) -> PhaseRow:
    return PhaseRow(job_id=job, phase_id=pid, ordinal=0, project_id="p", status=status, create_time_ns=1)


def ev(seq: int) -> EventRow:
    return EventRow(seq, seq, "k", f"e{seq}".encode())


def interrupt(row: PhaseRow, seq: int):
    return EventRow(seq, 99, "status", b"interrupted"), {"status_reason": "its replica is gone", "end_time_ns": 99}



def running(store, job="j", pid="x", status=S.RUNNING, **state):
    store.get_or_create_job(job, "p", 1)
    store.insert_phase(phase(job, pid, status))
    store.cluster.handover().save(job, pid, request=b"spec", **state)


def test_only_the_owner_saves_a_phases_state_and_it_reads_back(replicas):
    a, b = replicas(2)
    running(a, control=b"bp", session_id="s-1", workspace=b"ws")
    with pytest.raises(FencedError):
        b.cluster.handover().save("j", "x", control=b"stolen")
    a.cluster.handover().save("j", "x", control=b"bp2")
    state = b.cluster.handover().state("j", "x")
    assert (state.request, state.control, state.session_id, state.workspace, state.movable) == (
        b"spec", b"bp2", "s-1", b"ws", True)


def test_the_transcript_is_mirrored_in_chunks_and_read_back_whole(replicas):
    a, b = replicas(2)
    running(a)
    h = a.cluster.handover()
    first = b"x" * (CHUNK_BYTES + 10)  # two rows
    h.mirror_transcript("j", "x", "s", 0, first)
    h.mirror_transcript("j", "x", "s", 0, first)  # repeated after a failed commit: kept once
    h.mirror_transcript("j", "x", "s", len(first), b"tail\n")
    assert b.cluster.handover().transcript("j", "x", "s") == first + b"tail\n"
    with pytest.raises(FencedError):
        b.cluster.handover().mirror_transcript("j", "x", "s", len(first) + 5, b"forged")
    h.mirror_transcript("j", "x", "s", len(first) + 100, b"after a gap")
    with pytest.raises(TranscriptGapError):
        b.cluster.handover().transcript("j", "x", "s")


def test_a_released_phase_is_claimed_by_one_other_replica_and_its_old_owner_is_fenced_out(replicas):
    a, b, c = replicas(3)
    running(a, session_id="s-1")
    a.append_events([("j", "x", [ev(1), ev(2)])])
    assert a.cluster.handover().release("j", "x", "moved from replica A (draining)")
    with pytest.raises(FencedError):
        a.append_events([("j", "x", [ev(3)])])
    (claim,) = b.cluster.handover().claim(5)
    assert (claim.state.session_id, claim.from_replica, claim.drained, claim.reason, claim.moves) == (
        "s-1", a.replica_id, True, "moved from replica A (draining)", 1)
    assert c.cluster.handover().claim(5) == []  # claimed once
    b.append_events([("j", "x", [ev(3)])])  # the adopter writes the history on from where it was
    assert b.get_phase("j", "x").last_sequence == 3
    assert b.cluster.phase_owner("j", "x").replica_id == b.replica_id
    assert not a.cluster.handover().release("j", "x", "again")  # not A's any more


def test_the_sweep_leaves_a_dead_replicas_movable_phase_to_be_claimed(replicas, postgres_cluster, postgres_url):
    a, b = replicas(2)
    running(a, pid="movable", session_id="s-1")
    a.insert_phase(phase("j", "stuck"))  # no durable state: ends INTERRUPTED as before
    postgres_cluster.set_lease(postgres_url, a.replica_id, -1)  # A crashed
    swept = b.cluster.sweep_expired_owners(interrupt)
    assert [r.phase_id for r in swept] == ["stuck"]
    assert b.get_phase("j", "movable").status == S.RUNNING
    (claim,) = b.cluster.handover().claim(5)
    assert (claim.state.phase_id, claim.from_replica, claim.drained) == ("movable", a.replica_id, False)


def test_a_phase_that_cannot_continue_is_swept_interrupted_with_the_reason(replicas, postgres_cluster, postgres_url):
    a, b = replicas(2)
    running(a)
    postgres_cluster.set_lease(postgres_url, a.replica_id, -1)
    (claim,) = b.cluster.handover().claim(5)
    b.cluster.handover().give_up("j", "x", "its retry policy allows no further attempt")
    assert b.cluster.handover().claim(5) == []
    (swept,) = b.cluster.sweep_expired_owners(interrupt)
    assert b.get_phase("j", "x").status == S.INTERRUPTED
    # The sweep's caller words the reason from it (phases/takeover.py).
    assert b.cluster.handover().state("j", "x").not_movable_reason == "its retry policy allows no further attempt"


def test_a_queued_phase_of_a_dead_replica_is_claimed_too(replicas, postgres_cluster, postgres_url):
    a, b = replicas(2)
    running(a, status=S.QUEUED)
    postgres_cluster.set_lease(postgres_url, a.replica_id, -1)
    (claim,) = b.cluster.handover().claim(1)
    assert claim.status == "QUEUED"


def test_claims_respect_the_room_asked_for(replicas):
    a, b = replicas(2)
    for pid in ("x1", "x2", "x3"):
        running(a, pid=pid)
        a.cluster.handover().release("j", pid, "draining")
    assert len(b.cluster.handover().claim(2)) == 2
    assert len(b.cluster.handover().claim(0)) == 0
    assert len(b.cluster.handover().claim(2)) == 1


def test_a_decision_sent_during_the_move_is_taken_once_by_the_adopter(replicas):
    a, b, c = replicas(3)
    running(a)
    assert c.cluster.handover().record_decision("j", "x", "toolu_1", b"approve") == "owned"  # A runs it: forward
    a.cluster.handover().release("j", "x", "draining")
    assert c.cluster.handover().record_decision("j", "x", "toolu_1", b"approve") == "recorded"
    assert c.cluster.handover().record_decision("j", "x", "toolu_1", b"deny") == "duplicate"  # the first stands
    assert c.cluster.handover().record_decision("j", "nope", "toolu_1", b"deny") == "gone"
    with pytest.raises(FencedError):  # only the owner takes them
        c.cluster.handover().take_decisions("j", "x")
    b.cluster.handover().claim(1)
    assert c.cluster.handover().record_decision("j", "x", "toolu_2", b"approve") == "owned"  # B has it now
    assert b.cluster.handover().take_decisions("j", "x") == {"toolu_1": b"approve"}
    assert b.cluster.handover().take_decisions("j", "x") == {}
