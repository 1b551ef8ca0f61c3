"""Read-model benchmark: ListJobs against GetJob (and ListToolCalls) in requests/s, side by side.

What it measures: how many ``ListJobs`` (one page of ``--jobs`` jobs) and ``GetJob`` (one job)
requests per second the real server answers to ``--callers`` concurrent callers, and the ratio
ListJobs/GetJob (the performance issue's P7: >= 0.5x). A page of N jobs should cost about as much
as one job plus the extra bytes, not N times one job: the read model caches each job's view until
the store bumps its version (``phases/queries.py`` JobViewCache), and the API sends each view's
encoding made once; without the cache a page is three store queries and 20 Job messages built.
``ListToolCalls`` (one page of 100 calls of a job with ``--tool-calls`` calls) shows the
statistics over all calls, computed in SQL.

Processes: real servers (``helix-runner serve``), each with its own data dir, run side by side:
"cache off" and "cache on" run this working tree with ``read_cache_jobs`` 0 and its default
(``--no-cache-off`` leaves the first out); with ``--baseline REF`` also "before", the code of a git
ref (exported with ``git archive`` and put first on ``PYTHONPATH``). All get the same jobs, written
through ``RunPhase`` by the fake ``claude`` of ``bench_job_control.py`` (each phase: three Bash
calls through the PreToolUse hook, a text, a result with cost). The callers are asyncio tasks in
this process on one channel per server; the rounds rotate which server goes first. Server CPU per
request comes from ``/proc/<pid>/stat`` over each measured window. The table shows medians over
the rounds, the ratio with its range (min-max over rounds). ``--json FILE`` writes the figures.

``--in-process`` also times the handler's own parts without gRPC (store queries, views, encoding)
on a copy of the cache-on server's database: where a request's time goes besides gRPC.

Usage: .venv/bin/python benchmarks/bench_read_model.py [--jobs 20] [--phases 1] [--callers 10]
           [--seconds 3] [--rounds 3] [--tool-calls 2000] [--baseline REF] [--no-cache-off]
           [--in-process] [--json FILE] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

import grpc
from bench_job_control import write_fake_claude
from server_process import ServerProcess, export_baseline

from helix.runner.v1 import runner_service_pb2 as pb
from helix.runner.v1 import runner_service_pb2_grpc as pb_grpc

REPO_ROOT = Path(__file__).resolve().parents[1]
CLK_TCK = os.sysconf("SC_CLK_TCK")
PROJECT = "bench"
TOOLS_JOB = "bench-tools"


def cpu_s(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


async def run_phase(stub, job_id: str, phase_id: str, workdir: Path, project: str, calls: int) -> None:
    env = {"HELIX_BENCH_MODE": "tools", "HELIX_BENCH_CALLS": str(calls)}
    request = pb.RunPhaseRequest(
        job_id=job_id,
        phase_id=phase_id,
        project_id=project,
        prompt="benchmark",
        working_dir=str(workdir),
        options=pb.PhaseOptions(allowed_tools=["Bash"], env=env),
    )
    last = None
    async for response in stub.RunPhase(request, timeout=600):
        last = response
    if last is None or not last.HasField("result") or last.result.status != 6:  # PHASE_STATUS_SUCCEEDED
        raise RuntimeError(f"phase {job_id}/{phase_id} did not succeed: {last}")


async def populate(address: str, workdir: Path, jobs: int, phases: int, tool_calls: int) -> None:
    """The same jobs on every server: ``jobs`` x ``phases`` phases, plus one job with many tool calls."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.RunnerServiceStub(channel)
        for p in range(phases):
            for start in range(0, jobs, 5):  # five phases at a time
                await asyncio.gather(
                    *(
                        run_phase(stub, f"bench-{i:03}", f"p{p}", workdir, PROJECT, 3)
                        for i in range(start, min(jobs, start + 5))
                    )
                )
        if tool_calls:
            await run_phase(stub, TOOLS_JOB, "p0", workdir, "bench-tools", tool_calls)


async def measure(address: str, pid: int, call, callers: int, seconds: float) -> tuple[float, float]:
    """(requests/s, server CPU µs per request) of ``callers`` tasks calling ``call(stub)`` for ``seconds``."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.RunnerServiceStub(channel)
        for _ in range(3):  # warm-up
            await call(stub)
        done = 0
        stop_at = time.monotonic() + seconds

        async def caller() -> None:
            nonlocal done
            while time.monotonic() < stop_at:
                await call(stub)
                done += 1

        cpu0, t0 = cpu_s(pid), time.monotonic()
        await asyncio.gather(*(caller() for _ in range(callers)))
        elapsed, cpu = time.monotonic() - t0, cpu_s(pid) - cpu0
    return done / elapsed, 1e6 * cpu / max(done, 1)


async def main_async(args: argparse.Namespace, tmp: Path) -> None:
    workdir = tmp / "ws"
    workdir.mkdir()
    fake = write_fake_claude(tmp)
    # (name, data-dir tag, server source, extra environment)
    contenders: list[tuple[str, str, str | None, dict[str, str]]] = [("cache on", "cache-on", None, {})]
    if args.cache_off:
        contenders.insert(0, ("cache off", "cache-off", None, {"HELIX_RUNNER_READ_CACHE_JOBS": "0"}))
    if args.baseline:
        contenders.insert(0, (f"before ({args.baseline})", "before", str(export_baseline(args.baseline, tmp)), {}))
    servers: dict[str, ServerProcess] = {}
    try:
        for name, tag, src, env in contenders:
            servers[name] = ServerProcess(
                tmp,
                tag,
                fake,
                workdir,
                server_src=src,
                env_extra={"HELIX_RUNNER_MAX_CONCURRENT_PHASES": "50", **env},
            )
        started = time.monotonic()
        await asyncio.gather(
            *(populate(s.address, workdir, args.jobs, args.phases, args.tool_calls) for s in servers.values())
        )
        print(
            f"populated {len(servers)} server(s) with {args.jobs} jobs x {args.phases} phase(s)"
            f"{f' and one job with {args.tool_calls} tool calls' if args.tool_calls else ''} "
            f"in {time.monotonic() - started:.0f} s",
            flush=True,
        )

        rpcs = {
            "GetJob": lambda stub: stub.GetJob(pb.GetJobRequest(job_id="bench-000"), timeout=30),
            "ListJobs": lambda stub: stub.ListJobs(
                pb.ListJobsRequest(project_id=PROJECT, page_size=args.jobs), timeout=30
            ),
        }
        if args.tool_calls:
            rpcs["ListToolCalls"] = lambda stub: stub.ListToolCalls(
                pb.ListToolCallsRequest(job_id=TOOLS_JOB, page_size=100), timeout=60
            )
        # Sanity: a page holds every job, each with its phases.
        for server in servers.values():
            async with grpc.aio.insecure_channel(server.address) as channel:
                page = await rpcs["ListJobs"](pb_grpc.RunnerServiceStub(channel))
                assert len(page.jobs) == args.jobs and all(len(j.phases) == args.phases for j in page.jobs), (
                    page
                )

        results: dict[tuple[str, str], list[tuple[float, float]]] = {}
        names = list(servers)
        for round_ in range(args.rounds):
            shift = round_ % len(names)
            order = names[shift:] + names[:shift]
            for name in order:
                for rpc, call in rpcs.items():
                    rate, cpu = await measure(
                        servers[name].address, servers[name].pid, call, args.callers, args.seconds
                    )
                    results.setdefault((name, rpc), []).append((rate, cpu))
                    print(
                        f"  round {round_ + 1} {name:<16} {rpc:<14} {rate:8.1f} req/s  {cpu:8.0f} µs CPU/req",
                        flush=True,
                    )
    finally:
        for server in servers.values():
            server.stop()
    if args.in_process:
        handler_profile(servers["cache on"].data / "helix-runner.sqlite3", args.jobs)

    print()
    print(
        f"{args.callers} concurrent callers, {args.seconds:g} s per run, median of {args.rounds} rounds; "
        f"ListJobs page = {args.jobs} jobs x {args.phases} phase(s)"
    )
    header = f"{'server':<18}" + "".join(f"{rpc + ' req/s':>20}{'srv µs/req':>12}" for rpc in rpcs)
    header += f"{'ListJobs/GetJob (range)':>26}{'by CPU (range)':>20}"
    print(header)
    print("-" * len(header))
    summary: dict[str, dict] = {}
    for name in names:
        row = f"{name:<18}"
        figures: dict[str, object] = {}
        for rpc in rpcs:
            samples = results[(name, rpc)]
            rate, cpu = statistics.median(r for r, _ in samples), statistics.median(c for _, c in samples)
            figures[rpc] = {"req_s": rate, "cpu_us": cpu, "req_s_all": [r for r, _ in samples]}
            row += f"{rate:>20.1f}{cpu:>12.0f}"
        ratios = [
            lj[0] / gj[0]
            for lj, gj in zip(results[(name, "ListJobs")], results[(name, "GetJob")], strict=True)
        ]
        figures["ratio"] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
        # The same ratio from the server's CPU per request (GetJob µs / ListJobs µs): what the server
        # alone would reach when it is the bottleneck; it moves much less with the machine's load.
        by_cpu = [
            gj[1] / lj[1]
            for lj, gj in zip(results[(name, "ListJobs")], results[(name, "GetJob")], strict=True)
        ]
        figures["cpu_ratio"] = {"median": statistics.median(by_cpu), "min": min(by_cpu), "max": max(by_cpu)}
        summary[name] = figures
        row += f"{statistics.median(ratios):>13.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
        row += f"{statistics.median(by_cpu):>8.2f}x ({min(by_cpu):.2f}-{max(by_cpu):.2f})"
        print(row)
    print(
        "ratio = ListJobs req/s / GetJob req/s, per round (median, min-max over rounds); target >= 0.5x. "
        "srv µs/req = server process CPU (all threads) per request; by CPU = GetJob µs/req / ListJobs µs/req."
    )
    if args.json:
        write_json(args.json, {"callers": args.callers, "jobs": args.jobs, "phases": args.phases,
                               "rounds": args.rounds, "seconds": args.seconds, "servers": summary})  # fmt: skip


def write_json(path: str, data: dict) -> None:
    Path(path).write_text(json.dumps(data, indent=2) + "\n")


def handler_profile(db: Path, jobs: int) -> None:
    """The read path's parts in this process, without gRPC: µs per call, best of 5 (a quiet-machine floor)."""
    from helix_runner.api.resource_mapping import get_job_response, list_jobs_response
    from helix_runner.phases.queries import PhaseQueries
    from helix_runner.store.sqlite_store import SqliteStore

    copy = db.with_name("profile.sqlite3")
    shutil.copy(db, copy)
    for suffix in ("-wal", "-shm"):
        if db.with_name(db.name + suffix).exists():
            shutil.copy(db.with_name(db.name + suffix), copy.with_name(copy.name + suffix))
    store = SqliteStore(copy)
    try:
        off = PhaseQueries(store, lambda j, p: None, view_cache_jobs=0)
        on = PhaseQueries(store, lambda j, p: None)
        ids = [r.job_id for r in store.list_jobs(PROJECT, [], jobs)]
        parts = {
            "store.list_jobs (the page's rows)": lambda: store.list_jobs(PROJECT, [], jobs + 1),
            "store.phases_of_jobs (page)": lambda: store.phases_of_jobs(ids),
            "store.model_cost_sums (page)": lambda: store.model_cost_sums(job_ids=ids),
            "ListJobs handler, cache off": lambda: list_jobs_response(off.list_jobs(PROJECT, [], jobs, None).jobs, ""),
            "ListJobs handler, cache on": lambda: list_jobs_response(on.list_jobs(PROJECT, [], jobs, None).jobs, ""),
            "GetJob handler, cache off": lambda: get_job_response(off.job("bench-000")),
            "GetJob handler, cache on": lambda: get_job_response(on.job("bench-000")),
        }  # fmt: skip
        print("\nin process, no gRPC (µs per call, best of 5):")
        for label, call in parts.items():
            for _ in range(20):
                call()
            best = min(timeit.repeat(call, number=200, repeat=5)) / 200 * 1e6
            print(f"  {label:<36} {best:8.1f}")
        page = len(list_jobs_response(on.list_jobs(PROJECT, [], jobs, None).jobs, ""))
        print(f"  ListJobs response: {page} bytes; GetJob: {len(get_job_response(on.job('bench-000')))} bytes")
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20, help="jobs (and ListJobs page size)")
    parser.add_argument("--phases", type=int, default=1, help="phases per job")
    parser.add_argument("--callers", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=3.0, help="per measured run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--tool-calls", type=int, default=2000, help="calls of the ListToolCalls job (0: skip)"
    )
    parser.add_argument(
        "--baseline",
        default="",
        help="also a server of this git ref ('merge-base': the commit this branch started from, "
        "git merge-base HEAD main)",
    )
    parser.add_argument("--no-baseline", dest="baseline", action="store_const", const="")
    parser.add_argument(
        "--no-cache-off", dest="cache_off", action="store_false", help="no 'cache off' server (read_cache_jobs 0)"
    )
    parser.add_argument("--in-process", action="store_true", help="also time the handler's parts without gRPC")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, databases)")
    args = parser.parse_args()
    if args.baseline == "merge-base":
        args.baseline = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "merge-base", "HEAD", "main"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()[:12]
    tmp = Path(tempfile.mkdtemp(prefix="bench-read-model-"))
    try:
        asyncio.run(main_async(args, tmp))
    finally:
        if args.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
