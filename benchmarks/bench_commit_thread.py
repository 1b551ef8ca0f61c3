"""The group commit on its writer thread vs on the event loop, side by side (issue 17, P2 and live latency).

Alternates servers started with ``HELIX_RUNNER_COMMIT_THREAD=1`` (the commit on one writer
thread, ``phases/event_log.EventWriter``) and ``=0`` (the commit on the loop, as before), and
for each runs bench_run_phase's P2 measure (one phase of M lines as fast as the child writes,
to a separate-process gRPC client, then the SDK in-process on the same child: events/s ratio)
and its live latency run at K phases. The order within a pair alternates, so drift in the
machine's load falls on both sides. Prints medians with the range over the pairs.

Usage: .venv/bin/python benchmarks/bench_commit_thread.py [--pairs 5] [--tput-lines 60000] [--k 50]
                                                          [--rate 20] [--seconds 15]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_run_phase as brp

SWITCH = "HELIX_RUNNER_COMMIT_THREAD"


def one(tmp: Path, fake: Path, workdir: Path, args: argparse.Namespace, threaded: bool, cluster=None) -> dict:
    os.environ[SWITCH] = "1" if threaded else "0"
    out: dict = {}

    def fresh_database() -> None:  # each server gets its own (bench_run_phase reuses job ids)
        if cluster is not None:
            os.environ["HELIX_RUNNER_DATABASE_URL"] = cluster.create_database("bench")

    if args.tput_lines:
        fresh_database()
        grpc_runs, sdk_runs = brp.throughput_rounds(tmp, fake, workdir, args.tput_lines, 1)
        g, s = brp.rates(grpc_runs[0], args.tput_lines)[0], brp.rates(sdk_runs[0], args.tput_lines)[0]
        ok = grpc_runs[0]["lost"] == 0 and grpc_runs[0]["reordered"] == 0
        out.update(p2=g / s, grpc_ev_s=g, sdk_ev_s=s, srv_us_ev=grpc_runs[0]["server_cpu_s"] / args.tput_lines * 1e6,
                   tput_ok=ok)
    if args.k:
        fresh_database()
        lines = max(1, round(args.rate * args.seconds))
        r = brp.latency_scenario(tmp, fake, workdir, args.k, lines, args.rate)
        out.update(
            p99=r["latency"].get("p99", brp.NAN), p50=r["latency"].get("p50", brp.NAN),
            st_p99=r["steady"].get("p99", brp.NAN), lat_max=r["latency"].get("max", brp.NAN),
            st_us_ev=r["steady_srv_us_per_event"], wake_p99=r["hiccup"].get("p99", brp.NAN),
            lat_ok=r["lost"] == 0 and r["reordered"] == 0 and r["failed"] == 0,
        )
    return out


def summary(runs: list[dict], key: str) -> str:
    vals = [r[key] for r in runs if key in r]
    if not vals:
        return "-"
    fmt = "{:.0f}" if max(abs(v) for v in vals) >= 100 else "{:.2f}"
    return f"{fmt.format(statistics.median(vals))} ({fmt.format(min(vals))}-{fmt.format(max(vals))})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--tput-lines", type=int, default=60_000, help="P2 phase lines (0: skip P2)")
    ap.add_argument("--k", type=int, default=50, help="phases of the latency run (0: skip it)")
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--postgres", action="store_true", help="servers on a throwaway PostgreSQL (tests/support)")
    args = ap.parse_args()
    cluster = None
    if args.postgres:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from support.postgres import PostgresCluster

        cluster = PostgresCluster().start()
    tmp = Path(tempfile.mkdtemp(prefix="helix-bench-commit-"))
    workdir = tmp / "ws"
    workdir.mkdir()
    fake = brp.write_fake_claude(tmp)
    print(f"# server under test: {brp.server_version(None)}")
    print(f"# store: {'PostgreSQL (fsync off)' if cluster else 'SQLite'}; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; {args.pairs} pairs; P2 "
          f"{args.tput_lines} lines; latency K={args.k} at {args.rate:g} lines/s for {args.seconds:g} s")
    started = time.monotonic()
    results: dict[bool, list[dict]] = {True: [], False: []}
    try:
        for pair in range(args.pairs):
            for threaded in ((True, False) if pair % 2 == 0 else (False, True)):
                run_dir = tmp / f"pair{pair}-{'on' if threaded else 'off'}"  # a fresh data dir per server
                run_dir.mkdir()
                r = one(run_dir, fake, workdir, args, threaded, cluster)
                results[threaded].append(r)
                print(f"# pair {pair} thread={'on' if threaded else 'off'}: "
                      + ", ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()),
                      flush=True)
    finally:
        os.environ.pop(SWITCH, None)
        os.environ.pop("HELIX_RUNNER_DATABASE_URL", None)
        if cluster is not None:
            cluster.stop()
            cluster.remove()
        shutil.rmtree(tmp, ignore_errors=True)
    cols = [("p2", "P2 ratio"), ("grpc_ev_s", "gRPC ev/s"), ("sdk_ev_s", "SDK ev/s"), ("srv_us_ev", "srv us/ev"),
            ("p99", f"K={args.k} p99 ms"), ("st_p99", "steady p99"), ("lat_max", "max ms"),
            ("st_us_ev", "steady us/ev"), ("wake_p99", "wake-up p99")]
    print("\n## Commit thread on vs off: median (min-max) over the pairs")
    print(f"{'measure':<16} {'thread on':>24} {'thread off':>24}")
    for key, name in cols:
        print(f"{name:<16} {summary(results[True], key):>24} {summary(results[False], key):>24}")
    ok = all(r.get("tput_ok", True) and r.get("lat_ok", True) for rs in results.values() for r in rs)
    print(f"no loss / reorder / failure in any run: {'yes' if ok else 'NO'}")
    print(f"# total time {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
