"""Placement by free slots: what the decision and the relay cost (docs/scale-out.md, "Placement by free slots").

On a throwaway PostgreSQL cluster (tests/support/postgres.py; Unix socket, fsync off, so lower
bounds for a networked database):

1. ``replica_capacity`` (the one query a full replica runs per RunPhase it would queue) with
   ``--finished`` finished and ``--active`` active phases owned by three replicas (p50, p99);
2. two in-process servers, a fast fake CLI (answers at once), replica A full (``max_running_phases``
   1, its slot held by a phase that sleeps): ``--rounds`` RunPhase calls sent to B directly and
   sent to A (placed on B, relayed through A), each time to the first message and to the result.
   The difference is the placement's cost: the capacity query, a second hop, a relayed stream.

Usage: .venv/bin/python benchmarks/bench_placement.py [--finished 20000] [--active 100] [--rounds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench_cluster_admission import show
from support.postgres import PostgresCluster
from support.runner_server import start_runner

from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.store.postgres_store import PostgresStore

# Answers at once; a prompt containing "hold" sleeps instead (it keeps replica A's one slot taken).
FAST_CLI = """
    import sys, time
    lines = sys.stdin.readline() + sys.stdin.readline()
    if "hold" in lines:
        time.sleep(600)
    print('{"type":"system","subtype":"init","cwd":"/w","session_id":"s-1","tools":[],"model":"claude-sonnet-4-5",'
          '"permissionMode":"default","claude_code_version":"2.1.330","uuid":"u1"}', flush=True)
    print('{"type":"result","subtype":"success","is_error":false,"duration_ms":1,"num_turns":1,"result":"ok",'
          '"session_id":"s-1","total_cost_usd":0,"usage":{"input_tokens":0,"output_tokens":0},'
          '"permission_denials":[],"uuid":"u3"}', flush=True)
"""


def capacity_query(url: str, cluster: PostgresCluster, finished: int, active: int, rounds: int) -> None:
    stores = [PostgresStore(url, replica_id=f"bench-{i}", heartbeat=False) for i in range(3)]
    try:
        for s in stores:
            s.cluster.advertise(f"127.0.0.1:{50000 + len(s.replica_id)}")
            s.cluster.advertise_capacity(64)
        cluster.execute(url, "INSERT INTO jobs VALUES ('bench', 'p', 'RUNNING', 0, 0)")
        cluster.execute(
            url,
            "INSERT INTO phases (job_id, phase_id, ordinal, project_id, status, create_time_ns, owner_id) "
            "SELECT 'bench', 'f' || n, n, 'p', CASE WHEN n < %s THEN 'RUNNING' ELSE 'SUCCEEDED' END, 0, "
            "'bench-' || (n %% 3) FROM generate_series(0, %s) n",
            (active, active + finished - 1),
        )
        cluster.execute(url, "ANALYZE phases")
        samples = []
        for _ in range(rounds):
            t = time.perf_counter()
            rows = stores[0].cluster.replica_capacity()
            samples.append(time.perf_counter() - t)
        assert sum(r.active for r in rows) == active, rows
        print(f"1. replica_capacity, 3 replicas, {active} active and {finished} finished phases")
        show("query", samples)
        plan = cluster.execute(url, "EXPLAIN SELECT owner_id, count(*) FROM phases WHERE status = ANY(%s) "
                                    "AND owner_id IS NOT NULL GROUP BY owner_id",
                               (["PENDING", "RUNNING", "PAUSING", "PAUSED", "AWAITING_APPROVAL", "QUEUED"],))
        print("  plan of the count: " + " / ".join(line.strip() for (line,) in plan if "Scan" in line))
        cluster.execute(url, "DELETE FROM jobs WHERE job_id = 'bench'")
    finally:
        for s in stores:
            s.close()


async def relay(url: str, root: Path, rounds: int) -> None:
    claude = root / "fake-claude"
    claude.write_text(f"#!{sys.executable}\n" + textwrap.dedent(FAST_CLI))
    claude.chmod(0o755)
    config = {"claude_path": str(claude), "max_running_phases": 1, "database_url": url,
              "workspace_roots": [str(root)], "log_level": "warning"}
    async with contextlib.AsyncExitStack() as stack:
        pair = []
        for name in ("a", "b"):
            (root / name).mkdir()
            harness = start_runner(root / name, None, replica_id=f"replica-{name}", **config)
            pair.append(await anext(harness))
            stack.push_async_callback(harness.aclose)
        a, b = pair
        hold = a.stub.RunPhase(pb.RunPhaseRequest(job_id="hold", phase_id="p1", prompt="hold",
                                                  working_dir=str(a.workdir)), timeout=600)
        await anext(aiter(hold))  # A's one slot is taken

        async def one(stub, job_id: str) -> tuple[float, float]:
            t = time.perf_counter()
            first = None
            async for _ in stub.RunPhase(pb.RunPhaseRequest(job_id=job_id, phase_id="p1", prompt="hi",
                                                            working_dir=str(a.workdir)), timeout=60):
                first = first or time.perf_counter() - t
            return first, time.perf_counter() - t

        results: dict[str, list[tuple[float, float]]] = {"direct": [], "placed": []}
        for i in range(rounds):  # interleaved, so both see the same machine
            results["direct"].append(await one(b.stub, f"direct-{i}"))
            results["placed"].append(await one(a.stub, f"placed-{i}"))
        placed_on_b = [r for r in b.server.cluster.replica_capacity() if r.replica_id == "replica-b"]
        print(f"2. RunPhase of a fast fake CLI, {rounds} rounds; replica A full (max_running_phases 1)")
        for kind, rows in results.items():
            show(f"{kind}: first message", [f for f, _ in rows])
            show(f"{kind}: result", [r for _, r in rows])
        print(f"  (B's registry row after the runs: {placed_on_b[0]})")
        hold.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--finished", type=int, default=20000)
    parser.add_argument("--active", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    cluster = PostgresCluster().start()
    try:
        capacity_query(cluster.create_database(), cluster, args.finished, args.active, 200)
        with tempfile.TemporaryDirectory() as tmp:
            asyncio.run(relay(cluster.create_database(), Path(tmp), args.rounds))
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
