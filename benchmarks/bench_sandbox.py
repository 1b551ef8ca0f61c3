"""A phase's start with the sandbox off vs each sandbox mode, side by side in one run.

Measures what the sandbox adds to a phase's start: the shim (``python -E -s -S -B``) starting
``/bin/true`` and reporting its exit, with no sandbox (the baseline), with every layer (bubblewrap,
private network with one relayed port, Landlock scopes, seccomp), and Landlock-only (files, TCP,
seccomp; no namespaces). Rounds interleave the modes so machine noise hits them alike.

    .venv/bin/python benchmarks/bench_sandbox.py [--rounds 40]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from helix_runner.process.sandbox.phase_sandbox import SHIM_DIR, Sandbox


def _once(args: list[str], cwd: str, env: dict[str, str]) -> float:
    cmd = [sys.executable, "-E", "-s", "-S", "-B", str(SHIM_DIR / "phase_shim.py"), *args, "--", "/bin/true"]
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=40)
    rounds = parser.parse_args().rounds
    root = Path(tempfile.mkdtemp(prefix="bench-sandbox-"))
    env = {"PATH": "/usr/bin:/bin"}
    modes: dict[str, tuple[list[str], dict[str, str]]] = {"off (baseline)": ([], env)}
    for name, skip in (("all layers", ()), ("landlock-only", ("namespaces", "network"))):
        sandbox = Sandbox.start("auto", data_dir=root / name.replace(" ", "-"), skip=skip, egress_ports=(9,))
        phase = sandbox.prepare("bench", cwd=str(root), project="")
        modes[name] = (phase.shim_args(), {**env, **phase.env})
    times: dict[str, list[float]] = {m: [] for m in modes}
    for _ in range(rounds):
        for mode, (args, mode_env) in modes.items():
            times[mode].append(_once(args, str(root), mode_env))
    base = statistics.median(times["off (baseline)"])
    print(f"{'mode':<16} {'p50 ms':>8} {'p99 ms':>8} {'added p50':>10}")
    for mode, samples in times.items():
        samples.sort()
        p50 = statistics.median(samples)
        p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
        print(f"{mode:<16} {p50:8.1f} {p99:8.1f} {p50 - base:+10.1f}")


if __name__ == "__main__":
    main()
