"""The server's own git calls (issue 30.1): what the runner's overrides and its helper sandbox add to each.

Three ways to run the same git command on the same repository, rounds interleaved:

* ``before``: git as the server ran it before (a few ``-c`` overrides, the server's environment);
* ``overrides``: through ``process/host_git.py`` without the sandbox (every override, the driver
  names read first with ``git config --list``, a minimal environment);
* ``boxed``: the same inside its bubblewrap helper sandbox (what a server with bubblewrap runs);
* ``landlock``: the same inside its Landlock helper sandbox, started by the runner's spawner
  process (what a server without bubblewrap runs, most Kubernetes pods).

Commands: ``rev-parse --show-toplevel`` (the cheapest), ``add -A`` into a private index (the
snapshot of a phase's working tree, 200 files) and ``diff --name-status`` of two trees. Goal: at
most 10 ms added per call.

Usage: .venv/bin/python benchmarks/bench_host_git.py [--rounds N]
"""

from __future__ import annotations

import argparse
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

from helix_runner.process.host_git import HostGit  # noqa: E402

BEFORE_SAFE = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "diff.external=",
               "-c", "core.quotePath=false")


def _repo(root: Path) -> tuple[Path, str, str]:
    repo = root / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=b", "-c", "user.email=b@example.invalid"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    for i in range(200):
        (repo / f"f{i:03}.txt").write_text(f"line {i}\n" * 20)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "a"], cwd=repo, check=True)
    first = subprocess.run(["git", "rev-parse", "HEAD^{tree}"], cwd=repo, capture_output=True, text=True,
                           check=True).stdout.strip()
    (repo / "f000.txt").write_text("changed\n")
    subprocess.run([*git, "commit", "-qam", "b"], cwd=repo, check=True)
    second = subprocess.run(["git", "rev-parse", "HEAD^{tree}"], cwd=repo, capture_output=True, text=True,
                            check=True).stdout.strip()
    return repo, first, second


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=40)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-host-git-"))
    try:
        repo, first, second = _repo(root)
        data = root / "data"
        data.mkdir()
        overrides, boxed, landlocked = HostGit(), HostGit(), HostGit()
        overrides.configure(hidden=[], use_box=False)
        note = boxed.configure(hidden=[data, Path.home()], visible=[root])
        lnote = landlocked.configure(hidden=[data, Path.home()], visible=[repo], bwrap="/nonexistent/bwrap")
        index_dir = root / "index"
        index_dir.mkdir()
        commands = {
            "rev-parse": ("rev-parse", "--show-toplevel"),
            "add -A (200 files)": ("add", "-A", "--", "."),
            "diff --name-status": ("diff", "--no-ext-diff", "--no-textconv", "-z", "--name-status", first, second),
        }

        def before(cmd: tuple[str, ...], env: dict[str, str]) -> None:
            full = {**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")}, "GIT_CONFIG_NOSYSTEM": "1",
                    **env}
            subprocess.run(["git", *BEFORE_SAFE, *cmd], cwd=repo, env=full, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=True)

        ways = {"before": before,
                "overrides": lambda cmd, env: overrides.run(repo, *cmd, env=env),
                "boxed": lambda cmd, env: boxed.run(repo, *cmd, env=env),
                "landlock": lambda cmd, env: landlocked.run(repo, *cmd, env=env)}
        if note or boxed.kind != "bubblewrap":
            print(f"# no bubblewrap here ({note}): the boxed column is left out")
            del ways["boxed"]
        if lnote or landlocked.kind != "landlock":
            print(f"# no Landlock here ({lnote}): the landlock column is left out")
            del ways["landlock"]
        samples: dict[tuple[str, str], list[float]] = {(c, w): [] for c in commands for w in ways}
        for rnd in range(args.rounds):
            order = list(ways) if rnd % 2 == 0 else list(reversed(ways))
            for name, cmd in commands.items():
                for way in order:
                    env = {"GIT_INDEX_FILE": str(index_dir / f"{way}-{rnd}")} if cmd[0] == "add" else {}
                    started = time.perf_counter()
                    ways[way](cmd, env)
                    samples[(name, way)].append((time.perf_counter() - started) * 1e3)
        print(f"# {args.rounds} rounds, load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs, "
              f"ms per call (p50, p90), added = p50 minus before's")
        print(f"{'command':<22} " + " ".join(f"{w + ' p50':>14} {'p90':>7} {'added':>7}" for w in ways))
        for name in commands:
            base = statistics.median(samples[(name, "before")])
            cells = []
            for way in ways:
                values = sorted(samples[(name, way)])
                p50, p90 = statistics.median(values), values[int(0.9 * (len(values) - 1))]
                cells.append(f"{p50:>14.2f} {p90:>7.2f} {p50 - base:>+7.2f}")
            print(f"{name:<22} " + " ".join(cells))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
