"""scripts/serve and scripts/bootstrap as a newcomer uses them (real subprocesses)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from hashlib import sha256
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.prefix)


def _bootstrapped() -> bool:
    stamp = VENV / ".helix-installed"
    want = sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    return stamp.is_file() and stamp.read_text().strip() == want


@pytest.fixture
def default_ports_busy():
    """Issue 22 item 11: the suite must pass while the user's own `scripts/serve` holds the default
    ports (50051, 50052); these are held for the test when free (else someone already holds them)."""
    held = []
    for port in (50051, 50052):
        sock = socket.socket()
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
            held.append(sock)
        except OSError:
            sock.close()
    yield
    for sock in held:
        sock.close()


@pytest.mark.skipif(not _bootstrapped(), reason="this virtualenv was not set up by scripts/bootstrap")
def test_serve_resolves_relative_paths_and_the_default_root_against_the_callers_directory(tmp_path,
                                                                                          default_ports_busy):
    caller = tmp_path / "caller"
    caller.mkdir()
    (caller / "script.json").write_text(
        json.dumps({"turns": [{"content": [{"type": "text", "text": "hi"}]}]})
    )
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "HELIX_VENV": str(VENV), "PYTHONUNBUFFERED": "1"}
    log, out = tmp_path / "serve.log", tmp_path / "serve.out"
    argv = [
        str(ROOT / "scripts" / "serve"),
        "--port",
        "0",
        "--web-port",  # not the default 50052: the user's own server may hold it
        "0",
        "--data-dir",
        "data",
        "--log-format",
        "json",
        "--offline-script",
        "script.json",
    ]
    with log.open("w") as stderr, out.open("w") as stdout:
        proc = subprocess.Popen(
            argv,
            cwd=caller,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
    try:
        serving = _serving_line(log, proc)
    finally:
        with contextlib.suppress(ProcessLookupError):  # it may have exited: keep its failure in view
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    assert serving["workspace_roots"] == [str(caller.resolve())]
    assert (caller / "data" / "helix-runner.sqlite3").is_file()
    # Issue 22 item 9: the client verbs' command is not on PATH; scripts/serve says where it is.
    first = out.read_text().splitlines()[0]
    assert first == (f"Command line: {VENV}/bin/helix-runner (`source {VENV}/bin/activate` puts helix-runner "
                     "on PATH)")


def _serving_line(log: Path, proc: subprocess.Popen, limit_s: float = 60.0) -> dict:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if '"serving"' in line:
                return json.loads(line)
        assert proc.poll() is None, log.read_text()
        time.sleep(0.05)
    raise AssertionError("scripts/serve did not start: " + log.read_text())


def test_bootstrap_says_what_it_installs_and_is_silent_when_nothing_changed(tmp_path):
    # A stand-in virtualenv whose python records what it was asked to run (no real install).
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    calls = tmp_path / "calls"
    fake = venv / "bin" / "python"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {calls}\necho "warnings: $PYTHONWARNINGS" >> {calls}\n')
    fake.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "HELIX_VENV": str(venv)}

    first = subprocess.run(
        [ROOT / "scripts" / "bootstrap"], env=env, capture_output=True, text=True, timeout=60
    )
    assert first.returncode == 0, first.stderr
    assert "bootstrap: installing helix-runner and its dependencies" in first.stderr
    assert "bootstrap: installed in" in first.stderr
    # One editable install: helix-runner ships the Python client (nothing resolved by that name).
    assert "-m pip install --quiet -e .[dev]" in calls.read_text() and "clients/python" not in calls.read_text()
    # setuptools' seven-line "Editable installation" warning (it read like an error) is filtered out.
    install = calls.read_text().split("-m pip install --quiet -e .[dev]\n", 1)[1]
    assert install.startswith("warnings: ignore:Editable installation\n")

    again = subprocess.run(
        [ROOT / "scripts" / "bootstrap"], env=env, capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 0 and again.stderr == ""


def test_bootstrap_finds_libseccomp_in_a_long_library_listing(tmp_path):
    # CI saw bootstrap run apt on a machine that had both packages: `ldconfig -p | grep -q` under
    # pipefail fails when grep quits at its first match and ldconfig dies writing the rest (SIGPIPE).
    # Stand-ins make that race certain: libseccomp is the first of ~1 MiB of listing.
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / ".helix-installed").write_text(
        subprocess.run(["sha256sum"], stdin=open(ROOT / "pyproject.toml"), capture_output=True, text=True)
        .stdout.split()[0] + "\n"
    )
    (venv / "bin" / "python").write_text("#!/bin/sh\nexit 0\n")
    (venv / "bin" / "python").chmod(0o755)
    tools = tmp_path / "bin"
    tools.mkdir()
    apt_calls = tmp_path / "apt-calls"
    stand_ins = {
        "ldconfig": "echo '\tlibseccomp.so.2 (libc6,x86-64) => /lib/libseccomp.so.2'\n"
        "yes '\tlibother.so.1 (libc6,x86-64) => /lib/libother.so.1' | head -n 20000\n",
        "bwrap": "exit 0\n",
        "tmux": "exit 0\n",
        "id": "echo 0\n",
        "apt-get": f'echo "$*" >> {apt_calls}\n',
    }
    for name, body in stand_ins.items():
        (tools / name).write_text("#!/bin/sh\n" + body)
        (tools / name).chmod(0o755)
    env = {"PATH": f"{tools}:{os.environ['PATH']}", "HELIX_VENV": str(venv)}

    run = subprocess.run(
        [ROOT / "scripts" / "bootstrap"], env=env, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    assert not apt_calls.exists()


@pytest.mark.skipif(not _bootstrapped(), reason="this virtualenv was not set up by scripts/bootstrap")
def test_test_fast_runs_only_pytests_fast_tier(tmp_path):
    # Client toolchains that fail loudly if --fast touched them.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("cargo", "npm", "node"):
        fake = bin_dir / tool
        fake.write_text(f"#!/bin/sh\necho {tool} was called >&2\nexit 97\n")
        fake.chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "HELIX_VENV": str(VENV),
    }
    run = subprocess.run(
        [
            ROOT / "scripts" / "test",
            "--fast",
            "--collect-only",
            "-p",
            "no:cacheprovider",
            "tests/api/test_run_phase.py",
            "tests/api/test_wire.py",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "was called" not in run.stderr and "== buf" not in run.stdout
    assert "== import contracts" in run.stdout and "0 broken" in run.stdout  # before pytest, in both tiers
    assert "hypothesis profile: dev" in run.stdout  # property tests draw a sample in the fast tier
    collected = [line.strip() for line in run.stdout.splitlines() if "<Function " in line]
    assert collected and all("test_run_phase" not in line for line in collected)
    assert "deselected" in run.stdout  # test_run_phase.py is real_cli


def _path_without_toolchains(tmp_path: Path) -> str:
    """A PATH with a shell and the coreutils the scripts use, but no cargo, npm or node."""
    bin_dir = tmp_path / "bare-bin"
    bin_dir.mkdir()
    for tool in ("bash", "env", "dirname", "cat", "sha256sum", "cut", "mkdir", "find", "sort", "git", "id"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


@pytest.mark.parametrize(("script", "args"), [("test-clients", []), ("build-web", []), ("test", []),
                                              ("generate-clients", [])])
def test_a_missing_toolchain_is_one_line_naming_it_before_anything_runs(tmp_path, script, args):
    """Issue 22 item 12: without cargo the full suite stopped at `scripts/test-clients: line 51: cargo:
    command not found`, after installing and building other things first."""
    env = {"PATH": _path_without_toolchains(tmp_path), "HOME": str(tmp_path), "HELIX_VENV": str(VENV)}
    run = subprocess.run([ROOT / "scripts" / script, *args], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1, run.stdout + run.stderr
    assert run.stdout == "", run.stdout  # nothing started
    (line,) = run.stderr.splitlines()
    assert line.startswith(f"scripts/{script}: ") and " not found on PATH" in line, line
    assert ("cargo" in line) or ("npm" in line) or ("node" in line)
    assert "--fast" in line or script != "test"
