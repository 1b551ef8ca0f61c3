"""RunPhase end to end: the real CLI, driven by the scripted Messages API, through the real server.

Each test checks what an orchestrator is told (events live, the result last and honest) and
what the server remembers (GetJob, ListToolCalls, GetCostTotals).
"""

from __future__ import annotations

import asyncio
import datetime
import os
import time

import grpc
import pytest
from support.processes import SELF_IDENTITY, alive, find_process

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.api.errors import error_info
from helix_runner.offline import ApiError, Reply, Usage

pytestmark = pytest.mark.real_cli

SLEEP = "python3 -c 'import time; time.sleep({})'"


def kinds(events):
    return [e.WhichOneof("payload") for e in events]


def assert_gap_free(events):
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))


async def test_success_with_tools(claude_binary, scripted_api, runner_factory):
    api = scripted_api([
        Reply.tool_use("Bash", {"command": "echo hello from bash"}),
        Reply.tool_use("Write", {"file_path": "PLACEHOLDER", "content": "written\n"}),
        Reply.text("All done.", usage=Usage(input_tokens=200, output_tokens=10)),
    ])
    async with runner_factory(api) as runner:
        target = runner.workdir / "out.txt"
        api.set_script([
            Reply.tool_use("Bash", {"command": "echo hello from bash"}),
            Reply.tool_use("Write", {"file_path": str(target), "content": "written\n"}),
            Reply.text("All done.", usage=Usage(input_tokens=200, output_tokens=10)),
        ])
        events, result = await runner.run_phase("make a file", allowed_tools=["Bash", "Write"])

        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        assert result.exit_code == 0 and result.result_subtype == "success" and not result.is_error
        assert target.read_text() == "written\n"
        assert_gap_free(events)
        k = kinds(events)
        # Each attempt opens with ATTEMPT_STARTED, then the status turns RUNNING.
        assert k[0] == "control" and events[0].control.kind == ev.CONTROL_EVENT_KIND_ATTEMPT_STARTED
        assert events[0].control.attempt == 1
        assert k[1] == "status_changed" and events[1].status_changed.to_status == res.PHASE_STATUS_RUNNING
        assert k[-1] == "status_changed" and events[-1].status_changed.to_status == res.PHASE_STATUS_SUCCEEDED
        assert result.last_sequence == events[-1].sequence
        assert "session_init" in k and "turn_result" in k
        started = [e.tool_call_started for e in events if e.HasField("tool_call_started")]
        finished = [e.tool_call_finished for e in events if e.HasField("tool_call_finished")]
        assert [s.name for s in started] == ["Bash", "Write"]
        assert {f.tool_use_id for f in finished} == {s.tool_use_id for s in started}
        bash = next(f for f in finished if f.name == "Bash")
        assert "hello from bash" in bash.content_preview and not bash.is_error
        assert bash.duration.ToNanoseconds() > 0
        assert all(e.job_id == "job-1" and e.phase_id == "p1" for e in events)

        job = (await runner.stub.GetJob(pb.GetJobRequest(job_id="job-1"), timeout=10)).job
        assert job.status == res.PHASE_STATUS_SUCCEEDED
        (phase,) = job.phases
        assert phase.status == res.PHASE_STATUS_SUCCEEDED and phase.session_id == result.session_id
        assert phase.HasField("end_time") and phase.result.status == res.PHASE_STATUS_SUCCEEDED
        assert {s.name: s.count for s in phase.tool_stats} == {"Bash": 1, "Write": 1}

        calls = (await runner.stub.ListToolCalls(pb.ListToolCallsRequest(job_id="job-1"), timeout=10)).tool_calls
        assert [c.name for c in calls] == ["Bash", "Write"]
        assert all(c.status == res.TOOL_CALL_STATUS_SUCCEEDED for c in calls)

        totals = (await runner.stub.GetCostTotals(pb.GetCostTotalsRequest(job_id="job-1"), timeout=10)).totals
        turn = [e.turn_result for e in events if e.HasField("turn_result")][-1]
        assert totals.reported_usd == pytest.approx(turn.total_cost_usd)
        assert totals.computed_usd > 0 and totals.phase_count == 1
        assert result.cost.reported_usd == pytest.approx(turn.total_cost_usd)


async def test_tool_error_is_reported_and_listed(claude_binary, scripted_api, runner_factory):
    api = scripted_api([
        Reply.tool_use("Bash", {"command": "echo boom >&2; exit 3"}),
        Reply.text("The command failed."),
    ])
    async with runner_factory(api) as runner:
        events, result = await runner.run_phase("fail a command", allowed_tools=["Bash"])
        assert result.status == res.PHASE_STATUS_SUCCEEDED  # the run completed; the tool failed
        (finished,) = [e.tool_call_finished for e in events if e.HasField("tool_call_finished")]
        assert finished.is_error and "boom" in finished.content_preview
        failed = await runner.stub.ListToolCalls(pb.ListToolCallsRequest(job_id="job-1", only_failed=True),
                                                 timeout=10)
        assert [c.status for c in failed.tool_calls] == [res.TOOL_CALL_STATUS_FAILED]
        assert failed.stats[0].failures == 1


async def test_max_turns_fails_with_the_clis_reason(claude_binary, scripted_api, runner_factory):
    api = scripted_api([Reply.tool_use("Bash", {"command": "echo again"}, times=10)])
    async with runner_factory(api) as runner:
        _, result = await runner.run_phase("loop", allowed_tools=["Bash"], max_turns=1)
    assert result.status == res.PHASE_STATUS_FAILED
    assert result.result_subtype == "error_max_turns" and result.is_error
    assert result.exit_code == 1
    assert "error_max_turns" in result.reason


async def test_api_400_is_failed_with_status(claude_binary, scripted_api, runner_factory):
    # The CLI re-sends a 400 a few times with fewer beta features, so script it more than once.
    api = scripted_api([ApiError(400, times=10)])
    async with runner_factory(api) as runner:
        events, result = await runner.run_phase("hi")
    assert result.status == res.PHASE_STATUS_FAILED
    assert result.api_error_status == 400 and result.is_error and result.result_subtype == "success"
    assert "api_error" in kinds(events)


async def test_without_credentials_the_reason_says_what_to_set(claude_binary, runner_factory):
    # No scripted API and no key in the server's environment: the real CLI answers
    # "Not logged in · Please run /login" without contacting anything.
    async with runner_factory(None) as runner:
        _, result = await runner.run_phase("hi")
    assert result.status == res.PHASE_STATUS_FAILED
    assert "/login" in result.result_text
    assert "set ANTHROPIC_API_KEY" in result.reason and "--offline-script" in result.reason


async def test_429_twice_then_success_shows_retries(claude_binary, scripted_api, runner_factory):
    api = scripted_api([ApiError(429, times=2), Reply.text("Recovered.")])
    async with runner_factory(api) as runner:
        events, result = await runner.run_phase("hi", deadline=90)
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    retries = [e.api_retry for e in events if e.HasField("api_retry")]
    assert [r.error_status for r in retries] == [429, 429]
    assert all(r.error == "rate_limit" for r in retries)


async def test_strings_cut_inside_an_emoji_lose_no_event(claude_binary, scripted_api, runner_factory):
    # The model's tool input and final text end in half an emoji (a lone surrogate): the real CLI
    # writes it as "\ud83d" in the assistant line, the PreToolUse hook request and the result line,
    # which a strict JSON parser rejects whole. Every one of them must still arrive.
    api = scripted_api([Reply.tool_use("Bash", {"command": "echo cut\ud83d"}), Reply.text("done \ud83d")])
    async with runner_factory(api) as runner:
        events, result = await runner.run_phase("go", allowed_tools=["Bash"])
        calls = (await runner.stub.ListToolCalls(pb.ListToolCallsRequest(job_id="job-1"), timeout=10)).tool_calls
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    assert result.result_text == "done \ufffd"
    (finished,) = [e.tool_call_finished for e in events if e.HasField("tool_call_finished")]
    assert finished.name == "Bash" and not finished.is_error and "cut" in finished.content_preview
    assert [(c.status, c.input_json) for c in calls] == [
        (res.TOOL_CALL_STATUS_SUCCEEDED, '{"command":"echo cut\ufffd"}')
    ]
    warnings = [e.parse_error for e in events if e.HasField("parse_error")]
    assert warnings and all(w.repaired and w.reason == ev.PARSE_ERROR_REASON_UNPAIRED_SURROGATE for w in warnings)
    assert result.diagnostics.parse_error_count == 0


async def test_timeout_ends_timed_out(claude_binary, scripted_api, runner_factory):
    # CLI 2.1.330 refuses plain `sleep N` in its Bash tool, so sleep through python.
    api = scripted_api([Reply.tool_use("Bash", {"command": SLEEP.format(60)}), Reply.text("never")])
    async with runner_factory(api) as runner:
        started = time.monotonic()
        _, result = await runner.run_phase("sleep", allowed_tools=["Bash"], timeout=datetime.timedelta(seconds=3))
    assert result.status == res.PHASE_STATUS_TIMED_OUT
    assert time.monotonic() - started < 30
    assert "3 s timeout" in result.reason
    # The CLI handles SIGTERM and exits with a code of its own; either way its exit is recorded.
    assert result.exit_signal in ("SIGTERM", "SIGKILL") or result.HasField("exit_code")


async def test_client_cancel_kills_the_process_group(claude_binary, scripted_api, runner_factory, tmp_path):
    pid_file = tmp_path / "work" / "grandchild.pid"
    api = scripted_api([
        Reply.tool_use("Bash", {"command": f"python3 grandchild.py & {SLEEP.format(300)}"}),
        Reply.text("never"),
    ])
    async with runner_factory(api) as runner:
        # It writes who it is (its pid inside the sandbox's PID namespace means nothing out here).
        (runner.workdir / "grandchild.py").write_text(
            f"import os, time\nopen('grandchild.pid', 'w').write({SELF_IDENTITY})\ntime.sleep(300)\n")
        call = runner.stub.RunPhase(pb.RunPhaseRequest(job_id="job-c", phase_id="p", prompt="wait",
                                                       working_dir=str(runner.workdir),
                                                       options=pb.PhaseOptions(allowed_tools=["Bash"])), timeout=60)
        async for response in call:
            if any(e.HasField("tool_call_started") for e in response.events):
                break
        for _ in range(100):
            if pid_file.exists() and pid_file.read_text().strip():
                break
            await asyncio.sleep(0.1)
        grandchild = find_process(pid_file.read_text())
        assert grandchild is not None and alive(grandchild)
        call.cancel()
        for _ in range(100):
            phase = (await runner.stub.GetJob(pb.GetJobRequest(job_id="job-c"), timeout=10)).job.phases[0]
            if phase.status == res.PHASE_STATUS_CANCELLED:
                break
            await asyncio.sleep(0.1)
        assert phase.status == res.PHASE_STATUS_CANCELLED, phase.status_reason
        assert "disconnected" in phase.result.reason
        for _ in range(50):
            if not alive(grandchild):
                break
            await asyncio.sleep(0.1)
        assert not alive(grandchild)


async def test_working_dir_outside_roots_is_refused(claude_binary, scripted_api, runner_factory, tmp_path):
    async with runner_factory(scripted_api([])) as runner:
        request = pb.RunPhaseRequest(job_id="j", phase_id="p", prompt="hi", working_dir="/etc")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await runner.stub.RunPhase(request, timeout=10).read()
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error_info(caught.value).reason == "WORKING_DIR_OUTSIDE_ROOTS"
        escape = runner.workdir / "escape"
        escape.symlink_to("/etc")
        request.working_dir = str(escape)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await runner.stub.RunPhase(request, timeout=10).read()
        assert error_info(caught.value).reason == "WORKING_DIR_OUTSIDE_ROOTS"
        # Nothing was recorded for a refused request.
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await runner.stub.GetJob(pb.GetJobRequest(job_id="j"), timeout=10)
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND


async def test_detached_phase_can_be_watched_after_the_caller_left(claude_binary, scripted_api, runner_factory):
    api = scripted_api([Reply.tool_use("Bash", {"command": f"{SLEEP.format(2)}; echo late"}),
                        Reply.text("finished")])
    async with runner_factory(api) as runner:
        call = runner.stub.RunPhase(pb.RunPhaseRequest(
            job_id="job-d", phase_id="p", prompt="x", working_dir=str(runner.workdir),
            options=pb.PhaseOptions(allowed_tools=["Bash"], on_disconnect=res.ON_DISCONNECT_DETACH)), timeout=60)
        first = await call.read()
        seen = max(e.sequence for e in first.events)
        call.cancel()
        events, result = await asyncio.wait_for(_watch(runner, "job-d", "p", seen), 60)
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        assert events[0].sequence == seen + 1
        assert_gap_free_from(events, seen + 1)
        detached = [e for e in events if e.HasField("control") and e.control.kind == 14]
        assert detached, "the detach is recorded as a control event"
        # A second watcher from 0 replays the finished phase from the store, identically.
        replay, replay_result = await _watch(runner, "job-d", "p", 0)
        assert [e.sequence for e in replay] == list(range(1, result.last_sequence + 1))
        assert replay[seen:] == events
        assert replay_result == result


def assert_gap_free_from(events, first):
    assert [e.sequence for e in events] == list(range(first, first + len(events)))


async def _watch(runner, job_id, phase_id, after):
    from support.runner_server import collect

    return await collect(runner.stub.WatchPhase(pb.WatchPhaseRequest(job_id=job_id, phase_id=phase_id,
                                                                     after_sequence=after), timeout=60))


async def test_duplicate_phase_and_bad_requests(claude_binary, scripted_api, runner_factory):
    async with runner_factory(scripted_api([Reply.text("ok")])) as runner:
        await runner.run_phase("hi", job_id="dup", phase_id="p")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await runner.run_phase("hi", job_id="dup", phase_id="p")
        assert caught.value.code() == grpc.StatusCode.ALREADY_EXISTS
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await runner.run_phase("hi", job_id="dup", phase_id="q", env={"LD_PRELOAD": "/x.so"})
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error_info(caught.value).reason == "ENV_NOT_ALLOWED"
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await runner.run_phase("hi", job_id="bad id")
        assert error_info(caught.value).metadata["field"] == "job_id"
        assert os.path.isdir(runner.data_dir)
