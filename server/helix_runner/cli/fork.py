"""Fork and rewind verbs: ``fork``, ``rewind``, ``checkpoints`` (docs/fork-and-rewind.md).

``fork JOB PHASE --at TOOL_USE_ID`` starts a new phase of the job from the checkpoint after that call
(``--turn N``: the end of model turn N; ``--checkpoint N``: by number), optionally with the call
denied or edited, a message injected, another model; ``rewind`` takes a paused or held phase back to a
checkpoint in place; ``checkpoints`` lists a phase's. Each is one call of the public API.
"""

from __future__ import annotations

import argparse
from typing import Any

from helix_runner.cli.common import (
    EXIT_CODES_HELP,
    EXIT_OK,
    CliError,
    add_connection_args,
    add_json_flag,
    make_console,
    print_json,
    with_client,
)

_KINDS = {1: "start", 2: "tool call", 3: "turn end"}
_WORKSPACES = {1: "none", 2: "tree", 3: "commit"}


def _point_args(p: argparse.ArgumentParser) -> None:
    at = p.add_mutually_exclusive_group(required=True)
    at.add_argument("--at", metavar="TOOL_USE_ID", help="after this tool call")
    at.add_argument("--turn", type=int, metavar="N", help="at the end of model turn N (1-based)")
    at.add_argument("--checkpoint", type=int, metavar="N", help="by checkpoint number (see `checkpoints`)")
    change = p.add_mutually_exclusive_group()
    change.add_argument("--deny", metavar="REASON", help="deny the --at call instead: the model sees REASON")
    change.add_argument("--edit", metavar="JSON|@FILE", help="run the --at call with this input instead")
    change.add_argument("--inject", metavar="TEXT", help="the message the model gets at the point")
    p.add_argument("--conversation-only", action="store_true",
                   help="a phase whose files were not kept (no git repository): fork or rewind its conversation")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "fork", help="start a new phase from a checkpoint of a phase (its session and files as they were)",
        description="Starts a new phase of JOB from a checkpoint of PHASE (running, paused or ended): its "
        "CLI resumes PHASE's session cut there under a new session id, in a new worktree at that "
        "checkpoint's files. PHASE is not touched. Watch the fork with `helix-runner watch JOB NEW`.",
        epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("job", metavar="JOB")
    p.add_argument("phase", metavar="PHASE")
    _point_args(p)
    p.add_argument("--model", default="", help="another model for the fork")
    p.add_argument("--as", dest="new_phase_id", default="", metavar="NEW", help="the fork's phase id (default: generated)")
    p.add_argument("--no-breakpoints", action="store_true", help="start the fork without the phase's breakpoints")
    p.add_argument("--mcp-config", default="", metavar="JSON|@FILE",
                   help="the phase's mcp_config again (the server does not keep it: it may hold secrets)")
    p.add_argument("--settings", default="", metavar="JSON|@FILE", help="the phase's settings again (see --mcp-config)")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="a value of the phase's env again (repeatable; see --mcp-config)")
    add_json_flag(p)
    add_connection_args(p)
    p.set_defaults(handler=with_client(_fork))

    p = sub.add_parser(
        "rewind", help="take a paused or held phase back to a checkpoint in place",
        description="Stops the CLI of a paused (or held) PHASE, puts its files back as they were at the "
        "checkpoint and resumes its session there. The rewound part stays in the history, marked.",
        epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("job", metavar="JOB")
    p.add_argument("phase", metavar="PHASE")
    _point_args(p)
    add_json_flag(p)
    add_connection_args(p)
    p.set_defaults(handler=with_client(_rewind))

    p = sub.add_parser("checkpoints", help="list a phase's checkpoints (what fork and rewind go back to)",
                       epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("job", metavar="JOB")
    p.add_argument("phase", metavar="PHASE")
    add_json_flag(p)
    add_connection_args(p)
    p.set_defaults(handler=with_client(_checkpoints))


def fork_point(args: argparse.Namespace) -> Any:
    """The API's ForkPoint for the verb's flags (a usage error for what cannot go together)."""
    from helix_runner_client import pb

    from helix_runner.cli.control import parse_input_json

    point = pb.ForkPoint(inject=args.inject or "")
    if args.at:
        point.tool_use_id = args.at
    elif args.turn is not None:
        point.turn = args.turn
    else:
        point.checkpoint = args.checkpoint
    if (args.deny is not None or args.edit is not None) and not args.at:
        raise CliError("--deny and --edit decide the call named by --at")
    if args.deny is not None:
        point.deny = pb.DenyDecision(message=args.deny)
    elif args.edit is not None:
        point.edit = pb.EditDecision(input_json=parse_input_json(args.edit))
    return point


def describe_checkpoint(c: Any) -> str:
    """``checkpoint 3 (after Bash toolu_..., turn 2)``."""
    if c.tool_use_id:
        return f"checkpoint {c.number} (after {c.tool_name} {c.tool_use_id}, turn {c.turn})"
    return f"checkpoint {c.number} ({_KINDS.get(int(c.kind), 'start')}, turn {c.turn})"


async def _fork(client, args) -> int:
    from helix_runner_client import pb

    from helix_runner.cli.control import parse_input_json

    env = {}
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise CliError(f"--env {item!r}: expected NAME=VALUE")
        env[name] = value
    request = pb.ForkPhaseRequest(job_id=args.job, phase_id=args.phase, point=fork_point(args),
                                  new_phase_id=args.new_phase_id, model=args.model,
                                  clear_breakpoints=args.no_breakpoints, conversation_only=args.conversation_only,
                                  mcp_config=parse_input_json(args.mcp_config) if args.mcp_config else "",
                                  settings=parse_input_json(args.settings) if args.settings else "", env=env)
    response = await client.call("fork_phase", request)
    if args.json:
        print_json(response.to_dict())
        return EXIT_OK
    fork = response.phase
    make_console().print(
        f"forked {args.job}/{args.phase} at {describe_checkpoint(response.checkpoint)} into "
        f"{fork.job_id}/{fork.phase_id}; watch it: helix-runner watch {fork.job_id} {fork.phase_id}", soft_wrap=True)
    return EXIT_OK


async def _rewind(client, args) -> int:
    from helix_runner_client import pb

    request = pb.RewindPhaseRequest(job_id=args.job, phase_id=args.phase, point=fork_point(args),
                                    conversation_only=args.conversation_only)
    response = await client.call("rewind_phase", request)
    if args.json:
        print_json(response.to_dict())
        return EXIT_OK
    make_console().print(f"rewound {args.job}/{args.phase} to {describe_checkpoint(response.checkpoint)} "
                         f"(event {response.sequence}); it resumes there", soft_wrap=True)
    return EXIT_OK


async def _checkpoints(client, args) -> int:
    from helix_runner_client import pb
    from rich.table import Table

    response = await client.call("inspect_phase", pb.InspectPhaseRequest(job_id=args.job, phase_id=args.phase))
    checkpoints = response.inspection.checkpoints
    if args.json:
        print_json({"checkpoints": [c.to_dict() for c in checkpoints]})
        return EXIT_OK
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name in ("N", "KIND", "TURN", "TOOL", "TOOL_USE_ID", "EVENT", "FILES", "NOTE"):
        table.add_column(name)
    for c in checkpoints:
        ws = c.workspace
        files = _WORKSPACES.get(int(ws.kind), "?")
        if ws.commit or ws.tree:
            files += f" {(ws.commit or ws.tree)[:10]}"
        note = "rewound" if c.rewound else (f"same as {ws.same_as}" if ws.same_as is not None else "")
        table.add_row(str(c.number), _KINDS.get(int(c.kind), "?"), str(c.turn or ""), c.tool_name or "-",
                      c.tool_use_id or "-", str(c.sequence or ""), files, note or ws.reason)
    make_console().print(table)
    return EXIT_OK
