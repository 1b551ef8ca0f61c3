"""The `attach` dashboard driven by Textual's test pilot: against the real server and CLI, and fed
synthetic events at a high rate to show that keys are still handled while events pour in."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from helix_runner_client import pb
from support.streams import PhaseCall
from textual.widgets import DataTable, Input, RichLog, Static

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix_runner.cli.attach import build_dashboard
from helix_runner.cli.common import Connection
from helix_runner.cli.dashboard import LOG_MAX_LINES, Dashboard
from helix_runner.cli.render import PhaseModel
from helix_runner.offline import Reply


async def until(pilot, predicate: Callable[[], bool], limit: float = 30.0, what: str = "") -> None:
    """Lets the app run until ``predicate`` holds; fails after ``limit`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not predicate():
        assert loop.time() < deadline, f"timed out waiting for {what or predicate}"
        await pilot.pause(0.05)


async def answer(pilot, app: Dashboard, text: str) -> None:
    """Types an answer into the open prompt and submits it."""
    await until(pilot, lambda: bool(app.screen.query(Input)), what="the prompt")
    app.screen.query_one(Input).value = text
    await pilot.press("enter")


def held_rows(app: Dashboard) -> list[list[str]]:
    table = app.query_one("#held", DataTable)
    return [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]


@pytest.mark.real_cli
async def test_attach_shows_the_held_call_and_its_keys_act_on_the_phase(
    claude_binary, scripted_api, runner_factory
):
    api = scripted_api(
        [Reply.tool_use("Bash", {"command": f"touch {n}"}, chunk_delay=0.05) for n in ("one", "two")]
        + [Reply.text("done")]
    )
    async with runner_factory(api) as runner:
        phase = PhaseCall(
            runner.stub,
            "aj",
            "p1",
            str(runner.workdir),
            allowed_tools=["Bash"],
            breakpoints=[res.Breakpoint(breakpoint_id="bp", tool_name="Bash", once=True)],
        )
        hit = await phase.control(ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT)
        async with Connection(f"127.0.0.1:{runner.server.port}").open() as client:
            app = await build_dashboard(client, "aj", "p1")
            async with app.run_test(size=(150, 45)) as pilot:
                await until(pilot, lambda: len(held_rows(app)) == 1, what="the held call")
                (row,) = held_rows(app)
                assert row[:3] == [hit.control.tool_use_id, "Bash", "breakpoint bp"] and "touch one" in row[3]
                assert "AWAITING_APPROVAL" in str(app.query_one("#header", Static).render())

                await pilot.press("p")  # a pause requested while a breakpoint holds a call
                await phase.control(ev.CONTROL_EVENT_KIND_PAUSE_REQUESTED)
                await pilot.press("a")
                await phase.control(ev.CONTROL_EVENT_KIND_TOOL_APPROVED)
                paused = await phase.control(ev.CONTROL_EVENT_KIND_PAUSED)  # the next call, held by the pause
                await until(
                    pilot,
                    lambda: [r[0] for r in held_rows(app)] == [paused.control.tool_use_id],
                    what="the approved call to leave and the paused one to appear",
                )
                assert (runner.workdir / "one").exists() and not (runner.workdir / "two").exists()

                await pilot.press("r")
                result = await phase.finish()
                await until(pilot, lambda: app.ended, what="the result")
                await pilot.pause(0.2)
                assert "SUCCEEDED" in str(app.query_one("#header", Static).render())
                assert held_rows(app) == []
                log_text = "\n".join(line.text for line in app.query_one("#log", RichLog).lines)
                assert "TOOL_APPROVED Bash" in log_text and "SUCCEEDED: completed" in log_text
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    assert (runner.workdir / "two").exists()


# -- synthetic events --------------------------------------------------------------------------


class FakeControl:
    """Records what the keys asked for."""

    def __init__(self):
        self.calls: list[tuple] = []

    async def pause(self, hard: bool) -> str:
        self.calls.append(("pause", hard))
        return "pause"

    async def resume(self) -> str:
        self.calls.append(("resume",))
        return "resumed"

    async def step(self) -> str:
        self.calls.append(("step",))
        return "step"

    async def interrupt(self) -> str:
        self.calls.append(("interrupt",))
        return "interrupted"

    async def cancel(self) -> str:
        self.calls.append(("cancel",))
        return "cancel"

    async def inject(self, text: str) -> str:
        self.calls.append(("inject", text))
        return "injected"

    async def resolve(self, tool_use_id: str, decision: str, value: str = "") -> str:
        self.calls.append(("resolve", tool_use_id, decision, value))
        return decision

    async def fork(self, tool_use_id: str) -> str:
        self.calls.append(("fork", tool_use_id))
        return "forked"

    async def inspect(self):
        return None  # no snapshot: the view keeps what the events said

    def describe_error(self, exc: BaseException) -> str:
        return str(exc)


def _event(seq: int, **payload) -> pb.StreamEvent:
    return pb.StreamEvent(sequence=seq, receive_time=datetime.now(UTC), job_id="j", phase_id="p", **payload)


def _held(seq: int, tool_use_id: str, command: str) -> pb.StreamEvent:
    return _event(
        seq,
        control=pb.ControlEvent(
            kind=pb.ControlEventKind.BREAKPOINT_HIT,
            tool_use_id=tool_use_id,
            tool_name="Bash",
            breakpoint_id="bp",
            input_json=json.dumps({"command": command}),
        ),
    )


class PacedSource:
    """``total`` events at about ``rate`` per second (in batches of 10, as gRPC delivers them),
    the first ``burst`` of them at once (as when attaching to a phase with a history)."""

    def __init__(self, prefix: list[pb.StreamEvent], total: int, rate: float, burst: int = 300):
        self.prefix, self.total, self.rate, self.burst = prefix, total, rate, burst
        self.produced = 0
        self.tool_starts = 0
        self.result = None

    async def __aiter__(self):
        for event in self.prefix:
            self.produced += 1
            yield event
        seq = len(self.prefix)
        while self.produced < self.total:
            for _ in range(10):
                seq += 1
                self.produced += 1
                kind = seq % 3
                if kind == 0:
                    self.tool_starts += 1
                    yield _event(
                        seq,
                        tool_call_started=pb.ToolCallStarted(
                            tool_use_id=f"t{seq}", name="Read", input_json='{"file_path":"/x"}'
                        ),
                    )
                elif kind == 1:
                    yield _event(
                        seq,
                        tool_call_finished=pb.ToolCallFinished(
                            tool_use_id=f"t{seq - 1}", name="Read", duration=timedelta(milliseconds=3)
                        ),
                    )
                else:
                    yield _event(seq, assistant_text=pb.AssistantText(text=f"line {seq}"))
            if self.produced > self.burst:
                await asyncio.sleep(10 / self.rate)


async def test_keys_are_handled_while_a_thousand_events_a_second_stream():
    control = FakeControl()
    source = PacedSource(
        [_held(1, "toolu_a", "rm -rf /tmp/x"), _held(2, "toolu_b", "echo hi")], total=2000, rate=1000
    )
    app = Dashboard(PhaseModel(job_id="j", phase_id="p"), control=control, source=source)
    async with app.run_test(size=(140, 40)) as pilot:
        await until(pilot, lambda: len(held_rows(app)) == 2 and source.produced > 500, what="events to flow")
        await pilot.press("p")
        await until(pilot, lambda: ("pause", False) in control.calls, what="the pause key")
        assert source.produced < source.total  # handled while events were still arriving
        await pilot.press("P", "s", "r", "i")
        await until(pilot, lambda: len(control.calls) == 5, what="hard pause, step, resume, interrupt")
        assert control.calls[1:] == [("pause", True), ("step",), ("resume",), ("interrupt",)]

        await pilot.press("down", "a")  # the second held call is selected and approved
        await until(pilot, lambda: ("resolve", "toolu_b", "approve", "") in control.calls, what="approve")
        await pilot.press("up", "d")
        await answer(pilot, app, "not this one")
        await until(
            pilot, lambda: ("resolve", "toolu_a", "deny", "not this one") in control.calls, what="deny"
        )
        await pilot.press("e")
        assert app.screen.query_one(Input).value == '{"command": "rm -rf /tmp/x"}'  # the held input, to edit
        await answer(pilot, app, "{oops")  # invalid JSON is refused here, nothing is sent
        await pilot.press("e")
        await answer(pilot, app, '{"command": "ls"}')
        await until(
            pilot, lambda: any(c[:3] == ("resolve", "toolu_a", "edit") for c in control.calls), what="edit"
        )
        assert [c for c in control.calls if c[:3] == ("resolve", "toolu_a", "edit")] == [
            ("resolve", "toolu_a", "edit", '{"command": "ls"}')
        ]
        await pilot.press("f")  # fork after the last finished call (offered), or the id typed
        assert app.screen.query_one(Input).value.startswith("t")
        await answer(pilot, app, "toolu_a")
        await until(pilot, lambda: ("fork", "toolu_a") in control.calls, what="fork")
        await until(pilot, lambda: app.ended, limit=60, what="the source to end")
        await pilot.pause(0.3)
        log = app.query_one("#log", RichLog)
        assert len(log.lines) <= LOG_MAX_LINES
        assert any("events not shown here" in line.text for line in log.lines)
    # Every event was folded into the view, even those the log did not show.
    assert app.view.events == source.produced and app.view.tools["Read"].count == source.tool_starts


HOSTILE = "\x1b]52;c;cHduZWQ=\x07\x1b[2J\u202eexe.evil\x9b1A"


def test_the_dashboards_panels_show_what_a_phase_wrote_never_obey_it():
    """Issue 30.5: a tool name, its input and the model's name from a phase, with a clipboard write,
    a screen clear, a bidi override and a C1 CSI, are shown as escapes in attach's panels."""
    import io

    from rich.console import Console

    from helix_runner.cli.dashboard import now_panel, recent_panel

    view = PhaseModel(job_id="j", phase_id="p")
    view.apply(_event(1, tool_call_started=pb.ToolCallStarted(
        tool_use_id="t1", name="Bash" + HOSTILE, input_json=json.dumps({"command": HOSTILE}, ensure_ascii=False))))
    view.apply(_event(2, tool_call_started=pb.ToolCallStarted(tool_use_id="t2", name="Read" + HOSTILE)))
    view.apply(_event(3, tool_call_finished=pb.ToolCallFinished(tool_use_id="t2", name="Read" + HOSTILE)))
    for panel in (now_panel(view), recent_panel(view)):
        out = io.StringIO()
        Console(file=out, force_terminal=False, width=400).print(panel)
        shown = out.getvalue()
        assert not any(c in shown for c in "\x1b\x07\u202e\x9b"), repr(shown)
        assert "\\x1b]52;c;" in shown and "\\u202e" in shown, repr(shown)


async def test_a_held_call_with_escapes_is_listed_and_edited_as_escapes():
    control = FakeControl()
    held = _event(1, control=pb.ControlEvent(
        kind=pb.ControlEventKind.BREAKPOINT_HIT, tool_use_id="toolu_h", tool_name="Bash" + HOSTILE, breakpoint_id="bp",
        input_json=json.dumps({"command": HOSTILE}, ensure_ascii=False)))  # raw, as the CLI may send it
    source = PacedSource([held], total=1, rate=1000, burst=1)
    app = Dashboard(PhaseModel(job_id="j", phase_id="p"), control=control, source=source)
    async with app.run_test(size=(160, 40)) as pilot:
        await until(pilot, lambda: len(held_rows(app)) == 1, what="the held call")
        (row,) = held_rows(app)
        assert not any(c in "".join(row) for c in "\x1b\x07\u202e\x9b"), row
        await pilot.press("e")
        value = app.screen.query_one(Input).value
        assert "\x1b" not in value and "\u202e" not in value and "\\u001b]52" in value
        assert json.loads(value) == {"command": HOSTILE}  # the exact input, as JSON escapes
