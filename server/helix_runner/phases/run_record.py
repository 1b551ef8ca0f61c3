"""What a running phase records and mirrors: its status, its events in order, its raw output.

``RunRecord`` is the one way out of a run: every batch of events goes through its fan-out
(persisted and offered to subscribers first, then the run's other observers), the CLI's bytes go
to the recording files, and everything the server writes for the phase is charged against the
phase's output budget. It is the supervisor's ``ProcessSink``. It knows the store, the event log
and the stream, not the run: what it must tell the run (a limit crossed, the CLI's first output)
it tells through the callables it is given, so it can be built and tested without a process.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from helix_runner.domain.events import (
    AssistantText,
    Event,
    Payload,
    PhaseStatusChanged,
    SessionInit,
    SessionWritesLost,
    StderrOutput,
    Thinking,
    ToolCallFinished,
    ToolCallStarted,
    UserMessage,
)
from helix_runner.domain.output_budget import OutputBudget
from helix_runner.domain.phase_outcome import EndCause
from helix_runner.domain.phase_result import PhaseResult
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.phase_stream import PhaseStream
from helix_runner.phases.event_log import PhaseEventLog
from helix_runner.phases.fanout import EventObserver, Fanout
from helix_runner.phases.ports import RecordEncoder, RunStore
from helix_runner.phases.webhooks import PhaseNotifier
from helix_runner.process.procfs import start_ticks
from helix_runner.store.protocol import EventRow


class RunRecord:
    """The phase's status and the record of its run: events (stored, offered, fanned out), the CLI's
    stdout and stderr (recording files, events), the facts the stream carries that the run reports
    (message counts, how the CLI was billed, lost session writes) and its output budget.

    ``at_limit(cause, reason)``: the phase went past a limit (its output, a line longer than the
    framer's cap) and must stop. ``on_output()``: called for each stdout chunk, before it is read
    (the CLI is up). ``ended()``: the run has its result, so no service event may follow it.
    """

    def __init__(self, job_id: str, phase_id: str, store: RunStore, encoder: RecordEncoder, events: PhaseEventLog,
                 stream: PhaseStream, *, notifier: PhaseNotifier | None, recording_dir: Path, output_max_bytes: int,
                 max_line_bytes: int, at_limit: Callable[[EndCause, str], None], on_output: Callable[[], None],
                 ended: Callable[[], bool]):
        self.job_id, self.phase_id = job_id, phase_id
        self.store, self.encoder, self.events, self.stream = store, encoder, events, stream
        self.notifier = notifier
        self.status = PhaseStatus.PENDING
        self._at_limit, self._on_output, self._ended = at_limit, on_output, ended
        self._max_line_bytes = max_line_bytes
        self._fanout = Fanout([self.persist_and_offer])
        recording_dir.mkdir(parents=True, exist_ok=True)
        # O_NOFOLLOW: a symlink planted in the recording directory is refused, never written through.
        self._stdout_file = open(recording_dir / "stdout.jsonl", "ab", opener=_no_follow)
        self._stderr_file = open(recording_dir / "stderr.log", "ab", opener=_no_follow)
        # What the phase makes the server write, against phase_output_max_bytes (domain/output_budget.py).
        self._output = OutputBudget(output_max_bytes)
        self._message_ids: set[str] = set()
        self.user_messages = 0
        self.auth_source = ""  # the latest init line's `apiKeySource`
        self.writes_lost: SessionWritesLost | None = None

    def observed_by(self, observers: Sequence[EventObserver]) -> None:
        """The run's observers of every batch, in order, after it is persisted and offered."""
        self._fanout = Fanout([self.persist_and_offer, *observers])

    @property
    def assistant_turns(self) -> int:
        """Assistant messages (distinct API message ids) seen so far; turn-count breakpoints use it."""
        return len(self._message_ids)

    # -- events ----------------------------------------------------------------------------

    def set_status(self, status: PhaseStatus, reason: str, **columns: object) -> None:
        """Records a status transition (store and event stream)."""
        previous, self.status = self.status, status
        self.store.update_phase(self.job_id, self.phase_id, time.time_ns(), status=status,
                                status_reason=reason, **columns)
        self.publish([self.stream.emit(PhaseStatusChanged(previous, status, reason))])

    def publish(self, events: list[Event]) -> None:
        """Fans a batch out to the run's observers (a batch emitted meanwhile waits its turn)."""
        self._fanout.publish(events)

    def emit(self, payload: Payload) -> Event | None:
        """Publishes a service event (a control action) into the phase's stream."""
        if self._ended() or self.stream.finished:
            return None
        event = self.stream.emit(payload)
        self.publish([event])
        return event

    def persist_and_offer(self, events: list[Event]) -> None:
        encoder, job, phase = self.encoder, self.job_id, self.phase_id
        rows = [EventRow(e.sequence, e.receive_time_ns, encoder.event_kind(e), encoder.encode_event(job, phase, e))
                for e in events]
        self.events.publish(rows, self.notifier.outbox(events) if self.notifier is not None else ())
        self.charge(sum(len(row.body) for row in rows))

    def note_facts(self, events: list[Event]) -> None:
        """Message counts, how the CLI was billed, lost session writes."""
        for e in events:
            p = e.payload
            if isinstance(p, AssistantText | Thinking | ToolCallStarted) and p.message_id:
                self._message_ids.add(p.message_id)
            elif isinstance(p, UserMessage | ToolCallFinished):
                self.user_messages += 1
            if isinstance(p, SessionInit):
                # How the CLI was billed; the parser already reads `apiKeySource` into SessionInit.
                self.auth_source = p.api_key_source or self.auth_source
            elif isinstance(p, SessionWritesLost):
                self.writes_lost = p

    def record_pid(self, pid: int) -> None:
        """The phase shim's pid: lets a restarted server find and end what it leaves (process/containment.py)."""
        self.store.update_phase(self.job_id, self.phase_id, time.time_ns(), pid=pid, pid_start_ticks=start_ticks(pid))

    # -- ProcessSink -----------------------------------------------------------------------

    def on_stdout(self, chunk: bytes) -> None:
        self._on_output()
        self._stdout_file.write(chunk)
        self.publish(self.stream.feed(chunk))
        self.charge(len(chunk))
        if self.stream.line_over_cap:  # memory stays at the cap (the framer drops the rest), the phase stops
            self._at_limit(EndCause.LINE_LIMIT, f"the CLI's stdout carried a line longer than the limit of "
                           f"{self._max_line_bytes} bytes (max_line_bytes), which the CLI never "
                           "writes; a process of the phase wrote into it; it was stopped")

    def on_stderr_line(self, line: bytes, truncated: bool) -> None:
        self._stderr_file.write(line + b"\n")
        self.charge(len(line) + 1)
        text = StderrOutput.from_bytes(line)
        self.publish([self.stream.emit(StderrOutput(text.text, text.truncated or truncated))])

    async def room(self) -> None:
        """Returns once the writer's backlog has room for more output (back-pressure on the CLI)."""
        await self.events.room()

    def charge(self, n: int) -> None:
        """Counts bytes the server writes for the phase; stops it past phase_output_max_bytes."""
        if self._output.charge(n):
            self._at_limit(EndCause.OUTPUT_LIMIT, self._output.describe())

    def write_result(self, result: PhaseResult) -> None:
        """The phase's result, stored and sent to its watchers; the event log closes after it."""
        encoded = self.encoder.encode_result(result)
        # The result marks the phase final for watchers on other replicas (postgres_notify's follow
        # loop): it is committed after every event (the writer keeps a run's writes in order).
        self.store.update_phase(
            self.job_id, self.phase_id, time.time_ns(),
            result_pb=encoded, tool_stats_pb=self.encoder.encode_tool_stats(list(result.tool_stats)),
        )
        self.events.close(encoded)

    def close_files(self) -> None:
        """The process is gone: the recording files are complete."""
        self._stdout_file.close()
        self._stderr_file.close()


def _no_follow(path: str, flags: int) -> int:
    """An ``open`` opener that refuses a symlink at the path (``O_NOFOLLOW``)."""
    return os.open(path, flags | os.O_NOFOLLOW)
