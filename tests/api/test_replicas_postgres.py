"""Two replicas of the real server on one PostgreSQL database: any replica answers.

Replica A runs the phase (the real CLI against the scripted API); replica B never saw it and
answers every read about it from the shared database, the same as A does (docs/scale-out.md).
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import grpc
import psycopg
import pytest
from support.git_repos import full_diff, make_repo
from support.runner_server import collect, replica_pair
from support.streams import Stream, breakpoint_hit

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.api.errors import error_info
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.offline import Reply, Usage
from helix_runner.phases.takeover import Takeover

pytestmark = pytest.mark.real_cli


async def test_a_phase_run_on_one_replica_is_answered_for_by_another(
    claude_binary, scripted_api, postgres_url, tmp_path
):
    api = scripted_api(
        [
            Reply.tool_use("Bash", {"command": "echo from replica a"}),
            Reply.text("Done.", usage=Usage(input_tokens=300, output_tokens=20)),
        ]
    )
    async with replica_pair(tmp_path, postgres_url, api, None) as (a, b):
        events, result = await a.run_phase(
            "run a command", job_id="job-r", phase_id="p1", allowed_tools=["Bash"]
        )
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason

        async def reads(stub):
            job = await stub.GetJob(pb.GetJobRequest(job_id="job-r"), timeout=10)
            jobs = await stub.ListJobs(pb.ListJobsRequest(), timeout=10)
            calls = await stub.ListToolCalls(pb.ListToolCallsRequest(job_id="job-r"), timeout=10)
            costs = await stub.GetCostTotals(pb.GetCostTotalsRequest(job_id="job-r"), timeout=10)
            watched = await collect(
                stub.WatchPhase(pb.WatchPhaseRequest(job_id="job-r", phase_id="p1"), timeout=30)
            )
            return job, jobs, calls, costs, watched

        on_a, on_b = await reads(a.stub), await reads(b.stub)
        job, jobs, calls, costs, (watched_events, watched_result) = on_b
        assert [p.phase_id for p in job.job.phases] == ["p1"]
        assert job.job.phases[0].status == res.PHASE_STATUS_SUCCEEDED
        assert [j.job_id for j in jobs.jobs] == ["job-r"]
        assert [(c.name, c.status) for c in calls.tool_calls] == [("Bash", res.TOOL_CALL_STATUS_SUCCEEDED)]
        assert costs.totals.phase_count == 1 and costs.totals.tokens.input_tokens >= 300
        assert watched_events == events and watched_result == result
        assert on_b == on_a  # B answers exactly as the replica that ran the phase


async def test_a_replica_watches_a_phase_another_replica_runs_live_to_its_result(
    claude_binary, scripted_api, postgres_url, tmp_path
):
    api = scripted_api([Reply.tool_use("Bash", {"command": "echo approved"}), Reply.text("Finished.")])
    async with replica_pair(tmp_path, postgres_url, api, None) as (a, b):
        ids = {"job_id": "job-w", "phase_id": "p1"}
        request = pb.RunPhaseRequest(
            **ids,
            prompt="go",
            working_dir=str(a.workdir),
            options=pb.PhaseOptions(
                allowed_tools=["Bash"], breakpoints=[res.Breakpoint(tool_name="Bash", once=True)]
            ),
        )
        run = Stream(a.stub.RunPhase(request, timeout=120))
        hit = await run.wait_for(breakpoint_hit)  # held: still running while the watchers join
        on_owner = Stream(a.stub.WatchPhase(pb.WatchPhaseRequest(**ids), timeout=120))
        on_other = Stream(b.stub.WatchPhase(pb.WatchPhaseRequest(**ids), timeout=120))
        late = Stream(
            b.stub.WatchPhase(pb.WatchPhaseRequest(**ids, after_sequence=hit.sequence - 1), timeout=120)
        )
        await on_other.wait_for(breakpoint_hit)  # history from the database, the phase still held
        assert on_other.batch_sizes[0] > 1  # history read as a page comes as one message, not one per event
        await late.wait_for(breakpoint_hit)

        await a.stub.ResolveToolCall(
            pb.ResolveToolCallRequest(
                **ids, tool_use_id=hit.control.tool_use_id, approve=pb.ApproveDecision()
            ),
            timeout=10,
        )
        events, result = await run.finish()
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        assert events[-1].sequence > hit.sequence + 2  # the watchers had a live part to follow
        assert await on_owner.finish() == (events, result)
        assert await on_other.finish() == (
            events,
            result,
        )  # the same sequence as on the owner, then the result
        assert await late.finish() == ([e for e in events if e.sequence >= hit.sequence], result)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_control_of_a_phase_on_another_replica_is_forwarded_to_its_owner(
    claude_binary, scripted_api, postgres_url, tmp_path
):
    api = scripted_api(
        [
            Reply.tool_use("Bash", {"command": "touch one.txt"}),
            Reply.tool_use("Bash", {"command": "touch two.txt"}, chunk_delay=0.1),
            Reply.text("Both."),
        ]
    )
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token-for-replicas\n")
    auth = [("authorization", "Bearer s3cret-token-for-replicas")]
    async with replica_pair(tmp_path, postgres_url, api, None, auth_token_file=str(token_file)) as (a, b):
        ids = {"job_id": "job-c", "phase_id": "p1"}
        request = pb.RunPhaseRequest(
            **ids,
            prompt="go",
            working_dir=str(a.workdir),
            options=pb.PhaseOptions(
                allowed_tools=["Bash"], breakpoints=[res.Breakpoint(tool_name="Bash", once=True)]
            ),
        )
        run = Stream(a.stub.RunPhase(request, timeout=120, metadata=auth))
        hit = await run.wait_for(breakpoint_hit)

        # The owner's errors come back unchanged: the same status and ErrorInfo as asked directly.
        missing = pb.RemoveBreakpointRequest(**ids, breakpoint_id="no-such-breakpoint")
        errors = []
        for stub in (a.stub, b.stub):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.RemoveBreakpoint(missing, timeout=10, metadata=auth)
            errors.append((caught.value.code(), caught.value.details(), error_info(caught.value)))
        assert errors[1] == errors[0] and errors[0][2].domain == "runner.helix"

        added = pb.AddBreakpointRequest(
            **ids, breakpoint=res.Breakpoint(breakpoint_id="later", tool_name="Read")
        )
        await b.stub.AddBreakpoint(added, timeout=10, metadata=auth)
        listed = await b.stub.ListBreakpoints(pb.ListBreakpointsRequest(**ids), timeout=10, metadata=auth)
        assert [bp.breakpoint_id for bp in listed.breakpoints] == ["later"]  # the owner's list
        on_owner = await a.stub.ListBreakpoints(pb.ListBreakpointsRequest(**ids), timeout=10, metadata=auth)
        assert on_owner == listed
        removed = pb.RemoveBreakpointRequest(**ids, breakpoint_id="later")
        assert (
            await b.stub.RemoveBreakpoint(removed, timeout=10, metadata=auth)
        ).breakpoint.breakpoint_id == "later"
        approved = await b.stub.ResolveToolCall(
            pb.ResolveToolCallRequest(
                **ids, tool_use_id=hit.control.tool_use_id, approve=pb.ApproveDecision()
            ),
            timeout=10,
            metadata=auth,
        )
        assert approved.tool_call.tool_use_id == hit.control.tool_use_id
        paused = await b.stub.PausePhase(pb.PausePhaseRequest(**ids), timeout=10, metadata=auth)
        assert paused.phase.status == res.PHASE_STATUS_PAUSING
        held = await run.wait_for(
            lambda e: e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_PAUSED
        )
        assert "touch two.txt" in held.control.input_json
        assert (a.workdir / "one.txt").exists() and not (a.workdir / "two.txt").exists()

        # An owner that does not answer: UNAVAILABLE with a reason, nothing changes on the phase.
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as db:
            registered = await (
                await db.execute("SELECT address FROM replicas WHERE replica_id = 'replica-a'")
            ).fetchone()
            assert registered == (f"127.0.0.1:{a.server.port}",)  # the bound address, advertised
            await db.execute(
                "UPDATE replicas SET address = %s WHERE replica_id = 'replica-a'",
                (f"127.0.0.1:{closed_port()}",),
            )
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await b.stub.ResumePhase(pb.ResumePhaseRequest(**ids), timeout=10, metadata=auth)
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
            info = error_info(caught.value)
            assert info.reason == "OWNER_UNREACHABLE" and info.metadata["owner"] == "replica-a"
            assert "replica-a" in caught.value.details()
            await db.execute("UPDATE replicas SET address = %s WHERE replica_id = 'replica-a'", registered)

        resumed = await b.stub.ResumePhase(pb.ResumePhaseRequest(**ids), timeout=10, metadata=auth)
        assert resumed.phase.status == res.PHASE_STATUS_RUNNING
        events, result = await run.finish()
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        assert (a.workdir / "two.txt").exists()
        with pytest.raises(grpc.aio.AioRpcError) as caught:  # finished: answered where it was asked
            await b.stub.PausePhase(pb.PausePhaseRequest(**ids), timeout=10, metadata=auth)
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        kinds = [e.control.kind for e in events if e.HasField("control")]
        assert kinds == [
            ev.CONTROL_EVENT_KIND_ATTEMPT_STARTED,
            ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT,
            ev.CONTROL_EVENT_KIND_BREAKPOINT_ADDED,
            ev.CONTROL_EVENT_KIND_BREAKPOINT_REMOVED,
            ev.CONTROL_EVENT_KIND_TOOL_APPROVED,
            ev.CONTROL_EVENT_KIND_PAUSE_REQUESTED,
            ev.CONTROL_EVENT_KIND_PAUSED,
            ev.CONTROL_EVENT_KIND_RESUMED,
        ]


async def test_a_phase_taken_over_by_another_replica_is_stopped_on_its_old_owner(
    claude_binary, scripted_api, postgres_url, tmp_path
):
    api = scripted_api(
        [Reply.tool_use("Bash", {"command": "touch after.txt"}), Reply.text("Not to be seen.")]
    )
    async with replica_pair(tmp_path, postgres_url, api, None) as (a, b):
        ids = {"job_id": "job-f", "phase_id": "p1"}
        request = pb.RunPhaseRequest(
            **ids,
            prompt="go",
            working_dir=str(a.workdir),
            options=pb.PhaseOptions(
                allowed_tools=["Bash"], breakpoints=[res.Breakpoint(tool_name="Bash", once=True)]
            ),
        )
        run = Stream(a.stub.RunPhase(request, timeout=120))
        hit = await run.wait_for(breakpoint_hit)
        live = a.server.service.get_live("job-f", "p1")

        # Replica A stalls (no heartbeat) and its lease runs out: B takes the phase over.
        a.server.store.replica.stop_heartbeat()
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as db:
            await db.execute("UPDATE replicas SET lease_expires_at = now() WHERE replica_id = 'replica-a'")
        Takeover(b.server.cluster, b.server.service.encoder, interval_seconds=5).sweep()
        taken = b.server.store.get_phase("job-f", "p1")
        assert taken.status is PhaseStatus.INTERRUPTED and taken.result_pb is not None
        history = b.server.store.read_events("job-f", "p1", 0, 1000)

        # A revives and carries on: its next write is refused, so it stops the process and ends its watchers.
        await a.stub.ResolveToolCall(
            pb.ResolveToolCallRequest(
                **ids, tool_use_id=hit.control.tool_use_id, approve=pb.ApproveDecision()
            ),
            timeout=10,
        )
        events, result = await run.finish()
        await asyncio.wait_for(live.done.wait(), 30)
        assert a.server.service.get_live("job-f", "p1") is None
        assert result.SerializeToString() == taken.result_pb  # the taker's result
        assert result.status == res.PHASE_STATUS_INTERRUPTED
        assert [e.SerializeToString() for e in events] == [r.body for r in history[: len(events)]]
        assert (
            b.server.store.read_events("job-f", "p1", 0, 1000) == history
        )  # nothing appended after the sweep
        assert b.server.store.get_phase("job-f", "p1").result_pb == taken.result_pb
        watched = await collect(b.stub.WatchPhase(pb.WatchPhaseRequest(**ids), timeout=30))
        assert watched[1] == result and len(watched[0]) == len(history)


async def test_the_diff_of_a_finished_phase_is_served_by_the_replica_that_recorded_it(
    claude_binary, scripted_api, postgres_url, tmp_path
):
    api = scripted_api([Reply.tool_use("Bash", {"command": "echo changed > shared.txt"}), Reply.text("Done.")])
    ids = {"job_id": "job-d", "phase_id": "p1"}
    async with replica_pair(tmp_path, postgres_url, api, None) as (a, b), \
            await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as db:
        make_repo(a.workdir)
        _, result = await a.run_phase("change it", **ids, allowed_tools=["Bash"],
                                      workspace=pb.WORKSPACE_MODE_GIT_WORKTREE)
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        assert "-original\n+changed\n" in result.artifacts.diff
        on_a = await full_diff(a.stub, "job-d", "p1", page_size=29)
        assert on_a.decode() == result.artifacts.diff

        # A is live: B forwards the read to it, pages and their tokens alike ...
        assert await full_diff(b.stub, "job-d", "p1", page_size=29) == on_a
        # ... and does not read it itself (both replicas share this host's disk in the test).
        registered = (f"127.0.0.1:{a.server.port}",)
        await db.execute("UPDATE replicas SET address = %s WHERE replica_id = 'replica-a'",
                         (f"127.0.0.1:{closed_port()}",))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await b.stub.GetPhaseDiff(pb.GetPhaseDiffRequest(**ids), timeout=10)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert error_info(caught.value).reason == "OWNER_UNREACHABLE"
        await db.execute("UPDATE replicas SET address = %s WHERE replica_id = 'replica-a'", registered)

        # A gone (its lease ran out): B reads the file where its disk has it too (a shared volume) ...
        a.server.store.replica.stop_heartbeat()
        await db.execute("UPDATE replicas SET lease_expires_at = now() WHERE replica_id = 'replica-a'")
        assert await full_diff(b.stub, "job-d", "p1", page_size=4096) == on_a
        # ... and where it does not, says which replica holds it instead of "no diff".
        recording = Path(result.diagnostics.recording_path)
        recording.rename(recording.with_name(recording.name + ".elsewhere"))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await b.stub.GetPhaseDiff(pb.GetPhaseDiffRequest(**ids), timeout=10)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        info = error_info(caught.value)
        assert info.reason == "RECORDING_REPLICA_UNAVAILABLE" and info.metadata["replica"] == "replica-a"
        assert "replica-a" in caught.value.details()
