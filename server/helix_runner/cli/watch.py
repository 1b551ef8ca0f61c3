"""``watch`` (live event lines) and ``replay`` (the same lines from a recording, at its pace or faster)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from typing import TYPE_CHECKING

from helix_runner.cli.common import (
    EXIT_CODES_HELP,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PHASE_NOT_SUCCEEDED,
    CliError,
    Connection,
    add_connection_args,
    run_async,
)

if TYPE_CHECKING:
    from helix_runner_client import pb

WATCH_HELP = """\
Prints one line per event of a phase as it happens: local time, sequence, kind, and what happened
(tool name with its input, ✓/✗ with the duration when a call finishes, cost updates, control
actions). Recorded events come first, then live ones; after a dropped connection it re-attaches
from the last sequence it printed, so no event is missed or shown twice. Ends with the phase's
final status.

--filter takes event kinds (tool_call_started, cost_update, ...; see InspectPhase / events.proto)
or groups: tools, text, cost, control, errors, status.
"""

REPLAY_HELP = """\
Prints a phase's recorded events with the same lines as `watch`: as fast as possible, or with
--timed at the recorded pace (--speed 2x: twice as fast). The source is a phase on the server
(JOB PHASE), or a FILE: a `watch --json` capture, or a phase's raw CLI output
(<data-dir>/recordings/<job>/<phase>-<id>/stdout.jsonl, or that directory). Raw output has no
timestamps, so --timed has nothing to pace it by and it prints at once.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "watch",
        help="print a phase's events live, one line each",
        description=WATCH_HELP,
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("job", metavar="JOB")
    p.add_argument("phase", metavar="PHASE")
    p.add_argument(
        "--from",
        dest="from_sequence",
        type=int,
        default=0,
        metavar="SEQ",
        help="print events after this sequence (default 0: from the first)",
    )
    p.add_argument("--filter", metavar="KINDS", help="comma-separated event kinds or groups to print")
    p.add_argument(
        "--json",
        action="store_true",
        help='one JSON event per line, then {"result": ...} (a capture `replay FILE` reads)',
    )
    p.add_argument(
        "--reconnect-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="give up re-attaching after this long without reaching the server (default 30)",
    )
    add_connection_args(p)
    p.set_defaults(handler=cmd_watch)

    r = sub.add_parser(
        "replay",
        help="print a recorded phase like watch, at its pace or faster",
        description=REPLAY_HELP,
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    r.add_argument("source", nargs="+", metavar="JOB PHASE | FILE")
    r.add_argument("--timed", action="store_true", help="wait between events as long as the recording did")
    r.add_argument(
        "--speed",
        type=parse_speed,
        metavar="X",
        help="with the recorded timing, X times as fast (2, 2x, 0.5x); implies --timed",
    )
    r.add_argument("--to-sequence", type=int, metavar="N", help="stop after the event with sequence N")
    r.add_argument(
        "--max-gap",
        type=float,
        metavar="SECONDS",
        help="with --timed: wait at most this long between two events",
    )
    r.add_argument("--filter", metavar="KINDS", help="comma-separated event kinds or groups to print")
    r.add_argument("--json", action="store_true", help="JSON lines like `watch --json`")
    add_connection_args(r)
    r.set_defaults(handler=cmd_replay)


def parse_speed(text: str) -> float:
    try:
        value = float(text.strip().lower().removesuffix("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a speed: {text!r} (e.g. 2, 2x, 0.5x)") from None
    if not value > 0:
        raise argparse.ArgumentTypeError("the speed must be positive")
    return value


class EventPrinter:
    """Writes event lines (or JSON lines) to stdout and notices to stderr, applying ``--filter``."""

    def __init__(self, *, kinds: frozenset[str] | None, as_json: bool):
        from helix_runner.cli.common import make_console

        self.kinds = kinds
        self.as_json = as_json
        self.out = make_console()
        self.err = make_console(stderr=True)
        self.events = 0

    def event(self, event: pb.StreamEvent) -> None:
        from helix_runner.cli.render import event_kind, event_line

        self.events += 1
        if self.kinds is not None and event_kind(event) not in self.kinds:
            return
        if self.as_json:
            from helix_runner.cli.sources import event_to_json
            from helix_runner.cli.visible import dumps_json

            sys.stdout.write(dumps_json(event_to_json(event)) + "\n")
            sys.stdout.flush()
        else:
            self.out.print(event_line(event), soft_wrap=True)

    def notice(self, text: str) -> None:
        self.err.print(f"helix-runner: {text}", style="yellow", soft_wrap=True)

    def result(self, result: pb.PhaseResult | None) -> int:
        from helix_runner_client import pb

        from helix_runner.cli.render import result_line

        if result is None:
            return EXIT_OK
        if self.as_json:
            from helix_runner.cli.sources import result_to_json
            from helix_runner.cli.visible import dumps_json

            sys.stdout.write(dumps_json(result_to_json(result)) + "\n")
            sys.stdout.flush()
        else:
            self.out.print(result_line(result), soft_wrap=True)
        return EXIT_OK if result.status == pb.PhaseStatus.SUCCEEDED else EXIT_PHASE_NOT_SUCCEEDED


def _kinds(spec: str | None) -> frozenset[str] | None:
    from helix_runner.cli.render import parse_filter

    try:
        return parse_filter(spec)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def cmd_watch(args: argparse.Namespace) -> int:
    if args.from_sequence < 0:
        raise CliError("--from must be 0 or a sequence number")
    printer = EventPrinter(kinds=_kinds(args.filter), as_json=args.json)
    connection = Connection.from_args(args)
    try:
        return run_async(_watch(connection, args, printer))
    except KeyboardInterrupt:
        raise CliError("stopped watching (the phase goes on)", EXIT_INTERRUPTED) from None


async def _watch(connection: Connection, args: argparse.Namespace, printer: EventPrinter) -> int:
    from helix_runner.cli.sources import LiveEvents

    async with connection.open() as client:
        live = LiveEvents(
            client,
            args.job,
            args.phase,
            args.from_sequence,
            reconnect_seconds=args.reconnect_timeout,
            on_notice=printer.notice,
        )
        async for event in live:
            printer.event(event)
        return printer.result(live.result)


# --------------------------------------------------------------------------------------------------
# replay


def cmd_replay(args: argparse.Namespace) -> int:
    if len(args.source) > 2:
        raise CliError("replay takes JOB PHASE or one FILE")
    printer = EventPrinter(kinds=_kinds(args.filter), as_json=args.json)
    speed = args.speed if args.speed is not None else (1.0 if args.timed else None)
    try:
        if len(args.source) == 1:
            from helix_runner.cli.sources import read_recording

            recording = read_recording(args.source[0])
            if recording.raw and speed is not None:
                printer.notice("raw CLI output has no timestamps; replaying without timing")
                speed = None
            return run_async(
                _play(recording.events, recording.result, printer, speed, args, raw=recording.raw)
            )
        connection = Connection.from_args(args)
        return run_async(_replay_from_server(connection, args, printer, speed))
    except KeyboardInterrupt:
        raise CliError("replay stopped", EXIT_INTERRUPTED) from None


async def _replay_from_server(
    connection: Connection, args: argparse.Namespace, printer: EventPrinter, speed: float | None
) -> int:
    from helix_runner.cli.render import FINAL_STATUSES
    from helix_runner.cli.sources import LiveEvents

    job_id, phase_id = args.source
    async with connection.open() as client:
        phase = await find_phase(client, job_id, phase_id)
        # A running phase replays what is recorded so far; `watch` follows it live.
        limit = args.to_sequence
        if limit is None and phase.status not in FINAL_STATUSES:
            limit = phase.last_sequence
        events: list = []
        live = LiveEvents(client, job_id, phase_id, 0, on_notice=printer.notice)
        if limit is None or limit > 0:
            async with contextlib.aclosing(live.__aiter__()) as stream:
                async for event in stream:
                    events.append(event)
                    if limit is not None and event.sequence >= limit:
                        break
    result = live.result if limit is None else None
    return await _play(events, result, printer, speed, args, raw=False)


async def find_phase(client, job_id: str, phase_id: str):
    """The phase from GetJob; a missing one is the server's own PHASE_NOT_FOUND-style error."""
    from helix_runner.cli.common import EXIT_REFUSED

    job = await client.get_job(job_id)
    for phase in job.phases:
        if phase.phase_id == phase_id:
            return phase
    known = ", ".join(p.phase_id for p in job.phases) or "none"
    raise CliError(
        f"phase {phase_id} not found in job {job_id} (phases: {known}) [PHASE_NOT_FOUND]", EXIT_REFUSED
    )


async def _play(
    events: list, result, printer: EventPrinter, speed: float | None, args: argparse.Namespace, *, raw: bool
) -> int:
    previous = None
    for event in events:
        if args.to_sequence is not None and event.sequence > args.to_sequence:
            result = None
            break
        if speed is not None and previous is not None and event.receive_time and previous.receive_time:
            gap = (event.receive_time - previous.receive_time).total_seconds() / speed
            if args.max_gap is not None:
                gap = min(gap, args.max_gap)
            if gap > 0:
                await asyncio.sleep(gap)
        printer.event(event)
        previous = event
    if raw:
        return _raw_outcome(events, printer)
    return printer.result(result)


def _raw_outcome(events: list, printer: EventPrinter) -> int:
    """Raw output has no process result: the last turn result says how the recording ends."""
    last = next((e.turn_result for e in reversed(events) if e.turn_result is not None), None)
    if last is None:
        printer.notice("the recording has no turn result: the output ended early")
        return EXIT_PHASE_NOT_SUCCEEDED
    ok = last.subtype == "success" and not last.is_error
    printer.notice(f"end of recording: last turn result {last.subtype}{' (error)' if last.is_error else ''}")
    return EXIT_OK if ok else EXIT_PHASE_NOT_SUCCEEDED
