"""The webhook outbox with replicas on one PostgreSQL database: fences, concurrent claims, the sweep.

Two store handles on one database are two replicas (as in test_postgres_cluster.py).
"""

from __future__ import annotations

import threading
import time

import pytest

from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.store.postgres_cluster import FencedError
from helix_runner.store.postgres_store import PostgresStore
from helix_runner.store.protocol import EventRow, OutboxRow, PhaseRow, WebhookAttemptRow, WebhookRow


def phase(job: str, pid: str) -> PhaseRow:
    return PhaseRow(job_id=job, phase_id=pid, ordinal=0, project_id="p", status=PhaseStatus.RUNNING, create_time_ns=1)


def out(did: str, job: str = "j", pid: str = "x", seq: int = 1) -> OutboxRow:
    return OutboxRow(did, "wh", "phase.finished", job, pid, seq, b"{}", time.time_ns())


def subscription() -> WebhookRow:
    return WebhookRow("wh", "", "https://example.com/h", "whsec_" + "A" * 32, ("phase.finished",), (), None,
                      "standard", "", "api", 1)



def test_a_phase_another_replica_owns_gets_neither_events_nor_deliveries_from_this_one(replicas):
    a, b = replicas(2)
    a.get_or_create_job("j", "p", 1)
    a.insert_phase(phase("j", "x"))
    a.insert_phase(phase("j", "y"))
    b.get_or_create_job("k", "p", 1)
    b.insert_phase(phase("k", "z"))
    with pytest.raises(FencedError) as refused:  # one group commit: A's phases go in, B's does not
        a.append_events([("j", "x", [EventRow(1, 1, "k", b"e")]), ("k", "z", [EventRow(1, 1, "k", b"e")])],
                        outbox=[out("mx", "j", "x"), out("mz", "k", "z")])
    assert refused.value.refused == [("k", "z")]
    assert [d.delivery_id for d in b.list_webhook_deliveries(None, None, None, (), 10)] == ["mx"]


def test_replicas_claiming_at_once_never_claim_the_same_delivery(replicas):
    stores = replicas(4)
    stores[0].create_webhook(subscription())
    # 200 deliveries of 200 phases (none waits for another), claimed by four replicas in threads at once.
    stores[0].enqueue_webhooks([out(f"m{i}", "j", f"p{i}") for i in range(200)])
    claimed: dict[str, list[str]] = {}
    start = threading.Barrier(len(stores))

    def claim(store: PostgresStore) -> None:
        start.wait()
        mine = claimed.setdefault(store.replica_id, [])
        while batch := store.claim_webhook_deliveries(store.replica_id, 7, 60):
            mine += [d.delivery_id for d in batch]
            for d in batch:
                store.finish_webhook_attempt(store.replica_id, WebhookAttemptRow(d.delivery_id, 1, 1, 200, 1, "",
                                                                                 store.replica_id), "DELIVERED", None)

    threads = [threading.Thread(target=claim, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    every = [d for got in claimed.values() for d in got]
    assert sorted(every) == sorted(f"m{i}" for i in range(200))  # each exactly once
    assert sum(1 for got in claimed.values() if got) >= 2  # they did share the work
    assert all(d.state == "DELIVERED" for d in stores[0].list_webhook_deliveries(None, None, None, (), 500))


def test_a_swept_phase_gets_its_deliveries_in_the_sweeps_transaction(replicas, postgres_cluster, postgres_url):
    a, b = replicas(2)
    a.get_or_create_job("j", "p", 1)
    a.insert_phase(phase("j", "x"))
    postgres_cluster.set_lease(postgres_url, a.replica_id, -1)

    def interrupt(row: PhaseRow, seq: int):
        return EventRow(seq, 9, "status", b"interrupted"), {"status_reason": "gone", "end_time_ns": 9}

    swept = b.cluster.sweep_expired_owners(interrupt, outbox=lambda row, seq: [out("m-swept", row.job_id,
                                                                                   row.phase_id, seq)])
    assert [r.phase_id for r in swept] == ["x"]
    (d,) = b.list_webhook_deliveries(None, "j", "x", (), 10)
    assert (d.delivery_id, d.sequence) == ("m-swept", 1)
