"""Structured output (`options.json_schema` → `--json-schema`) through the real CLI, and its validation.

CLI 2.1.330 offers the model a `StructuredOutput` tool taking the schema and puts the accepted object
in the result line's `structured_output` (docs/claude-cli-protocol.md §2.5).
"""

from __future__ import annotations

import json

import grpc
import pytest

from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.api.errors import error_info
from helix_runner.offline import Reply

pytestmark = pytest.mark.real_cli

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "count": {"type": "integer"}},
          "required": ["name", "count"], "additionalProperties": False}


async def test_the_structured_object_comes_back_in_the_result(claude_binary, scripted_api, runner_factory):
    api = scripted_api([Reply.tool_use("StructuredOutput", {"name": "widgets", "count": 3})])
    async with runner_factory(api) as runner:
        events, result = await runner.run_phase("count the widgets", deadline=90, json_schema=json.dumps(SCHEMA))
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    assert json.loads(result.structured_output) == {"name": "widgets", "count": 3}
    assert not result.structured_output_truncated
    # The streamed turn result carries it too, for a client that reads events, not the result.
    (turn,) = [e.turn_result for e in events if e.HasField("turn_result")]
    assert (turn.structured_output, turn.structured_output_truncated) == (result.structured_output, False)
    argv = list(result.diagnostics.argv)
    assert f"--json-schema={json.dumps(SCHEMA)}" in argv
    init = next(e.session_init for e in events if e.HasField("session_init"))
    assert "StructuredOutput" in init.tools
    # The schema reached the model as the tool's input schema.
    tool = next(t for t in api.message_requests()[0].body["tools"] if t["name"] == "StructuredOutput")
    assert tool["input_schema"]["required"] == ["name", "count"]


async def test_output_that_keeps_failing_the_schema_fails_the_phase(claude_binary, scripted_api, runner_factory):
    # The CLI lets the model retry a non-conforming call (5 calls in 2.1.330), then gives up.
    api = scripted_api([Reply.tool_use("StructuredOutput", {"name": 5}, times=8)])
    async with runner_factory(api) as runner:
        _, result = await runner.run_phase("count", deadline=90, json_schema=json.dumps(SCHEMA))
    assert result.status == res.PHASE_STATUS_FAILED
    assert result.result_subtype == "error_max_structured_output_retries"
    assert result.reason.startswith("structured output failed"), result.reason
    assert "does not match required schema" in result.reason
    assert result.structured_output == ""
    assert result.attempts[-1].end_kind == res.ATTEMPT_END_KIND_STRUCTURED_OUTPUT


async def test_a_phase_that_never_calls_the_tool_fails(claude_binary, scripted_api, runner_factory):
    # The CLI nudges the model once, then reports a plain `success` without `structured_output`.
    api = scripted_api([Reply.text("here is prose instead", times=4)])
    async with runner_factory(api) as runner:
        _, result = await runner.run_phase("count", deadline=90, json_schema=json.dumps(SCHEMA))
    assert result.result_subtype == "success"
    assert result.status == res.PHASE_STATUS_FAILED
    assert "never called the StructuredOutput tool" in result.reason
    assert result.attempts[-1].end_kind == res.ATTEMPT_END_KIND_STRUCTURED_OUTPUT


@pytest.mark.parametrize("schema", [
    "{not json",
    '["type", "object"]',
    '{"type": 5}',
    '{"type": "object", "properties": {"a": {"type": "string", "pattern": "(("}}}',
    '{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"}',  # the CLI knows draft 07 only
    '{"$schema": 7}',
    '{"a": "' + "x" * (100 * 1024) + '"}',
])
async def test_an_invalid_schema_is_refused_before_anything_runs(runner_factory, schema):
    # No CLI exists at this path: anything that got as far as spawning would fail differently.
    async with runner_factory(None, claude_path="/nonexistent/claude") as runner:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await runner.run_phase("hi", json_schema=schema)
        with pytest.raises(grpc.aio.AioRpcError) as lookup:
            await runner.stub.GetJob(pb.GetJobRequest(job_id="job-1"), timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = error_info(caught.value)
    assert info.reason == "INVALID_FIELD" and info.metadata["field"] == "options.json_schema"
    assert lookup.value.code() == grpc.StatusCode.NOT_FOUND  # nothing was written
