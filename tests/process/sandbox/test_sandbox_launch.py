"""The shim starting its command in a sandbox (process/sandbox/launch.py), run as the supervisor
runs it: each way the start can fail comes back as one ``error`` status line naming what failed,
and a start that works reports the command's host pid and leaves the server's pipes to it alone.
"""

from __future__ import annotations

import marshal
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.processes import SELF_IDENTITY, find_process

from helix_runner.process.containment import shim_command
from helix_runner.process.sandbox.detect import detect

PREFIX = "cannot start the sandbox: "


@pytest.fixture(scope="module")
def bwrap() -> str:
    support = detect(frozenset({"landlock", "seccomp"}))
    if support.bwrap is None or not support.userns:
        pytest.skip(f"no bubblewrap sandbox on this host: {support.note('namespaces')}")
    return support.bwrap


def bwrap_spec(bwrap: str, cwd: Path, **extra) -> dict:
    """A small bubblewrap sandbox: the system and this Python read-only, ``cwd`` writable."""
    ro = dict.fromkeys(["/usr", "/etc", sys.prefix, sys.base_prefix,
                        os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))])
    argv = [bwrap, "--unshare-user", "--unshare-pid", "--die-with-parent", "--dev", "/dev",
            "--proc", "/proc", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
            "--symlink", "usr/lib64", "/lib64"]
    for path in ro:
        argv += ["--ro-bind", path, path]
    argv += ["--bind", str(cwd), str(cwd), "--chdir", str(cwd)]
    return {"bwrap": argv, **extra}


def shim(tmp_path: Path, spec: dict | bytes | None, argv: list[str], *, stdin=subprocess.DEVNULL):
    """The shim started with ``spec`` (marshalled; None: a spec file that does not exist):
    (the process, the status pipe's read end)."""
    path = tmp_path / "sandbox.spec"
    if spec is not None:
        path.write_bytes(spec if isinstance(spec, bytes) else marshal.dumps(spec))
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(shim_command(argv, status_fd=write_fd, sandbox=["--sandbox", str(path)]),
                            pass_fds=(write_fd,), stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=tmp_path, start_new_session=True)
    os.close(write_fd)
    return proc, read_fd


def finish(proc, read_fd) -> tuple[list[str], bytes, bytes]:
    out, err = proc.communicate(timeout=60)
    with os.fdopen(read_fd, "rb") as f:
        return f.read().decode().splitlines(), out, err


def test_a_missing_command_is_named(tmp_path):
    lines, _, _ = finish(*shim(tmp_path, {}, ["/nonexistent/claude", "-p"]))
    assert lines == [f"error {PREFIX}/nonexistent/claude: No such file or directory"]


@pytest.mark.parametrize(("spec", "said"), [
    (None, "sandbox.spec: No such file or directory"),
    (marshal.dumps(["not", "a", "spec"]), "holds no sandbox spec"),
    (b"\x00garbage", "bad marshal data"),
    ({"seccomp": "/nonexistent/filter.bpf"}, "/nonexistent/filter.bpf: No such file or directory"),
])
def test_a_spec_the_shim_cannot_use_is_refused_before_anything_runs(tmp_path, spec, said):
    marker = tmp_path / "ran"
    proc, status = shim(tmp_path, spec, ["/usr/bin/touch", str(marker)])
    lines, _, _ = finish(proc, status)
    assert len(lines) == 1 and lines[0].startswith(f"error {PREFIX}") and said in lines[0], lines
    assert proc.returncode == 127 and not marker.exists()


def test_a_failure_in_the_child_before_its_exec_is_reported(tmp_path):
    # Port 70000 cannot be bound: the child fails after entering its namespaces, before any exec.
    marker = tmp_path / "ran"
    proc, status = shim(tmp_path, {"netns": True, "ports": [70000]}, ["/usr/bin/touch", str(marker)])
    lines, _, _ = finish(proc, status)
    assert lines == [f"error {PREFIX}bind(): port must be 0-65535."] and not marker.exists()


def test_bubblewrap_that_fails_is_reported_with_its_exit_and_its_message_on_stderr(tmp_path, bwrap):
    proc, status = shim(tmp_path, {"bwrap": [bwrap, "--no-such-option"]}, ["/usr/bin/true"])
    lines, _, err = finish(proc, status)
    assert lines == [f"error {PREFIX}bubblewrap could not build the sandbox (its exit: code 1; its message is "
                     "on the phase's stderr)"]
    assert b"--no-such-option" in err


def test_a_missing_bubblewrap_is_named(tmp_path):
    lines, _, _ = finish(*shim(tmp_path, {"bwrap": ["/nonexistent/bwrap"]}, ["/usr/bin/true"]))
    assert lines == [f"error {PREFIX}/nonexistent/bwrap: No such file or directory"]


def test_the_reported_pid_is_the_commands_host_pid(tmp_path, bwrap):
    code = f"import os, sys, time; print({SELF_IDENTITY}, flush=True); sys.stdin.readline()"
    proc, status = shim(tmp_path, bwrap_spec(bwrap, tmp_path), [sys.executable, "-c", code], stdin=subprocess.PIPE)
    with os.fdopen(status, "rb") as lines:
        first = lines.readline().decode().split()
        identity = proc.stdout.readline().decode().strip()
        assert first[0] == "spawned" and find_process(identity) == int(first[1])
        own_pid = int(identity.split()[0])
        assert own_pid != int(first[1])  # inside its PID namespace it has a pid of its own
        proc.stdin.write(b"\n")
        proc.stdin.close()
        proc.wait(30)
        assert lines.read().decode().split() == ["exited", "0"]


def test_the_command_alone_holds_the_servers_stdout(tmp_path, bwrap):
    # The command closes stdout and lives on: the server must see EOF now (bubblewrap's monitor and
    # its PID 1 would otherwise hold the pipe for the sandbox's whole life).
    code = "import os, time; os.write(1, b'bye'); os.close(1); time.sleep(30)"
    proc, status = shim(tmp_path, bwrap_spec(bwrap, tmp_path), [sys.executable, "-c", code])
    try:
        started = time.monotonic()
        assert proc.stdout.read() == b"bye"
        assert time.monotonic() - started < 20 and proc.poll() is None
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        os.close(status)


def test_a_signal_to_the_shim_reaches_the_command_not_bubblewraps_monitor(tmp_path, bwrap):
    # The monitor shares the command's process group; killed by the signal, it would take the
    # sandbox down with SIGKILL before the command could handle it.
    code = ("import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *_: sys.exit(42))\n"
            "print('ready', flush=True)\n"
            "time.sleep(30)\n")
    proc, status = shim(tmp_path, bwrap_spec(bwrap, tmp_path), [sys.executable, "-c", code])
    assert proc.stdout.readline() == b"ready\n"
    proc.send_signal(signal.SIGTERM)
    lines, _, _ = finish(proc, status)
    assert lines[1:] == ["exited 42"] and proc.returncode == 42


def test_without_bubblewrap_the_child_is_the_command(tmp_path):
    code = f"import os; print({SELF_IDENTITY})"
    lines, out, _ = finish(*shim(tmp_path, {"landlock_abi": 0}, [sys.executable, "-c", code]))
    assert lines[0].split()[0] == "spawned" and lines[1:] == ["exited 0"]
    assert int(out.split()[0]) == int(lines[0].split()[1])  # no PID namespace: the pids agree
