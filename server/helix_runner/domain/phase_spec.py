"""What a caller asks for when it starts a phase, validated before anything runs.

Values end up as command-line arguments of the CLI, so besides sizes we refuse anything that
could be read as a flag (a leading ``-``) or smuggle a newline.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from helix_runner.domain.api_features import validate_names
from helix_runner.domain.bounds import (
    ENV_VALUE_MAX_BYTES,
    MAX_TURNS,
    PROMPT_MAX_BYTES,
    SYSTEM_PROMPT_MAX_BYTES,
)
from helix_runner.domain.json_depth import check_json_depth
from helix_runner.errors import invalid_field

ID_PATTERN = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
# The project of a phase whose request names none (an empty project_id): every record says this name.
DEFAULT_PROJECT = "default"
# Model names, session ids: conservative token charset, never a leading dash.
TOKEN_PATTERN = re.compile(r"^[A-Za-z0-9_.:@/\[\]][A-Za-z0-9_.:@/\[\]-]{0,199}$")
TOOL_PATTERN = re.compile(r"^[A-Za-z0-9_][^\n\r\x00,]{0,511}$")



class PermissionMode(StrEnum):
    """The CLI's ``--permission-mode`` values (its own spelling, which is also what a spec holds)."""

    DEFAULT = "default"
    ACCEPT_EDITS = "acceptEdits"
    BYPASS_PERMISSIONS = "bypassPermissions"
    PLAN = "plan"
    DONT_ASK = "dontAsk"


class OnDisconnect(StrEnum):
    """What happens to a phase when its RunPhase caller goes away (the phase row stores the name)."""

    CANCEL = "CANCEL"
    DETACH = "DETACH"


PERMISSION_MODES = tuple(PermissionMode)
ON_DISCONNECT = tuple(OnDisconnect)
# Resource limits (enforced by the phase's cgroup): below 32 MiB the CLI cannot even start.
MIN_MEMORY_LIMIT_BYTES = 32 * 1024 * 1024
MIN_CPU_LIMIT_MILLICORES = 10
MAX_CPU_LIMIT_MILLICORES = 1_000_000
# Processes and threads of a phase at once: the CLI alone runs about a dozen threads.
MIN_PIDS_LIMIT = 16
MAX_PIDS_LIMIT = 4_194_304  # the kernel's pid_max ceiling
# A workspace cap below this would stop a phase for its CLI's own session files.
MIN_WORKSPACE_MAX_BYTES = 16 * 1024 * 1024
WORKSPACE_MODES = ("IN_PLACE", "GIT_WORKTREE")
WORKTREE_RETENTIONS = ("", "KEEP", "REMOVE", "REMOVE_ON_SUCCESS")
# A commit-ish: names, `~`/`^` suffixes, `@{...}`; never a leading dash (it would be read as a flag).
BASE_REF_PATTERN = re.compile(r"^[A-Za-z0-9_./@{}^~][A-Za-z0-9_./@{}^~:-]{0,255}$")
MAX_ADD_DIRS = 32
EFFORTS = ("", "low", "medium", "high", "xhigh", "max")
UUID_PATTERN = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
TOOL_NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,127}$")
# JSON options (--mcp-config, --agents, --settings), each one CLI argument: Linux caps a single
# argument at 128 KiB (MAX_ARG_STRLEN), so larger values could not be passed at all.
MAX_JSON_OPTION_BYTES = 100 * 1024
SETTING_SOURCES = ("user", "project", "local")
# MCP server and agent names: what the CLI shows in its init line and tool names (mcp__<name>__...).
CONFIG_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
# The `$schema` values of draft 07 (with or without the trailing '#'): the only draft the CLI accepts.
DRAFT_07_URIS = ("http://json-schema.org/draft-07/schema", "https://json-schema.org/draft-07/schema")


@dataclass(frozen=True)
class PhaseSpec:
    """A validated request to run one phase (build it with ``PhaseSpec.create``)."""

    job_id: str
    phase_id: str
    project_id: str
    prompt: str
    working_dir: str
    model: str = ""
    allowed_tools: tuple[str, ...] = ()
    disallowed_tools: tuple[str, ...] = ()
    permission_mode: str = ""  # a PermissionMode; "": the CLI's default
    max_turns: int = 0
    max_budget_usd: float | None = None
    append_system_prompt: str = ""
    resume_session_id: str = ""
    timeout_s: float = 0.0
    idle_timeout_s: float = 0.0
    include_partial_messages: bool = False
    include_raw_unknown: bool = False
    on_disconnect: str = OnDisconnect.CANCEL  # an OnDisconnect
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    fallback_model: str = ""
    memory_limit_bytes: int = 0  # 0: the server's default
    cpu_limit_millicores: int = 0  # 0: the server's default
    # Workspace (see process/git_worktree.py): IN_PLACE or GIT_WORKTREE, its base ref and retention
    # ("" = the server's default), and the `--add-dir` directories.
    workspace: str = "IN_PLACE"
    base_ref: str = ""
    worktree_retention: str = ""
    add_dirs: tuple[str, ...] = ()
    # Further CLI run options (see PhaseOptions in runner_service.proto); tools None = the CLI's set.
    system_prompt: str = ""
    effort: str = ""
    tools: str | None = None
    session_id: str = ""
    fork_session: bool = False
    # A fork (docs/fork-and-rewind.md): the resumed session is cut after this transcript entry
    # (`--resume-session-at`, a hidden flag of CLI 2.1.332); set by the server, never by a request.
    resume_session_at: str = ""
    include_hook_events: bool = False
    no_session_persistence: bool = False
    bare: bool = False
    # JSON objects as text (validated; see _check_json_options). mcp_config and settings may hold
    # secrets: they reach the CLI only as private files (process.secret_files), never logs or the
    # result (claude_command.redact_argv).
    mcp_config: str = ""
    strict_mcp_config: bool = False
    agents: str = ""
    settings: str = ""
    setting_sources: str | None = None  # None: the CLI's default sources
    # `--json-schema`: a JSON Schema (object) for the final answer; "" for free text.
    json_schema: str = ""
    # Domains the egress proxy allows this phase besides the server's (validated by the phases layer
    # with the proxy's rules, helix_runner/egress/allowlist.py).
    egress_allowlist: tuple[str, ...] = ()
    # The repository's git config, hooks and attributes and Claude Code's project settings stay
    # writable (process/sandbox/repo_guard.py; read-only by default).
    allow_repository_config_writes: bool = False
    pids_limit: int = 0  # 0: the server's default
    api_features: tuple[str, ...] = ()  # API features that reach out, allowed for this phase (api_features.py)
    workspace_max_bytes: int = 0  # 0: the server's workspace_max_bytes (phases/workspace_cap.py)

    @classmethod
    def create(cls, **values: object) -> PhaseSpec:
        spec = cls(**values)  # type: ignore[arg-type]
        spec.validate()
        return spec

    def validate(self) -> None:
        """Raises INVALID_ARGUMENT naming the first bad field."""
        _check_id("job_id", self.job_id, required=True)
        _check_id("phase_id", self.phase_id, required=True)
        _check_id("project_id", self.project_id, required=False)
        size = len(self.prompt.encode())
        if size == 0 or not self.prompt.strip():
            raise invalid_field("prompt", "must not be empty")
        if size > PROMPT_MAX_BYTES:
            raise invalid_field("prompt", f"is {size} bytes; the limit is {PROMPT_MAX_BYTES}", size=size,
                                max_size=PROMPT_MAX_BYTES)
        if not self.working_dir:
            raise invalid_field("working_dir", "is required")
        for name in ("model", "fallback_model", "resume_session_id"):
            value = getattr(self, name)
            if value and not TOKEN_PATTERN.match(value):
                raise invalid_field(f"options.{name}", f"{value[:80]!r} is not a valid name", value=value[:80])
        for name in ("allowed_tools", "disallowed_tools"):
            for tool in getattr(self, name):
                if not TOOL_PATTERN.match(tool):
                    raise invalid_field(f"options.{name}", f"{tool[:80]!r} is not a tool name or rule",
                                        value=tool[:80])
        if self.permission_mode and self.permission_mode not in PERMISSION_MODES:
            raise invalid_field("options.permission_mode", f"unknown mode {self.permission_mode!r}",
                                value=self.permission_mode)
        if not 0 <= self.max_turns <= MAX_TURNS:
            raise invalid_field("options.max_turns", f"must be between 0 and {MAX_TURNS}")
        if self.max_budget_usd is not None and not (0 < self.max_budget_usd < 1e6):
            raise invalid_field("options.max_budget_usd", "must be a positive amount")
        if len(self.append_system_prompt.encode()) > SYSTEM_PROMPT_MAX_BYTES:
            raise invalid_field("options.append_system_prompt", f"exceeds {SYSTEM_PROMPT_MAX_BYTES} bytes")
        if self.timeout_s < 0 or self.idle_timeout_s < 0:
            raise invalid_field("options.timeout", "must not be negative")
        if self.memory_limit_bytes and not MIN_MEMORY_LIMIT_BYTES <= self.memory_limit_bytes < 2**62:
            raise invalid_field(
                "options.memory_limit_bytes",
                f"must be 0 (the server's default) or at least {MIN_MEMORY_LIMIT_BYTES} bytes",
            )
        if (
            self.cpu_limit_millicores
            and not MIN_CPU_LIMIT_MILLICORES <= self.cpu_limit_millicores <= MAX_CPU_LIMIT_MILLICORES
        ):
            raise invalid_field(
                "options.cpu_limit_millicores",
                f"must be 0 (the server's default) or "
                f"{MIN_CPU_LIMIT_MILLICORES} to {MAX_CPU_LIMIT_MILLICORES}",
            )
        if self.pids_limit and not MIN_PIDS_LIMIT <= self.pids_limit <= MAX_PIDS_LIMIT:
            raise invalid_field("options.pids_limit",
                                f"must be 0 (the server's default) or {MIN_PIDS_LIMIT} to {MAX_PIDS_LIMIT}")
        if self.workspace_max_bytes and self.workspace_max_bytes < MIN_WORKSPACE_MAX_BYTES:
            raise invalid_field("options.workspace_max_bytes",
                                f"must be 0 (the server's cap) or at least {MIN_WORKSPACE_MAX_BYTES} bytes (16 MiB)")
        try:
            validate_names(self.api_features, "options.api_features")
        except ValueError as exc:
            raise invalid_field("options.api_features", str(exc).split(': ', 1)[1]) from None
        if self.on_disconnect not in ON_DISCONNECT:
            raise invalid_field("options.on_disconnect", f"unknown value {self.on_disconnect!r}",
                                value=self.on_disconnect)
        for key, value in self.env.items():
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$", key):
                raise invalid_field("options.env", f"{key[:80]!r} is not a valid variable name", name=key[:80])
            if "\x00" in value or len(value.encode()) > ENV_VALUE_MAX_BYTES:
                raise invalid_field("options.env", f"value of {key} is too long or contains NUL", name=key)
        _check_workspace(self)
        _check_run_options(self)
        _check_json_options(self)


def _check_id(name: str, value: str, *, required: bool) -> None:
    if not value and not required:
        return
    if not ID_PATTERN.match(value):
        raise invalid_field(name, "must be 1-128 characters of letters, digits, '.', '_', ':' or '-'")


def _check_workspace(spec: PhaseSpec) -> None:
    if spec.workspace not in WORKSPACE_MODES:
        raise invalid_field("options.workspace", f"unknown mode {spec.workspace!r}", value=spec.workspace)
    if spec.worktree_retention not in WORKTREE_RETENTIONS:
        raise invalid_field("options.worktree_retention", f"unknown policy {spec.worktree_retention!r}",
                            value=spec.worktree_retention)
    if spec.workspace != "GIT_WORKTREE" and (spec.base_ref or spec.worktree_retention):
        raise invalid_field("options.base_ref" if spec.base_ref else "options.worktree_retention",
                            "applies only to the GIT_WORKTREE workspace")
    if spec.base_ref and (not BASE_REF_PATTERN.match(spec.base_ref) or ".." in spec.base_ref):
        raise invalid_field("options.base_ref", f"{spec.base_ref[:80]!r} is not a valid commit-ish",
                            base_ref=spec.base_ref[:80])
    if len(spec.add_dirs) > MAX_ADD_DIRS:
        raise invalid_field("options.add_dirs", f"at most {MAX_ADD_DIRS} directories")
    for d in spec.add_dirs:
        if not d or len(d.encode()) > 4096 or any(c in d for c in "\x00\n\r"):
            raise invalid_field("options.add_dirs", f"{d[:80]!r} is not a valid path", path=d[:80])


def _check_run_options(spec: PhaseSpec) -> None:
    if len(spec.system_prompt.encode()) > SYSTEM_PROMPT_MAX_BYTES:
        raise invalid_field("options.system_prompt", f"exceeds {SYSTEM_PROMPT_MAX_BYTES} bytes")
    if spec.effort not in EFFORTS:
        raise invalid_field("options.effort", f"{spec.effort[:40]!r} is not one of {', '.join(EFFORTS[1:])}",
                            value=spec.effort[:40])
    if spec.tools:
        names = spec.tools.split(",")
        if spec.tools != "default" and not all(TOOL_NAME_PATTERN.match(n) for n in names):
            raise invalid_field("options.tools", "must be empty, 'default' or comma-separated tool names")
    if spec.session_id and not UUID_PATTERN.match(spec.session_id):
        raise invalid_field("options.session_id", "must be a UUID")
    if spec.session_id and spec.resume_session_id and not spec.fork_session:
        raise invalid_field("options.session_id", "with resume_session_id it needs fork_session")
    if spec.bare and spec.permission_mode != PermissionMode.BYPASS_PERMISSIONS:
        # Verified with CLI 2.1.330 (docs/claude-cli-protocol.md §3.6): under --bare neither the
        # PreToolUse hook registered over the stdin protocol nor settings hooks fire. The server holds
        # calls instead through an ask rule for every tool (can_use_tool), which hides what the CLI
        # would have decided itself; only under bypassPermissions is that known (allow), so other
        # modes are refused rather than run with pause and breakpoints silently lost.
        raise invalid_field("options.bare", "needs permission_mode bypassPermissions: under --bare (CLI 2.1.330) "
                                            "the CLI skips the server's PreToolUse hook, and the permission prompt "
                                            "that replaces it can only stand in for bypassPermissions")
    if spec.fork_session and not spec.resume_session_id:
        raise invalid_field("options.fork_session", "needs resume_session_id")
    if spec.resume_session_at and (not UUID_PATTERN.match(spec.resume_session_at) or not spec.resume_session_id):
        raise invalid_field("resume_session_at", "must be a transcript entry's UUID, with resume_session_id")


def json_object(name: str, text: str) -> dict:
    """``text`` parsed as a JSON object, or INVALID_ARGUMENT naming ``options.<name>``.

    The message never quotes the text: it may hold secrets.
    """
    size = len(text.encode())
    if size > MAX_JSON_OPTION_BYTES:
        raise invalid_field(f"options.{name}", f"is {size} bytes; the limit is {MAX_JSON_OPTION_BYTES}", size=size,
                            max_size=MAX_JSON_OPTION_BYTES)
    check_json_depth(f"options.{name}", text)
    try:
        value = json.loads(text)
    except ValueError as e:
        line, column = getattr(e, "lineno", "?"), getattr(e, "colno", "?")
        raise invalid_field(f"options.{name}", f"is not valid JSON (line {line}, column {column})", line=line,
                            column=column) from None
    if not isinstance(value, dict):
        raise invalid_field(f"options.{name}", "must be a JSON object")
    return value


def _named_objects(name: str, value: object, what: str) -> None:
    if not isinstance(value, dict) or not value:
        raise invalid_field(f"options.{name}", f"must map {what} names to objects")
    for key, entry in value.items():
        if not CONFIG_NAME_PATTERN.match(key):
            raise invalid_field(f"options.{name}", f"{key[:80]!r} is not a valid {what} name", name=key[:80])
        if not isinstance(entry, dict):
            raise invalid_field(f"options.{name}", f"{what} {key!r} must be a JSON object", name=key)


def _check_json_options(spec: PhaseSpec) -> None:
    if spec.mcp_config:
        config = json_object("mcp_config", spec.mcp_config)
        if set(config) != {"mcpServers"}:
            raise invalid_field("options.mcp_config", 'must be {"mcpServers": {...}}')
        _named_objects("mcp_config", config["mcpServers"], "MCP server")
    if spec.strict_mcp_config and not spec.mcp_config:
        raise invalid_field("options.strict_mcp_config", "needs mcp_config")
    if spec.agents:
        agents = json_object("agents", spec.agents)
        _named_objects("agents", agents, "agent")
        for key, agent in agents.items():
            if not isinstance(agent.get("description"), str) or not isinstance(agent.get("prompt"), str):
                raise invalid_field("options.agents", f"agent {key!r} needs string 'description' and 'prompt'",
                                    name=key)
    if spec.settings:
        settings = json_object("settings", spec.settings)
        permissions = settings.get("permissions")
        if spec.bare and isinstance(permissions, dict) and "ask" in permissions:
            # The server's own ask rule gates every call under --bare; the CLI would not tell a
            # caller's ask from it (both come from --settings).
            raise invalid_field("options.settings", "permissions.ask cannot be combined with bare")
    if spec.json_schema:
        _check_json_schema(json_object("json_schema", spec.json_schema))
    if spec.setting_sources:
        sources = spec.setting_sources.split(",")
        if not all(s in SETTING_SOURCES for s in sources) or len(set(sources)) != len(sources):
            raise invalid_field("options.setting_sources", f"must be comma-separated from {', '.join(SETTING_SOURCES)}")


def _check_json_schema(schema: dict) -> None:
    """INVALID_ARGUMENT unless ``schema`` is a valid draft-07 JSON Schema.

    CLI 2.1.330 validates with Ajv's default meta-schema, draft 07: it refuses any other
    ``$schema`` ("no schema with key or ref", exit 1) and an invalid schema ("--json-schema is not
    a valid JSON Schema"), but only after it started (docs/claude-cli-protocol.md §2.5); checking
    here refuses both before anything runs.
    """
    import jsonschema  # imported here: only phases with a schema pay for it

    declared = schema.get("$schema")
    if declared is not None and (not isinstance(declared, str) or declared.rstrip("#") not in DRAFT_07_URIS):
        raise invalid_field("options.json_schema", "must be a draft-07 JSON Schema (the CLI's validator "
                                                   "knows no other $schema)")
    try:
        jsonschema.Draft7Validator.check_schema(schema)
    except jsonschema.SchemaError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "the root"
        raise invalid_field("options.json_schema", f"is not a valid JSON Schema (at {where[:200]}: "
                                                   f"{e.message[:200]})", at=where[:200],
                            schema_error=e.message[:200]) from None
