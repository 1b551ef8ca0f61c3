"""RunPhase with retries (docs/retries-and-admission.md): the attempt loop end to end.

The real CLI through the scripted Messages API where it can produce the failure (a 529 storm, 400,
401, max turns); fake ``claude`` executables for what it cannot (a crash, a cost past the budget, a
rejected rate-limit event). Backoffs are tiny so the tests do not wait on them.
"""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
import time

import pytest
from google.protobuf.duration_pb2 import Duration
from support.runner_server import collect

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.domain.retry_policy import DEFAULT_CONTINUATION_PROMPT
from helix_runner.offline import ApiError, Reply, Usage

INIT = ('{"type":"system","subtype":"init","cwd":"/w","session_id":"s-1","tools":["Bash"],'
        '"model":"claude-sonnet-4-5","permissionMode":"default","claude_code_version":"2.1.330","uuid":"u1"}')


def fake_claude(tmp_path, body: str) -> str:
    path = tmp_path / "fake-claude"
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return str(path)

FAST = {"initial_backoff": Duration(nanos=10_000_000), "max_backoff": Duration(nanos=50_000_000)}


def retry(max_attempts: int = 3, **extra) -> pb.RetryPolicy:
    return pb.RetryPolicy(max_attempts=max_attempts, **{**FAST, **extra})


def controls(events, kind):
    return [e.control for e in events if e.HasField("control") and e.control.kind == kind]


def assert_gap_free(events):
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))


def _text(message) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") if isinstance(b.get("text"), str) else _text(b) if "content" in b else ""
                     for b in content)


@pytest.mark.real_cli
async def test_a_529_storm_is_retried_by_resuming_the_session(claude_binary, scripted_api, runner_factory):
    api = scripted_api([
        Reply.tool_use("Bash", {"command": "echo first-attempt", "description": "echo"},
                       usage=Usage(input_tokens=1000, output_tokens=50)),
        ApiError(529, times=3),  # the harness gives the CLI 2 retries of its own: all three fail
        Reply.text("Done after the overload.", usage=Usage(input_tokens=1200, output_tokens=20)),
    ])
    async with runner_factory(api) as runner:
        events, result = await runner.run_phase("echo something, then say done", allowed_tools=["Bash"],
                                                retry=retry(3), deadline=120)
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    assert [a.end_kind for a in result.attempts] == [res.ATTEMPT_END_KIND_API_OVERLOADED,
                                                     res.ATTEMPT_END_KIND_COMPLETED]
    first, second = result.attempts
    assert first.api_error_status == 529 and first.retryable and first.HasField("retry_delay")
    # The second attempt resumed the first one's session: same id, and the API saw the history.
    assert second.resumed_session_id == first.session_id == result.session_id != ""
    last_request = api.message_requests()[-1].messages
    tool_uses = [b for m in last_request if m["role"] == "assistant" and isinstance(m["content"], list)
                 for b in m["content"] if b.get("type") == "tool_use"]
    assert len(tool_uses) == 1 and "echo first-attempt" in json.dumps(tool_uses[0]["input"])
    assert DEFAULT_CONTINUATION_PROMPT in _text(last_request[-1])
    # One gap-free stream: ATTEMPT_STARTED 1, RETRY_SCHEDULED 1, ATTEMPT_STARTED 2, each attempt's lines.
    assert_gap_free(events)
    started = controls(events, ev.CONTROL_EVENT_KIND_ATTEMPT_STARTED)
    assert [(c.attempt, c.max_attempts) for c in started] == [(1, 3), (2, 3)]
    assert started[1].resumed_session_id == first.session_id
    (scheduled,) = controls(events, ev.CONTROL_EVENT_KIND_RETRY_SCHEDULED)
    assert scheduled.attempt == 1 and scheduled.end_kind == res.ATTEMPT_END_KIND_API_OVERLOADED
    assert first.first_sequence == started[0].sequence if hasattr(started[0], "sequence") else True
    by_sequence = {e.sequence: e for e in events}
    assert by_sequence[first.first_sequence].control.kind == ev.CONTROL_EVENT_KIND_ATTEMPT_STARTED
    assert by_sequence[second.first_sequence].control.attempt == 2
    between = [by_sequence[s] for s in range(first.last_sequence + 1, second.first_sequence)]
    assert [e.control.kind for e in between if e.HasField("control")][0] == ev.CONTROL_EVENT_KIND_RETRY_SCHEDULED
    # Cost across attempts adds up (each attempt's own part; latest wins inside an attempt).
    assert result.cost.computed_usd == pytest.approx(first.cost.computed_usd + second.cost.computed_usd)
    assert result.cost.tokens.input_tokens == first.cost.tokens.input_tokens + second.cost.tokens.input_tokens
    assert second.cost.tokens.input_tokens == 1200


@pytest.mark.real_cli
@pytest.mark.parametrize(("script", "options", "status", "kind"), [
    ([ApiError(400, message="prompt is too long")], {}, res.PHASE_STATUS_FAILED,
     res.ATTEMPT_END_KIND_API_INVALID_REQUEST),
    ([ApiError(401, times=50)], {}, res.PHASE_STATUS_FAILED, res.ATTEMPT_END_KIND_API_AUTHENTICATION),
    ([Reply.tool_use("Bash", {"command": "true"}), Reply.tool_use("Bash", {"command": "true"})],
     {"max_turns": 1, "allowed_tools": ["Bash"]}, res.PHASE_STATUS_FAILED, res.ATTEMPT_END_KIND_MAX_TURNS),
], ids=["400", "401", "max-turns"])
async def test_permanent_failures_are_not_retried(claude_binary, scripted_api, runner_factory, script, options,
                                                  status, kind):
    api = scripted_api(script)
    async with runner_factory(api) as runner:
        events, result = await runner.run_phase("hi", retry=retry(3), deadline=120, **options)
    assert result.status == status, result.reason
    assert [(a.number, a.end_kind, a.retryable) for a in result.attempts] == [(1, kind, False)]
    assert "not transient" in result.reason or "no retry" in result.reason or result.reason
    assert not controls(events, ev.CONTROL_EVENT_KIND_RETRY_SCHEDULED)


# The log goes to the working directory: the fake runs sandboxed, and its own directory (a
# workspace root beside the workspace) is read-only to it.
CRASHING = f"""
    import os, sys
    with open("argv.log", "a") as log:
        log.write(" ".join(sys.argv[1:]) + "\\n")
    sys.stdin.readline(); sys.stdin.readline()
    print({INIT!r}, flush=True)
    os.kill(os.getpid(), 9)
"""


async def test_a_crash_every_attempt_ends_incomplete_with_each_attempt_listed(tmp_path, runner_factory):
    claude = fake_claude(tmp_path, CRASHING)
    async with runner_factory(None, claude_path=claude) as runner:
        log = runner.workdir / "argv.log"
        events, result = await runner.run_phase("hi", retry=retry(3), deadline=60)
        # A finished phase's inspection lists every attempt of its result.
        inspection = (await runner.stub.InspectPhase(pb.InspectPhaseRequest(job_id="job-1", phase_id="p1"),
                                                     timeout=10)).inspection
        assert list(inspection.attempts) == list(result.attempts)
    assert result.status == res.PHASE_STATUS_INCOMPLETE
    assert "all 3 attempts are used up" in result.reason
    assert [(a.number, a.end_kind, a.exit_signal) for a in result.attempts] == [
        (n, res.ATTEMPT_END_KIND_CRASHED, "SIGKILL") for n in (1, 2, 3)]
    argvs = log.read_text().splitlines()
    assert len(argvs) == 3
    assert "--resume" not in argvs[0] and all("--resume s-1" in a for a in argvs[1:])  # init line: resumed
    assert [a.resumed_session_id for a in result.attempts] == ["", "s-1", "s-1"]
    assert_gap_free(events)
    assert len(controls(events, ev.CONTROL_EVENT_KIND_RETRY_SCHEDULED)) == 2


async def test_a_cancel_during_the_backoff_ends_cancelled_at_once(tmp_path, runner_factory):
    claude = fake_claude(tmp_path, CRASHING)
    async with runner_factory(None, claude_path=claude) as runner:
        request = pb.RunPhaseRequest(job_id="job-1", phase_id="p1", prompt="hi", working_dir=str(runner.workdir),
                                     options=pb.PhaseOptions(retry=pb.RetryPolicy(
                                         max_attempts=3, initial_backoff=Duration(seconds=600),
                                         max_backoff=Duration(seconds=600), disable_jitter=True)))
        call = runner.stub.RunPhase(request, timeout=60)
        events = []
        async for response in call:
            events.extend(response.events)
            if controls(events, ev.CONTROL_EVENT_KIND_RETRY_SCHEDULED):
                break
        (scheduled,) = controls(events, ev.CONTROL_EVENT_KIND_RETRY_SCHEDULED)
        assert scheduled.retry_delay.seconds == 600
        job = (await runner.stub.GetJob(pb.GetJobRequest(job_id="job-1"), timeout=10)).job
        (phase,) = job.phases
        assert phase.status == res.PHASE_STATUS_QUEUED and phase.queue.reason == res.QUEUE_REASON_RETRY_BACKOFF
        assert [a.end_kind for a in phase.attempts] == [res.ATTEMPT_END_KIND_CRASHED]
        # InspectPhase lists them too while the phase lives (PhaseInspection.attempts).
        inspection = (await runner.stub.InspectPhase(pb.InspectPhaseRequest(job_id="job-1", phase_id="p1"),
                                                     timeout=10)).inspection
        assert list(inspection.attempts) == list(phase.attempts)
        cancelled_at = time.monotonic()
        await runner.stub.CancelPhase(pb.CancelPhaseRequest(job_id="job-1", phase_id="p1"), timeout=10)
        rest, result = await collect(call)
    assert time.monotonic() - cancelled_at < 10  # not the 600 s backoff
    assert result.status == res.PHASE_STATUS_CANCELLED
    assert len(result.attempts) == 1


async def test_a_budget_used_up_by_attempt_1_allows_no_attempt_2(tmp_path, runner_factory):
    overloaded = ('{"type":"result","subtype":"success","is_error":true,"api_error_status":529,"duration_ms":5,'
                  '"num_turns":1,"result":"API Error: 529","session_id":"s-1","total_cost_usd":0.02,'
                  '"usage":{"input_tokens":10,"output_tokens":5},"terminal_reason":"api_error",'
                  '"permission_denials":[],"uuid":"u9"}')
    claude = fake_claude(tmp_path, f"""
        import sys
        sys.stdin.readline(); sys.stdin.readline()
        print({INIT!r}); print({overloaded!r}, flush=True)
        sys.exit(1)
    """)
    async with runner_factory(None, claude_path=claude) as runner:
        events, result = await runner.run_phase("hi", retry=retry(3), max_budget_usd=0.01, deadline=60)
    assert result.status == res.PHASE_STATUS_FAILED
    assert [a.end_kind for a in result.attempts] == [res.ATTEMPT_END_KIND_MAX_BUDGET]
    assert "budget is used up" in result.reason


async def test_a_rejected_rate_limit_event_holds_new_starts_until_its_reset(tmp_path, runner_factory):
    reset_file = tmp_path / "reset"
    rate_limited = ('{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"duration_ms":5,'
                    '"num_turns":1,"result":"API Error: 429","session_id":"s-1","total_cost_usd":0,'
                    '"usage":{"input_tokens":0,"output_tokens":0},"terminal_reason":"api_error",'
                    '"permission_denials":[],"uuid":"u9"}')
    claude = fake_claude(tmp_path, f"""
        import json, pathlib, sys
        sys.stdin.readline(); sys.stdin.readline()
        print({INIT!r})
        if "--max-turns" in sys.argv:
            reset = int(pathlib.Path({str(reset_file)!r}).read_text())
            print(json.dumps({{"type": "rate_limit_event", "session_id": "s-1", "uuid": "r",
                              "rate_limit_info": {{"status": "rejected", "resetsAt": reset}}}}))
            print({rate_limited!r}, flush=True)
            sys.exit(1)
        print('{{"type":"result","subtype":"success","is_error":false,"duration_ms":1,"num_turns":1,'
              '"result":"ok","session_id":"s-2","total_cost_usd":0,"usage":{{"input_tokens":0,'
              '"output_tokens":0}},"permission_denials":[],"uuid":"u3"}}', flush=True)
    """)
    async with runner_factory(None, claude_path=claude) as runner:
        reset_at = int(time.time()) + 3
        reset_file.write_text(str(reset_at))
        _, limited = await runner.run_phase("hi", phase_id="limited", retry=retry(1), max_turns=5, deadline=60)
        assert [a.end_kind for a in limited.attempts] == [res.ATTEMPT_END_KIND_API_RATE_LIMITED]
        events, result = await runner.run_phase("hi", phase_id="next", retry=retry(1), deadline=60)
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    (queued, *_) = controls(events, ev.CONTROL_EVENT_KIND_QUEUED)
    assert queued.queue.reason == res.QUEUE_REASON_RATE_LIMITED
    assert abs(queued.queue.not_before.seconds - reset_at) <= 1
    assert result.attempts[0].start_time.ToNanoseconds() >= (reset_at - 1) * 1_000_000_000


FAST_CLI = f"""
    import sys
    sys.stdin.readline(); sys.stdin.readline()
    print({INIT!r}, flush=True)
    print('{{"type":"result","subtype":"success","is_error":false,"duration_ms":1,"num_turns":1,"result":"ok",'
          '"session_id":"s-1","total_cost_usd":0,"usage":{{"input_tokens":0,"output_tokens":0}},'
          '"permission_denials":[],"uuid":"u3"}}', flush=True)
"""


@pytest.mark.slow  # several server processes or a kill and restart: the slower tier
async def test_70_phases_queue_within_the_limits_and_take_turns_between_projects(tmp_path, runner_factory):
    claude = fake_claude(tmp_path, FAST_CLI)
    async with runner_factory(None, claude_path=claude, max_running_phases=4, max_starting_phases=2) as runner:
        async def one(project: str, n: int):
            request = pb.RunPhaseRequest(job_id=f"job-{project}", phase_id=f"p{n:02d}", project_id=project,
                                         prompt="hi", working_dir=str(runner.workdir))
            return await collect(runner.stub.RunPhase(request, timeout=300))

        # Project a arrives first with 35 phases, then b with 35.
        tasks = [asyncio.ensure_future(one("a", n)) for n in range(35)]
        await asyncio.sleep(0.2)
        tasks += [asyncio.ensure_future(one("b", n)) for n in range(35, 70)]
        outcomes = await asyncio.wait_for(asyncio.gather(*tasks), 300)
    assert all(result.status == res.PHASE_STATUS_SUCCEEDED for _, result in outcomes)
    queued = sum(1 for events, _ in outcomes if controls(events, ev.CONTROL_EVENT_KIND_QUEUED))
    assert queued >= 60  # at most 4 started without waiting
    spans = sorted((r.attempts[0].start_time.ToNanoseconds(), r.attempts[0].end_time.ToNanoseconds(), r.phase_id)
                   for _, r in outcomes)
    edges = sorted([(s, 1) for s, _, _ in spans] + [(e, -1) for _, e, _ in spans])
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    assert 2 <= peak <= 4, peak
    # Fair turns: once b has arrived, the starts alternate between the projects while both wait.
    order = ["a" if int(p[1:]) < 35 else "b" for _, _, p in spans]
    first_b = order.index("b")
    both = order[first_b:first_b + 40]
    runs = max(len(run) for run in "".join(both).replace("ab", "a b").replace("ba", "b a").split())
    assert runs <= 2, "".join(order)


# Holds its result until the test creates the file `release` in the working directory (bounded).
HELD_CLI = f"""
    import os, sys, time
    sys.stdin.readline(); sys.stdin.readline()
    print({INIT!r}, flush=True)
    deadline = time.monotonic() + 60
    while not os.path.exists("release") and time.monotonic() < deadline:
        time.sleep(0.02)
    print('{{"type":"result","subtype":"success","is_error":false,"duration_ms":1,"num_turns":1,"result":"ok",'
          '"session_id":"s-1","total_cost_usd":0,"usage":{{"input_tokens":0,"output_tokens":0}},'
          '"permission_denials":[],"uuid":"u3"}}', flush=True)
"""


async def test_a_queued_phase_starts_when_its_cli_starts_and_reports_its_queue_wait(tmp_path, runner_factory):
    """Issue 22 item 3: Phase.start_time of a queued phase was its acceptance, so GetJob disagreed with
    PhaseResult.start_time and attempts[0].start_time by the whole queue wait."""
    claude = fake_claude(tmp_path, HELD_CLI)
    async with runner_factory(None, claude_path=claude, max_running_phases=1) as runner:
        def request(phase_id):
            return pb.RunPhaseRequest(job_id="q", phase_id=phase_id, prompt="hi", working_dir=str(runner.workdir))

        async def phase_status(phase_id: str) -> res.Phase | None:
            jobs = (await runner.stub.ListJobs(pb.ListJobsRequest(), timeout=10)).jobs
            return next((p for job in jobs for p in job.phases if p.phase_id == phase_id), None)

        async def until(phase_id: str, status: int) -> res.Phase:
            async with asyncio.timeout(30):
                while True:
                    phase = await phase_status(phase_id)
                    if phase is not None and phase.status == status:
                        return phase
                    await asyncio.sleep(0.05)

        first = asyncio.ensure_future(collect(runner.stub.RunPhase(request("first"), timeout=90)))
        await until("first", res.PHASE_STATUS_RUNNING)  # and held until `release` exists
        second = asyncio.ensure_future(collect(runner.stub.RunPhase(request("second"), timeout=90)))
        queued = await until("second", res.PHASE_STATUS_QUEUED)  # behind the first
        assert not queued.HasField("start_time") and not queued.HasField("queue_wait")
        released_ns = time.time_ns()
        (runner.workdir / "release").touch()
        (_, first_result), (_, result) = await asyncio.wait_for(asyncio.gather(first, second), 60)
        job = (await runner.stub.GetJob(pb.GetJobRequest(job_id="q"), timeout=10)).job
    assert first_result.status == result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    phase = next(p for p in job.phases if p.phase_id == "second")
    start = phase.start_time.ToNanoseconds()
    assert start == result.start_time.ToNanoseconds() == result.attempts[0].start_time.ToNanoseconds()
    assert phase.create_time.ToNanoseconds() < released_ns <= start  # it started only once the first ended
    assert phase.queue_wait.ToNanoseconds() == start - phase.create_time.ToNanoseconds()
    assert result.queue_wait == phase.queue_wait
    # A phase that did not wait: the same instants, and a wait of (almost) nothing.
    unqueued = next(p for p in job.phases if p.phase_id == "first")
    assert unqueued.start_time == first_result.start_time == first_result.attempts[0].start_time
    assert unqueued.queue_wait == first_result.queue_wait and unqueued.queue_wait.ToNanoseconds() >= 0
