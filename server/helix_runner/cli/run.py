"""``helix-runner run``: runs one phase through the API and shows its progress live.

On a terminal the progress is one line redrawn in place, never wider than the terminal (elapsed
time, current tool, tool calls and failures, tokens, cost, API retries while the CLI retries);
finished tool calls, retries, errors and control actions are printed above it. Off a terminal each
notable event is printed on its own line. The final status and the CLI's exit come last.

Ctrl-C cancels the phase through the API (with a reason saying so), waits for its final status
and reports it in one line; a second Ctrl-C leaves at once (the dropped call cancels the phase too).

When the server's replica drains (a rolling deploy), it hands the phase over to another replica and
ends this call with PHASE_MOVED; `run` says so and follows the phase through WatchPhase after the
last event it showed, so the progress goes on as one stream (the Python client's PhaseStream).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import signal
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

from helix_runner.cli.common import (
    EXIT_CODES_HELP,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PHASE_NOT_SUCCEEDED,
    CliError,
    Connection,
    add_connection_args,
    make_console,
    run_async,
)
from helix_runner.domain.bounds import PROMPT_MAX_BYTES, MiB

CANCEL_REASON = "cancelled with Ctrl-C in `helix-runner run`"
# After Ctrl-C, how long to wait for the cancelled phase's final result.
CANCEL_WAIT_SECONDS = 20.0
# The progress line is redrawn at most this often.
REDRAW_INTERVAL_S = 0.1

# Events worth a line of their own (above the progress line on a terminal, alone off one).
# The model's text too: a terminal hid it (one row each, cut at the terminal's width; `watch` shows it whole).
_NOTABLE_TTY = frozenset(
    {"tool_call_finished", "api_retry", "api_error", "permission_denied", "control", "stderr", "parse_error",
     "assistant_text"}
)
_NOTABLE_PLAIN = _NOTABLE_TTY | {
    "session_init",
    "tool_call_started",
    "turn_result",
    "status_changed",
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="run one phase through the service and show live progress",
        description=__doc__,
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    prompt = p.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt", help="the prompt's text")
    prompt.add_argument("--prompt-file", metavar="PATH",
                        help=f"read the prompt from PATH ('-': standard input); at most {PROMPT_MAX_BYTES // MiB} MiB "
                        "of UTF-8")
    p.add_argument("--workdir", required=True, help="a directory inside one of the server's workspace roots")
    p.add_argument("--job-id", help="job id (default: cli-<random>)")
    p.add_argument("--phase-id", help="phase id (default: phase-<random>)")
    p.add_argument("--project-id", default="")
    p.add_argument("--model", default="")
    p.add_argument("--allowed-tool", action="append", default=[], dest="allowed_tools")
    p.add_argument("--max-turns", type=int, default=0)
    p.add_argument("--timeout", type=float, default=0.0, help="seconds (0: the server's default)")
    p.add_argument(
        "--break-on-tool",
        action="append",
        default=[],
        metavar="NAME",
        help="start with a breakpoint on this tool (repeatable; resolve with approve / deny / edit)",
    )
    p.add_argument(
        "--break-on-pattern",
        action="append",
        default=[],
        metavar="REGEX",
        help="start with a breakpoint on tool calls whose input matches this RE2 pattern (repeatable): "
        "held from the first call on, with no race against a later `break add`",
    )
    p.add_argument(
        "--detach-on-disconnect",
        action="store_true",
        help="keep the phase running if this command goes away (re-attach with watch or attach)",
    )
    add_connection_args(p)
    p.set_defaults(handler=cmd_run)


def read_prompt(args: argparse.Namespace) -> str:
    """The prompt from ``--prompt`` or ``--prompt-file`` (``-``: stdin), refused here when it is over
    the service's limit (the server would refuse it too, or its transport, over 8 MiB)."""
    if args.prompt_file is None:
        data = args.prompt.encode()
        where = "--prompt"
    else:
        where = "standard input" if args.prompt_file == "-" else args.prompt_file
        try:
            if args.prompt_file == "-":
                data = sys.stdin.buffer.read(PROMPT_MAX_BYTES + 1)
            else:
                with open(args.prompt_file, "rb") as f:
                    data = f.read(PROMPT_MAX_BYTES + 1)
        except OSError as exc:
            raise CliError(f"cannot read the prompt from {where}: {exc.strerror or exc}") from None
    if len(data) > PROMPT_MAX_BYTES:
        raise CliError(f"the prompt from {where} is over the limit of {PROMPT_MAX_BYTES} bytes (1 MiB)")
    if not data.strip():
        raise CliError(f"the prompt from {where} is empty")
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise CliError(f"the prompt from {where} is not UTF-8 (byte {exc.start})") from None


def build_request(args: argparse.Namespace):
    from helix_runner_client import pb

    options = pb.PhaseOptions(
        model=args.model,
        allowed_tools=list(args.allowed_tools),
        max_turns=args.max_turns,
        breakpoints=[pb.Breakpoint(tool_name=name) for name in args.break_on_tool]
        + [pb.Breakpoint(input_pattern=pb.InputPatternCondition(regex=regex)) for regex in args.break_on_pattern],
    )
    if args.timeout:
        options.timeout = timedelta(seconds=args.timeout)
    if args.detach_on_disconnect:
        options.on_disconnect = pb.OnDisconnect.DETACH
    workdir = str(Path(args.workdir).expanduser().absolute())
    return pb.RunPhaseRequest(
        job_id=args.job_id or f"cli-{uuid.uuid4().hex[:8]}",
        phase_id=args.phase_id or f"phase-{uuid.uuid4().hex[:12]}",
        project_id=args.project_id,
        prompt=read_prompt(args),
        working_dir=workdir,
        options=options,
    )


def cmd_run(args: argparse.Namespace) -> int:
    connection = Connection.from_args(args)
    request = build_request(args)
    try:
        return run_async(_run(connection, request))
    except KeyboardInterrupt:  # a Ctrl-C before the handler was installed, or a second one
        raise CliError(
            f"interrupted: phase {request.phase_id} of job {request.job_id} is cancelled with the "
            "dropped call",
            EXIT_INTERRUPTED,
        ) from None


class ProgressDisplay:
    """Renders events for ``run``: a redrawn progress line on a terminal, event lines otherwise."""

    def __init__(self, stream=None):
        from helix_runner.cli.render import PhaseModel

        self.stream = stream if stream is not None else sys.stdout
        self.tty = self.stream.isatty()
        self.console = make_console(self.stream)
        self.view = PhaseModel()
        self.started = time.monotonic()
        self._drawn = False
        self._last_draw = 0.0

    def event(self, event) -> None:
        from helix_runner.cli.render import event_kind, event_line

        self.view.apply(event)
        kind = event_kind(event)
        if kind in (_NOTABLE_TTY if self.tty else _NOTABLE_PLAIN):
            self._clear()
            if self.tty:  # one screen row each, like the progress line
                self.console.print(event_line(event), no_wrap=True, overflow="ellipsis")
            else:
                self.console.print(event_line(event), soft_wrap=True)
        if self.tty:
            self.redraw()

    def notice(self, text: str) -> None:
        """A line of its own on stderr (above the progress line on a terminal)."""
        self._clear()
        self.stream.flush()
        make_console(stderr=True).print(f"helix-runner: {text}", style="yellow", soft_wrap=True)
        if self.tty:
            self.redraw(force=True)

    def redraw(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_draw < REDRAW_INTERVAL_S:
            return
        self._last_draw = now
        width = shutil.get_terminal_size((80, 24)).columns
        self.stream.write("\r\x1b[2K" + progress_line(self.view, now - self.started, width))
        self.stream.flush()
        self._drawn = True

    def _clear(self) -> None:
        if self._drawn:
            self.stream.write("\r\x1b[2K")
            self._drawn = False

    def finish(self) -> None:
        if self.tty:
            self.redraw(force=True)
            self.stream.write("\n")
            self._drawn = False
        self.stream.flush()


def progress_line(view, elapsed: float, width: int) -> str:
    """The one-line progress, cut to ``width - 1`` characters so a terminal never wraps it."""
    from helix_runner.cli.render import enum_name, fmt_seconds, fmt_tokens, fmt_usd, plural

    current = view.current_tool
    parts = [f"[{fmt_seconds(elapsed):>6}]"]
    if view.status is not None and enum_name(view.status) not in ("RUNNING",):
        parts.append(enum_name(view.status))
    parts.append(f"▶ {current.name}" if current is not None else "idle")
    failed = f" ({view.tool_failures}✗)" if view.tool_failures else ""
    parts.append(f"{plural(view.tool_calls, 'tool')}{failed}")
    tokens = view.tokens
    parts.append(
        f"{fmt_tokens(tokens.input_tokens + tokens.cache_read_input_tokens)}/"
        f"{fmt_tokens(tokens.output_tokens)} tok"
    )
    cost = view.cost_usd
    parts.append(fmt_usd(cost) + ("*" if cost is not None and view.reported_usd is None else ""))
    if view.retrying and view.last_retry is not None:
        r = view.last_retry
        http = f" {r.error_status}" if r.error_status is not None else ""
        parts.append(f"retry {r.attempt}/{r.max_retries}{http} {r.error}".rstrip())
    elif view.retries:
        parts.append(f"{view.retries} {'retry' if view.retries == 1 else 'retries'}")
    line = " | ".join(parts)
    limit = max(10, width - 1)
    return line if len(line) <= limit else line[: limit - 1] + "…"


async def _run(connection: Connection, request) -> int:
    from helix_runner_client import RunnerError, pb

    from helix_runner.cli.render import result_line

    display = ProgressDisplay()
    errors = make_console(stderr=True)
    loop = asyncio.get_running_loop()
    interrupted = asyncio.Event()
    main_task = asyncio.current_task()
    presses = 0

    def on_sigint() -> None:
        nonlocal presses
        presses += 1
        interrupted.set()
        if presses > 1 and main_task is not None:
            main_task.cancel()

    installed = False
    with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):  # not the main thread
        loop.add_signal_handler(signal.SIGINT, on_sigint)
        installed = True
    offline = False
    try:
        async with connection.open() as client:
            stream = client.run_phase(request, on_move=lambda move: display.notice(move_notice(move)))

            async def read() -> None:
                async for event in stream:
                    display.event(event)

            reader = asyncio.create_task(read())
            waiter = asyncio.create_task(interrupted.wait())
            try:
                await asyncio.wait({reader, waiter}, return_when=asyncio.FIRST_COMPLETED)
                if interrupted.is_set() and not reader.done():
                    display.finish()
                    message = await _cancel(client, request, reader, stream)
                    raise CliError(message, EXIT_INTERRUPTED)
                await reader  # raises what the stream raised
                offline = await _offline(client)
            except asyncio.CancelledError:  # a second Ctrl-C
                where = f"phase {request.phase_id} of job {request.job_id}"
                if stream.moves:  # following a moved phase is a watch: dropping it cancels nothing
                    raise CliError(
                        f"interrupted: {where} goes on (it moved to another replica; cancel it with "
                        "`helix-runner cancel`)",
                        EXIT_INTERRUPTED,
                    ) from None
                raise CliError(f"interrupted: {where} is cancelled with the dropped call", EXIT_INTERRUPTED) from None
            finally:
                waiter.cancel()
                if not reader.done():
                    reader.cancel()
                    stream.cancel()
                    with contextlib.suppress(BaseException):
                        await reader
    except RunnerError:
        display.finish()
        raise
    finally:
        if installed:
            loop.remove_signal_handler(signal.SIGINT)
    display.finish()
    result = stream.result
    if result is None:  # the client raises before this; kept as a guard
        errors.print("helix-runner: the stream ended without a result")
        return EXIT_PHASE_NOT_SUCCEEDED
    display.console.print(result_line(result, events=display.view.events), soft_wrap=True)
    if result.result_text:
        display.console.print(f"  result: {result.result_text[:500]}", soft_wrap=True, markup=False)
    if offline:
        display.console.print(f"  {OFFLINE_COST_NOTE}", soft_wrap=True, markup=False)
    return EXIT_OK if result.status == pb.PhaseStatus.SUCCEEDED else EXIT_PHASE_NOT_SUCCEEDED


OFFLINE_COST_NOTE = ("offline: the scripted Messages API answered; the cost is what the same tokens would "
                     "cost at the model's price, nothing was billed")


async def _offline(client) -> bool:
    """Whether the server answers the model API itself (its status says so; False if it cannot say)."""
    from helix_runner_client import RunnerError

    try:
        return bool((await client.get_server_status()).offline)
    except RunnerError:
        return False


def move_notice(move) -> str:
    """What `run` and `watch` say when the phase they follow moved to another replica."""
    source = f"replica {move.from_replica}" if move.from_replica else "its replica"
    return f"the phase moved from {source} (draining); following it after sequence {move.after_sequence}"


async def _cancel(client, request, reader: asyncio.Task, stream) -> str:
    """Cancels the phase through the API, waits (bounded) for its result, and says what happened."""
    from helix_runner_client import RunnerError, pb

    from helix_runner.cli.render import enum_name

    where = f"phase {request.phase_id} of job {request.job_id}"
    try:
        await client.call(
            "cancel_phase",
            pb.CancelPhaseRequest(job_id=request.job_id, phase_id=request.phase_id, reason=CANCEL_REASON),
        )
    except RunnerError as exc:
        if exc.reason == "PHASE_NOT_FOUND" or exc.reason == "JOB_NOT_FOUND":
            return f"interrupted before {where} started; nothing ran"
        if exc.reason != "ILLEGAL_TRANSITION":
            return f"interrupted; cancelling {where} failed ({exc.message}); the dropped call cancels it"
    try:
        async with asyncio.timeout(CANCEL_WAIT_SECONDS):
            await asyncio.shield(reader)
    except (TimeoutError, RunnerError):
        return f"interrupted: {where} was asked to cancel; its final status did not arrive in time"
    result = stream.result
    if result is None:
        return f"interrupted: {where} was cancelled"
    status = enum_name(result.status)
    if result.status == pb.PhaseStatus.CANCELLED:
        return f"interrupted: {where} was cancelled"
    return f"interrupted: {where} had already ended {status} ({result.reason})"
