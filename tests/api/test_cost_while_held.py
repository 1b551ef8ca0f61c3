"""Every view of a phase's cost agrees while one of its calls is held at a breakpoint.

The phase's own cost (GetJob's phase, InspectPhase) is the live stream's; the job's totals, the
project's and the listing are summed from what was persisted; the live line of `run` shows the
last cost_update event. The message that triggered the hold must have its cost in the stream
before the hold, or the first group shows more than the others until the phase ends.
"""

from __future__ import annotations

import asyncio
import sys

import pytest
from support.streams import PhaseCall

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.offline import Reply
from helix_runner.offline.script import Usage

pytestmark = [pytest.mark.real_cli]


async def test_every_view_shows_one_cost_while_a_call_is_held(claude_binary, scripted_api, runner_factory, tmp_path):
    # Two messages in quick succession: the first call runs, the second is held. Cost updates are
    # at most one a second (phase_stream.COST_UPDATE_INTERVAL_NS): the second message's came later.
    api = scripted_api([
        Reply.tool_use("Write", {"file_path": str(tmp_path / "first.txt"), "content": "1"},
                       usage=Usage(input_tokens=1000, output_tokens=400)),
        Reply.tool_use("Bash", {"command": "echo held"}, usage=Usage(input_tokens=1000, output_tokens=400)),
        Reply.text("done"),
    ])
    async with runner_factory(api) as runner:
        phase = PhaseCall(runner.stub, "held-cost", "p", runner.workdir, allowed_tools=["Bash", "Write"],
                          breakpoints=[res.Breakpoint(breakpoint_id="bp", tool_name="Bash")])
        hit = await phase.control(ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT, 60)
        streamed = [e.cost_update.cost.computed_usd for e in phase.events if e.HasField("cost_update")]
        job = (await runner.stub.GetJob(pb.GetJobRequest(job_id="held-cost"), timeout=10)).job
        listed = next(j for j in (await runner.stub.ListJobs(pb.ListJobsRequest(), timeout=10)).jobs
                      if j.job_id == "held-cost")
        inspection = (await runner.stub.InspectPhase(pb.InspectPhaseRequest(job_id="held-cost", phase_id="p"),
                                                     timeout=10)).inspection
        totals = {name: (await runner.stub.GetCostTotals(pb.GetCostTotalsRequest(**scope), timeout=10)).totals
                  for name, scope in (("job", {"job_id": "held-cost"}),
                                      ("phase", {"job_id": "held-cost", "phase_id": "p"}), ("project", {}))}
        views = {
            "the phase in GetJob": job.phases[0].cost.computed_usd,
            "the job in GetJob": job.cost.computed_usd,
            "the job in ListJobs": listed.cost.computed_usd,
            "InspectPhase": inspection.phase.cost.computed_usd,
            "the last cost_update streamed": streamed[-1] if streamed else None,
            **{f"GetCostTotals of the {name}": t.computed_usd for name, t in totals.items()},
        }
        assert job.phases[0].status == res.PHASE_STATUS_AWAITING_APPROVAL
        assert views["the phase in GetJob"] > 0
        assert len(set(views.values())) == 1, views
        # The CLI's views read those; each prints the one figure.
        shown = f"${views['the phase in GetJob']:.4f}"
        server = ["--server", f"127.0.0.1:{runner.server.port}"]
        for view in (["jobs"], ["phases", "held-cost"], ["inspect", "held-cost", "p", "cost"]):
            proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "helix_runner", *view, *server,
                                                        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await asyncio.wait_for(proc.communicate(), 60)
            assert shown in out.decode(), (view, out.decode(), err.decode())
        await runner.stub.ResolveToolCall(pb.ResolveToolCallRequest(
            job_id="held-cost", phase_id="p", tool_use_id=hit.control.tool_use_id, approve=pb.ApproveDecision()),
            timeout=10)
        result = await phase.finish(90)
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
