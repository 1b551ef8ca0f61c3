"""The webhook outbox in the event writer (issue 26 on issue 25's writer): the deliveries a run's
events cause are committed in the transaction of those events and of the status handed over with
them, on both stores; the dispatcher is woken after that commit; and ``job.finished`` counts a status
handed to the writer that is not committed yet.

tests/phases/test_event_writer.py covers the refusals (fence, a batch the database will not take),
tests/store/test_postgres_writer.py the PostgreSQL connection (round trips, a retried batch).
"""

from __future__ import annotations

import psycopg

from helix_runner.api.proto_records import ProtoRecordEncoder
from helix_runner.config import ServerConfig
from helix_runner.domain.events import Event, PhaseStatusChanged
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.phases.event_log import EventWriter, PhaseEventLog
from helix_runner.phases.service import PhaseService
from helix_runner.phases.webhooks import Webhooks
from helix_runner.store.factory import open_storage
from helix_runner.store.protocol import EventRow, OutboxRow, PhaseRow, WebhookRow
from helix_runner.store.sqlite_store import SqliteStore


def delivery(delivery_id: str, sequence: int, phase: str = "p") -> OutboxRow:
    return OutboxRow(delivery_id, "wh_1", "phase.finished", "j", phase, sequence, b"{}", 1)


class Transactions:
    """Which transaction wrote what, read back from the database itself: PostgreSQL's ``xmin`` (the
    id of the transaction that wrote a row's current version); SQLite's statement trace between
    ``BEGIN`` and ``COMMIT`` on the store's one write connection."""

    def __init__(self, store, url: str):
        self.store, self.url = store, url
        self.statements: list[str] = []
        if isinstance(store, SqliteStore):
            store._db.set_trace_callback(self.statements.append)

    def of_postgres(self, sql: str, *args: object) -> set[str]:
        with psycopg.connect(self.url) as conn:
            return {r[0] for r in conn.execute(sql, args).fetchall()}

    def writing_deliveries(self) -> list[str]:
        """SQLite: the statements of each transaction since this observer started that wrote deliveries."""
        transactions, current = [], None
        for statement in self.statements:
            if statement.startswith("BEGIN"):
                current = []
            elif statement == "COMMIT":
                transactions.append(current)
                current = None
            elif current is not None:
                current.append(statement)
        return [" | ".join(t) for t in transactions if any("webhook_deliveries" in s for s in t)]


async def test_a_status_its_event_and_the_deliveries_it_causes_commit_in_one_transaction(database_url):
    store = open_storage(database_url).store
    try:
        store.get_or_create_job("j", "proj", 1)
        store.insert_phase(PhaseRow(job_id="j", phase_id="p", ordinal=0, project_id="proj",
                                    status=PhaseStatus.RUNNING, create_time_ns=1))
        writer = EventWriter(store)
        log = PhaseEventLog(store, "j", "p", writer=writer)
        woken: list[list[str]] = []
        # The dispatcher's wake-up: what it would find then.
        writer.on_outbox = lambda: woken.append(
            [d.delivery_id for d in store.list_webhook_deliveries(None, "j", "p", (), 10)])
        log.publish([EventRow(1, 1, "k", b"e1")])
        await writer.committed()
        seen = Transactions(store, database_url)
        # In one loop turn, as PhaseRun.set_status hands them over: the status, then its event with
        # the deliveries it causes.
        writer.update_phase("j", "p", 5, status=PhaseStatus.SUCCEEDED)
        log.publish([EventRow(2, 2, "k", b"e2")], outbox=[delivery("m1", 2), delivery("m2", 2)])
        assert woken == []  # nothing is committed within the turn
        await writer.committed()
        assert woken == [["m2", "m1"]]  # once, after the commit (newest first)
        writer.close()
        if isinstance(store, SqliteStore):
            (tx,) = seen.writing_deliveries()
            assert "INSERT INTO events" in tx and "UPDATE phases SET status" in tx
        else:
            together = seen.of_postgres(
                "SELECT xmin::text FROM webhook_deliveries WHERE delivery_id IN ('m1', 'm2') "
                "UNION SELECT xmin::text FROM events WHERE job_id = 'j' AND phase_id = 'p' AND sequence = 2 "
                "UNION SELECT xmin::text FROM phases WHERE job_id = 'j' AND phase_id = 'p'")
            before = seen.of_postgres("SELECT xmin::text FROM events WHERE job_id = 'j' AND sequence = 1")
            assert len(together) == 1 and together != before  # one transaction, and not just any
        assert store.get_phase("j", "p").status is PhaseStatus.SUCCEEDED
        assert [r.sequence for r in store.read_events("j", "p", 0, 10)] == [1, 2]
    finally:
        store.close()


async def test_the_last_phase_of_a_job_to_end_finishes_it_while_the_others_status_is_not_committed(tmp_path):
    """Two phases of a job end in one loop turn (on PostgreSQL: within the writer thread's round
    trips): the second to end must see the first's final status, which the writer still holds."""
    store = SqliteStore(tmp_path / "db.sqlite3")
    try:
        store.get_or_create_job("j", "proj", 1)
        for phase in ("a", "b"):
            store.insert_phase(PhaseRow(job_id="j", phase_id=phase, ordinal=0, project_id="proj",
                                        status=PhaseStatus.RUNNING, create_time_ns=1))
        store.create_webhook(WebhookRow("wh_1", "", "https://hooks.example.com/x", "whsec_" + "A" * 32,
                                        ("phase.finished", "job.finished"), (), None, "standard", "", "api", 1))
        webhooks = Webhooks(store)
        webhooks.refresh()
        service = PhaseService(ServerConfig(data_dir=tmp_path / "data", workspace_roots=(tmp_path,)), store,
                               ProtoRecordEncoder(), containment=None, server_env={"PATH": "/usr/bin:/bin"},
                               webhooks=webhooks)
        # Phase a ended: its status is handed to the writer, committed at the end of this turn.
        service.writer.update_phase("j", "a", 5, status=PhaseStatus.SUCCEEDED)
        assert store.get_phase("j", "a").status is PhaseStatus.RUNNING
        ended = Event(4, 6, "", "", "", "", PhaseStatusChanged(PhaseStatus.RUNNING, PhaseStatus.FAILED, "exit 1"))
        notifier = service.notifier_of(store.get_phase("j", "b"))
        assert [r.event_type for r in notifier.outbox([ended])] == ["phase.finished", "job.finished"]
        await service.writer.committed()
        # Committed, the store says so itself: b's end would be the job's end all the same.
        assert service.writer.pending_statuses("j") == {}
        assert [r.event_type for r in service.notifier_of(store.get_phase("j", "b")).outbox([ended])] == [
            "phase.finished", "job.finished"]
        service.writer.close()
    finally:
        store.close()
