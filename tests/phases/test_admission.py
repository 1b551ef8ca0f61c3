"""The admission queue: limits are never exceeded, projects take turns, holds and backoffs are honoured.

Every test but the last runs on an injected clock, so nothing depends on timing.
"""

from __future__ import annotations

import asyncio
import heapq
import random
import time

import pytest

from helix_runner.domain.events import QueueReason
from helix_runner.errors import ErrorKind, RunnerError
from helix_runner.phases.admission import (
    LOCAL_GRANT,
    AdmissionClosedError,
    AdmissionLimits,
    AdmissionQueue,
    AsyncAdmission,
    Granted,
    GrantRefused,
    LocalGrant,
    Ticket,
    TicketState,
)


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def make(clock: FakeClock | None = None, grant=LOCAL_GRANT, **limits: int) -> AdmissionQueue:
    return AdmissionQueue(
        AdmissionLimits(**limits), grant=grant, clock=clock or FakeClock(), wall_clock_ns=lambda: 5 * 10**18
    )


class RecordingGrant(LocalGrant):
    """A grant that sees every offer and lets only some projects start: the shape of the cluster's
    ledger (phases/cluster_admission.LedgerGrant) without a database."""

    def __init__(self, allowed: set[str] | None = None, refuse: bool = False):
        self.allowed, self.refuse = allowed, refuse
        self.offers: list[tuple[list, int, dict | None]] = []
        self.entered_keys: list = []
        self.left_keys: list = []
        self.held: set = set()

    @property
    def pending(self) -> bool:
        return bool(self.held)

    def entered(self, ticket: Ticket) -> None:
        if self.refuse:
            raise GrantRefused("cluster", 7, 7, "the cluster's admission queue is full")
        self.entered_keys.append(ticket.key)

    def left(self, ticket: Ticket) -> None:
        self.left_keys.append(ticket.key)

    def decide(self, candidates, room, project_room):
        self.offers.append(([t.key for t in candidates], room, project_room))
        granted = [t for t in candidates if self.allowed is None or t.project in self.allowed][:room]
        self.held = {t.key for t in candidates if t not in granted}
        return Granted(granted)

    def why(self, key):
        return (QueueReason.SERVER_LIMIT, "held back by the grant") if key in self.held else None


def run_all(queue: AdmissionQueue) -> list:
    """Admit, start and finish one entry at a time; the keys in admission order."""
    order = []
    while admitted := queue.pump():
        for ticket in admitted:
            order.append(ticket.key)
            queue.started(ticket)
            queue.release(ticket)
    return order


def test_seventy_entries_never_exceed_four_running_and_two_starting():
    clock = FakeClock()
    queue = make(clock, max_running=4, max_starting=2, max_running_per_project=3)
    rng = random.Random(70)
    projects = ["alpha", "beta", "gamma"]
    for n in range(70):
        queue.submit(f"p{n}", projects[n % 3] if n < 45 else "alpha", credential="key")
    events: list[tuple[float, int, str, Ticket]] = []  # (time, tie-break, what, ticket)
    tie = 0
    finished = []
    peaks = {"running": 0, "starting": 0}

    def check() -> None:
        assert queue.running <= 4 and queue.starting <= 2
        assert all(queue.running_in(p) <= 3 for p in projects)
        peaks["running"] = max(peaks["running"], queue.running)
        peaks["starting"] = max(peaks["starting"], queue.starting)

    while True:
        for ticket in queue.pump():
            check()
            start_s, run_s = rng.uniform(0.1, 2.0), rng.uniform(0.5, 10.0)
            heapq.heappush(events, (clock.now + start_s, tie, "started", ticket))
            heapq.heappush(events, (clock.now + start_s + run_s, tie + 1, "ended", ticket))
            tie += 2
        # Work-conserving: whatever still waits, waits because a limit is reached.
        if queue.queued:
            at_server_limits = queue.running == 4 or queue.starting == 2
            waiting_projects = {t.project for t in queue.waiting()}
            assert at_server_limits or all(queue.running_in(p) >= 3 for p in waiting_projects)
        if not events:
            break
        clock.now, _, what, ticket = heapq.heappop(events)
        if what == "started":
            queue.started(ticket)
        else:
            queue.release(ticket)
            finished.append(ticket.key)
        check()

    assert sorted(finished) == sorted(f"p{n}" for n in range(70))
    assert peaks == {"running": 4, "starting": 2}
    assert (queue.running, queue.starting, queue.queued) == (0, 0, 0)


def test_two_projects_take_turns():
    queue = make(max_running=1, max_starting=1)
    for n in range(6):
        queue.submit(f"a{n}", "A")
    for n in range(3):
        queue.submit(f"b{n}", "B")
    assert run_all(queue) == ["a0", "b0", "a1", "b1", "a2", "b2", "a3", "a4", "a5"]


def test_a_project_arriving_late_is_served_next_not_last():
    queue = make(max_running=1, max_starting=1)
    for n in range(4):
        queue.submit(f"a{n}", "A")
    first = queue.pump()
    assert [t.key for t in first] == ["a0"]
    queue.submit("b0", "B")
    queue.release(first[0])
    assert [t.key for t in queue.pump()] == ["b0"]


def test_first_come_first_served_within_a_project_and_retries_first():
    queue = make(max_running=1, max_starting=1)
    queue.submit("x", "A")
    (blocker,) = queue.pump()
    queue.submit("a1", "A")
    queue.submit("a2", "A")
    queue.submit("r", "A", attempt=2, retry=True)
    queue.release(blocker)
    assert run_all(queue) == ["r", "a1", "a2"]


def test_project_limit_lets_other_projects_through():
    queue = make(max_running=4, max_starting=4, max_running_per_project=2)
    for n in range(4):
        queue.submit(f"a{n}", "A")
    queue.submit("b0", "B")
    assert sorted(t.key for t in queue.pump()) == ["a0", "a1", "b0"]
    status = queue.status("a2")
    assert (
        status.reason is QueueReason.PROJECT_LIMIT
        and status.detail == "phases running in project 'A': 2; its limit is 2"
    )


def test_cancel_while_queued():
    queue = make(max_running=1, max_starting=1)
    running = queue.submit("first", "A")
    queue.submit("second", "A")
    queue.submit("third", "B")
    queue.pump()
    assert running.state is TicketState.STARTING
    assert (queue.status("third").position, queue.status("second").position) == (1, 2)  # A just had its turn
    assert queue.cancel("second")
    assert queue.get("second") is None and queue.queued == 1 and queue.status("second") is None
    assert queue.status("third").position == 1
    assert not queue.cancel("second") and not queue.cancel("first") and not queue.cancel("nobody")
    queue.release(running)
    assert run_all(queue) == ["third"]
    # A cancelled key can be submitted again (the phase's next attempt reuses it).
    queue.submit("second", "A")
    assert queue.queued == 1


def test_release_of_a_queued_ticket_cancels_it_and_double_release_is_harmless():
    queue = make(max_running=1, max_starting=1)
    held = queue.submit("held", "A")
    (admitted,) = queue.pump()
    waiting = queue.submit("waiting", "A")
    queue.release(waiting)
    assert waiting.state is TicketState.CANCELLED and queue.queued == 0
    queue.release(admitted)
    queue.release(admitted)
    assert (queue.running, queue.starting, held.state) == (0, 0, TicketState.DONE)


def test_only_a_full_queue_refuses_and_it_says_when_to_come_back():
    clock = FakeClock()
    queue = make(clock, max_running=1, max_starting=1, max_queued=3)
    queue.submit("run", "A")
    queue.pump()
    for n in range(3):
        queue.submit(f"q{n}", "A")
    with pytest.raises(RunnerError) as caught:
        queue.submit("one-too-many", "B")
    error = caught.value
    assert (error.kind, error.reason) == (ErrorKind.RESOURCE_EXHAUSTED, "QUEUE_FULL")
    assert error.metadata == {"limit": "3", "scope": "server", "retry_after_ms": "5000"}
    assert error.retry_after_s == 5.0 and "(phases waiting: 3; the limit is 3)" in error.message
    # A retry of an admitted phase is never refused.
    queue.submit("retry", "A", attempt=2, retry=True)
    assert queue.queued == 4


def test_the_retry_hint_follows_how_fast_the_queue_moves():
    clock = FakeClock()
    queue = make(clock, max_running=1, max_starting=1, max_queued=2)
    current = [queue.submit("first", "A")]
    queue.pump()
    for n in range(12):  # one admission every 2 s
        queue.submit(f"q{n}", "A")
        clock.now += 2.0
        queue.release(current.pop())
        current.extend(queue.pump())
    assert queue.retry_hint_s() == pytest.approx(2.0)
    slow = make(FakeClock(), max_running=1)
    slow._admit_interval = 3600.0
    assert slow.retry_hint_s() == 60.0  # bounded


def test_a_projects_share_of_the_queue():
    queue = make(max_running=1, max_starting=1, max_queued=10, max_queued_per_project=2)
    queue.submit("run", "A")
    queue.pump()
    queue.submit("a1", "A")
    queue.submit("a2", "A")
    with pytest.raises(RunnerError) as caught:
        queue.submit("a3", "A")
    assert (
        caught.value.metadata["scope"] == "project"
        and "project 'A' has its queue full" in caught.value.message
    )
    queue.submit("b1", "B")  # other projects still get in


def test_rate_limit_hold_and_release():
    clock = FakeClock()
    queue = make(clock, max_running=4, max_starting=4)
    queue.submit("a", "A", credential="key-1")
    queue.submit("b", "B", credential="key-2")
    queue.hold("key-1", clock.now + 30, "HTTP 429 after the CLI's retries")
    assert [t.key for t in queue.pump()] == ["b"]
    status = queue.status("a")
    assert (status.reason, status.position, status.not_before) == (
        QueueReason.RATE_LIMITED,
        0,
        clock.now + 30,
    )
    assert (
        status.detail
        == "new starts on its API credential are held for 30 s: HTTP 429 after the CLI's retries"
    )
    assert queue.next_wakeup() == clock.now + 30
    queue.hold("key-1", clock.now + 10, "a shorter hold")  # does not shorten the first
    clock.now += 29.9
    assert queue.pump() == []
    clock.now += 0.1
    assert [t.key for t in queue.pump()] == ["a"]
    assert queue.next_wakeup() is None and queue.held_until("key-1") is None


@pytest.mark.parametrize("grant", [LOCAL_GRANT, RecordingGrant()], ids=["local", "a grant that is asked"])
def test_a_backoff_ending_between_pump_and_next_wakeup_still_wakes_the_queue(grant):
    # AsyncAdmission.kick pumps, reports changes, then arms its timer from next_wakeup, each reading
    # the clock. A retry's backoff that ended in between left no timer and no admission: the phase
    # waited QUEUED until something else changed (a RunPhase hung until its deadline, ~1 run in 60).
    # One pump on one clock reading serves every grant (the cluster's too), so the fix holds for all.
    clock = FakeClock()
    queue = make(clock, grant, max_running=4, max_starting=4)
    queue.submit("r", "A", attempt=2, not_before=clock.now + 0.05, retry=True)
    clock.now += 0.049
    assert queue.pump() == []  # not yet
    clock.now += 0.002  # the backoff ends before the timer is armed
    wake = queue.next_wakeup()
    assert wake is not None and wake <= clock.now  # so the caller pumps again at once
    assert [t.key for t in queue.pump()] == ["r"]
    assert queue.next_wakeup() is None
    # An ended backoff that a pump saw pass is no wake-up, also when a limit keeps the entry waiting.
    full = make(clock, max_running=1, max_starting=1)
    full.submit("x", "A")
    full.pump()
    full.submit("y", "A", attempt=2, not_before=clock.now + 0.05, retry=True)
    clock.now += 0.06
    assert full.pump() == [] and full.next_wakeup() is None


def test_a_hold_can_be_lifted_early():
    clock = FakeClock()
    queue = make(clock)
    queue.submit("a", "A", credential="k")
    queue.hold("k", clock.now + 300, "rate_limit_event rejected until its reset")
    assert queue.pump() == [] and queue.held_until("k") == clock.now + 300
    queue.release_hold("k")
    assert [t.key for t in queue.pump()] == ["a"]


def test_a_retry_waits_out_its_backoff_then_goes_first():
    clock = FakeClock()
    queue = make(clock, max_running=1, max_starting=1)
    queue.submit("retry", "A", attempt=2, retry=True, not_before=clock.now + 4)
    queue.submit("fresh", "A")
    status = queue.status("retry")
    assert (status.reason, status.position, status.attempt) == (QueueReason.RETRY_BACKOFF, 0, 2)
    assert status.detail == "attempt 2 waits out its backoff (4.0 s left)"
    (fresh,) = queue.pump()  # the backoff leaves the slot to others meanwhile
    assert fresh.key == "fresh"
    clock.now += 4
    assert queue.pump() == []  # the slot is taken
    queue.release(fresh)
    assert [t.key for t in queue.pump()] == ["retry"]


def test_reasons_for_waiting():
    queue = make(max_running=3, max_starting=1)
    for key in ("a", "b", "c", "d"):
        queue.submit(key, "A")
    (a,) = queue.pump()
    status = queue.status("b")
    assert (status.reason, status.detail) == (
        QueueReason.START_LIMIT,
        "phases starting: 1; at most 1 start at once",
    )
    assert (status.position, status.queued_count) == (1, 3)
    queue.started(a)
    queue.started(queue.pump()[0])
    queue.started(queue.pump()[0])
    status = queue.status("d")
    assert (status.reason, status.detail) == (
        QueueReason.SERVER_LIMIT,
        "phases running: 3; the server's limit is 3",
    )
    assert queue.status("a") is None and queue.status("nobody") is None


def test_changes_report_each_new_reason_once():
    clock = FakeClock()
    queue = make(clock, max_running=2, max_starting=1)
    queue.submit("run", "A", credential="k")
    queue.pump()  # starting: the start cap is what the others wait for
    queue.submit("w1", "A", credential="k")
    queue.submit("w2", "B", credential="k")
    first = {t.key: s.reason for t, s in queue.changes()}
    assert first == {"w1": QueueReason.START_LIMIT, "w2": QueueReason.START_LIMIT}
    assert queue.changes() == []
    queue.submit("w3", "A", credential="other")  # w1/w2 positions move: not a change for them
    assert [t.key for t, _ in queue.changes()] == ["w3"]
    queue.hold("k", clock.now + 60, "HTTP 429")
    held = {t.key: (s.reason, s.not_before) for t, s in queue.changes()}
    assert held == {"w1": (QueueReason.RATE_LIMITED, 1060.0), "w2": (QueueReason.RATE_LIMITED, 1060.0)}
    clock.now += 10  # the detail's "held for 50 s" moves; that alone is not a change
    assert queue.changes() == []
    queue.hold("k", clock.now + 120, "HTTP 429 again")  # a longer hold is
    assert len(queue.changes()) == 2


def test_queue_state_uses_wall_clock_times():
    clock = FakeClock(100.0)
    queue = AdmissionQueue(
        AdmissionLimits(max_running=1), clock=clock, wall_clock_ns=lambda: 1_800_000_000 * 10**9
    )
    queue.submit("run", "A")
    queue.pump()
    queue.submit("r", "A", attempt=3, retry=True, not_before=112.5)
    clock.now = 102.0
    state = queue.queue_state(queue.status("r"))
    assert state.reason is QueueReason.RETRY_BACKOFF and state.next_attempt == 3
    assert state.not_before_ns == 1_800_000_000 * 10**9 + 10_500_000_000
    assert state.enqueue_time_ns == 1_800_000_000 * 10**9 - 2_000_000_000


def test_limits_are_validated():
    with pytest.raises(ValueError):
        AdmissionLimits(max_running=0)
    with pytest.raises(ValueError):
        AdmissionLimits(max_running_per_project=-1)
    with pytest.raises(ValueError):
        AdmissionLimits(retry_hint_min_s=5, retry_hint_max_s=1)
    queue = make()
    queue.submit("k", "A")
    with pytest.raises(ValueError):
        queue.submit("k", "A")


# ------------------------------------------------------------------------------------------------
# The event-loop wrapper.


async def test_acquire_waits_for_a_slot_and_reports_why():
    seen = []
    admission = AsyncAdmission(
        make(max_running=2, max_starting=1), on_change=lambda t, s: seen.append((t.key, s.reason))
    )
    first = await asyncio.wait_for(admission.acquire("one", "A"), 5)
    second = asyncio.ensure_future(admission.acquire("two", "A"))
    third = asyncio.ensure_future(admission.acquire("three", "A"))
    await asyncio.sleep(0)
    assert not second.done() and not third.done()
    assert seen == [("two", QueueReason.START_LIMIT), ("three", QueueReason.START_LIMIT)]
    admission.started(first)  # the start slot frees: "two" starts, "three" now waits for the server
    ticket = await asyncio.wait_for(second, 5)
    assert ticket.key == "two" and ticket.state is TicketState.STARTING
    assert seen[-1] == ("three", QueueReason.SERVER_LIMIT)
    admission.release(first)
    admission.release(ticket)
    last = await asyncio.wait_for(third, 5)
    admission.release(last)
    assert admission.queue.running == 0 and admission.queue.queued == 0


async def test_cancelling_the_waiting_task_removes_the_entry():
    admission = AsyncAdmission(make(max_running=1, max_starting=1))
    holder = await asyncio.wait_for(admission.acquire("one", "A"), 5)
    waiting = asyncio.ensure_future(admission.acquire("two", "A"))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert admission.queue.queued == 0 and admission.queue.get("two") is None
    admission.release(holder)
    assert admission.queue.running == 0


async def test_cancel_by_key_and_close_fail_the_waiters():
    admission = AsyncAdmission(make(max_running=1, max_starting=1))
    holder = await asyncio.wait_for(admission.acquire("one", "A"), 5)
    by_key = asyncio.ensure_future(admission.acquire("two", "A"))
    by_close = asyncio.ensure_future(admission.acquire("three", "B"))
    await asyncio.sleep(0)
    assert admission.cancel("two") and not admission.cancel("two")
    with pytest.raises(AdmissionClosedError, match="cancelled while queued"):
        await asyncio.wait_for(by_key, 5)
    admission.close("the server is draining")
    with pytest.raises(AdmissionClosedError, match="draining"):
        await asyncio.wait_for(by_close, 5)
    with pytest.raises(AdmissionClosedError):
        await admission.acquire("four", "A")
    admission.release(holder)  # admitted tickets stay valid after close
    assert admission.queue.running == 0


async def test_a_full_queue_refuses_at_once():
    admission = AsyncAdmission(make(max_running=1, max_starting=1, max_queued=1))
    holder = await asyncio.wait_for(admission.acquire("one", "A"), 5)
    waiting = asyncio.ensure_future(admission.acquire("two", "A"))
    await asyncio.sleep(0)
    with pytest.raises(RunnerError, match="QUEUE_FULL|admission queue is full"):
        await asyncio.wait_for(admission.acquire("three", "A"), 5)
    admission.release(holder)
    admission.release(await asyncio.wait_for(waiting, 5))


async def test_the_timer_admits_when_a_hold_ends():
    # The one test on the real clock: a 50 ms hold, awaited with a generous bound.
    admission = AsyncAdmission(AdmissionQueue(AdmissionLimits(), clock=time.monotonic))
    admission.hold("k", time.monotonic() + 0.05, "HTTP 429")
    ticket = await asyncio.wait_for(admission.acquire("held", "A", credential="k"), 10)
    assert ticket.state is TicketState.STARTING
    admission.release(ticket)


def test_the_grant_is_offered_what_the_local_rules_would_start_in_their_order_and_decides():
    grant = RecordingGrant(allowed={"A"})
    queue = make(FakeClock(), grant, max_running=3, max_starting=4, max_running_per_project=2)
    for key, project in (("a1", "A"), ("a2", "A"), ("a3", "A"), ("b1", "B"), ("c1", "C")):
        queue.submit(key, project)
    admitted = queue.pump()
    # Projects take turns, each up to its per-project room; the room is the server's.
    assert grant.offers == [(["a1", "b1", "c1", "a2"], 3, {"A": 2, "B": 2, "C": 2})]
    assert [t.key for t in admitted] == ["a1", "a2"] and queue.running == 2
    status = queue.status("b1")  # this replica has room: the grant holds it back, and says why
    assert (status.reason, status.detail) == (QueueReason.SERVER_LIMIT, "held back by the grant")
    assert queue.status("a3").reason is QueueReason.PROJECT_LIMIT  # the local rule comes first
    assert queue.cancel("b1") and grant.left_keys == ["b1"]
    queue.release(admitted[0])
    assert grant.left_keys == ["b1", "a1"] and grant.entered_keys == ["a1", "a2", "a3", "b1", "c1"]


def test_without_a_say_of_its_own_the_grant_changes_nothing():
    """The local grant takes the first ``room`` candidates: the order one entry at a time gave."""
    queue = make(FakeClock(), max_running=3, max_starting=4, max_running_per_project=2)
    for key, project in (("a1", "A"), ("a2", "A"), ("a3", "A"), ("b1", "B"), ("c1", "C")):
        queue.submit(key, project)
    assert [t.key for t in queue.pump()] == ["a1", "b1", "c1"]


def test_a_grant_that_refuses_an_entry_is_queue_full_and_nothing_is_queued():
    queue = make(FakeClock(), RecordingGrant(refuse=True))
    with pytest.raises(RunnerError) as refused:
        queue.submit("x", "A")
    assert (refused.value.reason, refused.value.metadata["scope"]) == ("QUEUE_FULL", "cluster")
    assert queue.get("x") is None and queue.queued == 0


def test_a_project_that_went_idle_keeps_its_turn_and_does_not_jump_ahead():
    """A project whose phases all ended and that comes back was still served more recently than one
    that waited at its project limit meanwhile: the one waiting goes first, as in the cluster's ledger
    (which keeps every project's turn; tests/store/test_admission_differential.py found the two apart)."""
    queue = make(max_running=4, max_running_per_project=1, max_starting=4)
    first = [queue.submit("a1", "pa"), queue.submit("a2", "pa"), queue.submit("b1", "pb")]
    assert [t.key for t in queue.pump()] == ["a1", "b1"]  # pa waits at its project limit with a2
    queue.release(first[0])
    queue.release(first[2])  # pb is idle now, served after pa
    queue.submit("b2", "pb")
    assert [t.key for t in queue.pump()] == ["a2", "b2"]


def test_idle_turn_records_are_bounded(monkeypatch):
    monkeypatch.setattr("helix_runner.phases.admission.IDLE_TURNS_KEPT", 3)
    queue = make(max_running=1)
    for i in range(6):
        ticket = queue.submit(f"k{i}", f"p{i}")
        assert queue.pump() == [ticket]
        queue.release(ticket)
    assert set(queue._last_served) == {"p3", "p4", "p5"}  # the least recently served went first
