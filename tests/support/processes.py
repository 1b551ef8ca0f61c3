"""Processes seen from tests: is one still alive, a `helix-runner serve` started as a real child,
and commands run as an unprivileged user (``as_nobody``)."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from helix_runner.process import procfs
from helix_runner.process.procfs import process_state
from support.test_claude import test_claude


def alive(pid: int) -> bool:
    """Whether the process exists and is not a zombie (a zombie still answers kill(0))."""
    return process_state(pid) not in (None, "Z")


# What a tool writes down for a test to find it on the host, from inside a sandbox too (where its
# pid is its PID namespace's): "<its pid> <its start time in clock ticks since boot>" (the same
# clock on the host). ``SELF_IDENTITY`` is the Python expression; ``find_process`` reads it back.
# Also the inode of its PID namespace: concurrent sandboxed phases (other tests, other suites on the
# machine) each number their processes from 1, so a small pid and a start tick can match a stranger.
SELF_IDENTITY = ("f'{os.getpid()} {open(\"/proc/self/stat\").read().rsplit(\")\", 1)[1].split()[19]} "
                 "{os.stat(\"/proc/self/ns/pid\").st_ino}'")


def find_process(identity: str) -> int | None:
    """The host pid of the live process that wrote ``identity`` (``SELF_IDENTITY``), or None once it
    is gone: the process that started at that tick, in the PID namespace it named, and whose pid in
    that (innermost) namespace is the one it wrote (``NSpid``, the host pid when it has no
    namespace of its own)."""
    own, start, *namespace = (int(x) for x in identity.split())
    for pid in procfs.pids():
        if procfs.start_ticks(pid) != start or not alive(pid):
            continue
        try:
            if namespace and os.stat(f"/proc/{pid}/ns/pid").st_ino != namespace[0]:
                continue
            with open(f"/proc/{pid}/status") as f:
                nspid = next((line.split()[1:] for line in f if line.startswith("NSpid:")), [str(pid)])
        except OSError:
            continue
        if int(nspid[-1]) == own:
            return pid
    return None


def serve_env(tmp_path: Path) -> dict[str, str]:
    """A minimal environment with a private HOME under ``tmp_path``."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "PYTHONUNBUFFERED": "1"}
    if test_claude():  # the CLI the real-CLI tests were told to run
        env["HELIX_RUNNER_CLAUDE_PATH"] = test_claude()
    return env


def serve_argv(python: str, root: Path, *extra_args: str, workspace_root: Path | None = None) -> list[str]:
    """`helix-runner serve` on a free port with its data dir under ``root`` and ``root`` as workspace
    root (or ``workspace_root``, for a layout whose data dir is outside every workspace), JSON logs."""
    return [python, "-m", "helix_runner", "serve", "--port", "0", "--data-dir", str(root / "data"),
            "--workspace-root", str(workspace_root or root), "--log-format", "json", *extra_args]


def start_serve(tmp_path: Path, log: Path, *extra_args: str) -> subprocess.Popen:
    """`helix-runner serve` on a free port, data and workspace under ``tmp_path``; its JSON logs go to ``log``."""
    with open(log, "w") as stderr:
        return subprocess.Popen(
            serve_argv(sys.executable, tmp_path, *extra_args),
            env=serve_env(tmp_path), stderr=stderr, start_new_session=True,
        )


def serving_port(log: Path, proc: subprocess.Popen, limit_s: float = 10.0) -> int:
    """The port from the server's "serving" log line; fails with the log if it exits or never serves."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if '"serving"' in line:
                return int(json.loads(line)["address"].rsplit(":", 1)[1])
        assert proc.poll() is None, log.read_text()
        time.sleep(0.05)
    raise AssertionError("server did not start: " + log.read_text())


def scope_processes(data_dir: Path, recording_path: str) -> list[int]:
    """Live processes carrying a phase run's containment marker (``HELIX_RUNNER_SCOPE``, see
    runner.containment); the run id is the suffix of the phase's recording directory."""
    from helix_runner.process.containment import MARKER_NAME, instance_id
    from helix_runner.process.procfs import marked

    run_id = Path(recording_path).name.rsplit("-", 1)[-1]
    return marked(f"{MARKER_NAME}={instance_id(data_dir)}.{run_id}".encode())


def wait_gone(pids: list[int], limit_s: float = 5.0) -> list[int]:
    """Waits (bounded) until none of ``pids`` is alive; returns those still alive."""
    deadline = time.monotonic() + limit_s
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.02)


class CollectingSink:
    """A ``ProcessSupervisor`` sink that keeps what the child wrote: stdout bytes and stderr lines."""

    def __init__(self) -> None:
        self.stdout = bytearray()
        self.chunks = 0
        self.stderr: list[tuple[bytes, bool]] = []

    def on_stdout(self, chunk: bytes) -> None:
        self.stdout += chunk
        self.chunks += 1

    def on_stderr_line(self, line: bytes, truncated: bool) -> None:
        self.stderr.append((line, truncated))

    async def room(self) -> None:
        pass


NOBODY = 65534
SERVER_SRC = str(Path(__file__).resolve().parents[2] / "server")


def as_nobody(*argv: str) -> list[str]:
    """``argv`` run as user and group nobody, without supplementary groups (``setpriv``, util-linux)."""
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]


def nobody_env(**extra: str) -> dict[str, str]:
    """An environment in which ``nobody_python`` imports this checkout's server and its dependencies."""
    paths = dict.fromkeys([SERVER_SRC, sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    chosen = {"HELIX_RUNNER_CLAUDE_PATH": test_claude()} if test_claude() else {}
    return {"PATH": os.environ["PATH"], "PYTHONPATH": os.pathsep.join(paths), **chosen, **extra}


@functools.cache
def nobody_python() -> str | None:
    """A Python of this version that nobody can start from its own shell, or None (then skip).

    Not always ``sys.executable``: a virtualenv's interpreter may link into a directory only its
    owner can enter (here ``/root/.pyenv``), and the server re-runs its interpreter for each phase.
    """
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return None
    minor = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (os.path.realpath(sys.executable), f"/usr/bin/{minor}", f"/usr/local/bin/{minor}"):
        probe = subprocess.run(as_nobody("/bin/sh", "-c", 'exec "$0" -c "import grpc, helix_runner"', candidate),
                               env=nobody_env(), cwd="/", capture_output=True, timeout=60)
        if probe.returncode == 0:
            return candidate
    return None


def start_serve_as_nobody(root: Path, log: Path, python: str, *extra_args: str, **env: str) -> subprocess.Popen:
    """``start_serve`` as user nobody under ``python`` (``nobody_python``): data, home and
    workspace under ``root``, which nobody must own; ``env`` adds to its environment."""
    with open(log, "w") as stderr:
        return subprocess.Popen(
            as_nobody(*serve_argv(python, root, *extra_args)),
            env=nobody_env(HOME=str(root / "home"), **env), cwd="/", stderr=stderr, start_new_session=True,
        )

