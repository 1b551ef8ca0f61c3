"""RunPhase under faults the real CLI cannot be made to produce, via fake `claude` executables.

Each fake prints genuine stream-json lines copied from the corpus shape, then misbehaves. The
phase must end with the true status, never "done" by inference (docs/decisions/ADR-045.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from support.processes import SELF_IDENTITY, find_process, serving_port, start_serve

from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix.runner.v1 import runner_service_pb2_grpc as pb_grpc

INIT = ('{"type":"system","subtype":"init","cwd":"/w","session_id":"s-1","tools":["Bash"],'
        '"model":"claude-sonnet-4-5","permissionMode":"default","claude_code_version":"2.1.330","uuid":"u1"}')
TOOL_USE = ('{"type":"assistant","message":{"id":"msg_1","type":"message","role":"assistant",'
            '"model":"claude-sonnet-4-5","content":[{"type":"tool_use","id":"toolu_1","name":"Bash",'
            '"input":{"command":"ls"}}],"stop_reason":null,"usage":{"input_tokens":10,"output_tokens":1}},'
            '"parent_tool_use_id":null,"session_id":"s-1","uuid":"u2"}')
RESULT = ('{"type":"result","subtype":"success","is_error":false,"duration_ms":5,"duration_api_ms":4,'
          '"num_turns":1,"result":"ok","session_id":"s-1","total_cost_usd":0.01,'
          '"usage":{"input_tokens":10,"output_tokens":5},"modelUsage":{"claude-sonnet-4-5":{"inputTokens":10,'
          '"outputTokens":5,"cacheReadInputTokens":0,"cacheCreationInputTokens":0,"costUSD":0.01}},'
          '"permission_denials":[],"uuid":"u3"}')


def fake_claude(tmp_path: Path, body: str) -> str:
    path = tmp_path / "fake-claude"
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return str(path)


async def run(runner, **kw):
    return await runner.run_phase("hi", deadline=60, **kw)


async def test_stdout_closed_early_is_incomplete(tmp_path, runner_factory):
    claude = fake_claude(tmp_path, f"""
        import os, sys, time
        sys.stdin.readline()
        print({INIT!r}); print({TOOL_USE!r}, flush=True)
        os.close(1)
        time.sleep(60)
    """)
    async with runner_factory(None, claude_path=claude, exit_grace_seconds=1) as runner:
        started = time.monotonic()
        events, result = await run(runner)
    assert result.status == res.PHASE_STATUS_INCOMPLETE
    assert "without a final result" in result.reason
    assert time.monotonic() - started < 20
    assert result.diagnostics.unfinished_tool_calls == 1
    assert result.cost.computed_only  # no result: the computed figure is the only one, and marked


async def test_crash_mid_line_is_incomplete_with_a_redacted_parse_error(tmp_path, runner_factory):
    claude = fake_claude(tmp_path, f"""
        import os, sys
        sys.stdin.readline()
        print({INIT!r}); sys.stdout.write('{{"type":"assistant","message":{{"content":[{{"type":"text","text":"sec'); sys.stdout.flush()
        os.kill(os.getpid(), 9)
    """)
    async with runner_factory(None, claude_path=claude) as runner:
        events, result = await run(runner)
    assert result.status == res.PHASE_STATUS_INCOMPLETE
    assert result.exit_signal == "SIGKILL"
    errors = [e.parse_error for e in events if e.HasField("parse_error")]
    assert len(errors) == 1 and errors[0].reason == res.PARSE_ERROR_REASON_TRUNCATED_AT_EOF if hasattr(
        res, "PARSE_ERROR_REASON_TRUNCATED_AT_EOF") else len(errors) == 1
    assert "sec" not in str(errors[0])  # redacted: the line's content never appears


async def test_fifty_megabyte_line_does_not_break_the_phase(tmp_path, runner_factory):
    claude = fake_claude(tmp_path, f"""
        import sys
        sys.stdin.readline()
        print({INIT!r})
        big = '{{"type":"user","message":{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"toolu_1","content":"' + "x" * (50 * 1024 * 1024) + '"}}]}},"session_id":"s-1"}}'
        print({TOOL_USE!r}); print(big); print({RESULT!r}, flush=True)
    """)
    async with runner_factory(None, claude_path=claude) as runner:
        events, result = await run(runner)
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    (finished,) = [e.tool_call_finished for e in events if e.HasField("tool_call_finished")]
    assert finished.content_bytes == 50 * 1024 * 1024
    assert len(finished.content_preview.encode()) <= 4096 and finished.content_truncated
    assert result.diagnostics.stdout_bytes > 50 * 1024 * 1024


async def test_result_then_no_exit_is_not_success(tmp_path, runner_factory):
    claude = fake_claude(tmp_path, f"""
        import sys, time
        sys.stdin.readline()
        print({INIT!r}); print({RESULT!r}, flush=True)
        time.sleep(60)   # stdout stays open, process never exits (claude-code#25629)
    """)
    async with runner_factory(None, claude_path=claude, default_idle_timeout_seconds=1) as runner:
        started = time.monotonic()
        _, result = await run(runner)
    assert result.status == res.PHASE_STATUS_TIMED_OUT
    assert result.result_subtype == "success"  # the CLI's own word is kept, but it is not trusted alone
    assert time.monotonic() - started < 20


async def test_nonzero_exit_after_success_result_is_failed(tmp_path, runner_factory):
    claude = fake_claude(tmp_path, f"""
        import sys
        sys.stdin.readline()
        print({INIT!r}); print({RESULT!r}, flush=True)
        sys.stderr.write("fatal: something broke after the result\\n")
        sys.exit(7)
    """)
    async with runner_factory(None, claude_path=claude) as runner:
        events, result = await run(runner)
    assert result.status == res.PHASE_STATUS_FAILED and result.exit_code == 7
    assert "something broke" in result.diagnostics.stderr_tail
    assert any(e.HasField("stderr") and "something broke" in e.stderr.text for e in events)


async def test_missing_claude_binary_is_a_clear_precondition_error(tmp_path, runner_factory):
    async with runner_factory(None, claude_path=str(tmp_path / "no-such-claude")) as runner:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await run(runner)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "no-such-claude" in caught.value.details()


async def test_preflight_names_missing_commands(tmp_path, runner_factory):
    claude = fake_claude(tmp_path, "print('never runs')\n")
    async with runner_factory(None, claude_path=claude, required_commands="pytest-nowhere-xyz") as runner:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await run(runner)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "pytest-nowhere-xyz" in caught.value.details()


@contextlib.asynccontextmanager
async def killed_mid_run_then_restarted(tmp_path: Path, claude: str, options: pb.PhaseOptions | None = None):
    """Serves with ``claude``, runs phase crash/p until a tool call starts, kills the server (SIGKILL
    to its group), starts a second one on the same data dir: yields (its stub, the events seen)."""
    (tmp_path / "work").mkdir()
    log1 = tmp_path / "serve1.log"
    proc = start_serve(tmp_path, log1, "--claude-path", claude)
    try:
        port = await asyncio.to_thread(serving_port, log1, proc)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.RunnerServiceStub(channel)
            call = stub.RunPhase(pb.RunPhaseRequest(job_id="crash", phase_id="p", prompt="x",
                                                    working_dir=str(tmp_path / "work"), options=options),
                                 timeout=30)
            seen = []
            async for response in call:
                seen.extend(response.events)
                if any(e.HasField("tool_call_started") for e in seen):
                    break
            os.killpg(proc.pid, signal.SIGKILL)  # the server and, in its group, nothing else
            proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    log2 = tmp_path / "serve2.log"
    proc2 = start_serve(tmp_path, log2, "--claude-path", claude)
    try:
        port = await asyncio.to_thread(serving_port, log2, proc2)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield pb_grpc.RunnerServiceStub(channel), seen
    finally:
        proc2.send_signal(signal.SIGTERM)
        proc2.wait(30)


@pytest.mark.slow  # several server processes or a kill and restart: the slower tier
async def test_server_killed_mid_run_then_restarted_marks_interrupted(tmp_path):
    claude = fake_claude(tmp_path, f"""
        import os, sys, time
        sys.stdin.readline()
        open("child.pid", "w").write({SELF_IDENTITY})  # its working directory: the sandbox lets it write there
        print({INIT!r}); print({TOOL_USE!r}, flush=True)
        time.sleep(120)
    """)
    async with killed_mid_run_then_restarted(tmp_path, claude) as (stub, seen):
        job = (await stub.GetJob(pb.GetJobRequest(job_id="crash"), timeout=10)).job
        (phase,) = job.phases
        assert phase.status == res.PHASE_STATUS_INTERRUPTED
        assert "server stopped" in phase.status_reason
        assert phase.result.status == res.PHASE_STATUS_INTERRUPTED
        # The one attempt, running when the server died, is listed as ended by the shutdown.
        assert [(a.number, a.end_kind) for a in phase.attempts] == [(1, res.ATTEMPT_END_KIND_SERVER_SHUTDOWN)]
        events = []
        async for response in stub.WatchPhase(pb.WatchPhaseRequest(job_id="crash", phase_id="p"), timeout=10):
            events.extend(response.events)
        # Everything the client saw before the crash is still there, plus the interruption.
        assert [e.sequence for e in events[: len(seen)]] == [e.sequence for e in seen]
        assert events[: len(seen)] == seen
        assert events[-1].status_changed.to_status == res.PHASE_STATUS_INTERRUPTED
        calls = (await stub.ListToolCalls(pb.ListToolCallsRequest(job_id="crash"), timeout=10)).tool_calls
        assert [c.status for c in calls] == [res.TOOL_CALL_STATUS_UNFINISHED]
        # The dead server's CLI was ended (by its shim on the server's death, or by recovery),
        # and the reason says what recovery found.
        child = (tmp_path / "work" / "child.pid").read_text()
        assert "outlived the server" in phase.status_reason or "leftover" in phase.status_reason
        assert find_process(child) is None


@pytest.mark.slow  # several server processes or a kill and restart: the slower tier
async def test_server_killed_mid_run_after_a_retry_keeps_the_attempts_after_restart(tmp_path):
    """Attempt 1 crashes, attempt 2 runs when the server is killed: the restarted server's GetJob and
    WatchPhase result still list attempt 1 (the phases.attempts_pb column) and attempt 2 as ended by
    the shutdown, with the cost recorded."""
    claude = fake_claude(tmp_path, f"""
        import os, sys, time
        sys.stdin.readline()
        print({INIT!r}, flush=True)
        if "--resume" not in sys.argv:
            os.kill(os.getpid(), 9)  # attempt 1: a crash, retried
        print({TOOL_USE!r}, flush=True)
        time.sleep(120)
    """)
    retry = pb.RetryPolicy(max_attempts=3, initial_backoff=Duration(nanos=10_000_000),
                           max_backoff=Duration(nanos=50_000_000))
    async with killed_mid_run_then_restarted(tmp_path, claude, pb.PhaseOptions(retry=retry)) as (stub, _):
        (phase,) = (await stub.GetJob(pb.GetJobRequest(job_id="crash"), timeout=10)).job.phases
        assert phase.status == res.PHASE_STATUS_INTERRUPTED
        assert [(a.number, a.status, a.end_kind, a.retryable) for a in phase.attempts] == [
            (1, res.PHASE_STATUS_INCOMPLETE, res.ATTEMPT_END_KIND_CRASHED, True),
            (2, res.PHASE_STATUS_INTERRUPTED, res.ATTEMPT_END_KIND_SERVER_SHUTDOWN, False)]
        assert phase.attempts[1].reason == phase.status_reason and phase.attempts[1].session_id == "s-1"
        assert list(phase.result.attempts) == list(phase.attempts)
        watched = None
        async for response in stub.WatchPhase(pb.WatchPhaseRequest(job_id="crash", phase_id="p"), timeout=10):
            if response.HasField("result"):
                watched = response.result
        assert watched == phase.result  # attempts and cost alike
