"""The event writer (phases/event_log.EventWriter): a run's writes in order, off the loop when the
store says so, a bounded backlog, and a database that cannot be reached or will not take a write.

The committer here is a stand-in over a real SQLite store that can hold a commit, fail it, or refuse
a phase, and says ``off_loop`` as PostgreSQL's does; tests/store/test_postgres_writer.py runs the
PostgreSQL committer itself.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.phases import event_log
from helix_runner.phases.event_log import EventWriter, PhaseEventLog
from helix_runner.store.protocol import (
    EventRow,
    OutboxRow,
    PhaseRow,
    StoreError,
    StoreUnavailable,
    UpdatePhase,
)


class HeldCommitter:
    """Commits on a real store, off the loop; a commit waits while ``hold`` is clear, ``fail`` makes
    the next commits raise (a list of exceptions, taken in turn), ``refuse`` holds phases another
    replica took over, ``reject`` phases whose row writes the database will not take."""

    off_loop = True

    def __init__(self, store):
        self.store = store
        self.hold = threading.Event()
        self.hold.set()
        self.fail: list[Exception] = []
        self.refuse: set[tuple[str, str]] = set()
        self.reject: set[tuple[str, str]] = set()
        self.calls: list[tuple[int, bool]] = []  # (writes, retry) per commit
        self.entered = threading.Event()

    def commit(self, writes, *, retry=False):
        self.entered.set()
        assert self.hold.wait(10), "a test held a commit too long"
        self.calls.append((len(writes), retry))
        if self.fail:
            raise self.fail.pop(0)
        if any(type(w) is UpdatePhase and (w.job_id, w.phase_id) in self.reject for w in writes):
            raise StoreError("the database refused the writes: invalid byte sequence")
        self.store.write_phases([w for w in writes if (w.job_id, w.phase_id) not in self.refuse])
        return {(w.job_id, w.phase_id) for w in writes} & self.refuse

    def close(self):
        pass


class StoreWith:
    """``store`` with ``committer`` as its committer."""

    def __init__(self, store, committer):
        self._store, self._committer = store, committer

    def committer(self):
        return self._committer

    def __getattr__(self, name):
        return getattr(self._store, name)


def rows(first: int, count: int, size: int = 8) -> list[EventRow]:
    return [EventRow(s, s, "k", b"x" * size) for s in range(first, first + count)]


@pytest.fixture
def phases(store):
    store.get_or_create_job("j", "proj", 1)
    for phase in ("p", "q", "r"):
        store.insert_phase(PhaseRow(job_id="j", phase_id=phase, ordinal=0, project_id="proj",
                                    status=PhaseStatus.RUNNING, create_time_ns=1))
    return store


@pytest.fixture
def held(phases):
    committer = HeldCommitter(phases)
    writer = EventWriter(StoreWith(phases, committer))
    yield committer, writer
    committer.hold.set()
    writer.close()


def stored(store, phase: str = "p") -> list[int]:
    return [r.sequence for r in store.read_events("j", phase, 0, 10_000)]


async def test_the_loop_never_waits_for_a_commit_and_watchers_see_only_committed_events(phases, held):
    committer, writer = held
    log = PhaseEventLog(phases, "j", "p", writer=writer)
    sub = log.subscribe(0)
    first = asyncio.ensure_future(anext(sub))
    committer.hold.clear()  # the database is slow: every commit waits
    log.publish(rows(1, 3))
    await asyncio.to_thread(committer.entered.wait, 10)  # the thread is in the commit, holding it
    ticks = 0
    for _ in range(20):  # the loop runs on meanwhile, and the run hands over more
        await asyncio.sleep(0.005)
        ticks += 1
    log.publish(rows(4, 2))
    await asyncio.sleep(0.005)  # handed over in another loop turn
    writer.update_phase("j", "p", 5, model="m")
    await asyncio.sleep(0.005)  # handed over too
    assert ticks == 20 and not first.done() and log.last_sequence == 0
    assert stored(phases) == []  # nothing is committed, so nothing was offered
    committer.hold.set()
    delivered = await asyncio.wait_for(first, 10)
    assert delivered.first_sequence == 1 and stored(phases)[:3] == [1, 2, 3]
    await writer.committed()
    assert stored(phases) == [1, 2, 3, 4, 5] and phases.get_phase("j", "p").model == "m"
    # What was handed over while the first commit was held (events and a row write, two loop turns
    # apart) went as one more transaction.
    assert [n for n, _ in committer.calls] == [1, 2]
    log.close(b"R")
    rest = [d async for d in sub]
    seen = [s for d in [delivered, *rest] if d.result is None for s in range(d.first_sequence, d.last_sequence + 1)]
    assert seen == [1, 2, 3, 4, 5] and rest[-1].result == b"R"


async def test_a_full_backlog_makes_readers_wait_in_turn_and_lets_them_go_as_it_drains(phases, held):
    committer, writer = held
    writer.backlog_bytes = 1000
    committer.hold.clear()
    log = PhaseEventLog(phases, "j", "p", writer=writer)
    await writer.room()  # empty: at once
    log.publish(rows(1, 4, size=300))  # ~2,000 bytes: past the bound
    order = []

    async def reader(name):
        await log.room()
        order.append(name)

    readers = [asyncio.ensure_future(reader(n)) for n in ("a", "b", "c")]
    for _ in range(5):
        await asyncio.sleep(0.01)
    assert order == [] and writer.backlog >= 1000  # all three wait while the backlog is full
    readers[1].cancel()  # a reader that goes away (its phase ended) gives up its place
    committer.hold.set()
    await asyncio.wait_for(readers[0], 10)
    await asyncio.wait_for(readers[2], 10)
    assert order == ["a", "c"] and writer.backlog == 0
    assert stored(phases) == [1, 2, 3, 4]


async def test_readers_let_through_while_full_overshoot_the_bound_by_one_chunk_at_most(phases, held):
    committer, writer = held
    writer.backlog_bytes = 1000
    committer.hold.clear()
    logs = {p: PhaseEventLog(phases, "j", p, writer=writer) for p in ("p", "q", "r")}
    sequence = {p: 0 for p in logs}
    peak = 0

    async def reader(phase):
        nonlocal peak
        for _ in range(6):
            await logs[phase].room()
            logs[phase].publish(rows(sequence[phase] + 1, 2, size=200))  # one "chunk": ~800 bytes
            sequence[phase] += 2
            peak = max(peak, writer.backlog)
            await asyncio.sleep(0)

    running = asyncio.gather(*(reader(p) for p in logs))
    await asyncio.sleep(0.05)
    committer.hold.set()
    await asyncio.wait_for(running, 10)
    await writer.committed()
    assert all(stored(phases, p) == list(range(1, 13)) for p in logs)
    assert 1000 <= peak <= 1000 + 800  # the bound, overshot by one chunk at most (it was reached)


async def test_an_unreachable_database_is_retried_and_the_batch_committed_once(phases, held, monkeypatch):
    monkeypatch.setattr(event_log, "RETRY_DELAYS_S", (0.01,))
    committer, writer = held
    committer.fail = [StoreUnavailable("lost the connection"), StoreUnavailable("cannot connect")]
    log = PhaseEventLog(phases, "j", "p", writer=writer)
    offered = []
    writer.submit("j", "p", rows(1, 3), lambda: offered.append(3))
    writer.update_phase("j", "p", 5, model="m")
    log.submitted_sequence = 3
    await asyncio.wait_for(writer.committed(), 10)
    assert committer.calls == [(2, False), (2, True), (2, True)]  # the same batch, then as a retry
    assert offered == [3] and stored(phases) == [1, 2, 3] and phases.get_phase("j", "p").model == "m"


async def test_closing_gives_an_unreachable_database_its_time_then_stops_what_it_could_not_commit(
        phases, held, monkeypatch):
    monkeypatch.setattr(event_log, "RETRY_DELAYS_S", (0.01,))
    monkeypatch.setattr(event_log, "CLOSE_TIMEOUT_S", 0.2)
    committer, writer = held
    committer.fail = [StoreUnavailable("down")] * 1000
    stopped, offered = [], []
    writer.on_fenced = lambda job, phase: stopped.append((job, phase))
    writer.submit("j", "p", rows(1, 2), lambda: offered.append("p"))
    await asyncio.sleep(0)  # handed to the thread
    writer.close()  # blocks at most about CLOSE_TIMEOUT_S
    assert offered == [] and stopped == [("j", "p")] and stored(phases) == []
    writer.submit("j", "q", rows(1, 1), lambda: offered.append("q"))  # after close: dropped, not written
    await asyncio.sleep(0)
    assert offered == [] and stopped == [("j", "p"), ("j", "q")] and stored(phases, "q") == []


async def test_a_write_the_database_refuses_costs_no_other_phase_its_writes(phases, held):
    committer, writer = held
    committer.reject = {("j", "q")}  # e.g. a text PostgreSQL will not store
    offered, stopped = [], []
    writer.on_fenced = lambda job, phase: stopped.append(phase)
    for phase in ("p", "q", "r"):
        writer.submit("j", phase, rows(1, 2), lambda phase=phase: offered.append(phase))
        writer.update_phase("j", phase, 5, model=f"model-{phase}")
    await asyncio.wait_for(writer.committed(), 10)
    # The batch, then each phase alone, then q's events alone (its row write is what was refused).
    assert [n for n, _ in committer.calls] == [6, 2, 2, 1, 2]
    assert {p: stored(phases, p) for p in ("p", "q", "r")} == {"p": [1, 2], "q": [1, 2], "r": [1, 2]}
    assert [phases.get_phase("j", p).model for p in ("p", "q", "r")] == ["model-p", "", "model-r"]
    assert offered == ["p", "q", "r"] and stopped == []


async def test_a_phase_whose_events_the_database_refuses_is_stopped_and_its_events_never_offered(phases, held):
    committer, writer = held
    refused_events = StoreError("the database refused the writes")
    offered, stopped = [], []
    writer.on_fenced = lambda job, phase: stopped.append(phase)
    original = committer.commit

    def commit(writes, *, retry=False):
        if any(w.phase_id == "q" for w in writes):
            committer.calls.append((len(writes), retry))
            raise refused_events
        return original(writes, retry=retry)

    committer.commit = commit
    for phase in ("p", "q"):
        writer.submit("j", phase, rows(1, 2), lambda phase=phase: offered.append(phase))
    await asyncio.wait_for(writer.committed(), 10)
    assert offered == ["p"] and stopped == ["q"]
    assert stored(phases, "p") == [1, 2] and stored(phases, "q") == []


async def test_a_refused_phase_has_none_of_its_writes_applied_and_is_told_once(phases, held):
    committer, writer = held
    committer.refuse = {("j", "q")}  # another replica took q over
    offered, stopped = [], []
    writer.on_fenced = lambda job, phase: stopped.append(phase)
    for phase in ("p", "q"):
        writer.submit("j", phase, rows(1, 2), lambda phase=phase: offered.append(phase))
        writer.update_phase("j", phase, 5, status=PhaseStatus.SUCCEEDED)
        writer.submit("j", phase, rows(3, 1), lambda phase=phase: offered.append(phase))
    await asyncio.wait_for(writer.committed(), 10)
    assert offered == ["p", "p"] and stopped == ["q"]
    assert stored(phases, "q") == [] and phases.get_phase("j", "q").status is PhaseStatus.RUNNING
    assert stored(phases, "p") == [1, 2, 3] and phases.get_phase("j", "p").status is PhaseStatus.SUCCEEDED


async def test_on_sqlite_a_turns_writes_commit_in_one_transaction_at_its_end(store, running_phase):
    writer = EventWriter(store)
    assert not writer.off_loop
    statements: list[str] = []
    store._db.set_trace_callback(statements.append)
    offered = []
    writer.submit("j", "p", rows(1, 2), lambda: offered.append(2))
    writer.update_phase("j", "p", 5, model="m")
    writer.upsert_tool_calls("j", "p", [])  # nothing to write: nothing handed over
    writer.submit("j", "p", rows(3, 1), lambda: offered.append(3))
    assert statements == [] and offered == []  # within the turn: nothing yet
    await writer.committed()
    assert sum(s.startswith("BEGIN") for s in statements) == 1 and offered == [2, 3]
    assert stored(store) == [1, 2, 3] and store.get_phase("j", "p").model == "m"


def delivery(delivery_id: str, phase: str, sequence: int = 1) -> OutboxRow:
    return OutboxRow(delivery_id, "wh_1", "phase.finished", "j", phase, sequence, b"{}", 1)


def deliveries(store, phase: str) -> list[str]:
    return sorted(d.delivery_id for d in store.list_webhook_deliveries(None, "j", phase, (), 100))


async def test_a_refused_phases_deliveries_are_dropped_with_it_and_wake_no_dispatcher(phases, held):
    committer, writer = held
    committer.refuse = {("j", "q")}  # another replica took q over
    woken = []
    writer.on_outbox = lambda: woken.append(deliveries(phases, "p"))
    writer.submit("j", "q", rows(1, 1), lambda: None, [delivery("mq", "q")])
    await asyncio.wait_for(writer.committed(), 10)
    assert deliveries(phases, "q") == [] and woken == []  # nothing committed: nothing to wake for
    writer.submit("j", "p", rows(1, 1), lambda: None, [delivery("mp", "p")])
    writer.submit("j", "q", rows(2, 1), lambda: None, [delivery("mq2", "q")])
    await asyncio.wait_for(writer.committed(), 10)
    assert deliveries(phases, "p") == ["mp"] and deliveries(phases, "q") == []
    assert woken == [["mp"]]  # once, after the commit that carried p's


async def test_a_phase_whose_row_writes_are_refused_keeps_its_events_with_their_deliveries(phases, held):
    committer, writer = held
    committer.reject = {("j", "q")}  # its status will not be stored (e.g. a text PostgreSQL refuses)
    woken = []
    writer.on_outbox = lambda: woken.append(deliveries(phases, "q"))
    writer.update_phase("j", "q", 5, status=PhaseStatus.SUCCEEDED)
    writer.submit("j", "q", rows(1, 1), lambda: None, [delivery("mq", "q")])
    await asyncio.wait_for(writer.committed(), 10)
    # The batch, then q alone, then q's history alone: its event and the delivery it causes together.
    assert [n for n, _ in committer.calls] == [3, 3, 2]
    assert stored(phases, "q") == [1] and deliveries(phases, "q") == ["mq"] and woken == [["mq"]]
    assert phases.get_phase("j", "q").status is PhaseStatus.RUNNING
