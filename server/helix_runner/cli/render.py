"""How the client verbs show a phase: one line per event, and a view model of the phase's state.

``watch``, ``replay`` and ``attach`` all print events with :func:`event_line`, so a replay of a
recording shows exactly the lines ``watch`` showed live (the time is the event's own
``receive_time``, never the clock of the terminal). :class:`PhaseModel` folds events into what a
person wants to see at a glance (status, current tool, recent calls with durations, per-tool counts,
tokens, cost, held calls, API retries); ``run``'s progress line and ``attach``'s dashboard read it.
Everything here works on the client's messages (``helix_runner_client.pb``); recordings of raw CLI
output are turned into the same messages first (see ``cli.sources``).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import betterproto2
from helix_runner_client import pb
from rich.text import Text

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
    """``text`` on one line (newlines shown as ``⏎``), cut to ``limit`` characters with ``…``."""
    flat = text.replace("\r\n", "\n").replace("\n", " ⏎ ").replace("\t", " ")
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


_KIND_STYLES = {
    "session_init": "green",
    "tool_call_started": "yellow",
    "tool_call_finished": "yellow",
    "tool_progress": "yellow",
    "cost_update": "blue",
    "turn_result": "bold blue",
    "api_retry": "red",
    "api_error": "bold red",
    "stderr": "red",
    "parse_error": "red",
    "permission_denied": "red",
    "gateway": "bold red",
    "control": "magenta",
    "status_changed": "bold magenta",
    "assistant_text": "white",
    "thinking": "dim",
}
KIND_WIDTH = 18


def _kind_detail(kind: str, p, event: pb.StreamEvent) -> Text:
    t = Text()
    if kind == "session_init":
        t.append(f"model {p.model or '?'}  CLI {p.cli_version or '?'}  turn {p.turn_index}  {p.cwd}")
    elif kind == "assistant_text":
        t.append(one_line(p.text, 200))
    elif kind == "thinking":
        t.append("(redacted)" if p.redacted else one_line(p.text, 160), style="dim")
    elif kind == "tool_call_started":
        t.append("→ ", style="yellow")
        t.append(p.name, style="bold")
        t.append("  " + one_line(p.input_json, 140), style="dim")
        if event.parent_tool_use_id:
            t.append("  [subagent]", style="dim")
    elif kind == "tool_call_finished":
        t.append("✗ " if p.is_error else "✓ ", style="bold red" if p.is_error else "bold green")
        t.append(p.name or "?", style="bold")
        t.append(f"  {fmt_duration(p.duration)}")
        if p.content_preview:
            t.append("  " + one_line(p.content_preview, 100), style="dim")
    elif kind == "api_retry":
        http = f" HTTP {p.error_status}" if p.error_status is not None else ""
        t.append(
            f"retry {p.attempt}/{p.max_retries} in {fmt_duration(p.retry_delay)}: {p.error or '?'}{http}"
        )
    elif kind == "api_error":
        http = f" HTTP {p.api_error_status}" if p.api_error_status is not None else ""
        t.append(f"{p.error}{http}: {one_line(p.message, 160)}")
    elif kind == "rate_limit":
        t.append(f"{p.status} {p.rate_limit_type} {p.utilization:.0%}")
    elif kind == "task":
        t.append(
            f"{enum_name(p.kind).lower()} {p.task_type} {one_line(p.description, 80)} {p.status}".strip()
        )
    elif kind == "compaction":
        t.append(
            f"compacted {p.pre_tokens} → {p.post_tokens} tokens"
            if p.completed
            else f"compacting ({p.trigger or 'auto'}, {p.pre_tokens} tokens)"
        )
    elif kind == "cli_status":
        t.append(p.status or "-")
    elif kind == "hook":
        t.append(f"{enum_name(p.kind).lower()} {p.hook_name} {p.outcome}".strip())
    elif kind == "permission_denied":
        t.append("✗ ", style="bold red")
        t.append(f"{p.tool_name}: {one_line(p.message or p.decision_reason, 140)}")
    elif kind == "partial_delta":
        t.append(f"{enum_name(p.kind).lower()} {one_line(p.text, 100)}".strip())
    elif kind == "turn_result":
        t.append(p.subtype, style="bold red" if p.is_error else "bold green")
        if p.is_error:
            t.append(" (error)", style="red")
        t.append(f"  {plural(p.num_turns, 'turn')}  {fmt_duration(p.duration)}")
        if p.total_cost_usd is not None:
            t.append(f"  {fmt_usd(p.total_cost_usd)}")
    elif kind == "control_response":
        t.append(f"{p.request_subtype or p.request_id} {'ok' if p.success else 'error: ' + p.error}")
    elif kind == "control_request":
        t.append(f"{p.subtype} {p.tool_name}".strip())
    elif kind == "user_message":
        t.append(one_line(p.text, 160))
    elif kind == "tool_progress":
        t.append(f"{p.tool_name} running for {fmt_duration(p.elapsed)}")
    elif kind == "cost_update":
        c = p.cost or pb.PhaseCost()
        tokens = c.tokens or pb.TokenUsage()
        t.append(f"{fmt_usd(cost_figure(c))}", style="bold")
        t.append(
            f" (reported {fmt_usd(c.reported_usd)}, computed {fmt_usd(c.computed_usd)})  tokens "
            f"{fmt_tokens(tokens.input_tokens + tokens.cache_read_input_tokens)} in / "
            f"{fmt_tokens(tokens.output_tokens)} out"
        )
    elif kind == "stderr":
        t.append(one_line(p.text, 200))
    elif kind == "status_changed":
        t.append(f"{enum_name(p.from_status)} → ")
        t.append_text(status_text(p.to_status))
        if p.reason:
            t.append(f": {one_line(p.reason, 140)}")
    elif kind == "control":
        t.append(enum_name(p.kind), style="bold magenta")
        if p.tool_name:
            t.append(f" {p.tool_name}")
        if p.tool_use_id:
            t.append(f" {p.tool_use_id}", style="dim")
        if p.breakpoint_id:
            t.append(f" breakpoint {p.breakpoint_id}")
        if p.input_json:
            t.append("  " + one_line(p.input_json, 100), style="dim")
        if p.message:
            t.append(f"  {one_line(p.message, 100)}")
    elif kind == "parse_error":
        t.append(f"{enum_name(p.reason).lower()} line {p.line_number} ({p.line_bytes} bytes)")
    elif kind == "gateway":
        t.append(enum_name(p.kind).lower().replace("_", " "), style="bold red")
        t.append(f" HTTP {p.http_status}")
        if p.destination or p.model:
            t.append(f" {p.destination or p.model}")
        if p.message:
            t.append(f": {one_line(p.message, 140)}")
    elif kind == "unknown":
        t.append(f"{p.type}/{p.subtype}" if p.subtype else p.type)
    return t


def event_line(event: pb.StreamEvent) -> Text:
    """One line for an event: local time, sequence, kind, what happened (like the seed's printEvent)."""
    kind = event_kind(event) or "event"
    payload = getattr(event, kind, None) if kind != "event" else None
    line = Text(fmt_clock(event.receive_time), style="dim")
    line.append(f" #{event.sequence:<5} ", style="dim")
    line.append(kind.ljust(KIND_WIDTH), style=_KIND_STYLES.get(kind, "cyan"))
    line.append(" ")
    if payload is not None:
        line.append_text(_kind_detail(kind, payload, event))
    return line


def result_line(result: pb.PhaseResult, events: int | None = None) -> Text:
    """The final word: status, reason, exit, turns, tool calls, cost."""
    line = status_text(result.status)
    line.append(f": {result.reason}")
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
    line.append("\n  " + ", ".join(parts), style="dim")
    return line


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
