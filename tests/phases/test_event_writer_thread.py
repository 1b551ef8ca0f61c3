"""The group commit on its writer thread: the loop runs on while a commit is in flight, watchers
see nothing before its commit returned, commit order is submission order, stop loses nothing,
and a store error is handled as without the thread."""

from __future__ import annotations

import asyncio
import sqlite3
import threading

import pytest

from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.phases.event_log import EventWriter, PhaseEventLog
from helix_runner.store.protocol import StoreError
from helix_runner.store.sqlite_store import EventRow, PhaseRow, SqliteStore

PHASES = ("p", "q", "r")


@pytest.fixture
def store(tmp_path):
    s = SqliteStore(tmp_path / "db.sqlite3")
    s.get_or_create_job("j", "proj", 1)
    for phase in PHASES:
        s.insert_phase(PhaseRow(job_id="j", phase_id=phase, ordinal=0, project_id="proj",
                                status=PhaseStatus.RUNNING, create_time_ns=1))
    yield s
    s.close()


def rows(first: int, count: int) -> list[EventRow]:
    return [EventRow(seq, seq, "k", f"event-{seq}".encode()) for seq in range(first, first + count)]


class GatedStore:
    """Delegates to the store; while ``gate`` is clear an append waits for it (bounded) before committing.

    Records each append as it starts: the thread it ran on and each phase's sequences.
    """

    def __init__(self, store):
        self.store = store
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()  # an append is waiting at the gate
        self.appends: list[tuple[str, dict[str, list[int]]]] = []
        self.active = 0
        self.max_active = 0
        self.fail_next: Exception | None = None

    def append_events(self, batches):
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            seqs: dict[str, list[int]] = {}
            for _, phase, events in batches:
                seqs.setdefault(phase, []).extend(r.sequence for r in events)
            self.appends.append((threading.current_thread().name, seqs))
            self.entered.set()
            assert self.gate.wait(10), "the test never opened the gate"
            if self.fail_next is not None:
                exc, self.fail_next = self.fail_next, None
                raise exc
            self.store.append_events(batches)
        finally:
            self.active -= 1

    def __getattr__(self, name):
        return getattr(self.store, name)


def committed(path, phase: str) -> list[int]:
    """The sequences another connection sees: what a crash would leave."""
    other = sqlite3.connect(path)
    try:
        return [s for (s,) in other.execute(
            "SELECT sequence FROM events WHERE job_id = 'j' AND phase_id = ? ORDER BY sequence", (phase,))]
    finally:
        other.close()


async def wait_for_thread(event: threading.Event) -> None:
    assert await asyncio.to_thread(event.wait, 5)


async def test_the_loop_runs_while_a_commit_is_in_flight_and_watchers_see_nothing_before_it_returns(store, tmp_path):
    gated = GatedStore(store)
    gated.gate.clear()
    writer = EventWriter(gated, threaded=True)
    log = PhaseEventLog(gated, "j", "p", writer=writer)
    sub = log.subscribe(0)
    first = asyncio.ensure_future(anext(sub))
    await asyncio.sleep(0)  # registered, nothing in history
    log.publish(rows(1, 3))
    await wait_for_thread(gated.entered)  # the commit is under way on the writer thread ...
    ticks = 0
    for _ in range(20):  # ... and the loop keeps running meanwhile
        await asyncio.sleep(0.005)
        ticks += 1
        log.publish(rows(3 + ticks, 1))  # these form the next batch
    assert ticks == 20
    assert not first.done() and log.last_sequence == 0 and committed(tmp_path / "db.sqlite3", "p") == []
    assert gated.appends[0][0].startswith("event-writer")
    offered_with: list[list[int]] = []
    offer = log._offer
    log._offer = lambda batch: (offered_with.append(committed(tmp_path / "db.sqlite3", "p")), offer(batch))
    gated.gate.set()
    delivery = await asyncio.wait_for(first, 5)
    assert list(delivery.events)[:3] == [b"event-1", b"event-2", b"event-3"]
    log.close(b"R")
    async with asyncio.timeout(5):
        async for d in sub:
            if d.result is not None:
                break
    # Every offer happened after its rows were committed: first the in-flight batch, then the rest.
    assert offered_with[0] == [1, 2, 3]
    assert all(seen[-1] >= 3 for seen in offered_with) and offered_with[-1] == list(range(1, 24))


async def test_commit_order_is_sequence_order_across_consecutive_batches(store, tmp_path):
    gated = GatedStore(store)
    writer = EventWriter(gated, threaded=True)
    logs = {phase: PhaseEventLog(gated, "j", phase, writer=writer) for phase in PHASES}
    next_seq = dict.fromkeys(PHASES, 1)
    for turn in range(30):
        if turn % 10 == 0:
            gated.gate.clear()  # hold a commit so the following turns pile up behind it
            gated.entered.clear()
        for phase, log in logs.items():
            if (turn + PHASES.index(phase)) % 2:
                log.publish(rows(next_seq[phase], 2))
                next_seq[phase] += 2
        await asyncio.sleep(0.002)
        if turn % 10 == 5:
            await wait_for_thread(gated.entered)
            gated.gate.set()
    writer.flush()
    assert gated.max_active == 1  # one commit at a time
    assert len(gated.appends) > 3  # several consecutive batches, some of them several turns long
    assert any(len(seqs) >= 4 for _, batch in gated.appends for seqs in batch.values())
    for phase in PHASES:
        in_commit_order = [s for _, batch in gated.appends for s in batch.get(phase, [])]
        assert in_commit_order == list(range(1, next_seq[phase]))
        assert committed(tmp_path / "db.sqlite3", phase) == in_commit_order
        assert logs[phase].last_sequence == next_seq[phase] - 1


@pytest.mark.parametrize("threaded", [True, False])
async def test_stop_commits_the_batch_in_flight_and_the_pending_one_and_runs_their_callbacks(store, tmp_path,
                                                                                           threaded):
    gated = GatedStore(store)
    writer = EventWriter(gated, threaded=threaded)
    logs = {phase: PhaseEventLog(gated, "j", phase, writer=writer) for phase in PHASES}
    subs = {phase: log.subscribe(0) for phase, log in logs.items()}
    for log in logs.values():
        log.publish(rows(1, 2))
    if threaded:
        gated.gate.clear()
        await asyncio.sleep(0)  # the first batch goes to the writer thread and waits there
        await wait_for_thread(gated.entered)
        threading.Timer(0.1, gated.gate.set).start()
    for phase, log in logs.items():  # pending behind it
        log.publish(rows(3, 2))
        log.close(b"R-" + phase.encode())
    writer.close()  # as server.drain does: returns with everything committed and offered
    for phase, log in logs.items():
        assert committed(tmp_path / "db.sqlite3", phase) == [1, 2, 3, 4]
        assert log.closed and log.last_sequence == 4
        events, result = [], None
        async with asyncio.timeout(5):
            async for d in subs[phase]:
                if d.result is not None:
                    result = d.result
                    break
                events.extend(d.events)
        assert events == [f"event-{s}".encode() for s in range(1, 5)] and result == b"R-" + phase.encode()


@pytest.mark.parametrize("threaded", [True, False])
async def test_a_store_error_drops_its_batch_reports_it_to_the_loop_and_later_batches_commit(store, tmp_path,
                                                                                             threaded):
    loop = asyncio.get_running_loop()
    reported: list[BaseException] = []
    was_reported = asyncio.Event()
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: (reported.append(context.get("exception")),
                                                       was_reported.set()))
    try:
        gated = GatedStore(store)
        gated.fail_next = StoreError("disk full")
        writer = EventWriter(gated, threaded=threaded)
        log = PhaseEventLog(gated, "j", "p", writer=writer)
        sub = log.subscribe(0)
        first = asyncio.ensure_future(anext(sub))
        log.publish(rows(1, 2))
        await asyncio.wait_for(was_reported.wait(), 5)
        assert [type(e) for e in reported] == [StoreError]  # as an exception in a loop callback
        assert not first.done() and log.last_sequence == 0  # never offered: not in the store
        log.publish(rows(3, 2))  # the writer goes on with the next batch
        delivery = await asyncio.wait_for(first, 5)
        assert list(delivery.events) == [b"event-3", b"event-4"]
        assert committed(tmp_path / "db.sqlite3", "p") == [3, 4]
        await sub.aclose()
    finally:
        loop.set_exception_handler(previous)


async def test_the_switch_turns_the_thread_off(store, monkeypatch):
    monkeypatch.setenv("HELIX_RUNNER_COMMIT_THREAD", "0")
    assert EventWriter(store).threaded is False
    monkeypatch.delenv("HELIX_RUNNER_COMMIT_THREAD")
    assert EventWriter(store).threaded is True
