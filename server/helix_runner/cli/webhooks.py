"""The ``webhooks`` verb: create, list and delete subscriptions, and read the delivery log.

Each subverb is one call of the public API (CreateWebhook, ListWebhooks, DeleteWebhook,
ListWebhookDeliveries) through the Python client. A secret the server makes is printed once, by
``create``, and never again; ``--secret-file`` gives your own (``whsec_`` + base64).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from helix_runner.cli.common import (
    EXIT_CODES_HELP,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    add_connection_args,
    add_json_flag,
    make_console,
    print_json,
    with_client,
)

EVENTS = ("phase.finished", "phase.awaiting_approval", "phase.cost_threshold", "phase.retry_scheduled",
          "queue.full", "job.finished", "quota.exceeded")
STATES = ("pending", "delivered", "dead", "cancelled")
DESCRIPTION = """\
Webhooks tell a URL when a phase needs someone: it finished (optionally only some statuses), a tool
call waits for approval at a breakpoint, its cost crossed a threshold, a retry was scheduled, a
full queue refused a phase, or a job finished. Deliveries are signed Standard Webhooks
(webhook-id, webhook-timestamp, webhook-signature), retried with backoff until they are delivered
or given up (the dead letter).

examples:
  helix-runner webhooks create --url https://hooks.example.com/runner --event phase.awaiting_approval \\
      --event phase.finished --status FAILED --status TIMED_OUT
  helix-runner webhooks create --url https://hooks.slack.com/services/T/B/X --format slack --event job.finished
  helix-runner webhooks list
  helix-runner webhooks deliveries --state dead
  helix-runner webhooks delete wh_0123456789abcdef0123"""


def register(sub: argparse._SubParsersAction) -> None:
    top = sub.add_parser("webhooks", help="subscribe URLs to signed notifications; read the delivery log",
                         description=DESCRIPTION, epilog=EXIT_CODES_HELP,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = top.add_subparsers(dest="webhooks_command", required=True, metavar="SUBVERB",
                               parser_class=type(top))

    def verb(name: str, help_: str) -> argparse.ArgumentParser:
        p = verbs.add_parser(name, help=help_, description=help_, epilog=EXIT_CODES_HELP,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        add_json_flag(p)
        add_connection_args(p)
        return p

    p = verb("create", "subscribe a URL (prints the new webhook, and its secret once if the server made it)")
    p.add_argument("--url", required=True, help="https:// (or http://) URL the deliveries are POSTed to")
    p.add_argument("--event", action="append", required=True, choices=EVENTS, metavar="EVENT",
                   help=f"what to be told about (repeatable): {', '.join(EVENTS)}")
    p.add_argument("--project", default="", help="only this project's phases (default: every project)")
    p.add_argument("--status", action="append", default=[], metavar="STATUS",
                   help="phase.finished / job.finished only for this final status (repeatable; e.g. FAILED)")
    p.add_argument("--cost-threshold", type=float, metavar="USD", help="phase.cost_threshold's threshold in USD")
    p.add_argument("--format", choices=("standard", "slack"), default="standard",
                   help="the body: Standard Webhooks JSON (default) or a Slack incoming-webhook message")
    p.add_argument("--description", default="", help="a note for people")
    p.add_argument("--secret-file", type=Path, metavar="FILE",
                   help="your signing secret (whsec_ + base64, one line); default: the server makes one")
    p.set_defaults(handler=with_client(_create))

    p = verb("list", "list the subscriptions (never their secrets)")
    p.add_argument("--project", default="", help="only this project's and the server-wide ones")
    p.set_defaults(handler=with_client(_list))

    p = verb("delete", "delete a subscription made through the API (its pending deliveries are cancelled)")
    p.add_argument("webhook", metavar="WEBHOOK")
    p.set_defaults(handler=with_client(_delete))

    p = verb("deliveries", "the delivery log, newest first: state, attempts, status codes, latency")
    p.add_argument("--webhook", default="", help="only this subscription's")
    p.add_argument("--job", default="", help="only this job's")
    p.add_argument("--phase", default="", help="only this phase's (with --job)")
    p.add_argument("--state", action="append", default=[], choices=STATES, metavar="STATE",
                   help=f"only deliveries in this state (repeatable): {', '.join(STATES)}")
    p.add_argument("--limit", type=int, default=50, help="at most this many (default 50; 0: all)")
    p.add_argument("--attempts", action="store_true", help="also list every attempt of each delivery")
    p.set_defaults(handler=with_client(_deliveries))


def _event(pb, name: str):
    return pb.WebhookEventType[name.replace(".", "_").upper()]


def _dict(message) -> dict:
    return message.to_dict(include_default_values=True)


async def _create(client, args) -> int:
    from helix_runner_client import pb

    secret = ""
    if args.secret_file is not None:
        try:
            secret = args.secret_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise CliError(f"cannot read {args.secret_file}: {exc.strerror}", EXIT_USAGE) from None
    statuses = []
    for status in args.status:
        name = status.strip().upper().removeprefix("PHASE_STATUS_")
        if name not in pb.PhaseStatus.__members__:
            raise CliError(f"unknown status {status!r}", EXIT_USAGE)
        statuses.append(pb.PhaseStatus[name])
    request = pb.CreateWebhookRequest(
        url=args.url, events=[_event(pb, e) for e in dict.fromkeys(args.event)], project_id=args.project,
        statuses=statuses, cost_threshold_usd=args.cost_threshold,
        format=pb.WebhookFormat.SLACK if args.format == "slack" else pb.WebhookFormat.STANDARD,
        description=args.description, secret=secret)
    made = await client.call("create_webhook", request)
    if args.json:
        print_json(_dict(made))
        return EXIT_OK
    console = make_console()
    console.print(f"created webhook {made.webhook.webhook_id} → {made.webhook.url}")
    if made.secret:
        console.print(f"secret: {made.secret}")
        console.print("  (shown this once: your receiver verifies the webhook-signature header with it)")
    return EXIT_OK


async def _list(client, args) -> int:
    from helix_runner_client import pb

    listed = await client.call("list_webhooks", pb.ListWebhooksRequest(project_id=args.project))
    if args.json:
        print_json([_dict(w) for w in listed.webhooks])
        return EXIT_OK
    console = make_console()
    if not listed.webhooks:
        console.print("no webhooks")
        return EXIT_OK
    table = _table("WEBHOOK", "PROJECT", "EVENTS", "FILTER", "FORMAT", "URL", "STATE")
    for w in listed.webhooks:
        filters = [s.name for s in w.statuses]
        if w.cost_threshold_usd is not None:
            filters.append(f"≥ ${w.cost_threshold_usd:g}")
        table.add_row(w.webhook_id + (" (config)" if w.from_config else ""), w.project_id or "*",
                      ",".join(_event_name(e) for e in w.events), ",".join(filters) or "-", w.format.name.lower(),
                      w.url, f"disabled: {w.disabled_reason}" if w.disabled_time else "enabled")
    console.print(table)
    return EXIT_OK


async def _delete(client, args) -> int:
    from helix_runner_client import pb

    deleted = await client.call("delete_webhook", pb.DeleteWebhookRequest(webhook_id=args.webhook))
    if args.json:
        print_json(_dict(deleted))
        return EXIT_OK
    make_console().print(f"deleted webhook {deleted.webhook.webhook_id}; {deleted.cancelled_deliveries} pending "
                         "deliveries cancelled")
    return EXIT_OK


async def _deliveries(client, args) -> int:
    from helix_runner_client import pb

    request = pb.ListWebhookDeliveriesRequest(
        webhook_id=args.webhook, job_id=args.job, phase_id=args.phase,
        states=[pb.WebhookDeliveryState[s.upper()] for s in dict.fromkeys(args.state)],
        page_size=min(args.limit, 500) if args.limit else 500)
    found = []
    while True:
        page = await client.call("list_webhook_deliveries", request)
        found += page.deliveries
        if not page.next_page_token or (args.limit and len(found) >= args.limit):
            break
        request.page_token = page.next_page_token
    if args.limit:
        found = found[: args.limit]
    if args.json:
        print_json([_dict(d) for d in found])
        return EXIT_OK
    console = make_console()
    if not found:
        console.print("no deliveries")
        return EXIT_OK
    from helix_runner.cli.render import fmt_local

    table = _table("DELIVERY", "WEBHOOK", "EVENT", "JOB/PHASE", "SEQ", "STATE", "TRIES", "LAST", "LATENCY", "WHEN")
    for d in found:
        last = d.attempts[-1] if d.attempts else None
        latency = f"{last.latency.total_seconds() * 1000:.0f} ms" if last is not None and last.latency else "-"
        answer = (str(last.status_code) if last.status_code else last.error[:60]) if last is not None else "-"
        table.add_row(d.delivery_id, d.webhook_id, _event_name(d.event), f"{d.job_id}/{d.phase_id}".strip("/") or "-",
                      str(d.sequence), d.state.name, str(d.attempt_count), answer, latency,
                      fmt_local(last.time if last is not None else d.create_time))
        if args.attempts:
            for a in d.attempts:
                table.add_row("", "", f"  try {a.attempt}", "", "", "", "", str(a.status_code) if a.status_code
                              else a.error[:60], f"{a.latency.total_seconds() * 1000:.0f} ms" if a.latency else "-",
                              fmt_local(a.time))
    console.print(table)
    return EXIT_OK


def _event_name(event) -> str:
    return event.name.lower().replace("_", ".", 1)


def _table(*columns: str):
    from rich.table import Table

    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in columns:
        table.add_column(column, no_wrap=column not in ("URL", "LAST"), overflow="ellipsis")
    return table
