"""``PhaseOptions.retry`` (protobuf) → the domain's validated ``RetryPolicy``."""

from __future__ import annotations

from google.protobuf import duration_pb2

from helix.runner.v1 import runner_service_pb2
from helix_runner.domain.retry_policy import DEFAULT_RETRY_POLICY, RetryPolicy
from helix_runner.errors import invalid_field

_NANOS_PER_SECOND = 1_000_000_000


def retry_policy_from_options(
    options: runner_service_pb2.PhaseOptions, defaults: RetryPolicy = DEFAULT_RETRY_POLICY
) -> RetryPolicy:
    """The phase's retry policy: the server's ``defaults`` where the request leaves a field unset.

    Raises INVALID_ARGUMENT naming the field (``options.retry.max_backoff``, ...).
    """
    if not options.HasField("retry"):
        return defaults
    retry = options.retry
    return RetryPolicy.from_request(
        max_attempts=retry.max_attempts,
        initial_backoff_ns=_duration_ns(retry.initial_backoff, "options.retry.initial_backoff"),
        backoff_multiplier=retry.backoff_multiplier,
        max_backoff_ns=_duration_ns(retry.max_backoff, "options.retry.max_backoff"),
        disable_jitter=retry.disable_jitter,
        continuation_prompt=retry.continuation_prompt,
        defaults=defaults,
    )


def _duration_ns(value: duration_pb2.Duration, field: str) -> int:
    """A Duration in nanoseconds, refusing the malformed ones (nanos out of range, mixed signs)."""
    seconds, nanos = value.seconds, value.nanos
    if abs(nanos) >= _NANOS_PER_SECOND or (seconds > 0 and nanos < 0) or (seconds < 0 and nanos > 0):
        raise invalid_field(field, "is not a valid duration")
    return seconds * _NANOS_PER_SECOND + nanos
