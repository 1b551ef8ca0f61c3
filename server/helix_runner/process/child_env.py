"""The child's environment is composed, not inherited wholesale (docs/decisions/ADR-030.md).

Layers, later wins: the allowlisted part of the server's environment minus what the server
withholds (offline mode withholds every credential, the key-helper mode the API key), PATH with
the configured prefix (a project virtualenv's ``bin`` so ``pytest`` resolves), the caller's
variables (names must match the request allowlist), then the server's own overrides (offline
mode's API address). Whatever the child gets, every command the model runs can read.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from helix_runner.errors import ErrorKind, RunnerError

# Set by Claude Code in its own children; a nested CLI that sees it believes it runs inside
# Claude Code (claude-agent-sdk strips it, SDK issue #573).
_NEVER_INHERIT = frozenset({"CLAUDECODE"})

# Every variable through which the CLI (or a tool it runs) could reach a real model provider or
# cloud account: Anthropic keys, tokens, endpoints and custom headers, Claude Code's OAuth token and
# provider switches (Bedrock, Vertex, Foundry), a foreign config dir (its settings can name an
# apiKeyHelper, its credentials file holds OAuth tokens), and AWS / Google / Azure credentials.
# Offline mode withholds all of them: its model is a script and needs none.
CREDENTIAL_ENV = (
    "ANTHROPIC_*",
    "CLAUDE_CODE_OAUTH_*",
    "CLAUDE_CODE_USE_*",
    "CLAUDE_CODE_SKIP_*_AUTH",
    "CLAUDE_CONFIG_DIR",
    "AWS_*",
    "GOOGLE_*",
    "GCLOUD_*",
    "CLOUDSDK_*",
    "CLOUD_ML_REGION",
    "VERTEX_REGION_*",
    "AZURE_*",
)


def matches_any(name: str, patterns: Iterable[str]) -> bool:
    """Whether ``name`` matches one of the names or ``*`` patterns."""
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def compose_child_env(
    server_env: Mapping[str, str],
    *,
    inherit: Sequence[str],
    path_prefix: Sequence[Path],
    request_env: Mapping[str, str],
    request_allowlist: Sequence[str],
    overrides: Mapping[str, str] | None = None,
    withhold: Sequence[str] = (),
) -> dict[str, str]:
    """The environment for one CLI run; ENV_NOT_ALLOWED names a request variable outside the allowlist.

    ``withhold`` (names or ``*`` patterns) is never inherited, whatever ``inherit`` allows.
    """
    for name in request_env:
        if not matches_any(name, request_allowlist):
            raise RunnerError(
                ErrorKind.INVALID_ARGUMENT,
                "ENV_NOT_ALLOWED",
                f"environment variable {name} may not be set by a request",
                {"name": name, "allowlist": ",".join(request_allowlist)},
            )
    env = {
        k: v
        for k, v in server_env.items()
        if matches_any(k, inherit) and k not in _NEVER_INHERIT and not matches_any(k, withhold)
    }
    path_parts = [str(p) for p in path_prefix]
    base_path = server_env.get("PATH", os.defpath)
    env["PATH"] = os.pathsep.join([*path_parts, base_path]) if path_parts else base_path
    env.update(request_env)
    env.update(overrides or {})
    return env


def missing_commands(commands: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """The required commands that do not resolve on the child's PATH (the preflight)."""
    return [c for c in commands if shutil.which(c, path=env.get("PATH", "")) is None]
