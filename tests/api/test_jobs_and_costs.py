"""Jobs across phases: a background subagent's late second result, paging, cost totals by scope,
offline mode, and the `helix-runner run` command — all through the real server and real CLI."""

from __future__ import annotations

import signal
import subprocess
import sys

import grpc
import pytest
from support.processes import serve_env, serving_port, start_serve

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.api.errors import error_info
from helix_runner.offline import Reply, RequestMatcher, Script, TextBlock, ToolUseBlock, Usage

pytestmark = pytest.mark.real_cli


async def test_background_subagent_second_result_comes_before_the_final_message(
        claude_binary, scripted_api, runner_factory):
    main = RequestMatcher(first_user_contains="MAIN-PROMPT")
    sub = RequestMatcher(first_user_contains="[[subagent]]")
    api = scripted_api([
        Reply(content=[TextBlock("Delegating."), ToolUseBlock("Agent", {
            "description": "Count files", "subagent_type": "general-purpose",
            "prompt": "[[subagent]] Count the .txt files."})], match=main),
        Reply.tool_use("Bash", {"command": "ls", "description": "List"}, match=sub),
        Reply.text("There are no .txt files.", match=sub, usage=Usage(input_tokens=300, output_tokens=30)),
        Reply.text("The subagent reported back.", match=main, times=3),
    ])
    async with runner_factory(api) as runner:
        events, result = await runner.run_phase("MAIN-PROMPT please delegate", allowed_tools=["Agent", "Bash"])

    turn_results = [e.turn_result for e in events if e.HasField("turn_result")]
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    assert result.result_count == len(turn_results) >= 2  # the follow-up turn after the background task
    last_result_seq = max(e.sequence for e in events if e.HasField("turn_result"))
    assert events[-1].sequence > last_result_seq and result.last_sequence == events[-1].sequence
    # Running totals: the phase's reported cost is the latest result's, never the sum.
    assert result.cost.reported_usd == pytest.approx(turn_results[-1].total_cost_usd)
    assert result.cost.reported_usd < sum(t.total_cost_usd for t in turn_results)
    agent = next(e.tool_call_started for e in events
                 if e.HasField("tool_call_started") and e.tool_call_started.name == "Agent")
    sub_calls = [e for e in events if e.HasField("tool_call_started") and e.parent_tool_use_id == agent.tool_use_id]
    assert [e.tool_call_started.name for e in sub_calls] == ["Bash"]
    tasks = [e.task for e in events if e.HasField("task")]
    assert tasks[0].kind == ev.TASK_EVENT_KIND_STARTED and tasks[0].tool_use_id == agent.tool_use_id


async def test_list_jobs_pages_and_filters_and_costs_by_scope(claude_binary, scripted_api, runner_factory):
    api = scripted_api(Script(turns=[], fallback=Reply.text("ok", usage=Usage(input_tokens=1000, output_tokens=100))))
    async with runner_factory(api) as runner:
        for i in range(5):
            project = "alpha" if i % 2 == 0 else "beta"
            request = pb.RunPhaseRequest(job_id=f"job-{i}", phase_id="p", project_id=project, prompt="hi",
                                         working_dir=str(runner.workdir))
            async for _ in runner.stub.RunPhase(request, timeout=60):
                pass
        # A second phase of job-0, in the same project.
        async for _ in runner.stub.RunPhase(pb.RunPhaseRequest(job_id="job-0", phase_id="q", project_id="alpha",
                                                               prompt="again", working_dir=str(runner.workdir)),
                                            timeout=60):
            pass

        stub = runner.stub
        seen, token = [], ""
        while True:
            page = await stub.ListJobs(pb.ListJobsRequest(page_size=2, page_token=token), timeout=10)
            assert len(page.jobs) <= 2
            seen.extend(j.job_id for j in page.jobs)
            token = page.next_page_token
            if not token:
                break
        assert sorted(seen) == [f"job-{i}" for i in range(5)] and len(set(seen)) == 5
        assert seen == sorted(seen, reverse=True)  # newest first
        alpha = await stub.ListJobs(pb.ListJobsRequest(project_id="alpha"), timeout=10)
        assert sorted(j.job_id for j in alpha.jobs) == ["job-0", "job-2", "job-4"]
        assert [p.phase_id for p in next(j for j in alpha.jobs if j.job_id == "job-0").phases] == ["p", "q"]
        done = await stub.ListJobs(pb.ListJobsRequest(statuses=[res.PHASE_STATUS_SUCCEEDED]), timeout=10)
        assert len(done.jobs) == 5
        none = await stub.ListJobs(pb.ListJobsRequest(statuses=[res.PHASE_STATUS_FAILED]), timeout=10)
        assert not none.jobs

        first = await stub.ListJobs(pb.ListJobsRequest(page_size=2), timeout=10)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.ListJobs(pb.ListJobsRequest(page_size=2, project_id="beta",
                                                   page_token=first.next_page_token), timeout=10)
        assert error_info(caught.value).reason == "INVALID_PAGE_TOKEN"
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.ListJobs(pb.ListJobsRequest(page_size=-1), timeout=10)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT

        phase_cost = (await stub.GetCostTotals(pb.GetCostTotalsRequest(job_id="job-0", phase_id="p"),
                                               timeout=10)).totals
        job_cost = (await stub.GetCostTotals(pb.GetCostTotalsRequest(job_id="job-0"), timeout=10)).totals
        alpha_cost = (await stub.GetCostTotals(pb.GetCostTotalsRequest(project_id="alpha"), timeout=10)).totals
        beta_cost = (await stub.GetCostTotals(pb.GetCostTotalsRequest(project_id="beta"), timeout=10)).totals
        assert phase_cost.phase_count == 1 and job_cost.phase_count == 2
        assert alpha_cost.phase_count == 4 and beta_cost.phase_count == 2
        assert job_cost.reported_usd == pytest.approx(2 * phase_cost.reported_usd)
        assert alpha_cost.reported_usd == pytest.approx(2 * beta_cost.reported_usd)
        assert job_cost.tokens.input_tokens == 2 * phase_cost.tokens.input_tokens > 0
        (model,) = phase_cost.models
        assert model.computed_usd > 0 and model.pricing_source == res.PRICING_SOURCE_PRICE_TABLE
        assert abs(phase_cost.computed_usd - phase_cost.reported_usd) < 0.01 * phase_cost.reported_usd + 1e-9

        # Issue 22 item 14: a phase of the default project (no project_id) recorded its per-model costs
        # under project "", so the project's totals had no per-model breakdown (`costs --project default`).
        async for _ in stub.RunPhase(pb.RunPhaseRequest(job_id="job-d", phase_id="p", prompt="hi",
                                                        working_dir=str(runner.workdir)), timeout=60):
            pass
        for project in ("", "default"):
            default_cost = (await stub.GetCostTotals(pb.GetCostTotalsRequest(project_id=project), timeout=10)).totals
            assert default_cost.phase_count == 1
            assert [m.computed_usd for m in default_cost.models] == [pytest.approx(default_cost.computed_usd)]

        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GetCostTotals(pb.GetCostTotalsRequest(phase_id="p"), timeout=10)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GetJob(pb.GetJobRequest(job_id="nope"), timeout=10)
        assert error_info(caught.value).reason == "JOB_NOT_FOUND"


async def test_offline_mode_runs_the_real_cli_against_a_script_file(claude_binary, runner_factory, tmp_path):
    script = tmp_path / "script.json"
    target = tmp_path / "work" / "offline.txt"
    Script([Reply.tool_use("Bash", {"command": f"echo offline > {target}"}), Reply.text("Done offline.")]).save(script)
    async with runner_factory(None, offline_script=str(script)) as runner:
        _, result = await runner.run_phase("go", allowed_tools=["Bash"])
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    assert result.result_text == "Done offline."
    assert target.read_text() == "offline\n"


async def test_offline_mode_plays_the_script_from_its_start_in_every_phase(claude_binary, runner_factory, tmp_path):
    script = tmp_path / "script.json"
    Script([Reply.tool_use("Bash", {"command": "echo $((40+2))"}), Reply.text("Done offline.")]).save(script)
    async with runner_factory(None, offline_script=str(script)) as runner:
        for phase in ("p1", "p2"):
            events, result = await runner.run_phase("go", phase_id=phase, allowed_tools=["Bash"])
            assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
            assert result.result_text == "Done offline.", phase
            finished = [e.tool_call_finished for e in events if e.HasField("tool_call_finished")]
            assert [f.content_preview for f in finished] == ["42"], phase


def test_run_command_shows_progress_and_final_status(claude_binary, tmp_path):
    """`helix-runner run` against `helix-runner serve --offline-script`, both as real processes."""
    script = tmp_path / "script.json"
    Script([Reply.tool_use("Bash", {"command": "echo from-run-command"}), Reply.text("Finished.")]).save(script)
    work = tmp_path / "work"
    work.mkdir()
    log = tmp_path / "serve.log"
    server = start_serve(tmp_path, log, "--offline-script", str(script))
    try:
        port = serving_port(log, server)
        run = subprocess.run(
            [sys.executable, "-m", "helix_runner", "run", "--server", f"127.0.0.1:{port}", "--workdir", str(work),
             "--prompt", "go", "--allowed-tool", "Bash", "--job-id", "cli-job"],
            capture_output=True, text=True, timeout=120, env=serve_env(tmp_path))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "→ Bash" in run.stdout and "from-run-command" in run.stdout
    assert "SUCCEEDED: completed" in run.stdout
    assert "exit code 0" in run.stdout and "job cli-job" in run.stdout


@pytest.mark.parametrize("override", [False, True])
async def test_unknown_model_is_flagged_or_priced_by_override(claude_binary, scripted_api, runner_factory, override):
    api = scripted_api([Reply.text("hi", usage=Usage(input_tokens=1_000_000, output_tokens=0))])
    prices = '{"helix-test-model": {"input_per_mtok": 2, "output_per_mtok": 4}}' if override else None
    async with runner_factory(api, price_overrides=prices) as runner:
        _, result = await runner.run_phase("hi", model="helix-test-model")
        totals = (await runner.stub.GetCostTotals(pb.GetCostTotalsRequest(job_id="job-1"), timeout=10)).totals
    (model,) = [m for m in result.cost.models if m.model == "helix-test-model"]
    if override:
        assert model.pricing_source == res.PRICING_SOURCE_OVERRIDE
        assert model.computed_usd == pytest.approx(2.0)  # one million input tokens at $2/MTok
        assert not result.cost.unpriced_models
    else:
        assert model.pricing_source == res.PRICING_SOURCE_UNPRICED
        assert list(result.cost.unpriced_models) == ["helix-test-model"]
        assert list(totals.unpriced_models) == ["helix-test-model"]
