"""A helix-runner server as a child process, for benchmarks: start, wait until serving, stop.

Shared by the benchmarks that start servers (run from the repository root as
``.venv/bin/python benchmarks/<bench>.py``, so this module is importable by name), with
``export_baseline``: the server package of another commit, to run side by side with this one.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

VENV_BIN = Path(sys.executable).parent
REPO_ROOT = Path(__file__).resolve().parents[1]

# Profiles CPU time of the event-loop thread, not wall time: on a busy machine a wall-clock profile
# charges the time a function spent preempted to whatever was running.
PROFILE_WRAPPER = """
import cProfile, sys, time
from helix_runner.cli import main
out, argv = sys.argv[1], sys.argv[2:]
profiler = cProfile.Profile(time.thread_time)
profiler.enable()
try:
    code = main(argv)
finally:
    profiler.disable()
    profiler.dump_stats(out)
sys.exit(code)
"""


class ServerProcess:
    """One ``helix-runner serve`` with its own data dir; its JSON logs go to a file."""

    def __init__(self, tmp: Path, name: str, fake: Path, workdir: Path, *, profile_out: Path | None = None,
                 env_extra: dict[str, str] | None = None, server_src: str | Path | None = None,
                 extra_args: tuple[str, ...] = ()):
        self.data = tmp / f"data-{name}"
        self.log_path = tmp / f"server-{name}.log"
        env = dict(os.environ, **(env_extra or {}))
        if server_src:  # benchmark another copy of the server (e.g. an exported commit)
            env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (server_src, env.get("PYTHONPATH")) if p)
        args = ["serve", "--port", "0", "--data-dir", str(self.data), "--workspace-root", str(workdir),
                "--claude-path", str(fake), "--log-format", "json", *extra_args]
        if profile_out is not None:
            cmd = [str(VENV_BIN / "python"), "-c", PROFILE_WRAPPER, str(profile_out), *args]
        else:
            cmd = [str(VENV_BIN / "helix-runner"), *args]
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, env=env,
                                     cwd=str(tmp), start_new_session=True)
        self.pid = self.proc.pid
        # With HELIX_RUNNER_METRICS_PORT (0: any free port) in env_extra: where /metrics is served.
        self.metrics_address: str | None = None
        self.address = self._wait_serving(30.0)

    def _wait_serving(self, limit_s: float) -> str:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log_tail()}")
            for line in self.log_path.read_text(errors="replace").splitlines():
                with contextlib.suppress(ValueError):
                    rec = json.loads(line)
                    if rec.get("msg") == "serving metrics" and rec.get("address"):
                        self.metrics_address = rec["address"]
                    if rec.get("msg") == "serving" and rec.get("address"):
                        return rec["address"]
            time.sleep(0.05)
        raise RuntimeError(f"server did not log 'serving' within {limit_s} s:\n{self.log_tail()}")

    def loop_thread_cpu(self) -> float:
        """CPU seconds of the server's main thread, which runs the event loop (its other threads:
        gRPC's, a store writer's, the heartbeat, are not counted)."""
        with open(f"/proc/{self.pid}/task/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def loop_thread_waited(self) -> float:
        """Seconds the event-loop thread has spent runnable but waiting for a CPU (schedstat)."""
        with open(f"/proc/{self.pid}/task/{self.pid}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9

    def histogram(self, name: str) -> dict[float, float]:
        """The cumulative buckets (upper bound -> count) of one histogram on the server's /metrics."""
        if self.metrics_address is None:
            return {}
        with urllib.request.urlopen(f"http://{self.metrics_address}/metrics", timeout=10) as response:
            text = response.read().decode()
        buckets = {}
        prefix = f"{name}_bucket{{le=\""
        for line in text.splitlines():
            if line.startswith(prefix):
                bound, _, value = line[len(prefix):].partition("\"} ")
                buckets[float(bound)] = float(value)
        return buckets

    def log_tail(self, n: int = 20) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def stop(self) -> None:
        """SIGTERM (the server drains; cProfile writes its file on a clean exit), SIGKILL after 30 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


def export_baseline(ref: str, tmp: Path) -> Path:
    """The server package of git ``ref`` in a directory of its own under ``tmp`` (put first on the
    server's ``PYTHONPATH``: ``ServerProcess(server_src=...)``)."""
    target = tmp / "baseline"
    target.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO_ROOT), "archive", ref, "server"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target / "server"


def histogram_quantile(before: dict[float, float], after: dict[float, float], q: float) -> tuple[float, int, float]:
    """(the q-quantile, samples, share at or under 10 ms) of the samples taken between two readings of a
    cumulative histogram, interpolated linearly within the bucket as Prometheus' histogram_quantile does
    (the last bucket, +Inf, answers with the highest finite bound)."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1] if counts else 0.0
    if total <= 0:
        return float("nan"), 0, float("nan")
    under_10ms = next((c for b, c in zip(bounds, counts, strict=True) if b >= 0.01), total) / total
    rank, lower, below = q * total, 0.0, 0.0
    for bound, count in zip(bounds, counts, strict=True):
        if count >= rank:
            if bound == float("inf"):
                return lower, int(total), under_10ms
            return lower + (bound - lower) * (rank - below) / max(count - below, 1e-9), int(total), under_10ms
        lower, below = bound, count
    return lower, int(total), under_10ms
