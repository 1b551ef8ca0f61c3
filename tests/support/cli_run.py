"""Run a CLI process with a hard time limit and parse its stream-json stdout.

Both variants kill the whole process group on timeout (the CLI spawns shells and subagents), so a
test can never hang on a stuck CLI, and they keep whatever output arrived before the kill.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CliRun", "CliTimeoutError", "run_cli", "run_cli_async"]

_KILL_GRACE = 5.0  # seconds to collect output after SIGKILL


@dataclass(frozen=True)
class CliRun:
    """The outcome of one CLI process: exit code, parsed stdout lines, stderr."""

    argv: Sequence[str]
    returncode: int | None
    lines: list[dict[str, Any]]
    """Every stdout line that parsed as a JSON object, in order."""
    noise: list[str]
    """Non-empty stdout lines that were not JSON objects (the CLI sometimes prints warnings)."""
    stderr: str
    duration: float
    timed_out: bool

    @classmethod
    def from_output(
        cls,
        argv: Sequence[str],
        returncode: int | None,
        stdout: bytes,
        stderr: bytes,
        duration: float,
        timed_out: bool,
    ) -> CliRun:
        lines: list[dict[str, Any]] = []
        noise: list[str] = []
        for raw in stdout.decode("utf-8", errors="replace").splitlines():
            text = raw.strip()
            if not text:
                continue
            try:
                parsed = json.loads(text)
            except json.JSONDecodeError:
                parsed = None
            if isinstance(parsed, dict):
                lines.append(parsed)
            else:
                noise.append(text)
        return cls(
            argv=list(argv),
            returncode=returncode,
            lines=lines,
            noise=noise,
            stderr=stderr.decode("utf-8", errors="replace"),
            duration=duration,
            timed_out=timed_out,
        )

    def of_type(self, type_: str, subtype: str | None = None) -> list[dict[str, Any]]:
        """Lines with this ``type`` (and ``subtype``, if given)."""
        return [
            line
            for line in self.lines
            if line.get("type") == type_ and (subtype is None or line.get("subtype") == subtype)
        ]

    @property
    def results(self) -> list[dict[str, Any]]:
        return self.of_type("result")

    @property
    def result(self) -> dict[str, Any]:
        """The last ``result`` line; fails the test with a summary if there is none."""
        results = self.results
        assert results, f"no result line\n{self.describe()}"
        return results[-1]

    def content_blocks(self, line_type: str, block_type: str) -> list[dict[str, Any]]:
        """Content blocks of one type from ``assistant`` or ``user`` lines, in order."""
        blocks = []
        for line in self.of_type(line_type):
            content = line.get("message", {}).get("content")
            if isinstance(content, list):
                blocks += [b for b in content if isinstance(b, dict) and b.get("type") == block_type]
        return blocks

    def tool_uses(self, name: str | None = None) -> list[dict[str, Any]]:
        return [
            b for b in self.content_blocks("assistant", "tool_use") if name is None or b.get("name") == name
        ]

    def tool_results(self) -> list[dict[str, Any]]:
        return self.content_blocks("user", "tool_result")

    def describe(self, tail: int = 15) -> str:
        """A short summary for assertion messages: exit code, line types, last lines, stderr."""
        kinds = [
            f"{line.get('type')}/{line.get('subtype')}" if line.get("subtype") else line.get("type")
            for line in self.lines
        ]
        last = "\n".join(json.dumps(line)[:400] for line in self.lines[-tail:])
        return (
            f"argv: {' '.join(self.argv)}\nreturncode: {self.returncode} timed_out: {self.timed_out} "
            f"duration: {self.duration:.1f}s\nline types: {kinds}\nlast lines:\n{last}\n"
            f"noise: {self.noise[-5:]}\nstderr:\n{self.stderr[-2000:]}"
        )


class CliTimeoutError(AssertionError):
    """The CLI did not exit in time and was killed; ``run`` holds what it wrote until then."""

    def __init__(self, run: CliRun, timeout: float) -> None:
        self.run = run
        super().__init__(f"CLI still running after {timeout}s; killed\n{run.describe()}")


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def run_cli(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | os.PathLike[str],
    timeout: float,
    stdin_text: str | None = None,
    check_timeout: bool = True,
) -> CliRun:
    """Run ``argv`` to completion or ``timeout`` seconds, whichever comes first.

    On timeout the process group is killed; then :class:`CliTimeoutError` is raised, or (with
    ``check_timeout=False``) the partial run is returned with ``timed_out=True``.
    """
    started = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.PIPE if stdin_text is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env),
        cwd=Path(cwd),
        start_new_session=True,  # own process group, so a kill reaches the CLI's children too
    )
    timed_out = False
    try:
        stdout, stderr = proc.communicate(
            stdin_text.encode() if stdin_text is not None else None, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc.pid)
        stdout, stderr = proc.communicate(timeout=_KILL_GRACE)
    finally:
        _kill_group(proc.pid)  # background shells the CLI left behind
    run = CliRun.from_output(argv, proc.returncode, stdout, stderr, time.monotonic() - started, timed_out)
    if timed_out and check_timeout:
        raise CliTimeoutError(run, timeout)
    return run


async def run_cli_async(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | os.PathLike[str],
    # Own deadline rather than asyncio.timeout(): on expiry we still kill the group and report partial output.
    timeout: float,
    stdin_text: str | None = None,
    check_timeout: bool = True,
) -> CliRun:
    """:func:`run_cli` for async tests; the event loop stays free while the CLI runs."""
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin_text is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(env),
        cwd=Path(cwd),
        start_new_session=True,
    )
    stdout, stderr = bytearray(), bytearray()

    async def pump(stream: asyncio.StreamReader | None, sink: bytearray) -> None:
        while stream is not None and (chunk := await stream.read(65536)):
            sink.extend(chunk)

    async def feed() -> None:
        if proc.stdin is not None and stdin_text is not None:
            proc.stdin.write(stdin_text.encode())
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                await proc.stdin.drain()
            proc.stdin.close()

    timed_out = False
    try:
        async with asyncio.timeout(timeout):
            await asyncio.gather(feed(), pump(proc.stdout, stdout), pump(proc.stderr, stderr))
            await proc.wait()
    except TimeoutError:
        timed_out = True
        _kill_group(proc.pid)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), _KILL_GRACE)
    finally:
        _kill_group(proc.pid)
    run = CliRun.from_output(
        argv, proc.returncode, bytes(stdout), bytes(stderr), time.monotonic() - started, timed_out
    )
    if timed_out and check_timeout:
        raise CliTimeoutError(run, timeout)
    return run
