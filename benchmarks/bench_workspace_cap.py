"""What the workspace cap's samples cost the server (process/disk_usage.py, phases/workspace_cap.py).

One sample walks the directories a phase may write. Side by side, rounds interleaved on the same
trees: ``du -s`` (GNU coreutils, C, follows no link either) as the baseline, and ``disk_usage``
(Python, by directory descriptors with ``O_NOFOLLOW``, each file once). The watcher waits twenty
times the last walk between samples (at least 0.5 s), so the table also shows the resulting
interval and the share of one core a phase's watcher takes.

Usage: .venv/bin/python benchmarks/bench_workspace_cap.py [--rounds N]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "server"))

from helix_runner.phases.workspace_cap import COST_SHARE, MAX_INTERVAL_S, MIN_INTERVAL_S  # noqa: E402
from helix_runner.process.disk_usage import disk_usage  # noqa: E402


def tree(root: Path, files: int) -> Path:
    """``files`` small files in directories of 100, like a source repository's."""
    for i in range(files):
        d = root / f"d{i // 100}"
        if i % 100 == 0:
            d.mkdir(parents=True)
        (d / f"f{i}.py").write_bytes(b"x" * (i * 37 % 9000))
    return root


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-wscap-"))
    try:
        print(f"{'files':>8} {'du -s p50':>11} {'disk_usage p50':>15} {'ratio':>6} {'interval':>9} {'core share':>11}")
        for files in (1_000, 10_000, 50_000):
            root = tree(base / f"t{files}", files)
            ours: list[float] = []
            du: list[float] = []
            for r in range(args.rounds):
                pair = [("ours", lambda root=root: disk_usage([root])),
                        ("du", lambda root=root: subprocess.run(["du", "-s", str(root)], capture_output=True,
                                                                check=True))]
                for name, fn in (pair if r % 2 else pair[::-1]):
                    (ours if name == "ours" else du).append(timed(fn))
            o, d = statistics.median(ours), statistics.median(du)
            interval = min(MAX_INTERVAL_S, max(MIN_INTERVAL_S, o * COST_SHARE))
            print(f"{files:>8} {d * 1000:>9.1f}ms {o * 1000:>13.1f}ms {o / d:>6.2f} {interval:>8.2f}s "
                  f"{o / (o + interval) * 100:>10.1f}%")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
