"""The environment of a ``claude`` child process pointed at the scripted Messages API.

It withholds every real credential and endpoint (``ANTHROPIC_*``, ``CLAUDE_*``, ``CLAUDECODE``) and
gives the CLI a private ``HOME``, so a test or an offline phase can neither reach nor bill the real API.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

DEFAULT_API_KEY = "sk-ant-scripted-offline-key"
"""The API key handed to the CLI; the stand-in accepts any key, the CLI only needs one to be set."""

_STRIPPED_ENV_PREFIXES = ("ANTHROPIC_", "CLAUDE_")
_STRIPPED_ENV_NAMES = frozenset({"CLAUDECODE"})


def cli_env(
    base_url: str,
    *,
    home: str | os.PathLike[str],
    api_key: str = DEFAULT_API_KEY,
    max_retries: int | None = 2,
    tmpdir: str | os.PathLike[str] | None = None,
    base_env: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Environment for a ``claude`` child process that talks to the stand-in at ``base_url``.

    Starts from ``base_env`` (default: this process's environment) minus every ``ANTHROPIC_*``,
    ``CLAUDE_*`` and ``CLAUDECODE`` variable, so no real credentials, endpoints or config dirs leak
    in. ``home`` becomes ``HOME`` so ``~/.claude`` state is private to the run; ``tmpdir`` (default
    ``<home>/tmp``) becomes ``CLAUDE_CODE_TMPDIR`` for the CLI's task output files.

    Retry knobs (CLI 2.1.330, read from its bundle and checked against it): ``CLAUDE_CODE_MAX_RETRIES``
    caps the retries of every retryable error (429, 5xx, 529 and also 401; default 10, clamped to 15).
    The backoff between retries cannot be shortened: it starts at 500 ms and doubles (25 % jitter, 32 s
    cap); ``CLAUDE_CODE_OVERLOADED_RETRY_BASE_DELAY_MS`` exists but its minimum is its 500 ms default,
    and a ``retry-after`` header can only lengthen it. To fail fast instead, script the error with
    ``should_retry=False`` (header ``x-should-retry: false``), which the CLI obeys without retrying.
    ``max_retries=None`` leaves the CLI's default.
    """
    source = os.environ if base_env is None else base_env
    env = {
        key: value
        for key, value in source.items()
        if not key.startswith(_STRIPPED_ENV_PREFIXES) and key not in _STRIPPED_ENV_NAMES
    }
    home_path = Path(home)
    tmp_path = Path(tmpdir) if tmpdir is not None else home_path / "tmp"
    tmp_path.mkdir(parents=True, exist_ok=True)
    env.update(
        {
            "HOME": str(home_path),
            "ANTHROPIC_BASE_URL": base_url,
            "ANTHROPIC_API_KEY": api_key,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "CLAUDE_CODE_TMPDIR": str(tmp_path),
            "DISABLE_AUTOUPDATER": "1",
            # The CLI refuses --dangerously-skip-permissions as root unless it believes it is sandboxed.
            "IS_SANDBOX": "1",
        }
    )
    if max_retries is not None:
        env["CLAUDE_CODE_MAX_RETRIES"] = str(max_retries)
    env.update(extra or {})
    return env
