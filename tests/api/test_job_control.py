"""Job control over the real CLI: pause, step, breakpoints with approve / deny / edit, inject,
interrupt, inspect, many watchers, and illegal transitions."""

from __future__ import annotations

import asyncio
import json
import os
import signal

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from support.processes import serving_port, start_serve
from support.runner_server import collect
from support.streams import start_phase

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix.runner.v1 import runner_service_pb2_grpc as pb_grpc
from helix_runner.api.errors import error_info
from helix_runner.offline import Reply, RequestMatcher, TextBlock
from helix_runner.process.procfs import process_state

pytestmark = pytest.mark.real_cli

SLOW_TEXT = Reply(content=[TextBlock("thinking it over " * 12)], chunk_delay=0.08)  # ~1.5 s of streaming


async def test_pause_holds_the_next_tool_call_until_resume(claude_binary, scripted_api, runner_factory):
    api = scripted_api([Reply.tool_use("Bash", {"command": "touch created.txt"}, chunk_delay=0.1),
                        Reply.text("done")])
    async with runner_factory(api) as runner:
        phase = start_phase(runner, "pause", allowed_tools=["Bash"])
        await phase.wait_for(lambda e: e.HasField("status_changed"))
        paused = (await runner.stub.PausePhase(pb.PausePhaseRequest(**phase.ids()), timeout=10)).phase
        assert paused.status == res.PHASE_STATUS_PAUSING
        held = await phase.control(ev.CONTROL_EVENT_KIND_PAUSED)
        assert held.control.tool_name == "Bash" and "touch created.txt" in held.control.input_json
        await asyncio.sleep(1.0)
        assert not (runner.workdir / "created.txt").exists()  # held before it ran
        job = (await runner.stub.GetJob(pb.GetJobRequest(job_id="pause"), timeout=10)).job
        assert job.phases[0].status == res.PHASE_STATUS_PAUSED
        assert job.phases[0].current_tool.status == res.TOOL_CALL_STATUS_HELD
        inspection = (await runner.stub.InspectPhase(pb.InspectPhaseRequest(**phase.ids(),
                                                                            include_context_usage=True),
                                                     timeout=10)).inspection
        assert inspection.paused and [p.call.name for p in inspection.pending_calls] == ["Bash"]
        assert inspection.pending_calls[0].hold_reason == "paused"
        assert inspection.context_usage.max_tokens > 0 and inspection.context_usage.total_tokens > 0
        assert inspection.recent_events and inspection.recent_events[-1].sequence == inspection.phase.last_sequence

        resumed = (await runner.stub.ResumePhase(pb.ResumePhaseRequest(**phase.ids()), timeout=10)).phase
        assert resumed.status == res.PHASE_STATUS_RUNNING
        result = await phase.finish()
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    assert (runner.workdir / "created.txt").exists()
    kinds = [e.control.kind for e in phase.events if e.HasField("control")]
    assert kinds == [ev.CONTROL_EVENT_KIND_ATTEMPT_STARTED, ev.CONTROL_EVENT_KIND_PAUSE_REQUESTED, ev.CONTROL_EVENT_KIND_PAUSED,
                     ev.CONTROL_EVENT_KIND_RESUMED]


async def test_step_lets_exactly_one_of_three_calls_through(claude_binary, scripted_api, runner_factory):
    api = scripted_api([Reply.tool_use("Bash", {"command": f"touch {name}"}, chunk_delay=0.05)
                        for name in ("a", "b", "c")] + [Reply.text("all three")])
    async with runner_factory(api) as runner:
        phase = start_phase(runner, "step", allowed_tools=["Bash"])
        await phase.wait_for(lambda e: e.HasField("status_changed"))
        await runner.stub.PausePhase(pb.PausePhaseRequest(**phase.ids()), timeout=10)
        first = await phase.control(ev.CONTROL_EVENT_KIND_PAUSED)
        await runner.stub.StepPhase(pb.StepPhaseRequest(**phase.ids()), timeout=10)
        done = await phase.control(ev.CONTROL_EVENT_KIND_STEP_COMPLETE)
        assert done.control.tool_use_id == first.control.tool_use_id
        second = await phase.control(ev.CONTROL_EVENT_KIND_PAUSED, after=done.sequence)
        assert "touch b" in second.control.input_json
        await asyncio.sleep(0.5)
        assert [(runner.workdir / n).exists() for n in "abc"] == [True, False, False]
        await runner.stub.ResumePhase(pb.ResumePhaseRequest(**phase.ids()), timeout=10)
        result = await phase.finish()
    assert result.status == res.PHASE_STATUS_SUCCEEDED
    assert all((runner.workdir / n).exists() for n in "abc")


async def test_pattern_breakpoint_deny_keeps_the_file_and_tells_the_model(claude_binary, scripted_api,
                                                                           runner_factory):
    api = scripted_api([Reply.tool_use("Bash", {"command": "rm -rf precious"}), Reply.text("ok, I will not")])
    async with runner_factory(api) as runner:
        (runner.workdir / "precious").mkdir()
        (runner.workdir / "precious" / "data").write_text("keep me")
        bp = res.Breakpoint(breakpoint_id="no-rm", input_pattern=res.InputPatternCondition(regex=r"rm\s+-rf"))
        phase = start_phase(runner, "deny", allowed_tools=["Bash"], breakpoints=[bp])
        hit = await phase.control(ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT)
        assert hit.control.breakpoint_id == "no-rm"
        job = (await runner.stub.GetJob(pb.GetJobRequest(job_id="deny"), timeout=10)).job
        assert job.phases[0].status == res.PHASE_STATUS_AWAITING_APPROVAL
        inspection = (await runner.stub.InspectPhase(pb.InspectPhaseRequest(**phase.ids()), timeout=10)).inspection
        assert inspection.pending_calls[0].breakpoint_id == "no-rm"
        resolved = await runner.stub.ResolveToolCall(pb.ResolveToolCallRequest(
            **phase.ids(tool_use_id=hit.control.tool_use_id),
            deny=pb.DenyDecision(message="deleting precious data is not allowed")), timeout=10)
        assert resolved.tool_call.name == "Bash"
        result = await phase.finish()
    assert result.status == res.PHASE_STATUS_SUCCEEDED
    assert (runner.workdir / "precious" / "data").read_text() == "keep me"
    assert "deleting precious data is not allowed" in api.message_requests()[1].tool_result_text()
    finished = [e.tool_call_finished for e in phase.events if e.HasField("tool_call_finished")]
    assert finished[0].is_error
    assert [d.tool_name for d in result.permission_denials] == ["Bash"]


async def test_edited_input_is_what_runs(claude_binary, scripted_api, runner_factory):
    api = scripted_api([Reply.tool_use("Bash", {"command": "echo original > out.txt"}), Reply.text("done")])
    async with runner_factory(api) as runner:
        phase = start_phase(runner, "edit", allowed_tools=["Bash"],
                      breakpoints=[res.Breakpoint(tool_name="Bash", once=True)])
        hit = await phase.control(ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT)
        await runner.stub.ResolveToolCall(pb.ResolveToolCallRequest(
            **phase.ids(tool_use_id=hit.control.tool_use_id),
            edit=pb.EditDecision(input_json=json.dumps({"command": "echo edited > out.txt"}))), timeout=10)
        edited = await phase.control(ev.CONTROL_EVENT_KIND_TOOL_EDITED)
        assert "edited" in edited.control.input_json
        result = await phase.finish()
    assert result.status == res.PHASE_STATUS_SUCCEEDED
    assert (runner.workdir / "out.txt").read_text() == "edited\n"


async def test_cost_threshold_breakpoint_fires_once(claude_binary, scripted_api, runner_factory):
    api = scripted_api([Reply.tool_use("Bash", {"command": "echo one"}), Reply.tool_use("Bash", {"command": "echo two"}),
                        Reply.text("done")])
    async with runner_factory(api) as runner:
        phase = start_phase(runner, "cost", allowed_tools=["Bash"],
                      breakpoints=[res.Breakpoint(breakpoint_id="budget", cost_threshold_usd=1e-9)])
        hit = await phase.control(ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT)
        assert hit.control.breakpoint_id == "budget"
        listed = (await runner.stub.ListBreakpoints(pb.ListBreakpointsRequest(**phase.ids()), timeout=10)).breakpoints
        assert [(b.breakpoint_id, b.hit_count) for b in listed] == [("budget", 1)]
        approved = await runner.stub.ResolveToolCall(pb.ResolveToolCallRequest(
            **phase.ids(tool_use_id=hit.control.tool_use_id), approve=pb.ApproveDecision()), timeout=10)
        assert approved.tool_call.status == res.TOOL_CALL_STATUS_RUNNING
        result = await phase.finish()
    assert result.status == res.PHASE_STATUS_SUCCEEDED
    hits = [e for e in phase.events if e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT]
    assert len(hits) == 1  # a threshold is crossed once


async def test_inject_queue_adds_a_second_turn(claude_binary, scripted_api, runner_factory):
    api = scripted_api([SLOW_TEXT, Reply.text("second answer")])
    async with runner_factory(api) as runner:
        phase = start_phase(runner, "inject")
        await phase.wait_for(lambda e: e.HasField("session_init"))
        injected = await runner.stub.InjectMessage(pb.InjectMessageRequest(
            **phase.ids(), text="INJECTED follow-up question", mode=pb.INJECT_MODE_QUEUE), timeout=10)
        assert injected.message_uuid and injected.sequence > 0
        result = await phase.finish()
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    assert result.result_count == 2 and result.result_text == "second answer"
    assert "INJECTED follow-up question" in api.message_requests()[-1].text()


async def test_interrupt_during_a_long_bash_call(claude_binary, scripted_api, runner_factory):
    api = scripted_api([Reply.tool_use("Bash", {"command": "python3 -c 'import time; time.sleep(60)'"}),
                        Reply.text("never")])
    async with runner_factory(api) as runner:
        phase = start_phase(runner, "interrupt", allowed_tools=["Bash"])
        await phase.wait_for(lambda e: e.HasField("tool_call_started"))
        await asyncio.sleep(0.5)
        loop = asyncio.get_running_loop()
        began = loop.time()
        await runner.stub.InterruptPhase(pb.InterruptPhaseRequest(**phase.ids()), timeout=15)
        turn = await phase.wait_for(lambda e: e.HasField("turn_result"), limit=20)
        assert loop.time() - began < 15
        result = await phase.finish()
    assert turn.turn_result.subtype == "error_during_execution" and turn.turn_result.is_error
    assert any(e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_INTERRUPTED for e in phase.events)
    assert result.status == res.PHASE_STATUS_FAILED  # the last turn was aborted, and the CLI says so
    assert result.terminal_reason in ("aborted_streaming", "aborted_tools")


async def test_fifty_watchers_one_stalled(claude_binary, scripted_api, runner_factory):
    api = scripted_api([Reply.tool_use("Bash", {"command": f"echo {i}"}) for i in range(5)] + [Reply.text("done")])
    async with runner_factory(api) as runner:
        phase = start_phase(runner, "watch", allowed_tools=["Bash"], on_disconnect=res.ON_DISCONNECT_DETACH)
        await phase.wait_for(lambda e: e.HasField("status_changed"))
        request = pb.WatchPhaseRequest(job_id="watch", phase_id="p", after_sequence=0)
        stalled = runner.stub.WatchPhase(request, timeout=120)
        await stalled.wait_for_connection()

        async def watch():
            seqs = []
            async for response in runner.stub.WatchPhase(request, timeout=60):
                seqs.extend(e.sequence for e in response.events)
                if response.HasField("result"):
                    return seqs, response.result.status
            return seqs, None

        results = await asyncio.wait_for(asyncio.gather(*(watch() for _ in range(49))), 60)
        final = await phase.finish()
        expected = list(range(1, final.last_sequence + 1))
        for seqs, status in results:
            assert seqs == expected and status == res.PHASE_STATUS_SUCCEEDED
        # The stalled watcher slowed nobody, and still gets everything when it finally reads.
        seqs = []
        async for response in stalled:
            seqs.extend(e.sequence for e in response.events)
        assert seqs == expected


async def test_illegal_transitions_are_failed_precondition(claude_binary, scripted_api, runner_factory):
    api = scripted_api([Reply.tool_use("Bash", {"command": "echo x"}, chunk_delay=0.05), Reply.text("done")])
    async with runner_factory(api) as runner:
        phase = start_phase(runner, "illegal", allowed_tools=["Bash"])
        await phase.wait_for(lambda e: e.HasField("status_changed"))
        for call, request in (
            (runner.stub.ResumePhase, pb.ResumePhaseRequest(**phase.ids())),
            (runner.stub.StepPhase, pb.StepPhaseRequest(**phase.ids())),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call(request, timeout=10)
            assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            info = error_info(caught.value)
            assert info.reason == "ILLEGAL_TRANSITION" and info.metadata["operation"] in ("resume", "step")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await runner.stub.ResolveToolCall(pb.ResolveToolCallRequest(**phase.ids(tool_use_id="toolu_nope"),
                                                                        approve=pb.ApproveDecision()), timeout=10)
        assert error_info(caught.value).reason == "TOOL_CALL_NOT_HELD"
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await runner.stub.AddBreakpoint(pb.AddBreakpointRequest(
                **phase.ids(), breakpoint=res.Breakpoint(input_pattern=res.InputPatternCondition(regex="("))),
                timeout=10)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        await phase.finish()
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await runner.stub.PausePhase(pb.PausePhaseRequest(**phase.ids()), timeout=10)
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert error_info(caught.value).metadata["status"] == "SUCCEEDED"
        # A finished phase can still be inspected.
        inspection = (await runner.stub.InspectPhase(pb.InspectPhaseRequest(**phase.ids()), timeout=10)).inspection
        assert inspection.phase.status == res.PHASE_STATUS_SUCCEEDED and not inspection.pending_calls


async def test_hard_pause_stops_the_process_group_until_resume(claude_binary, scripted_api, runner_factory):
    api = scripted_api([Reply(content=[TextBlock("word " * 40)], chunk_delay=0.05), Reply.text("unused")])
    async with runner_factory(api) as runner:
        phase = start_phase(runner, "hard")
        await phase.wait_for(lambda e: e.HasField("session_init"))
        pid = runner.server.service.get_live("hard", "p").run.supervisor.pid
        paused = (await runner.stub.PausePhase(pb.PausePhaseRequest(**phase.ids(), mode=pb.PAUSE_MODE_HARD),
                                               timeout=10)).phase
        assert paused.status == res.PHASE_STATUS_PAUSED
        assert process_state(pid) == "T"  # stopped, as SIGSTOP promises
        seen = len(phase.events)
        await asyncio.sleep(1.5)  # the reply would have finished streaming by now
        assert all(not e.HasField("turn_result") for e in phase.events[seen:])
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await runner.stub.StepPhase(pb.StepPhaseRequest(**phase.ids()), timeout=10)
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        await runner.stub.ResumePhase(pb.ResumePhaseRequest(**phase.ids()), timeout=10)
        assert process_state(pid) != "T"
        result = await phase.finish()
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason


async def test_inject_interrupt_and_send(claude_binary, scripted_api, runner_factory):
    # Route by content: the request after the interrupt carries the injected text.
    api = scripted_api([Reply.text("answer to the new question", match=RequestMatcher(last_user_contains="STOP")),
                        Reply(content=[TextBlock("a very long answer " * 60)], chunk_delay=0.05)])
    async with runner_factory(api) as runner:
        phase = start_phase(runner, "steer", include_partial_messages=True)
        # Interrupt mid-stream: once the model's answer is visibly streaming.
        await phase.wait_for(lambda e: e.HasField("partial_delta") and e.partial_delta.text)
        await runner.stub.InjectMessage(pb.InjectMessageRequest(
            **phase.ids(), text="STOP and answer this instead", mode=pb.INJECT_MODE_INTERRUPT_AND_SEND), timeout=15)
        result = await phase.finish()
    turns = [e.turn_result for e in phase.events if e.HasField("turn_result")]
    assert [t.subtype for t in turns] == ["error_during_execution", "success"]
    assert result.status == res.PHASE_STATUS_SUCCEEDED and result.result_text == "answer to the new question"
    assert "STOP and answer this instead" in api.message_requests()[-1].text()


async def test_a_catastrophic_pattern_never_stalls_the_server(claude_binary, tmp_path):
    # (a+)+$ against a 64-character input takes exponential time on a backtracking engine: on the
    # event loop it pinned a core, health timed out and SIGTERM was ignored. A real server process.
    script = {"turns": [
        {"content": [{"type": "tool_use", "name": "Bash", "input": {"command": "echo " + "a" * 64}}]},
        {"content": [{"type": "text", "text": "done"}]},
    ]}
    (tmp_path / "script.json").write_text(json.dumps(script))
    (tmp_path / "work").mkdir()
    log = tmp_path / "serve.log"
    proc = start_serve(tmp_path, log, "--offline-script", str(tmp_path / "script.json"))
    try:
        port = await asyncio.to_thread(serving_port, log, proc)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub, health = pb_grpc.RunnerServiceStub(channel), health_pb2_grpc.HealthStub(channel)

            def request(*breakpoints):
                return pb.RunPhaseRequest(job_id="re", phase_id="p", prompt="go", working_dir=str(tmp_path / "work"),
                                          options=pb.PhaseOptions(allowed_tools=["Bash"], breakpoints=breakpoints))

            # A rejected request first: it must leave the ids free for the corrected one.
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await collect(stub.RunPhase(request(*[res.Breakpoint(tool_name="Read")] * 257), timeout=10))
            assert error_info(caught.value).metadata["field"] == "options.breakpoints"

            slow = res.Breakpoint(breakpoint_id="slow", input_pattern=res.InputPatternCondition(regex=r"(a+)+$"))
            events, result = await collect(stub.RunPhase(request(slow), timeout=60))
            assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
            # The pattern did not match: no control event but the attempt's start.
            assert [e.control.kind for e in events if e.HasField("control")] == [ev.CONTROL_EVENT_KIND_ATTEMPT_STARTED]
            (finished,) = [e.tool_call_finished for e in events if e.HasField("tool_call_finished")]
            assert "a" * 64 in finished.content_preview
            check = health_pb2.HealthCheckRequest(service="liveness")
            assert (await health.Check(check, timeout=5)).status == health_pb2.HealthCheckResponse.SERVING
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
