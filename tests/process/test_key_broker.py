"""The key broker answers only processes in an admitted session (the phase's CLI), nothing else.

Children here stand in for the CLI's session: a session leader that, once admitted, runs the key
helper itself (as the CLI runs its apiKeyHelper) or through ``setsid`` (as the CLI runs every Bash
tool command and hook). The real CLI is in ``tests/api/test_secrets.py``.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import socket

import pytest

from helix_runner.process.key_broker import KeyBroker, KeySource


@pytest.fixture
async def broker(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("sk-ant-first\n")
    b = await KeyBroker(KeySource(path=key_file)).start()
    yield b
    await b.stop()


async def in_new_session(broker: KeyBroker, shell: str, *, admit: bool = True) -> tuple[int, str, str]:
    """Runs ``shell`` as a new session leader (admitted first, if asked); (exit code, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        "sh",
        "-c",
        f"read go; {shell}",
        start_new_session=True,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    revoke = broker.admit(proc.pid, "job", "phase") if admit else None
    try:
        out, err = await asyncio.wait_for(proc.communicate(b"go\n"), 30)
    finally:
        if revoke:
            revoke()
    return proc.returncode, out.decode(), err.decode()


async def test_the_admitted_session_gets_the_key(broker):
    code, out, err = await in_new_session(broker, broker.helper_command())
    assert (code, out) == (0, "sk-ant-first\n"), err
    assert broker.served == 1


async def test_a_command_that_left_the_session_is_refused(broker):
    # What a model's Bash command is: a descendant of the CLI, in a session of its own.
    code, out, err = await in_new_session(broker, f"setsid -w {broker.helper_command()}")
    assert code == 1 and out == ""
    assert "refused" in err
    assert broker.refused == 1 and broker.served == 0


async def test_an_unadmitted_or_revoked_session_is_refused(broker):
    code, _, err = await in_new_session(broker, broker.helper_command(), admit=False)
    assert code == 1 and "refused" in err
    proc = await asyncio.create_subprocess_exec("sleep", "30", start_new_session=True)
    try:
        broker.admit(proc.pid, "job", "phase")()  # admitted, then revoked at once
    finally:
        proc.kill()
        await proc.wait()
    code, _, err = await in_new_session(broker, broker.helper_command(), admit=False)
    assert code == 1 and "refused" in err


async def test_the_server_s_own_session_is_never_admitted(broker):
    broker.admit(os.getpid(), "job", "phase")
    helper = await asyncio.create_subprocess_exec(
        *shlex.split(broker.helper_command()), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(helper.communicate(), 30)
    assert helper.returncode == 1 and out == b"" and b"refused" in err


async def test_a_rotated_key_file_takes_effect_and_an_unreadable_one_is_an_error(broker):
    broker.source.path.write_text("sk-ant-second\n")
    code, out, _ = await in_new_session(broker, broker.helper_command())
    assert (code, out) == (0, "sk-ant-second\n")
    broker.source.path.write_text("")
    code, out, err = await in_new_session(broker, broker.helper_command())
    assert code == 1 and out == "" and "cannot read its API key" in err


async def test_the_socket_is_private_and_a_foreign_request_is_refused(broker):
    assert oct(broker.socket_path.parent.stat().st_mode & 0o777) == "0o700"

    def ask() -> bytes:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(10)
            sock.connect(str(broker.socket_path))
            sock.sendall(b"GET / HTTP/1.1\n")
            return sock.recv(4096)

    assert (await asyncio.to_thread(ask)).startswith(b"ERR refused")


async def test_stop_removes_the_socket(tmp_path):
    b = await KeyBroker(KeySource(value="sk-ant-x")).start()
    path = b.socket_path
    assert path.exists()
    await b.stop()
    assert not path.parent.exists()
