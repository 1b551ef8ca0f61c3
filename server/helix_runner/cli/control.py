"""Job control verbs: pause, resume, step, interrupt, cancel, inject, breakpoints, approve/deny/edit.

Each is one call of the public API (``approve``/``deny``/``edit`` without a tool_use id first ask
InspectPhase for the held call). The answer is one line saying what the phase does now; ``--json``
prints the API's response instead.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from helix_runner.cli.common import (
    EXIT_CODES_HELP,
    EXIT_OK,
    EXIT_REFUSED,
    CliError,
    add_connection_args,
    add_json_flag,
    make_console,
    print_json,
    with_client,
)


def _parser(
    sub: argparse._SubParsersAction,
    name: str,
    help_: str,
    description: str | None = None,
    *,
    held: bool = False,
) -> argparse.ArgumentParser:
    p = sub.add_parser(
        name,
        help=help_,
        description=description or help_,
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("job", metavar="JOB")
    p.add_argument("phase", metavar="PHASE")
    if held:
        p.add_argument(
            "tool_use_id",
            nargs="?",
            metavar="TOOL_USE_ID",
            help="the held call (default: the only held call), or a held network request's id (eg-...)",
        )
    add_json_flag(p)
    add_connection_args(p)
    return p


def register(sub: argparse._SubParsersAction) -> None:
    p = _parser(
        sub,
        "pause",
        "hold the phase before its next tool call (--hard: stop its processes)",
        "Holds the phase before its next tool call (status PAUSING, then PAUSED once a call is "
        "held). --hard stops the whole process group with SIGSTOP at once, model streaming "
        "included; an API request in flight may time out.",
    )
    p.add_argument("--hard", action="store_true", help="SIGSTOP the process group (freezes everything)")
    p.set_defaults(handler=with_client(_pause))
    _parser(sub, "resume", "release a paused phase (calls held by breakpoints stay held)").set_defaults(
        handler=with_client(_resume)
    )
    _parser(sub, "step", "let exactly one held (or the next) tool call run, then hold again").set_defaults(
        handler=with_client(_step)
    )
    _parser(sub, "interrupt", "interrupt the current turn (the phase may continue with inject)").set_defaults(
        handler=with_client(_interrupt)
    )
    p = _parser(sub, "cancel", "end the phase now (its process group is terminated; status CANCELLED)")
    p.add_argument("--reason", default="", help="recorded in the result's reason")
    p.set_defaults(handler=with_client(_cancel))
    p = _parser(
        sub,
        "inject",
        "send a user message: the next turn (--interrupt: interrupt the current one first)",
        "Sends TEXT as a user message. By default it is queued as the next user turn: the "
        "current turn finishes first (this is not mid-turn steering). --interrupt interrupts the "
        "current turn, then sends it.",
    )
    p.add_argument("text", metavar="TEXT")
    p.add_argument("--interrupt", action="store_true", help="interrupt the current turn first")
    p.set_defaults(handler=with_client(_inject))
    p = _parser(
        sub,
        "inspect",
        "a snapshot: status, held calls, recent events, context, cost, tools",
        "Prints a snapshot of the phase. WHAT narrows it: status, held, events, context, "
        "breakpoints, cost, tools, or all (default).",
    )
    p.add_argument(
        "what",
        nargs="?",
        default="all",
        choices=INSPECT_SECTIONS,
        metavar="WHAT",
        help=f"one of {', '.join(INSPECT_SECTIONS)} (default all)",
    )
    p.set_defaults(handler=with_client(_inspect))

    p = _parser(sub, "approve", "run a held tool call as it is, or let a held network request (eg-...) through",
                held=True)
    p.add_argument("--for", dest="scope", choices=("once", "phase", "project"), default="once",
                   help="a held network request: this one only (default), the rest of the phase, or the project "
                        "(a stored allowance)")
    p.set_defaults(handler=with_client(_approve))
    p = _parser(
        sub, "deny", "refuse a held tool call; the model sees the message as the tool's error", held=True
    )
    p.add_argument("--message", "-m", default="", help="what the model is told (default: a standard denial)")
    p.set_defaults(handler=with_client(_deny))
    p = _parser(sub, "edit", "run a held tool call with new input", held=True)
    p.add_argument(
        "--input", required=True, metavar="JSON|@FILE", help="the new input: a JSON object, or @file"
    )
    p.set_defaults(handler=with_client(_edit))

    brk = sub.add_parser(
        "break",
        help="breakpoints: add, ls, rm",
        description="Breakpoints hold matching tool calls until approve / deny / edit.",
    )
    bsub = brk.add_subparsers(
        dest="break_command", required=True, metavar="{add,ls,rm}", parser_class=sub._parser_class
    )
    p = _parser(bsub, "add", "add a breakpoint: --tool NAME | --pattern REGEX | --cost USD | --turn N")
    cond = p.add_mutually_exclusive_group(required=True)
    cond.add_argument("--tool", metavar="NAME", help="hold calls of this tool (exact name, e.g. Bash)")
    cond.add_argument("--pattern", metavar="REGEX", help="hold calls whose input JSON matches (searched)")
    cond.add_argument(
        "--cost", type=float, metavar="USD", help="hold the next call once the cost reaches this"
    )
    cond.add_argument(
        "--turn", type=int, metavar="N", help="hold the next call once N assistant turns started"
    )
    p.add_argument("--pattern-tool", metavar="NAME", default="", help="with --pattern: only this tool")
    p.add_argument("--once", action="store_true", help="remove the breakpoint after its first hit")
    p.add_argument(
        "--id", dest="breakpoint_id", default="", help="breakpoint id (default: the server picks one)"
    )
    p.set_defaults(handler=with_client(_break_add))
    _parser(bsub, "ls", "list the phase's breakpoints").set_defaults(handler=with_client(_break_ls))
    p = _parser(bsub, "rm", "remove a breakpoint (calls it holds stay held)")
    p.add_argument("breakpoint_id", metavar="ID")
    p.set_defaults(handler=with_client(_break_rm))



def _say(args: argparse.Namespace, response: Any, text) -> int:
    if args.json:
        print_json(response.to_dict())
    else:
        make_console().print(text, soft_wrap=True)
    return EXIT_OK


def _phase_text(phase, prefix: str, suffix: str = ""):
    from rich.text import Text

    from helix_runner.cli.render import status_text

    line = Text(prefix)
    line.append(f"phase {phase.phase_id} of job {phase.job_id} is ")
    line.append_text(status_text(phase.status))
    if suffix:
        line.append(suffix)
    return line


def _ids(args: argparse.Namespace) -> dict[str, str]:
    return {"job_id": args.job, "phase_id": args.phase}


async def _pause(client, args) -> int:
    from helix_runner_client import pb

    mode = pb.PauseMode.HARD if args.hard else pb.PauseMode.BEFORE_NEXT_TOOL
    response = await client.call("pause_phase", pb.PausePhaseRequest(**_ids(args), mode=mode))
    suffix = (
        "; its process group is stopped"
        if args.hard
        else (
            "; it holds before the next tool call" if response.phase.status == pb.PhaseStatus.PAUSING else ""
        )
    )
    return _say(args, response, _phase_text(response.phase, "paused: ", suffix))


async def _resume(client, args) -> int:
    from helix_runner_client import pb

    response = await client.call("resume_phase", pb.ResumePhaseRequest(**_ids(args)))
    return _say(args, response, _phase_text(response.phase, "resumed: "))


async def _step(client, args) -> int:
    from helix_runner_client import pb

    response = await client.call("step_phase", pb.StepPhaseRequest(**_ids(args)))
    return _say(args, response, _phase_text(response.phase, "step: one tool call may run; "))


async def _interrupt(client, args) -> int:
    from helix_runner_client import pb

    response = await client.call("interrupt_phase", pb.InterruptPhaseRequest(**_ids(args)))
    return _say(args, response, _phase_text(response.phase, "interrupted the current turn; "))


async def _cancel(client, args) -> int:
    from helix_runner_client import pb

    response = await client.call("cancel_phase", pb.CancelPhaseRequest(**_ids(args), reason=args.reason))
    # "it ends CANCELLED" only while it has not yet (issue 35.3: "is CANCELLED; it ends CANCELLED").
    ending = "" if response.phase.status == pb.PhaseStatus.CANCELLED else "; it ends CANCELLED"
    return _say(args, response, _phase_text(response.phase, "cancel requested: ", ending))


async def _inject(client, args) -> int:
    from helix_runner_client import pb

    mode = pb.InjectMode.INTERRUPT_AND_SEND if args.interrupt else pb.InjectMode.QUEUE
    response = await client.call(
        "inject_message", pb.InjectMessageRequest(**_ids(args), text=args.text, mode=mode)
    )
    how = "after interrupting the current turn" if args.interrupt else "as the next user turn"
    return _say(
        args, response, f"injected message {response.message_uuid} {how} (event #{response.sequence})"
    )


# -- held calls --------------------------------------------------------------------------------


async def held_call_id(client, job_id: str, phase_id: str, tool_use_id: str | None) -> tuple[str, str]:
    """(tool_use_id, tool name) of the call to resolve: the one named, or the only held call."""
    from helix_runner_client import pb

    inspection = (
        await client.call("inspect_phase", pb.InspectPhaseRequest(job_id=job_id, phase_id=phase_id))
    ).inspection
    pending = [p.call for p in inspection.pending_calls if p.call is not None]
    if tool_use_id:
        name = next((c.name for c in pending if c.tool_use_id == tool_use_id), "")
        return tool_use_id, name
    if not pending:
        from helix_runner.cli.render import enum_name

        status = enum_name(inspection.phase.status) if inspection.phase else "?"
        raise CliError(
            f"no tool call is held in phase {phase_id} (the phase is {status}) [TOOL_CALL_NOT_HELD]", EXIT_REFUSED
        )
    if len(pending) > 1:
        listing = ", ".join(f"{c.tool_use_id} ({c.name})" for c in pending)
        raise CliError(f"{len(pending)} tool calls are held; name one: {listing}")
    return pending[0].tool_use_id, pending[0].name


async def _resolve(client, args, verb: str, **decision) -> int:
    from helix_runner_client import pb

    tool_use_id, _name = await held_call_id(client, args.job, args.phase, args.tool_use_id)
    response = await client.call(
        "resolve_tool_call", pb.ResolveToolCallRequest(**_ids(args), tool_use_id=tool_use_id, **decision)
    )
    call = response.tool_call
    from helix_runner.cli.render import enum_name

    text = f"{verb} {call.name or '?'} ({tool_use_id}); the call is {enum_name(call.status)}"
    return _say(args, response, text)


async def _approve(client, args) -> int:
    from helix_runner_client import pb

    if (args.tool_use_id or "").startswith(EGRESS_HOLD_PREFIX):
        decision = {"once": pb.EgressHoldDecision.APPROVE_ONCE, "phase": pb.EgressHoldDecision.APPROVE_PHASE,
                    "project": pb.EgressHoldDecision.APPROVE_PROJECT}[args.scope]
        return await _resolve_egress(client, args, decision, f"approved ({args.scope})")
    return await _resolve(client, args, "approved", approve=pb.ApproveDecision())


async def _deny(client, args) -> int:
    from helix_runner_client import pb

    if (args.tool_use_id or "").startswith(EGRESS_HOLD_PREFIX):
        return await _resolve_egress(client, args, pb.EgressHoldDecision.DENY, "denied", reason=args.message)
    return await _resolve(client, args, "denied", deny=pb.DenyDecision(message=args.message))


# Network requests a breakpoint holds have ids of their own (phases/egress_holds.py).
EGRESS_HOLD_PREFIX = "eg-"


async def _resolve_egress(client, args, decision, verb: str, reason: str = "") -> int:
    from helix_runner_client import pb

    response = await client.call("resolve_egress_hold", pb.ResolveEgressHoldRequest(
        **_ids(args), hold_id=args.tool_use_id, decision=decision, reason=reason))
    return _say(args, response, f"{verb} the network request to {response.destination} ({args.tool_use_id})")


def parse_input_json(spec: str) -> str:
    """``--input``: a JSON object inline or ``@file``; returned compact. Bad JSON is a usage error."""
    if spec.startswith("@"):
        try:
            text = Path(spec[1:]).expanduser().read_text()
        except OSError as exc:
            raise CliError(f"cannot read the input file {spec[1:]}: {exc.strerror or exc}") from None
    else:
        text = spec
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise CliError(f"--input is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise CliError("--input must be a JSON object (the tool's input)")
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


async def _edit(client, args) -> int:
    from helix_runner_client import pb

    input_json = parse_input_json(args.input)
    return await _resolve(client, args, "edited", edit=pb.EditDecision(input_json=input_json))


# -- breakpoints -------------------------------------------------------------------------------


async def _break_add(client, args) -> int:
    from helix_runner_client import pb

    from helix_runner.cli.render import describe_breakpoint

    bp = pb.Breakpoint(breakpoint_id=args.breakpoint_id, once=args.once)
    if args.tool is not None:
        bp.tool_name = args.tool
    elif args.pattern is not None:
        bp.input_pattern = pb.InputPatternCondition(regex=args.pattern, tool_name=args.pattern_tool)
    elif args.cost is not None:
        bp.cost_threshold_usd = args.cost
    else:
        bp.turn_count = args.turn
    response = await client.call("add_breakpoint", pb.AddBreakpointRequest(**_ids(args), breakpoint=bp))
    added = response.breakpoint
    return _say(args, response, f"breakpoint {added.breakpoint_id} added: {describe_breakpoint(added)}")


async def _break_ls(client, args) -> int:
    from helix_runner_client import pb
    from rich.table import Table

    from helix_runner.cli.render import describe_breakpoint

    response = await client.call("list_breakpoints", pb.ListBreakpointsRequest(**_ids(args)))
    if args.json:
        print_json(response.to_dict(include_default_values=True))
        return EXIT_OK
    console = make_console()
    if not response.breakpoints:
        console.print(f"no breakpoints in phase {args.phase}")
        return EXIT_OK
    table = Table(box=None, header_style="bold")
    for column in ("ID", "CONDITION", "HITS"):
        table.add_column(column)
    for bp in response.breakpoints:
        table.add_row(bp.breakpoint_id, describe_breakpoint(bp), str(bp.hit_count))
    console.print(table)
    return EXIT_OK


async def _break_rm(client, args) -> int:
    from helix_runner_client import pb

    from helix_runner.cli.render import describe_breakpoint

    response = await client.call(
        "remove_breakpoint", pb.RemoveBreakpointRequest(**_ids(args), breakpoint_id=args.breakpoint_id)
    )
    return _say(
        args,
        response,
        f"breakpoint {args.breakpoint_id} removed ({describe_breakpoint(response.breakpoint)})",
    )


# -- inspect -----------------------------------------------------------------------------------

INSPECT_SECTIONS = ("all", "status", "held", "events", "context", "breakpoints", "cost", "tools")


async def _inspect(client, args) -> int:
    from helix_runner_client import pb

    want_context = args.what in ("all", "context")
    response = await client.call(
        "inspect_phase", pb.InspectPhaseRequest(**_ids(args), include_context_usage=want_context)
    )
    if args.json:
        print_json(response.to_dict(include_default_values=True))
        return EXIT_OK
    from helix_runner.cli.read import inspection_renderables

    events = None
    if args.what in ("all", "events") and response.inspection.phase is not None:
        events = await recent_events(client, args.job, args.phase, response.inspection.phase.last_sequence)
    console = make_console()
    for renderable in inspection_renderables(response.inspection, args.what, events):
        console.print(renderable, soft_wrap=True)
    return EXIT_OK


RECENT_EVENTS = 20


async def recent_events(client, job_id: str, phase_id: str, last_sequence: int) -> list:
    """The phase's last ``RECENT_EVENTS`` events up to ``last_sequence``, whole (WatchPhase), so
    ``inspect`` prints them with the lines `watch` prints."""
    import asyncio

    events: list = []
    if last_sequence <= 0:
        return events
    async with asyncio.timeout(client.timeout), client.watch_phase(
        job_id, phase_id, max(0, last_sequence - RECENT_EVENTS)
    ) as stream:
        async for event in stream:
            events.append(event)
            if event.sequence >= last_sequence:
                break
    return events
