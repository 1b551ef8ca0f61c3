"""GetJob and ListJobs through the real server and CLI with the job-view cache: the answer sent as
pre-encoded bytes is the same message over gRPC, Connect binary and Connect JSON, and a job read
(so cached) before a new phase and while it runs shows it at the next read."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest
from connectrpc.compat import google_protobuf_json_codec
from google.protobuf import json_format

from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix.runner.v1.runner_service_connect import RunnerServiceClient
from helix_runner.offline import Reply, Script, Usage

pytestmark = pytest.mark.real_cli


async def run(runner, job: str, phase: str) -> None:
    request = pb.RunPhaseRequest(job_id=job, phase_id=phase, project_id="p", prompt="hi", working_dir=str(runner.workdir))
    async for _ in runner.stub.RunPhase(request, timeout=60):
        pass


async def test_a_cached_job_is_the_same_on_every_transport_and_shows_a_new_phase(
    claude_binary, scripted_api, runner_factory
):
    api = scripted_api(Script(turns=[], fallback=Reply.text("ok", usage=Usage(input_tokens=100, output_tokens=10))))
    async with runner_factory(api, web_port=0) as runner:
        await run(runner, "j", "a")
        await run(runner, "other", "a")
        first = (await runner.stub.GetJob(pb.GetJobRequest(job_id="j"), timeout=10)).job
        again = (await runner.stub.GetJob(pb.GetJobRequest(job_id="j"), timeout=10)).job
        assert first == again and [p.phase_id for p in first.phases] == ["a"]
        assert first.phases[0].status == res.PHASE_STATUS_SUCCEEDED and first.cost.phase_count == 1
        page = await runner.stub.ListJobs(pb.ListJobsRequest(project_id="p", page_size=1), timeout=10)
        assert [j.job_id for j in page.jobs] == ["other"] and page.next_page_token

        base = runner.server.web.url.rstrip("/")
        async with RunnerServiceClient(base) as binary:
            assert (await binary.get_job(pb.GetJobRequest(job_id="j"))).job == first
            assert await binary.list_jobs(pb.ListJobsRequest(project_id="p", page_size=1)) == page
        async with RunnerServiceClient(base, codec=google_protobuf_json_codec()) as as_json:
            assert (await as_json.get_job(pb.GetJobRequest(job_id="j"))).job == first

        def curl() -> dict:
            request = urllib.request.Request(
                base + "/helix.runner.v1.RunnerService/GetJob",
                data=b'{"jobId": "j"}',
                headers={"content-type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read())

        body = await asyncio.get_running_loop().run_in_executor(None, curl)
        assert body == json.loads(json_format.MessageToJson(pb.GetJobResponse(job=first)))

        await run(runner, "j", "b")  # a new phase of the cached job, to its end
        after = (await runner.stub.GetJob(pb.GetJobRequest(job_id="j"), timeout=10)).job
        assert [p.phase_id for p in after.phases] == ["a", "b"] and after.cost.phase_count == 2
        assert all(p.status == res.PHASE_STATUS_SUCCEEDED and p.last_sequence > 0 for p in after.phases)
        listed = await runner.stub.ListJobs(pb.ListJobsRequest(project_id="p"), timeout=10)
        assert {j.job_id: len(j.phases) for j in listed.jobs} == {"j": 2, "other": 1}
        listed_j = next(j for j in listed.jobs if j.job_id == "j")
        for phase in after.phases:  # a listing carries each prompt's first line and size, not the prompt
            phase.ClearField("prompt")
        assert listed_j == after


async def test_a_listing_carries_each_prompts_first_line_and_size_and_the_prompt_when_asked(
    claude_binary, scripted_api, runner_factory
):
    api = scripted_api(Script(turns=[], fallback=Reply.text("ok", usage=Usage(input_tokens=100, output_tokens=10))))
    prompt = "\n  Fix the flaky test in tests/x.py.\n" + "Context line.\n" * 20_000  # about 280 KB
    async with runner_factory(api) as runner:
        request = pb.RunPhaseRequest(job_id="big", phase_id="a", project_id="p", prompt=prompt,
                                     working_dir=str(runner.workdir))
        async for _ in runner.stub.RunPhase(request, timeout=60):
            pass
        listed = (await runner.stub.ListJobs(pb.ListJobsRequest(project_id="p"), timeout=10)).jobs[0].phases[0]
        assert (listed.prompt, listed.prompt_first_line, listed.prompt_bytes) == (
            "", "Fix the flaky test in tests/x.py.", len(prompt.encode()))
        full = (await runner.stub.ListJobs(pb.ListJobsRequest(project_id="p", full_prompts=True),
                                           timeout=10)).jobs[0].phases[0]
        got = (await runner.stub.GetJob(pb.GetJobRequest(job_id="big"), timeout=10)).job.phases[0]
        assert full.prompt == got.prompt == prompt and got.prompt_first_line == listed.prompt_first_line
