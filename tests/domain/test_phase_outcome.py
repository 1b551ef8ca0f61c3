"""The final status is decided from facts only: result, exit code, how supervision ended."""

from __future__ import annotations

import pytest

from helix_runner.domain.events import SessionWritesLost
from helix_runner.domain.phase_outcome import EndCause, LastResult, ProcessExit, ResourceFault, decide_outcome
from helix_runner.domain.phase_status import PhaseStatus

OK = LastResult(subtype="success", is_error=False, terminal_reason="completed")


def exit_(cause=EndCause.EXITED, code=0, sig=None, detail=""):
    return ProcessExit(cause=cause, exit_code=code, exit_signal=sig, stdout_eof=True, detail=detail)


def test_success_needs_success_result_and_exit_zero():
    assert decide_outcome(exit_(), OK).status is PhaseStatus.SUCCEEDED


def test_success_subtype_with_is_error_is_a_failure():
    api_error = LastResult(subtype="success", is_error=True, api_error_status=400, terminal_reason="prompt_too_long",
                           result_text="API Error: 400 bad request")
    out = decide_outcome(exit_(code=1), api_error)
    assert out.status is PhaseStatus.FAILED
    assert "API error 400" in out.reason and "prompt_too_long" in out.reason and "code 1" in out.reason


@pytest.mark.parametrize(
    ("status", "text"),
    [
        (None, "Not logged in · Please run /login"),  # the real CLI 2.1.x without any credentials
        (None, "Invalid API key · Please run /login"),
        (401, "Failed to authenticate. API Error: 401 invalid x-api-key"),
    ],
)
def test_missing_credentials_say_what_the_operator_should_set(status, text):
    res = LastResult(subtype="success", is_error=True, api_error_status=status, terminal_reason="api_error",
                     result_text=text)
    out = decide_outcome(exit_(code=1), res)
    assert out.status is PhaseStatus.FAILED
    assert text in out.reason and "ANTHROPIC_API_KEY" in out.reason and "--offline-script" in out.reason


def test_other_api_errors_get_no_credentials_hint():
    res = LastResult(subtype="success", is_error=True, api_error_status=529, terminal_reason="api_error",
                     result_text="API Error: 529 Overloaded")
    assert "ANTHROPIC_API_KEY" not in decide_outcome(exit_(code=1), res).reason


def test_error_subtype_carries_errors():
    res = LastResult(subtype="error_max_turns", is_error=True, terminal_reason="max_turns",
                     errors=("Reached maximum number of turns (2)",))
    out = decide_outcome(exit_(code=1), res)
    assert out.status is PhaseStatus.FAILED
    assert "error_max_turns" in out.reason and "maximum number of turns" in out.reason


def test_success_result_but_nonzero_exit_is_a_failure():
    out = decide_outcome(exit_(code=2), OK)
    assert out.status is PhaseStatus.FAILED and "code 2" in out.reason


def test_no_result_is_incomplete_whatever_the_exit_code():
    for code, sig in ((0, None), (1, None), (None, "SIGKILL")):
        out = decide_outcome(exit_(code=code, sig=sig), None)
        assert out.status is PhaseStatus.INCOMPLETE, (code, sig)
        assert "without a final result" in out.reason


def test_success_result_then_no_exit_is_not_success():
    out = decide_outcome(exit_(EndCause.NO_EXIT_AFTER_EOF, code=None, sig="SIGKILL", detail="did not exit"), OK)
    assert out.status is PhaseStatus.FAILED and "did not exit" in out.reason


def test_leftover_background_process_does_not_spoil_a_clean_cli_exit():
    out = decide_outcome(exit_(EndCause.PIPES_HELD_AFTER_EXIT, detail="a leftover child held stdout"), OK)
    assert out.status is PhaseStatus.SUCCEEDED and "leftover" in out.reason


@pytest.mark.parametrize(
    ("cause", "status"),
    [
        (EndCause.TIMEOUT, PhaseStatus.TIMED_OUT),
        (EndCause.IDLE_TIMEOUT, PhaseStatus.TIMED_OUT),
        (EndCause.CANCELLED, PhaseStatus.CANCELLED),
        (EndCause.INTERRUPTED, PhaseStatus.INTERRUPTED),
        (EndCause.SPAWN_FAILED, PhaseStatus.FAILED),
    ],
)
def test_supervision_causes_win_over_a_successful_result(cause, status):
    assert decide_outcome(exit_(cause, code=None, sig="SIGKILL"), OK).status is status


def test_final_statuses():
    assert PhaseStatus.SUCCEEDED.is_final and PhaseStatus.INTERRUPTED.is_final
    assert not PhaseStatus.RUNNING.is_final and not PhaseStatus.PAUSED.is_final


def test_an_oom_kill_fails_the_phase_whatever_the_cli_reported():
    oom = exit_(EndCause.OUT_OF_MEMORY, code=None, sig="SIGKILL", detail="the OOM killer killed 1 process(es)")
    for last in (OK, None):
        out = decide_outcome(oom, last)
        assert (out.status, out.fault) == (PhaseStatus.FAILED, ResourceFault.OUT_OF_MEMORY)
        assert out.reason == "out of memory: the OOM killer killed 1 process(es)"
    lost = SessionWritesLost("ENOSPC", ("transcript",))
    assert decide_outcome(oom, OK, writes_lost=lost).fault is ResourceFault.OUT_OF_MEMORY


def test_a_session_the_cli_could_not_save_fails_an_otherwise_successful_phase():
    out = decide_outcome(exit_(), OK, writes_lost=SessionWritesLost("ENOSPC", ("transcript", "global_config")))
    assert (out.status, out.fault) == (PhaseStatus.FAILED, ResourceFault.DISK_FULL)
    assert out.reason.startswith("the disk is full (ENOSPC): the CLI finished but could not save transcript and "
                                 "global config")
    quota = decide_outcome(exit_(), OK, writes_lost=SessionWritesLost("EDQUOT", ("transcript",)))
    assert "disk quota is used up (EDQUOT)" in quota.reason
    # A phase that failed anyway keeps its own reason; the fault is still reported.
    cancelled = decide_outcome(exit_(EndCause.CANCELLED, detail="stop"), OK, writes_lost=SessionWritesLost("ENOSPC"))
    assert (cancelled.status, cancelled.reason, cancelled.fault) == (PhaseStatus.CANCELLED, "stop",
                                                                     ResourceFault.DISK_FULL)


def test_structured_output_asked_for_but_never_produced_fails_the_phase():
    asked = LastResult(subtype="success", is_error=False, terminal_reason="completed", structured_output_expected=True)
    out = decide_outcome(exit_(), asked)
    assert out.status is PhaseStatus.FAILED and "never called the StructuredOutput tool" in out.reason
    produced = LastResult(subtype="success", is_error=False, structured_output_expected=True,
                          has_structured_output=True)
    assert decide_outcome(exit_(), produced).status is PhaseStatus.SUCCEEDED
    assert decide_outcome(exit_(), OK).status is PhaseStatus.SUCCEEDED  # not asked: no object needed


def test_structured_output_retries_exhausted_says_so():
    gave_up = LastResult(subtype="error_max_structured_output_retries", is_error=True,
                         terminal_reason="structured_output_retry_exhausted",
                         errors=("Failed to provide valid structured output after 5 attempts",))
    out = decide_outcome(exit_(code=1), gave_up)
    assert out.status is PhaseStatus.FAILED
    assert out.reason.startswith("structured output failed: no object matching options.json_schema")
    assert "after 5 attempts" in out.reason


@pytest.mark.parametrize(("cause", "fault"), [(EndCause.PROCESS_LIMIT, ResourceFault.PROCESS_LIMIT),
                                              (EndCause.OUTPUT_LIMIT, ResourceFault.OUTPUT_LIMIT),
                                              (EndCause.LINE_LIMIT, ResourceFault.LINE_LIMIT)])
def test_a_limit_the_server_stopped_the_phase_at_fails_it_with_that_fault(cause, fault):
    ok = LastResult("success", False)
    stopped = ProcessExit(cause, None, "SIGKILL", True, "the phase reached its limit of 64 processes (pids_limit)")
    outcome = decide_outcome(stopped, ok, writes_lost=SessionWritesLost("ENOSPC", ("transcript",)))
    assert (outcome.status, outcome.fault) == (PhaseStatus.FAILED, fault)  # the limit, not the disk, is the cause
    assert outcome.reason == stopped.detail
