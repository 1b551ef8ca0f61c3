"""The fair order is one rule: one replica's local queue (phases/admission.py) and the cluster ledger
on PostgreSQL (store/postgres_admission.py) start the same phases in the same order.

Random workloads (projects arriving, retries, passes, phases ending) are run through both: the local
``AdmissionQueue`` with its limits, and a single replica's ledger with the same limits as cluster
limits, offered every queued entry. After every pass both must have granted the same entries, in the
same order. Seeded, so a failure names a workload that reproduces it. Before the rule was written
once, 7 of these 40 workloads found the two apart (an idle project's turn, forgotten locally only).
"""

from __future__ import annotations

import random

import pytest

from helix_runner.phases.admission import AdmissionLimits, AdmissionQueue
from helix_runner.store.cluster import AdmissionCandidate, ClusterLimits

WORKLOADS = 40
FAST_WORKLOADS = 3  # in the fast tier (about a second each: a fresh database); the rest are slow
STEPS = 40


def _workload(seed: int):
    rng = random.Random(seed)
    max_running = rng.randint(1, 4)
    per_project = rng.choice([0, 0, 1, 2])
    projects = [f"p{i}" for i in range(rng.randint(1, 4))]
    steps = []
    for _ in range(STEPS):
        roll = rng.random()
        if roll < 0.5:
            steps.append(("submit", rng.choice(projects), rng.random() < 0.2))
        elif roll < 0.75:
            steps.append(("pass",))
        else:
            steps.append(("end", rng.random()))
    steps.append(("pass",))
    return max_running, per_project, steps


@pytest.mark.parametrize("seed", [seed if seed < FAST_WORKLOADS else pytest.param(seed, marks=pytest.mark.slow)
                                  for seed in range(WORKLOADS)])
def test_the_local_queue_and_the_cluster_ledger_start_the_same_phases_in_the_same_order(replicas, seed):
    max_running, per_project, steps = _workload(seed)
    (store,) = replicas(1)
    ledger = store.cluster.admission_ledger()
    limits = ClusterLimits(max_running=max_running, max_running_per_project=per_project)
    queue = AdmissionQueue(AdmissionLimits(max_running=max_running, max_running_per_project=per_project,
                                           max_starting=1000, max_queued=1000), clock=lambda: 0.0)
    queued: dict[str, str] = {}  # phase → project, in arrival order
    running: list[str] = []
    for n, step in enumerate(steps):
        if step[0] == "submit":
            _, project, retry = step
            phase = f"ph{n}"
            queue.submit(phase, project, "cred", attempt=2 if retry else 1, retry=retry)
            ledger.enqueue("j", phase, project, "cred", retry=retry, limits=limits)
            queued[phase] = project
        elif step[0] == "pass":
            local = [t.key for t in queue.pump()]
            for t in local:
                queue.started(queue.get(t))
            offered = [AdmissionCandidate("j", phase, project) for phase, project in queued.items()]
            cluster = [phase for _, phase in ledger.admit(offered, local_room=1000, local_project_room=None,
                                                          limits=limits).granted]
            assert local == cluster, f"workload {seed}, step {n}: local {local}, cluster {cluster}"
            for phase in local:
                del queued[phase]
                running.append(phase)
        elif running:
            phase = running.pop(int(step[1] * len(running)))
            queue.release(queue.get(phase))
            assert ledger.release("j", phase)
