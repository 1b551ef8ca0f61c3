"""How a phase's result is decided and built (``phases/result.py``): pure functions, no run needed."""

from __future__ import annotations

from support.cli_lines import init, tool_use

from helix_runner.domain.attempt_classification import AttemptVerdict
from helix_runner.domain.events import AttemptEndKind
from helix_runner.domain.phase_outcome import EndCause, Outcome, ProcessExit, ResourceFault
from helix_runner.domain.phase_result import Attempt, PhaseDiagnostics
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.phase_stream import PhaseStream, PhaseStreamOptions
from helix_runner.domain.retry_policy import RetryDecision
from helix_runner.phases.attempts import AttemptEnd
from helix_runner.phases.result import build_result, final_outcome

STOPPED = ProcessExit(EndCause.CANCELLED, None, None, False, "cancelled by a client", 10, 20)


def ended(status: PhaseStatus, reason: str, *, retryable: bool, retried: bool, fault=None) -> AttemptEnd:
    return AttemptEnd(Attempt(1, status, reason, start_time_ns=1_000, end_time_ns=2_000),
                      AttemptVerdict(AttemptEndKind.CRASHED, retryable, "it crashed"),
                      RetryDecision(retried, "all 1 attempts are used up"), Outcome(status, reason, fault))


def test_the_phase_ends_as_its_last_attempt_did_saying_why_no_retry_followed():
    end = ended(PhaseStatus.FAILED, "the process was killed (SIGKILL)", retryable=True, retried=False,
                fault=ResourceFault.OUT_OF_MEMORY)
    assert final_outcome(end, STOPPED, None, ended_attempts=1, waiting=False) == Outcome(
        PhaseStatus.FAILED, "the process was killed (SIGKILL) (all 1 attempts are used up)", ResourceFault.OUT_OF_MEMORY)
    permanent = ended(PhaseStatus.FAILED, "bad request", retryable=False, retried=False)
    assert final_outcome(permanent, STOPPED, None, ended_attempts=1, waiting=False).reason == "bad request"


def test_a_phase_stopped_before_an_attempt_ended_says_what_it_waited_for():
    during_backoff = final_outcome(None, STOPPED, None, ended_attempts=2, waiting=True)
    assert during_backoff.status is PhaseStatus.CANCELLED
    assert during_backoff.reason.endswith("(while waiting to start attempt 3)")
    before_any = final_outcome(None, STOPPED, None, ended_attempts=0, waiting=True)
    assert before_any.status is PhaseStatus.CANCELLED and "while waiting" not in before_any.reason


def test_the_result_completes_the_runs_diagnostics_with_the_process_and_the_streams_figures():
    stream = PhaseStream(PhaseStreamOptions())
    stream.feed(init() + tool_use("t1", message_id="m1") + b"not json\n")
    exit_ = ProcessExit(EndCause.EXITED, 0, None, True, "", 5_000, 9_000, stderr_bytes=3, stderr_tail="err")
    where = PhaseDiagnostics(argv=("claude", "-p"), claude_path="/bin/claude (PATH)", recording_path="/rec")
    attempts = [Attempt(1, PhaseStatus.FAILED, start_time_ns=4_000, end_time_ns=4_500),
                Attempt(2, PhaseStatus.SUCCEEDED, start_time_ns=5_000, end_time_ns=9_000)]
    result = build_result(job_id="j", phase_id="p", outcome=Outcome(PhaseStatus.SUCCEEDED, "done"), last=None,
                          exit_=exit_, stream=stream, attempts=attempts, accepted_ns=1_000, auth_source="none",
                          where=where, artifacts=None)
    d = result.diagnostics
    assert (d.argv, d.claude_path, d.recording_path) == (where.argv, where.claude_path, where.recording_path)
    assert (d.stderr_tail, d.stderr_bytes, d.parse_error_count, d.unfinished_tool_calls) == ("err", 3, 1, 1)
    assert d.stdout_bytes == stream.stdout_bytes > 0
    # The phase started with its first CLI; it waited in the queue from its acceptance until then.
    assert (result.start_time_ns, result.queue_wait_ns, result.end_time_ns) == (4_000, 3_000, 9_000)
    assert (result.status, result.reason, result.result_subtype, result.num_turns) == (
        PhaseStatus.SUCCEEDED, "done", "", 0)
    assert result.last_sequence == stream.last_sequence and len(result.attempts) == 2
    assert [(s.name, s.count, s.unfinished) for s in result.tool_stats] == [("Bash", 1, 1)]
