"""The CLI's hook events that no tool call stands behind: a skill's shell preprocessing and an interrupt.

A skill or command file (``.claude/skills/<name>/SKILL.md``) may hold lines of the form
``!`command` ``: the CLI runs each command while it loads the skill and puts its output in the
skill's text. That command is no tool call: the server's ``PreToolUse`` hook never sees it; the
CLI asks only its ``PreSkillShellCommand`` hooks, after its own permission rules, and a skill's
``allowed-tools`` front matter adds rules of its own (docs/claude-cli-protocol.md §3.9, captured
from CLI 2.1.332 and 2.1.337). So the server decides such a command itself: refused unless the
phase's request allows Bash as a whole, else held and decided as a Bash call would be.

``Interrupt`` (CLI 2.1.337; 2.1.332 has no such event) fires once when an interrupt ends the
turn; its answer is ignored. Both are passed through to the phase's stream as hook events.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from helix_runner.domain.bounds import SHORT_TEXT_MAX_BYTES, bound_text

PRE_SKILL_SHELL_COMMAND = "PreSkillShellCommand"
INTERRUPT = "Interrupt"

# The reason the model reads when a skill's shell command is refused by default.
REFUSED_REASON = ("a skill's shell commands run only in a phase whose request allows Bash "
                  "(allowed_tools Bash, or permission_mode bypassPermissions)")
# Why an edit cannot answer a held skill shell command: the CLI never runs a changed command
# (its schema: ``updatedInput`` "Never applied. Any value keeps the command from running").
NOT_EDITABLE = "a skill's shell command cannot be edited (the CLI never runs a changed command): approve or deny it"

# What every hook input carries (the session, not the event): left out of the stream's copy.
_COMMON_FIELDS = frozenset({"session_id", "transcript_path", "cwd", "prompt_id", "permission_mode", "effort",
                            "agent_id", "agent_type", "scratchpad_dir", "served_call", "caller_session_id",
                            "hook_event_name"})


def skill_shell_allowed(allowed_tools: Iterable[str], disallowed_tools: Iterable[str], permission_mode: str) -> bool:
    """Whether a phase's request allows a skill's shell commands: it allows Bash as a whole (``Bash``
    or ``Bash(*)`` in allowed_tools, or bypassPermissions) and does not disallow it as a whole.

    A narrower grant (``Bash(git:*)``) does not count: the command is the skill's, written by whoever
    wrote the file, not a call the caller's rule was written for.
    """
    whole = {"Bash", "Bash(*)"}
    if whole & set(disallowed_tools):
        return False
    return permission_mode == "bypassPermissions" or bool(whole & set(allowed_tools))


def hook_input_preview(hook_input: Any) -> str:
    """The event's own fields of a hook input (no session fields), as compact JSON of at most 4 KiB."""
    if not isinstance(hook_input, dict):
        return ""
    own = {key: value for key, value in hook_input.items() if key not in _COMMON_FIELDS}
    return bound_text(orjson.dumps(own, option=orjson.OPT_SORT_KEYS).decode(), SHORT_TEXT_MAX_BYTES)[0]


def hook_name(event: str, hook_input: Any) -> str:
    """The hook's name as the CLI writes it in its own hook lines: ``PreSkillShellCommand:Bash``,
    ``Interrupt:user`` (the event, then what its matchers match: the tool, the interrupt's source)."""
    if not isinstance(hook_input, dict):
        return event
    query = hook_input.get("tool_name") if event == PRE_SKILL_SHELL_COMMAND else hook_input.get("source")
    return f"{event}:{query}" if isinstance(query, str) and query else event
