"""Webhook subscriptions and the outbox in the store, on SQLite and PostgreSQL (``store``: conftest.py).

The outbox is written in the same transaction as the events that cause it; claims are leases that
one claimer holds at a time; one phase's deliveries to one subscription are claimed in order.
"""

from __future__ import annotations

import time

import pytest

from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.store.protocol import (
    AlreadyExistsError,
    EventRow,
    OutboxRow,
    PhaseRow,
    WebhookAttemptRow,
    WebhookRow,
)

S = PhaseStatus


def sub(sid: str = "wh1", *, url: str = "https://example.com/hook", source: str = "api", **kw) -> WebhookRow:
    values = dict(subscription_id=sid, project_id="", url=url, secret="whsec_" + "A" * 32, events=("phase.finished",),
                  statuses=(), cost_threshold_usd=None, format="standard", description="", source=source,
                  create_time_ns=time.time_ns())
    values.update(kw)
    return WebhookRow(**values)


def out(did: str, sid: str = "wh1", job: str = "j", phase: str = "a", seq: int = 1) -> OutboxRow:
    return OutboxRow(did, sid, "phase.finished", job, phase, seq, b'{"type":"phase.finished"}', time.time_ns())


def attempt(did: str, n: int = 1, status: int | None = 200, error: str = "") -> WebhookAttemptRow:
    return WebhookAttemptRow(did, n, time.time_ns(), status, 1_000_000, error, "me")


def running(store, job: str = "j", pid: str = "a") -> None:
    store.get_or_create_job(job, "p", 1)
    store.insert_phase(PhaseRow(job_id=job, phase_id=pid, ordinal=0, project_id="p", status=S.RUNNING,
                                create_time_ns=1))


def test_subscriptions_are_created_listed_and_deleted_and_deleting_cancels_pending_deliveries(store):
    store.create_webhook(sub("wh1"))
    store.create_webhook(sub("wh2", project_id="proj", statuses=("FAILED", "TIMED_OUT"), cost_threshold_usd=2.5))
    with pytest.raises(AlreadyExistsError):
        store.create_webhook(sub("wh1"))
    got = store.get_webhook("wh2")
    assert (got.project_id, got.statuses, got.cost_threshold_usd, got.secret) == (
        "proj", ("FAILED", "TIMED_OUT"), 2.5, "whsec_" + "A" * 32)
    assert [w.subscription_id for w in store.list_webhooks()] == ["wh1", "wh2"]
    assert [w.subscription_id for w in store.list_webhooks("proj")] == ["wh1", "wh2"]  # server-wide ones too
    assert [w.subscription_id for w in store.list_webhooks("other")] == ["wh1"]
    store.enqueue_webhooks([out("m1", "wh2"), out("m2", "wh1")])
    assert store.delete_webhook("wh2", 5) == 1
    assert store.delete_webhook("wh2", 5) is None
    states = {d.delivery_id: d.state for d in store.list_webhook_deliveries(None, None, None, (), 10)}
    assert states == {"m1": "CANCELLED", "m2": "PENDING"}


def test_outbox_rows_commit_with_their_events_or_not_at_all(store):
    running(store)
    store.append_events([("j", "a", [EventRow(1, 1, "k", b"e1")])], outbox=[out("m1")])
    assert [d.delivery_id for d in store.list_webhook_deliveries(None, "j", "a", ("PENDING",), 10)] == ["m1"]
    with pytest.raises(Exception):  # noqa: B017 - the duplicate sequence fails the transaction
        store.append_events([("j", "a", [EventRow(1, 1, "k", b"again")])], outbox=[out("m2")])
    assert [d.delivery_id for d in store.list_webhook_deliveries(None, None, None, (), 10)] == ["m1"]


def test_one_phases_deliveries_are_claimed_in_order_and_a_claim_is_held_until_its_lease_ends(store, opener):
    store.create_webhook(sub("wh1"))
    store.create_webhook(sub("wh2"))
    store.enqueue_webhooks([out("m1", seq=1), out("m2", seq=2), out("m3", "wh2", seq=1), out("m4", phase="b")])
    first = store.claim_webhook_deliveries("me", 10, 60)
    # m2 waits for m1 (same subscription and phase); the other subscription and phase do not.
    assert [d.delivery_id for d in first] == ["m1", "m3", "m4"]
    other = opener()  # another process (a replica) on the same database
    assert other.claim_webhook_deliveries("them", 10, 60) == []  # all held or waiting
    assert store.finish_webhook_attempt("me", attempt("m1"), "DELIVERED", None)
    assert [d.delivery_id for d in other.claim_webhook_deliveries("them", 10, 60)] == ["m2"]
    # A lost claim: the attempt is recorded, the delivery is not finished by the loser.
    assert not store.finish_webhook_attempt("me", attempt("m2"), "DELIVERED", None)
    assert other.finish_webhook_attempt("them", attempt("m2"), "DELIVERED", None)
    states = {d.delivery_id: (d.state, d.attempts) for d in store.list_webhook_deliveries(None, None, None, (), 10)}
    assert states["m1"] == ("DELIVERED", 1) and states["m2"] == ("DELIVERED", 1)
    assert len(store.webhook_attempts(["m2"])) == 2


def test_a_claim_whose_lease_ran_out_is_claimed_again(store):
    store.create_webhook(sub())
    store.enqueue_webhooks([out("m1")])
    assert [d.delivery_id for d in store.claim_webhook_deliveries("dead", 10, -1)] == ["m1"]  # lease already over
    again = store.claim_webhook_deliveries("me", 10, 60)
    assert [(d.delivery_id, d.attempts) for d in again] == [("m1", 0)]
    assert store.release_webhook_claims("me") == 1
    assert [d.delivery_id for d in store.claim_webhook_deliveries("me", 10, 60)] == ["m1"]


def test_a_failed_attempt_schedules_the_next_try_and_holds_back_the_phases_later_deliveries(store):
    store.create_webhook(sub())
    store.enqueue_webhooks([out("m1", seq=1), out("m2", seq=2)])
    assert store.next_webhook_due_s() <= 0
    (d,) = store.claim_webhook_deliveries("me", 10, 60)
    assert store.finish_webhook_attempt("me", attempt("m1", status=503, error="the receiver answered 503"), "PENDING",
                                        30.0)
    assert store.claim_webhook_deliveries("me", 10, 60) == []  # m1 not due, m2 waits for it
    assert 25 < store.next_webhook_due_s() <= 30
    m1 = store.list_webhook_deliveries(None, None, None, ("PENDING",), 10)[-1]
    assert (m1.delivery_id, m1.attempts, m1.last_status_code, m1.last_error) == ("m1", 1, 503,
                                                                                 "the receiver answered 503")
    (a,) = store.webhook_attempts(["m1"])
    assert (a.attempt, a.status_code, a.latency_ns, a.replica_id) == (1, 503, 1_000_000, "me")


def test_a_gone_receiver_disables_its_subscription_and_ends_its_pending_deliveries(store):
    store.create_webhook(sub("wh1"))
    store.create_webhook(sub("wh2"))
    store.enqueue_webhooks([out("m1", phase="a"), out("m2", phase="b"), out("m3", "wh2")])
    claimed = store.claim_webhook_deliveries("me", 1, 60)
    assert [d.delivery_id for d in claimed] == ["m1"]
    store.finish_webhook_attempt("me", attempt("m1", status=410), "DEAD", None,
                                 disable_reason="the receiver answered 410 Gone")
    wh1 = store.get_webhook("wh1")
    assert wh1.disabled_reason == "the receiver answered 410 Gone" and wh1.disabled_time_ns
    assert store.get_webhook("wh2").disabled_time_ns is None
    states = {d.delivery_id: d.state for d in store.list_webhook_deliveries(None, None, None, (), 10)}
    assert states == {"m1": "DEAD", "m2": "DEAD", "m3": "PENDING"}


def test_the_config_files_subscriptions_replace_the_stored_ones(store):
    store.create_webhook(sub("api-made"))
    store.replace_config_webhooks([sub("a", source="config"), sub("b", source="config")])
    store.enqueue_webhooks([out("m1", "b")])
    claimed = store.claim_webhook_deliveries("me", 10, 60)
    store.finish_webhook_attempt("me", attempt(claimed[0].delivery_id, status=410), "DEAD", None,
                                 disable_reason="gone")
    store.enqueue_webhooks([out("m2", "a")])
    # b kept (still disabled: same URL and secret), a's URL changed (enabled again), c added, api-made untouched.
    store.replace_config_webhooks([sub("a", source="config", url="https://example.org/new", description="d"),
                                   sub("b", source="config"), sub("c", source="config")])
    assert store.get_webhook("b").disabled_reason == "gone"
    assert store.get_webhook("a").url == "https://example.org/new" and store.get_webhook("a").description == "d"
    store.replace_config_webhooks([sub("c", source="config")])
    assert [w.subscription_id for w in store.list_webhooks()] == ["api-made", "c"]
    assert {d.delivery_id: d.state for d in store.list_webhook_deliveries(None, None, None, (), 10)}["m2"] == \
        "CANCELLED"


def test_deliveries_are_listed_newest_first_by_page_and_deleted_with_their_job(store):
    running(store, "j", "a")
    running(store, "k", "a")
    store.create_webhook(sub())
    store.enqueue_webhooks([out(f"m{i}", job="j" if i % 2 else "k", seq=i) for i in range(1, 7)])
    page = store.list_webhook_deliveries("wh1", None, None, (), 2)
    assert [d.delivery_id for d in page] == ["m6", "m5"]
    page = store.list_webhook_deliveries("wh1", None, None, (), 10, before=page[-1].order)
    assert [d.delivery_id for d in page] == ["m4", "m3", "m2", "m1"]
    assert [d.delivery_id for d in store.list_webhook_deliveries(None, "j", "a", ("PENDING",), 10)] == ["m5", "m3", "m1"]
    (claimed, *_) = store.claim_webhook_deliveries("me", 1, 60)
    store.finish_webhook_attempt("me", attempt(claimed.delivery_id), "DELIVERED", None)
    store.delete_jobs(["j"])
    assert [d.delivery_id for d in store.list_webhook_deliveries(None, None, None, (), 10)] == ["m6", "m4", "m2"]
    assert store.webhook_attempts(["m1"]) == []
