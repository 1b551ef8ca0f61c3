"""Cluster admission benchmark: the cost of the database ledger and the hand-off between replicas.

What it measures (docs/scale-out.md, "Cluster admission"), on a throwaway PostgreSQL cluster
(tests/support/postgres.py; Unix socket, fsync off, so these are lower bounds for a networked
database):

1. ``enqueue`` / ``admit`` / ``release`` latency of ``PostgresAdmissionLedger`` (p50, p99) with
   ``--queued`` entries waiting across two replicas;
2. hand-off: replica A releases its slot (cluster limit 1), how long until replica B's waiting
   ``acquire`` returns — woken by NOTIFY, and with no listener (the bounded poll alone);
3. ``--phases`` acquire/release cycles spread over two replicas with a cluster limit of
   ``--limit``: admissions per second, and the most running at once (never above the limit).

Usage: .venv/bin/python benchmarks/bench_cluster_admission.py [--queued 100] [--rounds 200]
           [--phases 200] [--limit 8]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench_run_phase import pct
from support.postgres import PostgresCluster

from helix_runner.phases.admission import AdmissionLimits, AdmissionQueue, AsyncAdmission
from helix_runner.phases.cluster_admission import LedgerGrant
from helix_runner.store.cluster import AdmissionCandidate, ClusterLimits
from helix_runner.store.postgres_notify import EventListener
from helix_runner.store.postgres_store import PostgresStore

LOCAL = AdmissionLimits(max_running=64, max_starting=4)  # the defaults' start limit


def show(name: str, samples_s: list[float]) -> None:
    """One line: p50 and p99 of the samples (seconds) in ms (bench_placement prints with it too)."""
    ms = sorted(s * 1000 for s in samples_s)
    print(f"  {name:<40} p50 {statistics.median(ms):7.2f} ms   p99 {pct(ms, 99):7.2f} ms   (n={len(ms)})")


def ledger_latency(a: PostgresStore, b: PostgresStore, queued: int, rounds: int) -> None:
    limits = ClusterLimits(max_running=1)
    for i in range(queued):  # a standing queue on both replicas
        (a if i % 2 else b).cluster.admission_ledger().enqueue("q", f"w{i}", f"p{i % 5}", "", retry=False, limits=limits)
    enq, adm, rel = [], [], []
    for i in range(rounds):
        t = time.perf_counter()
        a.cluster.admission_ledger().enqueue("r", f"x{i}", "px", "", retry=False, limits=limits)
        enq.append(time.perf_counter() - t)
        t = time.perf_counter()
        a.cluster.admission_ledger().admit([AdmissionCandidate("r", f"x{i}", "px")], local_room=8, local_project_room=None,
                                 limits=limits)
        adm.append(time.perf_counter() - t)
        t = time.perf_counter()
        a.cluster.admission_ledger().release("r", f"x{i}")
        rel.append(time.perf_counter() - t)
    print(f"1. ledger calls, {queued} entries waiting across 2 replicas")
    show("enqueue", enq)
    show("admit (one candidate)", adm)
    show("release (+ NOTIFY)", rel)
    a.cluster.admission_ledger().clear()
    b.cluster.admission_ledger().clear()


async def hand_off(a: PostgresStore, b: PostgresStore, url: str, rounds: int, notify: bool) -> list[float]:
    limits = ClusterLimits(max_running=1)
    qa, qb = AsyncAdmission(AdmissionQueue(LOCAL, grant=LedgerGrant(a.cluster.admission_ledger(), limits))), \
        AsyncAdmission(AdmissionQueue(LOCAL, grant=LedgerGrant(b.cluster.admission_ledger(), limits)))
    listener = await EventListener(url).start() if notify else None
    if listener is not None:
        listener.on_admission_change(qb.wake)
    samples = []
    try:
        for i in range(rounds):
            held = await asyncio.wait_for(qa.acquire(("h", f"a{i}"), "p"), 10)
            waiting = asyncio.create_task(qb.acquire(("h", f"b{i}"), "p"))
            await asyncio.sleep(0.02)
            t = time.perf_counter()
            qa.release(held)
            ticket = await asyncio.wait_for(waiting, 30)
            samples.append(time.perf_counter() - t)
            qb.release(ticket)
    finally:
        if listener is not None:
            await listener.stop()
        qa.close()
        qb.close()
    return samples


async def spread(a: PostgresStore, b: PostgresStore, url: str, phases: int, limit: int) -> None:
    limits = ClusterLimits(max_running=limit)
    queues = [AsyncAdmission(AdmissionQueue(LOCAL, grant=LedgerGrant(s.cluster.admission_ledger(), limits))) for s in (a, b)]
    listener = await EventListener(url).start()
    for q in queues:
        listener.on_admission_change(q.wake)
    running, peak = 0, 0

    async def one(i: int) -> None:
        nonlocal running, peak
        q = queues[i % 2]
        ticket = await asyncio.wait_for(q.acquire(("s", f"p{i}"), f"proj{i % 3}"), 120)
        q.started(ticket)  # the CLI is up (its first output): the start slot is free again
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.005)  # "runs"
        running -= 1
        q.release(ticket)

    t = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(phases)))
    took = time.perf_counter() - t
    await listener.stop()
    for q in queues:
        q.close()
    print(f"3. {phases} phases over 2 replicas, cluster limit {limit}: {phases / took:.0f} admissions/s, "
          f"at most {peak} running at once")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queued", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--handoffs", type=int, default=30)
    parser.add_argument("--phases", type=int, default=200)
    parser.add_argument("--limit", type=int, default=8)
    args = parser.parse_args()
    cluster = PostgresCluster().start()
    try:
        url = cluster.create_database("bench")
        a, b = PostgresStore(url), PostgresStore(url)
        try:
            ledger_latency(a, b, args.queued, args.rounds)
            print("2. hand-off: A releases the cluster's one slot, B's waiting acquire returns")
            show("woken by NOTIFY", await hand_off(a, b, url, args.handoffs, notify=True))
            show("no listener (bounded poll)", await hand_off(a, b, url, min(args.handoffs, 8), notify=False))
            await spread(a, b, url, args.phases, args.limit)
        finally:
            a.close()
            b.close()
    finally:
        cluster.stop()
        cluster.remove()


if __name__ == "__main__":
    asyncio.run(main())
