"""Model and permission-mode switches and background-task control on a running phase, through the real CLI.

A phase is kept running by a breakpoint holding its second tool call; the first one starts a background
shell (Bash ``run_in_background``), whose id the CLI reports as a TaskEvent.
"""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.api.errors import error_info
from helix_runner.offline import Reply

pytestmark = pytest.mark.real_cli

TICKER = "for i in $(seq 1 600); do echo tick$i; sleep 0.05; done; echo finished"
NEW_MODEL = "claude-sonnet-4-5"


def held_phase_script():
    return [
        Reply.tool_use("Bash", {"command": TICKER, "run_in_background": True}),
        Reply.tool_use("Read", {"file_path": "/etc/hostname"}),
        Reply.text("done"),
    ]


def start(runner, **options):
    return runner.stub.RunPhase(
        pb.RunPhaseRequest(
            job_id="j",
            phase_id="p",
            prompt="go",
            working_dir=str(runner.workdir),
            options=pb.PhaseOptions(
                allowed_tools=["Bash", "Read"], breakpoints=[res.Breakpoint(tool_name="Read")], **options
            ),
        ),
        timeout=120,
    )


async def output_with(runner, task_id: str, needle: str) -> pb.GetTaskOutputResponse:
    """GetTaskOutput until the output holds ``needle`` (bounded: 20 s)."""
    deadline = time.monotonic() + 20
    while True:
        answer = await runner.stub.GetTaskOutput(
            pb.GetTaskOutputRequest(job_id="j", phase_id="p", task_id=task_id), timeout=15
        )
        if needle in answer.output or time.monotonic() > deadline:
            return answer
        await asyncio.sleep(0.2)


async def test_task_output_stop_task_model_and_mode_switches_on_a_held_phase(
    claude_binary, scripted_api, runner_factory
):
    api = scripted_api(held_phase_script())
    async with runner_factory(api) as runner:
        events, result, task_id = [], None, ""
        async for response in start(runner):
            if response.HasField("result"):
                result = response.result
            for e in response.events:
                events.append(e)
                if e.HasField("task") and e.task.kind == ev.TASK_EVENT_KIND_STARTED:
                    task_id = e.task.task_id
                if not (e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT):
                    continue
                assert task_id
                # The background shell's output, and its tail.
                answer = await output_with(runner, task_id, "tick3")
                assert "tick1\n" in answer.output and answer.total_bytes >= len(answer.output.encode())
                tail = await runner.stub.GetTaskOutput(
                    pb.GetTaskOutputRequest(job_id="j", phase_id="p", task_id=task_id, max_bytes=8),
                    timeout=15,
                )
                assert 0 < len(tail.output.encode()) <= 8 and tail.truncated
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await runner.stub.GetTaskOutput(
                        pb.GetTaskOutputRequest(job_id="j", phase_id="p", task_id="bnosuchtask"), timeout=15
                    )
                assert caught.value.code() == grpc.StatusCode.NOT_FOUND
                assert error_info(caught.value).reason == "TASK_NOT_FOUND"
                # Model and permission mode.
                switched = await runner.stub.SetPhaseModel(
                    pb.SetPhaseModelRequest(job_id="j", phase_id="p", model=NEW_MODEL), timeout=15
                )
                assert switched.phase.model == NEW_MODEL
                mode = await runner.stub.SetPhasePermissionMode(
                    pb.SetPhasePermissionModeRequest(
                        job_id="j", phase_id="p", mode=res.PERMISSION_MODE_ACCEPT_EDITS
                    ),
                    timeout=15,
                )
                assert mode.mode == "acceptEdits"
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await runner.stub.SetPhasePermissionMode(
                        pb.SetPhasePermissionModeRequest(
                            job_id="j", phase_id="p", mode=res.PERMISSION_MODE_BYPASS_PERMISSIONS
                        ),
                        timeout=15,
                    )
                assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert error_info(caught.value).metadata["field"] == "mode"
                # An id the CLI never reported: TASK_NOT_FOUND (the CLI itself answers success; issue 34.6).
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await runner.stub.StopTask(
                        pb.StopTaskRequest(job_id="j", phase_id="p", task_id="bnosuchtask"), timeout=15
                    )
                assert caught.value.code() == grpc.StatusCode.NOT_FOUND
                assert error_info(caught.value).reason == "TASK_NOT_FOUND"
                assert error_info(caught.value).metadata["task_id"] == "bnosuchtask"
                # Stop the shell; the phase itself goes on.
                await runner.stub.StopTask(
                    pb.StopTaskRequest(job_id="j", phase_id="p", task_id=task_id), timeout=15
                )
                await runner.stub.ResolveToolCall(
                    pb.ResolveToolCallRequest(
                        job_id="j",
                        phase_id="p",
                        tool_use_id=e.control.tool_use_id,
                        approve=pb.ApproveDecision(),
                    ),
                    timeout=15,
                )
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    ends = [
        e.task
        for e in events
        if e.HasField("task") and e.task.task_id == task_id and e.task.kind != ev.TASK_EVENT_KIND_STARTED
    ]
    assert ends and ends[-1].status in ("stopped", "killed"), ends  # it did not run to "finished"
    requests = api.message_requests()
    assert requests[-1].model == NEW_MODEL and requests[0].model != NEW_MODEL  # the turn after the switch


async def test_interrupt_leaves_background_shells_running_and_stop_task_ends_them(
    claude_binary, scripted_api, runner_factory
):
    """InterruptPhase ends the turn only: with CLI 2.1.330 (the server's initialize declares no
    perTaskStopAffordance) a background shell keeps running after it; StopTask is how to end one."""
    api = scripted_api(held_phase_script())
    async with runner_factory(api) as runner:
        events, task_id, cancelled, stopped_at = [], "", False, 0
        async for response in start(runner):
            for e in response.events:
                events.append(e)
                if e.HasField("task") and e.task.kind == ev.TASK_EVENT_KIND_STARTED:
                    task_id = e.task.task_id
                if e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT:
                    assert "tick1\n" in (await output_with(runner, task_id, "tick1\n")).output
                    await runner.stub.InterruptPhase(
                        pb.InterruptPhaseRequest(job_id="j", phase_id="p"), timeout=15
                    )
                    # Still writing after the interrupt: a later tick shows up (the shell writes one every 50 ms).
                    before = (await output_with(runner, task_id, "tick1\n")).total_bytes
                    later = await output_with(runner, task_id, f"tick{before // 7 + 40}\n")
                    assert later.total_bytes > before and "finished" not in later.output
                    await runner.stub.StopTask(
                        pb.StopTaskRequest(job_id="j", phase_id="p", task_id=task_id), timeout=15
                    )
                    stopped_at = events[-1].sequence
                if (
                    task_id
                    and e.HasField("task")
                    and e.task.task_id == task_id
                    and e.task.kind != ev.TASK_EVENT_KIND_STARTED
                    and not cancelled
                ):
                    cancelled = True  # the held Read is still pending; end the phase here
                    await runner.stub.CancelPhase(pb.CancelPhaseRequest(job_id="j", phase_id="p"), timeout=20)
    ends = [
        e
        for e in events
        if e.HasField("task") and e.task.task_id == task_id and e.task.kind != ev.TASK_EVENT_KIND_STARTED
    ]
    assert ends and ends[0].task.status in ("stopped", "killed") and ends[0].sequence > stopped_at, ends
    assert any(e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_INTERRUPTED for e in events)


@pytest.mark.parametrize(
    ("rpc", "message", "field"),
    [
        ("SetPhaseModel", pb.SetPhaseModelRequest(job_id="j", phase_id="p", model="-bad"), "model"),
        ("SetPhasePermissionMode", pb.SetPhasePermissionModeRequest(job_id="j", phase_id="p"), "mode"),
        ("StopTask", pb.StopTaskRequest(job_id="j", phase_id="p", task_id="a b"), "task_id"),
        (
            "GetTaskOutput",
            pb.GetTaskOutputRequest(job_id="j", phase_id="p", task_id="b1", max_bytes=-1),
            "max_bytes",
        ),
    ],
)
async def test_bad_requests_are_invalid_argument_naming_the_field(
    claude_binary, scripted_api, runner_factory, rpc, message, field
):
    async with runner_factory(scripted_api(held_phase_script())) as runner:
        async for response in start(runner):
            if any(
                e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT
                for e in response.events
            ):
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await getattr(runner.stub, rpc)(message, timeout=15)
                await runner.stub.CancelPhase(pb.CancelPhaseRequest(job_id="j", phase_id="p"), timeout=20)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(caught.value).metadata["field"] == field


async def test_on_a_phase_that_is_not_running_they_are_refused(runner_factory):
    async with runner_factory(None, claude_path="/nonexistent/claude") as runner:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await runner.stub.StopTask(pb.StopTaskRequest(job_id="j", phase_id="p", task_id="b1"), timeout=15)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
