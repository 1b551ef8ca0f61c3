"""The credential vault's messages: a PutEgressSecretRequest's fields, and a secret as listed (no value)."""

from __future__ import annotations

from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.errors import invalid_field
from helix_runner.phases.egress_vault import SecretInfo

_KINDS = {pb.EGRESS_SECRET_PRESENTATION_HEADER: "header", pb.EGRESS_SECRET_PRESENTATION_BEARER: "bearer",
          pb.EGRESS_SECRET_PRESENTATION_BASIC: "basic"}
_ENUMS = {v: k for k, v in _KINDS.items()}


def presentation_from_request(request: pb.PutEgressSecretRequest) -> str:
    kind = _KINDS.get(request.presentation)
    if kind is None:
        raise invalid_field("presentation", "HEADER, BEARER or BASIC")
    return kind


def secret_to_proto(info: SecretInfo) -> pb.EgressSecret:
    b = info.binding
    out = pb.EgressSecret(project_id=b.project, name=b.name, hosts=list(b.host_strings()),
                          presentation=_ENUMS[b.presentation.kind], header=b.presentation.header,
                          username=b.presentation.username, env_name=b.env_name, openable=info.openable)
    out.create_time.FromNanoseconds(info.create_time_ns)
    return out
