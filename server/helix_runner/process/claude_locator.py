"""Find the Claude Code CLI binary the runner will spawn.

Search order: an explicit path (the ``--claude-path`` flag), then the ``HELIX_RUNNER_CLAUDE_PATH``
environment variable, then ``claude`` on ``PATH``, then the binary bundled in the ``claude-agent-sdk``
wheel (a dependency of this project, so the runner works out of the box). An explicit path or the
environment variable, when given, must be valid: the operator chose that binary, so silently running a
different one would be worse than failing.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

__all__ = [
    "ENV_VAR",
    "ClaudeBinary",
    "ClaudeNotFoundError",
    "ClaudeVersionError",
    "FoundVia",
    "bundled_claude_path",
    "locate_claude",
]

ENV_VAR = "HELIX_RUNNER_CLAUDE_PATH"
"""Environment variable naming the claude binary to use."""

_VERSION_RE = re.compile(r"\d+\.\d+\.\d+(?:[-+.\w]*)?")


class FoundVia(StrEnum):
    """Which step of the search produced the binary."""

    EXPLICIT = "explicit"
    ENV = "env"
    PATH = "path"
    BUNDLED = "bundled"


class ClaudeNotFoundError(FileNotFoundError):
    """No usable claude binary; the message lists every place that was searched and why it failed."""

    def __init__(self, attempts: list[str]) -> None:
        self.attempts = list(attempts)
        super().__init__("Claude Code CLI not found. Looked in:\n" + "\n".join(f"  - {a}" for a in attempts))


class ClaudeVersionError(RuntimeError):
    """``claude --version`` failed or printed something unexpected."""


@dataclass(frozen=True)
class ClaudeBinary:
    """A located claude executable; :meth:`version` runs ``--version`` on first use and caches it."""

    path: Path
    found_via: FoundVia
    _version_cache: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def version(self, timeout: float = 15.0) -> str:
        """The CLI version, e.g. ``"2.1.330"`` (from ``claude --version`` printing ``2.1.330 (Claude Code)``)."""
        if "version" not in self._version_cache:
            try:
                proc = subprocess.run(
                    [str(self.path), "--version"],
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                    stdin=subprocess.DEVNULL,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise ClaudeVersionError(f"{self.path} --version failed: {exc}") from exc
            match = _VERSION_RE.search(proc.stdout)
            if proc.returncode != 0 or match is None:
                raise ClaudeVersionError(
                    f"{self.path} --version exited {proc.returncode} with output "
                    f"{(proc.stdout + proc.stderr).strip()[:200]!r}"
                )
            self._version_cache["version"] = match.group(0)
        return self._version_cache["version"]


def _is_executable_file(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _why_unusable(path: Path) -> str:
    if not path.exists():
        return "does not exist"
    if not path.is_file():
        return "is not a file"
    return "is not executable"


def bundled_claude_path() -> Path | None:
    """Where ``claude-agent-sdk`` keeps its bundled CLI (``<package>/_bundled/claude``), if installed.

    Uses the import system's metadata only, so the SDK package itself is not imported.
    """
    try:
        spec = importlib.util.find_spec("claude_agent_sdk")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "_bundled" / "claude"


def locate_claude(
    explicit: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    bundled: Callable[[], Path | None] = bundled_claude_path,
) -> ClaudeBinary:
    """Find the claude binary (see the module docstring for the order).

    ``explicit`` may be a path or a bare command name (looked up on ``PATH``). ``env`` defaults to
    ``os.environ`` and supplies both ``HELIX_RUNNER_CLAUDE_PATH`` and ``PATH``. ``bundled`` returns the
    SDK's bundled binary location (or None when the SDK is absent); tests replace it.
    Raises :class:`ClaudeNotFoundError` naming every place searched.
    """
    environ = os.environ if env is None else env
    search_path = environ.get("PATH", os.defpath)

    def chosen(value: str | os.PathLike[str], via: FoundVia, label: str) -> ClaudeBinary:
        text = os.fspath(value)
        if os.sep not in text and not Path(text).exists():
            found = shutil.which(text, path=search_path)
            if found is None:
                raise ClaudeNotFoundError([f"{label}: {text!r} is not a command on PATH ({search_path})"])
            return ClaudeBinary(Path(found).absolute(), via)
        path = Path(text).expanduser()
        if not _is_executable_file(path):
            raise ClaudeNotFoundError([f"{label}: {path} {_why_unusable(path)}"])
        return ClaudeBinary(path.absolute(), via)

    if explicit is not None and os.fspath(explicit) != "":
        return chosen(explicit, FoundVia.EXPLICIT, "explicit path (--claude-path)")
    if environ.get(ENV_VAR):
        return chosen(environ[ENV_VAR], FoundVia.ENV, f"${ENV_VAR}")

    attempts = [
        "explicit path (--claude-path): not given",
        f"${ENV_VAR}: not set",
    ]
    on_path = shutil.which("claude", path=search_path)
    if on_path is not None:
        return ClaudeBinary(Path(on_path).absolute(), FoundVia.PATH)
    attempts.append(f"'claude' on PATH: not found in {search_path}")

    bundled_path = bundled()
    if bundled_path is not None:
        if _is_executable_file(bundled_path):
            return ClaudeBinary(bundled_path.absolute(), FoundVia.BUNDLED)
        attempts.append(f"claude-agent-sdk bundled binary: {bundled_path} {_why_unusable(bundled_path)}")
    else:
        attempts.append("claude-agent-sdk bundled binary: package not installed")
    raise ClaudeNotFoundError(attempts)
