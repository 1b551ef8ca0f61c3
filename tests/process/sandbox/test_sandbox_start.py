"""The sandbox at server start, seen from outside (``helix-runner serve``): ``auto`` gives up a layer
only when the host lacks it, and any other failure stops the server with one line.

Before this, ``serve --data-dir ../data`` started from another directory lost every layer: the
start-up probe ran the shim in its own directory, where the relative path to the seccomp filter
named nothing, and ``auto`` took that for a host without a sandbox.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.processes import SERVER_SRC

from helix_runner.offline import Script

pytestmark = pytest.mark.slow

LAYERS = ("namespaces", "network", "landlock", "seccomp")


def serve(cwd: Path, *args: str, env: dict[str, str] | None = None, limit_s: float = 60) -> tuple[int | None, list]:
    """Starts ``serve`` in ``cwd`` until it serves (then stops it) or exits; (exit code or None, log records)."""
    argv = [sys.executable, "-m", "helix_runner", "serve", "--port", "0", "--log-format", "json", *args]
    full = {"PATH": os.environ["PATH"], "HOME": str(cwd), "PYTHONPATH": SERVER_SRC, **(env or {})}
    proc = subprocess.Popen(argv, cwd=cwd, env=full, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    records: list = []
    try:
        for line in proc.stderr:  # bounded by the timeout below
            try:
                records.append(json.loads(line))
            except ValueError:
                records.append({"msg": line.strip()})
            if records[-1].get("msg") == "serving":
                proc.terminate()
        code = proc.wait(limit_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    served = any(r.get("msg") == "serving" for r in records)
    return (None if served else code), records


def sandbox_line(records: list) -> dict:
    return next(r for r in records if r.get("msg") == "sandbox")


def test_a_relative_data_dir_keeps_every_layer(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    Script([]).save(tmp_path / "script.json")  # offline: the model gateway on, so the network layer can be
    code, records = serve(ws, "--data-dir", "../data", "--workspace-root", ".", "--offline-script", "../script.json")
    assert code is None, records[-3:]
    line = sandbox_line(records)
    off = {layer: line[layer] for layer in LAYERS if str(line[layer]).startswith("OFF")}
    assert not off, off
    assert (tmp_path / "data" / "sandbox" / "seccomp").is_dir()


def test_a_probe_that_fails_for_another_reason_stops_the_server(tmp_path):
    """A bubblewrap that passes detection but cannot start the probe's command for a reason that is
    not the kernel's refusal: before, ``auto`` gave the layer up and phases ran with less."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "bwrap").write_text('#!/bin/sh\ncase "$*" in\n  *--version*) echo "bubblewrap 0.8.0" ;;\n'
                                '  *--help*) echo "--size" ;;\n'
                                '  *--chdir*) echo "bwrap: execvp /bin/sh: No such file or directory" >&2; exit 1 ;;\n'
                                'esac\nexit 0\n')
    (fake / "bwrap").chmod(0o755)
    code, records = serve(tmp_path, "--data-dir", str(tmp_path / "data"), "--workspace-root", str(tmp_path),
                          env={"PATH": f"{fake}:{os.environ['PATH']}"})
    assert code is not None and code != 0, "the server started"
    last = records[-1]["msg"] if records else ""
    assert "cannot set up the phase sandbox" in json.dumps(records[-1]) and "No such file or directory" in \
        json.dumps(records[-1]), (last, records[-3:])


def test_auto_with_every_layer_off_refuses_to_start_and_off_starts(tmp_path):
    skip = ",".join(LAYERS)
    code, records = serve(tmp_path, "--data-dir", str(tmp_path / "data"), "--workspace-root", str(tmp_path),
                          "--sandbox-skip-layers", skip)
    assert code is not None and code != 0
    assert "no sandbox layer is available" in json.dumps(records[-1]) and "sandbox = off" in json.dumps(records[-1])
    code, records = serve(tmp_path, "--data-dir", str(tmp_path / "data2"), "--workspace-root", str(tmp_path),
                          "--sandbox", "off")
    assert code is None, records[-3:]
