"""Hand-over benchmark (issue 24): how long a phase is without a CLI when its replica drains.

Three `helix-runner serve` processes on a throwaway PostgreSQL cluster (tests/support/postgres.py:
Unix socket, fsync off), one workspace directory for all (a shared volume), the real Claude Code
CLI against each replica's scripted Messages API (``support.cluster.stepped_script``: Bash steps
of ``--step`` seconds; each step is chosen by what the conversation holds, so a phase continues on
another replica). ``--phases`` phases run spread over the three; then each of ``--rounds``
replicas in turn is drained (SIGTERM) and started again, as a rolling deploy does.

Per hand-over (an attempt whose reason is "moved from replica X (draining)"), from the final
result's attempts and the phase's events:

* **stop → ATTEMPT_STARTED on the adopter**: the end of the old attempt (its CLI stopped, its
  ``end_time``) to the adopter's ATTEMPT_STARTED event (``receive_time``): release, adoption,
  planning the launch again;
* **stop → first CLI event on the adopter**: to the first event the resumed CLI produced
  (``session_init`` or later): the above plus starting the CLI with ``--resume``. This is the
  issue's "stop → first event on the adopter";
* **SIGTERM → first CLI event**, as the following client saw it: the above plus the wait for the
  phase's next tool boundary (at most ``handover_wait_seconds``).

The baseline, in the same run on the same replicas: a **fresh phase** on a live replica, RunPhase
sent → its ATTEMPT_STARTED and → its first CLI event (the CLI's cold start, what re-running a
phase from the start costs at least, before it redoes any work), one at a time, and as many at once
as one drain hands over (``--phases`` / 3, on the two other replicas), since the adopters' CLIs
start together too. The ratio hand-over / fresh start
is the overhead of moving a phase over starting one; absolute numbers vary with the machine.

Usage: .venv/bin/python benchmarks/bench_handover.py [--phases 6] [--rounds 3] [--steps 25]
           [--step 2] [--fresh 6] [--settle 10] [--trace] [--keep]
Exits 1 when no hand-over happened (a server without the hand-over ends the phases INTERRUPTED).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # support.*: the cluster helpers of the tests
sys.path.insert(0, str(HERE))

import grpc  # noqa: E402
from bench_run_phase import pct  # noqa: E402
from support.cluster import SERVICE_OPTIONS, cluster, service_target, shared_workspace, stepped_script  # noqa: E402
from support.postgres import PostgresCluster, PostgresUnavailable  # noqa: E402

from helix.runner.v1 import events_pb2 as ev  # noqa: E402
from helix.runner.v1 import resources_pb2 as res  # noqa: E402
from helix.runner.v1 import runner_service_pb2 as pb  # noqa: E402
from helix.runner.v1 import runner_service_pb2_grpc as pb_grpc  # noqa: E402

# Every phase has more work left than the drain's budget: without the hand-over the drain would
# end it INTERRUPTED; with it, it moves at its next tool boundary.
HANDOVER_WAIT_S = 10
DRAIN_GRACE_S = 20
ENV = {
    "HELIX_RUNNER_HANDOVER_WAIT_SECONDS": str(HANDOVER_WAIT_S),
    "HELIX_RUNNER_DRAIN_GRACE_SECONDS": str(DRAIN_GRACE_S),
}
MOVED = "moved from replica"


def ns(timestamp) -> int:
    return timestamp.seconds * 1_000_000_000 + timestamp.nanos


def attempt_started(e) -> bool:
    return e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_ATTEMPT_STARTED


def from_cli(e) -> bool:
    """An event the CLI produced (not the server's control or status events)."""
    return e.WhichOneof("payload") not in ("control", "status_changed", "cost_update", None)


async def follow_phase(
    stub, job_id: str, limit_s: float = 600.0
) -> tuple[list, object, list[tuple[float, int]]]:
    """Every event and the result of a phase, with the wall-clock time each event arrived: WatchPhase
    re-attached after the last sequence whenever its stream ends without the result (PHASE_MOVED,
    or a replica going away), as the repository's clients do."""
    events, arrivals, result = [], [], None
    deadline = time.monotonic() + limit_s
    while result is None:
        after = events[-1].sequence if events else 0
        call = stub.WatchPhase(
            pb.WatchPhaseRequest(job_id=job_id, phase_id="p1", after_sequence=after), timeout=600
        )
        try:
            async for response in call:
                now = time.time()
                for e in response.events:
                    if e.sequence > (events[-1].sequence if events else 0):
                        events.append(e)
                        arrivals.append((now, e.sequence))
                if response.HasField("result"):
                    result = response.result
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
    return events, result, arrivals


async def fresh_start(stub, job_id: str, workdir: Path) -> tuple[float, float]:
    """RunPhase sent → ATTEMPT_STARTED received, and → first CLI event received (s); the phase is
    then cancelled (its work is not what is measured)."""
    request = pb.RunPhaseRequest(job_id=job_id, phase_id="p1", prompt="go", working_dir=str(workdir),
                                 options=pb.PhaseOptions(allowed_tools=["Bash"]))  # fmt: skip
    sent = time.perf_counter()
    call = stub.RunPhase(request, timeout=120)
    started = first = None
    async for response in call:
        for e in response.events:
            if started is None and attempt_started(e):
                started = time.perf_counter() - sent
            if first is None and from_cli(e):
                first = time.perf_counter() - sent
        if first is not None:
            break
    await stub.CancelPhase(pb.CancelPhaseRequest(job_id=job_id, phase_id="p1"), timeout=30)
    async for _ in call:
        pass
    return started, first


def show(name: str, samples_s: list[float], base: list[float] | None = None) -> None:
    if not samples_s:
        print(f"  {name:<50} not measured")
        return
    ms = sorted(s * 1000 for s in samples_s)
    line = f"  {name:<50} p50 {statistics.median(ms):8.0f} ms   p99 {pct(ms, 99):8.0f} ms   (n={len(ms)})"
    if base:
        line += f"   x{statistics.median(ms) / statistics.median(s * 1000 for s in base):.2f} of its baseline"
    print(line)


async def run(args: argparse.Namespace, root: Path, database_url: str) -> int:
    script = root / "script.json"
    stepped_script(args.steps, args.step).save(script)
    shared = shared_workspace(root / "shared")  # a root every replica reaches: phases can move
    async with cluster(root, database_url, "--offline-script", str(script), env=ENV, fixed_ports=True,
                       workspace_root=shared) as replicas:  # fmt: skip
        # Baseline: fresh phases on live replicas, one at a time, before anything moves.
        for i in range(args.fresh):
            (shared / f"fresh-{i}").mkdir()
        fresh = [
            await fresh_start(replicas[i % 3].stub, f"fresh-{i}", shared / f"fresh-{i}")
            for i in range(args.fresh)
        ]
        # And as many at once, on two replicas, as a drain hands over (a third of the phases, to
        # the two others): the CLI starts then compete for the CPU as the adopters' do.
        burst = max(1, args.phases // 3)
        for i in range(burst):
            (shared / f"burst-{i}").mkdir()
        bursts = await asyncio.gather(*(
            fresh_start(replicas[1 + i % 2].stub, f"burst-{i}", shared / f"burst-{i}") for i in range(burst)
        ))  # fmt: skip

        channel = grpc.aio.insecure_channel(service_target(replicas), options=SERVICE_OPTIONS)
        await asyncio.wait_for(channel.channel_ready(), 30)
        stub = pb_grpc.RunnerServiceStub(channel)
        job_ids = [f"move-{i}" for i in range(args.phases)]
        for job_id in job_ids:
            (shared / job_id).mkdir()
        # Each phase started on a replica of its own, round the three, and watched through the Service.
        calls = [
            replicas[i % 3].stub.RunPhase(
                pb.RunPhaseRequest(
                    job_id=job_id,
                    phase_id="p1",
                    prompt="go",
                    working_dir=str(shared / job_id),
                    options=pb.PhaseOptions(allowed_tools=["Bash"]),
                ),
                timeout=600,
            )  # fmt: skip
            for i, job_id in enumerate(job_ids)
        ]
        first_events = [await call.read() for call in calls]  # every phase exists and runs
        assert all(r.events for r in first_events)

        async def drain_call(call) -> None:  # the callers keep reading (a move ends their stream)
            with contextlib.suppress(grpc.aio.AioRpcError):
                while await call.read() is not grpc.aio.EOF:
                    pass

        callers = [asyncio.create_task(drain_call(call)) for call in calls]
        watches = [asyncio.create_task(follow_phase(stub, job_id)) for job_id in job_ids]
        await asyncio.sleep(2 * args.step)  # every phase is in a tool call
        sigterm_at: dict[str, float] = {}
        for replica in replicas[: args.rounds]:
            sigterm_at[replica.replica_id] = time.time()
            await replica.stop(DRAIN_GRACE_S + 30)
            await replica.start_again()
            await asyncio.sleep(args.settle)  # as a rollout's minReadySeconds: the adopted phases start
        outcomes = await asyncio.gather(*watches)
        await asyncio.gather(*callers)
        await channel.close()

    stop_to_started, stop_to_cli, sigterm_to_cli = [], [], []
    moved_on = 0
    statuses: dict[str, int] = {}
    for events, result, arrivals in outcomes:
        name = res.PhaseStatus.Name(result.status)
        statuses[name] = statuses.get(name, 0) + 1
        by_sequence = {e.sequence: e for e in events}
        arrived = dict((seq, at) for at, seq in arrivals)
        attempts = list(result.attempts)
        for i, (before, after) in enumerate(zip(attempts, attempts[1:], strict=False)):
            if MOVED not in before.reason + after.reason:
                continue
            stop_ns = ns(before.end_time)
            started = by_sequence[after.first_sequence]
            # The adopter's CLI: its first event within this attempt (a phase can move on again
            # before its CLI started, when the adopter is drained next: then there is none).
            end = attempts[i + 2].first_sequence if i + 2 < len(attempts) else events[-1].sequence + 1
            first = next((e for e in events if after.first_sequence < e.sequence < end and from_cli(e)), None)
            if first is None:
                moved_on += 1
                continue
            if args.trace:  # where the time goes: the new attempt's first events, from the stop
                print(f"{result.job_id} attempt {after.number}: " + ", ".join(
                    f"{e.WhichOneof('payload')}"
                    + (f"/{ev.ControlEventKind.Name(e.control.kind)[21:]}" if e.HasField("control") else "")
                    + f" +{(ns(e.receive_time) - stop_ns) / 1e6:.0f} ms"
                    for e in events if after.first_sequence <= e.sequence < after.first_sequence + 8))  # fmt: skip
            stop_to_started.append((ns(started.receive_time) - stop_ns) / 1e9)
            stop_to_cli.append((ns(first.receive_time) - stop_ns) / 1e9)
            replica = getattr(before, "replica_id", "")
            if replica in sigterm_at:
                sigterm_to_cli.append(arrived[first.sequence] - sigterm_at[replica])

    print(f"phases: {args.phases} x {args.steps} Bash steps of {args.step} s; replicas drained and restarted: "
          f"{args.rounds}; hand-over wait {HANDOVER_WAIT_S} s; final statuses {statuses}")  # fmt: skip
    print(
        f"hand-overs measured: {len(stop_to_cli)} (and {moved_on} that moved on again before the adopter's CLI started)"
    )
    fresh_started = [s for s, _ in fresh]
    fresh_cli = [f for _, f in fresh]
    show("fresh phase: RunPhase -> ATTEMPT_STARTED", fresh_started)
    show("fresh phase: RunPhase -> first CLI event", fresh_cli)
    show(f"{len(bursts)} fresh phases at once: -> first CLI event", [f for _, f in bursts])
    show("hand-over: stop -> ATTEMPT_STARTED on adopter", stop_to_started, fresh_started)
    show("hand-over: stop -> first CLI event on adopter", stop_to_cli, fresh_cli)
    show("  (the same beside the fresh phases at once)", stop_to_cli, [f for _, f in bursts])
    show("hand-over: SIGTERM -> first CLI event (client)", sigterm_to_cli)
    if not stop_to_cli:
        print("no phase moved: a server without the hand-over lets a drain wait for its phases, then ends "
              "them INTERRUPTED (final statuses above)")  # fmt: skip
        return 1
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--phases", type=int, default=6)
    parser.add_argument(
        "--rounds", type=int, default=3, choices=(1, 2, 3), help="replicas drained, one at a time"
    )
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--step", type=float, default=2.0, help="seconds each Bash step sleeps")
    parser.add_argument("--fresh", type=int, default=6, help="fresh phases for the baseline")
    parser.add_argument("--keep", action="store_true", help="keep the run's directory (logs)")
    parser.add_argument(
        "--settle", type=float, default=10.0, help="seconds between a replica's restart and the next drain"
    )
    parser.add_argument(
        "--trace", action="store_true", help="print each hand-over's first events with their times"
    )
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-handover-"))
    try:
        postgres = PostgresCluster().start()
    except PostgresUnavailable as exc:
        print(f"bench_handover: {exc}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(run(args, root, postgres.create_database("handover")))
    finally:
        postgres.stop()
        postgres.remove()
        if args.keep:
            print(f"kept {root}")
        else:
            import shutil

            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
