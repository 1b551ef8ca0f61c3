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
    the workspace's and the user's settings files, so a workspace cannot replace it, and it is
    merged over the caller's ``settings`` so a caller cannot replace it either. The argv holds
    secrets (MCP env, settings): record only ``redact_argv(argv)``, and spawn the CLI with
    ``SecretArgFiles.externalize(argv)`` (process/secret_files.py), which moves them into files.
    """
    argv = [claude_path, *BASE_ARGS]
    merged = merge_settings(spec.settings, settings, bare=spec.bare)
    if merged:
        argv.append(f"--settings={merged}")
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
    for directory in spec.add_dirs:  # resolved inside the workspace roots by the phase service
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
    if spec.resume_session_at:
        # Equals form: the value can never be read as a flag (claude_agent_sdk's subprocess_cli does the same).
        args.append(f"--resume-session-at={spec.resume_session_at}")
    if spec.include_hook_events:
        args.append("--include-hook-events")
    if spec.no_session_persistence:
        args.append("--no-session-persistence")
    # One argument each (`--flag=value`): `--mcp-config` is variadic and would swallow what follows.
    if spec.mcp_config:
        args.append(f"--mcp-config={spec.mcp_config}")
    if spec.strict_mcp_config:
        args.append("--strict-mcp-config")
    if spec.agents:
        args.append(f"--agents={spec.agents}")
    if spec.setting_sources is not None:
        args.append(f"--setting-sources={spec.setting_sources}")
    if spec.json_schema:
        args.append(f"--json-schema={spec.json_schema}")
    return args


# Under --bare the CLI runs no PreToolUse hook (docs/claude-cli-protocol.md §3.6); an ask rule
# matching every tool makes it send a `can_use_tool` request for each call instead (even an
# allowed or read-only one, even under bypassPermissions), which the controller holds or allows.
BARE_ASK_RULES = ("*",)


def merge_settings(caller: str, server: str | None, *, bare: bool = False) -> str:
    """The one ``--settings`` JSON: the caller's object with the server's keys over it (its
    ``apiKeyHelper`` wins), with ``permissions.ask`` gating every tool under ``bare``; or "" when
    there is nothing to set."""
    if not caller and not bare:
        return server or ""
    merged = orjson.loads(caller) if caller else {}  # validated as a JSON object by PhaseSpec
    if server:
        merged.update(orjson.loads(server))
    if bare:
        permissions = merged.get("permissions")
        merged["permissions"] = {**(permissions if isinstance(permissions, dict) else {}),
                                 "ask": list(BARE_ASK_RULES)}
    return orjson.dumps(merged).decode()


# Flags whose values may hold secrets, and what of them the record keeps: the names one level
# down (MCP server names under "mcpServers"; agent names; top-level settings keys).
_SECRET_FLAGS = {"--mcp-config": "mcpServers", "--agents": None, "--settings": None}


def redact_argv(argv: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """``argv`` for the record: the JSON values of ``--mcp-config``, ``--agents`` and ``--settings``
    reduced to their names, each value replaced by ``***`` (e.g. ``--mcp-config={"mcpServers":
    {"db": "***"}}``)."""
    out: list[str] = []
    pending: str | None = None
    for arg in argv:
        if pending is not None:
            out.append(_redacted(pending, arg))
            pending = None
            continue
        flag, eq, value = arg.partition("=")
        if flag in _SECRET_FLAGS:
            if eq:
                out.append(f"{flag}={_redacted(flag, value)}")
            else:
                out.append(arg)
                pending = flag
            continue
        out.append(arg)
    return tuple(out)


def _redacted(flag: str, value: str) -> str:
    try:
        parsed = orjson.loads(value)
    except orjson.JSONDecodeError:
        return f"<redacted {len(value.encode())} bytes>"
    key = _SECRET_FLAGS[flag]
    if isinstance(parsed, dict) and key is not None:
        inner = parsed.get(key)
        names = {k: "***" for k in inner} if isinstance(inner, dict) else "***"
        return orjson.dumps({key: names}).decode()
    if isinstance(parsed, dict):
        return orjson.dumps({k: "***" for k in parsed}).decode()
    return f"<redacted {len(value.encode())} bytes>"
