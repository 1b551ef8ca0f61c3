"""The Textual app behind ``helix-runner attach`` (see ``cli.attach`` for why Textual).

Events are folded into a :class:`~helix_runner.cli.render.PhaseModel` as they arrive, which is cheap;
the screen is redrawn from it on a timer (10 times a second), and at most ``LOG_LINES_PER_TICK``
new log lines are written per redraw (the rest are counted in one "not shown" line), so a phase
streaming thousands of events a second cannot starve the keyboard. The app takes any async
iterator of events as its source and an optional controller for the keys (``cli.attach.LiveControl``).
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any, Protocol

from helix_runner_client import pb
from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Input, Label, RichLog, Static

from helix_runner.cli.render import (
    event_kind,
    event_line,
    fmt_duration,
    fmt_seconds,
    fmt_tokens,
    fmt_usd,
    one_line,
    result_line,
    status_text,
)
from helix_runner.cli.visible import escaped_json, visible

REFRESH_SECONDS = 0.1
LOG_LINES_PER_TICK = 60
LOG_MAX_LINES = 5000
# While ingesting, give the screen a turn after this many events in a row.
EVENTS_PER_YIELD = 200


class Controller(Protocol):
    """What the keys do; every method returns a short confirmation to show."""

    async def pause(self, hard: bool) -> str: ...
    async def resume(self) -> str: ...
    async def step(self) -> str: ...
    async def interrupt(self) -> str: ...
    async def cancel(self) -> str: ...
    async def inject(self, text: str) -> str: ...
    async def resolve(self, tool_use_id: str, decision: str, value: str = "") -> str: ...
    async def fork(self, tool_use_id: str) -> str:
        """ForkPhase from the checkpoint after this call (docs/fork-and-rewind.md)."""
    async def inspect(self) -> Any:
        """A ``PhaseInspection`` (held calls, pause state) or None when there is none to take."""

    def describe_error(self, exc: BaseException) -> str: ...


class Prompt(ModalScreen[str | None]):
    """A one-line question; Enter answers, Escape cancels."""

    DEFAULT_CSS = """
    Prompt { align: center middle; }
    Prompt > Vertical { width: 90%; height: auto; border: thick $accent; padding: 1 2; background: $panel; }
    """
    BINDINGS = [Binding("escape", "dismiss_none", "cancel")]

    def __init__(self, question: str, value: str = ""):
        super().__init__()
        self.question, self.value = question, value

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.question)
            yield Input(value=self.value, id="answer")

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)


class Dashboard(App):
    """The attach screen: header, now/recent panels, held calls, event log, key footer."""

    TITLE = "helix-runner attach"
    CSS = """
    #header { height: 2; padding: 0 1; background: $boost; }
    #top { height: auto; max-height: 16; }
    #now, #recent { width: 1fr; height: auto; padding: 0 1; border: round $primary; }
    #held { height: auto; max-height: 9; border: round $warning; }
    #log { height: 1fr; border: round $secondary; }
    """
    BINDINGS = [
        Binding("p", "pause", "pause"),
        Binding("P", "hard_pause", "hard pause", show=False),
        Binding("r", "resume", "resume"),
        Binding("s", "step", "step"),
        Binding("i", "interrupt", "interrupt"),
        Binding("a", "approve", "approve"),
        Binding("d", "deny", "deny"),
        Binding("e", "edit", "edit"),
        Binding("m", "inject", "message"),
        Binding("f", "fork", "fork"),
        Binding("x", "cancel_phase", "cancel"),
        Binding("q", "quit", "quit"),
    ]

    def __init__(self, view, *, control: Controller | None = None, source: AsyncIterator | None = None):
        super().__init__()
        self.view = view
        self.control = control
        self.source = source
        self.failure: BaseException | None = None
        self._pending: deque = deque()
        self._skipped = 0
        self._dirty = True
        self._want_inspect = control is not None
        self._inspecting = False
        self._held_signature: tuple = ()
        self._cancel_armed_at = 0.0
        self.ended = False

    # -- layout --------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(id="header")
        with Horizontal(id="top"):
            yield Static(id="now")
            yield Static(id="recent")
        held = DataTable(id="held", cursor_type="row", zebra_stripes=False)
        held.border_title = "held tool calls — a approve · d deny · e edit"
        yield held
        log = RichLog(id="log", max_lines=LOG_MAX_LINES, wrap=False, markup=False, highlight=False)
        log.border_title = "events"
        yield log
        yield Footer()

    def on_mount(self) -> None:
        # Kept, not queried later: while a prompt is open the active screen is the prompt's.
        self.header_widget = self.query_one("#header", Static)
        self.now_widget = self.query_one("#now", Static)
        self.recent_widget = self.query_one("#recent", Static)
        self.held_table = held = self.query_one("#held", DataTable)
        self.log_widget = self.query_one("#log", RichLog)
        held.add_columns("TOOL USE ID", "TOOL", "HELD BY", "INPUT")
        held.focus()
        self.set_interval(REFRESH_SECONDS, self._tick)
        if self.source is not None:
            self._consume()
        self._tick()

    # -- ingestion -----------------------------------------------------------------------------

    @work(exclusive=False, group="source")
    async def _consume(self) -> None:
        count = 0
        try:
            async for event in self.source:
                self.view.apply(event)
                self._pending.append(event)
                if len(self._pending) > LOG_LINES_PER_TICK:
                    self._pending.popleft()
                    self._skipped += 1
                kind = event_kind(event)
                if kind in ("control", "status_changed"):
                    self._want_inspect = self.control is not None
                self._dirty = True
                count += 1
                if count % EVENTS_PER_YIELD == 0:
                    await asyncio.sleep(0)
        except Exception as exc:  # noqa: BLE001 - shown on the screen; the app stays up to be read
            self.failure = exc
            message = self.control.describe_error(exc) if self.control else str(exc)
            self.log_widget.write(f"stream failed: {message}")
            self.notify(message, severity="error", timeout=10)
            return
        result = getattr(self.source, "result", None)
        if result is not None:
            self.view.apply_result(result)
            self._pending.append(result)
        self.ended = True
        self._want_inspect = False
        self._dirty = True

    def notice_from_source(self, text: str) -> None:
        self.notify(text, severity="warning")

    # -- redraw --------------------------------------------------------------------------------

    def _tick(self) -> None:
        if self._pending:
            log = self.log_widget
            if self._skipped:
                log.write(f"… {self._skipped} events not shown here (`helix-runner watch` prints every one)")
                self._skipped = 0
            while self._pending:
                item = self._pending.popleft()
                log.write(result_line(item) if isinstance(item, pb.PhaseResult) else event_line(item))
        if self._want_inspect and not self._inspecting and self.control is not None:
            self._want_inspect = False
            self._inspect()
        self._render_panels()

    @work(exclusive=False, group="inspect")
    async def _inspect(self) -> None:
        self._inspecting = True
        try:
            inspection = await self.control.inspect()
        except Exception:  # noqa: BLE001 - a snapshot that fails is retried on the next change
            return
        finally:
            self._inspecting = False
        if inspection is not None and not self.ended:
            self.view.apply_inspection(inspection)
            self._dirty = True

    def _render_panels(self) -> None:
        v = self.view
        header = Text()
        header.append(f"job {visible(v.job_id)} · phase {visible(v.phase_id)}   ", style="bold")
        header.append_text(status_text(v.status))
        header.append(f"   elapsed {fmt_seconds(v.elapsed(None if self.ended else datetime.now(UTC)))}")
        header.append(f"   {v.events} events (#{v.last_sequence})")
        if v.model:
            header.append(f"   {visible(v.model)}", style="dim")
        flags = []
        if v.hard_paused:
            flags.append("hard-paused")
        elif v.pause_requested:
            flags.append("pause requested")
        if v.retrying and v.last_retry is not None:
            flags.append(f"API retry {v.last_retry.attempt}/{v.last_retry.max_retries}")
        if flags:
            header.append("   [" + ", ".join(flags) + "]", style="bold yellow")
        header.append("\n" + visible(v.status_reason or ""), style="dim")
        self.header_widget.update(header)
        if not self._dirty and not v.running:
            return
        self._dirty = False
        self.now_widget.update(now_panel(v))
        self.recent_widget.update(recent_panel(v))
        self._render_held()

    def _render_held(self) -> None:
        signature = tuple((h.tool_use_id, h.reason) for h in self.view.held.values())
        if signature == self._held_signature:
            return
        self._held_signature = signature
        table = self.held_table
        selected = self._selected_held_id()
        table.clear()
        for h in self.view.held.values():
            table.add_row(
                visible(h.tool_use_id), visible(h.name), visible(h.reason or "-"), one_line(h.input_json, 120),
                key=h.tool_use_id
            )
        if selected in self.view.held:
            table.move_cursor(row=list(self.view.held).index(selected))
        table.border_subtitle = f"{len(signature)} held" if signature else "none held"

    def _selected_held_id(self) -> str | None:
        table = self.held_table
        if not self.view.held or table.row_count == 0:
            return None
        row = min(max(table.cursor_row, 0), table.row_count - 1)
        return str(table.coordinate_to_cell_key((row, 0)).row_key.value)

    # -- actions -------------------------------------------------------------------------------

    def _act(self, coro) -> None:
        if self.control is None:
            self.notify("read-only: no server to send this to", severity="warning")
            coro.close()
            return
        self._run_action(coro)

    @work(exclusive=False, group="actions")
    async def _run_action(self, coro) -> None:
        try:
            text = await coro
        except Exception as exc:  # noqa: BLE001 - every failure is shown, none ends the dashboard
            self.notify(self.control.describe_error(exc), severity="error", timeout=8)
            return
        self.notify(text, timeout=3)
        self._want_inspect = True

    def action_pause(self) -> None:
        self._act(self.control.pause(False) if self.control else _noop())

    def action_hard_pause(self) -> None:
        self._act(self.control.pause(True) if self.control else _noop())

    def action_resume(self) -> None:
        self._act(self.control.resume() if self.control else _noop())

    def action_step(self) -> None:
        self._act(self.control.step() if self.control else _noop())

    def action_interrupt(self) -> None:
        self._act(self.control.interrupt() if self.control else _noop())

    def action_cancel_phase(self) -> None:
        now = asyncio.get_running_loop().time()
        if now - self._cancel_armed_at > 3.0:
            self._cancel_armed_at = now
            self.notify("press x again within 3 s to cancel the phase", severity="warning")
            return
        self._cancel_armed_at = 0.0
        self._act(self.control.cancel() if self.control else _noop())

    def _held_target(self):
        tool_use_id = self._selected_held_id()
        if tool_use_id is None:
            self.notify("no tool call is held", severity="warning")
            return None
        return self.view.held.get(tool_use_id)

    def action_approve(self) -> None:
        held = self._held_target()
        if held is not None:
            self._act(self.control.resolve(held.tool_use_id, "approve") if self.control else _noop())

    def action_deny(self) -> None:
        held = self._held_target()
        if held is None:
            return

        def answered(message: str | None) -> None:
            if message is not None:
                self._act(
                    self.control.resolve(held.tool_use_id, "deny", message) if self.control else _noop()
                )

        self.push_screen(
            Prompt(f"Deny {held.name} ({held.tool_use_id}): the message the model sees", ""), answered
        )

    def action_edit(self) -> None:
        held = self._held_target()
        if held is None:
            return

        def answered(text: str | None) -> None:
            if text is None:
                return
            try:
                value = json.loads(text)
            except ValueError as exc:
                self.notify(f"not valid JSON: {exc}", severity="error")
                return
            if not isinstance(value, dict):
                self.notify("the input must be a JSON object", severity="error")
                return
            self._act(
                self.control.resolve(held.tool_use_id, "edit", json.dumps(value)) if self.control else _noop()
            )

        self.push_screen(
            # The exact input, what a terminal would obey written as JSON escapes (the same value).
            Prompt(f"Edit the input of {visible(held.name)} ({visible(held.tool_use_id)}), JSON:",
                   escaped_json(held.input_json)), answered
        )

    def action_fork(self) -> None:
        """Forks the phase after a tool call: the last one that ended, or the one typed instead."""
        finished = [c for c in self.view.recent if c.ok is not None]
        default = finished[-1].tool_use_id if finished else ""

        def answered(text: str | None) -> None:
            if text and text.strip():
                self._act(self.control.fork(text.strip()) if self.control else _noop())

        self.push_screen(Prompt("Fork a new phase from after tool call (tool_use id):", default), answered)

    def action_inject(self) -> None:
        def answered(text: str | None) -> None:
            if text and text.strip():
                self._act(self.control.inject(text) if self.control else _noop())

        self.push_screen(Prompt("Message (queued as the next user turn):", ""), answered)


async def _noop() -> str:
    return ""


def now_panel(v) -> Any:
    """The left panel: current tool, tokens, cost (CLI-reported next to computed), turns, per tool."""
    grid = Table.grid(padding=(0, 1), expand=True)
    grid.add_column(style="bold", no_wrap=True, min_width=12)
    grid.add_column(overflow="ellipsis", no_wrap=True, ratio=1)
    current = v.current_tool
    if current is not None:
        running_for = (datetime.now(UTC) - current.started).total_seconds() if current.started else None
        held = current.tool_use_id in v.held
        now = Text("⏸ " if held else "▶ ", style="magenta" if held else "yellow")
        now.append(visible(current.name), style="bold")
        now.append(" held" if held else "", style="bold magenta")
        now.append(f"  {fmt_seconds(running_for)}  {one_line(current.input_json, 60)}", style="dim")
    else:
        now = Text("idle", style="dim")
    grid.add_row("current tool", now)
    t = v.tokens
    grid.add_row(
        "tokens",
        f"{fmt_tokens(t.input_tokens)} in · {fmt_tokens(t.output_tokens)} out · "
        f"{fmt_tokens(t.cache_read_input_tokens)} cache read",
    )
    diff = ""
    if v.reported_usd is not None:
        diff = f"  (Δ {v.computed_usd - v.reported_usd:+.4f})"
    grid.add_row(
        "cost",
        f"CLI {fmt_usd(v.reported_usd)} · computed {fmt_usd(v.computed_usd)}{diff}"
        + (f" · unpriced: {visible(', '.join(v.unpriced))}" if v.unpriced else ""),
    )
    retry = ""
    if v.last_retry is not None:
        r = v.last_retry
        http = f" HTTP {r.error_status}" if r.error_status is not None else ""
        retry = f" · last: {r.attempt}/{r.max_retries} {visible(r.error or '')}{http}"
    grid.add_row("turns", f"{v.turns} · API retries {v.retries}{retry}")
    counts = Text()
    for name, tally in sorted(v.tools.items(), key=lambda kv: (-kv[1].count, kv[0]))[:6]:
        counts.append(f"{visible(name)} {tally.count}")
        if tally.failures:
            counts.append(f" ({tally.failures}✗)", style="red")
        counts.append("  ")
    grid.add_row("per tool", counts if counts else Text("none yet", style="dim"))
    return grid


def recent_panel(v) -> Any:
    """The right panel: the last tool calls with ✓/✗ and durations, then the running ones."""
    table = Table.grid(padding=(0, 1))
    table.add_column(no_wrap=True)
    table.add_column(no_wrap=True, style="bold")
    table.add_column(no_wrap=True, justify="right")
    table.add_column(no_wrap=True, overflow="ellipsis", style="dim")
    rows = list(v.recent)[-(v.recent_limit - len(v.running)) or None :] if v.running else list(v.recent)
    for call in rows:
        mark = Text("✓", style="bold green") if call.ok else Text("✗", style="bold red")
        table.add_row(mark, visible(call.name), fmt_duration(call.duration), one_line(call.input_json, 50))
    for call in v.running.values():
        running_for = (datetime.now(UTC) - call.started).total_seconds() if call.started else None
        table.add_row(
            Text("…", style="yellow"), visible(call.name), fmt_seconds(running_for), one_line(call.input_json, 50)
        )
    if not rows and not v.running:
        return Text("no tool calls yet", style="dim")
    return table
