"""The webhook RPCs on the real server: secrets written once, refused destinations, config subscriptions,
the token on both transports (gRPC and Connect)."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from google.rpc import error_details_pb2
from support.webhook_receiver import WebhookReceiver

from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix.runner.v1.runner_service_connect import RunnerServiceClient
from helix_runner.api.errors import error_info
from helix_runner.config import ConfigError, load_config
from helix_runner.server import StartupError, start_server
from helix_runner.webhook_http.signing import check_secret, new_secret

TOKEN = "a-token-of-at-least-16-characters"
FINISHED = res.WEBHOOK_EVENT_TYPE_PHASE_FINISHED
HELD = res.WEBHOOK_EVENT_TYPE_PHASE_AWAITING_APPROVAL


async def test_a_webhook_is_created_listed_and_deleted_and_its_secret_is_shown_once(runner_factory, caplog):
    async with runner_factory(None, webhook_private_allow=["127.0.0.1:9"]) as runner:
        stub = runner.stub
        made = await stub.CreateWebhook(pb.CreateWebhookRequest(
            url="http://127.0.0.1:9/hook", events=[HELD, FINISHED], statuses=[res.PHASE_STATUS_FAILED],
            project_id="proj", description="on call"), timeout=10)
        assert check_secret(made.secret) is None  # made by the server, returned this once
        given = new_secret()
        mine = await stub.CreateWebhook(pb.CreateWebhookRequest(
            url="https://hooks.example.com/x", events=[res.WEBHOOK_EVENT_TYPE_PHASE_COST_THRESHOLD],
            cost_threshold_usd=2.5, format=res.WEBHOOK_FORMAT_SLACK, secret=given), timeout=10)
        assert mine.secret == ""  # the caller's own secret is never echoed
        listed = await stub.ListWebhooks(pb.ListWebhooksRequest(), timeout=10)
        assert [w.webhook_id for w in listed.webhooks] == [made.webhook.webhook_id, mine.webhook.webhook_id]
        first = listed.webhooks[0]
        assert (list(first.events), list(first.statuses), first.project_id, first.description, first.from_config) == (
            [HELD, FINISHED], [res.PHASE_STATUS_FAILED], "proj", "on call", False)
        assert listed.webhooks[1].cost_threshold_usd == 2.5 and listed.webhooks[1].format == res.WEBHOOK_FORMAT_SLACK
        assert made.secret not in str(listed) and given not in str(listed)
        only_other = await stub.ListWebhooks(pb.ListWebhooksRequest(project_id="other"), timeout=10)
        assert [w.webhook_id for w in only_other.webhooks] == [mine.webhook.webhook_id]  # server-wide only
        deleted = await stub.DeleteWebhook(pb.DeleteWebhookRequest(webhook_id=made.webhook.webhook_id), timeout=10)
        assert deleted.webhook.webhook_id == made.webhook.webhook_id and deleted.cancelled_deliveries == 0
        with pytest.raises(grpc.aio.AioRpcError) as gone:
            await stub.DeleteWebhook(pb.DeleteWebhookRequest(webhook_id=made.webhook.webhook_id), timeout=10)
        assert gone.value.code() is grpc.StatusCode.NOT_FOUND
        assert error_info(gone.value).reason == "WEBHOOK_NOT_FOUND"
        assert dict(error_info(gone.value).metadata) == {"webhook_id": made.webhook.webhook_id}
    assert made.secret not in caplog.text and given not in caplog.text  # never logged


@pytest.mark.parametrize(("request_fields", "code", "reason", "field"), [
    ({"url": "http://10.0.0.8/hook", "events": [FINISHED]}, "INVALID_ARGUMENT", "WEBHOOK_DESTINATION_REFUSED", "url"),
    ({"url": "http://[::ffff:169.254.169.254]/h", "events": [FINISHED]}, "INVALID_ARGUMENT",
     "WEBHOOK_DESTINATION_REFUSED", "url"),
    ({"url": "gopher://example.com/", "events": [FINISHED]}, "INVALID_ARGUMENT", "INVALID_FIELD", "url"),
    ({"url": "https://example.com/", "events": []}, "INVALID_ARGUMENT", "INVALID_FIELD", "events"),
    ({"url": "https://example.com/", "events": [0]}, "INVALID_ARGUMENT", "INVALID_FIELD", "events[0]"),
    ({"url": "https://example.com/", "events": [99]}, "INVALID_ARGUMENT", "INVALID_FIELD", "events[0]"),
    ({"url": "https://example.com/", "events": [FINISHED], "statuses": [res.PHASE_STATUS_RUNNING]},
     "INVALID_ARGUMENT", "INVALID_FIELD", "statuses"),
    ({"url": "https://example.com/", "events": [FINISHED], "secret": "hunter2hunter2hunter2"},
     "INVALID_ARGUMENT", "INVALID_FIELD", "secret"),
])
async def test_a_bad_webhook_is_refused_with_the_field_named(runner_factory, request_fields, code, reason, field):
    async with runner_factory(None) as runner:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await runner.stub.CreateWebhook(pb.CreateWebhookRequest(**request_fields), timeout=10)
        listed = await runner.stub.ListWebhooks(pb.ListWebhooksRequest(), timeout=10)
    info = error_info(refused.value)
    assert (refused.value.code().name, info.reason, info.metadata["field"]) == (code, reason, field)
    assert "hunter2" not in refused.value.details()  # a secret is never echoed, not even a bad one
    assert list(listed.webhooks) == []


async def test_the_config_files_webhooks_are_listed_and_cannot_be_deleted_through_the_api(runner_factory, tmp_path):
    secret_file = tmp_path / "hook-secret"
    secret_file.write_text(new_secret() + "\n")
    hooks = [{"id": "ops", "url": "https://hooks.example.com/ops", "events": ["phase.finished", "queue.full"],
              "statuses": ["failed"], "secret_file": str(secret_file)}]
    async with runner_factory(None, webhooks=hooks) as runner:
        (ops,) = (await runner.stub.ListWebhooks(pb.ListWebhooksRequest(), timeout=10)).webhooks
        assert (ops.webhook_id, ops.from_config, list(ops.statuses)) == ("ops", True, [res.PHASE_STATUS_FAILED])
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await runner.stub.DeleteWebhook(pb.DeleteWebhookRequest(webhook_id="ops"), timeout=10)
    assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(refused.value).reason == "WEBHOOK_FROM_CONFIG"


def test_a_bad_config_webhook_stops_the_start_with_one_line(tmp_path):
    base = {"data_dir": str(tmp_path / "d"), "workspace_roots": [str(tmp_path)]}
    s = {"secret_file": str(tmp_path / "secret")}
    for hooks, problem in (
        ([{"id": "x", "url": "http://192.168.1.1/h", "events": ["phase.finished"], **s}],
         "webhooks: x: url: 192.168.1.1 is a private address"),
        ([{"id": "x", "url": "https://e.com/h", "events": ["phase.done"], **s}], "x: events are among phase.finished"),
        ([{"id": "x", "url": "https://e.com/h", "events": ["phase.finished"], "colour": "red", **s}],
         "unknown key 'colour'"),
        ([{"id": "x", "url": "https://e.com/h", "events": ["phase.cost_threshold"], **s}],
         "cost_threshold_usd phase.cost_threshold needs a threshold"),
        ([{"id": "x", "url": "https://e.com/h", "events": ["phase.finished"]}], "x: secret_file is required"),
    ):
        with pytest.raises(ConfigError) as bad:
            load_config(flags={**base, "webhooks": hooks}, environ={})
        assert problem in str(bad.value)


async def test_an_unreadable_secret_file_stops_the_start(tmp_path):
    config = load_config(flags={"port": 0, "data_dir": str(tmp_path / "d"), "workspace_roots": [str(tmp_path)],
                                "webhooks": [{"id": "x", "url": "https://e.com/h", "events": ["phase.finished"],
                                              "secret_file": str(tmp_path / "missing")}]}, environ={})
    with pytest.raises(StartupError, match="webhooks: x: cannot read secret_file"):
        await start_server(config, server_env={})


async def test_creating_a_webhook_needs_the_token_on_grpc_and_on_connect(runner_factory, tmp_path: Path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    request = pb.CreateWebhookRequest(url="https://hooks.example.com/h", events=[FINISHED])
    async with runner_factory(None, web_port=0, auth_token_file=str(token_file)) as runner:
        with pytest.raises(grpc.aio.AioRpcError) as on_grpc:
            await runner.stub.CreateWebhook(request, timeout=10)
        async with RunnerServiceClient(runner.server.web.url.rstrip("/")) as client:
            with pytest.raises(ConnectError) as on_connect:
                await client.create_webhook(request)
            made = await client.create_webhook(request, headers={"authorization": f"Bearer {TOKEN}"})
        listed = await runner.stub.ListWebhooks(pb.ListWebhooksRequest(), metadata=(("authorization", f"Bearer {TOKEN}"),),
                                                timeout=10)
    assert on_grpc.value.code() is grpc.StatusCode.UNAUTHENTICATED
    assert on_connect.value.code is Code.UNAUTHENTICATED
    detail = on_connect.value.details[0]
    assert error_details_pb2.ErrorInfo.FromString(detail.message_bytes).reason == "UNAUTHENTICATED"
    assert [w.webhook_id for w in listed.webhooks] == [made.webhook.webhook_id]


async def test_the_delivery_log_pages_newest_first_with_attempts(runner_factory, tmp_path):
    receiver = WebhookReceiver(new_secret()).start()
    try:
        async with runner_factory(None, webhook_private_allow=[receiver.allow]) as runner:
            made = await runner.stub.CreateWebhook(pb.CreateWebhookRequest(
                url=receiver.url, events=[res.WEBHOOK_EVENT_TYPE_QUEUE_FULL], secret=receiver.secret), timeout=10)
            # Three refusals by a full queue, as PhaseService.start reports them (the real refusal of a
            # RunPhase: test_webhooks_end_to_end.py).
            for i in range(3):
                runner.server.service.webhooks.queue_full(f"job-{i}", "p", "default", _queue_full_error())
            await receiver.arrived(3)
            first = await runner.stub.ListWebhookDeliveries(pb.ListWebhookDeliveriesRequest(
                webhook_id=made.webhook.webhook_id, page_size=2), timeout=10)
            second = await runner.stub.ListWebhookDeliveries(pb.ListWebhookDeliveriesRequest(
                webhook_id=made.webhook.webhook_id, page_size=2, page_token=first.next_page_token), timeout=10)
            with pytest.raises(grpc.aio.AioRpcError) as mismatched:
                await runner.stub.ListWebhookDeliveries(pb.ListWebhookDeliveriesRequest(
                    page_size=2, page_token=first.next_page_token), timeout=10)
    finally:
        receiver.stop()
    jobs = [d.job_id for d in first.deliveries] + [d.job_id for d in second.deliveries]
    assert jobs == ["job-2", "job-1", "job-0"] and second.next_page_token == ""
    d = first.deliveries[0]
    assert (d.event, d.state, d.attempt_count, d.sequence) == (res.WEBHOOK_EVENT_TYPE_QUEUE_FULL,
                                                               res.WEBHOOK_DELIVERY_STATE_DELIVERED, 1, 0)
    assert [(a.attempt, a.status_code, a.error) for a in d.attempts] == [(1, 200, "")]
    assert d.attempts[0].latency.ToNanoseconds() > 0 and '"type":"queue.full"' in d.body
    assert error_info(mismatched.value).reason == "INVALID_PAGE_TOKEN"


def _queue_full_error():
    from helix_runner.errors import ErrorKind, RunnerError

    return RunnerError(ErrorKind.RESOURCE_EXHAUSTED, "QUEUE_FULL", "the admission queue is full (1 waiting)",
                       {"limit": "1", "scope": "server", "retry_after_ms": "1000"})


async def test_a_phase_a_crashed_server_left_running_is_told_when_the_server_starts_again(runner_factory, tmp_path):
    """SQLite, one process: recovery records the phase INTERRUPTED and its phase.finished in one transaction."""
    from helix_runner.domain.addresses import OperatorExceptions
    from helix_runner.domain.phase_status import PhaseStatus
    from helix_runner.domain.webhooks import WebhookEvent, WebhookSpec
    from helix_runner.phases.webhooks import Webhooks
    from helix_runner.store.protocol import EventRow, PhaseRow
    from helix_runner.store.sqlite_store import SqliteStore

    receiver = WebhookReceiver(new_secret()).start()
    try:
        store = SqliteStore(tmp_path / "data" / "helix-runner.sqlite3")  # what the crashed server left
        Webhooks(store, exceptions=OperatorExceptions.parse([receiver.allow])).create(WebhookSpec(
            url=receiver.url, events=(WebhookEvent.PHASE_FINISHED, WebhookEvent.JOB_FINISHED), secret=receiver.secret))
        store.get_or_create_job("j", "proj", 1)
        store.insert_phase(PhaseRow(job_id="j", phase_id="x", ordinal=0, project_id="proj",
                                    status=PhaseStatus.AWAITING_APPROVAL, create_time_ns=1, computed_usd=0.5))
        store.append_events([("j", "x", [EventRow(1, 2, "k", b"")])])
        store.close()
        async with runner_factory(None, webhook_private_allow=[receiver.allow]):
            got = await receiver.arrived(2)
    finally:
        receiver.stop()
    assert [r.json["type"] for r in got] == ["phase.finished", "job.finished"] and all(r.verified for r in got)
    data = got[0].json["data"]
    assert (data["status"], data["sequence"], data["cost_usd"], data["project_id"]) == ("INTERRUPTED", 2, 0.5, "proj")
