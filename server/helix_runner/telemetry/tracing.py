"""Tracing setup: when to trace, the exporter the standard ``OTEL_*`` variables name, attribute keys.

The attribute names follow the OpenTelemetry GenAI semantic conventions (``gen_ai.*``; still
marked "development", now kept in the semantic-conventions-genai repository, see
``opentelemetry.semconv._incubating.attributes.gen_ai_attributes``) where they fit, the RPC
conventions for the gRPC server span, and ``helix.*`` for what is ours.

Token usage: OpenTelemetry's ``gen_ai.usage.input_tokens`` includes cached tokens, Anthropic's
``input_tokens`` does not. Spans report ``input_tokens = input + cache reads + cache writes`` and
the cache parts separately (``gen_ai.usage.cache_read.input_tokens``,
``gen_ai.usage.cache_creation.input_tokens``); see ``gen_ai_usage``.
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

from helix_runner.domain.events import TokenUsage

INSTRUMENTATION_NAME = "helix_runner"

# GenAI semantic conventions.
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_TYPE = "gen_ai.tool.type"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
ERROR_TYPE = "error.type"
OP_INVOKE_AGENT = "invoke_agent"
OP_CHAT = "chat"
OP_EXECUTE_TOOL = "execute_tool"
PROVIDER_ANTHROPIC = "anthropic"
AGENT_NAME = "claude-code"

# RPC semantic conventions (server span of every RPC).
RPC_SYSTEM = "rpc.system"
RPC_SERVICE = "rpc.service"
RPC_METHOD = "rpc.method"
RPC_GRPC_STATUS_CODE = "rpc.grpc.status_code"

# Ours.
HELIX_JOB_ID = "helix.job.id"
HELIX_PHASE_ID = "helix.phase.id"
HELIX_PROJECT_ID = "helix.project.id"
HELIX_ATTEMPT = "helix.attempt.number"
HELIX_PHASE_STATUS = "helix.phase.status"
HELIX_PHASE_REASON = "helix.phase.reason"
HELIX_EXIT_CODE = "helix.process.exit_code"
HELIX_COST_REPORTED_USD = "helix.cost.reported_usd"
HELIX_COST_COMPUTED_USD = "helix.cost.computed_usd"
HELIX_TURN_INDEX = "helix.turn.index"
HELIX_TURN_SUBTYPE = "helix.turn.subtype"
HELIX_TURN_NUM_TURNS = "helix.turn.num_turns"
HELIX_TURN_COST_USD = "helix.turn.process_cost_usd"
HELIX_TOOL_HELD_MS = "helix.tool.held_ms"
HELIX_TOOL_RUN_MS = "helix.tool.run_ms"
HELIX_TOOL_DURATION_MS = "helix.tool.duration_ms"
HELIX_TOOL_PARENT_ID = "helix.tool.parent_call_id"
HELIX_HOLD_REASON = "helix.hold.reason"
HELIX_BREAKPOINT_ID = "helix.breakpoint.id"
HELIX_EGRESS_DECISION = "helix.egress.decision"  # allowed, refused, held, approved, denied
HELIX_SUBAGENT_TYPE = "helix.subagent.type"


def gen_ai_usage(tokens: TokenUsage) -> dict[str, int]:
    """GenAI usage attributes from Anthropic-style counts (input there excludes the cache parts)."""
    cache_write = tokens.cache_write_5m_input_tokens + tokens.cache_write_1h_input_tokens
    return {
        GEN_AI_USAGE_INPUT_TOKENS: tokens.input_tokens + tokens.cache_read_input_tokens + cache_write,
        GEN_AI_USAGE_OUTPUT_TOKENS: tokens.output_tokens,
        GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: tokens.cache_read_input_tokens,
        GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: cache_write,
    }


class TracingConfigError(ValueError):
    """The OTEL_* variables ask for something this server cannot do; one line for a person."""


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


def tracing_wanted(mode: str, environ: Mapping[str, str]) -> bool:
    """Whether to trace: ``on``/``off``, or ``auto`` = an exporter or OTLP endpoint is configured.

    ``OTEL_SDK_DISABLED=true`` turns tracing off whatever the mode (the SDK's own switch).
    """
    if mode == "off" or _truthy(environ.get("OTEL_SDK_DISABLED")):
        return False
    if mode == "on":
        return True
    exporters = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters:
        return exporters != "none"
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def otlp_protocol(environ: Mapping[str, str], signal: str) -> str:
    """``grpc`` or ``http/protobuf`` (the specification's default) for one signal (``TRACES``,
    ``LOGS``): its own ``OTEL_EXPORTER_OTLP_<signal>_PROTOCOL``, else the shared one."""
    protocol = (environ.get(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf").strip().lower()
    if protocol not in ("grpc", "http/protobuf"):
        raise TracingConfigError(f"OTLP protocol {protocol!r} is not supported (use grpc or http/protobuf)")
    return protocol


def exporters_from_env(environ: Mapping[str, str]) -> list[SpanExporter]:
    """The exporters ``OTEL_TRACES_EXPORTER`` names (default ``otlp``): ``otlp``, ``console`` or ``none``.

    ``otlp`` uses ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` / ``OTEL_EXPORTER_OTLP_PROTOCOL`` (``grpc`` or
    ``http/protobuf``, the specification's default); the exporter itself reads the endpoint, headers,
    certificate, compression and timeout variables.
    """
    out: list[SpanExporter] = []
    names = [n.strip().lower() for n in environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if n.strip()]
    for name in names:
        if name == "none":
            continue
        if name == "console":
            out.append(ConsoleSpanExporter())
        elif name == "otlp":
            if otlp_protocol(environ, "TRACES") == "grpc":
                from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
            else:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # type: ignore[assignment]
            out.append(OTLPSpanExporter())
        else:
            raise TracingConfigError(
                f"OTEL_TRACES_EXPORTER {name!r} is not supported (use otlp, console or none)"
            )
    return out


def resource_from_env(environ: Mapping[str, str], version: str) -> Resource:
    """``service.name`` helix-runner unless ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` say otherwise."""
    attributes = {"service.version": version}
    if not environ.get("OTEL_SERVICE_NAME") and "service.name=" not in environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    ):
        attributes["service.name"] = "helix-runner"
    return Resource.create(attributes)


def provider_from_env(environ: Mapping[str, str], version: str) -> TracerProvider | None:
    """A tracer provider with a batch processor per configured exporter (sampler: ``OTEL_TRACES_SAMPLER``).

    None when no exporter is configured (``OTEL_TRACES_EXPORTER=none``): spans nobody receives are
    not built at all, so tracing without an exporter costs nothing (``benchmarks/bench_telemetry.py``).
    """
    exporters = exporters_from_env(environ)
    if not exporters:
        return None
    provider = TracerProvider(resource=resource_from_env(environ, version))
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider
