"""Cluster admission (phases/cluster_admission.py): each replica's queue, the database's ledger its grant.

Two ``PostgresStore`` handles on one real PostgreSQL database are two replicas; each has its own
``AdmissionQueue`` (its local limits) asking a ``LedgerGrant`` over the shared ledger. Every wait is
bounded.
"""

from __future__ import annotations

import asyncio

import pytest

from helix_runner.config import ConfigError, load_config
from helix_runner.domain.events import QueueReason
from helix_runner.errors import ErrorKind, RunnerError
from helix_runner.phases.admission import (
    AdmissionLimits,
    AdmissionQueue,
    AsyncAdmission,
    LocalGrant,
    TicketState,
)
from helix_runner.phases.cluster_admission import LedgerGrant, admission_for, cluster_limits
from helix_runner.store.cluster import SINGLE_NODE, ClusterLimits
from helix_runner.store.postgres_notify import EventListener
from helix_runner.store.postgres_store import PostgresStore

LOCAL = AdmissionLimits(max_running=4, max_starting=4)


@pytest.fixture
def stores(postgres_url):
    opened = [PostgresStore(postgres_url, heartbeat=False) for _ in range(2)]
    yield opened
    for store in opened:
        store.close()


def queues(stores, cluster: ClusterLimits, local: AdmissionLimits = LOCAL):
    return [AdmissionQueue(local, grant=LedgerGrant(s.cluster.admission_ledger(), cluster)) for s in stores]


def ledger_rows(store) -> list[tuple[str, str]]:
    return [(phase, state) for _, phase, _, _, state in store.cluster.admission_ledger().entries()]


def test_a_phase_on_another_replica_waits_for_the_cluster_slot_and_starts_when_it_frees(stores):
    a, b = queues(stores, ClusterLimits(max_running=1))
    on_a = a.submit(("j", "a1"), "p")
    assert a.pump() == [on_a] and on_a.state is TicketState.STARTING
    on_b = b.submit(("j", "b1"), "p")
    assert b.pump() == []  # B has room of its own, the cluster has none
    status = b.status(("j", "b1"))
    assert status.reason is QueueReason.SERVER_LIMIT
    assert status.detail == "phases running across the cluster: 1; the cluster's limit is 1"
    assert [t for t, _ in b.changes()] == [on_b]
    assert ledger_rows(stores[0]) == [("a1", "running"), ("b1", "queued")]

    a.release(on_a)
    assert b.pump() == [on_b]
    assert ledger_rows(stores[0]) == [("b1", "running")]
    b.release(on_b)
    assert ledger_rows(stores[0]) == []


def test_the_cluster_per_project_limit_is_reported_as_the_project_limit(stores):
    a, b = queues(stores, ClusterLimits(max_running_per_project=1))
    a.submit(("j", "x1"), "px")
    assert len(a.pump()) == 1
    b.submit(("j", "x2"), "px")
    b.submit(("j", "y1"), "py")
    assert [t.key for t in b.pump()] == [("j", "y1")]  # another project is not held back
    status = b.status(("j", "x2"))
    assert status.reason is QueueReason.PROJECT_LIMIT
    assert "project 'px' across the cluster: 1" in status.detail


def test_local_limits_still_come_first(stores):
    local = AdmissionLimits(max_running=4, max_starting=1)
    a, _ = queues(stores, ClusterLimits(max_running=5), local)
    first = a.submit(("j", "1"), "p")
    a.submit(("j", "2"), "p")
    assert a.pump() == [first]
    status = a.status(("j", "2"))
    assert status.reason is QueueReason.START_LIMIT  # this replica's own start limit, as before


def test_a_full_cluster_queue_refuses_with_a_retry_hint_and_leaves_nothing_behind(stores):
    a, b = queues(stores, ClusterLimits(max_running=1, max_queued=1))
    a.submit(("j", "run"), "p")
    a.pump()
    a.submit(("j", "wait"), "p")
    with pytest.raises(RunnerError) as refused:
        b.submit(("j", "refused"), "p")
    err = refused.value
    assert (err.kind, err.reason) == (ErrorKind.RESOURCE_EXHAUSTED, "QUEUE_FULL")
    assert err.metadata["scope"] == "cluster" and err.metadata["limit"] == "1"
    assert err.retry_after_s is not None and err.metadata["retry_after_ms"] == str(round(err.retry_after_s * 1000))
    assert b.get(("j", "refused")) is None and b.queued == 0
    assert [p for p, _ in ledger_rows(stores[0])] == ["run", "wait"]


def test_cancel_while_queued_leaves_no_ledger_entry(stores):
    a, b = queues(stores, ClusterLimits(max_running=1))
    a.submit(("j", "run"), "p")
    a.pump()
    b.submit(("j", "wait"), "p")
    b.pump()
    assert b.cancel(("j", "wait"))
    assert ledger_rows(stores[0]) == [("run", "running")]


async def test_cancelling_a_waiting_acquire_leaves_no_ledger_entry(stores):
    a, b = (AsyncAdmission(q) for q in queues(stores, ClusterLimits(max_running=1)))
    await asyncio.wait_for(a.acquire(("j", "run"), "p"), 10)
    waiting = asyncio.create_task(b.acquire(("j", "wait"), "p"))
    await asyncio.sleep(0.1)
    assert not waiting.done() and ledger_rows(stores[0]) == [("run", "running"), ("wait", "queued")]
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert ledger_rows(stores[0]) == [("run", "running")]
    b.close()
    a.close()


async def test_a_freed_slot_wakes_the_other_replica_by_notify(stores, postgres_url):
    a, b = (AsyncAdmission(q) for q in queues(stores, ClusterLimits(max_running=1)))
    listener = await asyncio.wait_for(EventListener(postgres_url).start(), 10)
    woken = asyncio.Event()

    def wake(payload: str):
        woken.set()
        b.wake(payload)

    listener.on_admission_change(wake)
    try:
        first = await asyncio.wait_for(a.acquire(("j", "run"), "p"), 10)
        waiting = asyncio.create_task(b.acquire(("j", "wait"), "p"))
        await asyncio.sleep(0.1)
        woken.clear()
        a.release(first)
        await asyncio.wait_for(woken.wait(), 10)  # the NOTIFY of A's release reached B's listener
        ticket = await asyncio.wait_for(waiting, 10)
        assert ticket.state is TicketState.STARTING
        b.release(ticket)
    finally:
        await listener.stop()
        a.close()
        b.close()


async def test_without_a_notification_the_bounded_poll_still_admits(stores):
    a, b = (AsyncAdmission(q) for q in queues(stores, ClusterLimits(max_running=1)))
    first = await asyncio.wait_for(a.acquire(("j", "run"), "p"), 10)
    waiting = asyncio.create_task(b.acquire(("j", "wait"), "p"))
    await asyncio.sleep(0.1)
    assert b._poll is not None  # armed while the entry waits for the cluster
    a.release(first)  # no listener: nobody tells B
    ticket = await asyncio.wait_for(waiting, 15)
    assert ticket.state is TicketState.STARTING and b._poll is None
    b.release(ticket)
    a.close()
    b.close()


def test_admission_for_keeps_the_local_queue_without_a_ledger_or_cluster_limits(stores, tmp_path):
    config = load_config(flags={"data_dir": str(tmp_path), "cluster_max_running_phases": 3}, environ={})
    assert cluster_limits(config) == ClusterLimits(max_running=3)
    plain = admission_for(SINGLE_NODE, LOCAL, cluster_limits(config))
    assert type(plain) is AsyncAdmission and type(plain.queue.grant) is LocalGrant
    assert type(admission_for(stores[0].cluster, LOCAL, ClusterLimits())) is AsyncAdmission
    stores[0].cluster.admission_ledger().enqueue("j", "left", "p", "", retry=False, limits=ClusterLimits())
    clustered = admission_for(stores[0].cluster, LOCAL, cluster_limits(config))
    assert type(clustered) is AsyncAdmission and type(clustered.queue.grant) is LedgerGrant
    assert ledger_rows(stores[0]) == []  # a previous process's entries under this id are gone


def test_a_rate_limit_hold_on_one_replica_holds_the_credential_on_the_other(stores):
    a, b = queues(stores, ClusterLimits(max_running=5))
    a.hold("server", a.clock() + 60, "the API answered 429")
    b.submit(("j", "x"), "p", "server")
    assert b.pump() == []  # the pass learns the hold: nothing on that credential starts
    status = b.status(("j", "x"))
    assert status.reason is QueueReason.RATE_LIMITED and "the API answered 429" in status.detail
    assert status.not_before is not None and status.not_before > b.clock() + 50


@pytest.mark.parametrize("name", ["cluster_max_running_phases", "cluster_max_running_phases_per_project",
                                  "cluster_max_queued_phases"])
def test_a_negative_cluster_limit_is_refused_at_start(name, tmp_path):
    with pytest.raises(ConfigError, match=name):
        load_config(flags={"data_dir": str(tmp_path), name: -1}, environ={})
    env = {f"HELIX_RUNNER_{name.upper()}": "2"}
    assert getattr(load_config(flags={"data_dir": str(tmp_path)}, environ=env), name) == 2


def test_an_entry_missing_from_the_ledger_is_entered_again_and_then_admitted(stores, postgres_cluster, postgres_url):
    (a,) = queues(stores[:1], ClusterLimits(max_running=1))
    ticket = a.submit(("j", "x"), "p")
    postgres_cluster.execute(postgres_url, "DELETE FROM admission_ledger")  # e.g. a failed enqueue
    assert a.pump() == [] and a.grant.last_pass.missing == (("j", "x"),)
    assert ledger_rows(stores[0]) == [("x", "queued")]
    assert a.pump() == [ticket]


def test_a_retry_is_never_refused_by_a_full_cluster_queue_and_goes_first(stores):
    a, b = queues(stores, ClusterLimits(max_running=1, max_queued=1))
    running = a.submit(("j", "run"), "p")
    a.pump()
    b.submit(("j", "new"), "p")
    b.pump()
    again = a.submit(("j", "again"), "p", attempt=2, retry=True)  # the queue is full: still accepted
    a.pump()
    a.release(running)
    assert b.pump() == []  # the retry is ahead of B's older new phase
    assert a.pump() == [again]
