"""Checkpoints: what one costs per tool call on a 10,000-file repository (docs/fork-and-rewind.md).

A repository of 10,000 files in 100 directories (about 1 MB of text, committed). Each round a
"tool call" changes one tracked file and adds one new file, then a checkpoint is taken, four ways
side by side (the same changes each way, interleaved):

* **watched commit**: ``WorkspaceSnapshots`` of a worktree phase as the server takes it: the inotify
  watch names the changed paths, only those are staged into the phase's private split index, then
  ``write-tree``, HEAD, ``commit-tree`` and the hidden ref;
* **watched tree**: the same for an in-place phase (a tree object; no commit, no ref);
* **stage everything**: the same private index without the watch: ``git add -A`` of the whole tree
  each time (the baseline: what a checkpoint costs without knowing what changed);
* **fresh index** (``git_worktree.snapshot_tree``): the artifacts' own snapshot, a new index each
  time (``read-tree HEAD``, ``add -A``, ``write-tree``): what taking a checkpoint the artifacts' way
  would cost.

Also the gate: how long the next tool call waits, i.e. the snapshot's own time when the model answers
faster than it (the scripted API does; a real model takes seconds). Goal: <= 20 ms per checkpoint.

Usage: .venv/bin/python benchmarks/bench_checkpoints.py [--files 10000] [--rounds 30] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "server"))

from helix_runner.domain.checkpoints import WorkspaceKind  # noqa: E402
from helix_runner.process.checkpoint_git import WorkspaceSnapshots  # noqa: E402
from helix_runner.process.git_worktree import GitError, snapshot_tree  # noqa: E402

GIT_ENV = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.invalid", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@example.invalid", "PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def make_repo(path: Path, files: int) -> None:
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=path, check=True, env=GIT_ENV)
    for i in range(files):
        d = path / f"d{i // 100:03d}"
        d.mkdir(exist_ok=True)
        (d / f"f{i}.txt").write_text(f"line {i}\n" * 10)
    subprocess.run(["git", "add", "-A"], cwd=path, check=True, env=GIT_ENV)
    subprocess.run(["git", "commit", "-q", "-m", "base"], cwd=path, check=True, env=GIT_ENV)


def q(values: list[float]) -> dict[str, float]:
    v = sorted(values)
    return {"p50": statistics.median(v), "p95": v[min(len(v) - 1, round(0.95 * (len(v) - 1)))],
            "mean": statistics.fmean(v), "n": len(v)}


class TwoRuns(WorkspaceSnapshots):
    """The watched way as it was before ``HostGit.run_then``: the add and the write-tree as two git
    runs (two box starts, two config reads)."""

    def _add_then_write_tree(self, specs: list[str]) -> str | None:
        try:
            self._run_add(specs)
        except GitError:
            return None
        return self._git("write-tree").decode().strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--boxed", action="store_true",
                        help="git in the server's helper sandbox, as a server with bubblewrap runs it (process/host_git.py)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-checkpoints-"))
    if args.boxed:
        from helix_runner.process.host_git import HOST_GIT

        note = HOST_GIT.configure(hidden=[Path.home()], visible=[tmp])
        print(f"# git boxed: {note or 'yes'}")
    try:
        repo = tmp / "repo"
        t = time.perf_counter()
        make_repo(repo, args.files)
        print(f"repository: {args.files} files in {args.files // 100} directories "
              f"(made in {time.perf_counter() - t:.1f} s)")
        ways = {
            "watched commit (worktree phase)": WorkspaceSnapshots(WorkspaceKind.GIT_COMMIT, repo, repo, tmp / "s1", "bench", "c"),
            "watched tree (in place)": WorkspaceSnapshots(WorkspaceKind.GIT_TREE, repo, repo, tmp / "s2", "bench", "t"),
            "watched tree, two git runs (before)": TwoRuns(WorkspaceKind.GIT_TREE, repo, repo, tmp / "s4", "bench", "b"),
            "stage everything (baseline)": WorkspaceSnapshots(WorkspaceKind.GIT_TREE, repo, repo, tmp / "s3", "bench", "w",
                                                              watch=False),
        }
        starts = {}
        for name, snaps in ways.items():
            t = time.perf_counter()
            snaps.start()
            starts[name] = (time.perf_counter() - t) * 1000
        times: dict[str, list[float]] = {name: [] for name in (*ways, "fresh index (artifacts' snapshot)")}
        for r in range(1, args.rounds + 1):
            # One tool call's writes: a tracked file changed, a new one added.
            (repo / "d010" / "f1000.txt").write_text(f"changed in round {r}\n")
            (repo / "d020" / f"new{r}.txt").write_text(f"new in round {r}\n")
            order = list(ways.items())
            order = order[r % len(order):] + order[:r % len(order)]  # rotate: none always goes first
            for name, snaps in order:
                t = time.perf_counter()
                snaps.take(r)
                times[name].append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            snapshot_tree(repo)
            times["fresh index (artifacts' snapshot)"].append((time.perf_counter() - t) * 1000)
        full = {name: ways[name].staged_everything for name in ways}
        for snaps in ways.values():
            snaps.close()
        rows = {name: q(v) for name, v in times.items()}
        print(f"\none checkpoint per tool call, {args.rounds} rounds (ms; lower is better)")
        print(f"{'way':<38} {'p50':>8} {'p95':>8} {'mean':>8}   staged whole")
        for name, s in rows.items():
            whole = full.get(name, args.rounds)
            print(f"{name:<38} {s['p50']:8.1f} {s['p95']:8.1f} {s['mean']:8.1f}   "
                  f"{whole}/{args.rounds + (1 if name in full else 0)}")
        print("(a worktree phase's commits and refs are written 8 at a time: their batch is in the mean and p95)")
        print("\nthe phase's first snapshot (start, index built, watch set up): "
              + ", ".join(f"{n.split(' (')[0]} {v:.0f} ms" for n, v in starts.items()))
        goal = max(rows["watched commit (worktree phase)"]["mean"], rows["watched tree (in place)"]["mean"])
        print(f"goal <= 20 ms per checkpoint: the slower watched way's mean {goal:.1f} ms -> "
              f"{'met' if goal <= 20 else 'NOT met'}")
        if args.json:
            args.json.write_text(json.dumps({"files": args.files, "rounds": args.rounds, "ways": rows,
                                             "start_ms": starts}, indent=2))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
