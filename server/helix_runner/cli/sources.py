"""Where the events of a phase come from: the live API (re-attaching by cursor) or a recording file.

A recording is either what ``helix-runner watch --json`` printed (one ``StreamEvent`` per line in
protobuf JSON, then ``{"result": ...}``), or a phase's raw CLI output (``recordings/<job>/<phase>-<id>/
stdout.jsonl``, or that directory). Raw output goes through the server's own stream engine
(``domain.phase_stream.PhaseStream``) and the API's event mapping, so it becomes the very events the
server would have sent, as the client's messages; one renderer then shows both.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import betterproto2
import grpc
from helix_runner_client import RunnerClient, RunnerError, pb

from helix_runner.cli.common import CliError

# Re-attaching stops when no event arrived for this long while the server could not be reached.
DEFAULT_RECONNECT_SECONDS = 30.0
_RETRYABLE_REASONS = frozenset({"WATCHER_TOO_SLOW", "DRAINING", "PHASE_MOVED"})


def _retryable(exc: RunnerError) -> bool:
    if exc.reason in _RETRYABLE_REASONS:
        return True
    # INTERNAL without an ErrorInfo is the client's "stream ended without a PhaseResult": the
    # connection went away mid-stream (the server never ends a watch without the result).
    return exc.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED) or (
        exc.code == grpc.StatusCode.INTERNAL and exc.info is None
    )


class LiveEvents:
    """``WatchPhase`` from a cursor, re-attached after a dropped connection from the last sequence seen.

    Iterating yields every event once, in order, with no gap; :attr:`result` is set at the end.
    ``on_notice`` hears about each re-attach. A phase that cannot be reached again within
    ``reconnect_seconds`` raises the last error.
    """

    def __init__(
        self,
        client: RunnerClient,
        job_id: str,
        phase_id: str,
        after_sequence: int = 0,
        *,
        reconnect_seconds: float = DEFAULT_RECONNECT_SECONDS,
        on_notice: Callable[[str], None] | None = None,
    ):
        self.client, self.job_id, self.phase_id = client, job_id, phase_id
        self.cursor = after_sequence
        self.reconnect_seconds = reconnect_seconds
        self.on_notice = on_notice or (lambda _text: None)
        self.result: pb.PhaseResult | None = None
        self.reconnects = 0
        self.events_seen = 0

    async def __aiter__(self) -> AsyncIterator[pb.StreamEvent]:
        loop = asyncio.get_running_loop()
        failing_since: float | None = None
        delay = 0.2
        while True:
            # The client follows a phase that moves to another replica (PHASE_MOVED) by itself.
            stream = self.client.watch_phase(self.job_id, self.phase_id, self.cursor, on_move=self._moved)
            try:
                async with stream:
                    async for event in stream:
                        if event.sequence <= self.cursor:
                            continue  # never twice, whatever a server re-sends
                        self.cursor = event.sequence
                        self.events_seen += 1
                        failing_since, delay = None, 0.2
                        yield event
                self.result = stream.result
                return
            except RunnerError as exc:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    # Our own cancellation (Ctrl-C: asyncio.run cancels the main task) can surface
                    # from the client library as a CANCELLED status; re-attaching would swallow it.
                    raise asyncio.CancelledError from None
                # A server that cannot be reached at all is reported at once, not retried for 30 s.
                never_connected = not self.events_seen and self.reconnects == 0 and exc.reason != "PHASE_MOVED"
                if not _retryable(exc) or (never_connected and exc.code == grpc.StatusCode.UNAVAILABLE):
                    raise
                now = loop.time()
                failing_since = failing_since if failing_since is not None else now
                if now - failing_since > self.reconnect_seconds:
                    raise
                self.reconnects += 1
                self.on_notice(
                    f"connection lost ({exc.reason or exc.code.name}); re-attaching after "
                    f"sequence {self.cursor}"
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _moved(self, move) -> None:
        from helix_runner.cli.run import move_notice

        self.on_notice(move_notice(move))


@dataclass
class Recording:
    """The events of a recording file, and the phase's result when the file has one."""

    events: list[pb.StreamEvent]
    result: pb.PhaseResult | None
    raw: bool
    """True for raw CLI output: events have no receive times and there is no process result."""


def read_recording(path: str | Path, *, job_id: str = "", phase_id: str = "") -> Recording:
    """Reads a ``watch --json`` capture or a raw ``stdout.jsonl`` (or its recording directory)."""
    source = Path(path).expanduser()
    if source.is_dir():
        source = source / "stdout.jsonl"
    try:
        data = source.read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read the recording {source}: {exc.strerror or exc}") from None
    first = next((line for line in data.splitlines() if line.strip()), b"")
    try:
        head = json.loads(first) if first else {}
    except ValueError:
        head = None
    if isinstance(head, dict) and isinstance(head.get("type"), str) and "sequence" not in head:
        name = source.parent.name if source.name == "stdout.jsonl" else source.stem
        return Recording(
            list(raw_output_events(data, job_id=job_id or "recording", phase_id=phase_id or name)),
            None,
            raw=True,
        )
    if not isinstance(head, dict):
        raise CliError(f"{source} is neither a `watch --json` capture nor raw CLI output (stdout.jsonl)")
    return _read_capture(source, data)


def _read_capture(source: Path, data: bytes) -> Recording:
    events: list[pb.StreamEvent] = []
    result = None
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):
                raise ValueError("not an object")
            if "result" in obj and len(obj) == 1:
                result = pb.PhaseResult.from_dict(obj["result"])
            else:
                events.append(pb.StreamEvent.from_dict(obj))
        except (ValueError, TypeError, KeyError) as exc:
            raise CliError(f"{source}:{number}: not an event of a `watch --json` capture ({exc})") from None
    events.sort(key=lambda e: e.sequence)
    return Recording(events, result, raw=False)


def raw_output_events(data: bytes, *, job_id: str, phase_id: str) -> Iterator[pb.StreamEvent]:
    """The events the server makes of raw CLI stdout, as the client's messages (no receive times)."""
    from helix_runner.api.proto_records import ProtoRecordEncoder
    from helix_runner.domain.phase_stream import PhaseStream, PhaseStreamOptions

    stream = PhaseStream(PhaseStreamOptions(include_partial_messages=True), clock_ns=lambda: 0)
    encoder = ProtoRecordEncoder()

    def untimed(record: bytes) -> pb.StreamEvent:
        # Raw stdout carries no times, so every duration the engine measured is 0 by its clock:
        # unknown, shown as "-" (issue 35.3: replay showed 0ms for calls of 92 ms and 1m12s).
        event = pb.StreamEvent.parse(record)
        kind, payload = betterproto2.which_one_of(event, "payload")
        if kind == "tool_call_finished":
            payload.duration = None
        return event

    for line in data.splitlines(keepends=True):
        for event in stream.feed(line):
            yield untimed(encoder.encode_event(job_id, phase_id, event))
    for event in stream.finish():
        yield untimed(encoder.encode_event(job_id, phase_id, event))


def event_to_json(event: pb.StreamEvent) -> dict:
    """The protobuf JSON form ``watch --json`` prints and ``replay FILE`` reads back."""
    return event.to_dict()


def result_to_json(result: pb.PhaseResult) -> dict:
    return {"result": result.to_dict()}
