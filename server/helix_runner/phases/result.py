"""A phase's result from what its run gathered: pure functions, nothing read from outside, nothing changed.

``final_outcome`` says how the phase ended: as its last attempt did (with why no retry followed),
or, when it was stopped before an attempt ended (while queued, during a backoff, or its task
cancelled), as the stop decides. ``build_result`` assembles the ``PhaseResult`` the store and every
watcher get from that outcome, the stream's figures, the attempts and the run's diagnostics.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from helix_runner.domain.artifacts import PhaseArtifacts
from helix_runner.domain.events import SessionWritesLost, TurnResult
from helix_runner.domain.phase_outcome import Outcome, ProcessExit, decide_outcome
from helix_runner.domain.phase_result import Attempt, PhaseDiagnostics, PhaseResult
from helix_runner.domain.phase_stream import PhaseStream
from helix_runner.phases.attempts import AttemptEnd, final_reason


def final_outcome(end: AttemptEnd | None, exit_: ProcessExit, writes_lost: SessionWritesLost | None, *,
                  ended_attempts: int, waiting: bool) -> Outcome:
    """The phase's status, reason and resource fault; ``end`` is its last attempt's (None: stopped before
    one ended), ``waiting``: it was waiting to start an attempt (QUEUED) when it was stopped."""
    if end is not None:
        return Outcome(end.attempt.status, final_reason(end), end.outcome.fault)
    outcome = decide_outcome(exit_, None, 0, writes_lost)
    if ended_attempts and waiting:
        return replace(outcome, reason=f"{outcome.reason} (while waiting to start attempt {ended_attempts + 1})")
    return outcome


def build_result(*, job_id: str, phase_id: str, outcome: Outcome, last: TurnResult | None, exit_: ProcessExit,
                 stream: PhaseStream, attempts: Sequence[Attempt], accepted_ns: int, auth_source: str,
                 where: PhaseDiagnostics, artifacts: PhaseArtifacts | None) -> PhaseResult:
    """The phase's result. ``last``: the turn result it reports (None: none, or the phase was stopped
    before its attempt ended); ``where``: the run's own diagnostics (argv, binary, recording,
    containment, gateway, sandbox), completed here with the process's and the stream's figures."""
    tools = stream.tools
    return PhaseResult(
        job_id=job_id,
        phase_id=phase_id,
        status=outcome.status,
        reason=outcome.reason,
        result_subtype=last.subtype if last else "",
        is_error=last.is_error if last else False,
        api_error_status=last.api_error_status if last else None,
        terminal_reason=last.terminal_reason if last else "",
        num_turns=last.num_turns if last else 0,
        result_text=last.result_text if last else "",
        structured_output=last.structured_output if last else "",
        structured_output_truncated=last.structured_output_truncated if last else False,
        errors=last.errors if last else (),
        exit_code=exit_.exit_code,
        exit_signal=exit_.exit_signal,
        result_count=len(stream.results),
        session_id=stream.session_id or "",
        auth_source=auth_source,
        cost=stream.cost,
        tool_stats=tuple(tools.stats()),
        permission_denials=last.permission_denials if last else (),
        start_time_ns=attempts[0].start_time_ns if attempts else exit_.start_ns,
        queue_wait_ns=max(attempts[0].start_time_ns - accepted_ns, 0)
        if attempts and attempts[0].start_time_ns is not None else None,
        end_time_ns=exit_.end_ns,
        last_sequence=stream.last_sequence,
        diagnostics=replace(
            where,
            stderr_tail=exit_.stderr_tail,
            stderr_bytes=exit_.stderr_bytes,
            parse_error_count=stream.parse_error_count,
            unfinished_tool_calls=tools.unfinished_count,
            stdout_bytes=stream.stdout_bytes,
        ),
        attempts=tuple(attempts),
        resource_fault=outcome.fault,
        artifacts=artifacts,
    )
