"""A workspace skill's shell preprocessing and the CLI's Interrupt hook, over the real CLI.

A skill file's ``!`command` `` line runs while the CLI loads the skill: no tool call, so no
PreToolUse hook, and the skill's own ``allowed-tools`` grants it Bash (docs/claude-cli-protocol.md
§3.9). The server registers the CLI's ``PreSkillShellCommand`` hook and decides each such command:
refused unless the phase's request allows Bash, else held at a Bash breakpoint like a Bash call.
"""

from __future__ import annotations

import json
import shlex

import grpc
import pytest
from support.streams import start_phase

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.domain.skill_shell import NOT_EDITABLE, REFUSED_REASON
from helix_runner.offline import Reply, TextBlock

pytestmark = pytest.mark.real_cli

# A skill as a phase (or a checked-in repository) could write it: its front matter grants it Bash,
# its body runs a command when the skill loads.
SKILL = ("---\nname: probe\ndescription: a probe skill\nallowed-tools: Bash\n---\n"
         "Output: !`echo SKILLSHELL > ran.txt; echo shell-output`\nSay done.\n")

# The CLI loads a workspace's skills with its project settings; a sandboxed phase takes only the
# private user config unless the request names its sources (docs/sandbox.md), so these ask for both.
PROJECT = "user,project"


def _write_skill(workdir) -> None:
    (workdir / ".claude" / "skills" / "probe").mkdir(parents=True)
    (workdir / ".claude" / "skills" / "probe" / "SKILL.md").write_text(SKILL)


def _skill_hooks(events) -> list:
    return [e.hook for e in events if e.HasField("hook") and e.hook.hook_event == "PreSkillShellCommand"]


def _denied(events) -> list:
    return [e.control for e in events if e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_TOOL_DENIED]


async def test_a_skill_a_phase_wrote_runs_no_command_of_it_unless_the_request_allows_bash(
        claude_binary, scripted_api, runner_factory):
    # Phase 1 writes the skill with Bash (bypassPermissions: nothing asks) and invokes it at once:
    # the CLI does not know a skill written during its session (2.1.332 and 2.1.337, captured).
    write = f"mkdir -p .claude/skills/probe && printf '%s' {shlex.quote(SKILL)} > .claude/skills/probe/SKILL.md"
    api = scripted_api([Reply.tool_use("Bash", {"command": write}), Reply.tool_use("Skill", {"skill": "probe"}),
                        Reply.text("done")])
    async with runner_factory(api, allow_bypass_permissions=True) as runner:
        writer = start_phase(runner, "writer", permission_mode=res.PERMISSION_MODE_BYPASS_PERMISSIONS,
                             setting_sources=PROJECT)
        result = await writer.finish()
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        assert (runner.workdir / ".claude/skills/probe/SKILL.md").read_text() == SKILL
        assert "Unknown skill: probe" in api.message_requests()[2].tool_result_text()
        assert not (runner.workdir / "ran.txt").exists() and not _skill_hooks(writer.events)

        # Phase 2 in the same workspace allows only the Skill tool, not Bash. The CLI loads the skill
        # at start; invoked, its command would run with no PreToolUse (the skill grants itself Bash).
        api.set_script([Reply.tool_use("Skill", {"skill": "probe"}), Reply.text("done")])
        reader = start_phase(runner, "reader", allowed_tools=["Skill"], setting_sources=PROJECT)
        result = await reader.finish()
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    assert not (runner.workdir / "ran.txt").exists()  # refused: it did not run
    (hook,) = _skill_hooks(reader.events)
    assert hook.hook_name == "PreSkillShellCommand:Bash"
    seen = json.loads(hook.output_preview)
    assert seen["tool_input"] == {"command": "echo SKILLSHELL > ran.txt; echo shell-output"}
    assert seen["command_name"] == "probe" and seen["invoked_by"] == "claude"
    (denied,) = _denied(reader.events)
    assert denied.tool_name == "Bash" and denied.message == REFUSED_REASON
    assert denied.tool_use_id == hook.hook_id == seen["tool_use_id"]
    # The model reads why in the skill's text.
    assert REFUSED_REASON in api.message_requests()[-1].text()


async def test_a_skill_shell_command_is_held_at_a_bash_breakpoint_and_denied(claude_binary, scripted_api,
                                                                             runner_factory):
    api = scripted_api([Reply.tool_use("Skill", {"skill": "probe"}), Reply.text("done")])
    async with runner_factory(api) as runner:
        _write_skill(runner.workdir)
        phase = start_phase(runner, "held", allowed_tools=["Bash", "Skill"], setting_sources=PROJECT,
                            breakpoints=[res.Breakpoint(breakpoint_id="bash", tool_name="Bash")])
        hit = await phase.control(ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT)
        assert hit.control.tool_name == "Bash" and hit.control.breakpoint_id == "bash"
        assert json.loads(hit.control.input_json) == {"command": "echo SKILLSHELL > ran.txt; echo shell-output"}
        assert not (runner.workdir / "ran.txt").exists()  # held before it ran
        job = (await runner.stub.GetJob(pb.GetJobRequest(job_id="held"), timeout=10)).job
        assert job.phases[0].status == res.PHASE_STATUS_AWAITING_APPROVAL
        inspection = (await runner.stub.InspectPhase(pb.InspectPhaseRequest(**phase.ids()), timeout=10)).inspection
        (pending,) = inspection.pending_calls
        assert (pending.breakpoint_id, pending.call.name, pending.call.tool_use_id) == (
            "bash", "Bash", hit.control.tool_use_id)
        assert "echo SKILLSHELL" in pending.call.input_json
        # The CLI never runs a changed skill command: an edit is refused, the call stays held.
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await runner.stub.ResolveToolCall(pb.ResolveToolCallRequest(
                **phase.ids(tool_use_id=hit.control.tool_use_id),
                edit=pb.EditDecision(input_json=json.dumps({"command": "echo edited"}))), timeout=10)
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert NOT_EDITABLE in caught.value.details()
        await runner.stub.ResolveToolCall(pb.ResolveToolCallRequest(
            **phase.ids(tool_use_id=hit.control.tool_use_id), deny=pb.DenyDecision(message="not this one")),
            timeout=10)
        result = await phase.finish()
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    assert not (runner.workdir / "ran.txt").exists()
    assert [d.message for d in _denied(phase.events)] == ["not this one"]
    assert "not this one" in api.message_requests()[-1].text()


async def test_a_skill_shell_command_runs_where_the_request_allows_bash_and_is_seen(claude_binary, scripted_api,
                                                                                   runner_factory):
    api = scripted_api([Reply.tool_use("Skill", {"skill": "probe"}), Reply.text("done")])
    async with runner_factory(api) as runner:
        _write_skill(runner.workdir)
        phase = start_phase(runner, "allowed", allowed_tools=["Bash", "Skill"], setting_sources=PROJECT)
        result = await phase.finish()
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    assert (runner.workdir / "ran.txt").read_text() == "SKILLSHELL\n"
    (hook,) = _skill_hooks(phase.events)
    assert json.loads(hook.output_preview)["tool_input"]["command"].startswith("echo SKILLSHELL")
    assert not _denied(phase.events)
    assert "shell-output" in api.message_requests()[-1].text()


def _has_interrupt_hook(version: str) -> bool:
    # The Interrupt hook event is in CLI 2.1.337 and not in 2.1.332 (their bundles compared).
    return tuple(int(part) for part in version.split(".")[:3]) >= (2, 1, 337)


async def test_the_interrupt_hook_event_reaches_the_stream(claude_binary, scripted_api, runner_factory):
    if not _has_interrupt_hook(claude_binary.version()):
        pytest.skip(f"CLI {claude_binary.version()} has no Interrupt hook event (2.1.337 has)")
    api = scripted_api([Reply(content=[TextBlock("slowly " * 200)], chunk_delay=0.05), Reply.text("unused")])
    async with runner_factory(api) as runner:
        phase = start_phase(runner, "interrupted", include_partial_messages=True)
        await phase.wait_for(lambda e: e.HasField("partial_delta"), limit=30)
        await runner.stub.InterruptPhase(pb.InterruptPhaseRequest(**phase.ids()), timeout=15)
        hook = (await phase.wait_for(lambda e: e.HasField("hook") and e.hook.hook_event == "Interrupt")).hook
        await phase.finish()
    assert hook.kind == ev.HOOK_EVENT_KIND_STARTED and hook.hook_name == "Interrupt:user"
    assert json.loads(hook.output_preview) == {"reason": "stop", "source": "user", "via": "client"}
