"""A private HOME and working directory in which one test runs the real CLI against the stand-in."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helix_runner.offline import ScriptedApi
from support.cli_run import CliRun, run_cli, run_cli_async

__all__ = ["DEFAULT_CLI_TIMEOUT", "ClaudeSandbox"]

DEFAULT_CLI_TIMEOUT = 30.0
"""Seconds a CLI run may take; well under pytest-timeout's 120 s so a hang fails with the CLI's output."""

PRINT_ARGS = ("--output-format", "stream-json", "--verbose")


@dataclass(frozen=True)
class ClaudeSandbox:
    """The real CLI plus a throwaway HOME (so ``~/.claude`` state never leaks between tests) and cwd."""

    binary: Path
    home: Path
    workdir: Path

    def argv(self, prompt: str, *extra_args: str, skip_permissions: bool = True) -> list[str]:
        """``claude -p PROMPT --output-format stream-json --verbose [--dangerously-skip-permissions] ...``."""
        argv = [str(self.binary), "-p", prompt, *PRINT_ARGS]
        if skip_permissions:
            argv.append("--dangerously-skip-permissions")  # needs IS_SANDBOX=1 as root; cli_env sets it
        return argv + list(extra_args)

    def env(
        self, api: ScriptedApi, *, extra: Mapping[str, str] | None = None, **cli_env_args: Any
    ) -> dict[str, str]:
        """The child environment pointing at ``api``; see :func:`helix_runner.offline.cli_env`."""
        return api.cli_env(self.home, extra=extra, **cli_env_args)

    def run(
        self,
        api: ScriptedApi,
        prompt: str,
        *extra_args: str,
        timeout: float = DEFAULT_CLI_TIMEOUT,
        max_retries: int | None = 2,
        env_extra: Mapping[str, str] | None = None,
        skip_permissions: bool = True,
        check_timeout: bool = True,
    ) -> CliRun:
        """Run ``claude -p PROMPT`` in the sandbox against ``api`` and wait (bounded) for it to exit."""
        return run_cli(
            self.argv(prompt, *extra_args, skip_permissions=skip_permissions),
            env=self.env(api, extra=env_extra, max_retries=max_retries),
            cwd=self.workdir,
            timeout=timeout,
            check_timeout=check_timeout,
        )

    async def run_async(
        self,
        api: ScriptedApi,
        prompt: str,
        *extra_args: str,
        timeout: float = DEFAULT_CLI_TIMEOUT,
        max_retries: int | None = 2,
        env_extra: Mapping[str, str] | None = None,
        skip_permissions: bool = True,
        check_timeout: bool = True,
    ) -> CliRun:
        """:meth:`run` for async tests."""
        return await run_cli_async(
            self.argv(prompt, *extra_args, skip_permissions=skip_permissions),
            env=self.env(api, extra=env_extra, max_retries=max_retries),
            cwd=self.workdir,
            timeout=timeout,
            check_timeout=check_timeout,
        )
