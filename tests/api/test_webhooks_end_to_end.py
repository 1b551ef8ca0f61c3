"""Webhooks end to end: the real server, the real CLI against the scripted API, a real receiver that
verifies every signature with ``standardwebhooks`` (issue 26's "Done when").

The time from the held call's event to the webhook's arrival is printed, not asserted: the
benchmark (benchmarks/bench_webhooks.py) measures it on a quiet machine.
"""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from support.runner_server import replica_pair
from support.streams import PhaseCall, breakpoint_hit, queued, start_phase
from support.webhook_receiver import WebhookReceiver

from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.api.errors import error_info
from helix_runner.offline import Reply
from helix_runner.webhook_http.signing import new_secret

pytestmark = pytest.mark.real_cli

EVENTS = [res.WEBHOOK_EVENT_TYPE_PHASE_AWAITING_APPROVAL, res.WEBHOOK_EVENT_TYPE_PHASE_FINISHED,
          res.WEBHOOK_EVENT_TYPE_JOB_FINISHED]


@pytest.fixture
def receiver():
    r = WebhookReceiver(new_secret()).start()
    yield r
    r.stop()


async def subscribe(stub, receiver: WebhookReceiver, events=EVENTS, **fields) -> str:
    made = await stub.CreateWebhook(pb.CreateWebhookRequest(url=receiver.url, events=events, secret=receiver.secret,
                                                            **fields), timeout=10)
    return made.webhook.webhook_id


async def test_a_phase_held_at_a_breakpoint_tells_the_operator_with_a_signature_their_code_verifies(
        claude_binary, scripted_api, runner_factory, receiver):
    api = scripted_api([Reply.tool_use("Bash", {"command": "echo deploy"}), Reply.text("Deployed.")])
    async with runner_factory(api, webhook_private_allow=[receiver.allow],
                              dashboard_url="https://runner.example.com") as runner:
        await subscribe(runner.stub, receiver)
        call = start_phase(runner, "job-hook", allowed_tools=["Bash"],
                           breakpoints=[res.Breakpoint(tool_name="Bash", once=True)])
        hit = await call.wait_for(breakpoint_hit)
        (held,) = await receiver.arrived(1)
        print(f"\nawaiting-approval webhook {(held.time_ns - hit.receive_time.ToNanoseconds()) / 1e6:.1f} ms "
              "after the held call's event")
        assert held.verified  # standardwebhooks.Webhook(secret).verify, in the receiver
        body = held.json
        assert body["type"] == "phase.awaiting_approval"
        assert body["data"] | {"cost_usd": 0, "reason": ""} == body["data"] | {
            "job_id": "job-hook", "phase_id": "p", "project_id": "default", "sequence": hit.sequence,
            "status": "AWAITING_APPROVAL", "tool_name": "Bash", "tool_use_id": hit.control.tool_use_id,
            "breakpoint_id": hit.control.breakpoint_id, "input_json": '{"command":"echo deploy"}',
            "url": "https://runner.example.com/#/jobs/job-hook/phases/p", "cost_usd": 0, "reason": ""}
        await runner.stub.ResolveToolCall(pb.ResolveToolCallRequest(
            **call.ids(), tool_use_id=hit.control.tool_use_id, approve=pb.ApproveDecision()), timeout=10)
        result = await call.finish()
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        got = await receiver.arrived(3)
    assert [r.json["type"] for r in got] == ["phase.awaiting_approval", "phase.finished", "job.finished"]
    assert all(r.verified for r in got) and len({r.webhook_id for r in got}) == 3
    finished = got[1].json["data"]
    assert (finished["status"], finished["sequence"]) == ("SUCCEEDED", result.last_sequence)
    assert got[1].json["data"]["sequence"] > got[0].json["data"]["sequence"]


async def test_a_refusal_by_a_full_queue_is_told(claude_binary, scripted_api, runner_factory, receiver):
    api = scripted_api([Reply.tool_use("Bash", {"command": "echo one"}), Reply.text("Done.")])
    async with runner_factory(api, webhook_private_allow=[receiver.allow], max_running_phases=1,
                              max_queued_phases=1) as runner:
        await subscribe(runner.stub, receiver, [res.WEBHOOK_EVENT_TYPE_QUEUE_FULL])
        holding = start_phase(runner, "job-a", allowed_tools=["Bash"],
                              breakpoints=[res.Breakpoint(tool_name="Bash", once=True)])
        await holding.wait_for(breakpoint_hit)
        waiting = PhaseCall(runner.stub, "job-b", "p", runner.workdir)
        await waiting.wait_for(queued)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await PhaseCall(runner.stub, "job-c", "p", runner.workdir).finish()
        assert error_info(refused.value).reason == "QUEUE_FULL"
        (told,) = await receiver.arrived(1)
        for call in (holding, waiting):
            await runner.stub.CancelPhase(pb.CancelPhaseRequest(**call.ids()), timeout=30)
    assert told.verified and told.json["type"] == "queue.full"
    assert (told.json["data"]["job_id"], told.json["data"]["scope"]) == ("job-c", "server")


async def test_a_delivery_pending_when_the_server_stops_is_delivered_after_it_starts_again(
        claude_binary, scripted_api, runner_factory, receiver):
    receiver.down()  # every attempt fails
    config = {"webhook_private_allow": [receiver.allow], "webhook_initial_backoff_seconds": 0.2,
              "webhook_backoff_multiplier": 1.0, "webhook_max_backoff_seconds": 0.5}
    async with runner_factory(scripted_api([Reply.text("Done.")]), **config) as runner:
        await subscribe(runner.stub, receiver, [res.WEBHOOK_EVENT_TYPE_PHASE_FINISHED])
        _, result = await runner.run_phase("hello", job_id="job-r")
        deadline = time.monotonic() + 30
        while True:
            (d,) = (await runner.stub.ListWebhookDeliveries(pb.ListWebhookDeliveriesRequest(), timeout=10)).deliveries
            if d.attempt_count >= 2 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        assert d.state == res.WEBHOOK_DELIVERY_STATE_PENDING and d.attempt_count >= 2
        assert d.attempts[0].status_code == 0 and "ConnectError" in d.attempts[0].error
    receiver.start()  # up again, while the server is stopped
    async with runner_factory(None, **config) as restarted:  # the same data directory
        (got,) = await receiver.arrived(1)
        await asyncio.sleep(0.3)
        (d,) = (await restarted.stub.ListWebhookDeliveries(pb.ListWebhookDeliveriesRequest(), timeout=10)).deliveries
    assert got.verified and got.webhook_id == d.delivery_id and got.json["data"]["sequence"] == result.last_sequence
    assert d.state == res.WEBHOOK_DELIVERY_STATE_DELIVERED and d.attempts[-1].status_code == 200


async def test_two_replicas_deliver_each_event_once(claude_binary, scripted_api, postgres_url, tmp_path, receiver):
    script = [Reply.text("Done.")] * 3
    async with replica_pair(tmp_path, postgres_url, scripted_api(script), scripted_api(script),
                            webhook_private_allow=[receiver.allow]) as (a, b):
        await subscribe(a.stub, receiver, [res.WEBHOOK_EVENT_TYPE_PHASE_FINISHED])
        deadline = time.monotonic() + 10
        while not b.server.service.webhooks.any:  # B reads subscriptions made on A at its next poll
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        runs = [a.run_phase("hi", job_id=f"job-a{i}") for i in range(3)] + \
               [b.run_phase("hi", job_id=f"job-b{i}") for i in range(3)]
        results = [r for _, r in await asyncio.gather(*runs)]
        assert all(r.status == res.PHASE_STATUS_SUCCEEDED for r in results)
        got = await receiver.arrived(6)
        await asyncio.sleep(2.5)  # two poll intervals of both replicas: a second delivery would have come
        log = (await b.stub.ListWebhookDeliveries(pb.ListWebhookDeliveriesRequest(), timeout=10)).deliveries
    got = receiver.snapshot()
    assert len(got) == 6 and len({r.webhook_id for r in got}) == 6 and all(r.verified for r in got)
    assert sorted(r.json["data"]["job_id"] for r in got) == ["job-a0", "job-a1", "job-a2", "job-b0", "job-b1",
                                                             "job-b2"]
    assert sorted(d.delivery_id for d in log) == sorted(r.webhook_id for r in got)
    assert all(d.state == res.WEBHOOK_DELIVERY_STATE_DELIVERED and d.attempt_count == 1 for d in log)
    assert {d.attempts[0].replica_id for d in log} <= {"replica-a", "replica-b"}


async def test_a_retry_and_a_crossed_cost_threshold_are_told(claude_binary, scripted_api, runner_factory, receiver):
    from google.protobuf.duration_pb2 import Duration

    from helix_runner.offline import ApiError, Usage

    api = scripted_api([
        Reply.tool_use("Bash", {"command": "echo first"}, usage=Usage(input_tokens=100_000, output_tokens=50)),
        ApiError(529, times=3),  # the harness gives the CLI 2 retries of its own: all three fail
        Reply.text("Done after the overload.", usage=Usage(input_tokens=100_000, output_tokens=20)),
    ])
    async with runner_factory(api, webhook_private_allow=[receiver.allow]) as runner:
        await subscribe(runner.stub, receiver, [res.WEBHOOK_EVENT_TYPE_PHASE_RETRY_SCHEDULED,
                                                res.WEBHOOK_EVENT_TYPE_PHASE_COST_THRESHOLD],
                        cost_threshold_usd=0.0001)
        _, result = await runner.run_phase("echo, then say done", allowed_tools=["Bash"], deadline=120,
                                           retry=pb.RetryPolicy(max_attempts=3, initial_backoff=Duration(nanos=10**7)))
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        got = await receiver.arrived(2)
        await asyncio.sleep(0.5)  # a second threshold crossing would have come by now
    got = receiver.snapshot()
    assert sorted(r.json["type"] for r in got) == ["phase.cost_threshold", "phase.retry_scheduled"]
    assert all(r.verified for r in got)
    retried = next(r.json["data"] for r in got if r.json["type"] == "phase.retry_scheduled")
    assert (retried["attempt"], retried["max_attempts"], retried["end_kind"]) == (1, 3, "API_OVERLOADED")
    crossed = next(r.json["data"] for r in got if r.json["type"] == "phase.cost_threshold")
    assert crossed["previous_cost_usd"] < 0.0001 <= crossed["cost_usd"]
