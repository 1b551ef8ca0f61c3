"""The phase shim on its own: it reports, relays, reaps, adopts orphans, and ends everything.

Each case runs the real shim (as the supervisor does: ``python -E -s -S -B phase_shim.py``) with a
small shell or Python child, and checks what /proc says afterwards.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from support.processes import wait_gone

from helix_runner.process import phase_shim, procfs
from helix_runner.process.containment import shim_command


def _start(argv: list[str], marker: str = "", file_bytes: int | None = None) -> tuple[subprocess.Popen, int]:
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(
        shim_command(argv, status_fd=write_fd, marker=marker, file_bytes=file_bytes),
        pass_fds=(write_fd,),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    os.close(write_fd)
    return proc, read_fd


def _lines(read_fd: int) -> list[str]:
    with os.fdopen(read_fd, "rb") as f:
        return f.read().decode().split()


def _wait_file(path: Path, limit_s: float = 10.0) -> str:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.02)
    raise AssertionError(f"{path} was not written")


def test_reports_the_child_and_relays_its_exit_status(tmp_path):
    proc, status = _start([sys.executable, "-c", "import sys; print('out'); sys.exit(7)"])
    out, _ = proc.communicate(timeout=30)
    lines = _lines(status)
    assert lines[0] == "spawned" and lines[1].isdigit()
    assert lines[2:] == ["exited", "7"]
    assert proc.returncode == 7
    assert out == b"out\n"  # the child wrote to the shim's stdout; the shim let go of it


def test_a_killed_child_is_reported_with_its_signal(tmp_path):
    proc, status = _start([sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"])
    proc.wait(30)
    assert _lines(status)[2:] == ["exited", "-9"]


def _has_cap_sys_resource() -> bool:
    eff = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("CapEff:"))
    return bool(int(eff.split()[1], 16) >> 24 & 1)


def test_no_process_of_the_phase_writes_a_file_past_its_file_size_limit(tmp_path):
    # The workspace cap's per-file part: the kernel refuses the write (Python ignores SIGXFSZ and sees
    # EFBIG); a grandchild cannot raise the limit back (cur and max are both set).
    script = ("import resource, sys\n"
              "try:\n"
              f"    open({str(tmp_path / 'big')!r}, 'wb').write(b'x' * (3 << 20))\n"
              "except OSError as exc:\n"
              "    print(exc.errno)\n"
              "try:\n"
              "    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))\n"
              "    print('raised')\n"
              "except (ValueError, OSError):\n"
              "    print('kept')\n")
    proc, status = _start(["/bin/sh", "-c", f'{sys.executable} -c "$0"', script], file_bytes=1 << 20)
    out, err = proc.communicate(timeout=30)
    _lines(status)
    # Only CAP_SYS_RESOURCE may raise a hard limit: a root server without a sandbox passes it on.
    kept = "raised" if _has_cap_sys_resource() else "kept"
    assert out.decode().split() == ["27", kept], err  # EFBIG
    assert (tmp_path / "big").stat().st_size == 1 << 20


def test_a_missing_command_is_an_error_line(tmp_path):
    proc, status = _start([str(tmp_path / "nope")])
    proc.wait(30)
    text = " ".join(_lines(status))
    assert text.startswith("error cannot start") and "No such file" in text
    assert proc.returncode == phase_shim.EXIT_SPAWN_FAILED


def test_orphans_reparent_to_the_shim_and_end_with_it(tmp_path):
    pids = tmp_path / "pids"
    # A setsid'd job and a double-forked one, then the child exits at once.
    script = (
        f"setsid sleep 60 </dev/null >/dev/null 2>&1 & echo $! >> {pids}; "
        f"( sleep 61 </dev/null >/dev/null 2>&1 & echo $! >> {pids} ); exit 3"
    )
    proc, status = _start(["/bin/sh", "-c", script], marker="HELIX_RUNNER_SCOPE=test.shim")
    _wait_file(pids)
    deadline = time.monotonic() + 10
    while len(pids.read_text().split()) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    orphans = [int(p) for p in pids.read_text().split()]
    deadline = time.monotonic() + 10
    while any(procfs.stat_fields(p)[1] != str(proc.pid) for p in orphans) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [procfs.stat_fields(p)[1] for p in orphans] == [str(proc.pid)] * 2  # adopted: it is a subreaper
    assert sorted(procfs.descendants(proc.pid)) == sorted(orphans)
    assert all(procfs.has_marker(p, b"HELIX_RUNNER_SCOPE=test.shim") for p in orphans)
    assert proc.poll() is None  # it stays while it has children
    proc.send_signal(phase_shim.END_SIGNAL)
    proc.wait(30)
    assert wait_gone(orphans) == []
    assert proc.returncode == 3  # the child's own status
    assert _lines(status)[2:] == ["exited", "3"]


def test_sigterm_goes_to_the_childs_process_group(tmp_path):
    proc, status = _start([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"])
    assert proc.stdout.readline() == b"ready\n"
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)
    assert _lines(status)[2:] == ["exited", str(-signal.SIGTERM)]


def test_the_death_of_its_parent_ends_every_descendant(tmp_path):
    """The server killed with kill -9: the shim's parent-death signal ends the phase's processes."""
    pid_file = tmp_path / "orphan.pid"
    script = f"setsid sleep 60 </dev/null >/dev/null 2>&1 & echo $! > {pid_file}; sleep 60"
    # A stand-in server: starts the shim as its child (its --parent), then waits to be killed.
    command = shim_command(["/bin/sh", "-c", script], parent=0)
    stand_in = (
        "import os, subprocess, sys, time\n"
        "argv = sys.argv[1:]; argv[argv.index('--parent') + 1] = str(os.getpid())\n"
        "subprocess.Popen(argv)\n"
        "time.sleep(60)"
    )
    server = subprocess.Popen(
        [sys.executable, "-c", stand_in, *command], start_new_session=True, stdin=subprocess.DEVNULL
    )
    try:
        orphan = int(_wait_file(pid_file))
        shim = next(p for p in procfs.pids() if (procfs.stat_fields(p) or ["", "0"])[1] == str(server.pid))
        tree = [shim, *procfs.descendants(shim)]
        assert orphan in tree
        os.kill(server.pid, signal.SIGKILL)
        server.wait(10)
        assert wait_gone(tree, 10) == []
    finally:
        if server.poll() is None:
            server.kill()


def test_the_shim_and_its_sandbox_launcher_start_without_heavy_modules():
    """Every phase start pays the shim's imports (benchmarks/README.md, P6): `signal` pulls in enum
    (about 6 ms of a 20 ms start); the shim and sandbox/launch.py use the C module `_signal`."""
    shim_dir = Path(phase_shim.__file__).resolve().parent
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import phase_shim; from sandbox import launch; "
             "print(sorted(m for m in ('enum', 'signal', 'typing', 're') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-E", "-s", "-S", "-B", "-c", probe, str(shim_dir)], capture_output=True,
                         text=True, timeout=30, check=True)
    assert out.stdout.strip() == "[]", out.stdout
