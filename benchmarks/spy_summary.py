"""Where a server's threads spent a py-spy recording: shares of samples by thread and by category.

Usage (from the repository root):
    .venv/bin/python benchmarks/spy_summary.py DIR/r0-n1.txt [more.txt ...] [--top 25]

Input: ``py-spy record --format raw --threads --idle`` files (collapsed stacks, one line per
distinct stack with its sample count; ``bench_replicas.py --py-spy DIR`` writes them). For each
thread it prints the share of the recording's samples, split into categories by the innermost
frame that matches one (the first rule that matches a frame, walking from the leaf up), and with
``--top`` the leaf functions of the event-loop thread. Idle samples (a thread waiting in a
system call) count: "waits for the database" is the event loop blocked in psycopg.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path

# (category, pattern on a frame "function (file:line)"), tried on each frame from the leaf up.
RULES: list[tuple[str, re.Pattern[str]]] = [
    ("waits for the database (psycopg wait)", re.compile(r"^(\w+\.)?wait\w* \(psycopg/|\(psycopg/waiting\.py")),
    ("idle: select (nothing to do)", re.compile(r"(^|\.)select \(selectors\.py")),
    ("idle: waiting for work (threading)", re.compile(r"(^|\.)wait \(threading\.py")),
    ("store: psycopg (CPU)", re.compile(r"\(psycopg|\(psycopg_pool/")),
    ("store: SQL layer (helix store/)", re.compile(r"helix_runner/store/")),
    ("event writer (helix phases/event_log)", re.compile(r"helix_runner/phases/event_log\.py")),
    ("parse (helix domain/)", re.compile(r"helix_runner/domain/")),
    ("encode (helix api/)", re.compile(r"helix_runner/api/")),
    ("phase run (helix phases/)", re.compile(r"helix_runner/phases/")),
    ("process I/O (helix process/)", re.compile(r"helix_runner/process/")),
    ("telemetry", re.compile(r"helix_runner/telemetry/|prometheus_client|opentelemetry")),
    ("grpc", re.compile(r"grpc")),
    ("asyncio", re.compile(r"asyncio/")),
]


def thread_of(first_frame: str) -> str:
    """``thread (0x7f..): MainThread`` -> ``MainThread`` (py-spy's first frame with --threads)."""
    _, _, name = first_frame.partition(": ")
    return name.strip() or first_frame


def category(frames: list[str]) -> str:
    for frame in reversed(frames):
        for name, pattern in RULES:
            if pattern.search(frame):
                return name
    return "other"


def summarize(path: Path, top: int) -> None:
    per_thread: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    leaves: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        thread = thread_of(frames[0])
        per_thread[thread][category(frames[1:])] += count
        if thread == "MainThread":
            leaves[re.sub(r":\d+\)$", ")", frames[-1])] += count
        total += count
    threads = sorted(per_thread.items(), key=lambda kv: -sum(kv[1].values()))
    # Samples are taken of every thread at once: a thread's share is of one thread's samples.
    per_thread_samples = max(sum(c.values()) for _, c in threads) if threads else 0
    print(f"\n## {path.name}: {per_thread_samples} samples per thread (py-spy, idle included)\n")
    print(f"{'thread':<28} {'category':<42} {'share':>7}")
    for thread, counts in threads:
        shown = 0
        for name, count in counts.most_common():
            share = count / per_thread_samples
            if share < 0.005:
                continue
            print(f"{thread if not shown else '':<28} {name:<42} {share:>7.1%}")
            shown += 1
    if top and leaves:
        print(f"\nMainThread, top {top} leaf frames:")
        for frame, count in leaves.most_common(top):
            print(f"  {count / per_thread_samples:>6.1%}  {frame[:110]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--top", type=int, default=0, help="also list the event loop's N most sampled leaf frames")
    args = ap.parse_args()
    for path in args.files:
        summarize(path, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
