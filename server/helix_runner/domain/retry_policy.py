"""How a phase retries after a transient failure: the policy, its backoff schedule, and the decision.

A phase runs as one or more *attempts* (one CLI process each). When an attempt ends with a failure
that ``attempt_classification`` calls transient, the phase may start another one after a backoff,
as long as the policy's ``max_attempts`` (the first attempt included), the phase's budget
(``attempt_cost.budget_for_next_attempt``) and its deadline allow. The design and the evidence behind
it are in ``docs/retries-and-admission.md``.

Backoff is exponential with "full jitter": before retry *k* (attempt *k + 1*) the ceiling is
``min(max_backoff, initial_backoff * multiplier ** (k - 1))`` and the wait is drawn uniformly from
``[0, ceiling)``, so phases that failed together (an API overload hits many at once) do not come
back together. The random source is injected, which keeps the schedule testable.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from helix_runner.domain.attempt_classification import AttemptVerdict
from helix_runner.domain.events import AttemptEndKind
from helix_runner.errors import invalid_field

DEFAULT_MAX_ATTEMPTS = 3
"""Attempts in total (the first one included) when the request leaves ``max_attempts`` at 0."""
MAX_ATTEMPTS_LIMIT = 10
DEFAULT_INITIAL_BACKOFF_S = 2.0
DEFAULT_BACKOFF_MULTIPLIER = 2.0
DEFAULT_MAX_BACKOFF_S = 60.0
MAX_BACKOFF_LIMIT_S = 3600.0
MULTIPLIER_RANGE = (1.0, 10.0)
CONTINUATION_PROMPT_MAX_BYTES = 4096

DEFAULT_CONTINUATION_PROMPT = (
    "Your previous attempt at this task was cut off by a transient failure (for example an API "
    "overload or a crash) before it finished. Continue where you left off: check what is already "
    "done, do not repeat work that is complete, and finish the task."
)
"""The user message a resumed attempt starts with (``--resume <session>``), unless the policy sets one."""

Random = Callable[[], float]
"""A source of floats uniform in ``[0, 1)``, such as ``random.Random(seed).random``."""


@dataclass(frozen=True)
class RetryPolicy:
    """A validated retry policy; build one from a request with :meth:`from_request`."""

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    initial_backoff_s: float = DEFAULT_INITIAL_BACKOFF_S
    backoff_multiplier: float = DEFAULT_BACKOFF_MULTIPLIER
    max_backoff_s: float = DEFAULT_MAX_BACKOFF_S
    jitter: bool = True
    continuation_prompt: str = DEFAULT_CONTINUATION_PROMPT

    @classmethod
    def from_request(
        cls,
        *,
        max_attempts: int = 0,
        initial_backoff_ns: int = 0,
        backoff_multiplier: float = 0.0,
        max_backoff_ns: int = 0,
        disable_jitter: bool = False,
        continuation_prompt: str = "",
        defaults: RetryPolicy | None = None,
        field_prefix: str = "options.retry",
    ) -> RetryPolicy:
        """The policy a request asks for; zero values take ``defaults`` (the server's policy).

        Raises INVALID_ARGUMENT naming the offending field (``options.retry.max_attempts``, ...).
        """
        base = defaults or DEFAULT_RETRY_POLICY

        def bad(name: str, problem: str) -> Exception:
            return invalid_field(f"{field_prefix}.{name}", problem)

        if max_attempts < 0 or max_attempts > MAX_ATTEMPTS_LIMIT:
            raise bad("max_attempts", f"must be between 1 and {MAX_ATTEMPTS_LIMIT} (0: the server's default)")
        for name, value in (("initial_backoff", initial_backoff_ns), ("max_backoff", max_backoff_ns)):
            if value < 0:
                raise bad(name, "must not be negative")
            if value > MAX_BACKOFF_LIMIT_S * 1e9:
                raise bad(name, f"must be at most {MAX_BACKOFF_LIMIT_S:.0f} s")
        if not math.isfinite(backoff_multiplier) or (
            backoff_multiplier != 0 and not MULTIPLIER_RANGE[0] <= backoff_multiplier <= MULTIPLIER_RANGE[1]
        ):
            low, high = MULTIPLIER_RANGE
            raise bad("backoff_multiplier", f"must be between {low:g} and {high:g} (0: the server's default)")
        size = len(continuation_prompt.encode())
        if size > CONTINUATION_PROMPT_MAX_BYTES:
            raise bad("continuation_prompt", f"is {size} bytes; the limit is {CONTINUATION_PROMPT_MAX_BYTES}")
        if "\x00" in continuation_prompt:
            raise bad("continuation_prompt", "must not contain NUL")
        if continuation_prompt and not continuation_prompt.strip():
            raise bad("continuation_prompt", "must not be blank (leave it empty for the server's default)")

        policy = cls(
            max_attempts=max_attempts or base.max_attempts,
            initial_backoff_s=initial_backoff_ns / 1e9 if initial_backoff_ns else base.initial_backoff_s,
            backoff_multiplier=backoff_multiplier or base.backoff_multiplier,
            max_backoff_s=max_backoff_ns / 1e9 if max_backoff_ns else base.max_backoff_s,
            jitter=base.jitter and not disable_jitter,
            continuation_prompt=continuation_prompt or base.continuation_prompt,
        )
        if policy.initial_backoff_s > policy.max_backoff_s:
            # Name the field the caller set; when both are set, initial_backoff is the one to lower.
            name = "initial_backoff" if initial_backoff_ns or not max_backoff_ns else "max_backoff"
            raise bad(
                name,
                f"initial backoff {policy.initial_backoff_s:g} s is above the max backoff {policy.max_backoff_s:g} s",
            )
        return policy

    @property
    def retries_enabled(self) -> bool:
        return self.max_attempts > 1

    def backoff_ceiling_s(self, retry_number: int) -> float:
        """The backoff before retry ``retry_number`` (1 = before attempt 2), before jitter."""
        if retry_number < 1:
            raise ValueError("retry_number starts at 1")
        ceiling = self.initial_backoff_s
        for _ in range(retry_number - 1):
            ceiling *= self.backoff_multiplier
            if ceiling >= self.max_backoff_s:
                break
        return min(ceiling, self.max_backoff_s)

    def backoff_s(self, retry_number: int, rng: Random = random.random) -> float:
        """The wait before retry ``retry_number``: uniform in ``[0, ceiling)`` with jitter, else the ceiling."""
        ceiling = self.backoff_ceiling_s(retry_number)
        if not self.jitter:
            return ceiling
        draw = rng()
        if not 0.0 <= draw < 1.0:  # a bad source must not stretch the wait past the ceiling
            draw = min(max(draw, 0.0), 1.0)
        return draw * ceiling

    def schedule(self, rng: Random = random.random) -> list[float]:
        """The waits before attempts 2 .. ``max_attempts`` (empty when retries are off)."""
        return [self.backoff_s(k, rng) for k in range(1, self.max_attempts)]


DEFAULT_RETRY_POLICY = RetryPolicy()
"""The server's default: 3 attempts in total, 2 s doubling up to 60 s, full jitter."""

NO_RETRIES = RetryPolicy(max_attempts=1)


@dataclass(frozen=True)
class RetryDecision:
    """Whether another attempt starts, when, and why (``reason`` is one sentence for people)."""

    retry: bool
    reason: str
    next_attempt: int = 0
    delay_s: float = 0.0
    max_budget_usd: float | None = None
    """The ``--max-budget-usd`` for the next attempt (None: no budget was set for the phase)."""
    end_kind: AttemptEndKind = AttemptEndKind.UNSPECIFIED
    """Overrides the attempt's classification when the budget, not the failure, ends the phase."""


def decide_retry(
    policy: RetryPolicy,
    verdict: AttemptVerdict,
    attempt_number: int,
    *,
    budget_allowed: bool = True,
    next_budget_usd: float | None = None,
    now_s: float = 0.0,
    deadline_s: float | None = None,
    rng: Random = random.random,
) -> RetryDecision:
    """Whether attempt ``attempt_number``, which ended as ``verdict`` says, is followed by another.

    ``budget_allowed``/``next_budget_usd`` come from ``attempt_cost.budget_for_next_attempt``;
    ``now_s`` and ``deadline_s`` (the phase's wall-clock timeout, if any) are epoch seconds on the
    same clock as ``verdict.retry_not_before_s``. The delay is the jittered backoff, stretched to
    a rate-limit reset the CLI reported.
    """
    reason = verdict.reason
    if not verdict.retryable:
        return RetryDecision(False, f"{reason}; that is not transient, so there is no retry")
    if attempt_number >= policy.max_attempts:
        if policy.max_attempts == 1:
            return RetryDecision(False, f"{reason}; retries are off for this phase")
        return RetryDecision(False, f"{reason}; all {policy.max_attempts} attempts are used up")
    if not budget_allowed:
        return RetryDecision(
            False, f"{reason}; the phase's budget is used up", end_kind=AttemptEndKind.MAX_BUDGET
        )
    delay = policy.backoff_s(attempt_number, rng)
    if verdict.retry_not_before_s is not None:
        delay = max(delay, verdict.retry_not_before_s - now_s)
    if deadline_s is not None and now_s + delay >= deadline_s:
        return RetryDecision(
            False,
            f"{reason}; the phase's timeout would pass during the {delay:.1f} s backoff",
            end_kind=AttemptEndKind.TIMED_OUT,
        )
    nxt = attempt_number + 1
    return RetryDecision(
        True,
        f"{reason}; attempt {nxt} of {policy.max_attempts} starts in {delay:.1f} s",
        next_attempt=nxt,
        delay_s=delay,
        max_budget_usd=next_budget_usd,
    )
