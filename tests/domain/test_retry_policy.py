"""The retry policy: validation naming the field, the full-jitter schedule, and the retry decision."""

from __future__ import annotations

import math
import random

import pytest

from helix_runner.domain.attempt_classification import AttemptVerdict
from helix_runner.domain.events import AttemptEndKind
from helix_runner.domain.retry_policy import (
    CONTINUATION_PROMPT_MAX_BYTES,
    DEFAULT_CONTINUATION_PROMPT,
    DEFAULT_RETRY_POLICY,
    RetryPolicy,
    decide_retry,
)
from helix_runner.errors import ErrorKind, RunnerError

S = 1_000_000_000  # ns per second
OVERLOADED = AttemptVerdict(AttemptEndKind.API_OVERLOADED, True, "the API was overloaded (HTTP 529)")
AUTH = AttemptVerdict(
    AttemptEndKind.API_AUTHENTICATION, False, "the API did not accept the credentials (HTTP 401)"
)


def test_the_servers_default_is_three_attempts_with_doubling_jittered_backoff():
    policy = RetryPolicy.from_request()
    assert policy == DEFAULT_RETRY_POLICY
    assert (
        policy.max_attempts,
        policy.initial_backoff_s,
        policy.backoff_multiplier,
        policy.max_backoff_s,
    ) == (
        3,
        2.0,
        2.0,
        60.0,
    )
    assert policy.jitter and policy.continuation_prompt == DEFAULT_CONTINUATION_PROMPT


def test_zero_fields_take_the_servers_configured_defaults():
    server = RetryPolicy(
        max_attempts=5, initial_backoff_s=1.0, max_backoff_s=30.0, continuation_prompt="Go on."
    )
    policy = RetryPolicy.from_request(backoff_multiplier=3.0, defaults=server)
    assert (
        policy.max_attempts,
        policy.initial_backoff_s,
        policy.backoff_multiplier,
        policy.max_backoff_s,
    ) == (
        5,
        1.0,
        3.0,
        30.0,
    )
    assert policy.continuation_prompt == "Go on."
    assert not RetryPolicy.from_request(disable_jitter=True, defaults=server).jitter


def test_one_attempt_turns_retries_off():
    policy = RetryPolicy.from_request(max_attempts=1)
    assert not policy.retries_enabled and policy.schedule() == []
    decision = decide_retry(policy, OVERLOADED, 1)
    assert (
        not decision.retry
        and decision.reason == "the API was overloaded (HTTP 529); retries are off for this phase"
    )


@pytest.mark.parametrize(
    ("request_fields", "field", "words"),
    [
        ({"max_attempts": -1}, "max_attempts", "between 1 and 10"),
        ({"max_attempts": 11}, "max_attempts", "between 1 and 10"),
        ({"initial_backoff_ns": -1}, "initial_backoff", "negative"),
        ({"max_backoff_ns": -S}, "max_backoff", "negative"),
        ({"max_backoff_ns": 3601 * S}, "max_backoff", "at most 3600 s"),
        ({"initial_backoff_ns": 90 * S}, "initial_backoff", "above the max backoff 60 s"),
        ({"max_backoff_ns": S}, "max_backoff", "initial backoff 2 s is above"),
        ({"initial_backoff_ns": 10 * S, "max_backoff_ns": 5 * S}, "initial_backoff", "above"),
        ({"backoff_multiplier": 0.5}, "backoff_multiplier", "between 1 and 10"),
        ({"backoff_multiplier": 10.5}, "backoff_multiplier", "between 1 and 10"),
        ({"backoff_multiplier": -2.0}, "backoff_multiplier", "between 1 and 10"),
        ({"backoff_multiplier": math.nan}, "backoff_multiplier", "between 1 and 10"),
        ({"backoff_multiplier": math.inf}, "backoff_multiplier", "between 1 and 10"),
        (
            {"continuation_prompt": "x" * (CONTINUATION_PROMPT_MAX_BYTES + 1)},
            "continuation_prompt",
            "4097 bytes",
        ),
        ({"continuation_prompt": "é" * 2049}, "continuation_prompt", "4098 bytes"),
        ({"continuation_prompt": " \n\t"}, "continuation_prompt", "blank"),
        ({"continuation_prompt": "go\x00on"}, "continuation_prompt", "NUL"),
    ],
)
def test_invalid_values_name_the_field(request_fields, field, words):
    with pytest.raises(RunnerError) as caught:
        RetryPolicy.from_request(**request_fields)
    error = caught.value
    assert (error.kind, error.reason) == (ErrorKind.INVALID_ARGUMENT, "INVALID_FIELD")
    assert error.metadata == {"field": f"options.retry.{field}"}
    assert error.message.startswith(f"options.retry.{field}: ") and words in error.message


def test_limits_themselves_are_accepted():
    policy = RetryPolicy.from_request(
        max_attempts=10,
        initial_backoff_ns=3600 * S,
        max_backoff_ns=3600 * S,
        backoff_multiplier=10.0,
        continuation_prompt="x" * CONTINUATION_PROMPT_MAX_BYTES,
    )
    assert policy.max_attempts == 10 and policy.backoff_ceiling_s(9) == 3600.0
    assert RetryPolicy.from_request(backoff_multiplier=1.0).backoff_ceiling_s(5) == 2.0


def test_backoff_grows_by_the_multiplier_up_to_the_cap():
    policy = RetryPolicy(max_attempts=10, jitter=False)
    assert [policy.backoff_ceiling_s(k) for k in range(1, 10)] == [2, 4, 8, 16, 32, 60, 60, 60, 60]
    assert policy.schedule() == [2, 4, 8, 16, 32, 60, 60, 60, 60]
    assert RetryPolicy(
        initial_backoff_s=0.5, backoff_multiplier=3.0, max_backoff_s=10.0, jitter=False
    ).schedule() == [
        0.5,
        1.5,
    ]
    with pytest.raises(ValueError):
        policy.backoff_ceiling_s(0)


def test_full_jitter_draws_uniformly_below_the_ceiling():
    policy = RetryPolicy(max_attempts=10)
    assert policy.backoff_s(3, rng=lambda: 0.5) == 4.0  # half of the 8 s ceiling
    assert policy.backoff_s(3, rng=lambda: 0.0) == 0.0
    rng = random.Random(20_261_123)
    draws = [policy.backoff_s(2, rng.random) for _ in range(20_000)]
    assert all(0.0 <= d < 4.0 for d in draws)
    assert 1.9 < sum(draws) / len(draws) < 2.1  # uniform on [0, 4): mean 2
    assert sum(d < 1.0 for d in draws) / len(draws) == pytest.approx(0.25, abs=0.02)


def test_a_misbehaving_random_source_cannot_stretch_the_wait():
    policy = RetryPolicy()
    assert policy.backoff_s(1, rng=lambda: 7.0) == 2.0
    assert policy.backoff_s(1, rng=lambda: -1.0) == 0.0


def test_the_same_seed_gives_the_same_schedule():
    policy = RetryPolicy(max_attempts=6)
    assert policy.schedule(random.Random(7).random) == policy.schedule(random.Random(7).random)
    assert len(policy.schedule()) == 5


def test_a_transient_failure_is_retried_after_the_backoff():
    decision = decide_retry(DEFAULT_RETRY_POLICY, OVERLOADED, 1, next_budget_usd=0.25, rng=lambda: 0.25)
    assert (decision.retry, decision.next_attempt, decision.delay_s, decision.max_budget_usd) == (
        True,
        2,
        0.5,
        0.25,
    )
    assert decision.reason == "the API was overloaded (HTTP 529); attempt 2 of 3 starts in 0.5 s"
    second = decide_retry(DEFAULT_RETRY_POLICY, OVERLOADED, 2, rng=lambda: 0.25)
    assert (second.next_attempt, second.delay_s) == (3, 1.0)


def test_no_retry_when_permanent_or_used_up():
    decision = decide_retry(DEFAULT_RETRY_POLICY, AUTH, 1)
    assert not decision.retry and decision.reason.endswith("that is not transient, so there is no retry")
    decision = decide_retry(DEFAULT_RETRY_POLICY, OVERLOADED, 3)
    assert not decision.retry and decision.reason.endswith("all 3 attempts are used up")
    assert decision.end_kind is AttemptEndKind.UNSPECIFIED  # the attempt's own classification stands


def test_no_retry_when_the_budget_is_used_up():
    decision = decide_retry(DEFAULT_RETRY_POLICY, OVERLOADED, 1, budget_allowed=False)
    assert not decision.retry and decision.end_kind is AttemptEndKind.MAX_BUDGET
    assert decision.reason.endswith("the phase's budget is used up")


def test_no_retry_when_the_phases_timeout_would_pass_during_the_backoff():
    decision = decide_retry(
        DEFAULT_RETRY_POLICY, OVERLOADED, 1, now_s=1000.0, deadline_s=1001.5, rng=lambda: 0.99
    )
    assert not decision.retry and decision.end_kind is AttemptEndKind.TIMED_OUT
    assert "timeout would pass during the 2.0 s backoff" in decision.reason
    assert decide_retry(
        DEFAULT_RETRY_POLICY, OVERLOADED, 1, now_s=1000.0, deadline_s=1003.0, rng=lambda: 0.99
    ).retry


def test_a_rate_limit_reset_stretches_the_delay():
    limited = AttemptVerdict(AttemptEndKind.API_RATE_LIMITED, True, "rate-limited", 1_000_090.0, True)
    decision = decide_retry(DEFAULT_RETRY_POLICY, limited, 1, now_s=1_000_000.0, rng=lambda: 0.5)
    assert decision.retry and decision.delay_s == 90.0
    passed = AttemptVerdict(AttemptEndKind.API_RATE_LIMITED, True, "rate-limited", 999_000.0, True)
    assert decide_retry(DEFAULT_RETRY_POLICY, passed, 1, now_s=1_000_000.0, rng=lambda: 0.5).delay_s == 1.0
