"""On PostgreSQL the event loop never waits for the database: a commit that waits (here, for a row
lock another transaction holds) holds back only the events it carries, never the loop.

Before the writer had a thread of its own, the group commit ran on the loop: a database that took a
second to commit stopped every phase, watcher and control call of the server for that second.
"""

from __future__ import annotations

import asyncio
import threading

import psycopg

from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.phases.event_log import EventWriter, PhaseEventLog
from helix_runner.store.factory import open_storage
from helix_runner.store.protocol import EventRow, PhaseRow

# How long the lock is held at most: only a loop that cannot run (the test's own sleep included)
# makes the holder wait this long; the test releases it as soon as the loop has shown it runs.
HOLD_AT_MOST_S = 5.0


class RowLock(threading.Thread):
    """Another transaction holding the phase's row ``FOR UPDATE`` (the writer's fence check waits
    for it) until told to let go, or ``HOLD_AT_MOST_S``."""

    def __init__(self, url: str, job_id: str, phase_id: str):
        super().__init__(daemon=True)
        self.url, self.key = url, (job_id, phase_id)
        self.locked, self.release = threading.Event(), threading.Event()
        self.timed_out = False

    def run(self) -> None:
        with psycopg.connect(self.url) as conn, conn.transaction():
            conn.execute("SELECT 1 FROM phases WHERE job_id = %s AND phase_id = %s FOR UPDATE", self.key)
            self.locked.set()
            self.timed_out = not self.release.wait(HOLD_AT_MOST_S)


async def test_a_commit_waiting_for_the_database_does_not_stop_the_loop(postgres_url):
    store = open_storage(postgres_url).store
    try:
        store.get_or_create_job("j", "proj", 1)
        store.insert_phase(PhaseRow(job_id="j", phase_id="p", ordinal=0, project_id="proj",
                                    status=PhaseStatus.RUNNING, create_time_ns=1))
        writer = EventWriter(store)
        log = PhaseEventLog(store, "j", "p", writer=writer)
        sub = log.subscribe(0)
        first = asyncio.ensure_future(anext(sub))
        lock = RowLock(postgres_url, "j", "p")
        lock.start()
        assert await asyncio.to_thread(lock.locked.wait, 10)
        log.publish([EventRow(s, s, "k", b"e") for s in (1, 2, 3)])
        await asyncio.sleep(0.2)  # the loop runs while the commit waits for the lock
        assert not lock.timed_out, "the loop stood still until the lock holder gave up"
        assert not first.done() and log.last_sequence == 0  # not committed: not offered
        lock.release.set()
        delivered = await asyncio.wait_for(first, 10)
        assert (delivered.first_sequence, delivered.last_sequence) == (1, 3)
        assert [r.sequence for r in store.read_events("j", "p", 0, 10)] == [1, 2, 3]
        await sub.aclose()
        if hasattr(writer, "close"):
            writer.close()
        await asyncio.to_thread(lock.join, 10)
    finally:
        store.close()
