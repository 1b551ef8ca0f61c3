"""``helix-runner attach``: a full-screen live dashboard of one phase, with keys to control it.

Built with Textual rather than Rich alone: Rich's ``Live`` can redraw a screen but takes no input,
and the dashboard is as much for acting (approve, deny with a message, edit the input, pause, step)
as for looking. Textual brings key bindings, focus, a selectable table of held calls, modal
prompts, a scrolling log and a headless test pilot, and it renders Rich objects, so the event log
shows exactly the ``watch`` lines (``cli.render.event_line``). The app is ``cli.dashboard``; this
module is the verb and the controller the keys use.
"""

from __future__ import annotations

import argparse
from typing import Any

from helix_runner.cli.common import (
    EXIT_CODES_HELP,
    EXIT_INTERRUPTED,
    EXIT_OK,
    CliError,
    Connection,
    add_connection_args,
    run_async,
)

HELP = """\
A live dashboard of one phase: status and elapsed time, the current tool, the last tool calls with
✓/✗ and durations, per-tool counts, tokens and cost (CLI-reported next to computed), API retries,
the held tool calls, and the event log (the lines `watch` prints).

keys:
  p pause (before the next tool call)   P hard pause (SIGSTOP)   r resume   s step   i interrupt
  a approve the selected held call      d deny it (asks for the message the model sees)
  e edit its input (JSON)               m inject a message (the next user turn)
  x cancel the phase (press twice)      ↑/↓ select a held call          q quit (the phase goes on)
  f fork a new phase from after a tool call (the last finished one, or the id typed)
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "attach",
        help="full-screen live dashboard of a phase, with keys to control it",
        description=HELP,
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("job", metavar="JOB")
    p.add_argument("phase", metavar="PHASE")
    p.add_argument(
        "--recent", type=int, default=10, metavar="N", help="tool calls in the recent list (default 10)"
    )
    add_connection_args(p)
    p.set_defaults(handler=cmd_attach)


def cmd_attach(args: argparse.Namespace) -> int:
    connection = Connection.from_args(args)
    try:
        return run_async(_attach(connection, args))
    except KeyboardInterrupt:
        raise CliError("detached (the phase goes on)", EXIT_INTERRUPTED) from None


async def _attach(connection: Connection, args: argparse.Namespace) -> int:
    async with connection.open() as client:
        app = await build_dashboard(
            client, args.job, args.phase, target=connection.target, recent=args.recent
        )
        await app.run_async()
        if app.failure is not None:
            raise app.failure
    return EXIT_OK


async def build_dashboard(
    client, job_id: str, phase_id: str, *, target: str = "the server", recent: int = 10
):
    """The dashboard of a phase on the server: a snapshot first (a bad name fails here, as one line),
    then every event from the first one, re-attaching after a dropped connection."""
    from helix_runner.cli.dashboard import Dashboard
    from helix_runner.cli.render import PhaseModel
    from helix_runner.cli.sources import LiveEvents
    from helix_runner.cli.watch import find_phase

    phase = await find_phase(client, job_id, phase_id)
    view = PhaseModel(recent_limit=max(1, recent))
    view.apply_phase(phase)
    app = Dashboard(view, control=LiveControl(client, job_id, phase_id, target))
    app.source = LiveEvents(client, job_id, phase_id, 0, on_notice=app.notice_from_source)
    return app


class LiveControl:
    """The dashboard's actions, each one call of the public API."""

    def __init__(self, client, job_id: str, phase_id: str, target: str = "the server"):
        self.client, self.job_id, self.phase_id, self.target = client, job_id, phase_id, target

    def _ids(self) -> dict[str, str]:
        return {"job_id": self.job_id, "phase_id": self.phase_id}

    async def pause(self, hard: bool) -> str:
        from helix_runner_client import pb

        mode = pb.PauseMode.HARD if hard else pb.PauseMode.BEFORE_NEXT_TOOL
        phase = (await self.client.call("pause_phase", pb.PausePhaseRequest(**self._ids(), mode=mode))).phase
        return f"pause: {phase.status.name}"

    async def resume(self) -> str:
        from helix_runner_client import pb

        phase = (await self.client.call("resume_phase", pb.ResumePhaseRequest(**self._ids()))).phase
        return f"resumed: {phase.status.name}"

    async def step(self) -> str:
        from helix_runner_client import pb

        await self.client.call("step_phase", pb.StepPhaseRequest(**self._ids()))
        return "step: one tool call may run"

    async def interrupt(self) -> str:
        from helix_runner_client import pb

        await self.client.call("interrupt_phase", pb.InterruptPhaseRequest(**self._ids()))
        return "interrupted the current turn"

    async def cancel(self) -> str:
        from helix_runner_client import pb

        await self.client.call(
            "cancel_phase", pb.CancelPhaseRequest(**self._ids(), reason="cancelled in `helix-runner attach`")
        )
        return "cancel requested"

    async def inject(self, text: str) -> str:
        from helix_runner_client import pb

        response = await self.client.call(
            "inject_message", pb.InjectMessageRequest(**self._ids(), text=text, mode=pb.InjectMode.QUEUE)
        )
        return f"message queued as the next turn (event #{response.sequence})"

    async def resolve(self, tool_use_id: str, decision: str, value: str = "") -> str:
        from helix_runner_client import pb

        fields: dict[str, Any] = (
            {"approve": pb.ApproveDecision()}
            if decision == "approve"
            else (
                {"deny": pb.DenyDecision(message=value)}
                if decision == "deny"
                else {"edit": pb.EditDecision(input_json=value)}
            )
        )
        call = (
            await self.client.call(
                "resolve_tool_call",
                pb.ResolveToolCallRequest(**self._ids(), tool_use_id=tool_use_id, **fields),
            )
        ).tool_call
        return f"{decision}: {call.name} ({tool_use_id})"

    async def fork(self, tool_use_id: str) -> str:
        from helix_runner_client import pb

        response = await self.client.call("fork_phase", pb.ForkPhaseRequest(
            **self._ids(), point=pb.ForkPoint(tool_use_id=tool_use_id)))
        fork = response.phase
        return (f"forked after {tool_use_id} into {fork.job_id}/{fork.phase_id}: "
                f"helix-runner attach {fork.job_id} {fork.phase_id}")

    async def inspect(self):
        from helix_runner_client import pb

        return (await self.client.call("inspect_phase", pb.InspectPhaseRequest(**self._ids()))).inspection

    def describe_error(self, exc: BaseException) -> str:
        from helix_runner_client import RunnerError

        from helix_runner.cli.common import describe_error

        if isinstance(exc, RunnerError):
            return describe_error(exc, self.target)[0]
        return str(exc)
