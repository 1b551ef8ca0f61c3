"""Replica capacity for placement by free slots (store/postgres_cluster.py, migration 0006).

Each replica publishes its local limit; its load is the active phases it owns. The choice among
them is tested in tests/phases/test_placement.py, end to end in tests/api/test_placement_postgres.py.
"""

from __future__ import annotations

import pytest

from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.store.postgres_store import PostgresStore
from helix_runner.store.protocol import PhaseRow


@pytest.fixture
def stores(postgres_url):
    opened = [PostgresStore(postgres_url, replica_id=f"r-{n}", heartbeat=False) for n in "abc"]
    yield opened
    for store in opened:
        store.close()


def test_capacity_is_the_published_limit_and_the_active_phases_each_replica_owns(
    stores, postgres_cluster, postgres_url
):
    a, b, c = stores
    a.cluster.advertise("a:1")
    a.cluster.advertise_capacity(4)
    b.cluster.advertise("b:1")
    b.cluster.advertise_capacity(2)  # c registered no address: never listed
    for store, n in ((a, 3), (b, 1)):
        store.get_or_create_job(f"job-{store.replica_id}", "p", 1)
        for i in range(n):
            store.insert_phase(PhaseRow(job_id=f"job-{store.replica_id}", phase_id=f"p{i}", ordinal=i,
                                        project_id="p", status=PhaseStatus.RUNNING, create_time_ns=1))
    a.update_phase("job-r-a", "p0", 2, status=PhaseStatus.SUCCEEDED, end_time_ns=2)  # final: not counted
    a.update_phase("job-r-a", "p1", 2, status=PhaseStatus.QUEUED)  # waiting: counted

    def rooms():
        return [(r.replica_id, r.address, r.max_running, r.active, r.live, r.free) for r in c.cluster.replica_capacity()]

    assert rooms() == [("r-a", "a:1", 4, 2, True, 2), ("r-b", "b:1", 2, 1, True, 1)]

    postgres_cluster.execute(postgres_url, "UPDATE replicas SET lease_expires_at = now() WHERE replica_id = 'r-b'")
    a.cluster.advertise_capacity(0)  # draining: takes no placed phases
    assert rooms() == [("r-a", "a:1", 0, 2, True, -2), ("r-b", "b:1", 2, 1, False, 1)]
