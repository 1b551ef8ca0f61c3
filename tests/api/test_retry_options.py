"""PhaseOptions.retry → RetryPolicy: unset takes the server's default, bad values name the field."""

from __future__ import annotations

import pytest
from google.protobuf import duration_pb2

from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.api.retry_options import retry_policy_from_options
from helix_runner.domain.retry_policy import DEFAULT_RETRY_POLICY, RetryPolicy
from helix_runner.errors import RunnerError


def test_unset_retry_is_the_servers_default():
    server = RetryPolicy(max_attempts=4)
    assert retry_policy_from_options(pb.PhaseOptions(), server) is server
    assert retry_policy_from_options(pb.PhaseOptions()) is DEFAULT_RETRY_POLICY
    # Present but all zero: every field takes the default.
    assert retry_policy_from_options(pb.PhaseOptions(retry=pb.RetryPolicy()), server) == server


def test_fields_are_carried_over():
    options = pb.PhaseOptions(
        retry=pb.RetryPolicy(
            max_attempts=5,
            initial_backoff=duration_pb2.Duration(seconds=0, nanos=250_000_000),
            backoff_multiplier=3.0,
            max_backoff=duration_pb2.Duration(seconds=20),
            disable_jitter=True,
            continuation_prompt="Carry on.",
        )
    )
    policy = retry_policy_from_options(options)
    assert policy == RetryPolicy(5, 0.25, 3.0, 20.0, False, "Carry on.")
    assert retry_policy_from_options(pb.PhaseOptions(retry=pb.RetryPolicy(max_attempts=1))).max_attempts == 1


@pytest.mark.parametrize(
    ("retry", "field"),
    [
        (pb.RetryPolicy(max_attempts=-3), "options.retry.max_attempts"),
        (
            pb.RetryPolicy(initial_backoff=duration_pb2.Duration(seconds=1, nanos=-5)),
            "options.retry.initial_backoff",
        ),
        (
            pb.RetryPolicy(max_backoff=duration_pb2.Duration(seconds=0, nanos=2_000_000_000)),
            "options.retry.max_backoff",
        ),
        (pb.RetryPolicy(max_backoff=duration_pb2.Duration(seconds=-1)), "options.retry.max_backoff"),
        (pb.RetryPolicy(backoff_multiplier=0.1), "options.retry.backoff_multiplier"),
    ],
)
def test_invalid_values_name_the_field(retry, field):
    with pytest.raises(RunnerError) as caught:
        retry_policy_from_options(pb.PhaseOptions(retry=retry))
    assert caught.value.metadata["field"] == field
