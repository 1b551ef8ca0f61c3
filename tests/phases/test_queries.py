"""The read model against a real SQLite store: constant queries per page, statistics by the
tracker's rules computed in SQL, cost totals by scope, live figures from a running phase's snapshot."""

from __future__ import annotations

import asyncio
import itertools
import math
import random
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.properties import examples

from helix_runner.domain.cost_ledger import ModelCost, PhaseCostSnapshot
from helix_runner.domain.events import TokenUsage
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.pricing import PricingSource
from helix_runner.domain.tool_tracker import ToolCall, ToolCallStatus, ToolStats, summarize_calls
from helix_runner.errors import ErrorKind, RunnerError
from helix_runner.phases.queries import RECENT_EVENTS, PhaseQueries
from helix_runner.phases.views import ContextUsage, RunSnapshot
from helix_runner.store.protocol import EventRow, ModelCostRow, PhaseRow, ToolCallRow
from helix_runner.store.sqlite_store import SqliteStore

S = ToolCallStatus




def add_phase(
    store,
    job: str,
    phase: str,
    *,
    project: str = "proj",
    t: int = 1,
    status=PhaseStatus.SUCCEEDED,
    reported: float | None = None,
    computed: float = 0.0,
    computed_only: bool = False,
) -> None:
    store.get_or_create_job(job, project, t)
    store.insert_phase(
        PhaseRow(
            job_id=job,
            phase_id=phase,
            ordinal=0,
            project_id=project,
            status=PhaseStatus.RUNNING,
            create_time_ns=t,
        )
    )
    store.update_phase(
        job,
        phase,
        t,
        status=status,
        reported_usd=reported,
        computed_usd=computed,
        computed_only=int(computed_only),
        result_pb=b"\x08\x01",
        cost_pb=b"",
        tool_stats_pb=None,
    )


def cost_row(
    model: str,
    source=PricingSource.PRICE_TABLE,
    *,
    tokens: int = 10,
    reported: float | None = 0.5,
    computed: float = 0.25,
) -> ModelCostRow:
    return ModelCostRow(
        model, tokens, 2 * tokens, 3 * tokens, 4 * tokens, 5 * tokens, 1, reported, computed, source
    )


def no_live(job_id: str, phase_id: str):
    return None


class Statements:
    """Counts the SQL statements the store's connection runs (sqlite3's trace callback)."""

    def __init__(self, store: SqliteStore):
        self.sql: list[str] = []
        store._db.set_trace_callback(self.sql.append)

    def count(self, action) -> int:
        self.sql.clear()
        action()
        return len(self.sql)


# -- jobs ------------------------------------------------------------------------------------


def test_a_page_of_jobs_takes_the_same_three_queries_for_one_job_or_twenty(store):
    for i in range(25):
        for p in range(3):
            add_phase(store, f"job-{i:02}", f"p{p}", t=100 + i, computed=0.1)
            store.replace_model_costs(f"job-{i:02}", f"p{p}", "proj", [cost_row("m1"), cost_row("m2")])
    queries = PhaseQueries(store, no_live)
    statements = Statements(store)

    counts = {
        size: statements.count(lambda size=size: queries.list_jobs(None, [], size, None))
        for size in (1, 5, 20)
    }
    assert counts == {1: 3, 5: 3, 20: 3}  # jobs, their phases, their per-model costs
    assert statements.count(lambda: queries.job("job-03")) == 3
    page = queries.list_jobs(None, [], 20, None)
    assert [j.job_id for j in page.jobs] == [f"job-{i:02}" for i in range(24, 4, -1)]
    assert all(len(j.phases) == 3 and j.cost.phase_count == 3 for j in page.jobs)
    assert page.next_after == (105, "job-05")
    rest = queries.list_jobs(None, [], 20, page.next_after)
    assert [j.job_id for j in rest.jobs] == [
        f"job-{i:02}" for i in range(4, -1, -1)
    ] and rest.next_after is None


def test_a_job_view_carries_its_phases_in_order_and_its_totals(store):
    add_phase(store, "j", "a", t=1, reported=1.0, computed=0.75)
    add_phase(store, "j", "b", t=2, status=PhaseStatus.FAILED, computed=0.5, computed_only=True)
    add_phase(store, "other", "a", t=3, reported=9.0, computed=9.0)
    store.replace_model_costs("j", "a", "proj", [cost_row("m1", reported=0.5, computed=0.25)])
    store.replace_model_costs("j", "b", "proj", [cost_row("m1", reported=None, computed=0.5)])
    store.replace_model_costs("other", "a", "proj", [cost_row("m1", computed=9.0)])

    job = PhaseQueries(store, no_live).job("j")

    assert job.status is PhaseStatus.FAILED and [p.phase_id for p in job.phases] == ["a", "b"]
    assert job.phases[0].result_pb == b"\x08\x01" and job.phases[0].live is None
    cost = job.cost
    assert (cost.phase_count, cost.reported_usd, cost.computed_usd, cost.computed_only_phase_count) == (
        2,
        1.0,
        1.25,
        1,
    )
    (m1,) = cost.models
    assert (
        m1.reported_usd,
        m1.computed_usd,
        m1.tokens.input_tokens,
        m1.tokens.cache_write_1h_input_tokens,
    ) == (0.5, 0.75, 20, 100)
    assert cost.tokens == m1.tokens


def test_unknown_jobs_and_phases_are_not_found(store):
    queries = PhaseQueries(store, no_live)
    add_phase(store, "j", "a")
    for call in (
        lambda: queries.job("nope"),
        lambda: queries.phase("j", "nope"),
        lambda: queries.list_tool_calls("nope", None, None, False, 10, None),
        lambda: queries.list_tool_calls("j", "nope", None, False, 10, None),
        lambda: queries.cost_totals(job_id="j", phase_id="nope"),
    ):
        with pytest.raises(RunnerError) as caught:
            call()
        assert caught.value.kind is ErrorKind.NOT_FOUND
    with pytest.raises(RunnerError) as caught:
        queries.cost_totals(phase_id="a")
    assert caught.value.kind is ErrorKind.INVALID_ARGUMENT and caught.value.metadata["field"] == "job_id"


# -- costs -----------------------------------------------------------------------------------


def test_cost_totals_by_phase_job_and_project(store):
    add_phase(store, "j1", "a", project="alpha", reported=1.0, computed=1.5)
    add_phase(store, "j1", "b", project="alpha", computed=0.5, computed_only=True)
    add_phase(store, "j2", "a", project="alpha", reported=2.0, computed=2.5)
    add_phase(store, "j3", "a", project="beta", reported=4.0, computed=4.0)
    add_phase(store, "j4", "a", project="default", reported=8.0, computed=8.0)
    store.replace_model_costs(
        "j1",
        "a",
        "alpha",
        [cost_row("opus", tokens=1, computed=1.0), cost_row("haiku", tokens=2, reported=None, computed=0.5)],
    )
    store.replace_model_costs(
        "j1", "b", "alpha", [cost_row("opus", PricingSource.OVERRIDE, tokens=3, reported=None, computed=0.5)]
    )
    store.replace_model_costs(
        "j2",
        "a",
        "alpha",
        [
            cost_row("mystery", PricingSource.UNPRICED, tokens=4, computed=0.0),
            cost_row("opus", tokens=5, reported=2.0, computed=2.5),
        ],
    )
    store.replace_model_costs("j3", "a", "beta", [cost_row("opus", tokens=100)])
    queries = PhaseQueries(store, no_live)

    phase = queries.cost_totals(job_id="j1", phase_id="b")
    assert (phase.phase_count, phase.reported_usd, phase.computed_usd, phase.computed_only_phase_count) == (
        1,
        0.0,
        0.5,
        1,
    )
    assert [(m.model, m.reported_usd, m.pricing_source) for m in phase.models] == [
        ("opus", None, PricingSource.OVERRIDE)
    ]

    job = queries.cost_totals(job_id="j1")
    assert (job.phase_count, job.reported_usd, job.computed_usd) == (2, 1.0, 2.0)
    assert [
        (m.model, m.tokens.input_tokens, m.reported_usd, m.computed_usd, m.pricing_source) for m in job.models
    ] == [
        ("haiku", 2, None, 0.5, PricingSource.PRICE_TABLE),
        ("opus", 4, 0.5, 1.5, PricingSource.OVERRIDE),  # priced from two sources: the override shows
    ]
    assert job.tokens.output_tokens == 2 * (2 + 4) and job.unpriced_models == ()

    project = queries.cost_totals(project_id="alpha")
    assert (
        project.phase_count,
        project.reported_usd,
        project.computed_usd,
        project.computed_only_phase_count,
    ) == (3, 3.0, 4.5, 1)
    assert [(m.model, m.tokens.input_tokens) for m in project.models] == [
        ("haiku", 2),
        ("mystery", 4),
        ("opus", 9),
    ]
    assert project.unpriced_models == ("mystery",)
    assert project.tokens.input_tokens == 15

    default = queries.cost_totals()  # no project: the default one
    assert (default.phase_count, default.reported_usd, default.models) == (1, 8.0, ())


# -- tool calls ------------------------------------------------------------------------------

NAMES = ("Bash", "Read", "mcp__x__y", "Édit")
_ids = itertools.count()


def call_rows(draw_calls) -> list[tuple[str, ToolCallRow]]:
    """(phase, row) for each drawn (phase, name, status, duration) call."""
    rows = []
    for sequence, (phase, name, status, duration) in enumerate(draw_calls, start=1):
        finished = status in (S.SUCCEEDED, S.FAILED)
        rows.append(
            (
                phase,
                ToolCallRow(
                    f"toolu_{sequence}",
                    name,
                    status,
                    sequence,
                    f"toolu_{sequence}".encode(),
                    duration_ns=duration if finished else None,
                ),
            )
        )
    return rows


calls_strategy = st.lists(
    st.tuples(
        st.sampled_from(("a", "b")),
        st.sampled_from(("Bash",) * 4 + NAMES),  # mostly one tool: enough durations for p95 ranks to differ
        st.sampled_from((S.RUNNING, S.HELD, S.UNFINISHED) + (S.SUCCEEDED, S.FAILED) * 3),
        # A finished call normally has a duration; one read back from an old database may not.
        st.one_of(st.integers(0, 10**12), st.integers(0, 50), st.none()),
    ),
    max_size=150,
)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    calls=calls_strategy,
    phase=st.sampled_from((None, "a", "b")),
    tool=st.sampled_from((None, *NAMES)),
    only_failed=st.booleans(),
)
def test_statistics_equal_summarize_calls_on_the_same_calls(store, calls, phase, tool, only_failed):
    job = f"job-{next(_ids)}"  # one store for all examples; each example its own job
    add_phase(store, job, "a")
    add_phase(store, job, "b")
    rows = call_rows(calls)
    for phase_id in ("a", "b"):
        store.upsert_tool_calls(job, phase_id, [r for p, r in rows if p == phase_id])

    page = PhaseQueries(store, no_live).list_tool_calls(job, phase, tool, only_failed, 1000, None)

    wanted = [
        (p, r)
        for p, r in rows
        if (phase is None or p == phase)
        and (tool is None or r.name == tool)
        and (not only_failed or r.status in (S.FAILED, S.UNFINISHED))
    ]
    assert list(page.stats) == summarize_calls((r.name, r.status, r.duration_ns) for _, r in wanted)
    # The page itself: the same calls, phase a (ordinal 1) before b, each by start sequence.
    in_order = sorted(wanted, key=lambda pr: (pr[0], pr[1].start_sequence))
    assert [(c.body, c.status) for c in page.calls] == [(r.body, r.status) for _, r in in_order]


def test_p95_is_the_nearest_rank_of_summarize_calls_for_every_count_up_to_60(store):
    queries = PhaseQueries(store, no_live)
    rng = random.Random(3)
    for n in range(1, 61):
        job = f"job-{n}"
        add_phase(store, job, "a")
        durations = rng.sample(range(1, 10**6), n)  # distinct: each rank has its own value
        store.upsert_tool_calls(
            job,
            "a",
            [
                ToolCallRow(f"t{i}", "Bash", S.SUCCEEDED, i, b"", duration_ns=d)
                for i, d in enumerate(durations)
            ],
        )
        expected = summarize_calls(("Bash", S.SUCCEEDED, d) for d in durations)
        assert list(queries.list_tool_calls(job, None, None, False, 1, None).stats) == expected, n


def test_statistics_of_more_tools_than_one_statement_takes(store):
    add_phase(store, "j", "a")
    calls = [(f"mcp__srv__tool{i:03}", S.SUCCEEDED if i % 3 else S.FAILED, 1000 + i) for i in range(450)]
    calls += [(name, S.SUCCEEDED, 7) for name, *_ in calls[:50]]
    store.upsert_tool_calls(
        "j",
        "a",
        [
            ToolCallRow(f"t{i}", name, status, i, b"", duration_ns=d)
            for i, (name, status, d) in enumerate(calls)
        ],
    )
    page = PhaseQueries(store, no_live).list_tool_calls("j", "a", None, False, 1, None)
    assert list(page.stats) == summarize_calls(calls)


def test_p95_is_the_exact_nearest_rank_at_any_count(store):
    # summarize_calls switches to a 2 % histogram past 4,096 durations per tool; SQL stays exact.
    add_phase(store, "j", "a")
    rng = random.Random(7)
    n = 5011  # 0.95 n = 4760.45: the nearest rank is 4761, rounding would give 4760
    durations = [rng.randrange(1, 10**9) for _ in range(n)]
    store.upsert_tool_calls(
        "j",
        "a",
        [ToolCallRow(f"t{i}", "Bash", S.SUCCEEDED, i, b"", duration_ns=d) for i, d in enumerate(durations)],
    )
    (stats,) = PhaseQueries(store, no_live).list_tool_calls("j", None, None, False, 1, None).stats
    assert stats.p95_duration_ns == sorted(durations)[math.ceil(0.95 * n) - 1]
    assert (stats.count, stats.total_duration_ns, stats.mean_duration_ns) == (
        n,
        sum(durations),
        sum(durations) // n,
    )


def test_tool_calls_page_across_phases_in_start_order(store):
    add_phase(store, "j", "a", t=1)
    add_phase(store, "j", "b", t=2)
    store.upsert_tool_calls("j", "b", [ToolCallRow("x", "Bash", S.FAILED, 1, b"bx", duration_ns=5)])
    store.upsert_tool_calls(
        "j",
        "a",
        [
            ToolCallRow(f"t{i}", "Read", S.SUCCEEDED, 10 - i, f"a{i}".encode(), duration_ns=i)
            for i in range(3)
        ],
    )
    queries = PhaseQueries(store, no_live)
    statements = Statements(store)

    seen, after = [], None
    while True:
        page = queries.list_tool_calls("j", None, None, False, 2, after)
        seen += [c.body for c in page.calls]
        assert [s.count for s in page.stats] == [1, 3]  # over every matching call, on every page
        if page.next_after is None:
            break
        after = page.next_after
    assert seen == [b"a2", b"a1", b"a0", b"bx"]  # phase a (ordinal 1) first, each by start sequence
    # The job, the page, the tallies, every tool's p95 in one statement: the same for any number of calls.
    assert statements.count(lambda: queries.list_tool_calls("j", None, None, False, 2, None)) == 4
    failed = queries.list_tool_calls("j", None, None, True, 10, None)
    assert [c.body for c in failed.calls] == [b"bx"] and [s.name for s in failed.stats] == ["Bash"]


# -- a phase running here ----------------------------------------------------------------------


def snapshot(**changes) -> RunSnapshot:
    tokens = TokenUsage(input_tokens=7)
    values = dict(
        status=PhaseStatus.RUNNING,
        last_sequence=42,
        cost=PhaseCostSnapshot(
            None,
            0.125,
            None,
            True,
            tokens,
            (ModelCost("m", tokens, None, 0.125, PricingSource.PRICE_TABLE),),
            (),
        ),
        tool_stats=(ToolStats("Bash", 2, 0, 1, 10, 10, 10),),
        current_tool=ToolCall("toolu_live", "Bash", "{}", 2, False, "", S.RUNNING, 5, 40),
        paused=False,
        hard_paused=False,
        held_calls=(),
        breakpoints=(),
        assistant_message_count=3,
        user_message_count=2,
        turn_count=1,
    )
    values.update(changes)
    return RunSnapshot(**values)


class FakeRun:
    def __init__(self, snap: RunSnapshot, usage: ContextUsage | None = None):
        self.snap, self.usage, self.asked = snap, usage, 0
        self.checkpoints = None  # checkpoints off: InspectPhase lists the stored ones

    def snapshot(self) -> RunSnapshot:
        return self.snap

    async def context_usage(self) -> ContextUsage | None:
        self.asked += 1
        return self.usage


def live_table(runs: dict[tuple[str, str], FakeRun], done: bool = False):
    event = asyncio.Event()
    if done:
        event.set()
    table = {key: SimpleNamespace(run=run, done=event) for key, run in runs.items()}
    return lambda job_id, phase_id: table.get((job_id, phase_id))


def test_a_running_phase_shows_its_snapshot_and_a_finished_one_its_row(store):
    add_phase(store, "j", "a", status=PhaseStatus.RUNNING)
    store.append_events([("j", "a", [EventRow(1, 1, "k", b"e")])])
    run = FakeRun(snapshot())

    view = PhaseQueries(store, live_table({("j", "a"): run})).phase("j", "a")
    assert view.live is run.snap and view.last_sequence == 42

    ended = PhaseQueries(store, live_table({("j", "a"): run}, done=True)).phase("j", "a")
    assert ended.live is None and ended.last_sequence == 1  # a run that is done answers from the store
    listed = PhaseQueries(store, live_table({("j", "a"): run})).list_jobs(None, [], 10, None)
    assert listed.jobs[0].phases[0].live is run.snap


async def test_inspect_returns_the_latest_events_and_asks_a_running_phase_for_context_usage(store):
    add_phase(store, "j", "a", status=PhaseStatus.RUNNING)
    store.append_events([("j", "a", [EventRow(i, i, f"k{i}", bytes([i])) for i in range(1, 61)])])
    usage = ContextUsage(1000, 200000, 0.5, "{}")
    run = FakeRun(snapshot(last_sequence=60), usage)
    queries = PhaseQueries(store, live_table({("j", "a"): run}))

    plain = await queries.inspect("j", "a")
    assert [e.kind for e in plain.recent_events] == [f"k{i}" for i in range(61 - RECENT_EVENTS, 61)]
    assert plain.context_usage is None and run.asked == 0

    asked = await queries.inspect("j", "a", include_context_usage=True)
    assert asked.context_usage == usage and asked.phase.live is run.snap and run.asked == 1

    finished = await PhaseQueries(store, no_live).inspect("j", "a", include_context_usage=True)
    assert finished.context_usage is None and finished.phase.live is None
