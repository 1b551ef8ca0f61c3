"""Per-project spend quotas from inside real phases (issue 32 item 3): a crossing pauses the phase
before its next tool call, a new phase is refused with a QuotaFailure, raising the quota lets it go
on; two replicas enforce one quota together."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from support.runner_server import replica_pair
from support.streams import Stream
from support.webhook_receiver import WebhookReceiver

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.api.errors import error_info, quota_failure
from helix_runner.offline import Reply
from helix_runner.offline.script import Usage
from helix_runner.webhook_http.signing import new_secret

TOOL_TURNS = 4


# One output token: the usage a message starts with is then its whole usage, so the ledger knows a
# turn's full cost at the tool boundary (with more, the CLI's message carries the start's usage and
# the rest arrives with the turn's result; the quota then sees it one turn later).
USAGE = Usage(input_tokens=100, output_tokens=1)


def script(tag: str) -> list[Reply]:
    """TOOL_TURNS Bash calls then a text: TOOL_TURNS + 1 turns of one same cost each."""
    return [Reply.tool_use("Bash", {"command": f"echo {tag}-{i}"}, usage=USAGE) for i in range(TOOL_TURNS)] + \
        [Reply.text("Done.", usage=USAGE)]


def start(runner, job_id: str, project: str) -> Stream:
    request = pb.RunPhaseRequest(job_id=job_id, phase_id="p", project_id=project, prompt="go",
                                 working_dir=str(runner.workdir), options=pb.PhaseOptions(allowed_tools=["Bash"]))
    return Stream(runner.stub.RunPhase(request, timeout=120))


def quota_pause(e) -> bool:
    return e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_PAUSE_REQUESTED and \
        "quota" in e.control.message


def paused(e) -> bool:
    return e.HasField("status_changed") and e.status_changed.to_status == res.PHASE_STATUS_PAUSED


async def turn_cost(runner, project: str) -> float:
    """What one turn costs: a phase of the same script in a project without a quota."""
    _, result = await start(runner, f"calibrate-{project}", project).finish()
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    totals = (await runner.stub.GetCostTotals(pb.GetCostTotalsRequest(project_id=project), timeout=10)).totals
    cost = totals.computed_usd
    assert cost > 0
    return cost / (TOOL_TURNS + 1)


async def test_a_phase_that_crosses_its_project_s_quota_pauses_and_goes_on_once_it_is_raised(
        claude_binary, scripted_api, runner_factory):
    receiver = WebhookReceiver(new_secret()).start()
    try:
        await crossing(claude_binary, scripted_api, runner_factory, receiver)
    finally:
        receiver.stop()


async def crossing(claude_binary, scripted_api, runner_factory, receiver):
    async with runner_factory(scripted_api(script("calib") + script("q")),
                              webhook_private_allow=[receiver.allow]) as runner:
        await runner.stub.CreateWebhook(pb.CreateWebhookRequest(
            url=receiver.url, secret=receiver.secret, project_id="team-q",
            events=[res.WEBHOOK_EVENT_TYPE_QUOTA_EXCEEDED]), timeout=10)
        c = await turn_cost(runner, "calib")
        await runner.stub.SetProjectQuota(pb.SetProjectQuotaRequest(project_id="team-q", spend_usd_per_day=2.5 * c),
                                          timeout=10)
        phase = start(runner, "job-q", "team-q")
        told = await phase.wait_for(quota_pause)
        await phase.wait_for(paused)
        ran = [e for e in phase.events if e.HasField("tool_call_finished")]
        with pytest.raises(grpc.aio.AioRpcError) as refused:  # the project is at its cap: nothing new starts
            await start(runner, "job-q2", "team-q").finish()
        quota = (await runner.stub.GetProjectQuota(pb.GetProjectQuotaRequest(project_id="team-q"), timeout=10)).quota
        await runner.stub.SetProjectQuota(pb.SetProjectQuotaRequest(project_id="team-q", spend_usd_per_day=100 * c),
                                          timeout=10)
        await runner.stub.ResumePhase(pb.ResumePhaseRequest(job_id="job-q", phase_id="p"), timeout=10)
        _, result = await phase.finish()
        told_hooks = await receiver.arrived(2)
    assert "spend_usd_per_day" in told.control.message
    # Turns 1-3 cost 3c >= 2.5c: the third call waits; the first two ran before the cap was reached.
    assert len(ran) == 2
    assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error_info(refused.value).reason == "QUOTA_EXCEEDED"
    (violation,) = quota_failure(refused.value).violations
    assert violation.subject == "project:team-q" and "spend_usd_per_day" in violation.description
    assert quota.spend_usd_per_day == pytest.approx(2.5 * c) and quota.spent_today_usd >= 2.5 * c
    assert result.status == res.PHASE_STATUS_SUCCEEDED
    # The subscribers were told twice: the phase paused, then the new one refused.
    assert [(h.json["type"], h.json["data"]["action"], h.json["data"]["job_id"]) for h in told_hooks] == [
        ("quota.exceeded", "paused", "job-q"), ("quota.exceeded", "refused", "job-q2")]
    assert all(h.verified and h.json["data"]["quota"] == "spend_usd_per_day" for h in told_hooks)


async def test_two_replicas_enforce_one_spend_quota_together(claude_binary, scripted_api, postgres_url, tmp_path):
    phases_per_replica = 3
    replies = [r for i in range(phases_per_replica + 1) for r in script(f"r{i}")]
    async with replica_pair(tmp_path, postgres_url, scripted_api(replies), scripted_api(replies)) as (a, b):
        c = await turn_cost(a, "calib")
        limit = 4 * c  # less than one phase's whole cost (5c): most phases must stop early
        await b.stub.SetProjectQuota(pb.SetProjectQuotaRequest(project_id="shared", spend_usd_per_day=limit),
                                     timeout=10)
        phases = [start(runner, f"job-{name}{i}", "shared") for name, runner in (("a", a), ("b", b))
                  for i in range(phases_per_replica)]

        async def settled(phase: Stream) -> str:
            for _ in range(600):
                if phase.result is not None:
                    return "ended"
                if any(paused(e) for e in phase.events):
                    return "paused"
                await asyncio.sleep(0.05)
            raise AssertionError("a phase neither paused nor ended within 30 s")

        states = await asyncio.gather(*(settled(p) for p in phases))
        quota = (await a.stub.GetProjectQuota(pb.GetProjectQuotaRequest(project_id="shared"), timeout=10)).quota
        for phase, name in zip(phases, [f"job-{n}{i}" for n in "ab" for i in range(phases_per_replica)], strict=True):
            if phase.result is None:
                owner = a if name.startswith("job-a") else b
                await owner.stub.CancelPhase(pb.CancelPhaseRequest(job_id=name, phase_id="p"), timeout=30)
                await phase.finish()
    spent = quota.spent_today_usd
    assert "paused" in states
    # Every phase started before the cap was reached, and each may finish the turn it is in when
    # the total crosses it: the project ends at most one turn per running phase over its cap (here
    # 6 phases: measured 5 turns over, i.e. one phase's whole cost; docs/tenancy.md).
    assert limit <= spent <= limit + len(phases) * c + 1e-9, (spent, limit, c)
