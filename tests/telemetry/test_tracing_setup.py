"""When the server traces, which exporter the OTEL_* variables name, and the child's trace variables."""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace.export import ConsoleSpanExporter
from opentelemetry.trace import SpanContext, TraceFlags

from helix_runner.config import ConfigError, load_config
from helix_runner.telemetry import Telemetry
from helix_runner.telemetry.child_env import resource_attributes, trace_context_env
from helix_runner.telemetry.tracing import (
    TracingConfigError,
    exporters_from_env,
    resource_from_env,
    tracing_wanted,
)

CONTEXT = SpanContext(
    trace_id=0x0AF7651916CD43DD8448EB211C80319C,
    span_id=0x00F067AA0BA902B7,
    is_remote=False,
    trace_flags=TraceFlags(TraceFlags.SAMPLED),
)


@pytest.mark.parametrize(
    ("mode", "environ", "wanted"),
    [
        ("auto", {}, False),
        ("auto", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ("auto", {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ("auto", {"OTEL_TRACES_EXPORTER": "console"}, True),
        (
            "auto",
            {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
            False,
        ),
        (
            "auto",
            {"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
            False,
        ),
        ("on", {}, True),
        ("off", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, False),
    ],
)
def test_tracing_is_on_when_an_exporter_is_configured(mode: str, environ: dict, wanted: bool) -> None:
    assert tracing_wanted(mode, environ) is wanted


def test_exporters_follow_the_standard_variables() -> None:
    assert [type(e) for e in exporters_from_env({})] == [HttpExporter]  # the specification's default protocol
    assert [type(e) for e in exporters_from_env({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})] == [GrpcExporter]
    assert [
        type(e)
        for e in exporters_from_env(
            {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}
        )
    ] == [HttpExporter]
    assert [type(e) for e in exporters_from_env({"OTEL_TRACES_EXPORTER": "console,otlp"})] == [
        ConsoleSpanExporter,
        HttpExporter,
    ]
    assert exporters_from_env({"OTEL_TRACES_EXPORTER": "none"}) == []
    with pytest.raises(TracingConfigError, match="http/json"):
        exporters_from_env({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})


def test_service_name_defaults_to_helix_runner_unless_the_environment_names_one(monkeypatch) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    assert resource_from_env({}, "1.2.3").attributes["service.name"] == "helix-runner"
    assert resource_from_env({}, "1.2.3").attributes["service.version"] == "1.2.3"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "runner-eu")
    assert (
        resource_from_env({"OTEL_SERVICE_NAME": "runner-eu"}, "1").attributes["service.name"] == "runner-eu"
    )


def test_config_builds_tracing_only_when_asked(tmp_path) -> None:
    config = load_config(flags={"workspace_roots": [str(tmp_path)]}, environ={})
    assert config.tracing == "auto" and config.metrics_port is None and config.metrics_host == "127.0.0.1"
    assert Telemetry.from_config(config, {}).tracer is None
    traced = Telemetry.from_config(config, {"OTEL_TRACES_EXPORTER": "none", "OTEL_SDK_DISABLED": "false"})
    assert traced.tracer is None  # "none" means no exporter: nothing to trace for
    on = load_config(flags={"workspace_roots": [str(tmp_path)], "tracing": "on"}, environ={})
    assert Telemetry.from_config(on, {"OTEL_TRACES_EXPORTER": "none"}).tracer is None  # no exporter: no spans
    assert Telemetry.from_config(on, {"OTEL_TRACES_EXPORTER": "console"}).tracer is not None
    assert Telemetry.from_config(on, {}).tracer is not None  # OTLP to the default endpoint
    env = load_config(
        environ={
            "HELIX_RUNNER_METRICS_PORT": "9464",
            "HELIX_RUNNER_METRICS_HOST": "0.0.0.0",
            "HELIX_RUNNER_WORKSPACE_ROOTS": str(tmp_path),
        }
    )
    assert (env.metrics_host, env.metrics_port) == ("0.0.0.0", 9464)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"tracing": "sometimes"}, "tracing 'sometimes' is not one of auto, on, off"),
        ({"metrics_port": 70000}, "metrics_port 70000 is out of range"),
        ({"metrics_max_projects": 0}, "metrics_max_projects must be at least 1"),
    ],
)
def test_bad_telemetry_config_is_refused(tmp_path, flags: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(flags={"workspace_roots": [str(tmp_path)], **flags}, environ={})


def test_child_env_carries_the_trace_context_and_our_ids() -> None:
    env = trace_context_env(CONTEXT, {"helix.job.id": "job 1,x", "helix.phase.id": "p1"}, {})
    assert env["TRACEPARENT"] == "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"
    assert "TRACESTATE" not in env
    # Values are percent-encoded: a comma or space would otherwise split the list.
    assert env["OTEL_RESOURCE_ATTRIBUTES"] == "helix.job.id=job%201%2Cx,helix.phase.id=p1"


def test_child_env_keeps_inherited_resource_attributes_before_ours() -> None:
    env = trace_context_env(CONTEXT, {"helix.job.id": "j"}, {"OTEL_RESOURCE_ATTRIBUTES": "team=infra"})
    assert env["OTEL_RESOURCE_ATTRIBUTES"] == "team=infra,helix.job.id=j"
    assert resource_attributes({}, "team=infra") == "team=infra"


def test_child_env_is_empty_without_a_valid_context() -> None:
    assert trace_context_env(SpanContext(0, 0, False), {"helix.job.id": "j"}, {}) == {}
