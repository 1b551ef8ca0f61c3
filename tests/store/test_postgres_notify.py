"""Cross-replica live events: NOTIFY carries a sequence pointer; followers read the table by cursor."""

from __future__ import annotations

import asyncio
import json

import psycopg
import pytest

from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.store.postgres_notify import CHANNEL, EventListener, follow_phase_events
from helix_runner.store.postgres_store import PostgresStore
from helix_runner.store.protocol import EventRow, PhaseRow


def ev(seq: int) -> EventRow:
    return EventRow(seq, seq, "k", f"e{seq}".encode())


@pytest.fixture
def owner(postgres_url):
    store = PostgresStore(postgres_url, heartbeat=False)
    store.get_or_create_job("j", "p", 1)
    store.insert_phase(PhaseRow(job_id="j", phase_id="x", ordinal=0, project_id="p", status=PhaseStatus.RUNNING,
                                create_time_ns=1))
    yield store
    store.close()


@pytest.fixture
async def listener(postgres_url):
    listening = await EventListener(postgres_url).start()
    yield listening
    await listening.stop()


async def test_a_commit_notifies_the_phase_and_its_last_sequence(owner, postgres_url):
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
        await conn.execute(f"LISTEN {CHANNEL}")
        owner.append_events([("j", "x", [ev(1), ev(2), ev(3)])])
        note = await anext(conn.notifies(timeout=10))
    assert json.loads(note.payload) == {"j": "j", "p": "x", "s": 3}


async def test_a_waiter_wakes_with_the_pointer(owner, listener):
    with listener.subscribe("j", "x") as waiter, listener.subscribe("j", "other") as bystander:
        owner.append_events([("j", "x", [ev(1), ev(2)])])
        await asyncio.wait_for(waiter.wakeup.wait(), 10)
        assert waiter.latest == 2
        assert not bystander.wakeup.is_set()


async def test_follow_reads_history_then_live_without_gap_or_duplicate(owner, listener, postgres_url):
    owner.append_events([("j", "x", [ev(1), ev(2), ev(3)])])
    reader = PostgresStore(postgres_url, heartbeat=False)  # another replica serves the watcher
    seen: list[int] = []
    pages: list[list[int]] = []
    second_batch_read = asyncio.Event()

    async def watch():
        async for rows in follow_phase_events(reader, listener, "j", "x", after_sequence=1):
            pages.append([row.sequence for row in rows])
            for row in rows:
                assert row.body == f"e{row.sequence}".encode()
                seen.append(row.sequence)
                if row.sequence == 5:
                    second_batch_read.set()

    try:
        task = asyncio.create_task(watch())
        for _ in range(200):  # bounded: until history is read
            if seen == [2, 3]:
                break
            await asyncio.sleep(0.05)
        owner.append_events([("j", "x", [ev(4), ev(5)])])
        await asyncio.wait_for(second_batch_read.wait(), 10)
        owner.append_events([("j", "x", [ev(6)])])
        owner.update_phase("j", "x", 9, status=PhaseStatus.SUCCEEDED, result_pb=b"result")
        await asyncio.wait_for(task, 10)  # ends by itself once the phase is final
    finally:
        reader.close()
    assert seen == [2, 3, 4, 5, 6]
    assert pages[0] == [2, 3]  # the history as one page, not one row per message


async def test_a_lost_notification_costs_latency_not_events(owner, listener, postgres_cluster, postgres_url):
    seen: list[int] = []

    async def watch():
        async for rows in follow_phase_events(owner, listener, "j", "x", poll_seconds=0.2):
            seen.extend(row.sequence for row in rows)

    task = asyncio.create_task(watch())
    await asyncio.sleep(0.1)
    # Written behind the store's back: no NOTIFY at all. The follower finds them by polling.
    postgres_cluster.execute(postgres_url, "INSERT INTO events VALUES ('j', 'x', 1, 1, 'k', 'e1'), "
                                           "('j', 'x', 2, 2, 'k', 'e2')")
    postgres_cluster.execute(postgres_url, "UPDATE phases SET status = 'FAILED', result_pb = 'r'")
    await asyncio.wait_for(task, 10)
    assert seen == [1, 2]
