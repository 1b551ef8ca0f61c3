"""Telemetry of real phases: the real CLI, driven by the scripted Messages API, through the real server.

One phase runs with tracing on (an in-memory exporter) and the CLI's own telemetry turned on, so
its ``claude_code.*`` spans must join our trace. One runs with tracing off and ``/metrics`` on: it
is scraped while a breakpoint holds the phase and after it ends.
"""

from __future__ import annotations

import asyncio
import urllib.request

import pytest
from opentelemetry.trace import StatusCode
from prometheus_client.parser import text_string_to_metric_families
from support.runner_server import collect
from support.telemetry import OtlpJsonReceiver, Spans, sample

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.offline import Reply, RequestMatcher, TextBlock, ToolUseBlock, Usage
from helix_runner.telemetry import Telemetry, TelemetrySettings

pytestmark = pytest.mark.real_cli

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
ORCHESTRATOR_SPAN = "00f067aa0ba902b7"
SERVICE = "helix.runner.v1.RunnerService"


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """GET /metrics, parsed by Prometheus' text parser: (sample name, sorted labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(scraped: dict, name: str, **labels: str) -> float:
    return scraped.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_span_tree_of_a_real_phase_joins_the_callers_and_the_clis_traces(
    claude_binary, scripted_api, runner_factory, spans: Spans
) -> None:
    main = RequestMatcher(first_user_contains="MAIN-PROMPT")
    sub = RequestMatcher(first_user_contains="[[subagent]]")
    api = scripted_api(
        [
            Reply.tool_use("Bash", {"command": "echo traced"}, match=main),
            Reply.tool_use("Bash", {"command": "exit 3"}, match=main),
            Reply(
                content=[
                    TextBlock("Delegating."),
                    ToolUseBlock(
                        "Agent",
                        {
                            "description": "List files",
                            "subagent_type": "general-purpose",
                            "prompt": "[[subagent]] List the files.",
                        },
                    ),
                ],
                match=main,
            ),
            Reply.tool_use("Bash", {"command": "ls"}, match=sub),
            Reply.text("Nothing here.", match=sub, usage=Usage(input_tokens=300, output_tokens=30)),
            Reply.text("All done.", match=main, times=3, usage=Usage(input_tokens=500, output_tokens=20)),
        ]
    )
    telemetry = Telemetry(tracer_provider=spans.provider)
    with OtlpJsonReceiver() as cli_collector:
        cli_telemetry = {  # turns on the CLI's own trace export (checked against CLI 2.1.330)
            "CLAUDE_CODE_ENABLE_TELEMETRY": "1",
            "CLAUDE_CODE_ENHANCED_TELEMETRY_BETA": "1",
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
            "OTEL_EXPORTER_OTLP_ENDPOINT": cli_collector.endpoint,
            "OTEL_TRACES_EXPORT_INTERVAL": "200",
        }
        async with runner_factory(
            api,
            telemetry=telemetry,
            server_env_extra=cli_telemetry,
            inherit_env=["ANTHROPIC_*", "CLAUDE_CODE_*", "HOME", "PATH", "OTEL_*"],
        ) as runner:
            request = pb.RunPhaseRequest(
                job_id="job-t",
                phase_id="p1",
                project_id="proj-t",
                prompt="MAIN-PROMPT go",
                working_dir=str(runner.workdir),
                options=pb.PhaseOptions(allowed_tools=["Bash", "Agent"]),
            )
            metadata = (("traceparent", f"00-{TRACE_ID}-{ORCHESTRATOR_SPAN}-01"),)
            events, result = await collect(runner.stub.RunPhase(request, timeout=120, metadata=metadata))
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        async with asyncio.timeout(30):  # the CLI exports on an interval and at exit
            while not any(s["name"] == "claude_code.interaction" for s in cli_collector.spans()):  # noqa: ASYNC110
                await asyncio.sleep(0.2)
        cli_spans = cli_collector.spans()

    # Orchestrator -> RunPhase -> attempt -> turns.
    rpc = spans.one(f"{SERVICE}/RunPhase")
    assert format(rpc.context.trace_id, "032x") == TRACE_ID
    assert format(rpc.parent.span_id, "016x") == ORCHESTRATOR_SPAN
    assert rpc.attributes["helix.job.id"] == "job-t" and rpc.attributes["helix.project.id"] == "proj-t"
    attempt = spans.one("helix.attempt")
    assert attempt.parent.span_id == rpc.context.span_id
    assert (
        attempt.attributes["helix.phase.status"] == "SUCCEEDED"
        and attempt.status.status_code is StatusCode.OK
    )
    turns = spans.named("invoke_agent")
    assert len(turns) == result.result_count >= 1
    assert all(spans.parent_of(t) == attempt for t in turns)
    assert all(t.attributes["gen_ai.operation.name"] == "invoke_agent" for t in turns)

    # Tools: durations are the tracker's, the failing command is an error, the subagent's call nests.
    finished = {
        e.tool_call_finished.tool_use_id: e.tool_call_finished
        for e in events
        if e.HasField("tool_call_finished")
    }
    started = {e.tool_call_started.tool_use_id: e for e in events if e.HasField("tool_call_started")}
    tool_spans = {s.attributes["gen_ai.tool.call.id"]: s for s in spans.named("execute_tool")}
    assert set(tool_spans) == set(started) == set(finished)
    for call_id, span in tool_spans.items():
        assert span.attributes["gen_ai.tool.name"] == started[call_id].tool_call_started.name
        assert span.end_time - span.start_time == finished[call_id].duration.ToNanoseconds()
        assert (span.status.status_code is StatusCode.ERROR) == finished[call_id].is_error
    bash_top = [
        s for s in tool_spans.values() if s.name == "execute_tool Bash" and spans.parent_of(s) in turns
    ]
    assert [s.status.status_code for s in bash_top] == [StatusCode.UNSET, StatusCode.ERROR]
    (agent,) = [s for s in tool_spans.values() if s.name == "execute_tool Agent"]
    (sub_bash,) = [s for s in tool_spans.values() if s.parent.span_id == agent.context.span_id]
    assert sub_bash.name == "execute_tool Bash"
    assert (
        started[sub_bash.attributes["gen_ai.tool.call.id"]].parent_tool_use_id
        == agent.attributes["gen_ai.tool.call.id"]
    )
    chats = spans.named("chat")
    assert len(chats) >= 6 and all(c.attributes["gen_ai.operation.name"] == "chat" for c in chats)

    # The CLI's own spans joined our trace under the attempt, and carry our ids.
    interactions = [s for s in cli_spans if s["name"] == "claude_code.interaction"]
    assert {s["trace_id"] for s in cli_spans} == {TRACE_ID}
    assert {s["parent_span_id"] for s in interactions} == {format(attempt.context.span_id, "016x")}
    resource = interactions[0]["resource"]
    assert (resource["helix.job.id"], resource["helix.phase.id"], resource["helix.project.id"]) == (
        "job-t",
        "p1",
        "proj-t",
    )


async def test_metrics_during_and_after_a_held_phase_and_no_trace_context_when_off(
    claude_binary, scripted_api, runner_factory
) -> None:
    api = scripted_api(
        [
            Reply.tool_use("Bash", {"command": "echo held"}),
            Reply.text("done", usage=Usage(input_tokens=1000, output_tokens=50)),
        ]
    )
    telemetry = Telemetry(TelemetrySettings(metrics_port=0))  # tracing off
    async with runner_factory(api, telemetry=telemetry) as runner:
        request = pb.RunPhaseRequest(
            job_id="job-m",
            phase_id="p",
            project_id="proj-m",
            prompt="go",
            working_dir=str(runner.workdir),
            options=pb.PhaseOptions(
                allowed_tools=["Bash"], breakpoints=[res.Breakpoint(breakpoint_id="bp", tool_name="Bash")]
            ),
        )
        call = runner.stub.RunPhase(request, timeout=120)
        events: list = []
        hit = None
        async with asyncio.timeout(60):
            async for response in call:
                events.extend(response.events)
                hit = next(
                    (
                        e
                        for e in response.events
                        if e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT
                    ),
                    None,
                )
                if hit is not None:
                    break
        assert hit is not None

        during = scrape(telemetry.metrics_port)
        assert value(during, "helix_phases_started_total") == 1
        assert value(during, "helix_phases_running") == 1
        assert value(during, "helix_phases_held") == 1
        assert value(during, "helix_watchers") == 1  # this RunPhase stream
        assert value(during, "helix_phases_finished_total", status="SUCCEEDED") == 0
        live = runner.server.service.get_live("job-m", "p")
        child_env = live.run.supervisor.env
        assert not {"TRACEPARENT", "TRACESTATE", "OTEL_RESOURCE_ATTRIBUTES"} & set(child_env)

        await asyncio.sleep(0.3)  # held time must be visible in the histogram below
        await runner.stub.ResolveToolCall(
            pb.ResolveToolCallRequest(
                job_id="job-m",
                phase_id="p",
                tool_use_id=hit.control.tool_use_id,
                approve=pb.ApproveDecision(),
            ),
            timeout=10,
        )
        more, result = await collect(call)
        events.extend(more)
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        labels = {"grpc_service": SERVICE, "grpc_method": "RunPhase", "grpc_type": "server_stream"}
        async with asyncio.timeout(10):  # the RPC's status is recorded once its handler returns
            while sample(telemetry, "grpc_server_handled_total", **labels, grpc_code="OK") < 1:  # noqa: ASYNC110
                await asyncio.sleep(0.05)

        after = scrape(telemetry.metrics_port)
    assert value(after, "helix_phases_running") == 0 and value(after, "helix_phases_held") == 0
    assert value(after, "helix_phases_finished_total", status="SUCCEEDED") == 1
    assert value(after, "helix_phase_duration_seconds_count", status="SUCCEEDED") == 1
    assert value(after, "helix_tool_calls_total", tool="Bash", outcome="success") == 1
    assert value(after, "helix_tool_call_duration_seconds_count", tool="Bash") == 1
    assert value(after, "helix_tool_call_held_seconds_count", tool="Bash") == 1
    (finished,) = [e.tool_call_finished for e in events if e.HasField("tool_call_finished")]
    held = value(after, "helix_tool_call_held_seconds_sum", tool="Bash")
    run = value(after, "helix_tool_call_duration_seconds_sum", tool="Bash")
    assert held >= 0.3 and held + run == pytest.approx(finished.duration.ToNanoseconds() / 1e9, abs=1e-6)
    assert value(after, "helix_events_published_total") == result.last_sequence == len(events)
    model = result.cost.models[0].model
    assert (
        value(after, "helix_tokens_total", model=model, kind="input") == result.cost.tokens.input_tokens > 0
    )
    assert value(
        after, "helix_cost_usd_total", model=model, project="proj-m", source="computed"
    ) == pytest.approx(result.cost.computed_usd)
    if result.cost.reported_usd is not None:
        assert value(
            after, "helix_cost_usd_total", model=model, project="proj-m", source="reported"
        ) == pytest.approx(result.cost.reported_usd)
    assert value(after, "helix_store_write_seconds_count") >= 1
    assert (
        value(
            after,
            "grpc_server_handled_total",
            grpc_service=SERVICE,
            grpc_method="ResolveToolCall",
            grpc_type="unary",
            grpc_code="OK",
        )
        == 1
    )


async def test_trace_context_reaches_the_child_only_when_tracing_is_on(
    claude_binary, scripted_api, runner_factory, spans: Spans
) -> None:
    api = scripted_api([Reply.tool_use("Bash", {"command": "echo x"}), Reply.text("done")])
    async with runner_factory(api, telemetry=Telemetry(tracer_provider=spans.provider)) as runner:
        request = pb.RunPhaseRequest(
            job_id="job-e",
            phase_id="p",
            prompt="go",
            working_dir=str(runner.workdir),
            options=pb.PhaseOptions(allowed_tools=["Bash"], breakpoints=[res.Breakpoint(tool_name="Bash")]),
        )
        call = runner.stub.RunPhase(request, timeout=120)
        async with asyncio.timeout(60):
            async for response in call:
                hit = next(
                    (
                        e
                        for e in response.events
                        if e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT
                    ),
                    None,
                )
                if hit is not None:
                    break
        env = dict(runner.server.service.get_live("job-e", "p").run.supervisor.env)
        await runner.stub.ResolveToolCall(
            pb.ResolveToolCallRequest(
                job_id="job-e",
                phase_id="p",
                tool_use_id=hit.control.tool_use_id,
                approve=pb.ApproveDecision(),
            ),
            timeout=10,
        )
        _, result = await collect(call)
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    attempt = spans.one("helix.attempt")
    ctx = attempt.context
    assert env["TRACEPARENT"] == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"
    assert env["OTEL_RESOURCE_ATTRIBUTES"] == (
        "helix.job.id=job-e,helix.phase.id=p,helix.project.id=default,helix.attempt.number=1"
    )
    assert attempt.attributes["helix.phase.status"] == "SUCCEEDED"
