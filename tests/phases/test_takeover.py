"""Dead-replica takeover on PostgreSQL: a stopped replica's phases end INTERRUPTED, told like recovery."""

from __future__ import annotations

from support.runner_server import collect
from support.webhook_receiver import WebhookReceiver

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.api.proto_records import ProtoRecordEncoder
from helix_runner.domain.addresses import OperatorExceptions
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.webhooks import WebhookEvent, WebhookSpec
from helix_runner.phases.takeover import REASON, Takeover
from helix_runner.phases.webhooks import Webhooks
from helix_runner.store.postgres_store import PostgresStore
from helix_runner.store.protocol import EventRow, PhaseRow
from helix_runner.webhook_http.signing import new_secret

# What the dead replica recorded before it stopped: its running cost and one ended attempt (a retry).
COST = res.PhaseCost(reported_usd=0.25, computed_usd=0.5)
ATTEMPTS = res.Phase(attempts=[res.Attempt(number=1, status=res.PHASE_STATUS_FAILED, retryable=True,
                                           session_id="sess")])


def running_phase_of_a_dead_replica(url: str, cluster, job: str = "j", phase: str = "x") -> None:
    dead = PostgresStore(url, heartbeat=False)
    dead.get_or_create_job(job, "p", 1)
    dead.insert_phase(PhaseRow(job_id=job, phase_id=phase, ordinal=0, project_id="p", status=PhaseStatus.RUNNING,
                               create_time_ns=1, start_time_ns=2, session_id="sess",
                               cost_pb=COST.SerializeToString(), reported_usd=0.25, computed_usd=0.5,
                               attempts_pb=ATTEMPTS.SerializeToString()))
    dead.append_events([(job, phase, [EventRow(1, 3, "k", ev.StreamEvent(sequence=1).SerializeToString())])])
    # Its process (and heartbeat) stopped without a clean close: the lease runs out on its own.
    cluster.set_lease(url, dead.replica_id, -1)
    dead._pool.close()


def test_a_sweep_records_the_terminal_event_and_result(postgres_url, postgres_cluster):
    running_phase_of_a_dead_replica(postgres_url, postgres_cluster)
    survivor = PostgresStore(postgres_url, heartbeat=False)
    try:
        swept = Takeover(survivor.cluster, ProtoRecordEncoder(), interval_seconds=1).sweep()
        assert [(r.phase_id, r.status) for r in swept] == [("x", PhaseStatus.RUNNING)]
        last = ev.StreamEvent.FromString(survivor.read_events("j", "x", 1, 10)[0].body)
        assert last.sequence == 2 and last.job_id == "j" and last.session_id == "sess"
        assert last.status_changed.from_status == res.PHASE_STATUS_RUNNING
        assert last.status_changed.to_status == res.PHASE_STATUS_INTERRUPTED
        row = survivor.get_phase("j", "x")
        result = res.PhaseResult.FromString(row.result_pb)
        assert (result.status, result.reason, result.last_sequence) == (res.PHASE_STATUS_INTERRUPTED, REASON, 2)
        assert row.status is PhaseStatus.INTERRUPTED and row.status_reason == REASON
        # The result keeps what the dead replica recorded: its cost and its ended attempts.
        assert result.cost == COST and list(result.attempts[:1]) == list(ATTEMPTS.attempts)
        # Attempt 2 ran when the replica died: listed after the stored one, ended by the shutdown.
        running = result.attempts[1]
        assert (running.number, running.status, running.end_kind, running.reason, running.last_sequence) == (
            2, res.PHASE_STATUS_INTERRUPTED, res.ATTEMPT_END_KIND_SERVER_SHUTDOWN, REASON, 1)
    finally:
        survivor.close()


async def test_a_server_on_postgres_takes_over_at_start_and_answers_from_the_database(
        postgres_url, postgres_cluster, runner_factory):
    running_phase_of_a_dead_replica(postgres_url, postgres_cluster)
    async with runner_factory(None, database_url=postgres_url) as runner:
        job = (await runner.stub.GetJob(pb.GetJobRequest(job_id="j"), timeout=10)).job
        assert job.status == res.PHASE_STATUS_INTERRUPTED
        assert job.phases[0].result.reason == REASON
        events, result = await collect(runner.stub.WatchPhase(pb.WatchPhaseRequest(job_id="j", phase_id="x"),
                                                              timeout=10))
        assert [e.sequence for e in events] == [1, 2] and result.status == res.PHASE_STATUS_INTERRUPTED
        # WatchPhase's result and GetJob's agree, cost and attempts included.
        assert result == job.phases[0].result and result.cost == COST
        assert [a.number for a in job.phases[0].attempts] == [1, 2]
        assert list(job.phases[0].attempts) == list(result.attempts)
        (replica,) = runner.server.cluster.live_replicas()
        assert replica.replica_id == runner.server.cluster.replica_id
    # A clean stop ends the lease at once: nobody has to wait for it to run out.
    assert postgres_cluster.execute(postgres_url, "SELECT count(*) FROM replicas WHERE lease_expires_at > now()") \
        == [(0,)]


async def test_a_phase_taken_over_from_a_dead_replica_is_told_to_webhooks(postgres_url, postgres_cluster, runner_factory):
    receiver = WebhookReceiver(new_secret()).start()
    try:
        # The subscription exists before the replica dies; the survivor's start sweeps the phase.
        store = PostgresStore(postgres_url, heartbeat=False)
        Webhooks(store, exceptions=OperatorExceptions.parse([receiver.allow])).create(
            WebhookSpec(url=receiver.url, events=(WebhookEvent.PHASE_FINISHED,), secret=receiver.secret))
        store.close()
        running_phase_of_a_dead_replica(postgres_url, postgres_cluster)
        async with runner_factory(None, database_url=postgres_url, webhook_private_allow=[receiver.allow]):
            (told,) = await receiver.arrived(1)
    finally:
        receiver.stop()
    body = told.json
    assert told.verified and body["type"] == "phase.finished"
    assert (body["data"]["status"], body["data"]["sequence"], body["data"]["reason"]) == ("INTERRUPTED", 2, REASON)
    assert body["data"]["cost_usd"] == 0.25  # what the dead replica had recorded
