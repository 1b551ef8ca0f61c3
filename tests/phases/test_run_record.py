"""RunRecord: what a running phase records and mirrors (status, events in order, its output and its
budget), built alone: a stream, an encoder, a store and an event log that keep what they are given."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli_lines import init, line, tool_result, tool_use

from helix_runner.api.proto_records import ProtoRecordEncoder
from helix_runner.domain.events import ControlEvent, ControlEventKind, PhaseStatusChanged
from helix_runner.domain.phase_outcome import EndCause
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.phase_stream import PhaseStream, PhaseStreamOptions
from helix_runner.phases.run_record import RunRecord


class KeptStore:
    def __init__(self) -> None:
        self.updates: list[dict] = []

    def update_phase(self, job_id: str, phase_id: str, now_ns: int, **values: object) -> None:
        self.updates.append(values)


class KeptLog:
    """The event log's side: every row published, in order."""

    def __init__(self) -> None:
        self.rows: list = []

    def publish(self, rows, outbox) -> None:
        self.rows.extend(rows)


def make(tmp_path: Path, *, output_max_bytes: int = 0, max_line_bytes: int = 1 << 20, ended=lambda: False):
    limits: list[tuple[EndCause, str]] = []
    outputs: list[int] = []
    store, log = KeptStore(), KeptLog()
    record = RunRecord("j", "p", store, ProtoRecordEncoder(), log,
                       PhaseStream(PhaseStreamOptions(max_line_bytes=max_line_bytes)), notifier=None,
                       recording_dir=tmp_path / "rec", output_max_bytes=output_max_bytes, max_line_bytes=max_line_bytes,
                       at_limit=lambda cause, reason: limits.append((cause, reason)),
                       on_output=lambda: outputs.append(1), ended=ended)
    return record, store, log, limits, outputs


def test_every_batch_is_stored_before_the_observers_see_it_and_a_batch_emitted_meanwhile_follows(tmp_path):
    record, store, log, limits, outputs = make(tmp_path)
    seen: list[tuple[str, list[int], int]] = []

    def controller(events):
        seen.append(("controller", [e.sequence for e in events], len(log.rows)))
        if any(e.payload.__class__ is PhaseStatusChanged for e in events):  # it acts on what it saw
            record.emit(ControlEvent(ControlEventKind.PAUSED))

    record.observed_by([lambda events: seen.append(("facts", [e.sequence for e in events], len(log.rows))),
                        controller])
    record.set_status(PhaseStatus.RUNNING, "started")
    assert store.updates == [{"status": PhaseStatus.RUNNING, "status_reason": "started"}]
    assert record.status is PhaseStatus.RUNNING
    # Persisted first (the row count already includes the batch), then each observer in order;
    # the controller's event is a batch of its own, after.
    assert seen == [("facts", [1], 1), ("controller", [1], 1), ("facts", [2], 2), ("controller", [2], 2)]
    assert [row.sequence for row in log.rows] == [1, 2]
    record.close_files()


def test_the_cli_output_is_recorded_counted_and_its_facts_noted(tmp_path):
    record, store, log, limits, outputs = make(tmp_path)
    record.observed_by([record.note_facts])
    billed = line({"type": "system", "subtype": "init", "session_id": "s", "model": "m", "tools": ["Bash"],
                   "apiKeySource": "ANTHROPIC_API_KEY"})
    record.on_stdout(billed + tool_use("t1", message_id="msg_1"))
    record.on_stdout(tool_result("t1") + tool_use("t2", message_id="msg_1") + tool_use("t3", message_id="msg_2"))
    record.on_stderr_line(b"warning: something", False)
    record.close_files()
    assert outputs == [1, 1]  # the run is told each time the CLI writes (its start slot)
    assert (record.assistant_turns, record.user_messages) == (2, 1)  # distinct message ids; one tool result
    assert record.auth_source == "ANTHROPIC_API_KEY"
    assert (tmp_path / "rec" / "stdout.jsonl").read_bytes().count(b"\n") == 5
    assert (tmp_path / "rec" / "stderr.log").read_bytes() == b"warning: something\n"
    assert log.rows[-1].kind == "stderr" and not limits


def test_past_the_output_budget_the_phase_is_stopped(tmp_path):
    record, store, log, limits, outputs = make(tmp_path, output_max_bytes=4096)
    record.observed_by([])
    record.on_stdout(init())
    assert not limits
    # Both count: the line in the recording file and its event (each alone is within the budget).
    record.on_stderr_line(b"x" * 2300, False)
    record.close_files()
    assert [cause for cause, _ in limits] == [EndCause.OUTPUT_LIMIT]
    assert "4 KiB (phase_output_max_bytes" in limits[0][1]


def test_a_line_over_the_framers_cap_stops_the_phase(tmp_path):
    record, store, log, limits, outputs = make(tmp_path, max_line_bytes=1024)
    record.observed_by([])
    record.on_stdout(b'{"type":"x","pad":"' + b"y" * 2048 + b'"}\n')
    record.close_files()
    assert [cause for cause, _ in limits] == [EndCause.LINE_LIMIT]
    assert "1024 bytes" in limits[0][1]


def test_no_service_event_follows_the_result(tmp_path):
    ended = [False]
    record, store, log, limits, outputs = make(tmp_path, ended=lambda: ended[0])
    record.observed_by([])
    assert record.emit(ControlEvent(ControlEventKind.PAUSED)) is not None
    ended[0] = True
    assert record.emit(ControlEvent(ControlEventKind.RESUMED)) is None
    assert len(log.rows) == 1
    record.close_files()


def test_a_link_planted_in_the_recording_directory_is_not_written_through(tmp_path):
    (tmp_path / "rec").mkdir()
    target = tmp_path / "elsewhere"
    target.write_bytes(b"")
    (tmp_path / "rec" / "stdout.jsonl").symlink_to(target)
    with pytest.raises(OSError):
        make(tmp_path)
    assert target.read_bytes() == b""
