"""A phase's attempts: what the next one runs, how one ended, and whether another follows.

A phase runs as one or more attempts (one CLI process each; ``PhaseRun.run`` drives the loop).
This module holds the per-attempt decisions so the run stays a loop: the spec and first stdin line
of the next attempt (``--resume`` of the failed attempt's session with the continuation prompt when
it wrote an init line, else the original prompt), the classification and the ``Attempt`` record of
an ended one, the budget and the retry decision. Design and evidence: docs/retries-and-admission.md.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from helix_runner.domain.attempt_classification import AttemptObserver, AttemptVerdict, classify_attempt
from helix_runner.domain.attempt_cost import budget_for_next_attempt, spent_usd
from helix_runner.domain.events import AttemptEndKind, ControlEvent, ControlEventKind, Event, SessionInit
from helix_runner.domain.phase_outcome import EndCause, Outcome, ProcessExit
from helix_runner.domain.phase_result import Attempt
from helix_runner.domain.phase_spec import PhaseSpec
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.retry_policy import NO_RETRIES, RetryDecision, RetryPolicy, decide_retry
from helix_runner.process.claude_command import prompt_line

if TYPE_CHECKING:
    from helix_runner.phases.admission import AsyncAdmission, Ticket

DEFAULT_CREDENTIAL = "server"
"""The name rate-limit holds use for the server's one API credential (the key is never the name)."""


class AttemptWatch(AttemptObserver):
    """``AttemptObserver`` that also notes whether the attempt's CLI wrote its ``system/init`` line
    (only then does its session have a transcript that ``--resume`` can continue, §3)."""

    def __init__(self) -> None:
        super().__init__()
        self.init_session_id = ""

    def observe_event(self, event: Event) -> None:
        """Take note of one published event (the session id is on its envelope)."""
        if event.payload.__class__ is SessionInit and event.session_id:
            self.init_session_id = event.session_id
        self.observe(event.payload)


@dataclass(frozen=True)
class AttemptPlan:
    """What attempt ``number`` runs: its spec (argv) and the first user line on stdin."""

    number: int
    spec: PhaseSpec
    prompt_line: bytes
    resumed_session_id: str = ""


@dataclass
class Retries:
    """A phase's retry policy and its admission; one per ``PhaseRun``."""

    policy: RetryPolicy = NO_RETRIES
    admission: AsyncAdmission | None = None
    ticket: Ticket | None = None
    """The first attempt's admission entry (submitted by the service before the stream opened)."""
    project: str = ""
    credential: str = DEFAULT_CREDENTIAL
    rng: random.Random | None = None


def first_plan(spec: PhaseSpec, line: bytes) -> AttemptPlan:
    return AttemptPlan(1, spec, line, spec.resume_session_id)


def next_plan(spec: PhaseSpec, original_line: bytes, policy: RetryPolicy, decision: RetryDecision,
              init_session_id: str) -> AttemptPlan:
    """The next attempt: resume the failed one's session when it has a transcript, else start over.

    A resumed attempt continues that session (no new ``--session-id``, no fork: it already is the
    phase's session, tests/offline/real_cli/test_resume.py) with the continuation prompt; without
    an init line (crash or refusal before it) the original prompt runs again as attempt 1 did.
    Either way ``--max-budget-usd`` is what the phase's budget has left.
    """
    budget = decision.max_budget_usd
    if init_session_id and not spec.no_session_persistence:
        resumed = replace(spec, resume_session_id=init_session_id, session_id="", fork_session=False,
                          max_budget_usd=budget)
        return AttemptPlan(decision.next_attempt, resumed, prompt_line(policy.continuation_prompt),
                           init_session_id)
    again = replace(spec, max_budget_usd=budget)
    return AttemptPlan(decision.next_attempt, again, original_line, spec.resume_session_id)


def attempt_started_event(plan: AttemptPlan, policy: RetryPolicy) -> ControlEvent:
    what = f"attempt {plan.number} of {policy.max_attempts} starts"
    if plan.number > 1:
        what += f", resuming session {plan.resumed_session_id}" if plan.resumed_session_id and plan.spec.resume_session_id \
            else ", running the prompt again"
    return ControlEvent(ControlEventKind.ATTEMPT_STARTED, message=what, attempt=plan.number,
                        max_attempts=policy.max_attempts, resumed_session_id=plan.resumed_session_id)


def retry_scheduled_event(attempt: Attempt, decision: RetryDecision, policy: RetryPolicy) -> ControlEvent:
    return ControlEvent(ControlEventKind.RETRY_SCHEDULED, message=decision.reason[:4096], attempt=attempt.number,
                        max_attempts=policy.max_attempts, end_kind=attempt.end_kind,
                        retry_delay_ns=round(decision.delay_s * 1e9))


@dataclass(frozen=True)
class AttemptEnd:
    """How an attempt ended and what follows: its record, its classification and the decision."""

    attempt: Attempt
    verdict: AttemptVerdict
    decision: RetryDecision
    outcome: Outcome  # the process's outcome the record was made from (its resource fault, if any)


def end_attempt(plan: AttemptPlan, exit_: ProcessExit, outcome: Outcome, watch: AttemptWatch, *,
                retries: Retries, earlier: list[Attempt], cost, session_id: str, first_sequence: int,
                last_sequence: int, phase_max_budget_usd: float | None, deadline_s: float | None) -> AttemptEnd:
    """Classify the ended attempt, decide on a retry, and build its ``Attempt`` record."""
    verdict = classify_attempt(watch.facts(outcome.status, exit_.cause, outcome.reason))
    spent = spent_usd([*(a.cost for a in earlier if a.cost is not None), cost])
    budget = budget_for_next_attempt(phase_max_budget_usd, spent)
    decision = decide_retry(retries.policy, verdict, plan.number, budget_allowed=budget.allowed,
                            next_budget_usd=budget.max_budget_usd, now_s=time.time(), deadline_s=deadline_s,
                            rng=(retries.rng or random).random)
    last = watch.last_result
    attempt = Attempt(
        number=plan.number,
        status=outcome.status,
        reason=outcome.reason,
        end_kind=decision.end_kind if decision.end_kind is not AttemptEndKind.UNSPECIFIED else verdict.kind,
        retryable=verdict.retryable,
        exit_code=exit_.exit_code,
        exit_signal=exit_.exit_signal,
        api_error_status=last.api_error_status if last else None,
        session_id=session_id,
        resumed_session_id=plan.resumed_session_id if plan.number > 1 else plan.spec.resume_session_id,
        start_time_ns=exit_.start_ns,
        end_time_ns=exit_.end_ns,
        cost=cost,
        first_sequence=first_sequence,
        last_sequence=last_sequence,
        retry_delay_ns=round(decision.delay_s * 1e9) if decision.retry else None,
        startup_failure_reason=last.startup_failure_reason if last else "",
    )
    return AttemptEnd(attempt, verdict, decision, outcome)


def final_reason(end: AttemptEnd) -> str:
    """The phase's reason after its last attempt: the attempt's, plus why no retry followed a transient end."""
    reason = end.attempt.reason
    if end.verdict.retryable and not end.decision.retry:
        reason = f"{reason} ({end.decision.reason})"
    return reason


# A phase in one of these had an attempt's process running (PENDING and QUEUED: none was).
_ATTEMPT_RUNNING = frozenset({PhaseStatus.RUNNING, PhaseStatus.PAUSING, PhaseStatus.PAUSED,
                              PhaseStatus.AWAITING_APPROVAL})


def interrupted_attempt(status: PhaseStatus, reason: str, *, session_id: str, end_time_ns: int,
                        last_sequence: int) -> Attempt | None:
    """The attempt a phase was running when its server or replica died, as recovery and a takeover
    record it from the phase row (``status``: the row's); None when the phase was waiting.

    Numbered 0: ``RecordEncoder.encode_result`` numbers it after the ended attempts the row holds.
    Its start, exit and own cost died with the process (the phase's cost so far is the result's).
    """
    if status not in _ATTEMPT_RUNNING:
        return None
    return Attempt(number=0, status=PhaseStatus.INTERRUPTED, reason=reason, end_kind=AttemptEndKind.SERVER_SHUTDOWN,
                   session_id=session_id, end_time_ns=end_time_ns, last_sequence=last_sequence)


def ended_while_queued(cause: EndCause, why: str, start_ns: int) -> ProcessExit:
    """The exit facts of an attempt that never started: the phase was cancelled or the server shut down."""
    return ProcessExit(cause, None, None, False, why, start_ns, time.time_ns())
