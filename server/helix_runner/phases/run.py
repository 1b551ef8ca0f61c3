"""Runs one phase: the CLI process, its stream of events, and their persistence, to an honest end.

Data flows one way: process bytes -> ``PhaseStream`` (typed, sequenced events, tool tracking,
costs) -> store and subscribers (``PhaseEventLog``). The final result is published only after
stdout reached EOF (or was abandoned after the group was killed), the process exited, and every
event was persisted and offered to subscribers (ADR-0010, docs/decisions/ADR-0010.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from helix_runner.domain.artifacts import PhaseArtifacts
from helix_runner.domain.breakpoints import Breakpoint
from helix_runner.domain.events import (
    AssistantText,
    CostUpdate,
    Event,
    Payload,
    PhaseStatusChanged,
    SessionInit,
    SessionWritesLost,
    StderrOutput,
    Thinking,
    ToolCallFinished,
    ToolCallStarted,
    TurnResult,
    UserMessage,
)
from helix_runner.domain.phase_outcome import EndCause, LastResult, ProcessExit, decide_outcome
from helix_runner.domain.phase_result import PhaseDiagnostics, PhaseResult
from helix_runner.domain.phase_spec import PhaseSpec
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.phase_stream import PhaseStream, PhaseStreamOptions
from helix_runner.domain.pricing import PriceTable
from helix_runner.domain.tool_tracker import ToolCall
from helix_runner.phases.control import PhaseController
from helix_runner.phases.event_log import PhaseEventLog
from helix_runner.phases.fanout import Fanout
from helix_runner.phases.ports import RecordEncoder
from helix_runner.phases.views import HeldCall, RunSnapshot
from helix_runner.process.containment import PhaseScope
from helix_runner.process.control_protocol import ContextUsage, context_usage
from helix_runner.process.git_worktree import PhaseWorkspace
from helix_runner.process.key_broker import KeyBroker
from helix_runner.process.procfs import start_ticks
from helix_runner.process.supervisor import ProcessLimits, ProcessSupervisor
from helix_runner.store.protocol import EventRow, ModelCostRow, Store, ToolCallRow
from helix_runner.telemetry import PhaseTelemetry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LaunchPlan:
    """Everything decided before the process starts."""

    argv: tuple[str, ...]
    cwd: Path
    env: dict[str, str]
    prompt_line: bytes
    limits: ProcessLimits
    claude_path: str
    recording_dir: Path
    stream_options: PhaseStreamOptions
    # The phase's containment (cgroup or shim) with its limits; stateful, used by one run.
    scope: PhaseScope
    # Key-helper mode: the broker that hands this phase's CLI session the API key.
    key_broker: KeyBroker | None = None
    # Where the phase runs and how its changes are collected (runner.git_worktree).
    workspace: PhaseWorkspace | None = None


class PhaseRun:
    """One phase in flight; ``run()`` drives it to its final result.

    It is the controller's host (``phases.ports.PhaseHost``): the controller reaches the process,
    the stream and the status only through the members listed there.
    """

    def __init__(self, spec: PhaseSpec, plan: LaunchPlan, store: Store, codec: RecordEncoder,
                 events: PhaseEventLog, breakpoints: list[Breakpoint] = (), prices: PriceTable | None = None,
                 telemetry: PhaseTelemetry | None = None):
        self.spec = spec
        # telemetry: metrics and spans of this phase, fed from its events (helix_runner.telemetry).
        self.telemetry = telemetry or PhaseTelemetry(None, None, job_id=spec.job_id, phase_id=spec.phase_id,
                                                     project_id=spec.project_id)
        self.plan = plan
        self.store = store
        self.codec = codec
        self.events = events
        self.stream = PhaseStream(plan.stream_options, price_table=prices)
        self.status = PhaseStatus.PENDING
        self.result: PhaseResult | None = None
        self.supervisor = ProcessSupervisor(
            plan.argv, cwd=plan.cwd, env=plan.env, sink=self, limits=plan.limits, keep_stdin_open=True,
            on_spawn=self._record_pid, scope=plan.scope,
        )
        self.control = PhaseController(self, list(breakpoints))
        self.supervisor.set_stdin_lines(self.control.startup_lines(plan.prompt_line))
        self._message_ids: set[str] = set()
        self.user_messages = 0
        # Every batch of events, in this order: persisted and offered to subscribers first
        # (phases.event_log), the controller last, so what it emits follows the batch it observed.
        self._fanout = Fanout([
            self._persist_and_offer,
            self.telemetry.on_events,  # telemetry
            self._note_stream_facts,
            self._write_tool_rows,
            self._write_cost_rows,
            self.control.on_events,
        ])
        plan.recording_dir.mkdir(parents=True, exist_ok=True)
        self._stdout_file = open(plan.recording_dir / "stdout.jsonl", "ab")
        self._stderr_file = open(plan.recording_dir / "stderr.log", "ab")
        self._session_id = ""
        self._model = ""
        self._cost_dirty = False
        self._revoke_key = lambda: None
        self._writes_lost: SessionWritesLost | None = None
        self._artifacts: PhaseArtifacts | None = None

    @property
    def job_id(self) -> str:
        return self.spec.job_id

    @property
    def phase_id(self) -> str:
        return self.spec.phase_id

    def request_stop_with_reason(self, cause: EndCause, reason: str) -> None:
        """Ends the phase now (cancel, drain); the result's reason says why."""
        self.supervisor.request_stop(cause, reason)

    @property
    def assistant_turns(self) -> int:
        """Assistant messages (distinct API message ids) seen so far; turn-count breakpoints use it."""
        return len(self._message_ids)

    # -- PhaseHost: what the controller may use ------------------------------------------------

    @property
    def ended(self) -> bool:
        return self.result is not None

    @property
    def process_started(self) -> bool:
        return self.supervisor.pid is not None

    @property
    def cost_usd(self) -> float:
        cost = self.stream.cost
        return cost.reported_usd if cost.reported_usd is not None else cost.computed_usd

    async def write_stdin(self, line: bytes) -> bool:
        return await self.supervisor.write_stdin(line)

    async def close_stdin(self) -> None:
        await self.supervisor.close_stdin()

    def hold_watchdog(self, held: bool) -> None:
        self.supervisor.hold_watchdog(held)

    async def pause_processes(self) -> None:
        await self.supervisor.stop_processes()

    async def resume_processes(self) -> None:
        await self.supervisor.continue_processes()

    def mark_tool_held(self, tool_use_id: str, breakpoint_id: str) -> None:
        self.stream.tools.mark_held(tool_use_id, breakpoint_id)

    def mark_tool_running(self, tool_use_id: str) -> None:
        self.stream.tools.mark_running(tool_use_id)

    def emit(self, payload: Payload) -> Event | None:
        """Publishes a service event (a control action) into the phase's stream."""
        if self.result is not None or self.stream.finished:
            return None
        event = self.stream.emit(payload)
        self._publish([event])
        return event

    # -- ProcessSink -----------------------------------------------------------------------

    def on_stdout(self, chunk: bytes) -> None:
        self._stdout_file.write(chunk)
        self._publish(self.stream.feed(chunk))

    def on_stderr_line(self, line: bytes, truncated: bool) -> None:
        self._stderr_file.write(line + b"\n")
        text = StderrOutput.from_bytes(line)
        self._publish([self.stream.emit(StderrOutput(text.text, text.truncated or truncated))])

    # -- the run ---------------------------------------------------------------------------

    async def run(self) -> PhaseResult:
        start_ns = time.time_ns()
        self.telemetry.on_start(start_ns)  # telemetry: attempt span; then the CLI joins its trace
        self.supervisor.env.update(self.telemetry.child_env(self.supervisor.env))
        try:
            self.set_status(PhaseStatus.RUNNING, "the claude process is starting", start_time_ns=start_ns)
            exit_ = await self.supervisor.run()
        except asyncio.CancelledError:
            exit_ = ProcessExit(EndCause.INTERRUPTED, None, None, False, "the server task was cancelled",
                                start_ns, time.time_ns())
            self.result = self._finish(exit_)
            raise
        except Exception as exc:
            log.exception("phase supervision failed", extra={"fields": self._log_fields()})
            exit_ = ProcessExit(EndCause.SPAWN_FAILED, None, None, False, f"internal error: {exc}", start_ns,
                                time.time_ns())
        if self.plan.workspace is not None:  # the process group is gone: the tree is final
            self._artifacts = await self.plan.workspace.collect()
        self.result = self._finish(exit_)
        return self.result

    def _finish(self, exit_: ProcessExit) -> PhaseResult:
        self._revoke_key()
        self.control.close("the phase ended")
        self._publish(self.stream.finish())
        last = self.stream.results[-1] if self.stream.results else None
        outcome = decide_outcome(exit_, _last_result(last), len(self.stream.results), self._writes_lost)
        self._stdout_file.close()
        self._stderr_file.close()
        tools = self.stream.tools
        cost = self.stream.cost
        self._persist_tools(tools.calls)
        self._persist_cost(force=True)
        self.set_status(outcome.status, outcome.reason, end_time_ns=exit_.end_ns)
        result = PhaseResult(
            job_id=self.job_id,
            phase_id=self.phase_id,
            status=outcome.status,
            reason=outcome.reason,
            result_subtype=last.subtype if last else "",
            is_error=last.is_error if last else False,
            api_error_status=last.api_error_status if last else None,
            terminal_reason=last.terminal_reason if last else "",
            num_turns=last.num_turns if last else 0,
            result_text=last.result_text if last else "",
            errors=last.errors if last else (),
            exit_code=exit_.exit_code,
            exit_signal=exit_.exit_signal,
            result_count=len(self.stream.results),
            session_id=self.stream.session_id or "",
            cost=cost,
            tool_stats=tuple(tools.stats()),
            permission_denials=last.permission_denials if last else (),
            start_time_ns=exit_.start_ns,
            end_time_ns=exit_.end_ns,
            last_sequence=self.stream.last_sequence,
            diagnostics=PhaseDiagnostics(
                stderr_tail=exit_.stderr_tail,
                stderr_bytes=exit_.stderr_bytes,
                parse_error_count=self.stream.parse_error_count,
                unfinished_tool_calls=tools.unfinished_count,
                stdout_bytes=self.stream.stdout_bytes,
                argv=tuple(self.plan.argv),
                claude_path=self.plan.claude_path,
                recording_path=str(self.plan.recording_dir),
                containment=self.plan.scope.report(),
            ),
            resource_fault=outcome.fault,
            artifacts=self.plan.workspace.with_retention(self._artifacts, outcome.status) if self._artifacts else None,
        )
        self.telemetry.on_end(result)  # telemetry
        encoded = self.codec.encode_result(result)
        self.store.update_phase(
            self.job_id, self.phase_id, time.time_ns(),
            result_pb=encoded, tool_stats_pb=self.codec.encode_tool_stats(list(result.tool_stats)),
        )
        self.events.close(encoded)
        log.info("phase ended", extra={"fields": {**self._log_fields(), "status": outcome.status.name,
                                                  "reason": outcome.reason}})
        return result

    def _record_pid(self, pid: int) -> None:
        # The phase shim's pid: lets a restarted server find and end what it leaves (runner.containment).
        self.store.update_phase(self.job_id, self.phase_id, time.time_ns(), pid=pid, pid_start_ticks=start_ticks(pid))
        if self.plan.key_broker is not None:
            # Before the event loop runs again, so before the CLI's first key request can be answered.
            self._revoke_key = self.plan.key_broker.admit(pid, self.job_id, self.phase_id)

    # -- helpers ---------------------------------------------------------------------------

    def set_status(self, status: PhaseStatus, reason: str, **columns: object) -> None:
        """Records a status transition (store and event stream)."""
        previous, self.status = self.status, status
        self.store.update_phase(self.job_id, self.phase_id, time.time_ns(), status=status,
                                status_reason=reason, **columns)
        self._publish([self.stream.emit(PhaseStatusChanged(previous, status, reason))])

    def _publish(self, events: list[Event]) -> None:
        """Fans a batch out to the run's observers (a batch emitted meanwhile waits its turn)."""
        self._fanout.publish(events)

    def _persist_and_offer(self, events: list[Event]) -> None:
        codec, job, phase = self.codec, self.job_id, self.phase_id
        self.events.publish([EventRow(e.sequence, e.receive_time_ns, codec.event_kind(e),
                                      codec.encode_event(job, phase, e)) for e in events])

    def _note_stream_facts(self, events: list[Event]) -> None:
        """Message counts, the session and model (written to the phase row when they change), lost writes."""
        for e in events:
            p = e.payload
            if isinstance(p, AssistantText | Thinking | ToolCallStarted) and p.message_id:
                self._message_ids.add(p.message_id)
            elif isinstance(p, UserMessage | ToolCallFinished):
                self.user_messages += 1
            if isinstance(p, SessionInit):
                self._note_session(e.session_id, p.model)
            elif isinstance(p, SessionWritesLost):
                self._writes_lost = p

    def _write_tool_rows(self, events: list[Event]) -> None:
        """Upserts the tool calls the batch started or finished."""
        touched = {p.tool_use_id: None for p in (e.payload for e in events)
                   if isinstance(p, ToolCallStarted | ToolCallFinished)}
        if touched:
            calls = [c for c in (self.stream.tools.get(t) for t in touched) if c is not None]
            self._persist_tools(calls)

    def _write_cost_rows(self, events: list[Event]) -> None:
        """Rewrites the phase's cost columns and model-cost rows after a cost update or a turn result."""
        if any(isinstance(e.payload, CostUpdate | TurnResult) for e in events):
            self._cost_dirty = True
        if self._cost_dirty:
            self._persist_cost()

    def _note_session(self, session_id: str, model: str) -> None:
        if session_id != self._session_id or model != self._model:
            self._session_id, self._model = session_id, model
            self.store.update_phase(self.job_id, self.phase_id, time.time_ns(), session_id=session_id, model=model)

    def _persist_tools(self, calls) -> None:
        codec, job, phase = self.codec, self.job_id, self.phase_id
        self.store.upsert_tool_calls(job, phase, [
            ToolCallRow(c.tool_use_id, c.name, c.status, c.start_sequence, codec.encode_tool_call(job, phase, c),
                        duration_ns=None if c.end_time_ns is None else max(c.end_time_ns - c.start_time_ns, 0))
            for c in calls
        ])

    def _persist_cost(self, force: bool = False) -> None:
        if not (self._cost_dirty or force):
            return
        self._cost_dirty = False
        cost = self.stream.cost
        self.store.update_phase(
            self.job_id, self.phase_id, time.time_ns(), cost_pb=self.codec.encode_cost(cost),
            reported_usd=cost.reported_usd, computed_usd=cost.computed_usd, computed_only=int(cost.computed_only),
        )
        self.store.replace_model_costs(self.job_id, self.phase_id, self.spec.project_id, [
            ModelCostRow(m.model, m.tokens.input_tokens, m.tokens.output_tokens, m.tokens.cache_read_input_tokens,
                         m.tokens.cache_write_5m_input_tokens, m.tokens.cache_write_1h_input_tokens,
                         m.tokens.web_search_requests, m.reported_usd, m.computed_usd, m.pricing_source)
            for m in cost.models
        ])

    # -- queries (the read model's view of a running phase) ---------------------------------

    def snapshot(self) -> RunSnapshot:
        """The phase as it is now: status, live cost and tool figures, holds, breakpoints, counts."""
        control, stream = self.control, self.stream
        tools = stream.tools
        held = tuple(
            HeldCall(h.tool_use_id, h.tool_name, h.input_json, h.breakpoint_id, h.reason, h.since_ns,
                     tools.get(h.tool_use_id))
            for h in list(control.holds.values())
        )
        return RunSnapshot(
            status=self.status, last_sequence=self.events.last_sequence, cost=stream.cost,
            tool_stats=tuple(tools.stats()), current_tool=tools.current,
            paused=control.pause_requested or control.hard_paused, hard_paused=control.hard_paused,
            held_calls=held, breakpoints=tuple(control.breakpoints.list()),
            assistant_message_count=self.assistant_turns, user_message_count=self.user_messages,
            turn_count=stream.result_count, containment=self.plan.scope.report(),
        )

    def tool_call(self, tool_use_id: str) -> ToolCall | None:
        """The tracker's record of one call of this phase, if it still retains it."""
        return self.stream.tools.get(tool_use_id)

    async def context_usage(self) -> ContextUsage | None:
        """The CLI's context-window usage, or None when it cannot answer now (paused, ending, silent)."""
        answer = await self.control.context_usage()
        return None if answer is None else context_usage(answer)

    def _log_fields(self) -> dict[str, str]:
        return {"job_id": self.job_id, "phase_id": self.phase_id}


def _last_result(result: TurnResult | None) -> LastResult | None:
    if result is None:
        return None
    return LastResult(
        subtype=result.subtype, is_error=result.is_error, api_error_status=result.api_error_status,
        terminal_reason=result.terminal_reason, errors=tuple(result.errors), result_text=result.result_text,
    )
