"""What reaching a phase's files without following its links costs the server (process/beneath.py).

Each operation the server does on files a phase wrote, the way it did it before and the safe way,
rounds interleaved (the order flips every round) on the same files:

* ``transcript copy``: at each tool boundary the hand-over's mirror and the copy for forks open the
  phase's transcript (2 MiB, four directories below the home), seek to what they copied and read the
  4 KiB appended since. Before: ``open(path)``; now ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)``
  below the home, or the walk with ``O_NOFOLLOW`` where ``openat2`` is refused. The hot one: once per
  tool call of a phase on a replica with hand-over or checkpoints.
* ``whole transcript``: a fork, a rewind or a stopped attempt reads the whole 2 MiB file.
* ``session save``: the end of a phase moves its transcript and a subagent directory of 200 files
  into the project's store. Before: listed by paths, ``shutil.move``; now listed and renamed by
  directory descriptors. Once per phase.
* ``tree removal``: a private home or worktree of 1,000 files in 20 directories. Before:
  ``shutil.rmtree(path)``; now ``remove_tree`` (the same descriptor walk, from a descriptor of the
  parent). Once per phase.

Usage: .venv/bin/python benchmarks/bench_host_reads.py [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "server"))

from helix_runner.process.beneath import open_fd_beneath, read_beneath, remove_tree  # noqa: E402
from helix_runner.process.sandbox.private_home import PrivateHome, SessionStore  # noqa: E402

SESSION = "0b6f3c1e-1111-4222-8333-444455556666"
TRANSCRIPT = 2 * 1024 * 1024
APPENDED = 4096


def copy_new_bytes(fd: int) -> int:
    with os.fdopen(fd, "rb") as f:
        size = f.seek(0, 2)
        f.seek(size - APPENDED)
        return len(f.read(APPENDED))


def old_save(store: Path, home: PrivateHome) -> None:
    """SessionStore.save as it was: entries found by path, moved by path."""
    projects = home.config / "projects"
    for project in projects.iterdir():
        if not project.is_dir() or project.is_symlink():
            continue
        entries = [e for e in project.iterdir() if not e.is_symlink()]
        target = store / "p" / SESSION
        staging = target.with_name(f".{SESSION}.new")
        staging.mkdir(parents=True)
        for entry in entries:
            shutil.move(str(entry), staging / entry.name)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)


def make_home(root: Path, n: int) -> PrivateHome:
    home = PrivateHome(root)
    home.create(None)
    project = home.config / "projects" / "-w-repo"
    (project / SESSION).mkdir(parents=True)
    (project / f"{SESSION}.jsonl").write_bytes(b"x" * 4096)
    for i in range(n):
        (project / SESSION / f"agent-{i}.jsonl").write_bytes(b"y" * 256)
    return home


def make_tree(root: Path) -> Path:
    for d in range(20):
        sub = root / f"d{d}"
        sub.mkdir(parents=True)
        for i in range(50):
            (sub / f"f{i}").write_bytes(b"z" * 128)
    return root


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-host-reads-"))
    try:
        anchor = root / "homes" / "run" / "home"
        path = anchor / ".claude" / "projects" / "-w-repo" / f"{SESSION}.jsonl"
        path.parent.mkdir(parents=True)
        path.write_bytes(b'{"type":"assistant"}\n' * (TRANSCRIPT // 21))
        # (operation, way) -> (prepare, run): prepare is not timed (a fresh home or tree each round).
        ops: dict[str, dict[str, tuple[Callable[[int], object], Callable[[object], object]]]] = {
            "transcript copy (4 KiB)": {
                "before": (lambda r: None, lambda _: copy_new_bytes(os.open(path, os.O_RDONLY | os.O_CLOEXEC))),
                "openat2": (lambda r: None, lambda _: copy_new_bytes(open_fd_beneath(anchor, path, use_openat2=True))),
                "walk": (lambda r: None, lambda _: copy_new_bytes(open_fd_beneath(anchor, path, use_openat2=False))),
            },
            "whole transcript (2 MiB)": {
                "before": (lambda r: None, lambda _: path.read_bytes()),
                "openat2": (lambda r: None, lambda _: read_beneath(anchor, path, 1 << 30)),
            },
            "session save (201 files)": {
                "before": (lambda r: (root / f"s-old-{r}", make_home(root / f"h-old-{r}", 200)),
                           lambda a: old_save(*a)),
                "openat2": (lambda r: (SessionStore(root / f"s-new-{r}"), make_home(root / f"h-new-{r}", 200)),
                            lambda a: a[0].save("p", a[1])),
            },
            "tree removal (1,000 files)": {
                "before": (lambda r: make_tree(root / f"t-old-{r}"), lambda t: shutil.rmtree(t)),
                "openat2": (lambda r: make_tree(root / f"t-new-{r}"), lambda t: remove_tree(t)),
            },
        }
        ways = ["before", "openat2", "walk"]
        samples: dict[tuple[str, str], list[float]] = {(o, w): [] for o in ops for w in ops[o]}
        for rnd in range(args.rounds):
            for op, by_way in ops.items():
                rounds = args.rounds if op.startswith(("transcript", "whole")) else max(args.rounds // 10, 5)
                if rnd >= rounds:
                    continue
                order = list(by_way) if rnd % 2 == 0 else list(reversed(by_way))
                for way in order:
                    prepare, run = by_way[way]
                    arg = prepare(rnd)
                    started = time.perf_counter()
                    run(arg)
                    samples[(op, way)].append((time.perf_counter() - started) * 1e6)
        print(f"# {args.rounds} rounds (a tenth for the per-phase operations), load average "
              f"{os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs; microseconds per call, p50 (p90), "
              f"added = p50 minus before's")
        print(f"{'operation':<28} " + " ".join(f"{w + ' p50':>14} {'p90':>8} {'added':>8}" for w in ways))
        for op, by_way in ops.items():
            base = statistics.median(samples[(op, "before")])
            cells = []
            for way in ways:
                if way not in by_way:
                    cells.append(f"{'-':>14} {'-':>8} {'-':>8}")
                    continue
                values = sorted(samples[(op, way)])
                p50, p90 = statistics.median(values), values[int(0.9 * (len(values) - 1))]
                cells.append(f"{p50:>14.1f} {p90:>8.1f} {p50 - base:>+8.1f}")
            print(f"{op:<28} " + " ".join(cells))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
