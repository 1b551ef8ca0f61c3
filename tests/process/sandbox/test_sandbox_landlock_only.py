"""The Landlock-only sandbox (no bubblewrap, no user namespaces: most Kubernetes pods) as a phase
gets it from ``Sandbox.prepare``, run through the shim: what other processes of the server's user
hold outside any file path a phase may open (``/dev/shm``, SysV shared memory, terminals, raw
devices) stays out of reach, and the device nodes ordinary tools use still work.

Without a mount and an IPC namespace these are the host's own; bubblewrap gives a phase private ones
(tests/security runs the same attacks through the real CLI in both modes)."""

from __future__ import annotations

import ctypes
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from helix_runner.process.containment import shim_command
from helix_runner.process.sandbox import landlock
from helix_runner.process.sandbox.phase_sandbox import Layers, Sandbox, runtime_paths
from helix_runner.process.sandbox.seccomp_filter import write_filters

# Each attempt's errno (0: it worked) and what it read.
_TRY = r"""
import ctypes, json, os, sys
facts = json.loads(sys.argv[1])
out = {}

def attempt(name, fn):
    try:
        out[name] = [0, fn()]
    except OSError as exc:
        out[name] = [exc.errno, ""]

def read(path):
    with open(path, "rb") as f:
        return f.read(64).decode(errors="replace")

def write(path):
    with open(path, "wb", buffering=0) as f:
        f.write(b"x")
    return "written"

def opened(path):  # only opened: reading a pty master or /dev/kmsg would wait
    os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY))
    return "opened"

attempt("shm_file", lambda: read(facts["shm_file"]))
attempt("terminal", lambda: write(facts["terminal"]))
for name in ("ptmx", "kmsg", "loop0"):
    attempt(name, lambda name=name: opened("/dev/" + name))
for name in ("null", "zero", "full", "urandom", "random"):
    attempt(name, lambda name=name: str(len(read("/dev/" + name))))
attempt("null_write", lambda: write("/dev/null"))
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p

def shm(shmid):
    address = libc.shmat(shmid, None, 0o10000)  # SHM_RDONLY
    if address in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "shmat")
    return ctypes.string_at(address, 64).split(b"\0")[0].decode()

attempt("sysv_attach", lambda: shm(facts["sysv_id"]))

def shmget():
    if libc.shmget(0, 4096, 0o1600) < 0:  # IPC_PRIVATE, IPC_CREAT | 0600
        raise OSError(ctypes.get_errno(), "shmget")
    return "made"

attempt("sysv_create", shmget)
print(json.dumps(out))
"""


@pytest.fixture
def sysv_segment():
    """A SysV segment of this user holding a marker (another process's), removed afterwards."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    shmid = libc.shmget(0, 4096, 0o1600)
    if shmid < 0:
        pytest.skip(f"no SysV shared memory here: {os.strerror(ctypes.get_errno())}")
    marker = "sysv-" + secrets.token_hex(6)
    address = libc.shmat(shmid, None, 0)
    ctypes.memmove(address, marker.encode(), len(marker))
    libc.shmdt(ctypes.c_void_p(address))
    yield shmid, marker
    libc.shmctl(shmid, 0, None)  # IPC_RMID


@pytest.fixture
def shm_file():
    path = Path("/dev/shm") / f"helix-test-{secrets.token_hex(6)}"
    marker = "shm-" + secrets.token_hex(6)
    path.write_text(marker)
    path.chmod(0o600)
    yield path, marker
    path.unlink(missing_ok=True)


def landlock_only(tmp_path: Path) -> tuple[Sandbox, list[str]]:
    abi = landlock.abi()
    if abi < 6:
        pytest.skip(f"needs Landlock ABI 6+ (this kernel: {abi})")
    try:
        seccomp_dir = tmp_path / "seccomp"
        write_filters(seccomp_dir)
    except (ImportError, OSError, RuntimeError) as exc:
        pytest.skip(f"no libseccomp: {exc}")
    layers = Layers(bwrap=None, netns=False, landlock_abi=abi, seccomp=True, tcp_rules=True)
    sandbox = Sandbox("auto", layers, data_dir=tmp_path / "data", egress_ports=(9,), seccomp_dir=seccomp_dir)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    phase = sandbox.prepare("run-1", cwd=str(workspace), project="p",
                            read_only=runtime_paths(os.environ.get("PATH", "")))
    return sandbox, [*phase.shim_args(), str(workspace), json.dumps(phase.env)]


def run_in_sandbox(tmp_path: Path, facts: dict) -> dict[str, list]:
    _, (flag, spec, workspace, env) = landlock_only(tmp_path)
    read_fd, write_fd = os.pipe()
    cmd = shim_command([sys.executable, "-c", _TRY, json.dumps(facts)], status_fd=write_fd, sandbox=[flag, spec])
    done = subprocess.run(cmd, pass_fds=(write_fd,), cwd=workspace, env={**json.loads(env), "PATH": os.environ["PATH"]},
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=False)
    os.close(write_fd)
    with os.fdopen(read_fd) as status:
        said = status.read()
    assert done.returncode == 0, (said, done.stderr)
    return json.loads(done.stdout)


def test_other_processes_shared_memory_terminals_and_devices_are_out_of_reach(tmp_path, sysv_segment, shm_file):
    master, slave = os.openpty()
    try:
        tried = run_in_sandbox(tmp_path, {"shm_file": str(shm_file[0]), "terminal": os.ttyname(slave),
                                          "sysv_id": sysv_segment[0]})
    finally:
        os.close(master)
        os.close(slave)
    assert tried["shm_file"][0] == 13, tried  # EACCES: /dev/shm is not on the device list
    assert tried["terminal"][0] == tried["ptmx"][0] == tried["kmsg"][0] == 13, tried
    assert tried["loop0"][0] in (2, 13), tried  # a raw block device (ENOENT where there is none)
    # No IPC namespace: the seccomp filter refuses SysV IPC (ENOSYS, as a kernel without it would).
    assert tried["sysv_attach"][0] == tried["sysv_create"][0] == 38, tried


def test_the_device_nodes_tools_use_still_work(tmp_path, sysv_segment, shm_file):
    tried = run_in_sandbox(tmp_path, {"shm_file": str(shm_file[0]), "terminal": "/nonexistent",
                                      "sysv_id": sysv_segment[0]})
    for name in ("null", "zero", "full", "urandom", "random", "null_write"):
        assert tried[name][0] == 0, (name, tried)
    assert tried["zero"][1] == "64" and tried["null"][1] == "0"
