"""`helix-runner serve` reports bad input as one line, not a traceback (real subprocesses)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

HELIX_RUNNER = os.path.join(os.path.dirname(sys.executable), "helix-runner")


def _serve(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELIX_RUNNER_")}
    return subprocess.run(
        [sys.executable, "-m", "helix_runner", "serve", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def _assert_one_line_error(result: subprocess.CompletedProcess[str], needle: str) -> None:
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines, result.stderr
    assert "Traceback" not in result.stderr
    assert lines[-1].startswith("helix-runner: error:"), result.stderr
    assert needle in lines[-1], result.stderr


def test_bad_flag(tmp_path):
    _assert_one_line_error(_serve("--port", "nope"), "--port")


@pytest.mark.parametrize("command", ["module", "console script"])
def test_busy_port_is_one_line_without_grpc_core_logs(tmp_path, command):
    # gRPC's C core logged "E... add_port.cc:83] Failed to add port ..." before our own error.
    argv = [sys.executable, "-m", "helix_runner"] if command == "module" else [HELIX_RUNNER]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HELIX_RUNNER_", "GRPC_"))}
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = subprocess.run(
            [
                *argv,
                "serve",
                "--port",
                str(port),
                "--data-dir",
                str(tmp_path / "d"),
                "--workspace-root",
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            timeout=30,
            env=env,
        )
    # Our own structured log lines (JSON, e.g. the containment line at start) may precede the
    # error; nothing else may: no C-core line, no traceback.
    lines = [line for line in result.stderr.splitlines() if line and not line.startswith('{"ts":')]
    assert len(lines) == 1 and lines[0].startswith("helix-runner: error:"), result.stderr
    assert "add_port" not in result.stderr and f"127.0.0.1:{port}" in lines[0]


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere; covered by the file-in-the-way case")
def test_unwritable_data_dir(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    _assert_one_line_error(
        _serve("--data-dir", str(locked / "d"), "--workspace-root", str(tmp_path)), "not writable"
    )


def test_data_dir_that_is_a_file(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = _serve("--port", "0", "--data-dir", str(blocker / "d"), "--workspace-root", str(tmp_path))
    _assert_one_line_error(result, "not writable")


def test_refuses_non_loopback_without_token(tmp_path):
    _assert_one_line_error(_serve("--host", "0.0.0.0", "--workspace-root", str(tmp_path)), "auth-token-file")


def test_unusable_tls_files_are_one_line(tmp_path):
    cert = tmp_path / "cert.pem"
    cert.write_text("not a certificate\n")
    key = tmp_path / "key.pem"
    key.write_text("not a key\n")
    result = _serve("--tls-cert-file", str(cert), "--tls-key-file", str(key), "--workspace-root", str(tmp_path))
    _assert_one_line_error(result, f"tls_cert_file {cert}")
    missing = _serve("--tls-cert-file", str(cert), "--tls-key-file", str(tmp_path / "nope.pem"))
    _assert_one_line_error(missing, "cannot read tls_key_file")


def test_ctrl_c_on_a_terminal_gives_human_lines_that_start_after_the_echoed_ctrl_c(tmp_path):
    """Issue 22 item 15: on a terminal `serve` logged JSON, and Ctrl-C's echoed ^C ran into the
    next line. Here on a pseudo-terminal: human lines, and a newline right after ^C."""
    import pty
    import select
    import time

    env = {k: v for k, v in os.environ.items() if not k.startswith("HELIX_RUNNER_")}
    env["HOME"] = str(tmp_path)
    pid, fd = pty.fork()
    if pid == 0:  # the child: `serve` on the pseudo-terminal, as a person starts it
        os.execve(sys.executable, [sys.executable, "-m", "helix_runner", "serve", "--port", "0",
                                   "--data-dir", str(tmp_path / "data"), "--workspace-root", str(tmp_path)], env)
    output = b""

    def read_until(needle: bytes, limit_s: float) -> None:
        nonlocal output
        deadline = time.monotonic() + limit_s
        while needle not in output:
            assert time.monotonic() < deadline, output.decode(errors="replace")
            if select.select([fd], [], [], 0.1)[0]:
                try:
                    output += os.read(fd, 4096)
                except OSError:  # the child closed the terminal
                    break

    try:
        read_until(b" serving ", 60)
        os.write(fd, b"\x03")  # Ctrl-C: the terminal echoes ^C and signals the foreground group
        read_until(b" stopped", 30)
    finally:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
        os.close(fd)
    text = output.decode(errors="replace")
    assert '{"ts"' not in text  # not JSON on a terminal
    assert "^C\r\n" in text and " info    draining " in text, text
