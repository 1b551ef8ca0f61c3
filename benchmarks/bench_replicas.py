"""P8: events/s with N server processes on one PostgreSQL vs one process, and the NOTIFY hop.

Usage (from the repository root):
    .venv/bin/python benchmarks/bench_replicas.py            # full: 200 phases x 1000 lines, 5 rounds
    .venv/bin/python benchmarks/bench_replicas.py --quick    # 200 phases x 200 lines, 2 rounds
    .venv/bin/python benchmarks/bench_replicas.py --json out.json --keep

A throwaway PostgreSQL cluster (tests/support/postgres.py: Unix socket, fsync off) and servers
A and B (`helix-runner serve`, the fake `claude` of bench_run_phase.py, which writes its lines as
fast as it can) on one database. Each round runs the same load twice, back to back, in an order
that alternates between rounds: K concurrent RunPhase streams on A alone, then spread evenly over
A and B. The load comes from two client processes in both cases (each streams K/2 phases), so
the client side has the same parallelism and only the server side changes. Events/s = events the
clients received / (last result - first call). The ratio N=2 / N=1 is taken per round; its
median and range are printed. Every phase is checked: counters 1..n in order, sequences gap-free,
result SUCCEEDED. CPU per round: each server (and its event loop's thread alone), all PostgreSQL
backends, and the machine. Per server and run also the loop lag p99 from its own probe (the
``helix_event_loop_lag_seconds`` histogram on its /metrics, before and after the run), how long its
loop thread waited for a CPU (schedstat), and a trivial process's wake-up p99 meanwhile (the floor).
``--servers 1,2,4,8`` runs more server counts (each against N=1); ``--turn-probe`` and ``--py-spy``
show where the loop's time goes (benchmarks/README.md).

Watch fan-out: one phase on A writes a line every 20 ms; W watchers on A (the owner: in-process
fan-out) and W on B (the other replica: the event goes through the database, NOTIFY, then a read)
stamp each line on arrival; latency = arrival - the child's write time (same host clock).

Beside a baseline (``--baseline REF``): the server package of git REF runs as a second pair, A0 and
B0 on a database of their own, under the same load in the same rounds (before or after this tree's,
alternating), and the events/s of this tree over REF's is printed per N.

Catch-up (``--baseline REF``): one phase on A writes 3,000 lines at 1,000/s; once 1,500 events are
recorded, W watchers join at once on A, on B and on C0 (a third server on the same database,
running the server package of git REF, e.g. the commit before a change to the follow loop). Each
watcher's catch-up time = its call -> the first event at or past the sequence recorded at join,
and how many response messages carried that history. Rounds rotate which server's watchers are
started first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))  # support.postgres: the throwaway cluster of the tests

from bench_run_phase import HiccupMeter, machine_cpu, parse_text, pct, proc_cpu, write_fake_claude  # noqa: E402
from server_process import ServerProcess, export_baseline, histogram_quantile  # noqa: E402

LOOP_LAG = "helix_event_loop_lag_seconds"  # the server's loop-lag probe (telemetry/loop_lag.py)

# ------------------------------------------------------------------------------------------------
# Client process (--client CFG): K concurrent RunPhase streams spread over the given addresses.


async def client_main(cfg: dict) -> dict:
    import grpc

    from helix.runner.v1 import resources_pb2 as res
    from helix.runner.v1 import runner_service_pb2 as pb
    from helix.runner.v1 import runner_service_pb2_grpc as pb_grpc

    stubs = []
    for address in cfg["addresses"]:
        channel = grpc.aio.insecure_channel(address, options=[("grpc.max_receive_message_length", 64 << 20)])
        await asyncio.wait_for(channel.channel_ready(), 20)
        stubs.append(pb_grpc.RunnerServiceStub(channel))
    n = cfg["lines"]
    env = {"HELIX_BENCH_LINES": str(n), "HELIX_BENCH_RATE": "0"}
    latencies: list[int] = []
    bad: list[str] = []
    events = 0

    async def one(idx: int) -> None:
        nonlocal events
        stub = stubs[idx % len(stubs)]
        request = pb.RunPhaseRequest(job_id=f"{cfg['tag']}-{idx}", phase_id="p", prompt="bench",
                                     working_dir=cfg["workdir"], options=pb.PhaseOptions(env=env))  # fmt: skip
        last_seq, counters, status = 0, [], None
        try:
            async for resp in stub.RunPhase(request, timeout=cfg["timeout"]):
                now = time.time_ns()
                for ev in resp.events:
                    if ev.sequence != last_seq + 1:
                        bad.append(f"{idx}: sequence {ev.sequence} after {last_seq}")
                    last_seq = ev.sequence
                    if ev.HasField("assistant_text"):
                        i, t_write = parse_text(ev.assistant_text.text)
                        counters.append(i)
                        latencies.append(now - t_write)
                events += len(resp.events)
                if resp.HasField("result"):
                    status = res.PhaseStatus.Name(resp.result.status)
        except grpc.aio.AioRpcError as exc:
            bad.append(f"{idx}: {exc.code().name}: {exc.details()}")
            return
        if counters != list(range(1, n + 1)) or status != "PHASE_STATUS_SUCCEEDED":
            bad.append(
                f"{idx}: {len(counters)} of {n} lines in order={counters == sorted(counters)}, {status}"
            )

    t0 = time.time_ns()
    await asyncio.gather(*(one(cfg["first"] + i) for i in range(cfg["k"])))
    t1 = time.time_ns()
    lat = sorted(x / 1e6 for x in latencies)
    return {"t0": t0, "t1": t1, "events": events, "bad": bad[:5], "bad_count": len(bad),
            "p50": pct(lat, 50), "p99": pct(lat, 99)}  # fmt: skip


# ------------------------------------------------------------------------------------------------
# Watch client (--watch CFG): one paced phase on the owner, W watchers on the owner and W elsewhere.


async def watch_main(cfg: dict) -> dict:
    import grpc

    from helix.runner.v1 import runner_service_pb2 as pb
    from helix.runner.v1 import runner_service_pb2_grpc as pb_grpc

    owner = pb_grpc.RunnerServiceStub(grpc.aio.insecure_channel(cfg["owner"]))
    other = pb_grpc.RunnerServiceStub(grpc.aio.insecure_channel(cfg["other"]))
    n, rate, w = cfg["lines"], cfg["rate"], cfg["watchers"]
    ids = {"job_id": cfg["tag"], "phase_id": "p"}
    request = pb.RunPhaseRequest(**ids, prompt="bench", working_dir=cfg["workdir"],
                                 options=pb.PhaseOptions(env={"HELIX_BENCH_LINES": str(n),
                                                              "HELIX_BENCH_RATE": repr(rate)}))  # fmt: skip
    started = asyncio.Event()
    joined_ns = [0]
    lat: dict[str, list[float]] = {"owner": [], "other": []}

    async def run() -> None:
        async for resp in owner.RunPhase(request, timeout=cfg["timeout"]):
            if resp.events:
                started.set()

    async def watch(stub, where: str) -> None:
        async for resp in stub.WatchPhase(pb.WatchPhaseRequest(**ids), timeout=cfg["timeout"]):
            now = time.time_ns()
            for ev in resp.events:
                if ev.HasField("assistant_text"):
                    _, t_write = parse_text(ev.assistant_text.text)
                    if t_write > joined_ns[0] > 0:  # written after every watcher was following
                        lat[where].append((now - t_write) / 1e6)

    runner = asyncio.create_task(run())
    await asyncio.wait_for(started.wait(), 30)
    watchers = [asyncio.create_task(watch(owner, "owner")) for _ in range(w)]
    watchers += [asyncio.create_task(watch(other, "other")) for _ in range(w)]
    await asyncio.sleep(1.0)  # every watcher past its history read
    joined_ns[0] = time.time_ns()
    await asyncio.gather(runner, *watchers)
    out = {}
    for where, values in lat.items():
        v = sorted(values)
        out[where] = {"n": len(v), "p50": pct(v, 50), "p90": pct(v, 90), "p99": pct(v, 99)}
    return out


# ------------------------------------------------------------------------------------------------
# Catch-up client (--catchup CFG): watchers joining a phase with a long history, on each server.


async def catchup_main(cfg: dict) -> dict:
    import grpc

    from helix.runner.v1 import runner_service_pb2 as pb
    from helix.runner.v1 import runner_service_pb2_grpc as pb_grpc

    stubs = {label: pb_grpc.RunnerServiceStub(grpc.aio.insecure_channel(address))
             for label, address in cfg["servers"].items()}  # fmt: skip
    owner = stubs[cfg["owner"]]
    out: dict[str, dict[str, list[float]]] = {label: {"ms": [], "messages": []} for label in stubs}
    for r in range(cfg["rounds"]):
        ids = {"job_id": f"catchup-{r}", "phase_id": "p"}
        request = pb.RunPhaseRequest(**ids, prompt="bench", working_dir=cfg["workdir"],
                                     options=pb.PhaseOptions(env={"HELIX_BENCH_LINES": str(cfg["lines"]),
                                                                  "HELIX_BENCH_RATE": repr(cfg["rate"])}))  # fmt: skip
        latest = [0]
        history_recorded = asyncio.Event()

        async def run(request=request, latest=latest, history_recorded=history_recorded) -> None:
            async for resp in owner.RunPhase(request, timeout=cfg["timeout"]):
                if resp.events:
                    latest[0] = resp.events[-1].sequence
                    if latest[0] >= cfg["history"]:
                        history_recorded.set()

        async def watch(label: str, join_seq: int, ids=ids) -> None:
            t0, messages = time.perf_counter(), 0
            call = stubs[label].WatchPhase(pb.WatchPhaseRequest(**ids), timeout=cfg["timeout"])
            async for resp in call:
                messages += 1
                if resp.events and resp.events[-1].sequence >= join_seq:
                    out[label]["ms"].append((time.perf_counter() - t0) * 1000)
                    out[label]["messages"].append(messages)
                    call.cancel()
                    return

        runner = asyncio.create_task(run())
        await asyncio.wait_for(history_recorded.wait(), 60)
        labels = list(stubs)[r % len(stubs):] + list(stubs)[: r % len(stubs)]
        watchers = [watch(label, latest[0]) for _ in range(cfg["watchers"]) for label in labels]
        await asyncio.gather(*watchers)
        await runner
    return out


# ------------------------------------------------------------------------------------------------
# Driver.


def postgres_cpu(postmaster: int) -> float:
    """CPU seconds of the benchmark's PostgreSQL: the postmaster, its live children (backends and
    workers; other clusters on the machine are not counted) and what it reaped from exited ones."""
    own, reaped = proc_cpu(postmaster)
    total = own + reaped
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid == postmaster:
                total += proc_cpu(int(pid))[0]
        except (OSError, ValueError, IndexError):
            continue
    return total


def children_cpu() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)  # the client processes, once reaped
    return ru.ru_utime + ru.ru_stime


def run_clients(cfgs: list[dict], flag: str, timeout: float) -> list[dict]:
    procs = [subprocess.Popen([sys.executable, __file__, flag, json.dumps(c)], stdout=subprocess.PIPE, text=True)
             for c in cfgs]  # fmt: skip
    outs = []
    for p in procs:
        stdout, _ = p.communicate(timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError(f"client exited {p.returncode}")
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    return outs


def load_round(servers: list[ServerProcess], tag: str, args, workdir: Path, postmaster: int) -> dict:
    """K phases over ``servers`` from two client processes; events/s, latency, CPU (with ``--py-spy``,
    one server alone is sampled by py-spy for the run)."""
    spy = None
    if getattr(args, "py_spy", None) and len(servers) == 1:
        out = Path(args.py_spy) / f"{tag}.txt"
        out.parent.mkdir(parents=True, exist_ok=True)
        spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "-p", str(servers[0].pid),
                                "--format", "raw", "-o", str(out), "--threads", "--idle", "--rate", "200"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        time.sleep(0.5)  # attached before the load starts
    try:
        return _load_round(servers, tag, args, workdir, postmaster)
    finally:
        if spy is not None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            spy.wait(60)


def _load_round(servers: list[ServerProcess], tag: str, args, workdir: Path, postmaster: int) -> dict:
    addresses = [s.address for s in servers]
    half = args.k // 2
    cfgs = [
        {"addresses": addresses, "k": half, "first": 0, "lines": args.lines, "tag": tag,
         "workdir": str(workdir), "timeout": args.timeout},
        {"addresses": addresses[1:] + addresses[:1], "k": args.k - half, "first": half, "lines": args.lines,
         "tag": tag, "workdir": str(workdir), "timeout": args.timeout},
    ]  # fmt: skip
    lag0 = {s.pid: s.histogram(LOOP_LAG) for s in servers}
    cpu0 = {s.pid: proc_cpu(s.pid) for s in servers}
    loop0 = {s.pid: s.loop_thread_cpu() for s in servers}
    waited0 = {s.pid: s.loop_thread_waited() for s in servers}
    meter = HiccupMeter()  # how late a trivial process wakes on this machine meanwhile: the floor under a loop's lag
    pg0, m0, c0 = postgres_cpu(postmaster), machine_cpu(), children_cpu()
    try:
        outs = run_clients(cfgs, "--client", args.timeout + 30)
    finally:
        wakeup = meter.stop()
    pg1, m1, c1 = postgres_cpu(postmaster), machine_cpu(), children_cpu()
    cpu1 = {s.pid: proc_cpu(s.pid) for s in servers}
    loop1 = {s.pid: s.loop_thread_cpu() for s in servers}
    waited1 = {s.pid: s.loop_thread_waited() for s in servers}
    lags = [histogram_quantile(lag0[s.pid], s.histogram(LOOP_LAG), 0.99) for s in servers]
    wall = (max(o["t1"] for o in outs) - min(o["t0"] for o in outs)) / 1e9
    events = sum(o["events"] for o in outs)
    return {
        "servers": len(servers),
        "events": events,
        "wall_s": wall,
        "events_per_s": events / wall,
        "p50_ms": statistics.median(o["p50"] for o in outs),
        "p99_ms": max(o["p99"] for o in outs),
        "bad": sum(o["bad_count"] for o in outs),
        "bad_examples": [b for o in outs for b in o["bad"]][:3],
        "server_cpu": [(cpu1[s.pid][0] - cpu0[s.pid][0]) / wall for s in servers],
        # The main thread of each server, i.e. its event loop, in cores.
        "loop_cpu": [(loop1[s.pid] - loop0[s.pid]) / wall for s in servers],
        # How long each loop thread was runnable but had no CPU, per second of the run (schedstat):
        # on a saturated machine, what a timer on the loop waits beyond the loop's own work.
        "loop_cpu_wait": [(waited1[s.pid] - waited0[s.pid]) / wall for s in servers],
        # Each server's loop-lag probe over the run: p99 in ms (from the histogram's buckets), samples,
        # and the share of samples at or under 10 ms.
        "loop_lag_p99_ms": [lag[0] * 1000 for lag in lags],
        "loop_lag_samples": [lag[1] for lag in lags],
        "loop_lag_within_10ms": [lag[2] for lag in lags],
        "wakeup_p99_ms": wakeup.get("p99", float("nan")),
        "load_avg": os.getloadavg()[0],
        # The phases' shims and fake CLIs, reaped by the servers.
        "phase_cpu": sum(cpu1[s.pid][1] - cpu0[s.pid][1] for s in servers) / wall,
        "client_cpu": (c1 - c0) / wall,
        "pg_cpu": (pg1 - pg0) / wall,
        "machine_busy": (m1[0] - m0[0]) / max(1e-9, m1[1] - m0[1]) * (os.cpu_count() or 1),
    }


def spread(values: list[float], digits: int = 0) -> str:
    """Median (min-max), with ``digits`` decimals."""
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="200 phases x 200 lines, 2 rounds, short watch run")
    ap.add_argument("--k", type=int, default=200, help="concurrent phases per run (default 200)")
    ap.add_argument("--servers", default="1,2", metavar="N,N",
                    help="server process counts to run each round (default 1,2; on a many-core host e.g. 1,2,4,8); "
                         "each N>1 is reported against N=1")
    ap.add_argument("--lines", type=int, help="assistant lines per phase (default 1000; quick 200)")
    ap.add_argument("--rounds", type=int, help="rounds, each N=1 and N=2 (default 5; quick 2)")
    ap.add_argument("--watchers", type=int, default=10, help="watchers on the owner and on the other replica")
    ap.add_argument("--timeout", type=float, default=240.0)
    ap.add_argument(
        "--sqlite",
        action="store_true",
        help="also run one server on SQLite in each round (is the PostgreSQL store the bound?)",
    )
    ap.add_argument(
        "--baseline",
        metavar="REF",
        help="also measure catch-up: watchers joining a long history on A, B and a server of git REF",
    )
    ap.add_argument("--catchup-only", action="store_true", help="with --baseline: skip the load rounds and the watch run")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    ap.add_argument("--turn-probe", metavar="DIR", help="load benchmarks/turn_probe into every server: how long each "
                    "loop turn keeps the loop busy (callbacks only), printed per server at the end")
    ap.add_argument("--py-spy", metavar="DIR", help="sample each one-server run with py-spy (all threads, idle "
                    "included) into DIR/<run>.txt (collapsed stacks; benchmarks/spy_summary.py sums them up)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (server logs)")
    ap.add_argument("--client", help=argparse.SUPPRESS)
    ap.add_argument("--watch", help=argparse.SUPPRESS)
    ap.add_argument("--catchup", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.catchup:
        print(json.dumps(asyncio.run(catchup_main(json.loads(args.catchup)))))
        return 0
    if args.client:
        print(json.dumps(asyncio.run(client_main(json.loads(args.client)))))
        return 0
    if args.watch:
        print(json.dumps(asyncio.run(watch_main(json.loads(args.watch)))))
        return 0
    args.ns = sorted({int(n) for n in args.servers.split(",") if n.strip()})
    if not args.ns or args.ns[0] != 1 or args.ns[-1] > 26:
        ap.error("--servers must include 1 and stay at most 26")
    args.lines = args.lines or (200 if args.quick else 1000)
    args.rounds = args.rounds or (2 if args.quick else 5)
    watch_lines = 100 if args.quick else 500

    from support.postgres import PostgresCluster

    if args.turn_probe:  # every server started from here loads the probe (sitecustomize)
        Path(args.turn_probe).mkdir(parents=True, exist_ok=True)
        os.environ["HELIX_TURN_PROBE_OUT"] = str(Path(args.turn_probe).resolve() / "turns")
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE / "turn_probe"), os.environ.get("PYTHONPATH")) if p)
    tmp = Path(tempfile.mkdtemp(prefix="helix-bench-replicas-"))
    workdir = tmp / "work"
    workdir.mkdir()
    fake = write_fake_claude(tmp)
    cluster = PostgresCluster().start()
    servers: list[ServerProcess] = []
    rounds: list[dict] = []
    baseline_rounds: list[dict] = []
    watch, catchup = None, None
    try:
        url = cluster.create_database("bench")
        env = {"HELIX_RUNNER_DATABASE_URL": url, "HELIX_RUNNER_MAX_CONCURRENT_PHASES": "300",
               "HELIX_RUNNER_DEFAULT_IDLE_TIMEOUT_SECONDS": "120", "HELIX_RUNNER_RETRY_MAX_ATTEMPTS": "1",
               "HELIX_RUNNER_METRICS_PORT": "0"}  # fmt: skip
        postmaster = int((cluster.datadir / "postmaster.pid").read_text().split()[0])
        names = [chr(ord("a") + i) for i in range(max(2, args.ns[-1]))]  # two at least: the watch run
        for name in names:
            servers.append(ServerProcess(tmp, name, fake, workdir,
                                         env_extra={**env, "HELIX_RUNNER_REPLICA_ID": f"bench-{name}"}))  # fmt: skip
        sqlite = None
        if args.sqlite:  # the same server on its embedded store, same limits
            sqlite = ServerProcess(tmp, "sqlite", fake, workdir,
                                   env_extra={k: v for k, v in env.items() if "DATABASE_URL" not in k})  # fmt: skip
            servers.append(sqlite)
        print(f"# PostgreSQL {cluster.bindir.parent.name} at {cluster.socket_dir}; servers "
              f"{', '.join(s.address for s in servers)}; {os.cpu_count()} CPUs; K={args.k}, "
              f"{args.lines} lines per phase, {args.rounds} rounds, N in {args.ns}; "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
        baseline_pair = []
        if args.baseline and not args.catchup_only:  # the same load on REF's servers, on a database of their own
            base_url = cluster.create_database("bench_baseline")
            base_src = export_baseline(args.baseline, tmp)
            for name in [f"{n}0" for n in names[: args.ns[-1]]]:
                baseline_pair.append(ServerProcess(tmp, name, fake, workdir, server_src=base_src, env_extra={
                    **env, "HELIX_RUNNER_DATABASE_URL": base_url, "HELIX_RUNNER_REPLICA_ID": f"bench-{name}"}))
            servers.extend(baseline_pair)
        if not args.catchup_only:
            rounds, baseline_rounds = load_rounds([s for s in servers if s not in baseline_pair], sqlite, args,
                                                  workdir, postmaster, baseline_pair)
            watch = run_clients([{"owner": servers[0].address, "other": servers[1].address, "lines": watch_lines,
                                  "rate": 50.0, "watchers": args.watchers, "tag": "watch", "workdir": str(workdir),
                                  "timeout": args.timeout}], "--watch", args.timeout + 30)[0]  # fmt: skip
        if args.baseline:
            baseline = ServerProcess(tmp, "c0", fake, workdir, server_src=base_src if baseline_pair else
                                     export_baseline(args.baseline, tmp),
                                     env_extra={**env, "HELIX_RUNNER_REPLICA_ID": "bench-c0"})  # fmt: skip
            servers.append(baseline)
            labels = {"A (owner)": servers[0].address, "B (this tree)": servers[1].address,
                      f"C0 ({args.baseline})": baseline.address}  # fmt: skip
            catchup = run_clients([{"servers": labels, "owner": "A (owner)", "lines": 3000, "rate": 1000.0,
                                    "history": 1500, "watchers": 5, "rounds": 2 if args.quick else 5,
                                    "workdir": str(workdir), "timeout": args.timeout}],
                                  "--catchup", args.timeout * 5)[0]  # fmt: skip
    finally:
        for s in servers:
            s.stop()
        cluster.stop()

    bad = report_load(args, rounds, watch) if rounds else 0
    if args.turn_probe:
        report_turns(Path(args.turn_probe), {s.pid: s.log_path.stem.removeprefix("server-") for s in servers})
    if baseline_rounds:
        bad += report_baseline(args, rounds, baseline_rounds)
    if catchup is not None:
        report_catchup(catchup)
    if args.json:
        Path(args.json).write_text(json.dumps({
            **({"ratio": primary_ratio(rounds)} if len(args.ns) > 1 and rounds else {}),
            **({"baseline": {"ref": args.baseline, "ratio": primary_ratio(baseline_rounds),
                             "this_over_baseline": this_over_baseline(rounds, baseline_rounds),
                             "rounds": baseline_rounds}} if baseline_rounds else {}),
            "rounds": rounds, "bad": bad, "watch": watch, "catchup": catchup, "k": args.k, "lines": args.lines,
        }, indent=2) + "\n")  # fmt: skip
    if args.keep:
        print(f"\n# kept {tmp}")
    else:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def load_rounds(servers: list[ServerProcess], sqlite: ServerProcess | None, args, workdir: Path,
                postmaster: int, baseline: list[ServerProcess] | None = None) -> tuple[list[dict], list[dict]]:
    """Warm-up, then each round: N=1 and N=2 (and one SQLite server) in alternating order; with a
    ``baseline`` pair (another commit's servers, on a database of their own) its N=1 and N=2 too,
    before or after this tree's, alternating. Returns this tree's rounds and the baseline's."""
    warm = argparse.Namespace(**{**vars(args), "k": 4, "py_spy": None})
    for s in [*servers, *(baseline or [])]:
        load_round([s], f"warm-{s.pid}", warm, workdir, postmaster)
    rounds: list[dict] = []
    baseline_rounds: list[dict] = []
    for r in range(args.rounds):
        order = list(args.ns) if r % 2 == 0 else list(reversed(args.ns))
        if sqlite is not None:
            order.insert(1, 0)  # 0: one server on SQLite, between the other two
        trees = [("", servers, order, rounds)]
        if baseline:
            trees.append((f" {args.baseline}", baseline, [n for n in order if n], baseline_rounds))
            if r % 2:
                trees.reverse()
        for label, pair_of, ns, into in trees:
            pair = {}
            for n in ns:
                chosen = [sqlite] if n == 0 else pair_of[:n]
                # The tag names the phases' job ids: a ref like HEAD~1 must not put a "~" in them.
                tag = f"r{r}-n{n}" + re.sub(r"[^A-Za-z0-9_-]", "_", label.strip())
                pair[n] = load_round(chosen, tag, args, workdir, postmaster)
                got = pair[n]
                print(f"# round {r + 1} {'N=1 SQLite' if n == 0 else f'N={n}'}{label}: {got['events_per_s']:.0f} events/s in {got['wall_s']:.1f} s, "
                      f"server CPU {'+'.join(f'{c:.0%}' for c in got['server_cpu'])} "
                      f"(loop {'+'.join(f'{c:.0%}' for c in got['loop_cpu'])}, "
                      f"waiting for a CPU {'+'.join(f'{c:.0%}' for c in got['loop_cpu_wait'])}), "
                      f"loop lag p99 {'/'.join(f'{x:.1f}' for x in got['loop_lag_p99_ms'])} ms "
                      f"(a process's wake-up p99 {got['wakeup_p99_ms']:.1f} ms), phases {got['phase_cpu']:.0%}, "
                      f"clients {got['client_cpu']:.0%}, PostgreSQL {got['pg_cpu']:.0%}, "
                      f"machine {got['machine_busy']:.0%} of one core, load {got['load_avg']:.1f}, bad {got['bad']}",
                      flush=True)  # fmt: skip
            into.append(pair)
    return rounds, baseline_rounds


def ratio_summary(rounds: list[dict], n: int = 2) -> dict:
    """Events/s of N=n over N=1, per round: median, range (the goal is P8's, for N=2)."""
    ratios = [p[n]["events_per_s"] / p[1]["events_per_s"] for p in rounds]
    return {"n": n, "median": statistics.median(ratios), "min": min(ratios), "max": max(ratios), "goal": 1.7}


def scale_ns(rounds: list[dict]) -> list[int]:
    return sorted(n for n in rounds[0] if n > 1)


def primary_ratio(rounds: list[dict]) -> dict:
    """N=2 over N=1 when N=2 ran, else the largest N's."""
    ns = scale_ns(rounds)
    return ratio_summary(rounds, 2 if 2 in ns else ns[-1]) if ns else {}


def per_event_us(runs: list[dict]) -> float:
    """Server CPU per event, µs (median over the runs)."""
    return statistics.median(sum(x["server_cpu"]) * x["wall_s"] / x["events"] * 1e6 for x in runs)


def report_load(args, rounds: list[dict], watch: dict) -> int:
    """Prints the events/s table, the N=2/N=1 ratio and the watch fan-out; returns the bad phases."""
    every = [x for p in rounds for n, x in p.items() if n]
    bad = sum(x["bad"] for x in every)
    print(f"\n## Events/s, K={args.k} phases x {args.lines} lines, {args.rounds} rounds "
          "(median (min-max); CPU in cores; loop lag p99 of the worst server per run)\n")  # fmt: skip
    print(f"{'servers':>8} {'events/s':>20} {'live p50 ms':>12} {'live p99 ms':>12} {'server CPU':>11} "
          f"{'loop CPU':>9} {'µs/event':>9} {'loop lag p99':>13} {'wake-up p99':>12} {'phases CPU':>11} {'clients CPU':>12} "
          f"{'PostgreSQL CPU':>15} {'machine busy':>13} {'load':>5}")  # fmt: skip
    table = [(str(n), [p[n] for p in rounds]) for n in sorted(rounds[0]) if n]
    table += [("1 SQLite", [p[0] for p in rounds])] if args.sqlite else []
    for n, runs in table:
        print(f"{n:>8} {spread([x['events_per_s'] for x in runs]):>20} "
              f"{statistics.median(x['p50_ms'] for x in runs):>12.1f} "
              f"{statistics.median(x['p99_ms'] for x in runs):>12.1f} "
              f"{statistics.median(sum(x['server_cpu']) for x in runs):>11.2f} "
              f"{statistics.median(max(x['loop_cpu']) for x in runs):>9.2f} "
              f"{per_event_us(runs):>9.1f} "
              f"{statistics.median(max(x['loop_lag_p99_ms']) for x in runs):>10.1f} ms "
              f"{statistics.median(x['wakeup_p99_ms'] for x in runs):>9.1f} ms "
              f"{statistics.median(x['phase_cpu'] for x in runs):>11.2f} "
              f"{statistics.median(x['client_cpu'] for x in runs):>12.2f} "
              f"{statistics.median(x['pg_cpu'] for x in runs):>15.2f} "
              f"{statistics.median(x['machine_busy'] for x in runs):>13.2f} "
              f"{statistics.median(x['load_avg'] for x in runs):>5.1f}")  # fmt: skip
    print()
    for n in scale_ns(rounds):
        ratio = ratio_summary(rounds, n)
        print(f"ratio N={n} / N=1 (per round, median): {ratio['median']:.2f}x "
              f"(range {ratio['min']:.2f}-{ratio['max']:.2f}){'; goal >= 1.7x' if n == 2 else ''}")
    print(f"lost/reordered/failed phases: {bad}")
    if bad:
        print("examples:", [b for x in every for b in x["bad_examples"]][:3])
    o, t = watch["owner"], watch["other"]
    print(f"\n## Watch fan-out, one phase at 50 lines/s on A, {args.watchers} watchers on A and on B (ms)\n")
    print(f"{'watcher on':>22} {'n':>6} {'p50':>8} {'p90':>8} {'p99':>8}")
    for label, x in (("A (owner, in-process)", o), ("B (NOTIFY + read)", t)):
        print(f"{label:>22} {x['n']:>6} {x['p50']:>8.2f} {x['p90']:>8.2f} {x['p99']:>8.2f}")
    print(
        f"\nadded latency of the NOTIFY hop: p50 +{t['p50'] - o['p50']:.2f} ms, p99 +{t['p99'] - o['p99']:.2f} ms"
    )
    return bad


def this_over_baseline(rounds: list[dict], baseline_rounds: list[dict]) -> dict:
    """Events/s of this tree over the baseline's, per round, at each N: median (min, max); and the
    server CPU per event of this tree over the baseline's."""
    out = {}
    for n in sorted(baseline_rounds[0]):
        pairs = list(zip(rounds, baseline_rounds, strict=True))
        r = [a[n]["events_per_s"] / b[n]["events_per_s"] for a, b in pairs]
        cpu = [per_event_us([a[n]]) / per_event_us([b[n]]) for a, b in pairs]
        out[str(n)] = {"median": statistics.median(r), "min": min(r), "max": max(r),
                       "cpu_per_event": statistics.median(cpu)}
    return out


def report_baseline(args, rounds: list[dict], baseline_rounds: list[dict]) -> int:
    """Prints the baseline pair's events/s beside this tree's, and the ratios; returns its bad phases."""
    print(f"\n## Beside {args.baseline}: the same load on its servers (a database of their own), same rounds\n")
    print(f"{'servers':>8} {'this tree events/s':>20} {args.baseline + ' events/s':>22} {'this / baseline':>22} "
          f"{'µs/event this / base':>22} {'loop CPU this / base':>21} {'loop lag p99 ms this / base':>28}")
    ratios = this_over_baseline(rounds, baseline_rounds)
    for n in sorted(baseline_rounds[0]):
        x = ratios[str(n)]
        mine, base = [p[n] for p in rounds], [p[n] for p in baseline_rounds]
        loop = (f"{statistics.median(max(r['loop_cpu']) for r in mine):.2f} / "
                f"{statistics.median(max(r['loop_cpu']) for r in base):.2f}")
        lag = (f"{statistics.median(max(r['loop_lag_p99_ms']) for r in mine):.1f} / "
               f"{statistics.median(max(r['loop_lag_p99_ms']) for r in base):.1f}")
        print(f"{n:>8} {spread([r['events_per_s'] for r in mine]):>20} "
              f"{spread([r['events_per_s'] for r in base]):>22} "
              f"{x['median']:>9.2f} ({x['min']:.2f}-{x['max']:.2f})"
              f"{per_event_us(mine):>10.1f} / {per_event_us(base):.1f} ({x['cpu_per_event']:.2f})"
              f"{loop:>21} {lag:>28}")  # fmt: skip
    for n in scale_ns(baseline_rounds):
        base = ratio_summary(baseline_rounds, n)
        print(f"ratio N={n} / N=1 of {args.baseline}: {base['median']:.2f}x (range {base['min']:.2f}-{base['max']:.2f})")
    return sum(p[n]["bad"] for p in baseline_rounds for n in p)


def report_turns(directory: Path, names: dict[int, str]) -> None:
    """Prints each server's loop turns (benchmarks/turn_probe): busy time per turn and what filled the long ones."""
    print("\n## Loop turns: busy time per turn (callbacks and task steps, not the wait in select), whole server life\n")
    print(f"{'server':>8} {'turns':>8} {'busy s':>7} {'p50 ms':>7} {'p99 ms':>7} {'p99.9 ms':>9} {'max ms':>7} {'> 10 ms':>8}")
    found = {}
    for path in sorted(directory.glob("turns.*.json")):
        pid = int(path.suffixes[-2].lstrip("."))
        if pid in names:
            found[names[pid]] = json.loads(path.read_text())
    for name, t in sorted(found.items()):
        print(f"{name:>8} {t['turns']:>8} {t['busy_s']:>7.1f} {t['p50_ms']:>7.2f} {t['p99_ms']:>7.2f} "
              f"{t['p999_ms']:>9.2f} {t['max_ms']:>7.1f} {t['over_10ms']:>8}")
    for name, t in sorted(found.items()):
        print(f"\n{name}: what ran in its turns over 10 ms (turns, ms in them)")
        for what, count, ms in t["in_turns_over_10ms"][:8]:
            print(f"  {count:>5} {ms:>8.1f}  {what[:110]}")


def report_catchup(catchup: dict) -> None:
    """Prints each server's watchers' catch-up time and history messages, median (min-max)."""
    print("\n## Catch-up: watchers joining a phase with ~1,500 events of history (3,000 lines at 1,000/s on A)\n")
    print(f"{'watchers on':>28} {'n':>4} {'catch-up ms':>22} {'messages for the history':>26}")
    for label, x in catchup.items():
        ms, messages = x["ms"], x["messages"]
        print(f"{label:>28} {len(ms):>4} {spread(ms, 1):>22} {spread([float(m) for m in messages]):>26}")


if __name__ == "__main__":
    sys.exit(main())
