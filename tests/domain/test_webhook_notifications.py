"""Which phase events become which webhook notifications, for whom, in what body; the retry schedule."""

from __future__ import annotations

import random

import orjson
import pytest

from helix_runner.domain.cost_ledger import PhaseCostSnapshot
from helix_runner.domain.events import (
    AttemptEndKind,
    ControlEvent,
    ControlEventKind,
    CostUpdate,
    Event,
    PhaseStatusChanged,
    TokenUsage,
)
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.webhooks import (
    AttemptOutcome,
    NotificationMapper,
    RetrySchedule,
    Subscription,
    WebhookEvent,
    WebhookFormat,
    check_subscription,
    outcome_of,
    parse_retry_after,
    phase_link,
    queue_full,
    render_body,
)

S = PhaseStatus
E = WebhookEvent


def ev(seq: int, payload) -> Event:
    return Event(seq, 1_700_000_000_000_000_000 + seq * 1_001_000, "s", "", "", "", payload)


def cost(usd: float, reported: bool = False) -> CostUpdate:
    return CostUpdate(PhaseCostSnapshot(usd if reported else None, usd, None, not reported, TokenUsage(), (), ()))


def breakpoint_hit(seq: int) -> Event:
    return ev(seq, ControlEvent(ControlEventKind.BREAKPOINT_HIT, "toolu_1", "Bash", "bp-1",
                                input_json='{"command":"rm -rf build"}'))


def a_run() -> list[Event]:
    """A phase that costs $0.40, is held at a breakpoint, retries once, costs $1.20, then fails."""
    return [
        ev(1, PhaseStatusChanged(S.PENDING, S.RUNNING, "starting")),
        ev(2, cost(0.4)),
        ev(3, PhaseStatusChanged(S.RUNNING, S.AWAITING_APPROVAL, "held")),
        breakpoint_hit(4),
        ev(5, ControlEvent(ControlEventKind.RETRY_SCHEDULED, message="API overloaded (529)", attempt=1, max_attempts=3,
                           end_kind=AttemptEndKind.API_OVERLOADED, retry_delay_ns=2_000_000_000)),
        ev(6, cost(1.2, reported=True)),
        ev(7, PhaseStatusChanged(S.RUNNING, S.FAILED, "the CLI exited with 1")),
    ]


def test_a_runs_events_map_to_its_notifications_in_order_and_the_same_every_time():
    events = a_run()
    first = NotificationMapper("j", "p", "proj").map(events[:4]) + NotificationMapper("j", "p", "proj").map([])
    mapper = NotificationMapper("j", "p", "proj")
    notes = mapper.map(events[:4]) + mapper.map(events[4:], job_done=lambda: True)
    assert [(n.event, n.sequence) for n in notes] == [
        (E.PHASE_COST_THRESHOLD, 2), (E.PHASE_AWAITING_APPROVAL, 4), (E.PHASE_RETRY_SCHEDULED, 5),
        (E.PHASE_COST_THRESHOLD, 6), (E.PHASE_FINISHED, 7), (E.JOB_FINISHED, 7)]
    assert notes[:2] == first[:2]  # deterministic: the same events give the same notifications
    held = notes[1]
    assert (held.status, held.cost_usd, held.details["tool_name"], held.details["breakpoint_id"]) == (
        S.AWAITING_APPROVAL, 0.4, "Bash", "bp-1")
    assert notes[2].details == {"attempt": 1, "max_attempts": 3, "end_kind": "API_OVERLOADED", "retry_delay_ms": 2000}
    assert (notes[3].previous_cost_usd, notes[3].cost_usd) == (0.4, 1.2)
    assert (notes[4].status, notes[4].reason, notes[4].cost_usd) == (S.FAILED, "the CLI exited with 1", 1.2)


def test_job_finished_only_when_no_other_phase_of_the_job_is_active():
    asked = []
    notes = NotificationMapper("j", "p", "proj").map(a_run(), job_done=lambda: asked.append(1) or False)
    assert E.JOB_FINISHED not in {n.event for n in notes} and asked == [1]  # asked once, at the final status


def test_a_subscription_takes_what_it_asked_for_in_its_project():
    notes = NotificationMapper("j", "p", "proj").map(a_run(), job_done=lambda: True)
    every = Subscription("all", events=frozenset(E))
    assert [n.event for n in notes if every.wants(n)] == [
        E.PHASE_AWAITING_APPROVAL, E.PHASE_RETRY_SCHEDULED, E.PHASE_FINISHED, E.JOB_FINISHED]  # no threshold: no cost
    assert not any(Subscription("o", "other-project", frozenset(E)).wants(n) for n in notes)
    only_success = Subscription("s", "proj", frozenset({E.PHASE_FINISHED}), frozenset({S.SUCCEEDED}))
    assert not any(only_success.wants(n) for n in notes)
    failures = Subscription("f", "", frozenset({E.PHASE_FINISHED}), frozenset({S.FAILED, S.TIMED_OUT}))
    assert [n.sequence for n in notes if failures.wants(n)] == [7]


@pytest.mark.parametrize(("threshold", "fires_at"), [(0.1, [2]), (0.4, [2]), (1.0, [6]), (1.2, [6]), (5.0, [])])
def test_a_cost_threshold_fires_once_when_the_phase_crosses_it(threshold, fires_at):
    events = [*a_run()[:6], ev(8, cost(1.1)), ev(9, cost(1.3)), ev(10, cost(1.3))]  # a lower figure, then higher again
    notes = NotificationMapper("j", "p", "proj").map(events)
    sub = Subscription("c", events=frozenset({E.PHASE_COST_THRESHOLD}), cost_threshold_usd=threshold)
    assert [n.sequence for n in notes if sub.wants(n)] == fires_at


def test_a_phase_recovered_after_a_crash_keeps_the_cost_it_had():
    notes = NotificationMapper("j", "p", "proj", cost_usd=2.0).map([ev(9, cost(2.5))])
    sub = Subscription("c", events=frozenset({E.PHASE_COST_THRESHOLD}), cost_threshold_usd=1.0)
    assert not any(sub.wants(n) for n in notes)  # it crossed $1 before the crash, not now


def test_subscription_filters_are_checked():
    assert check_subscription([E.PHASE_FINISHED], [S.FAILED], None, "proj", "") == []
    assert check_subscription([], [], None, "", "")[0][0] == "events"
    assert check_subscription([E.PHASE_FINISHED], [S.RUNNING], None, "", "")[0] == (
        "statuses", "RUNNING is not a final status (the filter of phase.finished and job.finished)")
    assert check_subscription([E.PHASE_AWAITING_APPROVAL], [S.FAILED], None, "", "")[0][0] == "statuses"
    assert check_subscription([E.PHASE_COST_THRESHOLD], [], None, "", "")[0][0] == "cost_threshold_usd"
    assert check_subscription([E.PHASE_COST_THRESHOLD], [], float("nan"), "", "")[0][0] == "cost_threshold_usd"
    assert check_subscription([E.PHASE_FINISHED], [], 2.0, "", "")[0][0] == "cost_threshold_usd"
    assert check_subscription([E.PHASE_FINISHED], [], None, "bad project!", "")[0][0] == "project_id"
    assert check_subscription([E.PHASE_FINISHED], [], None, "", "x" * 257)[0][0] == "description"


def test_the_body_is_the_standard_webhooks_shape_with_a_link_to_the_phase():
    mapper = NotificationMapper("job 1", "p/2", "proj")
    held = mapper.map(a_run()[:4])[1]
    body = orjson.loads(render_body(held, WebhookFormat.STANDARD, "https://runner.example.com/"))
    assert body == {
        "type": "phase.awaiting_approval",
        "timestamp": "2023-11-14T22:13:20.004004Z",
        "data": {"job_id": "job 1", "phase_id": "p/2", "project_id": "proj", "sequence": 4,
                 "status": "AWAITING_APPROVAL", "reason": "tool call Bash (toolu_1) held: breakpoint bp-1",
                 "cost_usd": 0.4, "url": "https://runner.example.com/#/jobs/job%201/phases/p%2F2",
                 "tool_name": "Bash", "tool_use_id": "toolu_1", "breakpoint_id": "bp-1",
                 "input_json": '{"command":"rm -rf build"}'},
    }
    assert phase_link("", "j", "p") == ""
    slack = orjson.loads(render_body(held, WebhookFormat.SLACK, "https://runner.example.com"))
    assert slack == {"text": "Helix Runner: phase <https://runner.example.com/#/jobs/job%201/phases/p%2F2|job 1/p/2> "
                             "needs approval: Bash call held at a breakpoint — tool call Bash (toolu_1) held: "
                             "breakpoint bp-1"}


def test_a_queue_full_refusal_is_a_notification_without_an_event():
    note = queue_full("j", "p", "proj", 1_700_000_000_000_000_000, "the queue is full",
                      {"scope": "server", "limit": "10"})
    body = orjson.loads(render_body(note, WebhookFormat.STANDARD, ""))
    assert body["type"] == "queue.full" and body["data"]["sequence"] == 0 and body["data"]["scope"] == "server"
    assert Subscription("q", events=frozenset({E.QUEUE_FULL})).wants(note)


def test_retries_back_off_with_jitter_honour_retry_after_and_end():
    schedule = RetrySchedule(max_attempts=4, initial_backoff_s=5, multiplier=3, max_backoff_s=30)
    low, high = (lambda: 0.0), (lambda: 1.0)
    assert [schedule.delay_s(n, None, low) for n in (1, 2, 3)] == [2.5, 7.5, 15.0]
    assert [schedule.delay_s(n, None, high) for n in (1, 2, 3)] == [5.0, 15.0, 30.0]
    rng = random.Random(7).random
    assert all(2.5 <= schedule.delay_s(1, None, rng) <= 5 for _ in range(100))
    assert schedule.delay_s(1, 120.0, low) == 120.0  # Retry-After: never sooner
    assert schedule.delay_s(1, 10 * 86400.0, low) == 6 * 3600.0  # ... but not parked for days
    assert schedule.delay_s(4, None, low) is None  # the fourth try failed: dead letter


def test_retry_after_is_seconds_or_an_http_date():
    assert parse_retry_after("120", 0) == 120.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 1445412470.0) == 10.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 1445412490.0) == 0.0
    assert parse_retry_after("soon", 0) is None and parse_retry_after(None, 0) is None


def test_what_an_answer_means():
    assert [outcome_of(s) for s in (200, 204, 299)] == [AttemptOutcome.DELIVERED] * 3
    assert outcome_of(410) is AttemptOutcome.GONE
    assert [outcome_of(s) for s in (None, 301, 400, 404, 429, 500, 503)] == [AttemptOutcome.FAILED] * 7
