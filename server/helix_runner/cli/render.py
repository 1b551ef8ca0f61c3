"""How the client verbs show a phase: one line per event, and a view model of the phase's state.

``watch``, ``replay``, ``run``, ``inspect … events`` and ``attach`` all print events with
:func:`event_line`, one table of event kinds (``EVENT_DETAILS``), so a replay of a recording shows
exactly the lines ``watch`` showed live (the time is the event's own ``receive_time``, never the
clock of the terminal). Every string from the phase goes through :func:`line_of`, which makes
control characters and bidi overrides visible and inert (``cli.visible``). :class:`PhaseModel` folds events into what a
person wants to see at a glance (status, current tool, recent calls with durations, per-tool counts,
tokens, cost, held calls, API retries); ``run``'s progress line and ``attach``'s dashboard read it.
Everything here works on the client's messages (``helix_runner_client.pb``); recordings of raw CLI
output are turned into the same messages first (see ``cli.sources``).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import betterproto2
from helix_runner_client import pb
from rich.text import Text

from helix_runner.cli.visible import escaped_json, visible, visible_text

# --------------------------------------------------------------------------------------------------
# Small formatters.

FINAL_STATUSES = frozenset(
    {
        pb.PhaseStatus.SUCCEEDED,
        pb.PhaseStatus.FAILED,
        pb.PhaseStatus.INCOMPLETE,
        pb.PhaseStatus.TIMED_OUT,
        pb.PhaseStatus.CANCELLED,
        pb.PhaseStatus.INTERRUPTED,
    }
)

_STATUS_STYLES = {
    pb.PhaseStatus.PENDING: "dim",
    pb.PhaseStatus.RUNNING: "bold cyan",
    pb.PhaseStatus.PAUSING: "bold yellow",
    pb.PhaseStatus.PAUSED: "bold yellow",
    pb.PhaseStatus.AWAITING_APPROVAL: "bold magenta",
    pb.PhaseStatus.SUCCEEDED: "bold green",
    pb.PhaseStatus.FAILED: "bold red",
    pb.PhaseStatus.INCOMPLETE: "bold red",
    pb.PhaseStatus.TIMED_OUT: "bold red",
    pb.PhaseStatus.CANCELLED: "yellow",
    pb.PhaseStatus.INTERRUPTED: "red",
}


def enum_name(value: object) -> str:
    """An enum member's short name (``SUCCEEDED``); unknown values as ``UNKNOWN(42)``."""
    name = getattr(value, "name", None)
    if not name or name.startswith("~"):
        return str(value)
    return name


def status_text(status: pb.PhaseStatus | None) -> Text:
    if status is None:
        return Text("?", style="dim")
    return Text(enum_name(status), style=_STATUS_STYLES.get(status, ""))


def fmt_seconds(seconds: float | None) -> str:
    """``850ms``, ``12.3s``, ``4m05s``, ``2h03m``; ``-`` for unknown."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        minutes, secs = divmod(int(seconds), 60)
        return f"{minutes}m{secs:02d}s"
    hours, rest = divmod(int(seconds), 3600)
    return f"{hours}h{rest // 60:02d}m"


def fmt_duration(value: timedelta | None) -> str:
    return fmt_seconds(value.total_seconds() if value is not None else None)


def fmt_usd(value: float | None) -> str:
    """Dollars; "-" for a figure that is not there (the CLI reported none), never "$0.0000"."""
    return "-" if value is None else f"${value:.4f}"


def plural(n: int, one: str, many: str | None = None) -> str:
    """ "1 phase", "2 phases" (``many`` when the plural is not ``one`` + "s")."""
    return f"{n} {one if n == 1 else (many or one + 's')}"


def reported_total(totals) -> float | None:
    """A job's or project's CLI-reported cost (CostTotals), or None when no phase in it reported one.

    ``reported_usd`` is a plain sum (0 when nothing was reported); a model's own ``reported_usd``
    stays unset until the CLI reports it, so the models say whether anything was (the web's
    ``reportedTotal`` reads the same)."""
    if totals is None or not any(m.reported_usd is not None for m in totals.models):
        return None
    return totals.reported_usd


def fmt_tokens(n: int) -> str:
    if n < 10_000:
        return str(n)
    if n < 10_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.1f}M"


def fmt_clock(when: datetime | None) -> str:
    """Local wall time with milliseconds (``14:03:07.123``); blanks when the time is unknown."""
    if when is None or when.timestamp() <= 0:
        return " " * 12
    local = when.astimezone()
    return local.strftime("%H:%M:%S.") + f"{local.microsecond // 1000:03d}"


def fmt_local(when: datetime | None) -> str:
    """Local date and time to the second, for tables; ``-`` when unset."""
    if when is None or when.timestamp() <= 0:
        return "-"
    return when.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def one_line(text: str, limit: int) -> str:
    """``text`` on one line (newlines shown as ``⏎``), made visible and inert (``cli.visible``), cut
    to ``limit`` characters with ``…``."""
    flat = visible(text.replace("\r\n", "\n").replace("\n", " ⏎ ").replace("\t", " "))
    return flat if len(flat) <= limit else flat[: max(0, limit - 1)] + "…"


def describe_breakpoint(bp: pb.Breakpoint) -> str:
    """A breakpoint's condition in words, for `break ls`, `inspect` and `break add`'s answer."""
    kind, value = betterproto2.which_one_of(bp, "condition")
    if kind == "tool_name":
        text = f"tool {value}"
    elif kind == "input_pattern":
        text = f"input matches /{value.regex}/" + (f" in {value.tool_name}" if value.tool_name else "")
    elif kind == "cost_threshold_usd":
        text = f"cost reaches ${value:g}"
    elif kind == "turn_count":
        text = f"turn {value} started"
    else:
        text = "?"
    return text + (" (once)" if bp.once else "")


def held_call_text(pending: pb.PendingToolCall, *, indent: str = "") -> Text:
    """A held call as a person deciding it must see it: id, tool, what holds it, since when, and
    its input whole, as escaped JSON (``cli.visible.escaped_json``: the exact bytes, with every
    control character and bidi override written as ``\\uXXXX``), never cut."""
    call = pending.call or pb.ToolCall()
    since = fmt_clock(pending.hold_time).strip()
    size = len(call.input_json.encode("utf-8", "surrogatepass"))
    return line_of(
        f"{indent}{call.tool_use_id}  ",
        (call.name or "?", "bold"),
        f"  held by {pending.hold_reason or 'a pause'}" + (f" since {since}" if since else ""),
        (f"\n{indent}  input ({plural(size, 'byte')}, as JSON with escapes): ", "dim"),
        (escaped_json(call.input_json), ""),
    )


def cost_figure(cost: pb.PhaseCost | None) -> float | None:
    """The figure to show for a phase: CLI-reported when there is one, else computed."""
    if cost is None:
        return None
    return cost.reported_usd if cost.reported_usd is not None else cost.computed_usd


def event_kind(event: pb.StreamEvent) -> str:
    name, _ = betterproto2.which_one_of(event, "payload")
    return name


# --------------------------------------------------------------------------------------------------
# Event lines.

# ``--filter`` accepts payload kinds (``tool_call_started``) and these groups.
FILTER_GROUPS: dict[str, frozenset[str]] = {
    "tools": frozenset({"tool_call_started", "tool_call_finished", "tool_progress", "permission_denied"}),
    "text": frozenset({"assistant_text", "thinking", "user_message"}),
    "cost": frozenset({"cost_update", "turn_result"}),
    "control": frozenset({"control", "status_changed"}),
    "errors": frozenset({"api_error", "api_retry", "parse_error", "stderr", "permission_denied", "gateway"}),
    "status": frozenset({"status_changed"}),
}
EVENT_KINDS = frozenset(
    f.name
    for f in pb.StreamEvent.__dataclass_fields__.values()
    if f.name
    not in {
        "sequence",
        "receive_time",
        "job_id",
        "phase_id",
        "session_id",
        "parent_tool_use_id",
        "agent_id",
        "uuid",
    }
)


def parse_filter(spec: str | None) -> frozenset[str] | None:
    """``"tools,cost_update"`` -> the kinds to show; ``None`` shows everything. Unknown names raise."""
    if not spec:
        return None
    kinds: set[str] = set()
    for raw in spec.split(","):
        name = raw.strip().lower().replace("-", "_")
        if not name:
            continue
        if name in FILTER_GROUPS:
            kinds |= FILTER_GROUPS[name]
        elif name in EVENT_KINDS:
            kinds.add(name)
        else:
            known = ", ".join(sorted(FILTER_GROUPS)) + "; or an event kind: " + ", ".join(sorted(EVENT_KINDS))
            raise ValueError(f"unknown event kind {raw.strip()!r} (groups: {known})")
    return frozenset(kinds)


KIND_WIDTH = 18

# What a line may be built from: plain text (escaped by ``line_of``), text with a style, or a
# ``Text`` already built by this module (``status_text``, another ``line_of``).
Part = str | tuple[str, str] | Text


def line_of(*parts: Part) -> Text:
    """A ``Text`` of ``parts``, every string made visible and inert (``cli.visible``): the one way a
    view turns what a phase wrote into something to print."""
    line = Text()
    for part in parts:
        if isinstance(part, Text):
            line.append_text(part)
        elif isinstance(part, tuple):
            line.append_text(visible_text(part[0], part[1]))
        elif part:
            line.append_text(visible_text(part))
    return line


@dataclass(frozen=True)
class EventKind:
    """How one kind of event reads in a line: the colour of its kind and what it says."""

    style: str
    detail: Callable[[Any, pb.StreamEvent], Text]


# Event kind (the StreamEvent payload's field name) -> its style and detail. ``watch``, ``replay``,
# ``run``, ``inspect`` and ``attach`` all print events through this table (``event_line``); a new
# kind is one ``@event_kind_detail`` function. A kind not in the table still gets a line: its
# fields, ``name=value`` (``generic_detail``).
EVENT_DETAILS: dict[str, EventKind] = {}


def event_kind_detail(kind: str, style: str = "cyan"):
    """Registers the function that says what an event of ``kind`` did (its payload, the event)."""

    def register(fn: Callable[[Any, pb.StreamEvent], Text]):
        EVENT_DETAILS[kind] = EventKind(style, fn)
        return fn

    return register


def generic_detail(p: Any, _event: pb.StreamEvent) -> Text:
    """A payload this table does not know yet: its set fields as ``name=value``."""
    parts: list[Part] = []
    for name in getattr(p, "__dataclass_fields__", {}):
        value = getattr(p, name, None)
        if value in (None, "", 0, False, [], b""):
            continue
        shown = enum_name(value) if hasattr(value, "name") else value
        parts.append(f"{' ' if parts else ''}{name}={one_line(str(shown), 80)}")
    return line_of(*parts)


@event_kind_detail("session_init", "green")
def _session_init(p, _e) -> Text:
    return line_of(f"model {p.model or '?'}  CLI {p.cli_version or '?'}  turn {p.turn_index}  {p.cwd}")


@event_kind_detail("assistant_text", "white")
def _assistant_text(p, _e) -> Text:
    return line_of(one_line(p.text, 200))


@event_kind_detail("thinking", "dim")
def _thinking(p, _e) -> Text:
    return line_of(("(redacted)" if p.redacted else one_line(p.text, 160), "dim"))


@event_kind_detail("tool_call_started", "yellow")
def _tool_call_started(p, event) -> Text:
    return line_of(
        ("→ ", "yellow"),
        (p.name, "bold"),
        ("  " + one_line(p.input_json, 140), "dim"),
        ("  [subagent]", "dim") if event.parent_tool_use_id else "",
    )


@event_kind_detail("tool_call_finished", "yellow")
def _tool_call_finished(p, _e) -> Text:
    return line_of(
        ("✗ " if p.is_error else "✓ ", "bold red" if p.is_error else "bold green"),
        (p.name or "?", "bold"),
        f"  {fmt_duration(p.duration)}",
        ("  " + one_line(p.content_preview, 100), "dim") if p.content_preview else "",
    )


@event_kind_detail("tool_progress", "yellow")
def _tool_progress(p, _e) -> Text:
    return line_of(f"{p.tool_name} running for {fmt_duration(p.elapsed)}")


@event_kind_detail("api_retry", "red")
def _api_retry(p, _e) -> Text:
    http = f" HTTP {p.error_status}" if p.error_status is not None else ""
    return line_of(f"retry {p.attempt}/{p.max_retries} in {fmt_duration(p.retry_delay)}: {p.error or '?'}{http}")


@event_kind_detail("api_error", "bold red")
def _api_error(p, _e) -> Text:
    http = f" HTTP {p.api_error_status}" if p.api_error_status is not None else ""
    return line_of(f"{p.error}{http}: {one_line(p.message, 160)}")


@event_kind_detail("rate_limit")
def _rate_limit(p, _e) -> Text:
    return line_of(f"{p.status} {p.rate_limit_type} {p.utilization:.0%}")


@event_kind_detail("task")
def _task(p, _e) -> Text:
    return line_of(f"{enum_name(p.kind).lower()} {p.task_type} {one_line(p.description, 80)} {p.status}".strip())


@event_kind_detail("compaction")
def _compaction(p, _e) -> Text:
    return line_of(
        f"compacted {p.pre_tokens} → {p.post_tokens} tokens"
        if p.completed
        else f"compacting ({p.trigger or 'auto'}, {p.pre_tokens} tokens)"
    )


@event_kind_detail("cli_status")
def _cli_status(p, _e) -> Text:
    return line_of(p.status or "-")


@event_kind_detail("hook")
def _hook(p, _e) -> Text:
    return line_of(f"{enum_name(p.kind).lower()} {p.hook_name} {p.outcome}".strip())


@event_kind_detail("permission_denied", "red")
def _permission_denied(p, _e) -> Text:
    return line_of(("✗ ", "bold red"), f"{p.tool_name}: {one_line(p.message or p.decision_reason, 140)}")


@event_kind_detail("partial_delta")
def _partial_delta(p, _e) -> Text:
    return line_of(f"{enum_name(p.kind).lower()} {one_line(p.text, 100)}".strip())


@event_kind_detail("turn_result", "bold blue")
def _turn_result(p, _e) -> Text:
    return line_of(
        (p.subtype, "bold red" if p.is_error else "bold green"),
        (" (error)", "red") if p.is_error else "",
        f"  {plural(p.num_turns, 'turn')}  {fmt_duration(p.duration)}",
        f"  {fmt_usd(p.total_cost_usd)}" if p.total_cost_usd is not None else "",
    )


@event_kind_detail("control_response")
def _control_response(p, _e) -> Text:
    return line_of(f"{p.request_subtype or p.request_id} {'ok' if p.success else 'error: ' + p.error}")


@event_kind_detail("control_request")
def _control_request(p, _e) -> Text:
    return line_of(f"{p.subtype} {p.tool_name}".strip())


@event_kind_detail("user_message")
def _user_message(p, _e) -> Text:
    return line_of(one_line(p.text, 160))


@event_kind_detail("cost_update", "blue")
def _cost_update(p, _e) -> Text:
    c = p.cost or pb.PhaseCost()
    tokens = c.tokens or pb.TokenUsage()
    return line_of(
        (fmt_usd(cost_figure(c)), "bold"),
        f" (reported {fmt_usd(c.reported_usd)}, computed {fmt_usd(c.computed_usd)})  tokens "
        f"{fmt_tokens(tokens.input_tokens + tokens.cache_read_input_tokens)} in / "
        f"{fmt_tokens(tokens.output_tokens)} out",
    )


@event_kind_detail("stderr", "red")
def _stderr(p, _e) -> Text:
    return line_of(one_line(p.text, 200))


@event_kind_detail("status_changed", "bold magenta")
def _status_changed(p, _e) -> Text:
    return line_of(
        f"{enum_name(p.from_status)} → ",
        status_text(p.to_status),
        f": {one_line(p.reason, 140)}" if p.reason else "",
    )


@event_kind_detail("control", "magenta")
def _control(p, _e) -> Text:
    return line_of(
        (enum_name(p.kind), "bold magenta"),
        f" {p.tool_name}" if p.tool_name else "",
        (f" {p.tool_use_id}", "dim") if p.tool_use_id else "",
        f" breakpoint {p.breakpoint_id}" if p.breakpoint_id else "",
        ("  " + one_line(p.input_json, 100), "dim") if p.input_json else "",
        f"  {one_line(p.message, 100)}" if p.message else "",
    )


@event_kind_detail("parse_error", "red")
def _parse_error(p, _e) -> Text:
    return line_of(f"{enum_name(p.reason).lower()} line {p.line_number} ({p.line_bytes} bytes)")


@event_kind_detail("gateway", "bold red")
def _gateway(p, _e) -> Text:
    if p.kind == pb.GatewayEventKind.EGRESS_CONNECTION:  # let through: not an error
        request = f" {p.method} {p.path}".rstrip() if p.method else ""
        return line_of(("egress", "cyan"), f" {one_line(p.destination, 80)}{one_line(request, 80)}",
                       f" ↑{p.bytes_sent} B ↓{p.bytes_received} B in {fmt_duration(p.duration)}")
    if p.kind in (pb.GatewayEventKind.EGRESS_HELD, pb.GatewayEventKind.EGRESS_APPROVED,
                  pb.GatewayEventKind.EGRESS_DENIED):  # a network breakpoint's request and its decision
        request = f" {p.method} {p.path}".rstrip() if p.method else ""
        word, style = {pb.GatewayEventKind.EGRESS_HELD: ("egress held", "bold yellow"),
                       pb.GatewayEventKind.EGRESS_APPROVED: ("egress approved", "green"),
                       pb.GatewayEventKind.EGRESS_DENIED: ("egress denied", "bold red")}[p.kind]
        by = f" by {p.actor}" if p.actor else ""
        return line_of((word + by, style), f" {one_line(p.destination, 80)}{one_line(request, 80)}",
                       f" [{p.hold_id}]", f": {one_line(p.message, 140)}" if p.message else "")
    return line_of(
        (enum_name(p.kind).lower().replace("_", " "), "bold red"),
        f" HTTP {p.http_status}",
        f" {p.destination or p.model}" if p.destination or p.model else "",
        f": {one_line(p.message, 140)}" if p.message else "",
    )


@event_kind_detail("unknown")
def _unknown(p, _e) -> Text:
    return line_of(f"{p.type}/{p.subtype}" if p.subtype else p.type)


def event_line(event: pb.StreamEvent) -> Text:
    """One line for an event: local time, sequence, kind, what happened (like the seed's printEvent)."""
    kind = event_kind(event) or "event"
    payload = getattr(event, kind, None) if kind != "event" else None
    entry = EVENT_DETAILS.get(kind)
    line = Text(fmt_clock(event.receive_time), style="dim")
    line.append(f" #{event.sequence:<5} ", style="dim")
    line.append(kind.ljust(KIND_WIDTH), style=entry.style if entry else "cyan")
    line.append(" ")
    if payload is not None:
        line.append_text((entry.detail if entry else generic_detail)(payload, event))
    return line


def result_line(result: pb.PhaseResult, events: int | None = None) -> Text:
    """The final word: status, reason, exit, turns, tool calls, cost."""
    if result.exit_code is not None:
        exit_text = f"exit code {result.exit_code}"
    elif result.exit_signal:
        exit_text = f"signal {result.exit_signal}"
    else:
        exit_text = "no exit status"
    calls = sum(s.count for s in result.tool_stats)
    failed = sum(s.failures for s in result.tool_stats)
    parts = [
        f"job {result.job_id} phase {result.phase_id}",
        exit_text,
        plural(result.num_turns, "turn"),
        f"{plural(calls, 'tool call')} ({failed} failed)",
        fmt_usd(cost_figure(result.cost)),
    ]
    if events is not None:
        parts.insert(3, plural(events, "event"))
    return line_of(status_text(result.status), f": {result.reason}", ("\n  " + ", ".join(parts), "dim"))


# --------------------------------------------------------------------------------------------------
# The view model.


# Events that show the Messages API answered again (an API retry is over).
_API_ANSWERED = frozenset(
    {"assistant_text", "thinking", "tool_call_started", "turn_result", "partial_delta", "api_error"}
)


@dataclass
class CallView:
    """A tool call as the dashboard shows it."""

    tool_use_id: str
    name: str
    input_json: str
    started: datetime | None
    ok: bool | None = None  # None while running
    duration: timedelta | None = None


@dataclass
class HeldView:
    """A tool call held before it runs, by a breakpoint or a pause."""

    tool_use_id: str
    name: str
    input_json: str
    breakpoint_id: str
    reason: str
    since: datetime | None


@dataclass
class ToolTally:
    count: int = 0
    failures: int = 0
    total_seconds: float = 0.0
    finished: int = 0


@dataclass
class PhaseModel:
    """A phase's state folded from its events (and, when live, snapshots of the API)."""

    job_id: str = ""
    phase_id: str = ""
    status: pb.PhaseStatus | None = None
    status_reason: str = ""
    model: str = ""
    started: datetime | None = None
    ended: datetime | None = None
    last_sequence: int = 0
    events: int = 0
    recent_limit: int = 12
    running: OrderedDict[str, CallView] = field(default_factory=OrderedDict)
    recent: deque[CallView] = field(default_factory=deque)
    tools: dict[str, ToolTally] = field(default_factory=dict)
    tokens: pb.TokenUsage = field(default_factory=pb.TokenUsage)
    reported_usd: float | None = None
    computed_usd: float = 0.0
    unpriced: list[str] = field(default_factory=list)
    held: OrderedDict[str, HeldView] = field(default_factory=OrderedDict)
    pause_requested: bool = False
    hard_paused: bool = False
    retries: int = 0
    retrying: bool = False
    last_retry: pb.ApiRetry | None = None
    last_retry_time: datetime | None = None
    # Turns as the CLI counts them (its turn_result's num_turns): the main thread's assistant
    # messages, one per API message id; a turn_result's own figure wins if it is higher.
    turns: int = 0
    _message_ids: set[str] = field(default_factory=set)
    _costed: bool = False  # a cost update arrived (before it, the cost is unknown, not $0)
    result: pb.PhaseResult | None = None
    last_event_time: datetime | None = None

    def __post_init__(self) -> None:
        self.recent = deque(self.recent, maxlen=self.recent_limit)

    # -- input ---------------------------------------------------------------------------------

    def apply(self, event: pb.StreamEvent) -> None:
        """Folds one event in (events must come in sequence order)."""
        self.events += 1
        self.last_sequence = max(self.last_sequence, event.sequence)
        self.job_id = self.job_id or event.job_id
        self.phase_id = self.phase_id or event.phase_id
        when = event.receive_time
        if when is not None and when.timestamp() > 0:
            self.last_event_time = when
            if self.started is None:
                self.started = when
        kind, p = betterproto2.which_one_of(event, "payload")
        if kind in _API_ANSWERED:
            self.retrying = False
        if kind in ("assistant_text", "thinking", "tool_call_started") and p.message_id \
                and not event.parent_tool_use_id:
            self._message_ids.add(p.message_id)
            self.turns = max(self.turns, len(self._message_ids))
        if kind == "tool_call_started":
            call = CallView(p.tool_use_id, p.name, p.input_json, when)
            self.running[p.tool_use_id] = call
            tally = self.tools.setdefault(p.name, ToolTally())
            tally.count += 1
        elif kind == "tool_call_finished":
            call = self.running.pop(p.tool_use_id, None) or CallView(p.tool_use_id, p.name, "", None)
            call.ok = not p.is_error
            call.duration = p.duration
            if not call.name:
                call.name = p.name
            self.recent.append(call)
            tally = self.tools.setdefault(call.name or "?", ToolTally())
            tally.failures += p.is_error
            if p.duration is not None:
                tally.total_seconds += p.duration.total_seconds()
                tally.finished += 1
            self.held.pop(p.tool_use_id, None)
        elif kind == "cost_update" and p.cost is not None:
            self._apply_cost(p.cost)
        elif kind == "session_init":
            self.model = p.model or self.model
        elif kind == "api_retry":
            self.retries += 1
            self.retrying = True
            self.last_retry = p
            self.last_retry_time = when
        elif kind == "turn_result":
            self.turns = max(self.turns, p.num_turns, len(self._message_ids))
        elif kind == "status_changed":
            self.status = p.to_status
            self.status_reason = p.reason
            if p.to_status in FINAL_STATUSES:
                self._ended()
        elif kind == "control":
            self._apply_control(p, when)

    def _apply_control(self, p: pb.ControlEvent, when: datetime | None) -> None:
        k = pb.ControlEventKind
        if p.kind == k.BREAKPOINT_HIT or (p.kind == k.PAUSED and p.tool_use_id):
            reason = f"breakpoint {p.breakpoint_id}" if p.breakpoint_id else "paused"
            self.held[p.tool_use_id] = HeldView(
                p.tool_use_id, p.tool_name, p.input_json, p.breakpoint_id, reason, when
            )
        if p.kind in (k.TOOL_APPROVED, k.TOOL_DENIED, k.TOOL_EDITED):
            self.held.pop(p.tool_use_id, None)
        elif p.kind == k.PAUSE_REQUESTED:
            self.pause_requested = True
        elif p.kind == k.PAUSED and not p.tool_use_id:
            self.hard_paused = True
        elif p.kind == k.RESUMED:
            self.pause_requested = self.hard_paused = False
            for tool_use_id in [h.tool_use_id for h in self.held.values() if not h.breakpoint_id]:
                del self.held[tool_use_id]

    def _apply_cost(self, cost: pb.PhaseCost) -> None:
        self._costed = True
        self.tokens = cost.tokens or pb.TokenUsage()
        self.reported_usd = cost.reported_usd
        self.computed_usd = cost.computed_usd
        self.unpriced = list(cost.unpriced_models)

    def apply_phase(self, phase: pb.Phase) -> None:
        """Takes a snapshot from GetJob (status, times, cost, current tool) as the starting point."""
        self.job_id, self.phase_id = phase.job_id, phase.phase_id
        self.status = phase.status
        self.status_reason = phase.status_reason
        self.model = phase.model or self.model
        self.started = phase.start_time or phase.create_time or self.started
        self.ended = phase.end_time
        if phase.cost is not None:
            self._apply_cost(phase.cost)

    def apply_inspection(self, inspection: pb.PhaseInspection) -> None:
        """Held calls and pause state as the server sees them now (the truth, when live)."""
        if inspection.phase is not None:
            self.status = inspection.phase.status
            self.status_reason = inspection.phase.status_reason
        self.pause_requested = inspection.paused
        self.hard_paused = inspection.hard_paused
        held: OrderedDict[str, HeldView] = OrderedDict()
        for pending in inspection.pending_calls:
            call = pending.call or pb.ToolCall()
            held[call.tool_use_id] = HeldView(
                call.tool_use_id,
                call.name,
                call.input_json,
                pending.breakpoint_id,
                pending.hold_reason,
                pending.hold_time,
            )
        self.held = held

    def apply_result(self, result: pb.PhaseResult) -> None:
        self.result = result
        self.status = result.status
        self.status_reason = result.reason
        self.ended = result.end_time or self.last_event_time
        self._ended()
        if result.cost is not None:
            self._apply_cost(result.cost)

    def _ended(self) -> None:
        self.held.clear()
        self.running.clear()
        self.pause_requested = self.hard_paused = self.retrying = False

    # -- derived -------------------------------------------------------------------------------

    @property
    def current_tool(self) -> CallView | None:
        """The most recently started call that has not finished."""
        return next(reversed(self.running.values()), None) if self.running else None

    @property
    def tool_calls(self) -> int:
        return sum(t.count for t in self.tools.values())

    @property
    def tool_failures(self) -> int:
        return sum(t.failures for t in self.tools.values())

    @property
    def cost_usd(self) -> float | None:
        """The CLI-reported cost, else the computed one; None before the first cost update."""
        if self.reported_usd is not None:
            return self.reported_usd
        return self.computed_usd if self._costed else None

    def elapsed(self, now: datetime | None = None) -> float | None:
        """Seconds since the phase started: up to its end, else to ``now`` (live), else to the last event."""
        if self.started is None:
            return None
        end = self.ended or now or self.last_event_time or self.started
        return max(0.0, (end - self.started).total_seconds())


def lineage(phases: list[Any]) -> list[tuple[Any, str]]:
    """A job's phases as a small tree: each fork under the phase it came from (in their order), with
    the prefix to draw before its id ("", "├─ ", "│  └─ "...)."""
    ids = {p.phase_id for p in phases}
    children: dict[str, list[Any]] = {}
    roots = []
    for p in phases:
        parent = p.forked_from.phase_id if p.forked_from is not None else ""
        if parent and parent in ids and parent != p.phase_id:
            children.setdefault(parent, []).append(p)
        else:
            roots.append(p)
    out: list[tuple[Any, str]] = []

    def walk(phase: Any, lead: str, branch: str) -> None:
        out.append((phase, lead + branch))
        kids = children.get(phase.phase_id, [])
        below = lead + ("│  " if branch == "├─ " else "   " if branch else "")
        for i, kid in enumerate(kids):
            walk(kid, below, "└─ " if i == len(kids) - 1 else "├─ ")

    for root in roots:
        walk(root, "", "")
    seen = {id(p) for p, _ in out}
    out += [(p, "") for p in phases if id(p) not in seen]  # a cycle (cannot happen): still listed
    return out
