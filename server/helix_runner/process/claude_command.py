"""Builds the CLI's command line and its first stdin line from a phase spec.

We always speak stream-json on stdin too, as claude-agent-sdk does (docs/claude-cli-protocol.md
§1): the prompt goes in as a user line, so prompts are not bound by the kernel's 128 KiB argument
limit and the same process can later take control requests and injected messages.
"""

from __future__ import annotations

import orjson

from helix_runner.domain.phase_spec import PhaseSpec

# `--permission-prompt-tool stdio` routes permission prompts to us as `can_use_tool` requests
# (docs/claude-cli-protocol.md §3.3).
BASE_ARGS = ("-p", "--output-format", "stream-json", "--verbose", "--input-format", "stream-json",
             "--permission-prompt-tool", "stdio")


def build_argv(claude_path: str, spec: PhaseSpec, *, settings: str | None = None) -> list[str]:
    """The argv for one phase (the prompt is not in it; see ``prompt_line``).

    ``settings`` is the server's own ``--settings`` JSON (the key helper); the CLI ranks it above
    the workspace's and the user's settings files, so a workspace cannot replace it.
    """
    argv = [claude_path, *BASE_ARGS]
    if settings:
        argv += ["--settings", settings]
    if spec.model:
        argv += ["--model", spec.model]
    if spec.fallback_model:
        argv += ["--fallback-model", spec.fallback_model]
    if spec.allowed_tools:
        argv += ["--allowedTools", ",".join(spec.allowed_tools)]
    if spec.disallowed_tools:
        argv += ["--disallowedTools", ",".join(spec.disallowed_tools)]
    if spec.permission_mode:
        argv += ["--permission-mode", spec.permission_mode]
    if spec.max_turns:
        argv += ["--max-turns", str(spec.max_turns)]
    if spec.max_budget_usd is not None:
        argv += ["--max-budget-usd", f"{spec.max_budget_usd:.6f}"]
    if spec.append_system_prompt:
        argv += ["--append-system-prompt", spec.append_system_prompt]
    if spec.resume_session_id:
        argv += ["--resume", spec.resume_session_id]
    if spec.include_partial_messages:
        argv += ["--include-partial-messages"]
    for directory in spec.add_dirs:  # resolved inside the workspace roots by the manager
        argv += ["--add-dir", directory]
    argv += run_option_args(spec)
    return argv


def prompt_line(prompt: str) -> bytes:
    """The stream-json user line carrying the prompt (docs/claude-cli-protocol.md §3.4)."""
    return orjson.dumps({"type": "user", "message": {"role": "user", "content": prompt}, "parent_tool_use_id": None})


def run_option_args(spec: PhaseSpec) -> list[str]:
    """The flags of the later run options (validated by the spec; values never start with '-')."""
    args: list[str] = []
    if spec.bare:
        args.append("--bare")
    if spec.system_prompt:
        args += ["--system-prompt", spec.system_prompt]
    if spec.effort:
        args += ["--effort", spec.effort]
    if spec.tools is not None:
        args.append(f"--tools={spec.tools}")  # one argument: `--tools` is variadic, "" means none
    if spec.session_id:
        args += ["--session-id", spec.session_id]
    if spec.fork_session:
        args.append("--fork-session")
    if spec.include_hook_events:
        args.append("--include-hook-events")
    if spec.no_session_persistence:
        args.append("--no-session-persistence")
    return args
