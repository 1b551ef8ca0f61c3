"""Which attempt ends are transient: real CLI output (tests/fixtures/retry) through the real parser."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from helix_runner.domain.attempt_classification import (
    TRANSIENT_KINDS,
    AttemptFacts,
    AttemptObserver,
    classify_attempt,
)
from helix_runner.domain.events import AttemptEndKind, ControlEvent, ControlEventKind, Payload, TurnResult
from helix_runner.domain.phase_outcome import EndCause, LastResult, ProcessExit, decide_outcome
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.phase_stream import PhaseStream
from helix_runner.domain.pricing import PriceTable

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "retry"
PRICES = PriceTable(use_genai_prices=False)
K = AttemptEndKind


def exited(code: int) -> ProcessExit:
    return ProcessExit(EndCause.EXITED, code, None, True)


def ended(cause: EndCause, detail: str = "") -> ProcessExit:
    """The supervisor killed the process group (or could not start it) for ``cause``."""
    return ProcessExit(cause, None, "SIGKILL", True, detail)


CRASHED = ProcessExit(EndCause.EXITED, None, "SIGKILL", True)


def payloads_of(lines: bytes) -> list[Payload]:
    stream = PhaseStream(price_table=PRICES)
    return [e.payload for e in stream.feed(lines) + stream.finish()]


def attempt(
    fixture: str | bytes, process: ProcessExit, *, inject: dict[int, Payload] | None = None
) -> AttemptFacts:
    """The facts of one attempt whose stdout is ``fixture``, as the phase runner would gather them.

    ``inject`` puts service events (e.g. a control event) before the payload at that index.
    """
    lines = fixture if isinstance(fixture, bytes) else (FIXTURES / fixture).read_bytes()
    observer = AttemptObserver()
    for index, payload in enumerate(payloads_of(lines)):
        if inject and index in inject:
            observer.observe(inject[index])
        observer.observe(payload)
    last = observer.last_result
    last_result = (
        None
        if last is None
        else LastResult(last.subtype, last.is_error, last.api_error_status, last.terminal_reason, last.errors)
    )
    outcome = decide_outcome(process, last_result)
    return observer.facts(outcome.status, process.cause, outcome.reason)


def index_of_last_result(fixture: str) -> int:
    found = [
        i for i, p in enumerate(payloads_of((FIXTURES / fixture).read_bytes())) if isinstance(p, TurnResult)
    ]
    return found[-1]


# fixture, how the process ended, expected kind, retryable, words the reason must contain
TABLE = [
    ("localcli-12-overloaded.jsonl", exited(1), K.API_OVERLOADED, True, "HTTP 529"),
    ("localcli-11-apierror500.jsonl", exited(1), K.API_SERVER_ERROR, True, "HTTP 500"),
    ("cli-ratelimit429.jsonl", exited(1), K.API_RATE_LIMITED, True, "HTTP 429"),
    ("cli-connection-refused.jsonl", exited(1), K.CONNECTION_FAILED, True, "could not be reached"),
    ("cli-resume-crash-attempt1.jsonl", CRASHED, K.CRASHED, True, "without a final result"),
    (
        "cli-resume-crash-attempt1.jsonl",
        ended(EndCause.IDLE_TIMEOUT, "no output for 300 s"),
        K.HUNG,
        True,
        "300 s",
    ),
    ("localcli-10-apierror400.jsonl", exited(1), K.API_INVALID_REQUEST, False, "HTTP 400, prompt_too_long"),
    ("cli-auth401.jsonl", exited(1), K.API_AUTHENTICATION, False, "HTTP 401"),
    ("cli-perm403.jsonl", exited(1), K.API_PERMISSION, False, "HTTP 403"),
    ("cli-toolarge413.jsonl", exited(1), K.API_REQUEST_TOO_LARGE, False, "HTTP 413"),
    ("localcli-06-maxturns.jsonl", exited(1), K.MAX_TURNS, False, "turn limit"),
    ("cli-maxbudget.jsonl", exited(1), K.MAX_BUDGET, False, "budget"),
    ("cli-startup-config-invalid.jsonl", exited(1), K.STARTUP_REFUSED, False, "config_file_invalid"),
    # 401 is retried by the CLI itself for minutes; killed meanwhile, it must not be retried by us.
    ("localcli-13-auth401.jsonl", CRASHED, K.API_AUTHENTICATION, False, "still retrying"),
    ("localcli-13-auth401.jsonl", ended(EndCause.IDLE_TIMEOUT), K.API_AUTHENTICATION, False, "HTTP 401"),
    ("cli-resume-crash-attempt1.jsonl", ended(EndCause.TIMEOUT), K.TIMED_OUT, False, "timeout"),
    ("localcli-12-overloaded.jsonl", ended(EndCause.CANCELLED), K.CANCELLED, False, "cancelled"),
    ("localcli-12-overloaded.jsonl", ended(EndCause.INTERRUPTED), K.SERVER_SHUTDOWN, False, "server stopped"),
    ("localcli-12-overloaded.jsonl", ended(EndCause.SPAWN_FAILED, "ENOENT"), K.SPAWN_FAILED, False, "ENOENT"),
    ("localcli-28-ratelimit429-recovered.jsonl", exited(0), K.COMPLETED, False, "completed"),
    ("localcli-16-ctl-permissions.jsonl", exited(1), K.EXECUTION_ERROR, False, "error_during_execution"),
    # --resume of a session with no transcript: resuming it again cannot help.
    ("cli-resume-unknown-session.jsonl", exited(1), K.EXECUTION_ERROR, False, "error_during_execution"),
    # The server stopped the phase at one of its limits: another attempt would do the same.
    ("cli-resume-crash-attempt1.jsonl", ended(EndCause.PROCESS_LIMIT, "its limit of 64 processes"),
     K.RESOURCE_LIMIT, False, "64 processes"),
    ("localcli-28-ratelimit429-recovered.jsonl", ended(EndCause.OUTPUT_LIMIT, "phase_output_max_bytes"),
     K.RESOURCE_LIMIT, False, "phase_output_max_bytes"),
    ("cli-resume-crash-attempt1.jsonl", ended(EndCause.LINE_LIMIT, "max_line_bytes"), K.RESOURCE_LIMIT, False,
     "max_line_bytes"),
]


@pytest.mark.parametrize(
    ("fixture", "process", "kind", "retryable", "words"),
    TABLE,
    ids=[f"{row[0].removesuffix('.jsonl')}-{row[2].name}" for row in TABLE],
)
def test_classification_of_real_cli_output(fixture, process, kind, retryable, words):
    verdict = classify_attempt(attempt(fixture, process))
    assert (verdict.kind, verdict.retryable) == (kind, retryable), verdict.reason
    assert words in verdict.reason
    assert verdict.retryable == (kind in TRANSIENT_KINDS)


def test_every_kind_but_unspecified_has_a_row_or_a_synthetic_test():
    covered = {row[2] for row in TABLE} | {
        K.STARTUP_TRANSIENT,  # test_startup_failures_the_cli_says_may_pass
        K.STRUCTURED_OUTPUT,  # test_error_subtypes
        K.INTERRUPTED_BY_CLIENT,  # test_a_persons_interrupt
        K.MOVED,  # not classified: the run ends a handed-over attempt so (tests/api/test_handover_postgres.py)
        K.REWOUND,  # not classified: the run ends a rewound attempt so (tests/api/test_rewind_phase.py)
    }
    assert covered == set(K) - {K.UNSPECIFIED}


def test_only_a_rate_limit_holds_the_credential():
    for fixture, process, kind, _, _ in TABLE:
        verdict = classify_attempt(attempt(fixture, process))
        assert verdict.hold_credential == (kind is K.API_RATE_LIMITED)


def test_a_persons_interrupt_is_not_retried_but_a_later_turn_clears_it():
    fixture = "localcli-16-ctl-permissions.jsonl"
    interrupt = ControlEvent(ControlEventKind.INTERRUPTED)
    last = index_of_last_result(fixture)
    verdict = classify_attempt(attempt(fixture, exited(1), inject={last: interrupt}))
    assert (verdict.kind, verdict.retryable) == (K.INTERRUPTED_BY_CLIENT, False)
    # Interrupted during the first turn, yet two more turns finished: the interrupt did not end it.
    verdict = classify_attempt(attempt(fixture, exited(1), inject={1: interrupt}))
    assert verdict.kind is K.EXECUTION_ERROR
    # Interrupted and then the output stopped before any result: still the person's doing.
    crash = (FIXTURES / "cli-resume-crash-attempt1.jsonl").read_bytes()
    verdict = classify_attempt(attempt(crash, CRASHED, inject={1: interrupt}))
    assert verdict.kind is K.INTERRUPTED_BY_CLIENT


def _with_result_fields(fixture: str, **fields: object) -> bytes:
    """The fixture with its result line changed (for what the scripted API cannot make the CLI write)."""
    out = []
    for line in (FIXTURES / fixture).read_bytes().splitlines():
        obj = orjson.loads(line)
        if obj.get("type") == "result":
            obj.update(fields)
        out.append(orjson.dumps(obj))
    return b"\n".join(out) + b"\n"


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        ("org_config_required_unavailable", K.STARTUP_TRANSIENT),
        ("worktree_unverified", K.STARTUP_TRANSIENT),
        ("org_config_refused", K.STARTUP_REFUSED),
        ("bypass_root", K.STARTUP_REFUSED),
        # CLI 2.1.336+: --resume of a session it cannot find (2.1.332 wrote no reason); a retry meets
        # the same (the server refuses an unknown session before any attempt: FAILED_PRECONDITION).
        ("resume_target_not_found", K.STARTUP_REFUSED),
        ("a_reason_from_a_later_cli", K.STARTUP_REFUSED),
    ],
)
def test_startup_failures_the_cli_says_may_pass(reason, kind):
    lines = _with_result_fields("cli-startup-config-invalid.jsonl", startup_failure_reason=reason)
    verdict = classify_attempt(attempt(lines, exited(1)))
    assert verdict.kind is kind and reason in verdict.reason


def test_error_subtypes():
    lines = _with_result_fields(
        "localcli-06-maxturns.jsonl", subtype="error_max_structured_output_retries", terminal_reason=""
    )
    assert classify_attempt(attempt(lines, exited(1))).kind is K.STRUCTURED_OUTPUT
    lines = _with_result_fields("localcli-06-maxturns.jsonl", subtype="error_something_new")
    verdict = classify_attempt(attempt(lines, exited(1)))
    assert (verdict.kind, verdict.retryable) == (K.EXECUTION_ERROR, False)


def test_a_rejected_rate_limit_event_sets_when_to_retry():
    rejected = orjson.dumps(
        {
            "type": "rate_limit_event",
            "rate_limit_info": {"status": "rejected", "resetsAt": 1795306531, "rateLimitType": "five_hour"},
            "session_id": "s",
            "uuid": "u",
        }
    )
    base = (FIXTURES / "cli-ratelimit429.jsonl").read_bytes()
    verdict = classify_attempt(attempt(rejected + b"\n" + base, exited(1)))
    assert (verdict.kind, verdict.retryable, verdict.hold_credential) == (K.API_RATE_LIMITED, True, True)
    assert verdict.retry_not_before_s == 1795306531.0
    assert verdict.reason.endswith("until its reset at 2026-11-22T00:15:31Z")
    allowed = rejected.replace(b'"rejected"', b'"allowed"')
    verdict = classify_attempt(attempt(rejected + b"\n" + allowed + b"\n" + base, exited(1)))
    assert verdict.retry_not_before_s is None and verdict.hold_credential


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (529, K.API_OVERLOADED),
        (429, K.API_RATE_LIMITED),
        (500, K.API_SERVER_ERROR),
        (502, K.API_SERVER_ERROR),
        (503, K.API_SERVER_ERROR),
        (408, K.API_SERVER_ERROR),
        (409, K.API_SERVER_ERROR),
        (400, K.API_INVALID_REQUEST),
        (404, K.API_INVALID_REQUEST),
        (422, K.API_INVALID_REQUEST),
        (401, K.API_AUTHENTICATION),
        (403, K.API_PERMISSION),
        (413, K.API_REQUEST_TOO_LARGE),
    ],
)
def test_http_status_table(status, kind):
    facts = AttemptFacts(
        PhaseStatus.FAILED,
        EndCause.EXITED,
        result_subtype="success",
        is_error=True,
        api_error_status=status,
        terminal_reason="api_error",
    )
    verdict = classify_attempt(facts)
    assert verdict.kind is kind and f"HTTP {status}" in verdict.reason
    # Killed while the CLI was still retrying that status: the same verdict, for the same reason.
    crashed = AttemptFacts(
        PhaseStatus.INCOMPLETE, EndCause.EXITED, retrying_status=status, retrying_error="x"
    )
    expected = kind if kind not in TRANSIENT_KINDS else K.CRASHED
    assert classify_attempt(crashed).kind is expected


@pytest.mark.parametrize(
    ("api_error", "kind"),
    [
        ("rate_limit", K.API_RATE_LIMITED),
        ("overloaded", K.API_OVERLOADED),
        ("authentication_failed", K.API_AUTHENTICATION),
        ("billing_error", K.API_PERMISSION),
        ("invalid_request", K.API_INVALID_REQUEST),
        ("server_error", K.CONNECTION_FAILED),  # what a refused connection writes (cli-connection-refused)
        ("unknown", K.CONNECTION_FAILED),
    ],
)
def test_api_errors_without_an_http_status(api_error, kind):
    facts = AttemptFacts(
        PhaseStatus.FAILED,
        EndCause.EXITED,
        result_subtype="success",
        is_error=True,
        terminal_reason="api_error",
        api_error=api_error,
    )
    assert classify_attempt(facts).kind is kind


def test_a_success_that_failed_for_another_reason_is_not_retried():
    # decide_outcome: a successful result but the CLI exited 1, or had to be killed after EOF.
    for process in (exited(1), ended(EndCause.NO_EXIT_AFTER_EOF, "5 s after EOF")):
        lines = (FIXTURES / "localcli-28-ratelimit429-recovered.jsonl").read_bytes()
        facts = attempt(lines, process)
        assert facts.status is PhaseStatus.FAILED
        verdict = classify_attempt(facts)
        assert (verdict.kind, verdict.retryable) == (K.EXECUTION_ERROR, False)


def test_cancel_outranks_a_transient_api_error():
    facts = attempt("localcli-12-overloaded.jsonl", exited(1))
    assert classify_attempt(facts).retryable
    assert classify_attempt(replace(facts, cause=EndCause.CANCELLED)).kind is K.CANCELLED
