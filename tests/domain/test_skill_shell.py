"""Which requests let a skill's shell commands run, and what of a hook input the stream carries."""

from __future__ import annotations

import json

import pytest

from helix_runner.domain.skill_shell import hook_input_preview, hook_name, skill_shell_allowed


@pytest.mark.parametrize(("allowed", "disallowed", "mode", "expected"), [
    ((), (), "", False),
    (("Skill",), (), "default", False),
    (("Bash(git:*)",), (), "", False),  # a narrow grant is not a grant for the file's command
    (("Bash",), (), "", True),
    (("Read", "Bash(*)"), (), "acceptEdits", True),
    ((), (), "bypassPermissions", True),
    (("Bash",), ("Bash",), "", False),
    ((), ("Bash(*)",), "bypassPermissions", False),
    (("Bash",), ("Bash(rm:*)",), "", True),
])
def test_a_skill_shell_command_needs_bash_allowed_as_a_whole(allowed, disallowed, mode, expected):
    assert skill_shell_allowed(allowed, disallowed, mode) is expected


# As captured from CLI 2.1.332 (docs/claude-cli-protocol.md §3.9).
CAPTURED = {"session_id": "6d89f4db", "transcript_path": "/h/.claude/projects/x/6d89f4db.jsonl", "cwd": "/w",
            "prompt_id": "9e1b", "permission_mode": "default", "effort": {"level": "medium"},
            "hook_event_name": "PreSkillShellCommand", "tool_name": "Bash",
            "tool_input": {"command": "echo SKILLSHELL-RAN > ran.txt; echo shellout"},
            "tool_use_id": "toolu_1:preamble-0", "command_name": "probe", "command_source": "projectSettings",
            "invoked_by": "claude"}


def test_the_preview_keeps_the_events_own_fields_only():
    assert json.loads(hook_input_preview(CAPTURED)) == {
        "tool_name": "Bash", "tool_input": {"command": "echo SKILLSHELL-RAN > ran.txt; echo shellout"},
        "tool_use_id": "toolu_1:preamble-0", "command_name": "probe", "command_source": "projectSettings",
        "invoked_by": "claude"}
    assert hook_input_preview("not an object") == ""
    long = hook_input_preview({**CAPTURED, "tool_input": {"command": "x" * 10_000}})
    assert len(long.encode()) <= 4096


def test_the_hook_name_is_the_event_and_what_its_matchers_match():
    assert hook_name("PreSkillShellCommand", CAPTURED) == "PreSkillShellCommand:Bash"
    assert hook_name("Interrupt", {"source": "user", "reason": "stop"}) == "Interrupt:user"
    assert hook_name("Interrupt", None) == "Interrupt"
