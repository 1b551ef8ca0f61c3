"""The cluster admission ledger (store/postgres_admission.py) on a real PostgreSQL database.

Two store handles on one database are two replicas. Every pass is called directly with the
candidates a replica's local queue would offer; no test waits on a clock. A replica "dies" by
moving its lease into the past (the database's clock is the only one leases use).
"""

from __future__ import annotations

import threading

import pytest

from helix_runner.store.cluster import AdmissionCandidate, ClusterLimits, LedgerFullError
from helix_runner.store.postgres_store import PostgresStore
from helix_runner.store.protocol import EventRow


def interrupt(row, seq: int):
    return EventRow(seq, 99, "status", b"interrupted"), {"status_reason": "gone", "end_time_ns": 99}


@pytest.fixture
def ledgers(replicas):
    """``ledgers(n)``: the admission ledgers of n replicas on one fresh database."""
    return lambda n=2: [store.cluster.admission_ledger() for store in replicas(n)]


def c(phase: str, project: str = "p") -> AdmissionCandidate:
    return AdmissionCandidate("j", phase, project)


def enqueue(ledger, phase: str, project: str = "p", limits: ClusterLimits | None = None, retry=False):
    ledger.enqueue("j", phase, project, "cred", retry=retry, limits=limits or ClusterLimits())
    return c(phase, project)


def states(ledger) -> dict[str, str]:
    return {phase: state for _, phase, _, _, state in ledger.entries()}


def test_the_running_limit_holds_for_the_cluster_and_a_release_frees_a_slot(ledgers):
    a, b = ledgers(2)
    limits = ClusterLimits(max_running=2)
    on_a = [enqueue(a, "a1"), enqueue(a, "a2"), enqueue(a, "a3")]
    on_b = [enqueue(b, "b1")]
    first = a.admit(on_a, local_room=8, local_project_room=None, limits=limits)
    assert first.granted == (("j", "a1"), ("j", "a2")) and first.waiting_for == "server"
    assert first.running == 2 and first.queued == 2
    full = b.admit(on_b, local_room=8, local_project_room=None, limits=limits)
    assert full.granted == () and full.waiting_for == "server"

    assert a.release("j", "a1")
    # Project p's oldest ready entry is a3 (enqueued before b1): B must wait for A's turn.
    turn = b.admit(on_b, local_room=8, local_project_room=None, limits=limits)
    assert turn.granted == () and turn.waiting_for == "turn"
    assert a.admit([c("a3")], local_room=8, local_project_room=None, limits=limits).granted == (("j", "a3"),)
    assert states(a) == {"a2": "running", "a3": "running", "b1": "queued"}
    a.release("j", "a2")
    assert b.admit(on_b, local_room=8, local_project_room=None, limits=limits).granted == (("j", "b1"),)


def test_the_per_project_limit_and_the_local_room_both_hold(ledgers):
    a, b = ledgers(2)
    limits = ClusterLimits(max_running_per_project=1)
    x = [enqueue(a, "x1", "px"), enqueue(a, "x2", "px")]
    y = [enqueue(b, "y1", "py")]
    got = a.admit(x, local_room=8, local_project_room=None, limits=limits)
    assert got.granted == (("j", "x1"),) and got.waiting_for == "project"
    assert b.admit(y, local_room=8, local_project_room=None, limits=limits).granted == (("j", "y1"),)
    # The local room: a replica with no free slot of its own is granted nothing.
    z = [enqueue(a, "z1", "pz")]
    assert a.admit(z, local_room=0, local_project_room=None, limits=limits).granted == ()
    assert a.admit(z, local_room=1, local_project_room={"pz": 0}, limits=limits).granted == ()
    assert a.admit(z, local_room=1, local_project_room={"pz": 1}, limits=limits).granted == (("j", "z1"),)


def test_projects_take_turns_across_replicas_oldest_first_within_a_project(ledgers):
    a, b = ledgers(2)
    limits = ClusterLimits(max_running=1)
    busy = [enqueue(a, f"p1-{i}", "p1") for i in range(1, 4)]  # p1 arrives first with a queue
    late = [enqueue(b, "p2-1", "p2")]  # p2 arrives later, on the other replica

    def admit(ledger, offered):
        return ledger.admit(offered, local_room=8, local_project_room=None, limits=limits)

    assert admit(a, busy).granted == (("j", "p1-1"),)
    assert admit(b, late).waiting_for == "server"  # p2-1 is ready: B could start it now
    a.release("j", "p1-1")
    # p2 was never served: it goes before p1's older second entry; A wakes B instead.
    assert admit(a, busy[1:]).waiting_for == "turn"
    assert admit(b, late).granted == (("j", "p2-1"),)
    b.release("j", "p2-1")
    assert admit(a, busy[1:]).granted == (("j", "p1-2"),)
    a.release("j", "p1-2")
    assert admit(a, busy[2:]).granted == (("j", "p1-3"),)


def test_retries_go_first_within_their_project(ledgers):
    (a,) = ledgers(1)
    limits = ClusterLimits(max_running=1)
    fresh = enqueue(a, "new")
    retry = enqueue(a, "again", retry=True)
    got = a.admit([fresh, retry], local_room=8, local_project_room=None, limits=limits)
    assert got.granted == (("j", "again"),)


def test_a_full_cluster_queue_refuses_new_phases_but_never_a_retry(ledgers):
    a, b = ledgers(2)
    limits = ClusterLimits(max_queued=2)
    enqueue(a, "q1", limits=limits)
    enqueue(b, "q2", limits=limits)
    with pytest.raises(LedgerFullError) as full:
        enqueue(a, "q3", limits=limits)
    assert (full.value.scope, full.value.limit, full.value.waiting) == ("cluster", 2, 2)
    enqueue(b, "r1", limits=limits, retry=True)
    b.release("j", "q2")  # a cancelled queued phase leaves room
    enqueue(a, "q3", limits=limits)
    assert set(states(a)) == {"q1", "q3", "r1"}


def test_release_deletes_only_the_callers_entry_and_clear_empties_a_replica(ledgers):
    a, b = ledgers(2)
    enqueue(a, "x")
    enqueue(b, "y")
    assert not b.release("j", "x")  # not B's
    assert a.release("j", "x") and not a.release("j", "x")
    enqueue(b, "z")
    assert b.clear() == 2
    assert a.entries() == []


def test_entries_of_a_dead_replica_hold_no_slot(ledgers, postgres_cluster, postgres_url):
    a, b = ledgers(2)
    limits = ClusterLimits(max_running=1)
    b_entry = enqueue(b, "on-b")
    assert b.admit([b_entry], local_room=1, local_project_room=None, limits=limits).granted == (("j", "on-b"),)
    enqueue(b, "queued-on-b")
    mine = enqueue(a, "on-a")
    assert a.admit([mine], local_room=1, local_project_room=None, limits=limits).granted == ()
    postgres_cluster.set_lease(postgres_url, b.replica_id, -1)  # B dies: its slot and queue entry go
    assert a.admit([mine], local_room=1, local_project_room=None, limits=limits).granted == (("j", "on-a"),)
    assert [e[1] for e in a.entries()] == ["on-a"]


def test_the_dead_replica_sweep_releases_the_entries_too(ledgers, postgres_cluster, postgres_url):
    opened = [PostgresStore(postgres_url, heartbeat=False) for _ in range(2)]
    try:
        a, b = opened
        b.cluster.admission_ledger().enqueue("j", "x", "p", "", retry=False, limits=ClusterLimits())
        postgres_cluster.set_lease(postgres_url, b.replica_id, -1)
        a.cluster.sweep_expired_owners(interrupt)
        assert postgres_cluster.execute(postgres_url, "SELECT count(*) FROM admission_ledger") == [(0,)]
    finally:
        for store in opened:
            store.close()


def test_concurrent_passes_never_grant_more_than_the_limit(ledgers):
    ledgers = ledgers(2)
    limits = ClusterLimits(max_running=3)
    per = 20
    mine = {id(ledger): [enqueue(ledger, f"{n}-{i}") for i in range(per)]
            for n, ledger in enumerate(ledgers)}
    running: set[tuple[str, str]] = set()
    peak = [0]
    lock = threading.Lock()
    errors = []

    def work(ledger):
        try:
            todo = list(mine[id(ledger)])
            while todo:
                got = ledger.admit(todo, local_room=8, local_project_room=None, limits=limits)
                with lock:
                    running.update(got.granted)
                    peak[0] = max(peak[0], len(running))
                for key in got.granted:
                    todo = [t for t in todo if (t.job_id, t.phase_id) != key]
                    with lock:
                        running.discard(key)
                    ledger.release(*key)
        except Exception as exc:  # noqa: BLE001 - any failure in a thread is reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(ledger,)) for ledger in ledgers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and not any(t.is_alive() for t in threads)
    assert 1 <= peak[0] <= 3
    assert ledgers[0].entries() == []


def test_a_held_credential_starts_nothing_on_any_replica_until_the_hold_ends(ledgers, postgres_cluster, postgres_url):
    a, b = ledgers(2)
    held = enqueue(b, "held")  # credential "cred"
    b.enqueue("j", "other", "p", "other-cred", retry=False, limits=ClusterLimits())
    a.hold("cred", 60, "rate limited (429)")
    a.hold("cred", 1, "a shorter hold does not shorten it")
    got = b.admit([held, c("other")], local_room=8, local_project_room=None, limits=ClusterLimits(max_running=5))
    assert got.granted == (("j", "other"),)
    left, why = got.holds["cred"]
    assert 50 < left <= 60 and why == "rate limited (429)"
    postgres_cluster.execute(postgres_url, "UPDATE admission_holds SET until = now() - interval '1 second'")
    got = b.admit([held], local_room=8, local_project_room=None, limits=ClusterLimits(max_running=5))
    assert got.granted == (("j", "held"),) and got.holds == {}


def test_a_replica_without_room_passes_the_turn_on_instead_of_keeping_it(ledgers):
    a, b = ledgers(2)
    limits = ClusterLimits(max_running=3)
    fill = [enqueue(b, f"r{i}", "p0") for i in range(3)]
    assert len(b.admit(fill, local_room=3, local_project_room=None, limits=limits).granted) == 3
    mine = [enqueue(a, "a1", "p1"), enqueue(a, "a2", "p2")]  # older than B's entry, two projects
    theirs = [enqueue(b, "b1", "p3")]
    assert b.admit(theirs, local_room=1, local_project_room=None, limits=limits).waiting_for == "server"
    assert a.admit(mine, local_room=2, local_project_room=None, limits=limits).waiting_for == "server"
    b.release("j", "r0")
    b.release("j", "r1")
    # A has room for one now: it takes a1, cannot take a2, and passes the turn to B's b1.
    got = a.admit(mine, local_room=1, local_project_room=None, limits=limits)
    assert got.granted == (("j", "a1"),) and got.waiting_for == "turn"
    # a2 is no longer marked ready, so B's pass does not stop at it.
    assert b.admit(theirs, local_room=1, local_project_room=None, limits=limits).granted == (("j", "b1"),)


def test_a_local_project_limit_passes_over_only_this_replicas_entries(ledgers):
    a, b = ledgers(2)
    limits = ClusterLimits(max_running=1)
    assert b.admit([enqueue(b, "r0", "p0")], local_room=1, local_project_room=None, limits=limits).granted
    mine = [enqueue(a, "a1", "p")]  # older than B's entry of the same project
    theirs = [enqueue(b, "b1", "p")]
    b.admit(theirs, local_room=1, local_project_room=None, limits=limits)
    a.admit(mine, local_room=1, local_project_room={"p": 1}, limits=limits)
    b.release("j", "r0")
    # A's own limit for project p is reached: its a1 is passed over, B's b1 of that project is next.
    got = a.admit(mine, local_room=1, local_project_room={"p": 0}, limits=limits)
    assert got.granted == () and got.waiting_for == "turn"
    assert b.admit(theirs, local_room=1, local_project_room=None, limits=limits).granted == (("j", "b1"),)


def test_a_duplicate_phase_on_another_replica_does_not_take_over_the_entry(ledgers):
    a, b = ledgers(2)
    limits = ClusterLimits(max_running=1)
    assert a.admit([enqueue(a, "x")], local_room=1, local_project_room=None, limits=limits).granted
    enqueue(b, "x")  # the same phase sent to B (refused ALREADY_EXISTS right after)
    assert not b.release("j", "x")  # B's cleanup frees nothing
    assert [(e[2], e[4]) for e in a.entries()] == [(a.replica_id, "running")]
