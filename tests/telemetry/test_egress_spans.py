"""Each egress decision of a real phase is an OTel span (helix.egress) and a count by decision
(helix_gateway_events_total{kind}): a request held by a network breakpoint, approved, then let
through (issue 31 item 1)."""

from __future__ import annotations

import pytest
from support.http_service import loopback_service
from support.streams import Stream
from support.telemetry import sample

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.offline import Reply

pytestmark = pytest.mark.real_cli


async def test_a_held_then_approved_request_is_three_egress_spans_and_counted(claude_binary, scripted_api,
                                                                             runner_factory, telemetry, spans):
    with loopback_service(b"ok") as address:
        api = scripted_api([Reply.tool_use("Bash", {"command": f"curl -s -m 60 http://{address}/x"}),
                            Reply.text("Done.")])
        async with runner_factory(api, egress_private_allow=[address], telemetry=telemetry) as runner:
            request = pb.RunPhaseRequest(job_id="job-spans", phase_id="p", prompt="go", working_dir=str(runner.workdir),
                                         options=pb.PhaseOptions(allowed_tools=["Bash"], breakpoints=[res.Breakpoint(
                                             egress=res.EgressCondition(host="127.0.0.2"))]))
            phase = Stream(runner.stub.RunPhase(request, timeout=120))
            held = await phase.wait_for(lambda e: e.HasField("gateway")
                                        and e.gateway.kind == ev.GATEWAY_EVENT_KIND_EGRESS_HELD)
            await runner.stub.ResolveEgressHold(pb.ResolveEgressHoldRequest(
                job_id="job-spans", phase_id="p", hold_id=held.gateway.hold_id,
                decision=pb.EGRESS_HOLD_DECISION_APPROVE_ONCE), timeout=10)
            _, result = await phase.finish()
    assert result.status == res.PHASE_STATUS_SUCCEEDED
    egress = sorted(spans.named("helix.egress"), key=lambda s: s.start_time)
    assert [s.attributes["helix.egress.decision"] for s in egress] == ["held", "approved", "allowed"]
    allowed = egress[-1]
    assert allowed.attributes["server.address"] == "127.0.0.2" and allowed.attributes["http.request.method"] == "GET"
    assert allowed.attributes["url.path"] == "/x" and allowed.end_time > allowed.start_time
    assert egress[1].attributes["enduser.id"] == "admin"
    for kind in ("egress_held", "egress_approved", "egress_connection"):
        assert sample(telemetry, "helix_gateway_events_total", project="default", kind=kind) == 1, kind
