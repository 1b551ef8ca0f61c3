"""The job-control and read verbs against the real server running real CLI phases (offline mode).

Each test asserts on what the verb printed and on its effect on the phase: a paused phase stays
paused, `step` lets exactly one call through, `deny` keeps the file, `edit` runs the edited input,
`inject` gives a second turn, `cancel` ends the phase CANCELLED with the given reason.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from support.cli_verbs import helix
from support.streams import PhaseCall

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix_runner.cli.common import EXIT_CODES_HELP
from helix_runner.offline import Reply, TextBlock

pytestmark = pytest.mark.real_cli

SLOW_TEXT = Reply(content=[TextBlock("thinking it over " * 12)], chunk_delay=0.08)  # ~1.5 s of streaming


def address(runner) -> str:
    return f"127.0.0.1:{runner.server.port}"


async def test_pause_holds_step_lets_one_through_resume_and_the_read_verbs(
    claude_binary, scripted_api, runner_factory
):
    api = scripted_api(
        [Reply.tool_use("Bash", {"command": f"touch {n}"}, chunk_delay=0.05) for n in ("one", "two")]
        + [Reply.text("both done")]
    )
    async with runner_factory(api) as runner:
        at = address(runner)
        phase = PhaseCall(runner.stub, "pj", "p1", str(runner.workdir), allowed_tools=["Bash"])
        await phase.wait_for(lambda e: e.HasField("status_changed"))

        paused = await helix(at, "pause", "pj", "p1")
        assert paused.code == 0, paused.err
        assert paused.lines == ["paused: phase p1 of job pj is PAUSING; it holds before the next tool call"]
        first = await phase.control(ev.CONTROL_EVENT_KIND_PAUSED)
        await asyncio.sleep(1.0)
        assert not (runner.workdir / "one").exists()  # held, and it stays held

        held = await helix(at, "inspect", "pj", "p1", "held")
        assert held.code == 0 and f"{first.control.tool_use_id}  Bash" in held.out
        assert '{"command":"touch one"}' in held.out and "held by paused" in held.out
        phases = await helix(at, "phases", "pj")
        (row,) = [line for line in phases.lines if line.startswith("p1")]
        assert "PAUSED" in row and "Bash (held)" in row
        sessions = await helix(at, "sessions")
        assert any(line.split()[:3] == ["pj", "p1", "PAUSED"] for line in sessions.lines), sessions.out
        still = await helix(at, "phases", "pj", "--json")
        assert json.loads(still.out)["phases"][0]["status"] == "PHASE_STATUS_PAUSED"

        stepped = await helix(at, "step", "pj", "p1")
        assert stepped.code == 0 and stepped.out.startswith("step: one tool call may run")
        done = await phase.control(ev.CONTROL_EVENT_KIND_STEP_COMPLETE)
        await phase.control(ev.CONTROL_EVENT_KIND_PAUSED, after=done.sequence)
        assert (runner.workdir / "one").exists() and not (runner.workdir / "two").exists()

        resumed = await helix(at, "resume", "pj", "p1")
        assert resumed.lines == ["resumed: phase p1 of job pj is RUNNING"]
        result = await phase.finish()
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        assert (runner.workdir / "two").exists()

        again = await helix(at, "pause", "pj", "p1")
        assert again.code == 4 and again.out == ""
        assert again.err.splitlines() == [
            "helix-runner: error: cannot pause: phase p1 is SUCCEEDED, not running [ILLEGAL_TRANSITION]"
        ]
        jobs = await helix(at, "jobs", "--json")
        assert [(j["jobId"], j["status"]) for j in json.loads(jobs.out)] == [("pj", "PHASE_STATUS_SUCCEEDED")]
        table = await helix(at, "jobs")
        assert table.lines[0].split()[:3] == ["JOB", "PROJECT", "STATUS"]
        assert table.lines[1].split()[:4] == ["pj", "default", "SUCCEEDED", "1"]
        tools = await helix(at, "tools", "pj", "p1", "--json")
        (bash,) = json.loads(tools.out)["stats"]
        assert bash["name"] == "Bash" and bash["count"] == "2" and bash["failures"] == "0"
        assert (await helix(at, "jobs", "--status", "running")).out == "no jobs\n"
        done = await helix(at, "jobs", "--status", "succeeded", "--project", "default")
        assert [line.split()[0] for line in done.lines] == ["JOB", "pj"]
        project = json.loads((await helix(at, "costs", "--project", "default", "--json")).out)
        assert project["totals"]["phaseCount"] == 1 and project["totals"]["computedUsd"] > 0
        costs = await helix(at, "costs", "--job", "pj", "--by", "phase")
        assert costs.code == 0 and costs.lines[0].startswith("job pj: 1 phase, reported $")
        assert any(line.split()[:3] == ["pj", "p1", "SUCCEEDED"] for line in costs.lines)


async def test_breakpoints_deny_keeps_the_file_and_edit_runs_the_new_input(
    claude_binary, scripted_api, runner_factory
):
    # The first reply streams for ~2 s: time to add the breakpoints before its tool call.
    api = scripted_api(
        [
            Reply.tool_use(
                "Bash", {"command": "rm -rf precious"}, text="let me clean up " * 12, chunk_delay=0.1
            ),
            Reply.tool_use("Bash", {"command": "echo original > out.txt"}),
            Reply.text("done"),
        ]
    )
    async with runner_factory(api) as runner:
        at = address(runner)
        (runner.workdir / "precious").mkdir()
        (runner.workdir / "precious" / "data").write_text("keep me")
        phase = PhaseCall(runner.stub, "bj", "p1", str(runner.workdir), allowed_tools=["Bash"])
        await phase.wait_for(lambda e: e.HasField("session_init"))

        added = await helix(at, "break", "add", "bj", "p1", "--pattern", r"rm\s+-rf", "--id", "no-rm")
        assert added.lines == [r"breakpoint no-rm added: input matches /rm\s+-rf/"], added.err
        # A regex the server's RE2 refuses exits as --help says (issue 35.3: it said 2, it is 4).
        bad = await helix(at, "break", "add", "bj", "p1", "--pattern", "(?=lookahead)", "--id", "bad")
        assert bad.code == 4, (bad.code, bad.err)
        code_line = next(line for line in EXIT_CODES_HELP.splitlines() if line.strip().startswith(f"{bad.code} "))
        following = EXIT_CODES_HELP.split(code_line, 1)[1].splitlines()[1]
        assert "regex" in code_line + following, EXIT_CODES_HELP
        added = await helix(at, "break", "add", "bj", "p1", "--tool", "Bash", "--once", "--id", "edit-me")
        assert added.code == 0
        for flag, value, shown in (
            ("--cost", "1000", "cost reaches $1000"),
            ("--turn", "99", "turn 99 started"),
        ):
            added = await helix(at, "break", "add", "bj", "p1", flag, value, "--id", flag[2:])
            assert added.lines == [f"breakpoint {flag[2:]} added: {shown}"], added.err

        hit = await phase.control(ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT)
        assert hit.control.breakpoint_id == "no-rm"
        listed = await helix(at, "break", "ls", "bj", "p1")
        assert [line.split()[0] for line in listed.lines] == ["ID", "no-rm", "edit-me", "cost", "turn"]
        assert listed.lines[1].split()[-1] == "1"  # hits

        denied = await helix(at, "deny", "bj", "p1", "-m", "deleting precious data is not allowed")
        assert denied.lines == [f"denied Bash ({hit.control.tool_use_id}); the call is RUNNING"], denied.err

        second = await phase.control(ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT, after=hit.sequence)
        assert second.control.breakpoint_id == "edit-me"
        bad = await helix(at, "edit", "bj", "p1", "--input", "{not json")
        assert bad.code == 2 and bad.err.startswith("helix-runner: error: --input is not valid JSON")
        edit_file = runner.workdir.parent / "input.json"
        edit_file.write_text(json.dumps({"command": "echo edited > out.txt"}))
        edited = await helix(at, "edit", "bj", "p1", second.control.tool_use_id, "--input", f"@{edit_file}")
        assert edited.code == 0 and edited.out.startswith("edited Bash"), edited.err
        removed = await helix(at, "break", "rm", "bj", "p1", "no-rm")
        assert removed.lines == [r"breakpoint no-rm removed (input matches /rm\s+-rf/)"]
        result = await phase.finish()
        nothing = await helix(at, "approve", "bj", "p1")
        assert nothing.code == 4 and nothing.err.splitlines() == [
            "helix-runner: error: no tool call is held in phase p1 (the phase is SUCCEEDED) [TOOL_CALL_NOT_HELD]"
        ]
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    assert (runner.workdir / "precious" / "data").read_text() == "keep me"
    assert "deleting precious data is not allowed" in api.message_requests()[1].tool_result_text()
    assert (runner.workdir / "out.txt").read_text() == "edited\n"


async def test_inject_gives_a_second_turn(claude_binary, scripted_api, runner_factory):
    api = scripted_api([SLOW_TEXT, Reply.text("second answer")])
    async with runner_factory(api) as runner:
        phase = PhaseCall(runner.stub, "ij", "p1", str(runner.workdir))
        await phase.wait_for(lambda e: e.HasField("session_init"))
        injected = await helix(address(runner), "inject", "ij", "p1", "INJECTED follow-up question")
        assert injected.code == 0, injected.err
        assert injected.out.startswith("injected message ") and "as the next user turn" in injected.out
        result = await phase.finish()
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    assert result.result_count == 2 and result.result_text == "second answer"
    assert "INJECTED follow-up question" in api.message_requests()[-1].text()


async def test_hard_pause_interrupt_then_cancel_of_an_ended_phase(
    claude_binary, scripted_api, runner_factory
):
    api = scripted_api(
        [Reply.tool_use("Bash", {"command": "python3 -c 'import time; time.sleep(60)'"}), Reply.text("never")]
    )
    async with runner_factory(api) as runner:
        at = address(runner)
        phase = PhaseCall(runner.stub, "xj", "p1", str(runner.workdir), allowed_tools=["Bash"])
        await phase.wait_for(lambda e: e.HasField("tool_call_started"))
        hard = await helix(at, "pause", "xj", "p1", "--hard")
        assert hard.lines == ["paused: phase p1 of job xj is PAUSED; its process group is stopped"], hard.err
        status = await helix(at, "inspect", "xj", "p1", "status")
        assert "hard-paused (process group stopped)" in status.out
        assert "  sandbox auto: namespaces on, network on, landlock on, seccomp on" in status.out, status.out
        refused = await helix(at, "step", "xj", "p1")
        assert refused.code == 4 and refused.err.splitlines() == [
            "helix-runner: error: cannot step: a hard pause stops the whole process; resume it instead "
            "(the phase is PAUSED) [ILLEGAL_TRANSITION]"
        ]
        assert (await helix(at, "resume", "xj", "p1")).code == 0
        await asyncio.sleep(0.5)
        interrupted = await helix(at, "interrupt", "xj", "p1")
        assert interrupted.code == 0 and interrupted.out.startswith("interrupted the current turn"), (
            interrupted.err
        )
        turn = await phase.wait_for(lambda e: e.HasField("turn_result"), limit=20)
        assert turn.turn_result.subtype == "error_during_execution"
        await phase.finish()
        late = await helix(at, "cancel", "xj", "p1")
        assert late.code == 4 and "not running; it cannot be cancelled" in late.err


async def test_cancel_ends_the_phase_with_the_reason(claude_binary, scripted_api, runner_factory):
    api = scripted_api(
        [Reply.tool_use("Bash", {"command": "python3 -c 'import time; time.sleep(60)'"}), Reply.text("never")]
    )
    async with runner_factory(api) as runner:
        phase = PhaseCall(runner.stub, "cj", "p1", str(runner.workdir), allowed_tools=["Bash"])
        await phase.wait_for(lambda e: e.HasField("tool_call_started"))
        cancelled = await helix(address(runner), "cancel", "cj", "p1", "--reason", "enough of this")
        assert cancelled.code == 0 and cancelled.out.startswith("cancel requested: phase p1 of job cj is")
        # Said once (issue 35.3: "is CANCELLED; it ends CANCELLED").
        assert not ("is CANCELLED" in cancelled.out and "it ends CANCELLED" in cancelled.out), cancelled.out
        result = await phase.finish()
    assert result.status == res.PHASE_STATUS_CANCELLED and "enough of this" in result.reason
