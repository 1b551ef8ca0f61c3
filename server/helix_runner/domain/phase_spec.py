"""What a caller asks for when it starts a phase, validated before anything runs.

Values end up as command-line arguments of the CLI, so besides sizes we refuse anything that
could be read as a flag (a leading ``-``) or smuggle a newline.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from helix_runner.domain.bounds import (
    ENV_VALUE_MAX_BYTES,
    MAX_TURNS,
    PROMPT_MAX_BYTES,
    SYSTEM_PROMPT_MAX_BYTES,
)
from helix_runner.errors import invalid_field

ID_PATTERN = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
# Model names, session ids: conservative token charset, never a leading dash.
TOKEN_PATTERN = re.compile(r"^[A-Za-z0-9_.:@/\[\]][A-Za-z0-9_.:@/\[\]-]{0,199}$")
TOOL_PATTERN = re.compile(r"^[A-Za-z0-9_][^\n\r\x00,]{0,511}$")

PERMISSION_MODES = ("default", "acceptEdits", "bypassPermissions", "plan", "dontAsk")
ON_DISCONNECT = ("CANCEL", "DETACH")


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
    permission_mode: str = ""
    max_turns: int = 0
    max_budget_usd: float | None = None
    append_system_prompt: str = ""
    resume_session_id: str = ""
    timeout_s: float = 0.0
    idle_timeout_s: float = 0.0
    include_partial_messages: bool = False
    include_raw_unknown: bool = False
    on_disconnect: str = "CANCEL"
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    fallback_model: str = ""

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
            raise invalid_field("prompt", f"is {size} bytes; the limit is {PROMPT_MAX_BYTES}")
        if not self.working_dir:
            raise invalid_field("working_dir", "is required")
        for name in ("model", "fallback_model", "resume_session_id"):
            value = getattr(self, name)
            if value and not TOKEN_PATTERN.match(value):
                raise invalid_field(f"options.{name}", f"{value[:80]!r} is not a valid name")
        for name in ("allowed_tools", "disallowed_tools"):
            for tool in getattr(self, name):
                if not TOOL_PATTERN.match(tool):
                    raise invalid_field(f"options.{name}", f"{tool[:80]!r} is not a tool name or rule")
        if self.permission_mode and self.permission_mode not in PERMISSION_MODES:
            raise invalid_field("options.permission_mode", f"unknown mode {self.permission_mode!r}")
        if not 0 <= self.max_turns <= MAX_TURNS:
            raise invalid_field("options.max_turns", f"must be between 0 and {MAX_TURNS}")
        if self.max_budget_usd is not None and not (0 < self.max_budget_usd < 1e6):
            raise invalid_field("options.max_budget_usd", "must be a positive amount")
        if len(self.append_system_prompt.encode()) > SYSTEM_PROMPT_MAX_BYTES:
            raise invalid_field("options.append_system_prompt", f"exceeds {SYSTEM_PROMPT_MAX_BYTES} bytes")
        if self.timeout_s < 0 or self.idle_timeout_s < 0:
            raise invalid_field("options.timeout", "must not be negative")
        if self.on_disconnect not in ON_DISCONNECT:
            raise invalid_field("options.on_disconnect", f"unknown value {self.on_disconnect!r}")
        for key, value in self.env.items():
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$", key):
                raise invalid_field("options.env", f"{key[:80]!r} is not a valid variable name")
            if "\x00" in value or len(value.encode()) > ENV_VALUE_MAX_BYTES:
                raise invalid_field("options.env", f"value of {key} is too long or contains NUL")


def _check_id(name: str, value: str, *, required: bool) -> None:
    if not value and not required:
        return
    if not ID_PATTERN.match(value):
        raise invalid_field(name, "must be 1-128 characters of letters, digits, '.', '_', ':' or '-'")
