"""The hand-over's stored request as a declared, versioned message (``SavedPhaseRequest``).

Replicas of two releases share the database during a rolling deploy, and the old one hands its
phases to the new one. So the request a replica keeps for the one that takes a phase over is the
contract's messages (``RunPhaseRequest``, ``Attempt``) in an envelope with a format number
(proto-internal/helix/runner/internal/v1/handover.proto), read back through the same mapping and
validation as any request. Rows written before it (msgspec JSON of the server's dataclasses) are
still read. Implements ``phases.handover.HandoverCodec``; the application layer never sees protobuf.
"""

from __future__ import annotations

import enum
from dataclasses import replace
from typing import TypeVar

from google.protobuf.message import DecodeError

from helix.runner.internal.v1 import handover_pb2
from helix.runner.v1 import resources_pb2
from helix_runner.api.event_mapping import attempt_to_proto
from helix_runner.api.request_mapping import request_from_spec, spec_from_request
from helix_runner.domain.cost import ModelCost, PhaseCostSnapshot
from helix_runner.domain.events import AttemptEndKind
from helix_runner.domain.phase_result import Attempt
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.pricing import PricingSource
from helix_runner.domain.retry_policy import RetryPolicy
from helix_runner.domain.usage import TokenUsage
from helix_runner.errors import ErrorKind, RunnerError
from helix_runner.phases.handover import SavedRequest, decode_legacy_request

FORMAT = 1
"""The layout this release writes and the newest it reads. Adding a field keeps it; a change in what
an existing field means bumps it (and the reader of the new one keeps reading this one)."""


class ProtoHandoverCodec:
    """Encodes a ``SavedRequest`` as ``SavedPhaseRequest`` bytes and reads them (and the older JSON) back."""

    def encode_request(self, request: SavedRequest) -> bytes:
        return request_to_proto(request).SerializeToString()

    def decode_request(self, data: bytes) -> SavedRequest:
        """The stored request, validated again as any request is. A row from before the declared
        form is msgspec JSON (an object: its first byte ``{`` is no field this message has);
        RunnerError INVALID_ARGUMENT for bytes neither form reads or a format newer than this one."""
        if data[:1] == b"{":
            return decode_legacy_request(data)
        try:
            msg = handover_pb2.SavedPhaseRequest.FromString(data)
        except DecodeError:
            raise _unreadable("it is not a SavedPhaseRequest") from None
        return request_from_proto(msg)


def _unreadable(why: str) -> RunnerError:
    return RunnerError(ErrorKind.INVALID_ARGUMENT, "HANDOVER_STATE_UNREADABLE",
                       f"the phase's saved request cannot be read: {why}", {})


def request_to_proto(request: SavedRequest) -> handover_pb2.SavedPhaseRequest:
    spec, retry = request.spec, request.retry
    msg = handover_pb2.SavedPhaseRequest(format=FORMAT, request=request_from_spec(spec),
                                         resume_session_at=spec.resume_session_at,
                                         attempts=[attempt_to_proto(a) for a in request.attempts])
    msg.accept_time.FromNanoseconds(request.accepted_ns)
    r = msg.retry
    r.max_attempts = retry.max_attempts
    r.initial_backoff.FromNanoseconds(round(retry.initial_backoff_s * 1e9))
    r.backoff_multiplier = retry.backoff_multiplier
    r.max_backoff.FromNanoseconds(round(retry.max_backoff_s * 1e9))
    r.jitter = retry.jitter
    r.continuation_prompt = retry.continuation_prompt
    return msg


def request_from_proto(msg: handover_pb2.SavedPhaseRequest) -> SavedRequest:
    if msg.format > FORMAT or msg.format < 1:
        raise _unreadable(f"its format {msg.format} is not one this release knows (1 to {FORMAT})")
    spec = spec_from_request(msg.request, msg.request.phase_id)
    if msg.resume_session_at:
        spec = replace(spec, resume_session_at=msg.resume_session_at)
        spec.validate()
    r = msg.retry
    retry = RetryPolicy(max_attempts=r.max_attempts, initial_backoff_s=r.initial_backoff.ToNanoseconds() / 1e9,
                        backoff_multiplier=r.backoff_multiplier, max_backoff_s=r.max_backoff.ToNanoseconds() / 1e9,
                        jitter=r.jitter, continuation_prompt=r.continuation_prompt)
    return SavedRequest(spec, retry, msg.accept_time.ToNanoseconds(),
                        tuple(attempt_from_proto(a) for a in msg.attempts))


E = TypeVar("E", bound=enum.IntEnum)


def _known(kind: type[E], value: int, default: E) -> E:
    """A newer release's enum value this one does not know reads as ``default`` (an added value is a
    compatible change)."""
    try:
        return kind(value)
    except ValueError:
        return default


def attempt_from_proto(msg: resources_pb2.Attempt) -> Attempt:
    """``attempt_to_proto`` backwards."""
    return Attempt(
        number=msg.number,
        status=_known(PhaseStatus, msg.status, PhaseStatus.UNSPECIFIED),
        reason=msg.reason,
        end_kind=_known(AttemptEndKind, msg.end_kind, AttemptEndKind.UNSPECIFIED),
        retryable=msg.retryable,
        exit_code=msg.exit_code if msg.HasField("exit_code") else None,
        exit_signal=msg.exit_signal or None,
        api_error_status=msg.api_error_status if msg.HasField("api_error_status") else None,
        session_id=msg.session_id,
        resumed_session_id=msg.resumed_session_id,
        start_time_ns=msg.start_time.ToNanoseconds() if msg.HasField("start_time") else None,
        end_time_ns=msg.end_time.ToNanoseconds() if msg.HasField("end_time") else None,
        cost=phase_cost_from_proto(msg.cost) if msg.HasField("cost") else None,
        first_sequence=msg.first_sequence,
        last_sequence=msg.last_sequence,
        retry_delay_ns=msg.retry_delay.ToNanoseconds() if msg.HasField("retry_delay") else None,
        startup_failure_reason=msg.startup_failure_reason,
        replica_id=msg.replica_id,
    )


def _tokens(msg: resources_pb2.TokenUsage) -> TokenUsage:
    return TokenUsage(msg.input_tokens, msg.output_tokens, msg.cache_read_input_tokens,
                      msg.cache_write_5m_input_tokens, msg.cache_write_1h_input_tokens, msg.web_search_requests)


def phase_cost_from_proto(msg: resources_pb2.PhaseCost) -> PhaseCostSnapshot:
    """``phase_cost_to_proto`` backwards."""
    return PhaseCostSnapshot(
        reported_usd=msg.reported_usd if msg.HasField("reported_usd") else None,
        computed_usd=msg.computed_usd,
        difference_usd=msg.difference_usd if msg.HasField("difference_usd") else None,
        computed_only=msg.computed_only,
        tokens=_tokens(msg.tokens),
        models=tuple(ModelCost(m.model, _tokens(m.tokens), m.reported_usd if m.HasField("reported_usd") else None,
                               m.computed_usd, _known(PricingSource, m.pricing_source, PricingSource.UNSPECIFIED))
                     for m in msg.models),
        unpriced_models=tuple(msg.unpriced_models),
    )
