"""Replicas on one PostgreSQL database: leases, fencing numbers, the dead-replica sweep, migrations.

Two store handles on one database are two replicas. A replica "paused" past its lease is played
by moving its lease into the past in the database (whose clock is the only one leases use), and
"revived" by moving it back: no test waits for a lease to run out.
"""

from __future__ import annotations

import threading

import pytest
from support.old_databases import postgres_version_1

from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.tool_tracker import ToolCallStatus
from helix_runner.store.postgres_cluster import FencedError
from helix_runner.store.postgres_migrations import Migration, known_migrations, migrate
from helix_runner.store.postgres_store import PostgresStore
from helix_runner.store.protocol import EventRow, PhaseRow, StoreError, ToolCallRow

S = PhaseStatus
T = ToolCallStatus


def phase(job: str, pid: str, status: PhaseStatus = S.RUNNING) -> PhaseRow:
    return PhaseRow(job_id=job, phase_id=pid, ordinal=0, project_id="p", status=status, create_time_ns=1)


def ev(seq: int, body: bytes = b"") -> EventRow:
    return EventRow(seq, seq, "k", body or f"e{seq}".encode())



def interrupt(row: PhaseRow, seq: int):
    return EventRow(seq, 99, "status", b"interrupted:" + row.phase_id.encode()), {
        "status_reason": "its replica stopped renewing its lease", "end_time_ns": 99, "result_pb": b"result"}


def test_a_paused_replica_taken_over_can_never_write_its_phase_again(replicas, postgres_cluster, postgres_url):
    a, b = replicas(2)
    a.get_or_create_job("j", "p", 1)
    a.insert_phase(phase("j", "x"))
    a.append_events([("j", "x", [ev(1), ev(2)])])
    a.upsert_tool_calls("j", "x", [ToolCallRow("t", "Bash", T.RUNNING, 2, b"t")])

    postgres_cluster.set_lease(postgres_url, a.replica_id, -1)  # A is paused past its lease
    with pytest.raises(FencedError):  # refused already before anyone took over
        a.append_events([("j", "x", [ev(3, b"stale")])])
    swept = b.cluster.sweep_expired_owners(interrupt)
    assert [(r.phase_id, r.status, r.last_sequence) for r in swept] == [("x", S.RUNNING, 2)]

    postgres_cluster.set_lease(postgres_url, a.replica_id, 60)  # A revives, its lease live again
    with pytest.raises(FencedError) as refused:
        a.append_events([("j", "x", [ev(4, b"stale")])])
    assert refused.value.refused == [("j", "x")]
    for write in (lambda: a.update_phase("j", "x", 5, status=S.SUCCEEDED),
                  lambda: a.upsert_tool_calls("j", "x", [ToolCallRow("t", "Bash", T.SUCCEEDED, 2, b"late", duration_ns=1)]),
                  lambda: a.replace_model_costs("j", "x", "p", []),
                  lambda: a.mark_tool_calls_unfinished("j", "x")):
        with pytest.raises(FencedError):
            write()

    # History is A's events, then the takeover's terminal event, and nothing of A's after it.
    assert [(e.sequence, e.body) for e in b.read_events("j", "x", 0, 10)] == [
        (1, b"e1"), (2, b"e2"), (3, b"interrupted:x")]
    row = b.get_phase("j", "x")
    assert (row.status, row.status_reason, row.end_time_ns, row.result_pb) == (
        S.INTERRUPTED, "its replica stopped renewing its lease", 99, b"result")
    assert b.get_job("j").status is S.INTERRUPTED
    assert [(c.status, c.body) for c in b.list_tool_calls("j", "x", None, [], 10)] == [(T.UNFINISHED, b"t")]
    assert b.cluster.phase_owner("j", "x").replica_id is None


def test_a_restart_under_a_stable_id_fences_out_the_old_process(postgres_url):
    """Same replica id, live lease: only the fencing number tells the zombie from its successor."""
    old = PostgresStore(postgres_url, replica_id="helix-0", heartbeat=False)
    new = None
    try:
        old.get_or_create_job("j", "p", 1)
        old.insert_phase(phase("j", "x"))
        old.insert_phase(phase("j", "done", status=S.SUCCEEDED))
        old.append_events([("j", "x", [ev(1)])])
        new = PostgresStore(postgres_url, replica_id="helix-0", heartbeat=False)  # the restarted pod
        assert new.replica_id == old.replica_id and set(new.replica.adopted()) == {("j", "x")}
        with pytest.raises(FencedError):
            old.append_events([("j", "x", [ev(2, b"zombie")])])
        with pytest.raises(FencedError):
            old.update_phase("j", "x", 2, status=S.SUCCEEDED)
        # The successor records the adopted phase INTERRUPTED at once, with no lease to wait for.
        assert [r.phase_id for r in new.cluster.sweep_expired_owners(interrupt)] == ["x"]
        assert new.cluster.sweep_expired_owners(interrupt) == []
        assert [e.body for e in new.read_events("j", "x", 0, 10)] == [b"e1", b"interrupted:x"]
        assert new.get_phase("j", "x").status is S.INTERRUPTED and new.get_phase("j", "done").status is S.SUCCEEDED
    finally:
        old.close()
        if new is not None:
            new.close()


def test_a_live_owners_phase_is_written_by_no_other_replica(replicas):
    a, b = replicas(2)
    a.get_or_create_job("j", "p", 1)
    a.insert_phase(phase("j", "x"))
    with pytest.raises(FencedError):
        b.append_events([("j", "x", [ev(1)])])
    with pytest.raises(FencedError):
        b.update_phase("j", "x", 2, status=S.INTERRUPTED)
    assert b.cluster.sweep_expired_owners(interrupt) == []  # a live owner is not swept
    a.append_events([("j", "x", [ev(1)])])
    assert [e.sequence for e in b.read_events("j", "x", 0, 10)] == [1]
    owner = b.cluster.phase_owner("j", "x")
    assert (owner.replica_id, owner.live) == (a.replica_id, True)


def test_group_commit_keeps_owned_phases_and_names_refused_ones(replicas, postgres_cluster, postgres_url):
    a, b = replicas(2)
    a.get_or_create_job("j", "p", 1)
    a.insert_phase(phase("j", "mine"))
    b.insert_phase(phase("j", "theirs"))
    with pytest.raises(FencedError) as refused:
        a.append_events([("j", "mine", [ev(1), ev(2)]), ("j", "theirs", [ev(1)]), ("j", "ghost", [ev(1)])])
    assert sorted(refused.value.refused) == [("j", "ghost"), ("j", "theirs")]
    assert [e.sequence for e in a.read_events("j", "mine", 0, 10)] == [1, 2]
    assert a.read_events("j", "theirs", 0, 10) == []


def test_sweep_interrupts_only_expired_owners_once(replicas, postgres_cluster, postgres_url):
    a, b, c = replicas(3)
    a.get_or_create_job("j", "p", 1)
    a.insert_phase(phase("j", "dead-running"))
    a.insert_phase(phase("j", "dead-paused", status=S.PAUSED))
    a.insert_phase(phase("j", "dead-done", status=S.RUNNING))
    a.update_phase("j", "dead-done", 2, status=S.SUCCEEDED)
    b.insert_phase(phase("j", "alive"))
    postgres_cluster.set_lease(postgres_url, a.replica_id, -1)
    swept = c.cluster.sweep_expired_owners(interrupt)
    assert sorted(r.phase_id for r in swept) == ["dead-paused", "dead-running"]
    assert c.cluster.sweep_expired_owners(interrupt) == [] and b.cluster.sweep_expired_owners(interrupt) == []
    status = {p.phase_id: p.status for p in c.phases_of_jobs(["j"])}
    assert status == {"dead-running": S.INTERRUPTED, "dead-paused": S.INTERRUPTED, "dead-done": S.SUCCEEDED,
                      "alive": S.RUNNING}
    assert c.get_job("j").status is S.RUNNING  # "alive" is the job's latest phase
    assert [r.replica_id for r in c.cluster.live_replicas()] == sorted([b.replica_id, c.replica_id])


def test_concurrent_sweeps_split_the_work(replicas, postgres_cluster, postgres_url):
    a, *sweepers = replicas(4)
    a.get_or_create_job("j", "p", 1)
    for i in range(20):
        a.insert_phase(phase("j", f"x{i}"))
        a.append_events([("j", f"x{i}", [ev(1)])])
    postgres_cluster.set_lease(postgres_url, a.replica_id, -1)
    results: list[list[PhaseRow]] = [[] for _ in sweepers]

    def sweep(i: int) -> None:
        while rows := sweepers[i].cluster.sweep_expired_owners(interrupt, limit=3):
            results[i].extend(rows)

    threads = [threading.Thread(target=sweep, args=(i,)) for i in range(len(sweepers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    swept = [r.phase_id for rows in results for r in rows]
    assert sorted(swept) == sorted(f"x{i}" for i in range(20))  # each exactly once
    for i in range(20):
        assert [e.sequence for e in a.read_events("j", f"x{i}", 0, 10)] == [1, 2]


def test_a_lapsed_lease_is_not_renewed_and_the_replica_registers_again(replicas, postgres_cluster, postgres_url):
    (a,) = replicas(1)
    before = a.replica_id
    assert a.cluster.renew_lease()
    postgres_cluster.set_lease(postgres_url, before, -1)
    assert not a.cluster.renew_lease()
    a.get_or_create_job("j", "p", 1)
    a.insert_phase(phase("j", "new"))  # taking a phase needs a live lease: a new registration
    assert a.replica_id != before
    a.append_events([("j", "new", [ev(1)])])
    assert a.cluster.phase_owner("j", "new").replica_id == a.replica_id


def test_heartbeat_thread_renews_the_lease(postgres_url, postgres_cluster):
    store = PostgresStore(postgres_url, lease_seconds=0.6)  # renews every 0.2 s
    try:
        def expiry():
            return postgres_cluster.execute(postgres_url, "SELECT lease_expires_at FROM replicas "
                                            "WHERE replica_id = %s", (store.replica_id,))[0][0]
        first = expiry()
        renewed = threading.Event()
        for _ in range(100):  # bounded: at most 10 s
            if expiry() > first:
                renewed.set()
                break
            renewed.wait(0.1)
        assert renewed.is_set()
    finally:
        store.close()
    assert postgres_cluster.execute(postgres_url, "SELECT lease_expires_at <= now() FROM replicas "
                                    "WHERE replica_id = %s", (store.replica_id,)) == [(True,)]  # close ends it


def test_migrations_apply_once_and_refuse_a_newer_schema(postgres_url, postgres_cluster):
    import psycopg

    opened = [PostgresStore(postgres_url, heartbeat=False) for _ in range(2)]  # the second finds it applied
    for s in opened:
        s.close()
    versions = postgres_cluster.execute(postgres_url, "SELECT version FROM schema_migrations ORDER BY version")
    assert versions == [(m.version,) for m in known_migrations()]
    extra = [*known_migrations(), Migration(known_migrations()[-1].version + 1, "later", "CREATE TABLE later (x int)")]
    with psycopg.connect(postgres_url) as conn:
        assert migrate(conn, extra) == extra[-1].version
    with pytest.raises(StoreError, match="newer than this server knows"):
        PostgresStore(postgres_url, heartbeat=False)


def test_an_unreachable_database_is_a_one_line_store_error(tmp_path):
    url = f"postgresql://u:hunter2@/db?host={tmp_path}"
    with pytest.raises(StoreError) as caught:
        PostgresStore(url, connect_timeout=1)
    assert "hunter2" not in str(caught.value) and "\n" not in str(caught.value)


def test_a_version_1_database_is_migrated_and_keeps_its_data(postgres_url, postgres_cluster):
    store = PostgresStore(postgres_version_1(postgres_url), heartbeat=False)  # its durations: the contract suite
    try:
        assert (store.schema_version, store.migrated_from) == (known_migrations()[-1].version, 1)
        row = store.get_phase("j", "a")
        assert (row.status, row.result_pb) == (S.SUCCEEDED, b"\x0a\x01")
        columns = {r[0] for r in postgres_cluster.execute(
            postgres_url, "SELECT column_name FROM information_schema.columns WHERE table_name = 'phases'")}
        assert "options_json" not in columns
    finally:
        store.close()
    again = PostgresStore(postgres_url, heartbeat=False)
    try:
        assert again.migrated_from is None  # reopening a current database migrates nothing
    finally:
        again.close()
