"""The domain's hand-kept copies of the contract's messages must not drift from the proto.

Each domain payload, value and record mirrors a proto message field by field (the mapping in
``api/event_mapping.py`` is a plain copy). Compared here: the field names of each pair, with the
domain's unit suffixes (``_ns``, ``_ms``, ``_s``: the proto uses ``Duration``/``Timestamp`` or a
unit-free name) stripped. A field added on one side only fails the test until it is added on the
other side or listed in ``DOMAIN_ONLY`` / ``PROTO_ONLY`` with the reason.
"""

from __future__ import annotations

import dataclasses
import re
import typing

import pytest

from helix.runner.v1 import events_pb2, resources_pb2
from helix_runner.domain import cost, events, gateway_report, phase_result, tool_tracker, usage

# (domain class, proto message)
PAIRS = [
    *[(getattr(events, name), events_pb2.DESCRIPTOR.message_types_by_name[name]) for name in (
        "SessionInit", "AssistantText", "Thinking", "ToolCallStarted", "ToolCallFinished", "ApiRetry",
        "ApiError", "RateLimit", "TaskEvent", "Compaction", "CliStatus", "HookEvent", "PermissionDenied",
        "PartialDelta", "TurnResult", "ControlResponse", "ControlRequest", "UserMessage", "ToolProgress",
        "CostUpdate", "StderrOutput", "PhaseStatusChanged", "ControlEvent", "ParseError", "Unknown",
        "SessionWritesLost", "GatewayEvent",
    )],
    (events.QueueState, resources_pb2.QueueState.DESCRIPTOR),
    (usage.ModelUsage, events_pb2.ModelUsage.DESCRIPTOR),
    (usage.TokenUsage, resources_pb2.TokenUsage.DESCRIPTOR),
    (events.PermissionDenial, resources_pb2.PermissionDenial.DESCRIPTOR),
    (cost.ModelCost, resources_pb2.ModelCost.DESCRIPTOR),
    (cost.PhaseCostSnapshot, resources_pb2.PhaseCost.DESCRIPTOR),
    (events.Event, events_pb2.StreamEvent.DESCRIPTOR),
    (tool_tracker.ToolCall, resources_pb2.ToolCall.DESCRIPTOR),
    (tool_tracker.ToolStats, resources_pb2.ToolStats.DESCRIPTOR),
    (phase_result.PhaseResult, resources_pb2.PhaseResult.DESCRIPTOR),
    (phase_result.PhaseDiagnostics, resources_pb2.PhaseDiagnostics.DESCRIPTOR),
    (gateway_report.GatewayReport, resources_pb2.GatewayReport.DESCRIPTOR),
    (gateway_report.GatewayModelUsage, resources_pb2.GatewayModelUsage.DESCRIPTOR),
]  # fmt: skip

# Intentional differences: (domain class name, field) → why.
DOMAIN_ONLY = {
    ("HookEvent", "duration"): "the hook's own timing, for the tool tracker (ToolCallFinished.hook_duration)",
    ("HookEvent", "tool_use_id"): "which call the hook ran for, for the tool tracker",
    (
        "TurnResult",
        "has_model_usage",
    ): "whether the line had modelUsage (old CLIs do not), for the cost ledger",
    (
        "TurnResult",
        "usage_since_last_result",
    ): "model_usage_since_last_result, to take a resumed session's carried-in usage out of the cost",
    ("ControlResponse", "response"): "the CLI's answer, for the control layer; not on the wire",
    ("ControlRequest", "request"): "the CLI's whole request, for the control layer that answers it",
    ("Event", "payload"): "the StreamEvent oneof, one field per payload class (checked below)",
    ("ToolCall", "agent_id"): "the subagent that made the call; kept for the tracker, not in ToolCall",
    ("ToolCall", "server_tool"): "from ToolCallStarted.server_tool; not in ToolCall",
    ("ToolCall", "hook_duration"): "from ToolCallFinished.hook_duration; not in ToolCall",
}
PROTO_ONLY = {
    ("Event", "job_id"): "the API adds the ids of the phase the event belongs to",
    ("Event", "phase_id"): "the API adds the ids of the phase the event belongs to",
    ("ToolCall", "job_id"): "the API adds the ids of the phase the call belongs to",
    ("ToolCall", "phase_id"): "the API adds the ids of the phase the call belongs to",
    ("ToolCall", "duration"): "end - start, a property of the domain ToolCall (duration_ns)",
}

_UNIT = re.compile(r"_(ns|ms|s)$")


def domain_fields(cls: type) -> set[str]:
    names = getattr(cls, "__struct_fields__", None)
    if names is None:
        names = [f.name for f in dataclasses.fields(cls)]
    return {_UNIT.sub("", name) for name in names}


@pytest.mark.parametrize(("cls", "message"), PAIRS, ids=[cls.__name__ for cls, _ in PAIRS])
def test_the_domain_class_has_the_fields_of_its_proto_message(cls, message):
    name = cls.__name__
    ours = domain_fields(cls) - {f for (c, f) in DOMAIN_ONLY if c == name}
    theirs = {f.name for f in message.fields} - {f for (c, f) in PROTO_ONLY if c == name}
    if name == "Event":  # the oneof's fields are the payloads, checked in the next test
        theirs -= {f.name for f in message.oneofs_by_name["payload"].fields}
    assert ours == theirs, (
        f"only in {name}: {sorted(ours - theirs)}; only in {message.name}: {sorted(theirs - ours)}"
    )


def test_the_allowlists_name_real_fields():
    by_name = {cls.__name__: (cls, message) for cls, message in PAIRS}
    for cls_name, field in DOMAIN_ONLY:
        assert field in domain_fields(by_name[cls_name][0]), (cls_name, field)
    for cls_name, field in PROTO_ONLY:
        assert field in {f.name for f in by_name[cls_name][1].fields}, (cls_name, field)


def test_every_payload_class_has_its_oneof_field():
    oneof = events_pb2.StreamEvent.DESCRIPTOR.oneofs_by_name["payload"]
    proto = {f.message_type.name for f in oneof.fields}
    domain = {cls.__name__ for cls in typing.get_args(events.Payload)}
    assert domain == proto
