"""The delivery loop against a real receiver: at least once, in order, retried, dead-lettered, disabled by 410.

The store is a real SQLite file (a "restart" opens it again); notifications are written as a run
writes them, with the events that cause them (``append_events(..., outbox=...)``).
"""

from __future__ import annotations

import asyncio
import time

import pytest
from support.webhook_receiver import Response, WebhookReceiver

from helix_runner.domain.addresses import OperatorExceptions
from helix_runner.domain.events import ControlEvent, ControlEventKind, Event, PhaseStatusChanged
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.webhooks import RetrySchedule, WebhookEvent, WebhookSpec
from helix_runner.phases.webhook_dispatcher import DispatchSettings, WebhookDispatcher
from helix_runner.phases.webhooks import Webhooks
from helix_runner.store.protocol import EventRow, PhaseRow
from helix_runner.store.sqlite_store import SqliteStore
from helix_runner.webhook_http.sender import SenderSettings, WebhookSender
from helix_runner.webhook_http.signing import new_secret

SECRET = new_secret()
FAST = RetrySchedule(max_attempts=4, initial_backoff_s=0.05, multiplier=2, max_backoff_s=0.2)


@pytest.fixture
def receiver():
    r = WebhookReceiver(SECRET).start()
    yield r
    r.stop()


class Harness:
    """A store file, its subscriptions and a dispatcher; ``restart`` closes both and opens them again."""

    def __init__(self, path, receiver: WebhookReceiver, schedule: RetrySchedule = FAST):
        self.path, self.receiver, self.schedule = path, receiver, schedule
        self.store: SqliteStore | None = None
        self.dispatcher: WebhookDispatcher | None = None

    def open(self) -> Harness:
        self.store = SqliteStore(self.path)
        allow = OperatorExceptions.parse([self.receiver.allow])
        self.webhooks = Webhooks(self.store, exceptions=allow, dashboard_url="https://runner.example.com")
        sender = WebhookSender(SenderSettings(timeout_s=2.0, exceptions=allow))
        self.dispatcher = WebhookDispatcher(self.store, self.webhooks, sender,
                                            DispatchSettings(schedule=self.schedule, lease_s=10, poll_s=0.2)).start()
        return self

    async def close(self) -> None:
        await self.dispatcher.stop(0.5)
        self.store.close()

    async def restart(self) -> None:
        await self.close()
        self.open()

    def subscribe(self, *events: WebhookEvent) -> str:
        row, _ = self.webhooks.create(WebhookSpec(url=self.receiver.url, events=events or (WebhookEvent.PHASE_FINISHED,),
                                                  secret=SECRET))
        return row.subscription_id

    def run_phase(self, job: str, phase: str, events: list[Event]) -> None:
        """What a run writes: the events and their deliveries, in one transaction per batch."""
        if self.store.get_job(job) is None:
            self.store.get_or_create_job(job, "p", 1)
        self.store.insert_phase(PhaseRow(job_id=job, phase_id=phase, ordinal=0, project_id="p",
                                         status=PhaseStatus.RUNNING, create_time_ns=1))
        notifier = self.webhooks.notifier(job, phase, "p", lambda: False)
        for e in events:
            self.store.append_events([(job, phase, [EventRow(e.sequence, e.receive_time_ns, "k", b"e")])],
                                     outbox=notifier.outbox([e]))
        self.dispatcher.wake()

    def deliveries(self, state: str | None = None):
        return self.store.list_webhook_deliveries(None, None, None, (state,) if state else (), 100)


def held_then_failed(first_seq: int = 1) -> list[Event]:
    now = time.time_ns()
    return [
        Event(first_seq, now, "", "", "", "", ControlEvent(ControlEventKind.BREAKPOINT_HIT, "t1", "Bash", "bp")),
        Event(first_seq + 1, now, "", "", "", "", ControlEvent(ControlEventKind.BREAKPOINT_HIT, "t2", "Bash", "bp")),
        Event(first_seq + 2, now, "", "", "", "", PhaseStatusChanged(PhaseStatus.RUNNING, PhaseStatus.FAILED, "x")),
    ]


async def until(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "not within the time bound"
        await asyncio.sleep(0.02)


async def test_a_delivery_arrives_signed_with_its_phases_sequence(tmp_path, receiver):
    h = Harness(tmp_path / "db", receiver).open()
    try:
        h.subscribe(WebhookEvent.PHASE_FINISHED)
        h.run_phase("j", "p", held_then_failed())
        (got,) = await receiver.arrived(1)
        assert got.verified
        body = got.json
        assert (body["type"], body["data"]["sequence"], body["data"]["status"]) == ("phase.finished", 3, "FAILED")
        assert body["data"]["url"] == "https://runner.example.com/#/jobs/j/phases/p"
        await until(lambda: [d.state for d in h.deliveries()] == ["DELIVERED"])
        (attempt,) = h.store.webhook_attempts([got.webhook_id])
        assert attempt.status_code == 200 and attempt.latency_ns > 0
    finally:
        await h.close()


async def test_a_receiver_that_is_down_gets_everything_in_order_once_it_is_up(tmp_path, receiver):
    receiver.down()  # connections refused
    h = Harness(tmp_path / "db", receiver, RetrySchedule(max_attempts=50, initial_backoff_s=0.05, multiplier=1.5,
                                                          max_backoff_s=0.3)).open()
    try:
        h.subscribe(WebhookEvent.PHASE_AWAITING_APPROVAL, WebhookEvent.PHASE_FINISHED)
        h.run_phase("j", "p", held_then_failed())
        await until(lambda: h.deliveries()[-1].attempts >= 2)  # tried, failed, tried again
        assert [d.state for d in h.deliveries()] == ["PENDING"] * 3
        assert all(d.attempts == 0 for d in h.deliveries()[:2])  # the later ones wait for the first
        receiver.start()
        got = await receiver.arrived(3)
        assert [(r.json["type"], r.json["data"]["sequence"]) for r in got] == [
            ("phase.awaiting_approval", 1), ("phase.awaiting_approval", 2), ("phase.finished", 3)]
        assert all(r.verified for r in got)
        first = h.store.webhook_attempts([got[0].webhook_id])
        assert first[0].status_code is None and "ConnectError" in first[0].error and first[-1].status_code == 200
    finally:
        await h.close()


async def test_a_server_restart_mid_retry_loses_nothing(tmp_path, receiver):
    receiver.respond(Response(status=503))
    h = Harness(tmp_path / "db", receiver, RetrySchedule(max_attempts=5, initial_backoff_s=1.0, multiplier=1,
                                                          max_backoff_s=1.0)).open()
    try:
        h.subscribe()
        h.run_phase("j", "p", held_then_failed())
        await receiver.arrived(1)
        await until(lambda: h.deliveries()[0].attempts == 1)
        await h.restart()  # the first try failed; the retry is due after the restart
        got = await receiver.arrived(2)
        assert got[0].webhook_id == got[1].webhook_id and got[1].answered == 200 and got[1].verified
        await until(lambda: [(d.state, d.attempts) for d in h.deliveries()] == [("DELIVERED", 2)])
    finally:
        await h.close()


async def test_retry_after_is_honoured(tmp_path, receiver):
    receiver.respond(Response(status=429, retry_after="1"))
    h = Harness(tmp_path / "db", receiver).open()
    try:
        h.subscribe()
        h.run_phase("j", "p", held_then_failed())
        got = await receiver.arrived(2)
        assert got[1].time_ns - got[0].time_ns >= 0.95e9  # the backoff alone would be 50-100 ms
    finally:
        await h.close()


async def test_a_gone_receiver_disables_the_subscription(tmp_path, receiver):
    receiver.respond(Response(status=410))
    h = Harness(tmp_path / "db", receiver).open()
    try:
        sid = h.subscribe(WebhookEvent.PHASE_AWAITING_APPROVAL, WebhookEvent.PHASE_FINISHED)
        h.run_phase("j", "p", held_then_failed())
        await until(lambda: h.store.get_webhook(sid).disabled_time_ns is not None)
        assert h.store.get_webhook(sid).disabled_reason == "the receiver answered 410 Gone"
        await until(lambda: [d.state for d in h.deliveries()] == ["DEAD"] * 3)
        h.run_phase("j", "q", held_then_failed())  # a disabled subscription is sent nothing more
        await asyncio.sleep(0.3)
        assert len(receiver.snapshot()) == 1 and len(h.deliveries()) == 3
    finally:
        await h.close()


async def test_a_delivery_that_keeps_failing_is_dead_lettered_and_lets_the_next_go(tmp_path, receiver):
    receiver.respond(*[Response(status=500)] * 4)
    h = Harness(tmp_path / "db", receiver).open()
    try:
        h.subscribe(WebhookEvent.PHASE_AWAITING_APPROVAL)
        h.run_phase("j", "p", held_then_failed())
        got = await receiver.arrived(5)  # four tries of the first, then the second
        assert len({r.webhook_id for r in got[:4]}) == 1 and got[4].webhook_id != got[0].webhook_id
        await until(lambda: [d.state for d in reversed(h.deliveries())] == ["DEAD", "DELIVERED"])
        dead = h.deliveries("DEAD")[0]
        assert (dead.attempts, dead.last_status_code) == (4, 500)
    finally:
        await h.close()


async def test_a_private_address_is_never_reached(tmp_path, receiver):
    h = Harness(tmp_path / "db", receiver).open()
    try:
        h.subscribe()
        h.webhooks.exceptions = OperatorExceptions()  # the operator's allowance was withdrawn after creating
        h.dispatcher.sender = WebhookSender(SenderSettings(timeout_s=2.0))
        h.run_phase("j", "p", held_then_failed())
        await until(lambda: h.deliveries()[0].attempts >= 1)
        assert receiver.snapshot() == []
        assert "destination refused: 127.0.0.1 is a loopback address" in h.deliveries()[0].last_error
    finally:
        await h.close()
