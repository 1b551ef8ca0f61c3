"""The PostgreSQL writer's connection (store/postgres_writer.PostgresCommitter): a batch of phase
writes in one pipelined transaction, fenced as every write of a phase's history is, safe to send
again after a lost connection, and what a process killed in the middle of its batches leaves.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg
import pytest

from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.tool_tracker import ToolCallStatus
from helix_runner.store.postgres_cluster import ReplicaMembership
from helix_runner.store.postgres_store import PostgresStore
from helix_runner.store.protocol import (
    AppendEvents,
    EventRow,
    InsertOutbox,
    OutboxRow,
    PhaseRow,
    StoreUnavailable,
    ToolCallRow,
    UpdatePhase,
    UpsertToolCalls,
)

REPO = Path(__file__).resolve().parents[2]


def events(first: int, count: int) -> list[EventRow]:
    return [EventRow(s, 1000 + s, "k", f"e{s}".encode()) for s in range(first, first + count)]


@pytest.fixture
def store(postgres_url):
    opened = PostgresStore(postgres_url, heartbeat=False)
    opened.get_or_create_job("j", "proj", 1)
    for phase in ("p", "q", "r"):
        opened.insert_phase(PhaseRow(job_id="j", phase_id=phase, ordinal=0, project_id="proj",
                                     status=PhaseStatus.RUNNING, create_time_ns=1))
    yield opened
    opened.close()


def sequences(store, phase: str) -> list[int]:
    return [r.sequence for r in store.read_events("j", phase, 0, 100_000)]


def outbox(phase: str, *delivery_ids: str) -> InsertOutbox:
    return InsertOutbox("j", phase, [OutboxRow(d, "wh_1", "phase.finished", "j", phase, 1, b"{}", 1)
                                     for d in delivery_ids])


def deliveries(store, phase: str) -> list[str]:
    return sorted(d.delivery_id for d in store.list_webhook_deliveries(None, "j", phase, (), 100))


def test_a_batch_of_many_phases_is_one_transaction_in_two_round_trips(store):
    committer = store.committer()
    committer.commit([AppendEvents("j", "p", events(1, 1))])  # connected
    trace = tempfile.TemporaryFile("w+")
    committer._conn.pgconn.trace(trace.fileno())
    refused = committer.commit([
        AppendEvents("j", "p", events(2, 3)),
        UpdatePhase("j", "p", 5, {"status": PhaseStatus.PAUSED}),
        outbox("p", "m1", "m2"),  # the webhook deliveries the status causes
        AppendEvents("j", "q", events(1, 2)),
        UpsertToolCalls("j", "q", [ToolCallRow("t1", "Bash", ToolCallStatus.RUNNING, 2, b"call")]),
        UpdatePhase("j", "r", 6, {"model": "m"}),
    ])
    committer._conn.pgconn.untrace()
    trace.seek(0)
    sent = [line.split("\t")[3] for line in trace.read().splitlines() if line.split("\t")[1:2] == ["F"]]
    assert refused == set()
    # BEGIN and the fence check, a flush (the first wait: its rows); then every write and the COMMIT,
    # one Sync (the second wait). Nothing else waits. (The pipeline's exit may send one more Flush
    # after the Sync, with nothing to wait for; it was in the trace in most runs, not in all.)
    assert sent.count("Sync") == 1
    assert [m for m in sent[: sent.index("Sync")] if m == "Flush"] == ["Flush"]
    assert sent.index("Sync") > max(i for i, m in enumerate(sent) if m == "Execute")
    assert sequences(store, "p") == [1, 2, 3, 4] and sequences(store, "q") == [1, 2]
    assert store.get_phase("j", "p").status is PhaseStatus.PAUSED and store.get_phase("j", "r").model == "m"
    assert [c.tool_use_id for c in store.list_tool_calls("j", "q", None, [], 10)] == ["t1"]
    assert deliveries(store, "p") == ["m1", "m2"]


def test_a_batch_sent_again_after_a_lost_connection_changes_nothing(store):
    committer = store.committer()
    batch = [AppendEvents("j", "p", events(1, 3)), UpdatePhase("j", "p", 5, {"model": "m"}),
             outbox("p", "m1"), AppendEvents("j", "q", events(1, 1))]
    committer.commit(batch)
    # The connection dropped while the COMMIT's answer was on its way: the writer cannot know it
    # was committed and sends the batch again, as a retry.
    assert committer.commit(batch, retry=True) == set()
    assert sequences(store, "p") == [1, 2, 3] and sequences(store, "q") == [1]
    # One delivery: a dispatcher may have sent it already; queued again, it would go out twice.
    assert deliveries(store, "p") == ["m1"]
    with pytest.raises(psycopg.errors.UniqueViolation):  # a first attempt may not repeat rows: a bug would show
        with store._transaction() as tx:
            store._write_phases_in(tx, [AppendEvents("j", "p", events(3, 1))])


def test_a_connection_the_database_dropped_is_replaced_and_the_batch_committed(store, postgres_url):
    committer = store.committer()
    committer.commit([AppendEvents("j", "p", events(1, 1))])
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                      ("helix-runner-writer",))
    batch = [AppendEvents("j", "p", events(2, 2))]
    with pytest.raises(StoreUnavailable):
        committer.commit(batch)
    assert committer.commit(batch, retry=True) == set()  # a new connection
    assert sequences(store, "p") == [1, 2, 3]


def test_a_phase_taken_over_before_the_batch_gets_none_of_its_writes(store, postgres_url, postgres_cluster):
    committer = store.committer()
    committer.commit([AppendEvents("j", "p", events(1, 1)), AppendEvents("j", "q", events(1, 1))])
    taker = PostgresStore(postgres_url, heartbeat=False)
    try:
        # This replica's lease ran out (a long pause); another replica sweeps its phases.
        postgres_cluster.set_lease(postgres_url, store.replica_id, -1)
        swept = taker.cluster.sweep_expired_owners(interrupted)
        assert sorted(r.phase_id for r in swept) == ["p", "q", "r"]
        refused = committer.commit([AppendEvents("j", "p", events(2, 1)),
                                    UpdatePhase("j", "q", 9, {"status": PhaseStatus.SUCCEEDED}),
                                    AppendEvents("j", "q", events(2, 1)), outbox("q", "mq")])
        assert refused == {("j", "p"), ("j", "q")}
        assert deliveries(store, "q") == []  # the deliveries its refused status would cause
        # The taker's history stands: its terminal event last, its status, nothing of ours after.
        assert sequences(store, "p") == [1, 2] and store.read_events("j", "p", 1, 1)[0].kind == "interrupted"
        assert sequences(store, "q") == [1, 2] and store.get_phase("j", "q").status is PhaseStatus.INTERRUPTED
    finally:
        taker.close()


def test_a_takeover_while_a_batch_holds_its_phases_waits_for_the_next_sweep(store, postgres_url, postgres_cluster,
                                                                          monkeypatch):
    """The batch's fence check locks its phases until it commits: a sweep meanwhile skips them, the
    batch commits, and the next sweep interrupts them after the events the batch wrote."""
    committer = store.committer()
    locked, go_on = threading.Event(), threading.Event()
    check = ReplicaMembership.lock_phases

    def lock_then_wait(self, cur, keys):
        answer = check(self, cur, keys)
        locked.set()
        assert go_on.wait(10)
        return answer

    monkeypatch.setattr(ReplicaMembership, "lock_phases", lock_then_wait)
    outcome = {}
    batch = threading.Thread(target=lambda: outcome.setdefault("refused", committer.commit(
        [AppendEvents("j", "q", events(1, 3))])))
    batch.start()
    assert locked.wait(10)
    taker = PostgresStore(postgres_url, heartbeat=False)
    try:
        postgres_cluster.set_lease(postgres_url, store.replica_id, -1)
        first = taker.cluster.sweep_expired_owners(interrupted)
        assert "q" not in [r.phase_id for r in first]  # held by the batch: skipped this round
        go_on.set()
        batch.join(10)
        assert outcome["refused"] == set()
        second = taker.cluster.sweep_expired_owners(interrupted)
        assert [r.phase_id for r in second] == ["q"]
        assert sequences(store, "q") == [1, 2, 3, 4] and store.read_events("j", "q", 3, 1)[0].kind == "interrupted"
    finally:
        taker.close()


def interrupted(row, sequence):
    return EventRow(sequence, 5000, "interrupted", b"end"), {"status_reason": "taken over"}


CHILD = r"""
import asyncio, sys
from helix_runner.phases.event_log import EventWriter
from helix_runner.store.postgres_store import PostgresStore
from helix_runner.store.protocol import EventRow

async def main(url, phases):
    store = PostgresStore(url, heartbeat=True)
    for phase in phases:  # the parent made them; this process takes them over as their owner
        store.replica.hold("j", phase, store.replica.claim_for_test("j", phase))
    writer = EventWriter(store)
    sequence = 0
    print("ready", flush=True)
    while True:
        await writer.room()  # as a phase's output reader does: the backlog stays bounded
        for _ in range(20):  # a loop turn's worth per phase: events, then a row naming the last of them
            sequence += 1
            for phase in phases:
                writer.submit("j", phase, [EventRow(sequence, sequence, "k", b"x" * 200)], lambda: None)
                writer.update_phase("j", phase, sequence, model=f"after-{sequence}")
        await asyncio.sleep(0)

asyncio.run(main(sys.argv[1], sys.argv[2].split(",")))
"""


def test_a_process_killed_in_the_middle_of_its_batches_leaves_a_prefix_of_each_phase(store, postgres_url,
                                                                                   postgres_cluster):
    phases = ["p", "q", "r"]
    # The child owns the phases: they move to its registration with new fences (as a takeover would).
    claim = ("UPDATE phases SET owner_id = NULL, fence = nextval('phase_fence') WHERE job_id = 'j' AND "
             "phase_id = ANY(%s)")
    postgres_cluster.execute(postgres_url, claim, (phases,))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "tests"), str(REPO / "server")]))
    child = subprocess.Popen([sys.executable, "-c", CLAIMING + CHILD, postgres_url, ",".join(phases)],
                             stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until it has committed a good many batches (or a minute)
            if min(len(sequences(store, p)) for p in phases) >= 300:
                break
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait(10)
    for phase in phases:
        stored = sequences(store, phase)
        assert stored and stored == list(range(1, len(stored) + 1)), f"{phase}: a gap"
        model = store.get_phase("j", phase).model
        # The row names the last event handed over before it: that event and all before it are stored.
        assert model.startswith("after-") and int(model.removeprefix("after-")) <= len(stored)


# The child takes the phases as a replica that inserted them would hold them: no owner, so it may
# write them (``lock_for_write``: a handle without a fence writes a phase that has no owner).
CLAIMING = r"""
from helix_runner.store.postgres_cluster import ReplicaMembership
def _claim_for_test(self, job, phase):
    with self.pool.connection() as conn:
        (fence,) = conn.execute("UPDATE phases SET owner_id = %s, fence = nextval('phase_fence') "
                                "WHERE job_id = %s AND phase_id = %s RETURNING fence",
                                (self.replica_id, job, phase)).fetchone()
    return fence
ReplicaMembership.claim_for_test = _claim_for_test
"""
