"""``whoami`` and ``audit``: who the server takes this caller for, and the audit trail (docs/tenancy.md)."""

from __future__ import annotations

import argparse

from helix_runner.cli.common import (
    EXIT_CODES_HELP,
    EXIT_OK,
    add_connection_args,
    add_json_flag,
    make_console,
    print_json,
    with_client,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = _parser(sub, "whoami", "who the server takes you for, and what you may do in which project",
                "Prints the principal the server maps your credentials to (a named token, a JWT's subject, a "
                "client certificate's subject, or admin: the single token of older setups) and its roles per "
                "project (\"*\": every project).")
    p.set_defaults(handler=with_client(_whoami))

    p = _parser(sub, "audit", "the audit trail: who did what, when, from where, and how it ended",
                "Lists actions taken through the API, newest first: runs, control (pause, resume, cancel, "
                "inject, interrupt, breakpoints, decisions on held calls), webhooks and secrets, refused ones "
                "included. Needs the admin role on the project (on every project without --project).")
    p.add_argument("--project", default="", help="only this project's entries")
    p.add_argument("--job", default="", help="only the entries about this job")
    p.add_argument("--principal", default="", help="only this principal's entries")
    p.add_argument("--limit", type=int, default=50, help="at most this many entries (default 50)")
    p.set_defaults(handler=with_client(_audit))

    p = _parser(sub, "quota", "a project's spend quota and what it spent; --day/--month set it (admin)",
                "Prints a project's spend caps per UTC day and month and what its phases created today and this "
                "month cost. With --day or --month, sets them first (0: no cap; needs the admin role): a new "
                "phase of a project at a cap is refused, a running one pauses before its next tool call.")
    p.add_argument("--project", default="", help="the project (default: the default project)")
    p.add_argument("--day", type=float, default=None, metavar="USD", help="set the cap per UTC day")
    p.add_argument("--month", type=float, default=None, metavar="USD", help="set the cap per UTC month")
    p.set_defaults(handler=with_client(_quota))


def _parser(sub, name: str, help_: str, description: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_, description=description, epilog=EXIT_CODES_HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_json_flag(p)
    add_connection_args(p)
    return p


async def _whoami(client, args) -> int:
    principal = await client.who_am_i()
    if args.json:
        print_json(principal.to_dict(include_default_values=True))
        return EXIT_OK
    console = make_console()
    console.print(f"{principal.name} ({principal.source})", markup=False)
    for grant in principal.grants:
        console.print(f"  {grant.project_id}: {', '.join(grant.roles)}", markup=False)
    return EXIT_OK


async def _audit(client, args) -> int:
    from rich.table import Table

    from helix_runner.cli.render import fmt_clock, one_line

    entries: list = []
    token = ""
    while len(entries) < args.limit:
        page = await client.list_audit_entries(project_id=args.project, job_id=args.job, principal=args.principal,
                                               page_size=min(args.limit - len(entries), 1000), page_token=token)
        entries.extend(page.entries)
        token = page.next_page_token
        if not token:
            break
    if args.json:
        print_json([e.to_dict(include_default_values=True) for e in entries])
        return EXIT_OK
    console = make_console()
    if not entries:
        console.print("no audit entries")
        return EXIT_OK
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("TIME", "PRINCIPAL", "ACTION", "PROJECT", "JOB / PHASE", "TARGET", "OUTCOME", "DETAIL"):
        table.add_column(column, no_wrap=column != "DETAIL", overflow="ellipsis")
    for e in entries:
        where = f"{e.job_id}/{e.phase_id}".strip("/") or "-"
        table.add_row(fmt_clock(e.time), one_line(e.principal, 40), e.action, one_line(e.project_id, 30),
                      one_line(where, 40), one_line(e.target, 40) or "-", e.outcome, one_line(e.detail, 80))
    console.print(table)
    return EXIT_OK


async def _quota(client, args) -> int:
    if args.day is not None or args.month is not None:
        current = await client.get_project_quota(args.project)
        quota = await client.set_project_quota(
            args.project, spend_usd_per_day=current.spend_usd_per_day if args.day is None else args.day,
            spend_usd_per_month=current.spend_usd_per_month if args.month is None else args.month)
    else:
        quota = await client.get_project_quota(args.project)
    if args.json:
        print_json(quota.to_dict(include_default_values=True))
        return EXIT_OK

    def cap(value: float) -> str:
        return f"${value:.4f}" if value > 0 else "no cap"

    console = make_console()
    console.print(f"project {quota.project_id}", markup=False)
    console.print(f"  today:      ${quota.spent_today_usd:.4f} of {cap(quota.spend_usd_per_day)}", markup=False)
    console.print(f"  this month: ${quota.spent_this_month_usd:.4f} of {cap(quota.spend_usd_per_month)}",
                  markup=False)
    if quota.updated_by:
        console.print(f"  set by {quota.updated_by}", markup=False)
    return EXIT_OK
