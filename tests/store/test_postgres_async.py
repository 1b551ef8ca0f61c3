"""The PostgreSQL store is async: a round trip waiting on the database leaves the event loop running.

With the synchronous store a group commit held the event loop (every phase and watcher) for its
whole round trip; here the commit is made to wait on a row lock another connection holds, and a
ticker task must keep advancing meanwhile (docs/scale-out.md, "Driver").
"""

from __future__ import annotations

import asyncio
import threading

import psycopg

from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.store.postgres_store import PostgresStore
from helix_runner.store.protocol import EventRow, PhaseRow


async def test_a_group_commit_waiting_on_the_database_leaves_the_event_loop_running(postgres_url):
    store = PostgresStore(postgres_url, heartbeat=False)
    locked, release = threading.Event(), threading.Event()

    def hold_the_phase_row() -> None:
        # Another session holds the phase row: the commit's fence check (FOR SHARE) waits for it.
        with psycopg.connect(postgres_url) as conn:
            conn.execute("SELECT 1 FROM phases WHERE job_id = 'j' AND phase_id = 'x' FOR UPDATE")
            locked.set()
            release.wait(30)  # bounded: a failing test still ends
        # Leaving the block commits and frees the row.

    holder = threading.Thread(target=hold_the_phase_row, daemon=True)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.005)

    tick_task = asyncio.create_task(ticker())
    try:
        await store.get_or_create_job("j", "p", 1)
        await store.insert_phase(PhaseRow(job_id="j", phase_id="x", ordinal=0, project_id="p",
                                          status=PhaseStatus.RUNNING, create_time_ns=1))
        holder.start()
        assert await asyncio.to_thread(locked.wait, 30)
        commit = asyncio.create_task(store.append_events([("j", "x", [EventRow(1, 1, "k", b"e1")])]))
        async with asyncio.timeout(30), await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as watch:
            # The commit is in flight: its session waits on the lock.
            while (await (await watch.execute(  # noqa: ASYNC110 - polls the database, no event to await
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )).fetchone())[0] == 0:
                await asyncio.sleep(0.01)
            during = ticks
            while ticks < during + 20:  # noqa: ASYNC110 - the ticker's progress is what is tested
                await asyncio.sleep(0.005)
            assert not commit.done()  # the row is still held: this was all during the commit
        release.set()
        await asyncio.wait_for(commit, 30)
        assert [e.body for e in await store.read_events("j", "x", 0, 10)] == [b"e1"]
    finally:
        release.set()
        tick_task.cancel()
        await asyncio.to_thread(holder.join, 30)
        await store.close()
