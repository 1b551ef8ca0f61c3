"""A phase outlives its replica on PostgreSQL (issue 24; docs/scale-out.md "Hand-over").

Two servers in this process on one database, each with its own scripted API, the real CLI, and one
workspace root both reach at the same path, marked shared (``.helix-runner-shared``). The owner
drains: its RunPhase caller gets PHASE_MOVED, the other replica resumes the phase with ``--resume``
and WatchPhase from ``after_sequence`` gives the rest, ending with the result.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import grpc
import pytest
from support.runner_server import start_runner

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.api.errors import error_info, retry_info
from helix_runner.offline import Reply, Usage

pytestmark = [pytest.mark.real_cli, pytest.mark.slow]

IDS = {"job_id": "job-move", "phase_id": "p1"}
SHARED_MARKER = ".helix-runner-shared"  # phases/handover.py (spelled out: the test also runs against main)


@contextlib.asynccontextmanager
async def _two_replicas(tmp_path: Path, api_a, api_b, **settings):
    """Replicas A and B, servers in this process on one database, each with its scripted API;
    closed at the end (B first)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    harness_a = start_runner(tmp_path / "a", api_a, replica_id="replica-a", **settings)
    harness_b = start_runner(tmp_path / "b", api_b, replica_id="replica-b", **settings)
    a = await anext(harness_a)
    b = await anext(harness_b)
    try:
        yield a, b
    finally:
        await harness_b.aclose()
        await harness_a.aclose()


def _shared(tmp_path: Path) -> Path:
    shared = tmp_path / "shared"
    (shared / "work").mkdir(parents=True)
    (shared / SHARED_MARKER).write_text("every replica mounts this volume here\n")
    return shared


def _held(events, tool_use_id: str | None = None) -> str | None:
    for e in events:
        if e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT:
            if tool_use_id is None or e.control.tool_use_id == tool_use_id:
                return e.control.tool_use_id
    return None


async def _until_held(call, events) -> str:
    async with asyncio.timeout(60):
        async for response in call:
            events.extend(response.events)
            if (held := _held(response.events)) is not None:
                return held
    raise AssertionError("the phase never held its call")


@pytest.mark.parametrize(("decide_during_move", "sandbox"), [(False, "auto"), (True, "auto"), (False, "off")],
                         ids=["approved-after", "approved-during", "no-sandbox"])
async def test_a_drained_replica_hands_a_held_phase_over_and_the_tool_runs_once(
    claude_binary, scripted_api, postgres_url, tmp_path, decide_during_move, sandbox
):
    shared = _shared(tmp_path)
    ran = shared / "work" / "ran.txt"
    call_input = {"command": f"echo once >> {ran}", "description": "Append once"}
    # The owner's model calls the tool; the adopter's model, told the call was interrupted, calls it again.
    api_a = scripted_api([Reply.tool_use("Bash", call_input, usage=Usage(input_tokens=1000, output_tokens=50)),
                          Reply.text("never")])
    api_b = scripted_api([Reply.tool_use("Bash", call_input, tool_use_id="toolu_again",
                                         usage=Usage(input_tokens=1200, output_tokens=40)),
                          Reply.text("Done.", usage=Usage(input_tokens=1300, output_tokens=10))])
    roots = {"workspace_roots": [str(shared)], "database_url": postgres_url, "retry_max_attempts": 2,
             "sandbox": sandbox}
    async with _two_replicas(tmp_path, api_a, api_b, **roots) as (a, b):
        if decide_during_move:  # B takes nothing over until the decision is kept
            room = b.server.service.adopter.room
            b.server.service.adopter.room = lambda: 0
        call = a.stub.RunPhase(pb.RunPhaseRequest(
            **IDS, prompt="Append once to ran.txt", working_dir=str(shared / "work"),
            options=pb.PhaseOptions(allowed_tools=["Bash"], breakpoints=[res.Breakpoint(tool_name="Bash", once=True)])),
            timeout=120)
        first = []
        held = await _until_held(call, first)
        drained = asyncio.create_task(a.server.drain(30.0))
        with pytest.raises(grpc.aio.AioRpcError) as moved:
            async with asyncio.timeout(60):
                async for response in call:
                    first.extend(response.events)
        assert moved.value.code() == grpc.StatusCode.UNAVAILABLE
        info = error_info(moved.value)
        assert info.reason == "PHASE_MOVED" and info.domain == "runner.helix"
        assert dict(info.metadata) == {**IDS, "after_sequence": str(first[-1].sequence), "from_replica": "replica-a"}
        assert retry_info(moved.value) is not None
        assert [e.sequence for e in first] == list(range(1, len(first) + 1))
        await asyncio.wait_for(drained, 60)
        assert not ran.exists()  # held at the move: the tool never ran on A

        if decide_during_move:
            # Nobody owns the phase: B keeps the decision for the adopter (itself, once it has room).
            await b.stub.ResolveToolCall(pb.ResolveToolCallRequest(**IDS, tool_use_id=held, approve=pb.ApproveDecision()),
                                         timeout=10)
            b.server.service.adopter.room = room
            b.server.service.adopter.wake()
        rest = []
        result = None
        approved = False
        async with asyncio.timeout(90):
            async for response in b.stub.WatchPhase(pb.WatchPhaseRequest(**IDS, after_sequence=first[-1].sequence),
                                                   timeout=90):
                rest.extend(response.events)
                if not approved and not decide_during_move and _held(response.events, "toolu_again"):
                    # Held again under the resumed CLI's id; the old id still names it.
                    await b.stub.ResolveToolCall(pb.ResolveToolCallRequest(**IDS, tool_use_id=held,
                                                                           approve=pb.ApproveDecision()), timeout=10)
                    approved = True
                if response.HasField("result"):
                    result = response.result
        assert result is not None and result.status == res.PHASE_STATUS_SUCCEEDED, result
        # After the move the call was held again (no decision yet) or ran with the one kept meanwhile.
        assert approved or decide_during_move
        assert _held(rest, "toolu_again") is not None or decide_during_move
        assert ran.read_text() == "once\n"  # the tool ran exactly once, after the move
        # One gap-free stream across the move.
        assert [e.sequence for e in first + rest] == list(range(1, len(first) + len(rest) + 1))
        assert result.last_sequence == rest[-1].sequence
        # Each attempt names its replica; the move is the first one's end, the reason the contract's.
        assert [(x.number, x.replica_id, x.end_kind) for x in result.attempts] == [
            (1, "replica-a", res.ATTEMPT_END_KIND_MOVED), (2, "replica-b", res.ATTEMPT_END_KIND_COMPLETED)]
        assert result.attempts[0].reason == "moved from replica replica-a (draining)"
        assert result.attempts[1].resumed_session_id == result.attempts[0].session_id != ""
        assert any(e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_RETRY_SCHEDULED
                   and e.control.message == "moved from replica replica-a (draining)" for e in rest)
        # Numbers stay true: the phase's tokens and cost are the sums of its attempts'.
        tokens = [(x.cost.tokens.input_tokens, x.cost.tokens.output_tokens) for x in result.attempts]
        assert (result.cost.tokens.input_tokens, result.cost.tokens.output_tokens) == (
            sum(t[0] for t in tokens), sum(t[1] for t in tokens))
        # Exactly what the scripted API charged, though the moved attempt stopped before its turn's
        # result (the stream showed 1 output token, docs/claude-cli-protocol.md §0.2): its figures are
        # those its CLI saved at SIGTERM and the resumed CLI restored (attempt_cost.restored_cost).
        assert tokens == [(1000, 50), (2500, 50)]
        assert result.cost.computed_usd == pytest.approx(sum(x.cost.computed_usd for x in result.attempts))
        job = await b.stub.GetJob(pb.GetJobRequest(job_id=IDS["job_id"]), timeout=10)
        assert job.job.phases[0].status == res.PHASE_STATUS_SUCCEEDED




async def _crash(postgres_cluster, postgres_url, harness) -> None:
    """The replica stops renewing its lease and the lease runs out (its process is left, a zombie)."""
    for name in ("takeover", "adopter"):
        task = harness.server.sweeps.tasks.get(name)
        if task is None:
            continue
        task.cancel()  # nothing of it renews the lease any more
        await asyncio.gather(task, return_exceptions=True)
    harness.server.cluster.replica.stop_heartbeat()
    postgres_cluster.set_lease(postgres_url, harness.server.cluster.replica_id, -1)


@pytest.mark.parametrize("max_attempts", [2, 1])
async def test_a_lost_replicas_phase_resumes_elsewhere_when_its_retry_policy_allows(
    claude_binary, scripted_api, postgres_cluster, postgres_url, tmp_path, max_attempts
):
    shared = _shared(tmp_path)
    ran = shared / "work" / "ran.txt"
    call_input = {"command": f"echo once >> {ran}", "description": "Append once"}
    api_a = scripted_api([Reply.tool_use("Bash", call_input), Reply.text("never")])
    api_b = scripted_api([Reply.tool_use("Bash", call_input, tool_use_id="toolu_again"), Reply.text("Done.")])
    roots = {"workspace_roots": [str(shared)], "database_url": postgres_url, "retry_max_attempts": max_attempts,
             "replica_lease_seconds": 3.0}
    async with _two_replicas(tmp_path, api_a, api_b, **roots) as (a, b):
        call = a.stub.RunPhase(pb.RunPhaseRequest(
            **IDS, prompt="Append once to ran.txt", working_dir=str(shared / "work"),
            options=pb.PhaseOptions(allowed_tools=["Bash"], breakpoints=[res.Breakpoint(tool_name="Bash", once=True)])),
            timeout=120)
        first = []
        held = await _until_held(call, first)
        await _crash(postgres_cluster, postgres_url, a)
        crashed = asyncio.get_running_loop().time()
        watched, result, approved, resumed_after = [], None, False, None
        async with asyncio.timeout(90):
            async for response in b.stub.WatchPhase(pb.WatchPhaseRequest(**IDS), timeout=90):
                watched.extend(response.events)
                if resumed_after is None and any(e.sequence > len(first) for e in response.events):
                    resumed_after = asyncio.get_running_loop().time() - crashed
                if not approved and _held(response.events, "toolu_again"):
                    await b.stub.ResolveToolCall(pb.ResolveToolCallRequest(**IDS, tool_use_id=held,
                                                                           approve=pb.ApproveDecision()), timeout=10)
                    approved = True
                if response.HasField("result"):
                    result = response.result
        assert [e.sequence for e in watched] == list(range(1, len(watched) + 1))
        assert [e.sequence for e in watched[:len(first)]] == [e.sequence for e in first]
        # Lease ran out at once here; B claims within a third of a lease (1 s), plus slack for the start.
        assert resumed_after is not None and resumed_after < 1.0 + 15.0
        if max_attempts == 1:  # the crash used up the phase's only attempt: it ends as before, saying why
            assert result.status == res.PHASE_STATUS_INTERRUPTED
            assert "its retry policy allows no further attempt" in result.reason
            assert not ran.exists()
            return
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result
        assert approved and ran.read_text() == "once\n"
        assert [(x.number, x.replica_id, x.end_kind, x.status) for x in result.attempts] == [
            (1, "replica-a", res.ATTEMPT_END_KIND_CRASHED, res.PHASE_STATUS_INTERRUPTED),
            (2, "replica-b", res.ATTEMPT_END_KIND_COMPLETED, res.PHASE_STATUS_SUCCEEDED)]
        assert result.attempts[0].reason == "resumed after replica replica-a was lost"


async def test_a_phase_queued_on_a_full_replica_moves_to_one_where_room_freed(
    claude_binary, scripted_api, postgres_url, tmp_path
):
    shared = _shared(tmp_path)
    hold = {"command": "echo held", "description": "Held"}
    api_a = scripted_api([Reply.tool_use("Bash", hold), Reply.text("never")])
    api_b = scripted_api([Reply.tool_use("Bash", hold), Reply.text("Done.")])
    roots = {"workspace_roots": [str(shared)], "database_url": postgres_url, "max_running_phases": 1,
             "place_on_free_replica": False, "replica_lease_seconds": 3.0}
    held = pb.PhaseOptions(allowed_tools=["Bash"], breakpoints=[res.Breakpoint(tool_name="Bash", once=True)])
    async with _two_replicas(tmp_path, api_a, api_b, **roots) as (a, b):
        def run(stub, job, **options):
            return stub.RunPhase(pb.RunPhaseRequest(job_id=job, phase_id="p1", prompt="go",
                                                    working_dir=str(shared / "work"), **options), timeout=120)

        a_busy, b_busy = run(a.stub, "job-a", options=held), run(b.stub, "job-b", options=held)
        a_held, b_held = [], []
        await _until_held(a_busy, a_held)
        b_tool = await _until_held(b_busy, b_held)
        queued = run(a.stub, "job-q")  # A is full: it waits there
        seen = []
        async with asyncio.timeout(30):
            async for response in queued:
                seen.extend(response.events)
                if any(e.HasField("status_changed") and e.status_changed.to_status == res.PHASE_STATUS_QUEUED
                       for e in response.events):
                    break
        await b.stub.ResolveToolCall(pb.ResolveToolCallRequest(job_id="job-b", phase_id="p1", tool_use_id=b_tool,
                                                               approve=pb.ApproveDecision()), timeout=10)
        with pytest.raises(grpc.aio.AioRpcError) as moved:  # room freed on B: the queued phase goes there
            async with asyncio.timeout(60):
                async for response in queued:
                    seen.extend(response.events)
        info = error_info(moved.value)
        assert info.reason == "PHASE_MOVED" and info.metadata["from_replica"] == "replica-a"
        result = None
        async with asyncio.timeout(60):
            async for response in b.stub.WatchPhase(pb.WatchPhaseRequest(
                    job_id="job-q", phase_id="p1", after_sequence=int(info.metadata["after_sequence"])), timeout=60):
                seen.extend(response.events)
                if response.HasField("result"):
                    result = response.result
        assert result is not None and result.status == res.PHASE_STATUS_SUCCEEDED, result
        assert [(x.number, x.replica_id) for x in result.attempts] == [(1, "replica-b")]
        assert [e.sequence for e in seen] == list(range(1, len(seen) + 1))


async def test_a_phase_keeps_its_state_while_it_runs_and_forgets_it_at_the_end_but_its_transcript(
    claude_binary, scripted_api, postgres_url, tmp_path
):
    api = scripted_api([Reply.tool_use("Bash", {"command": "echo hi", "description": "Say hi"}),
                        Reply.text("The answer is forty-two.")])
    (tmp_path / "a").mkdir()
    harness = start_runner(tmp_path / "a", api, replica_id="replica-a", database_url=postgres_url, sandbox="off")
    a = await anext(harness)
    ids = {"job_id": "job-t", "phase_id": "p1"}
    try:
        call = a.stub.RunPhase(pb.RunPhaseRequest(
            **ids, prompt="What is the answer?", working_dir=str(a.workdir),
            options=pb.PhaseOptions(allowed_tools=["Bash"], breakpoints=[res.Breakpoint(tool_name="Bash")])),
            timeout=120)
        handover = a.server.cluster.handover()
        result = None
        async with asyncio.timeout(90):
            async for response in call:
                if (tool := _held(response.events)) is not None:
                    live = a.server.service.get_live(**ids)
                    state = handover.state(**ids)
                    # Saved while it runs; its workspace root is not marked shared: it could not move, says why.
                    assert not state.movable and "marked shared" in state.not_movable_reason
                    await a.stub.ResolveToolCall(pb.ResolveToolCallRequest(**ids, tool_use_id=tool,
                                                                           approve=pb.ApproveDecision()), timeout=10)
                if response.HasField("result"):
                    result = response.result
        assert result.status == res.PHASE_STATUS_SUCCEEDED
        await asyncio.wait_for(live.done.wait(), 30)  # its task is over: its hand-over state goes
        await asyncio.wait_for(asyncio.gather(*a.server.service._forgetting), 30)
        assert handover.state(**ids) is None
        # Its transcript stays, for a fork from a checkpoint of the ended phase (docs/fork-and-rewind.md);
        # retention deletes it with the job (tests/store/test_checkpoint_store.py).
        assert b"forty-two" in handover.transcript(**ids, session_id=result.session_id)
    finally:
        await harness.aclose()


async def test_a_worktree_phase_moves_with_its_work_in_progress_on_its_branch(
    claude_binary, scripted_api, postgres_url, tmp_path
):
    from support.git_repos import make_repo, sh

    shared = _shared(tmp_path)
    repo = make_repo(shared / "repo")
    first = {"command": "echo one > a.txt", "description": "First"}
    second = {"command": "echo two > b.txt", "description": "Second"}
    api_a = scripted_api([Reply.tool_use("Bash", first), Reply.tool_use("Bash", second), Reply.text("never")])
    api_b = scripted_api([Reply.tool_use("Bash", second, tool_use_id="toolu_again"), Reply.text("Done.")])
    roots = {"workspace_roots": [str(shared)], "database_url": postgres_url}
    async with _two_replicas(tmp_path, api_a, api_b, **roots) as (a, b):
        call = a.stub.RunPhase(pb.RunPhaseRequest(
            **IDS, prompt="Write a.txt and b.txt", working_dir=str(repo),
            options=pb.PhaseOptions(allowed_tools=["Bash"], workspace=pb.WORKSPACE_MODE_GIT_WORKTREE,
                                    breakpoints=[res.Breakpoint(input_pattern=res.InputPatternCondition(regex="two"), once=True)])), timeout=120)
        events = []
        held = await _until_held(call, events)  # a.txt is written in A's worktree, b.txt is held
        drained = asyncio.create_task(a.server.drain(30.0))
        with pytest.raises(grpc.aio.AioRpcError) as moved:
            async with asyncio.timeout(60):
                async for response in call:
                    events.extend(response.events)
        assert error_info(moved.value).reason == "PHASE_MOVED"
        await asyncio.wait_for(drained, 60)
        branch = "helix/job-move/p1"
        assert sh(repo, "show", f"{branch}:a.txt") == "one\n"  # the work in progress, committed at the move
        result = None
        async with asyncio.timeout(90):
            async for response in b.stub.WatchPhase(pb.WatchPhaseRequest(**IDS, after_sequence=events[-1].sequence),
                                                   timeout=90):
                if _held(response.events, "toolu_again"):
                    await b.stub.ResolveToolCall(pb.ResolveToolCallRequest(**IDS, tool_use_id=held,
                                                                           approve=pb.ApproveDecision()), timeout=10)
                if response.HasField("result"):
                    result = response.result
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result
        # The adopter's worktree came from the branch: both files, the diff from the phase's base.
        changed = {f.path for f in result.artifacts.changed_files}
        assert {"a.txt", "b.txt"} <= changed, changed
        assert result.artifacts.branch == branch
        # The diff is on the adopter's disk now, and the phase row says so: GetPhaseDiff serves it.
        from support.git_repos import full_diff

        diff = await full_diff(b.stub, IDS["job_id"], IDS["phase_id"], 4096)
        assert b"a.txt" in diff and b"b.txt" in diff


async def test_a_lost_replicas_phase_resumes_from_the_transcript_mirrored_at_its_last_turn_boundary(
    claude_binary, scripted_api, postgres_cluster, postgres_url, tmp_path
):
    shared = _shared(tmp_path)
    ran = shared / "work" / "ran.txt"
    call_input = {"command": f"echo once >> {ran}", "description": "Append once"}
    # Turn 1 answers slowly (a message injected meanwhile becomes turn 2); turn 2 calls the tool, held.
    api_a = scripted_api([Reply.text("The answer is forty-two.", chunk_delay=0.2),
                          Reply.tool_use("Bash", call_input), Reply.text("never")])
    api_b = scripted_api([Reply.tool_use("Bash", call_input, tool_use_id="toolu_again"), Reply.text("Done.")])
    roots = {"workspace_roots": [str(shared)], "database_url": postgres_url, "retry_max_attempts": 2,
             "replica_lease_seconds": 3.0}
    async with _two_replicas(tmp_path, api_a, api_b, **roots) as (a, b):
        call = a.stub.RunPhase(pb.RunPhaseRequest(
            **IDS, prompt="What is the answer?", working_dir=str(shared / "work"),
            options=pb.PhaseOptions(allowed_tools=["Bash"], breakpoints=[res.Breakpoint(tool_name="Bash")])),
            timeout=120)
        first, injected, held = [], False, None
        async with asyncio.timeout(60):
            async for response in call:
                first.extend(response.events)
                if not injected and any(e.HasField("session_init") for e in response.events):
                    await a.stub.InjectMessage(pb.InjectMessageRequest(**IDS, text="Now append to ran.txt."),
                                               timeout=10)
                    injected = True
                if (held := _held(response.events)) is not None:
                    break
        assert held is not None and sum(e.HasField("turn_result") for e in first) == 1
        await _crash(postgres_cluster, postgres_url, a)
        result, rest = None, []
        async with asyncio.timeout(90):
            async for response in b.stub.WatchPhase(pb.WatchPhaseRequest(**IDS, after_sequence=first[-1].sequence),
                                                   timeout=90):
                rest.extend(response.events)
                if _held(response.events, "toolu_again"):
                    await b.stub.ResolveToolCall(pb.ResolveToolCallRequest(**IDS, tool_use_id=held,
                                                                           approve=pb.ApproveDecision()), timeout=10)
                if response.HasField("result"):
                    result = response.result
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result
        assert ran.read_text() == "once\n"
        # Resumed from the mirror: B's model saw turn 1 (the transcript as mirrored at its result).
        (request, *_) = api_b.message_requests()
        assert "forty-two" in str(request.messages)
        session = next(e.session_id for e in first if e.session_id)
        assert result.attempts[1].resumed_session_id == session and result.attempts[1].replica_id == "replica-b"
