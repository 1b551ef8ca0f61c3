"""The server process is non-dumpable: another process of its user cannot read its /proc files.

As an unprivileged user (root reads every process's /proc anyway): a process holding a secret in
its environment, and a second process of the same user trying to read it.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.processes import as_nobody, nobody_env, nobody_python

# Holds SECRET in its environment, optionally non-dumpable, starts an exec'd child (which inherits
# SECRET), prints both pids, then waits for stdin to close.
HOLDER = """
import os, subprocess, sys
from helix_runner.process.dumpable import make_undumpable
if sys.argv[1] == "protect":
    assert make_undumpable()
child = subprocess.Popen(["/bin/cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
print(os.getpid(), child.pid, flush=True)
sys.stdin.read()
child.stdin.close()
child.wait()
"""
READER = """
import sys
for pid in sys.argv[1:]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            print(pid, "SECRET=s3cret-value" in f.read().decode(errors="replace").split("\\0"))
    except OSError as exc:
        print(pid, type(exc).__name__)
"""


def what_another_process_reads(python: str, mode: str) -> dict[str, str]:
    holder = subprocess.Popen(as_nobody(python, "-c", HOLDER, mode), env=nobody_env(SECRET="s3cret-value"),
                              cwd="/", stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        pid, child = holder.stdout.readline().split()
        reader = subprocess.run(as_nobody(python, "-c", READER, pid, child), env=nobody_env(), cwd="/",
                                capture_output=True, text=True, timeout=30)
        assert reader.returncode == 0, reader.stderr
        seen = dict(line.split() for line in reader.stdout.splitlines())
        return {"holder": seen[pid], "child": seen[child]}
    finally:
        holder.stdin.close()
        holder.wait(30)


def test_a_process_of_the_same_user_cannot_read_a_non_dumpable_process_environment():
    python = nobody_python()
    if python is None:
        pytest.skip("needs root, setpriv and a Python that nobody can run")
    assert what_another_process_reads(python, "open") == {"holder": "True", "child": "True"}  # the threat
    # Non-dumpable: refused; its exec'd child is dumpable again (the server reads its phases' markers).
    assert what_another_process_reads(python, "protect") == {"holder": "PermissionError", "child": "True"}


def test_make_undumpable_clears_the_flag_of_the_calling_process():
    code = ("import ctypes; from helix_runner.process.dumpable import make_undumpable; "
            "dumpable = lambda: ctypes.CDLL(None).prctl(3, 0, 0, 0, 0);  # PR_GET_DUMPABLE\n"
            "before = dumpable(); ok = make_undumpable(); print(before, ok, dumpable())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout.split() == ["1", "True", "0"]
