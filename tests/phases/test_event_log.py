"""The event hub: persisted before delivery, no gap or duplicate at the history/live seam,
slow subscribers never slow the publisher and catch up from the store."""

from __future__ import annotations

import asyncio

import pytest

from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.phases.event_log import PhaseEventLog, replay
from helix_runner.store.protocol import EventRow, FencedError, PhaseRow

pytestmark = pytest.mark.usefixtures("running_phase")


def rows(first: int, count: int) -> list[EventRow]:
    return [EventRow(seq, seq, "k", f"event-{seq}".encode()) for seq in range(first, first + count)]


async def drain(iterator, limit: float = 10.0):
    events, result = [], None
    async with asyncio.timeout(limit):
        async for d in iterator:
            if d.result is not None:
                result = d.result
                break
            assert d.events and d.last_sequence - d.first_sequence + 1 == len(d.events)
            events.extend(d.events)
    return events, result


def expected(upto: int, after: int = 0) -> list[bytes]:
    return [f"event-{s}".encode() for s in range(after + 1, upto + 1)]


async def test_persisted_before_delivery_and_gap_checked(store):
    log = PhaseEventLog(store, "j", "p")
    log.publish(rows(1, 3))
    assert [r.sequence for r in store.read_events("j", "p", 0, 10)] == [1, 2, 3]
    assert store.get_phase("j", "p").last_sequence == 3
    with pytest.raises(ValueError, match="gap"):
        log.publish(rows(5, 1))


async def test_history_then_live_has_no_gap_or_duplicate(store):
    log = PhaseEventLog(store, "j", "p")
    log.publish(rows(1, 10))
    sub = log.subscribe(4)
    first = await anext(sub)  # history page, read while the subscriber is registered
    log.publish(rows(11, 5))  # lands in the live queue
    log.publish(rows(16, 5))
    log.close(b"RESULT")
    rest, result = await drain(sub)
    assert list(first.events) + rest == expected(20, after=4)
    assert result == b"RESULT"


async def test_many_subscribers_see_identical_sequences_while_one_stalls(store):
    log = PhaseEventLog(store, "j", "p", queue_events=50)
    readers = [asyncio.create_task(drain(log.subscribe(0))) for _ in range(20)]
    stalled = log.subscribe(0)  # registered, never read until the end
    await asyncio.sleep(0)
    for start in range(1, 1001, 10):
        log.publish(rows(start, 10))
        await asyncio.sleep(0)
    log.close(b"R")
    results = await asyncio.gather(*readers)
    for events, result in results:
        assert events == expected(1000) and result == b"R"
    # The stalled one overflowed, was dropped from live delivery, and catches up from the store.
    events, result = await drain(stalled)
    assert events == expected(1000) and result == b"R"


async def test_lagging_subscriber_recovers_from_store(store):
    log = PhaseEventLog(store, "j", "p", queue_events=5)
    sub = log.subscribe(0)
    log.publish(rows(1, 3))
    got = list((await anext(sub)).events)
    log.publish(rows(4, 50))  # overflows its queue of 5
    assert log.lag_count == 1
    log.publish(rows(54, 2))
    log.close(b"R")
    rest, result = await drain(sub)
    assert got + rest == expected(55)


async def test_subscribing_after_close_replays_everything(store):
    log = PhaseEventLog(store, "j", "p")
    log.publish(rows(1, 7))
    log.close(b"R")
    assert await drain(log.subscribe(0)) == (expected(7), b"R")
    assert await drain(log.subscribe(5)) == (expected(7, after=5), b"R")


async def test_replay_of_a_finished_phase(store):
    store.append_events([("j", "p", rows(1, 1200))])
    events, result = await drain(replay(store, "j", "p", 100, 1200, b"R"))
    assert events == expected(1200, after=100) and result == b"R"


async def test_group_commit_persists_before_offering_and_batches_phases(store):
    from helix_runner.phases.event_log import EventWriter

    store.insert_phase(PhaseRow(job_id="j", phase_id="q", ordinal=0, project_id="proj", status=PhaseStatus.RUNNING,
                                create_time_ns=1))
    writer = EventWriter(store)
    a = PhaseEventLog(store, "j", "p", writer=writer)
    b = PhaseEventLog(store, "j", "q", writer=writer)
    sub = a.subscribe(0)
    first = asyncio.ensure_future(anext(sub))
    a.publish(rows(1, 3))
    b.publish(rows(1, 2))
    a.publish(rows(4, 1))
    assert store.read_events("j", "p", 0, 10) == []  # nothing committed within the loop turn
    assert not first.done() and a.last_sequence == 0
    delivered = await asyncio.wait_for(first, 5)
    # One loop turn later both phases are committed and only then offered.
    assert [r.sequence for r in store.read_events("j", "p", 0, 10)] == [1, 2, 3, 4]
    assert [r.sequence for r in store.read_events("j", "q", 0, 10)] == [1, 2]
    # Both batches were queued before the subscriber ran: they come as one delivery.
    assert list(delivered.events) == expected(4)
    a.close(b"R")
    assert await drain(sub) == ([], b"R")
    with pytest.raises(ValueError, match="gap"):
        b.publish(rows(4, 1))


async def test_one_transaction_for_every_phase_in_a_loop_turn_committed_before_any_offer(store, tmp_path,
                                                                                       monkeypatch):
    import sqlite3

    from helix_runner.phases.event_log import EventWriter

    for phase in ("q", "r"):
        store.insert_phase(PhaseRow(job_id="j", phase_id=phase, ordinal=0, project_id="proj", status=PhaseStatus.RUNNING,
                                    create_time_ns=1))
    statements: list[str] = []
    store._db.set_trace_callback(statements.append)
    writer = EventWriter(store)
    logs = {phase: PhaseEventLog(store, "j", phase, writer=writer) for phase in ("p", "q", "r")}
    subs = {phase: log.subscribe(0) for phase, log in logs.items()}
    firsts = {phase: asyncio.ensure_future(anext(sub)) for phase, sub in subs.items()}
    await asyncio.sleep(0)  # the subscribers register (no history yet)
    statements.clear()
    for first in (1, 3, 5):  # interleaved batches of three phases within one loop turn
        for log in logs.values():
            log.publish(rows(first, 2))
    assert not any(f.done() for f in firsts.values())
    other = sqlite3.connect(tmp_path / "db.sqlite3")  # what a crash would leave: committed rows only
    seen_on_offer: dict[str, list[int]] = {}
    offer = PhaseEventLog._offer

    def checked_offer(log, batch):
        count = other.execute("SELECT COUNT(*) FROM events WHERE job_id = 'j' AND phase_id = ?", (log.phase_id,))
        seen_on_offer.setdefault(log.phase_id, []).append(count.fetchone()[0])
        offer(log, batch)

    monkeypatch.setattr(PhaseEventLog, "_offer", checked_offer)
    delivered = {phase: await asyncio.wait_for(first, 5) for phase, first in firsts.items()}
    assert sum(s.startswith("BEGIN") for s in statements) == 1
    assert sum(s == "COMMIT" for s in statements) == 1
    assert seen_on_offer == {"p": [6, 6, 6], "q": [6, 6, 6], "r": [6, 6, 6]}
    # The three batches were all queued before the subscribers ran: one delivery each.
    assert {phase: list(d.events) for phase, d in delivered.items()} == {p: expected(6) for p in logs}
    other.close()
    for sub in subs.values():
        await sub.aclose()


class TakenOver:
    """A shared store on which another replica took ``refused`` over: their writes are refused, the
    rest commit (the store and its committer in one)."""

    off_loop = False

    def __init__(self, store, refused):
        self.store, self.refused = store, set(refused)

    def committer(self):
        return self

    def commit(self, writes, *, retry=False):
        self.store.write_phases([w for w in writes if (w.job_id, w.phase_id) not in self.refused])
        return {(w.job_id, w.phase_id) for w in writes} & self.refused

    def append_events(self, batches):
        self.store.append_events([b for b in batches if (b[0], b[1]) not in self.refused])
        refused = [(job, phase) for job, phase, _ in batches if (job, phase) in self.refused]
        if refused:
            raise FencedError(refused)

    def __getattr__(self, name):
        return getattr(self.store, name)


async def test_a_refused_phase_ends_its_watchers_and_the_others_are_committed_and_delivered(store):
    from helix_runner.phases.event_log import EventWriter

    store.insert_phase(PhaseRow(job_id="j", phase_id="q", ordinal=0, project_id="proj", status=PhaseStatus.RUNNING,
                                create_time_ns=1))
    shared = TakenOver(store, [])
    writer = EventWriter(shared)
    kept = PhaseEventLog(shared, "j", "p", writer=writer)
    taken = PhaseEventLog(shared, "j", "q", writer=writer)
    fenced = []
    writer.on_fenced = lambda job, phase: (fenced.append((job, phase)), taken.fence(b"the taker's result"))
    kept_sub, taken_sub = kept.subscribe(0), taken.subscribe(0)
    kept.publish(rows(1, 2))
    taken.publish(rows(1, 2))
    first = await asyncio.wait_for(anext(taken_sub), 5)  # committed while still owned: delivered
    assert list(first.events) == expected(2)

    shared.refused.add(("j", "q"))  # another replica sweeps q
    kept.publish(rows(3, 2))
    taken.publish(rows(3, 2))
    taken.close(b"this replica's result")  # the run ends here; must not reach the watchers
    assert await drain(taken_sub) == ([], b"the taker's result")
    assert fenced == [("j", "q")]
    assert [r.sequence for r in store.read_events("j", "q", 0, 10)] == [1, 2]
    taken.publish(rows(5, 1))  # nothing more is written for it
    kept.close(b"R")
    assert await drain(kept_sub) == (expected(4), b"R")
    assert [r.sequence for r in store.read_events("j", "p", 0, 10)] == [1, 2, 3, 4]
    assert [r.sequence for r in store.read_events("j", "q", 0, 10)] == [1, 2]


# -- encode once: each live batch framed once, a watcher behind gets one message ---------------------


def stream_event_rows(first: int, count: int, text: str = "") -> list[EventRow]:
    """Rows whose bodies are real StreamEvent encodings, as the record encoder stores them."""
    from helix.runner.v1 import events_pb2 as ev

    out = []
    for seq in range(first, first + count):
        message = ev.StreamEvent(sequence=seq, job_id="j", phase_id="p")
        message.assistant_text.text = text or f"line {seq}"
        out.append(EventRow(seq, seq, "assistant_text", message.SerializeToString()))
    return out


class CountingFramer:
    """The encoder's framing, counting how often it runs."""

    def __init__(self):
        from helix_runner.api.proto_records import ProtoRecordEncoder

        self.encoder, self.calls = ProtoRecordEncoder(), 0

    def __call__(self, bodies):
        self.calls += 1
        return self.encoder.frame_events(bodies)


async def test_each_live_batch_is_framed_once_and_the_same_bytes_go_to_every_subscriber(store):
    framer = CountingFramer()
    log = PhaseEventLog(store, "j", "p", frame=framer)
    subs = [log.subscribe(0) for _ in range(3)]
    firsts = [asyncio.ensure_future(anext(s)) for s in subs]
    await asyncio.sleep(0)  # registered, nothing in history
    log.publish(stream_event_rows(1, 4))
    deliveries = await asyncio.wait_for(asyncio.gather(*firsts), 5)
    assert framer.calls == 1
    assert deliveries[0].message is deliveries[1].message is deliveries[2].message
    assert deliveries[0].message == framer.encoder.frame_events([r.body for r in stream_event_rows(1, 4)])
    for s in subs:
        await s.aclose()


async def test_a_subscriber_behind_gets_its_queued_batches_as_one_message_equal_to_the_one_by_one_events(store):
    from helix.runner.v1 import runner_service_pb2 as pb

    framer = CountingFramer()
    log = PhaseEventLog(store, "j", "p", frame=framer)
    behind = log.subscribe(0)
    first = asyncio.ensure_future(anext(behind))
    await asyncio.sleep(0)
    published = []
    for start in range(1, 31, 3):  # ten batches while the subscriber does not run
        batch = stream_event_rows(start, 3)
        published.extend(batch)
        log.publish(batch)
    delivery = await asyncio.wait_for(first, 5)
    assert (delivery.first_sequence, delivery.last_sequence) == (1, 30)
    assert framer.calls == 10  # once per batch, none for joining them
    one_by_one = [pb.WatchPhaseResponse.FromString(framer.encoder.frame_events([r.body])).events[0] for r in published]
    assert list(pb.WatchPhaseResponse.FromString(delivery.message).events) == one_by_one
    assert list(pb.RunPhaseResponse.FromString(delivery.message).events) == one_by_one
    assert list(delivery.events) == [r.body for r in published]
    log.close(b"R")
    assert await drain(behind) == ([], b"R")


async def test_joining_stops_at_the_byte_cap_and_a_larger_batch_goes_unframed(store):
    from helix_runner.phases.event_log import BATCH_BYTES

    log = PhaseEventLog(store, "j", "p", frame=CountingFramer())
    behind = log.subscribe(0)
    first = asyncio.ensure_future(anext(behind))
    await asyncio.sleep(0)
    for start in range(1, 11):  # ten batches of ~60 KB: at most four fit one message
        log.publish(stream_event_rows(start, 1, "x" * 60_000))
    big = stream_event_rows(11, 1, "y" * (BATCH_BYTES + 1))
    log.publish(big)  # above the cap: framed by the transport, which splits at its own limit
    log.close(b"R")
    deliveries = [await asyncio.wait_for(first, 5)]
    async with asyncio.timeout(5):
        async for d in behind:
            deliveries.append(d)
    *events, result = deliveries
    assert result.result == b"R"
    assert all(d.message is not None and len(d.message) <= BATCH_BYTES for d in events[:-1])
    assert [d.last_sequence - d.first_sequence + 1 for d in events[:-1]] == [4, 4, 2]
    assert events[-1].message is None and list(events[-1].events) == [big[0].body]
