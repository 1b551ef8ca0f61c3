"""scripts/serve and scripts/bootstrap as a newcomer uses them (real subprocesses)."""

from __future__ import annotations

import json
import os
import signal
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
    # The stamp covers the client too: helix-runner depends on clients/python, installed with it.
    want = sha256((ROOT / "pyproject.toml").read_bytes() + (ROOT / "clients/python/pyproject.toml").read_bytes())
    want = want.hexdigest()
    return stamp.is_file() and stamp.read_text().strip() == want


@pytest.mark.skipif(not _bootstrapped(), reason="this virtualenv was not set up by scripts/bootstrap")
def test_serve_resolves_relative_paths_and_the_default_root_against_the_callers_directory(tmp_path):
    caller = tmp_path / "caller"
    caller.mkdir()
    (caller / "script.json").write_text(
        json.dumps({"turns": [{"content": [{"type": "text", "text": "hi"}]}]})
    )
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "HELIX_VENV": str(VENV), "PYTHONUNBUFFERED": "1"}
    log = tmp_path / "serve.log"
    argv = [
        str(ROOT / "scripts" / "serve"),
        "--port",
        "0",
        "--data-dir",
        "data",
        "--log-format",
        "json",
        "--offline-script",
        "script.json",
    ]
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            argv,
            cwd=caller,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
    try:
        serving = _serving_line(log, proc)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    assert serving["workspace_roots"] == [str(caller.resolve())]
    assert (caller / "data" / "helix-runner.sqlite3").is_file()


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
    fake.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    fake.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "HELIX_VENV": str(venv)}

    first = subprocess.run(
        [ROOT / "scripts" / "bootstrap"], env=env, capture_output=True, text=True, timeout=60
    )
    assert first.returncode == 0, first.stderr
    assert "bootstrap: installing helix-runner and its dependencies" in first.stderr
    assert "bootstrap: installed in" in first.stderr
    assert "-m pip install --quiet -e clients/python -e .[dev]" in calls.read_text()

    again = subprocess.run(
        [ROOT / "scripts" / "bootstrap"], env=env, capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 0 and again.stderr == ""


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
