"""Network breakpoints from inside a real phase (issue 31 item 2): the real CLI's Bash runs curl
through the egress proxy; a breakpoint holds the request, the phase is AWAITING_APPROVAL, and an
approval lets it complete, a denial's reason reaches the tool (so the model reads it), an approval
for the project becomes a stored allowance (listed, removable), and an undecided request is denied after
egress_hold_timeout_seconds. Also from another replica, naming who decided."""

from __future__ import annotations

import pytest
from support.cli_verbs import helix
from support.http_service import loopback_service
from support.runner_server import replica_pair
from support.streams import Stream

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.offline import Reply

pytestmark = pytest.mark.real_cli


@pytest.fixture
def service():
    with loopback_service(b"hello from the inside service\n") as address:
        yield address


def curl(address: str, tag: str) -> Reply:
    return Reply.tool_use("Bash", {"command": f"curl -s -m 60 http://{address}/{tag}; echo; echo rc=$?"})


def gateway(kind):
    return lambda e: e.HasField("gateway") and e.gateway.kind == kind


def awaiting(e) -> bool:
    return e.HasField("status_changed") and e.status_changed.to_status == res.PHASE_STATUS_AWAITING_APPROVAL


def start(runner, job_id: str, breakpoint: res.Breakpoint) -> Stream:
    request = pb.RunPhaseRequest(job_id=job_id, phase_id="p", prompt="go", working_dir=str(runner.workdir),
                                 options=pb.PhaseOptions(allowed_tools=["Bash"], breakpoints=[breakpoint]))
    return Stream(runner.stub.RunPhase(request, timeout=120))


def held_by(address: str) -> res.Breakpoint:
    return res.Breakpoint(breakpoint_id="net", egress=res.EgressCondition(host=address.split(":")[0]))


async def test_a_held_request_is_approved_denied_and_approved_for_the_project(claude_binary, scripted_api,
                                                                              runner_factory, service):
    api = scripted_api([curl(service, "one"), curl(service, "two"), curl(service, "three"), Reply.text("Done.")])
    async with runner_factory(api, egress_private_allow=[service]) as runner:
        phase = start(runner, "job-net", held_by(service))
        ids = {"job_id": "job-net", "phase_id": "p"}
        first = await phase.wait_for(gateway(ev.GATEWAY_EVENT_KIND_EGRESS_HELD))
        await phase.wait_for(awaiting)
        await runner.stub.ResolveEgressHold(pb.ResolveEgressHoldRequest(
            **ids, hold_id=first.gateway.hold_id, decision=pb.EGRESS_HOLD_DECISION_APPROVE_ONCE), timeout=10)
        second = await phase.wait_for(gateway(ev.GATEWAY_EVENT_KIND_EGRESS_HELD), after=first.sequence)
        denied = await helix(f"127.0.0.1:{runner.server.port}", "deny", "job-net", "p", second.gateway.hold_id,
                             "-m", "not during the release freeze")  # the CLI's deny, as an operator would
        assert denied.code == 0 and f"denied the network request to {service}" in denied.out, denied.err
        third = await phase.wait_for(gateway(ev.GATEWAY_EVENT_KIND_EGRESS_HELD), after=second.sequence)
        await runner.stub.ResolveEgressHold(pb.ResolveEgressHoldRequest(
            **ids, hold_id=third.gateway.hold_id, decision=pb.EGRESS_HOLD_DECISION_APPROVE_PROJECT), timeout=10)
        events, result = await phase.finish()
        allowances = (await runner.stub.ListEgressAllowances(pb.ListEgressAllowancesRequest(), timeout=10)).allowances
        # (What an allowance then lets through: tests/phases/test_egress_holds.py.)
        await runner.stub.DeleteEgressAllowance(pb.DeleteEgressAllowanceRequest(host=service), timeout=10)
        left = (await runner.stub.ListEgressAllowances(pb.ListEgressAllowancesRequest(), timeout=10)).allowances
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    outputs = [e.tool_call_finished.content_preview for e in events if e.HasField("tool_call_finished")]
    assert "hello from the inside service" in outputs[0] and "rc=0" in outputs[0]
    assert "denied by the operator: not during the release freeze" in outputs[1]  # what the model reads
    assert "hello from the inside service" in outputs[2]
    decided = [(e.gateway.kind, e.gateway.hold_id, e.gateway.actor, e.gateway.message) for e in events
               if e.HasField("gateway") and e.gateway.kind in (ev.GATEWAY_EVENT_KIND_EGRESS_APPROVED,
                                                               ev.GATEWAY_EVENT_KIND_EGRESS_DENIED)]
    assert decided == [
        (ev.GATEWAY_EVENT_KIND_EGRESS_APPROVED, first.gateway.hold_id, "admin", "approved once"),
        (ev.GATEWAY_EVENT_KIND_EGRESS_DENIED, second.gateway.hold_id, "admin", "not during the release freeze"),
        (ev.GATEWAY_EVENT_KIND_EGRESS_APPROVED, third.gateway.hold_id, "admin", "approved for the project"),
    ]
    assert (first.gateway.destination, first.gateway.method) == (service, "GET")
    assert first.gateway.path == "/one" and first.gateway.breakpoint_id == "net"
    assert [(a.project_id, a.host, a.created_by) for a in allowances] == [("default", service, "admin")]
    assert list(left) == []


async def test_an_undecided_request_is_denied_after_the_hold_timeout(claude_binary, scripted_api, runner_factory,
                                                                     service):
    api = scripted_api([curl(service, "wait"), Reply.text("Done.")])
    async with runner_factory(api, egress_private_allow=[service], egress_hold_timeout_seconds=1.5) as runner:
        events, result = await start(runner, "job-timeout", held_by(service)).finish()
    (finished,) = [e.tool_call_finished for e in events if e.HasField("tool_call_finished")]
    assert "not decided within 1.5 s (egress_hold_timeout_seconds)" in finished.content_preview
    denied = [e.gateway for e in events if e.HasField("gateway") and
              e.gateway.kind == ev.GATEWAY_EVENT_KIND_EGRESS_DENIED]
    assert len(denied) == 1 and denied[0].actor == ""
    assert result.status == res.PHASE_STATUS_SUCCEEDED


async def test_a_request_held_on_one_replica_is_approved_through_another(claude_binary, scripted_api, postgres_url,
                                                                         tmp_path, service):
    script = [curl(service, "across"), Reply.text("Done.")]
    async with replica_pair(tmp_path, postgres_url, scripted_api(script), scripted_api(script),
                            egress_private_allow=[service]) as (a, b):
        phase = start(a, "job-across", held_by(service))
        held = await phase.wait_for(gateway(ev.GATEWAY_EVENT_KIND_EGRESS_HELD))
        phase_row = (await b.stub.GetJob(pb.GetJobRequest(job_id="job-across"), timeout=10)).job.phases[0]
        await b.stub.ResolveEgressHold(pb.ResolveEgressHoldRequest(
            job_id="job-across", phase_id="p", hold_id=held.gateway.hold_id,
            decision=pb.EGRESS_HOLD_DECISION_APPROVE_ONCE), timeout=10)
        events, result = await phase.finish()
    assert phase_row.status == res.PHASE_STATUS_AWAITING_APPROVAL and held.gateway.hold_id in phase_row.status_reason
    assert result.status == res.PHASE_STATUS_SUCCEEDED
    (output,) = [e.tool_call_finished.content_preview for e in events if e.HasField("tool_call_finished")]
    assert "hello from the inside service" in output
    (approved,) = [e.gateway for e in events if e.HasField("gateway")
                   and e.gateway.kind == ev.GATEWAY_EVENT_KIND_EGRESS_APPROVED]
    assert approved.actor == "admin"


async def test_a_request_the_tool_gives_up_on_is_held_no_longer(claude_binary, scripted_api, runner_factory, service):
    """curl stops waiting after 2 s: the hold goes with its connection, and the phase goes on (it would
    otherwise show AWAITING_APPROVAL until egress_hold_timeout_seconds, here the default 300 s)."""
    api = scripted_api([Reply.tool_use("Bash", {"command": f"curl -s -m 2 http://{service}/slow; echo rc=$?"}),
                        Reply.text("Done.")])
    async with runner_factory(api, egress_private_allow=[service]) as runner:
        events, result = await start(runner, "job-gone", held_by(service)).finish(limit=60)
    assert result.status == res.PHASE_STATUS_SUCCEEDED
    (output,) = [e.tool_call_finished.content_preview for e in events if e.HasField("tool_call_finished")]
    assert "rc=28" in output  # curl's "operation timed out"
    (gone,) = [e.gateway for e in events if e.HasField("gateway") and
               e.gateway.kind == ev.GATEWAY_EVENT_KIND_EGRESS_DENIED]
    assert gone.message == "the request's connection closed while it was held"
    statuses = [e.status_changed.to_status for e in events if e.HasField("status_changed")]
    assert res.PHASE_STATUS_AWAITING_APPROVAL in statuses and statuses[-1] == res.PHASE_STATUS_SUCCEEDED
