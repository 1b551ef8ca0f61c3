"""Whether an attempt's end is transient (another attempt may help) or permanent, and why.

An attempt is one CLI process of a phase. ``phase_outcome.decide_outcome`` says honestly *how* it
ended (SUCCEEDED, FAILED, INCOMPLETE, ...); this module says whether trying again makes sense. It
works only from facts the CLI and the supervisor reported — the result line's ``api_error_status``,
``subtype``, ``terminal_reason`` and ``startup_failure_reason``, the last ``system/api_retry`` and
synthetic API-error message, a rejected ``rate_limit_event``, and why supervision ended — never
from the wording of error text. The full table, with the real CLI output behind each row, is in
``docs/retries-and-admission.md``; the rows are tested against captures in ``tests/fixtures/retry``.

Transient: API overload (529), rate limit (429), server errors (5xx, 408, 409), the API being
unreachable, a crash or stdout closed without a result, the liveness watchdog finding the CLI hung,
and the two startup failures the CLI itself says may pass on a retry. Everything else is permanent:
400/401/403/413 and other 4xx, max turns, max budget, structured-output (schema) failures, other
startup refusals, any other error result, the phase's own timeout, a cancel, a person's interrupt,
the server shutting down, and a CLI that cannot be spawned at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from helix_runner.domain.events import (
    ApiError,
    ApiRetry,
    AttemptEndKind,
    ControlEvent,
    ControlEventKind,
    RateLimit,
    TurnResult,
)
from helix_runner.domain.phase_outcome import STRUCTURED_OUTPUT_MISSING, EndCause
from helix_runner.domain.phase_status import PhaseStatus

# `startup_failure_reason` values whose description in CLI 2.1.330's own schema says "retrying may
# succeed" (quoted in docs/retries-and-admission.md). The schema introduces the field as "Why Claude
# Code refused to start, so a host can offer the fix instead of a retry", so every other value,
# and any value a later CLI adds, is permanent.
TRANSIENT_STARTUP_FAILURES = frozenset({"org_config_required_unavailable", "worktree_unverified"})

TRANSIENT_KINDS = frozenset(
    {
        AttemptEndKind.API_OVERLOADED,
        AttemptEndKind.API_RATE_LIMITED,
        AttemptEndKind.API_SERVER_ERROR,
        AttemptEndKind.CONNECTION_FAILED,
        AttemptEndKind.CRASHED,
        AttemptEndKind.HUNG,
        AttemptEndKind.STARTUP_TRANSIENT,
    }
)

# The synthetic API-error message's `error` when the result has no HTTP status (CLI 2.1.330; notes
# §2.3). A connection failure reports `server_error` there (tests/fixtures/retry/connection-refused).
_KIND_BY_API_ERROR = {
    "rate_limit": AttemptEndKind.API_RATE_LIMITED,
    "overloaded": AttemptEndKind.API_OVERLOADED,
    "authentication_failed": AttemptEndKind.API_AUTHENTICATION,
    "billing_error": AttemptEndKind.API_PERMISSION,
    "invalid_request": AttemptEndKind.API_INVALID_REQUEST,
    "model_not_found": AttemptEndKind.API_INVALID_REQUEST,
}

_KIND_BY_SUBTYPE = {
    "error_max_turns": AttemptEndKind.MAX_TURNS,
    "error_max_budget_usd": AttemptEndKind.MAX_BUDGET,
    "error_max_structured_output_retries": AttemptEndKind.STRUCTURED_OUTPUT,
}


@dataclass(frozen=True)
class AttemptFacts:
    """What is known about how one attempt ended.

    ``status``, ``cause`` and ``reason`` are ``decide_outcome``'s verdict and the supervisor's end
    cause; the ``result_*`` fields come from the attempt's last turn result (empty when there was
    none); the rest from the last ``system/api_retry``, the last synthetic API-error message and
    the latest ``rate_limit_event`` (see :class:`AttemptObserver`).
    """

    status: PhaseStatus
    cause: EndCause
    reason: str = ""
    result_subtype: str = ""
    is_error: bool = False
    api_error_status: int | None = None
    terminal_reason: str = ""
    startup_failure_reason: str = ""
    api_error: str = ""
    """``error`` of the last synthetic API-error message (``rate_limit``, ``server_error``, ...)."""
    retrying_error: str = ""
    """``error`` of the last ``system/api_retry``: what the CLI was retrying when it last wrote one."""
    retrying_status: int | None = None
    rate_limit_resets_at_s: int | None = None
    """``resetsAt`` of a ``rate_limit_event`` whose status is ``rejected`` (cleared by a later allowed one)."""
    interrupted_by_client: bool = False
    """A person interrupted the turn (InterruptPhase) and no turn finished after that."""


@dataclass(frozen=True)
class AttemptVerdict:
    """The classification of an attempt's end.

    ``reason`` is one clause for people (``the API was overloaded (HTTP 529)``).
    ``retry_not_before_s`` (epoch seconds) is the earliest useful retry, when the CLI reported a
    rate-limit reset. ``hold_credential`` says new starts on the same API credential should wait too.
    """

    kind: AttemptEndKind
    retryable: bool
    reason: str
    retry_not_before_s: float | None = None
    hold_credential: bool = False


def classify_attempt(facts: AttemptFacts) -> AttemptVerdict:
    """The honest classification of one attempt's end: transient (retryable) or not, with a reason."""
    if facts.status is PhaseStatus.SUCCEEDED:
        return _verdict(AttemptEndKind.COMPLETED, "the attempt completed")
    cause = facts.cause
    # How supervision ended outranks what the CLI wrote: a cancel or a shutdown is never retried.
    if cause is EndCause.CANCELLED:
        return _verdict(AttemptEndKind.CANCELLED, "the phase was cancelled")
    if cause is EndCause.INTERRUPTED:
        return _verdict(AttemptEndKind.SERVER_SHUTDOWN, "the server stopped while the attempt ran")
    if cause is EndCause.SPAWN_FAILED:
        return _verdict(
            AttemptEndKind.SPAWN_FAILED, _with_detail("the CLI could not be started", facts.reason)
        )
    if cause is EndCause.TIMEOUT:
        return _verdict(AttemptEndKind.TIMED_OUT, "the phase ran past its timeout")
    if cause in (EndCause.PROCESS_LIMIT, EndCause.OUTPUT_LIMIT, EndCause.LINE_LIMIT, EndCause.EGRESS_LIMIT,
                 EndCause.WORKSPACE_LIMIT):
        # The phase itself went past a limit: another attempt would do the same.
        return _verdict(AttemptEndKind.RESOURCE_LIMIT, _with_detail("the phase reached a limit", facts.reason))
    if facts.interrupted_by_client:
        return _verdict(AttemptEndKind.INTERRUPTED_BY_CLIENT, "a person interrupted the turn")

    if facts.startup_failure_reason:
        why = facts.startup_failure_reason
        if why in TRANSIENT_STARTUP_FAILURES:
            return _verdict(
                AttemptEndKind.STARTUP_TRANSIENT, f"the CLI refused to start ({why}), which it says may pass"
            )
        return _verdict(
            AttemptEndKind.STARTUP_REFUSED, f"the CLI refused to start ({why}), which needs a fix"
        )

    if facts.result_subtype:  # the attempt wrote a final result
        if facts.status is PhaseStatus.FAILED and (facts.is_error or facts.result_subtype != "success"):
            return _classify_error_result(facts)
        if facts.reason.startswith(STRUCTURED_OUTPUT_MISSING):
            return _verdict(AttemptEndKind.STRUCTURED_OUTPUT, "the model never produced the structured output")
        # A successful last result, yet the phase failed: the CLI exited non-zero or did not exit.
        return _verdict(
            AttemptEndKind.EXECUTION_ERROR, _with_detail("the CLI misbehaved at its end", facts.reason)
        )

    # No final result: a crash, stdout closed early, or the watchdog killed a silent CLI. If the CLI
    # was retrying an error no retry can fix (e.g. 401, which the CLI itself retries ~10 times;
    # tests/fixtures/retry/localcli-13-auth401), that error decides, not the missing result.
    if facts.retrying_status is not None:
        kind, what = _kind_by_status(facts.retrying_status)
        if kind not in TRANSIENT_KINDS:
            return _verdict(kind, f"the attempt ended while the CLI was still retrying after the API {what}")
    if facts.retrying_error == "authentication_failed":
        return _verdict(
            AttemptEndKind.API_AUTHENTICATION,
            "the CLI was still retrying an authentication failure when it ended",
        )
    if cause is EndCause.IDLE_TIMEOUT:
        return _verdict(
            AttemptEndKind.HUNG,
            _with_detail("the CLI hung and the liveness watchdog killed it", facts.reason),
        )
    # decide_outcome's reason for INCOMPLETE already says "the output ended without a final result (...)".
    return _verdict(AttemptEndKind.CRASHED, facts.reason or "the output ended without a final result")


def _classify_error_result(facts: AttemptFacts) -> AttemptVerdict:
    kind = _KIND_BY_SUBTYPE.get(facts.result_subtype)
    if kind is AttemptEndKind.MAX_TURNS:
        return _verdict(kind, "the CLI reached its turn limit")
    if kind is AttemptEndKind.MAX_BUDGET:
        return _verdict(kind, "the CLI reached its budget")
    if kind is AttemptEndKind.STRUCTURED_OUTPUT:
        return _verdict(kind, "the structured output kept failing its schema")

    api_failure = facts.result_subtype == "success" and (
        facts.api_error_status is not None or facts.terminal_reason == "api_error" or bool(facts.api_error)
    )
    if not api_failure:
        what = f"the CLI reported an error ({facts.result_subtype}"
        what += f", {facts.terminal_reason})" if facts.terminal_reason else ")"
        return _verdict(AttemptEndKind.EXECUTION_ERROR, what)

    status = facts.api_error_status
    if status is not None:
        kind, what = _kind_by_status(status)
        if kind is AttemptEndKind.API_INVALID_REQUEST and facts.terminal_reason:
            what = f"rejected the request (HTTP {status}, {facts.terminal_reason})"
        reason = f"the API {what}"
    else:
        # No HTTP status: no response arrived at all, unless the error kind says otherwise.
        kind = _KIND_BY_API_ERROR.get(facts.api_error, AttemptEndKind.CONNECTION_FAILED)
        if kind is AttemptEndKind.CONNECTION_FAILED:
            reason = "the API could not be reached (no HTTP response)"
        else:
            reason = f"the API failed ({facts.api_error}, no HTTP status)"
    if kind is not AttemptEndKind.API_RATE_LIMITED:
        return _verdict(kind, reason)
    # A rate limit holds new starts on the same credential; a rejected rate_limit_event (subscription
    # auth) also names when the limit resets, and a retry before that would only fail again.
    resets_at = facts.rate_limit_resets_at_s
    if resets_at is not None:
        reason += f" until its reset at {_utc(resets_at)}"
    return AttemptVerdict(
        kind,
        True,
        reason,
        retry_not_before_s=float(resets_at) if resets_at is not None else None,
        hold_credential=True,
    )


def _kind_by_status(status: int) -> tuple[AttemptEndKind, str]:
    """HTTP status → (kind, what happened, phrased to follow "the API")."""
    if status == 529:
        return AttemptEndKind.API_OVERLOADED, "was overloaded (HTTP 529)"
    if status == 429:
        return AttemptEndKind.API_RATE_LIMITED, "rate-limited the requests (HTTP 429)"
    if status >= 500 or status in (408, 409):
        return AttemptEndKind.API_SERVER_ERROR, f"failed with a server error (HTTP {status})"
    if status == 401:
        return AttemptEndKind.API_AUTHENTICATION, "did not accept the credentials (HTTP 401)"
    if status == 403:
        return AttemptEndKind.API_PERMISSION, "refused permission (HTTP 403)"
    if status == 413:
        return AttemptEndKind.API_REQUEST_TOO_LARGE, "found the request too large (HTTP 413)"
    return AttemptEndKind.API_INVALID_REQUEST, f"rejected the request (HTTP {status})"


def _verdict(kind: AttemptEndKind, reason: str) -> AttemptVerdict:
    return AttemptVerdict(kind, kind in TRANSIENT_KINDS, reason)


def _utc(epoch_s: int) -> str:
    """Epoch seconds as an ISO 8601 UTC time (a value out of range is shown as the number)."""
    try:
        return datetime.fromtimestamp(epoch_s, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return f"epoch {epoch_s}"


def _with_detail(what: str, detail: str) -> str:
    return f"{what} ({detail})" if detail else what


class AttemptObserver:
    """Gathers, from one attempt's events, the facts :func:`classify_attempt` needs.

    Feed it every payload of the attempt in order (CLI lines and the service's control events);
    then call :meth:`facts` with the outcome. Pure and cheap: it keeps a handful of fields.
    """

    def __init__(self) -> None:
        self._result: TurnResult | None = None
        self._api_error: ApiError | None = None
        self._retry: ApiRetry | None = None
        self._rate_limit_resets_at_s: int | None = None
        self._interrupt_pending = False
        self._ended_by_interrupt = False

    def observe(self, payload: object) -> None:
        """Take note of one payload; anything irrelevant is ignored."""
        cls = payload.__class__
        if cls is TurnResult:
            self._result = payload  # type: ignore[assignment]
            self._ended_by_interrupt = self._interrupt_pending
            self._interrupt_pending = False
        elif cls is ApiRetry:
            self._retry = payload  # type: ignore[assignment]
        elif cls is ApiError:
            self._api_error = payload  # type: ignore[assignment]
        elif cls is RateLimit:
            rate: RateLimit = payload  # type: ignore[assignment]
            if rate.status == "rejected":
                self._rate_limit_resets_at_s = rate.resets_at_s
            elif rate.status.startswith("allowed"):
                self._rate_limit_resets_at_s = None
        elif cls is ControlEvent and payload.kind is ControlEventKind.INTERRUPTED:  # type: ignore[attr-defined]
            self._interrupt_pending = True

    @property
    def last_result(self) -> TurnResult | None:
        """The attempt's last turn result, if any."""
        return self._result

    def facts(self, status: PhaseStatus, cause: EndCause, reason: str = "") -> AttemptFacts:
        """The facts of the attempt, given ``decide_outcome``'s status and reason and the end cause."""
        result = self._result
        api_error = self._api_error
        retry = self._retry
        return AttemptFacts(
            status=status,
            cause=cause,
            reason=reason,
            result_subtype=result.subtype if result else "",
            is_error=result.is_error if result else False,
            api_error_status=result.api_error_status if result else None,
            terminal_reason=result.terminal_reason if result else "",
            startup_failure_reason=result.startup_failure_reason if result else "",
            api_error=api_error.error if api_error else "",
            retrying_error=retry.error if retry else "",
            retrying_status=retry.error_status if retry else None,
            rate_limit_resets_at_s=self._rate_limit_resets_at_s,
            interrupted_by_client=self._ended_by_interrupt or self._interrupt_pending,
        )
