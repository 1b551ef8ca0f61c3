"""Hands the Anthropic API key to a phase's CLI without putting it where the model can read it.

In the key-helper mode the child's environment has no ``ANTHROPIC_API_KEY``; the CLI instead gets
``--settings {"apiKeyHelper": "<python> -m helix_runner.process.key_helper <socket>"}`` and runs
that command when it needs the key (CLI 2.1.330 sends the helper's output as ``x-api-key`` and as
a bearer token). The helper asks this broker over a unix socket in a 0700 directory; the broker
takes the caller's pid from the kernel (``SO_PEERCRED``) and answers only a process in the session
of a phase's CLI.

Why the session is the boundary: the phase's child is the leader of a new session (the
supervisor spawns it with ``start_new_session``), and the CLI runs its ``apiKeyHelper`` inside
that session but every Bash tool command and every hook in a session of its own (seen with
CLI 2.1.330 by printing ``ps -o sid`` from each; ``tests/api/test_secrets.py`` has a model's Bash
call run the helper and get refused). A process can leave a session (``setsid``) but
never join one, so nothing the model's shell starts can be in the CLI's session. The check uses
the session id of whatever pid the supervisor reports at spawn, so it holds whether the CLI is
that process or runs under a shim in the same session.

What it does not stop (README "Security"): a process of the same uid that reads the CLI's memory
or pipes through ``/proc``, and a stdio MCP server the CLI itself starts (it stays in the CLI's
session).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shlex
import shutil
import socket
import struct
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

SOCKET_NAME = "key.sock"
# The helper sends this line; anything else is refused (a stray client, a future protocol).
REQUEST = b"helix-key-request v1\n"
_UCRED = struct.Struct("3i")  # struct ucred {pid_t pid; uid_t uid; gid_t gid;}


@dataclass(frozen=True)
class _Grant:
    job_id: str
    phase_id: str


class KeySource:
    """Where the key comes from: a file re-read on every request (so a rotated key takes effect), or a value."""

    def __init__(self, *, path: Path | None = None, value: str | None = None):
        if (path is None) == (value is None):
            raise ValueError("a key source needs exactly one of path and value")
        self.path = path
        self._value = value

    def read(self) -> str:
        """The key; OSError or ValueError if the file cannot be read or is empty."""
        if self.path is None:
            assert self._value is not None
            return self._value
        key = self.path.read_text(encoding="utf-8").strip()
        if not key or "\n" in key:
            raise ValueError(f"{self.path} must hold the key on a single line")
        return key

    def describe(self) -> str:
        return f"file {self.path}" if self.path else "the server's ANTHROPIC_API_KEY"


class KeyBroker:
    """One per server: a unix socket that serves the key to processes in a registered CLI session."""

    def __init__(self, source: KeySource):
        self.source = source
        self._dir: Path | None = None
        self._server: asyncio.Server | None = None
        self._sessions: dict[int, _Grant] = {}
        self.served = 0
        self.refused = 0

    @property
    def socket_path(self) -> Path:
        assert self._dir is not None, "the broker is not started"
        return self._dir / SOCKET_NAME

    async def start(self) -> KeyBroker:
        # mkdtemp makes the directory 0700: only this uid (and root) can even reach the socket.
        self._dir = Path(tempfile.mkdtemp(prefix="helix-key-"))
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.socket_path))
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    def helper_command(self) -> str:
        """The shell command the CLI runs as its ``apiKeyHelper``."""
        return shlex.join([sys.executable, "-m", "helix_runner.process.key_helper", str(self.socket_path)])

    def cli_settings(self) -> str:
        """The ``--settings`` JSON that makes the CLI ask the helper for its key."""
        return json.dumps({"apiKeyHelper": self.helper_command()})

    def admit(self, pid: int, job_id: str, phase_id: str) -> Callable[[], None]:
        """Lets processes in ``pid``'s session have the key; returns the revocation (call it when the phase ends)."""
        try:
            sid = os.getsid(pid)
        except ProcessLookupError:  # died before we looked: nothing of it can ask
            return lambda: None
        if sid == os.getsid(0):
            # Never the server's own session: it holds whatever started the server, not one phase.
            log.error(
                "a phase's process is in the server's session; it gets no API key",
                extra={"fields": {"job_id": job_id, "phase_id": phase_id, "pid": pid}},
            )
            return lambda: None
        self._sessions[sid] = _Grant(job_id, phase_id)

        def revoke() -> None:
            if self._sessions.get(sid) == _Grant(job_id, phase_id):
                del self._sessions[sid]

        return revoke

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            answer = await self._answer(reader, writer)
            writer.write(answer)
            await writer.drain()
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
        sock: socket.socket = writer.get_extra_info("socket")
        pid, uid, _ = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
        request = await asyncio.wait_for(reader.readline(), 5.0)
        if request != REQUEST:
            return self._refuse(pid, "unknown request")
        try:
            sid = os.getsid(pid)
        except ProcessLookupError:
            return self._refuse(pid, "the requesting process is gone")
        grant = self._sessions.get(sid)
        if grant is None or uid != os.getuid():
            return self._refuse(pid, "not a phase's Claude Code process")
        try:
            key = self.source.read()
        except (OSError, ValueError) as exc:
            log.error(
                "cannot read the API key",
                extra={"fields": {"source": self.source.describe(), "error": str(exc)}},
            )
            return b"ERR the server cannot read its API key\n"
        self.served += 1
        log.info(
            "API key handed to a phase's CLI",
            extra={"fields": {"job_id": grant.job_id, "phase_id": grant.phase_id, "pid": pid}},
        )
        return b"OK " + key.encode() + b"\n"

    def _refuse(self, pid: int, why: str) -> bytes:
        self.refused += 1
        log.warning("API key request refused", extra={"fields": {"pid": pid, "reason": why}})
        return b"ERR refused: " + why.encode() + b"\n"
