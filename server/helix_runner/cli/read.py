"""Read verbs: ``jobs``, ``phases``, ``sessions``, ``costs``, ``tools``, ``status`` (tables, or ``--json``)."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
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

_STATUS_NAMES = (
    "PENDING",
    "RUNNING",
    "PAUSING",
    "PAUSED",
    "AWAITING_APPROVAL",
    "SUCCEEDED",
    "FAILED",
    "INCOMPLETE",
    "TIMED_OUT",
    "CANCELLED",
    "INTERRUPTED",
)
_ACTIVE = ("PENDING", "RUNNING", "PAUSING", "PAUSED", "AWAITING_APPROVAL")


def _parser(sub, name: str, help_: str, description: str | None = None) -> argparse.ArgumentParser:
    p = sub.add_parser(
        name,
        help=help_,
        description=description or help_,
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_json_flag(p)
    add_connection_args(p)
    return p


def register(sub: argparse._SubParsersAction) -> None:
    p = _parser(
        sub, "jobs", "list jobs, newest first (status, started, duration, cost, tool calls, current tool)"
    )
    p.add_argument("--project", default="", help="only jobs of this project")
    p.add_argument(
        "--status",
        action="append",
        default=[],
        type=_status_arg,
        metavar="STATUS",
        help="only jobs whose latest phase has this status (repeatable; 'active' for every "
        "running, pausing, paused or awaiting status)",
    )
    p.add_argument("--limit", type=int, default=50, help="at most this many jobs (default 50; 0: all)")
    p.set_defaults(handler=with_client(_jobs))

    p = _parser(
        sub, "phases", "list a job's phases (status, started, duration, cost, tool calls, current tool)"
    )
    p.add_argument("job", metavar="JOB")
    p.set_defaults(handler=with_client(_phases))

    p = _parser(
        sub, "sessions", "list the phases running now, across jobs (with held calls and current tool)"
    )
    p.add_argument("--project", default="", help="only this project")
    p.set_defaults(handler=with_client(_sessions))

    p = _parser(
        sub,
        "costs",
        "cost totals of a project or job: CLI-reported next to computed",
        "Prints the cost totals of a project (--project) or a job (--job): the CLI-reported "
        "figure next to the one the server computed from token usage, and tokens by kind. "
        "--by model (default) breaks them down per model, --by phase per phase.",
    )
    scope = p.add_mutually_exclusive_group(required=True)
    scope.add_argument("--project", help="a project's totals")
    scope.add_argument("--job", help="a job's totals")
    p.add_argument("--by", choices=("model", "phase"), default="model", help="breakdown (default model)")
    p.set_defaults(handler=with_client(_costs))

    p = _parser(sub, "tools", "per-tool statistics of a job or phase: calls, failures, mean and p95 duration")
    p.add_argument("job", metavar="JOB")
    p.add_argument("phase", nargs="?", default="", metavar="PHASE")
    p.add_argument(
        "--calls", action="store_true", help="also list every call (start, status, duration, input)"
    )
    p.add_argument(
        "--failed", action="store_true", help="with --calls: only calls that failed or never finished"
    )
    p.set_defaults(handler=with_client(_tools))


    p = _parser(
        sub,
        "egress",
        "what a phase reached through the egress proxy: each connection let through and each refusal",
        "Lists the phase's egress events, oldest first: each connection the proxy let through "
        "(destination, the method and path of its last request where the proxy saw them, bytes "
        "each way, how long it was open) and each destination or request it refused, with why.",
    )
    p.add_argument("job", metavar="JOB")
    p.add_argument("phase", metavar="PHASE")
    p.add_argument("--refused", action="store_true", help="only what was refused or denied")
    p.set_defaults(handler=with_client(_egress))

    p = _parser(
        sub,
        "status",
        "how the server runs phases: its sandbox's layers (on, or off and why), containment, refusals",
        "Prints the per-phase sandbox the server found and probed at start: its setting (auto, "
        "required, off), each layer (namespaces, network, landlock, seccomp) with what it does on "
        "this host or why it is off, the host ports phases may reach; the containment mode; and, "
        "under sandbox = required with a layer missing, the refusal every phase gets.",
    )
    p.set_defaults(handler=with_client(_status))


async def egress_events(client, job_id: str, phase_id: str) -> list:
    """The phase's egress events (connections let through, refusals) up to its last event so far."""
    import asyncio

    from helix_runner_client import pb

    job = await client.get_job(job_id)
    phase = next((p for p in job.phases if p.phase_id == phase_id), None)
    if phase is None:
        raise CliError(f"job {job_id} has no phase {phase_id}", EXIT_REFUSED)
    kinds = (pb.GatewayEventKind.EGRESS_CONNECTION, pb.GatewayEventKind.EGRESS_REFUSED,
             pb.GatewayEventKind.EGRESS_HELD, pb.GatewayEventKind.EGRESS_APPROVED, pb.GatewayEventKind.EGRESS_DENIED)
    found: list = []
    if phase.last_sequence <= 0:
        return found
    async with asyncio.timeout(max(client.timeout, 60)), client.watch_phase(job_id, phase_id, 0) as stream:
        async for event in stream:
            gateway = event.gateway
            if gateway is not None and gateway.kind in kinds:
                found.append(event)
            if event.sequence >= phase.last_sequence:
                break
    return found


async def _egress(client, args) -> int:
    from helix_runner_client import pb

    from helix_runner.cli.render import fmt_clock, fmt_duration, one_line

    events = await egress_events(client, args.job, args.phase)
    if args.refused:
        events = [e for e in events if e.gateway.kind in (pb.GatewayEventKind.EGRESS_REFUSED,
                                                          pb.GatewayEventKind.EGRESS_DENIED)]
    if args.json:
        print_json([_dict(e) for e in events])
        return EXIT_OK
    console = make_console()
    if not events:
        console.print("nothing refused" if args.refused else
                      "no egress: the phase reached nothing through the egress proxy")
        return EXIT_OK
    words = {pb.GatewayEventKind.EGRESS_CONNECTION: "allowed", pb.GatewayEventKind.EGRESS_HELD: "held",
             pb.GatewayEventKind.EGRESS_APPROVED: "approved", pb.GatewayEventKind.EGRESS_DENIED: "denied"}
    table = _table("TIME", "DECISION", "DESTINATION", "REQUEST", "SENT", "RECEIVED", "OPEN", "REASON")
    for event in events:
        g = event.gateway
        allowed = g.kind == pb.GatewayEventKind.EGRESS_CONNECTION
        request = one_line(f"{g.method} {g.path}".strip(), 60) or "-"
        decision = words.get(g.kind, f"refused ({g.http_status})")
        if g.actor:
            decision += f" by {g.actor}"
        table.add_row(
            fmt_clock(event.receive_time),
            one_line(decision, 60),
            one_line(g.destination, 80),
            request,
            str(g.bytes_sent) if allowed else "-",
            str(g.bytes_received) if allowed else "-",
            fmt_duration(g.duration) if allowed else "-",
            one_line(g.rule if allowed else (g.message or g.rule), 120),
        )
    console.print(table)
    return EXIT_OK


def _status_arg(text: str) -> str:
    name = text.strip().upper().removeprefix("PHASE_STATUS_")
    if name == "ACTIVE" or name in _STATUS_NAMES:
        return name
    raise argparse.ArgumentTypeError(f"unknown status {text!r} (one of {', '.join(_STATUS_NAMES)}, active)")



# -- helpers -----------------------------------------------------------------------------------


def _table(*columns: str):
    from rich.table import Table

    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in columns:
        table.add_column(column, no_wrap=column not in ("REASON", "INPUT"), overflow="ellipsis")
    return table


def _duration(start: datetime | None, end: datetime | None, active: bool) -> str:
    from helix_runner.cli.render import fmt_seconds

    if start is None:
        return "-"
    stop = end if end is not None else (datetime.now(UTC) if active else None)
    return fmt_seconds((stop - start).total_seconds()) if stop is not None else "-"


def _tool_counts(stats) -> str:
    count = sum(s.count for s in stats)
    failed = sum(s.failures for s in stats)
    return f"{count} ({failed}✗)" if failed else str(count)


def _current_tool(phase) -> str:
    from helix_runner_client import pb

    call = phase.current_tool
    if call is None or not call.name:
        return ""
    return f"{call.name} (held)" if call.status == pb.ToolCallStatus.HELD else call.name


def _phase_cost(cost) -> str:
    from helix_runner.cli.render import fmt_usd

    if cost is None:
        return "-"
    if cost.reported_usd is not None:
        return fmt_usd(cost.reported_usd)
    return fmt_usd(cost.computed_usd) + ("*" if cost.computed_usd else "")


def _totals_cost(totals) -> str:
    """A job's cost as a phase's: the CLI-reported figure, else the computed one marked "*"."""
    from helix_runner.cli.render import fmt_usd, reported_total

    if totals is None:
        return "-"
    reported = reported_total(totals)
    if reported is not None:
        return fmt_usd(reported)
    return fmt_usd(totals.computed_usd) + ("*" if totals.computed_usd else "")


def _is_active(status) -> bool:
    from helix_runner.cli.render import FINAL_STATUSES

    return status not in FINAL_STATUSES


def _dict(message) -> dict[str, Any]:
    return message.to_dict(include_default_values=True)


# -- verbs -------------------------------------------------------------------------------------


async def _jobs(client, args) -> int:
    from helix_runner_client import pb

    from helix_runner.cli.render import fmt_local, status_text

    names = set(args.status)
    if "ACTIVE" in names:
        names = (names - {"ACTIVE"}) | set(_ACTIVE)
    statuses = [pb.PhaseStatus[n] for n in sorted(names)]
    jobs = []
    async for job in client.iter_jobs(args.project, statuses):
        jobs.append(job)
        if args.limit and len(jobs) >= args.limit:
            break
    if args.json:
        print_json([_dict(j) for j in jobs])
        return EXIT_OK
    console = make_console()
    if not jobs:
        console.print("no jobs" + (f" in project {args.project}" if args.project else ""))
        return EXIT_OK
    table = _table(
        "JOB", "PROJECT", "STATUS", "PHASES", "STARTED", "DURATION", "COST", "TOOLS", "CURRENT TOOL"
    )
    for job in jobs:
        starts = [p.start_time or p.create_time for p in job.phases if (p.start_time or p.create_time)]
        ends = [p.end_time for p in job.phases if p.end_time]
        active = _is_active(job.status)
        start = min(starts) if starts else job.create_time
        end = None if active else (max(ends) if ends else job.update_time)
        current = next((_current_tool(p) for p in reversed(job.phases) if _current_tool(p)), "")
        table.add_row(
            job.job_id,
            job.project_id or "-",
            status_text(job.status),
            str(len(job.phases)),
            fmt_local(start),
            _duration(start, end, active),
            _totals_cost(job.cost),
            _tool_counts([s for p in job.phases for s in p.tool_stats]),
            current,
        )
    console.print(table)
    _cost_footnote(console, [p for job in jobs for p in job.phases])
    return EXIT_OK


async def _phases(client, args) -> int:
    from helix_runner.cli.render import fmt_local, status_text

    job = await client.get_job(args.job)
    if args.json:
        print_json(_dict(job))
        return EXIT_OK
    from helix_runner.cli.render import lineage

    console = make_console()
    table = _table(
        "PHASE", "STATUS", "STARTED", "DURATION", "COST", "TOOLS", "CURRENT TOOL", "MODEL", "REASON"
    )
    # Forks under the phase they came from, as a small tree (docs/fork-and-rewind.md).
    for phase, branch in lineage(list(job.phases)):
        active = _is_active(phase.status)
        origin = phase.forked_from
        table.add_row(
            branch + phase.phase_id + (f" (from {origin.phase_id}@{origin.checkpoint})" if origin else ""),
            status_text(phase.status),
            fmt_local(phase.start_time),
            _duration(phase.start_time, phase.end_time, active),
            _phase_cost(phase.cost),
            _tool_counts(phase.tool_stats),
            _current_tool(phase),
            phase.model or "-",
            phase.status_reason,
        )
    console.print(table)
    _cost_footnote(console, job.phases)
    return EXIT_OK


def _cost_footnote(console, phases) -> None:
    if any(p.cost is not None and p.cost.reported_usd is None and p.cost.computed_usd for p in phases):
        console.print("* computed from token usage (the CLI reported no cost yet)", style="dim")


async def _sessions(client, args) -> int:
    from helix_runner_client import pb

    from helix_runner.cli.render import status_text

    statuses = [pb.PhaseStatus[n] for n in _ACTIVE]
    rows = []
    async for job in client.iter_jobs(args.project, statuses):
        rows += [p for p in job.phases if _is_active(p.status)]
    if args.json:
        print_json([_dict(p) for p in rows])
        return EXIT_OK
    console = make_console()
    if not rows:
        console.print("no phase is running")
        return EXIT_OK
    table = _table("JOB", "PHASE", "STATUS", "ELAPSED", "CURRENT TOOL", "TOOLS", "COST", "EVENTS")
    for phase in rows:
        table.add_row(
            phase.job_id,
            phase.phase_id,
            status_text(phase.status),
            _duration(phase.start_time, None, True),
            _current_tool(phase),
            _tool_counts(phase.tool_stats),
            _phase_cost(phase.cost),
            str(phase.last_sequence),
        )
    console.print(table)
    _cost_footnote(console, rows)
    return EXIT_OK


async def _costs(client, args) -> int:
    from helix_runner.cli.render import enum_name, fmt_tokens, fmt_usd, plural, reported_total, status_text

    totals = await client.get_cost_totals(project_id=args.project or "", job_id=args.job or "")
    phases = []
    if args.by == "phase":
        if args.job:
            phases = list((await client.get_job(args.job)).phases)
        else:
            async for job in client.iter_jobs(args.project):
                phases += job.phases
    if args.json:
        data: dict[str, Any] = {"totals": _dict(totals)}
        if args.by == "phase":
            data["phases"] = [
                {
                    "jobId": p.job_id,
                    "phaseId": p.phase_id,
                    "status": enum_name(p.status),
                    "cost": _dict(p.cost) if p.cost else None,
                }
                for p in phases
            ]
        print_json(data)
        return EXIT_OK
    console = make_console()
    scope = f"job {args.job}" if args.job else f"project {args.project}"
    tokens = totals.tokens
    console.print(
        f"{scope}: {plural(totals.phase_count, 'phase')}, reported {fmt_usd(reported_total(totals))}, computed "
        f"{fmt_usd(totals.computed_usd)}"
        + (
            f", tokens {fmt_tokens(tokens.input_tokens)} in / {fmt_tokens(tokens.output_tokens)} out / "
            f"{fmt_tokens(tokens.cache_read_input_tokens)} cache read"
            if tokens
            else ""
        ),
        soft_wrap=True,
    )
    if totals.computed_only_phase_count:
        console.print(
            f"{plural(totals.computed_only_phase_count, 'phase')} ended without a result: computed figure only",
            style="yellow",
        )
    if totals.unpriced_models:
        console.print(
            f"no price known for {', '.join(totals.unpriced_models)}: missing from the computed figure",
            style="yellow",
        )
    if args.by == "model" and not totals.models:
        console.print("no per-model breakdown for this scope", style="dim")
        return EXIT_OK
    if args.by == "model":
        table = _table(
            "MODEL", "INPUT", "OUTPUT", "CACHE READ", "CACHE WRITE", "REPORTED", "COMPUTED", "PRICING"
        )
        for m in totals.models:
            t = m.tokens
            table.add_row(
                m.model,
                fmt_tokens(t.input_tokens),
                fmt_tokens(t.output_tokens),
                fmt_tokens(t.cache_read_input_tokens),
                fmt_tokens(t.cache_write_5m_input_tokens + t.cache_write_1h_input_tokens),
                fmt_usd(m.reported_usd),
                fmt_usd(m.computed_usd),
                enum_name(m.pricing_source).lower(),
            )
    else:
        table = _table("JOB", "PHASE", "STATUS", "REPORTED", "COMPUTED", "INPUT", "OUTPUT")
        for p in phases:
            c = p.cost
            t = c.tokens if c and c.tokens else None
            table.add_row(
                p.job_id,
                p.phase_id,
                status_text(p.status),
                fmt_usd(c.reported_usd if c else None),
                fmt_usd(c.computed_usd if c else None),
                fmt_tokens(t.input_tokens) if t else "-",
                fmt_tokens(t.output_tokens) if t else "-",
            )
    console.print(table)
    return EXIT_OK


async def _tools(client, args) -> int:
    from helix_runner.cli.render import enum_name, fmt_duration, fmt_local, one_line

    first = await client.list_tool_calls(
        args.job, args.phase, only_failed=args.failed and args.calls, page_size=1000 if args.calls else 1
    )
    stats = list(first.stats)
    calls = list(first.tool_calls) if args.calls else []
    token = first.next_page_token if args.calls else ""
    while token:
        page = await client.list_tool_calls(
            args.job, args.phase, only_failed=args.failed, page_size=1000, page_token=token
        )
        calls += page.tool_calls
        token = page.next_page_token
    if args.json:
        data: dict[str, Any] = {"stats": [_dict(s) for s in stats]}
        if args.calls:
            data["calls"] = [_dict(c) for c in calls]
        print_json(data)
        return EXIT_OK
    console = make_console()
    if not stats:
        console.print("no tool calls")
        return EXIT_OK
    table = _table("TOOL", "CALLS", "FAILED", "UNFINISHED", "MEAN", "P95", "TOTAL")
    for s in sorted(stats, key=lambda s: (-s.count, s.name)):
        table.add_row(
            s.name,
            str(s.count),
            str(s.failures),
            str(s.unfinished),
            fmt_duration(s.mean_duration),
            fmt_duration(s.p95_duration),
            fmt_duration(s.total_duration),
        )
    console.print(table)
    if args.calls:
        console.print()
        table = _table("STARTED", "PHASE", "TOOL", "STATUS", "DURATION", "INPUT")
        for c in calls:
            table.add_row(
                fmt_local(c.start_time),
                c.phase_id,
                c.name,
                enum_name(c.status).lower(),
                fmt_duration(c.duration),
                one_line(c.input_json, 80),
            )
        console.print(table)
    return EXIT_OK


# -- inspect (used by control.inspect) ---------------------------------------------------------


def inspection_renderables(inspection, what: str, events: list | None = None) -> list:
    """The sections of ``inspect`` as rich renderables; ``events``: the recent events, whole, shown
    with the lines `watch` prints (else the server's one-line summaries)."""
    from rich.text import Text

    from helix_runner.cli.render import (
        FINAL_STATUSES,
        enum_name,
        fmt_clock,
        fmt_duration,
        fmt_tokens,
        fmt_usd,
        held_call_text,
        line_of,
        one_line,
        plural,
        status_text,
    )

    out: list = []
    phase = inspection.phase
    everything = what == "all"
    if phase is None:
        raise CliError("the server returned no phase in the inspection")
    if everything or what == "status":
        out.append(line_of(
            f"phase {phase.phase_id} of job {phase.job_id}: ",
            status_text(phase.status),
            f" ({phase.status_reason})" if phase.status_reason else "",
        ))
        if phase.status in FINAL_STATUSES:
            # The live counters went with the run; what the result and the events keep (issue 22, item 14).
            result = phase.result
            calls = sum(s.count for s in phase.tool_stats)
            out.append(
                f"  ended; {plural(result.num_turns if result else 0, 'turn')}, "
                f"{plural(inspection.turn_count, 'turn result')}, {plural(calls, 'tool call')}, "
                f"last event #{phase.last_sequence}"
            )
        else:
            pause = (
                "hard-paused (process group stopped)"
                if inspection.hard_paused
                else ("pause requested" if inspection.paused else "not paused")
            )
            out.append(
                f"  {pause}; {plural(inspection.assistant_message_count, 'assistant message')}, "
                f"{plural(inspection.user_message_count, 'user line')}, "
                f"{plural(inspection.turn_count, 'turn result')}, last event #{phase.last_sequence}"
            )
        if phase.current_tool is not None and phase.current_tool.name:
            out.append(
                f"  current tool: {phase.current_tool.name} ({enum_name(phase.current_tool.status).lower()})"
            )
        sandbox = inspection.sandbox
        if sandbox is not None and sandbox.setting:
            layers = ", ".join(f"{x.name} {'on' if x.active else 'OFF'}" for x in sandbox.layers)
            out.append(f"  sandbox {sandbox.setting}: {layers} (helix-runner status: why a layer is off)")
    if everything or what == "held":
        out.append(Text("held tool calls:", style="bold"))
        if not inspection.pending_calls:
            out.append("  none")
        for pending in inspection.pending_calls:
            out.append(held_call_text(pending, indent="  "))
    if everything or what == "breakpoints":
        from helix_runner.cli.render import describe_breakpoint

        out.append(Text("breakpoints:", style="bold"))
        if not inspection.breakpoints:
            out.append("  none")
        for bp in inspection.breakpoints:
            out.append(f"  {bp.breakpoint_id}  {describe_breakpoint(bp)}  hits {bp.hit_count}")
    if everything or what == "context":
        usage = inspection.context_usage
        out.append(Text("context:", style="bold"))
        out.append(
            f"  {fmt_tokens(usage.total_tokens)} of {fmt_tokens(usage.max_tokens)} tokens "
            f"({usage.percentage:.1f}%)"
            if usage is not None and usage.max_tokens
            else "  not available (the CLI did not answer, or the phase is not running)"
        )
    if everything or what == "cost":
        cost = phase.cost
        out.append(Text("cost:", style="bold"))
        if cost is None:
            out.append("  none yet")
        else:
            t = cost.tokens
            out.append(
                f"  reported {fmt_usd(cost.reported_usd)}, computed {fmt_usd(cost.computed_usd)}"
                + (
                    f"; tokens {fmt_tokens(t.input_tokens)} in, {fmt_tokens(t.output_tokens)} out, "
                    f"{fmt_tokens(t.cache_read_input_tokens)} cache read"
                    if t
                    else ""
                )
            )
    if everything or what == "tools":
        out.append(Text("tools:", style="bold"))
        if not phase.tool_stats:
            out.append("  none yet")
        for s in phase.tool_stats:
            out.append(
                f"  {s.name}: {plural(s.count, 'call')}, {s.failures} failed, {s.unfinished} unfinished, "
                f"p95 {fmt_duration(s.p95_duration)}"
            )
    if everything or what == "events":
        out.append(Text("recent events:", style="bold"))
        if events is not None:
            from helix_runner.cli.render import event_line

            out += [Text("  ").append_text(event_line(event)) for event in events]
        else:
            for ref in inspection.recent_events[-20:]:
                out.append(line_of(
                    f"  {fmt_clock(ref.receive_time)} #{ref.sequence:<5} {ref.kind:<18} {one_line(ref.summary, 120)}"
                ))
    # Every section's text passes through the one escaping function (the strings hold tool names,
    # reasons, patterns: what a phase or a caller wrote).
    return [line_of(x) if isinstance(x, str) else x for x in out]


async def _status(client, args) -> int:
    from helix_runner.cli.render import enum_name

    status = await client.get_server_status()
    if args.json:
        print_json(_dict(status))
        return EXIT_OK
    console = make_console()
    sandbox = status.sandbox
    console.print(f"helix-runner {status.version or '(version unknown)'}", soft_wrap=True)
    console.print(f"sandbox: {sandbox.setting if sandbox else 'unknown'}", soft_wrap=True)
    for layer in sandbox.layers if sandbox else ():  # lines, not a table: the details are long
        console.print(f"  {layer.name:<10}  {'on' if layer.active else 'OFF':<3}  {layer.detail}", soft_wrap=True)
    ports = ", ".join(str(p) for p in sandbox.egress_ports) if sandbox and sandbox.egress_ports else "none"
    console.print(f"host loopback ports phases may reach: {ports}", soft_wrap=True)
    console.print(f"containment: {enum_name(status.containment_mode).lower().replace('_', '-')}", soft_wrap=True)
    if status.refusal:
        console.print(f"every phase is refused: {status.refusal}", soft_wrap=True)
    return EXIT_OK
