"""The server's telemetry without a CLI: RPC metrics and spans, the /metrics endpoint, startup errors.

Every RPC here fails or is answered before any phase process would start, so no CLI is needed.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client.parser import text_string_to_metric_families
from support.telemetry import Spans, sample

from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.api.errors import error_info
from helix_runner.config import load_config
from helix_runner.server import StartupError, start_server
from helix_runner.telemetry import Telemetry, TelemetrySettings

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
SERVICE = "helix.runner.v1.RunnerService"


def scrape(port: int) -> dict[str, list]:
    """GET /metrics and parse it with Prometheus' own text parser: family name -> samples."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


async def test_rpcs_are_counted_by_method_and_code_and_traced_from_the_callers_context(
    runner_factory, spans: Spans, tmp_path: Path
) -> None:
    telemetry = Telemetry(TelemetrySettings(metrics_port=0), tracer_provider=spans.provider)
    async with runner_factory(None, telemetry=telemetry) as runner:
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await runner.stub.GetJob(
                pb.GetJobRequest(job_id="nope"), timeout=10, metadata=(("traceparent", TRACEPARENT),)
            )
        assert missing.value.code() is grpc.StatusCode.NOT_FOUND
        outside = tmp_path.parent  # not inside the workspace root
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            async for _ in runner.stub.RunPhase(
                pb.RunPhaseRequest(job_id="j", prompt="hi", working_dir=str(outside)), timeout=10
            ):
                pass
        reason = error_info(refused.value).reason
        health = health_pb2_grpc.HealthStub(runner.channel)
        await health.Check(health_pb2.HealthCheckRequest(service="liveness"), timeout=10)
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await runner.channel.unary_unary("/no.Such/Method")(b"", timeout=10)
        assert unknown.value.code() is grpc.StatusCode.UNIMPLEMENTED

        assert (
            sample(
                telemetry,
                "grpc_server_handled_total",
                grpc_service=SERVICE,
                grpc_method="GetJob",
                grpc_type="unary",
                grpc_code="NOT_FOUND",
            )
            == 1
        )
        assert (
            sample(
                telemetry,
                "grpc_server_handled_total",
                grpc_service=SERVICE,
                grpc_method="RunPhase",
                grpc_type="server_stream",
                grpc_code="INVALID_ARGUMENT",
            )
            == 1
        )
        assert (
            sample(
                telemetry,
                "grpc_server_handled_total",
                grpc_service="grpc.health.v1.Health",
                grpc_method="Check",
                grpc_type="unary",
                grpc_code="OK",
            )
            == 1
        )
        # A client-chosen method name never becomes a label.
        assert (
            sample(
                telemetry,
                "grpc_server_handled_total",
                grpc_service="unknown",
                grpc_method="unknown",
                grpc_type="unknown",
                grpc_code="UNIMPLEMENTED",
            )
            == 1
        )
        assert sample(telemetry, "helix_phases_rejected_total", reason=reason) == 1
        assert reason == "WORKING_DIR_OUTSIDE_ROOTS"
        assert (
            sample(
                telemetry,
                "grpc_server_handling_seconds_count",
                grpc_service=SERVICE,
                grpc_method="GetJob",
                grpc_type="unary",
            )
            == 1
        )

        scraped = scrape(telemetry.metrics_port)
        handled = {
            (s.labels["grpc_method"], s.labels["grpc_code"]): s.value for s in scraped["grpc_server_handled"]
        }
        assert handled[("GetJob", "NOT_FOUND")] == 1
        assert scraped["helix_watchers"][0].value == 0
        assert scraped["helix_phases_running"][0].value == 0

    (get_job,) = spans.named(f"{SERVICE}/GetJob")
    assert get_job.kind is SpanKind.SERVER
    assert format(get_job.context.trace_id, "032x") == TRACE_ID
    assert format(get_job.parent.span_id, "016x") == PARENT_ID and get_job.parent.is_remote
    assert get_job.attributes["rpc.system"] == "grpc" and get_job.attributes["rpc.method"] == "GetJob"
    assert get_job.attributes["enduser.id"] == "admin"  # no credentials on loopback: the admin principal
    assert get_job.attributes["rpc.grpc.status_code"] == grpc.StatusCode.NOT_FOUND.value[0]
    assert get_job.status.status_code is StatusCode.UNSET  # a caller's mistake is not a server error
    (run_phase,) = spans.named(f"{SERVICE}/RunPhase")
    assert run_phase.parent is None  # no traceparent sent: a new trace


async def test_event_loop_lag_is_measured(runner_factory) -> None:
    telemetry = Telemetry()
    async with runner_factory(None, telemetry=telemetry):
        async with asyncio.timeout(10):
            while sample(telemetry, "helix_event_loop_lag_seconds_count") < 2:  # noqa: ASYNC110 - a metric, no event
                await asyncio.sleep(0.1)
    # Each observation is a delay, never negative, and the probe stops with the server.
    assert sample(telemetry, "helix_event_loop_lag_seconds_sum") >= 0
    stopped = sample(telemetry, "helix_event_loop_lag_seconds_count")
    await asyncio.sleep(0.6)
    assert sample(telemetry, "helix_event_loop_lag_seconds_count") == stopped


async def test_a_busy_metrics_port_is_a_startup_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = load_config(
            flags={
                "port": 0,
                "data_dir": str(tmp_path / "data"),
                "workspace_roots": [str(tmp_path)],
                "metrics_port": port,
            },
            environ={},
        )
        with pytest.raises(StartupError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            await start_server(config, server_env={})


async def test_an_unsupported_otel_exporter_is_a_startup_error(tmp_path: Path) -> None:
    config = load_config(
        flags={"port": 0, "data_dir": str(tmp_path / "data"), "workspace_roots": [str(tmp_path)]}, environ={}
    )
    with pytest.raises(StartupError, match="OTEL_TRACES_EXPORTER 'zipkin' is not supported"):
        await start_server(config, server_env={"OTEL_TRACES_EXPORTER": "zipkin"})


@pytest.mark.parametrize(("host", "warned"), [("0.0.0.0", True), ("127.0.0.1", False)])
async def test_metrics_off_loopback_are_served_with_a_warning_that_they_take_no_token(tmp_path: Path, caplog,
                                                                                      host, warned) -> None:
    """Issue 22 item 7: /metrics on a non-loopback address served without auth and logged nothing."""
    config = load_config(
        flags={"port": 0, "data_dir": str(tmp_path / "data"), "workspace_roots": [str(tmp_path)],
               "metrics_host": host, "metrics_port": 0},
        environ={},
    )
    with caplog.at_level(logging.WARNING, logger="helix_runner.server"):
        running = await start_server(config, server_env={})
    try:
        port = running.telemetry.metrics_port
        status = await asyncio.to_thread(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                                                          timeout=10).status)
        assert status == 200  # no token asked: the documented choice
    finally:
        await running.drain(0)
    warnings = [r for r in caplog.records if "/metrics is served without authentication" in r.getMessage()]
    assert len(warnings) == (1 if warned else 0)
    if warned:
        assert warnings[0].fields == {"address": f"0.0.0.0:{port}"}
