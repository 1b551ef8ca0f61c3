"""The read model's job-view cache (``JobViewCache``) on both stores: a page of unchanged jobs is
served from the cache in one query, and no write that changes a job's view (made through another
handle on the database: another server process, another replica) is ever missed by the next read.

Each write test reads first (so the view is cached), writes through a second store handle, then
compares what the cached read model answers with what an uncached one built from scratch answers.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from helix.runner.v1 import runner_service_pb2
from helix_runner.api.resource_mapping import get_job_response, job_to_proto, list_jobs_response
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.pricing import PricingSource
from helix_runner.phases.queries import PhaseQueries
from helix_runner.store.factory import open_storage
from helix_runner.store.protocol import EventRow, ModelCostRow, PhaseRow

S = PhaseStatus


@pytest.fixture
def stores(database_url):
    """Two handles on one database: the reader's, and a writer's (another process or replica)."""
    reader, writer = open_storage(database_url).store, open_storage(database_url).store
    yield reader, writer
    reader.close()
    writer.close()


def no_live(job_id: str, phase_id: str):
    return None


def add_job(store, job: str, phases: int = 1, t: int = 1, project: str = "p") -> None:
    store.get_or_create_job(job, project, t)
    for i in range(phases):
        store.insert_phase(
            PhaseRow(job_id=job, phase_id=f"p{i}", ordinal=0, project_id=project, status=S.RUNNING, create_time_ns=t)
        )
        store.update_phase(job, f"p{i}", t, status=S.SUCCEEDED, result_pb=b"\x08\x06", computed_usd=0.5)
        store.replace_model_costs(job, f"p{i}", project, [cost("m1")])


def cost(model: str, computed: float = 0.25) -> ModelCostRow:
    return ModelCostRow(model, 10, 20, 30, 40, 50, 1, 0.5, computed, PricingSource.PRICE_TABLE)


def fresh(store, job: str):
    """The view as an uncached read model builds it now."""
    return PhaseQueries(store, no_live, view_cache_jobs=0).job(job)


def same(a, b) -> bool:
    """Two views show the same thing (what the API would encode)."""
    return job_to_proto(a) == job_to_proto(b)


def test_a_page_of_unchanged_jobs_is_served_from_the_cache(stores):
    reader, _ = stores
    for i in range(5):
        add_job(reader, f"j{i}", phases=2, t=10 + i)
    queries = PhaseQueries(reader, no_live)
    first = queries.list_jobs(None, [], 10, None)
    assert queries.view_cache.hits == 0 and len(queries.view_cache) == 5
    again = queries.list_jobs(None, [], 10, None)
    assert queries.view_cache.hits == 5
    assert all(a is b for a, b in zip(first.jobs, again.jobs, strict=True))  # the same objects
    assert queries.job("j3") is first.jobs[1]
    # Uncached, the same answer.
    uncached = PhaseQueries(reader, no_live, view_cache_jobs=0)
    assert uncached.view_cache is None
    assert [job_to_proto(j) for j in uncached.list_jobs(None, [], 10, None).jobs] == [
        job_to_proto(j) for j in again.jobs
    ]


def test_a_cached_page_takes_one_query_on_sqlite(tmp_path):
    store = open_storage(f"sqlite://{tmp_path / 'db.sqlite3'}").store
    try:
        for i in range(20):
            add_job(store, f"j{i:02}", t=i)
        queries = PhaseQueries(store, no_live)
        statements: list[str] = []
        store._db.set_trace_callback(statements.append)
        queries.list_jobs(None, [], 20, None)
        assert len(statements) == 3  # jobs, their phases, their costs
        statements.clear()
        queries.list_jobs(None, [], 20, None)
        assert len(statements) == 1  # the jobs, with their versions
        statements.clear()
        store.append_events([("j05", "p0", [EventRow(1, 1, "k", b"e")])])
        assert not any("UPDATE jobs" in s for s in statements)  # nothing written to the job row
        statements.clear()
        page = queries.list_jobs(None, [], 20, None)
        assert len(statements) == 3 and next(j for j in page.jobs if j.job_id == "j05").phases[0].last_sequence == 1
        assert queries.view_cache.hits == 20 + 19
    finally:
        store.close()


def _insert_phase(w):
    w.insert_phase(PhaseRow(job_id="j", phase_id="new", ordinal=0, project_id="p", status=S.QUEUED, create_time_ns=9))


WRITES = {
    "a new phase": _insert_phase,
    "the latest phase's status": lambda w: w.update_phase("j", "p1", 9, status=S.FAILED, status_reason="boom"),
    "an earlier phase's status": lambda w: w.update_phase("j", "p0", 9, status=S.INTERRUPTED),
    "a phase's result, cost and statistics": lambda w: w.update_phase(
        "j", "p0", 9, result_pb=b"\x08\x07", cost_pb=b"\x09" + bytes(8), tool_stats_pb=b"", computed_usd=2.0
    ),
    "a phase's events (last sequence)": lambda w: w.append_events([("j", "p1", [EventRow(7, 7, "k", b"e")])]),
    "a phase's per-model costs": lambda w: w.replace_model_costs("j", "p1", "p", [cost("m1", 9.0), cost("m2")]),
    "a phase's per-model costs removed": lambda w: w.replace_model_costs("j", "p0", "p", []),
}


@pytest.mark.parametrize("write", list(WRITES), ids=list(WRITES))
def test_a_write_through_another_handle_is_seen_by_the_next_read(stores, write):
    reader, writer = stores
    add_job(writer, "j", phases=2)  # the writer owns the phases (on PostgreSQL: runs them)
    add_job(writer, "other", t=2)
    queries = PhaseQueries(reader, no_live)
    before = queries.job("j")
    page_before = queries.list_jobs("p", [], 10, None)
    other = page_before.jobs[0]
    assert queries.job("j") is before  # cached

    WRITES[write](writer)

    after, expected = queries.job("j"), fresh(reader, "j")
    assert not same(after, before) and same(after, expected)
    listed = {j.job_id: j for j in queries.list_jobs("p", [], 10, None).jobs}
    assert same(listed["j"], expected)
    assert listed["other"] is other  # the untouched job stays cached


def test_a_job_deleted_and_created_again_under_its_id_is_not_served_from_the_old_view(stores):
    reader, writer = stores
    add_job(writer, "j", phases=1, t=1)
    queries = PhaseQueries(reader, no_live)
    old = queries.job("j")
    writer.delete_jobs(["j"])
    add_job(writer, "j", phases=1, t=5, project="q")  # as many writes: the same view_version
    assert writer.get_job("j").view_version == reader.get_job("j").view_version
    new = queries.job("j")
    assert new.project_id == "q" and new.create_time_ns == 5 and not same(new, old)


def live_table(running: set[tuple[str, str]]):
    """A ``live`` lookup: the phases in ``running`` run here (their snapshot: a stub object)."""
    done = asyncio.Event()

    def live(job_id, phase_id):
        if (job_id, phase_id) not in running:
            return None
        return SimpleNamespace(done=done, run=SimpleNamespace(snapshot=lambda: SimpleNamespace(last_sequence=99)))

    return live


def test_a_job_with_a_phase_running_here_is_never_served_from_the_cache(stores):
    reader, _ = stores
    add_job(reader, "j", phases=1)
    running: set[tuple[str, str]] = set()
    queries = PhaseQueries(reader, live_table(running))
    cached = queries.job("j")
    assert queries.job("j") is cached and cached.phases[0].live is None

    running.add(("j", "p0"))  # (e.g. a phase taken over, before its first write)
    live = queries.job("j")
    assert live is not cached and live.phases[0].live is not None and live.phases[0].last_sequence == 99
    assert queries.job("j") is not live  # built again on every read while it runs here

    running.clear()
    assert queries.job("j") is cached  # the stored view still holds: no write since


def test_the_cache_keeps_at_most_its_capacity_least_recently_used_out(stores):
    reader, _ = stores
    for i in range(4):
        add_job(reader, f"j{i}", t=i)
    queries = PhaseQueries(reader, no_live, view_cache_jobs=2)
    first = queries.job("j0")
    queries.job("j1")
    assert queries.job("j0") is first  # j0 is now the most recent
    queries.job("j2")  # evicts j1
    assert len(queries.view_cache) == 2
    assert queries.job("j0") is first
    hits = queries.view_cache.hits
    queries.job("j1")
    assert queries.view_cache.hits == hits  # was evicted: a miss


def test_responses_join_each_jobs_encoding_made_once(stores):
    reader, _ = stores
    for i in range(3):
        add_job(reader, f"j{i}", phases=2, t=i)
    queries = PhaseQueries(reader, no_live)
    page = queries.list_jobs(None, [], 10, None)
    data = list_jobs_response(page.jobs, "tok", full_prompts=True)
    expected = runner_service_pb2.ListJobsResponse(
        jobs=[job_to_proto(j) for j in page.jobs], next_page_token="tok"
    )
    assert runner_service_pb2.ListJobsResponse.FromString(data) == expected
    assert runner_service_pb2.ListJobsResponse.FromString(list_jobs_response(page.jobs, "")).next_page_token == ""
    encoded = page.jobs[0].memo["job_pb"]
    again = queries.list_jobs(None, [], 10, None)
    list_jobs_response(again.jobs, "", full_prompts=True)
    assert again.jobs[0].memo["job_pb"] is encoded  # encoded once per cached view
    job = runner_service_pb2.GetJobResponse.FromString(get_job_response(queries.job("j1")))
    assert job == runner_service_pb2.GetJobResponse(job=job_to_proto(page.jobs[1]))


def test_the_cache_holds_a_bounded_number_of_bytes_and_no_huge_job(stores):
    from helix_runner.phases.queries import JobViewCache

    reader, _ = stores
    for i in range(20):
        add_job(reader, f"j{i:02}", t=i)
    add_job(reader, "big", t=99)
    reader.update_phase("big", "p0", 99, status_reason="x" * 100_000)  # far larger than the rest
    queries = PhaseQueries(reader, no_live)
    queries.job("j00")
    one = queries.view_cache.bytes  # every small job holds as much
    queries.view_cache = cache = JobViewCache(capacity=100, max_bytes=17 * one)
    for i in range(20):
        queries.job(f"j{i:02}")
    assert len(cache) == 17 and cache.bytes == 17 * one  # the three least recently used went
    assert queries.job("j19") is queries.job("j19") and cache.misses == 20
    queries.job("j00")
    assert cache.misses == 21  # had gone
    big = queries.job("big")
    assert big.phases[0].status_reason == "x" * 100_000
    assert queries.job("big") is not big and len(cache) == 17  # too big to keep: built on each read
