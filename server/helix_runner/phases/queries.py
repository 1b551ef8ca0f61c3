"""The read model: what the API asks about jobs, phases, tool calls and costs, answered as views.

It sits between the API and the store, so the API never reads the store or a running phase's
internals: a phase running in this server contributes a ``RunSnapshot`` (``PhaseRun.snapshot``),
everything else comes from the store. Each answer takes a fixed number of store queries,
whatever its size: a page of jobs is at most three (jobs, their phases, their per-model costs), and
tool-call statistics are computed by the store over every matching call (``Store.tool_call_stats``)
instead of by reading the calls out.

Job views are cached (``JobViewCache``): a page reads the job rows, which carry each job's
``view_version`` and ``sequence_sum``, and rebuilds only the jobs where either moved since their
view was built; a page of unchanged jobs is one query. The store bumps the version in the same
transaction as every write that changes a view, and every appended event raises the sum
(``JobRow``); both are in the database, so this holds with other processes or replicas writing
too. A job with a phase running in this server is never cached: its live figures come from the
run at each call. The API keeps each cached view's encoding with it (``JobView.memo``).
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from helix_runner.domain.audit import AuditEntry
from helix_runner.domain.cost_ledger import ModelCost
from helix_runner.domain.events import TokenUsage
from helix_runner.domain.phase_spec import DEFAULT_PROJECT
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.pricing import PricingSource
from helix_runner.domain.tool_tracker import ToolCallStatus
from helix_runner.errors import ErrorKind, RunnerError, invalid_field
from helix_runner.phases.views import (
    CostTotals,
    Inspection,
    JobPage,
    JobView,
    PhaseView,
    RecentEvent,
    StoredToolCall,
    ToolCallPage,
)
from helix_runner.store.protocol import JobRow, ModelCostRow, PhaseCostSums, PhaseRow, Store

if TYPE_CHECKING:
    from helix_runner.phases.run import PhaseRun
    from helix_runner.phases.service import LivePhase

# Job views the read model keeps (ListJobs / GetJob) unless told otherwise (config read_cache_jobs),
# and the bytes they may hold in all (estimated: their stored text and blobs, twice, for the API's
# encoding kept with each; a job with long prompts or many phases counts for what it holds).
DEFAULT_VIEW_CACHE_JOBS = 4096
VIEW_CACHE_BYTES = 64 * 1024 * 1024
# InspectPhase shows this many of the latest events.
RECENT_EVENTS = 50
# ListToolCalls(only_failed): calls that failed or never finished.
_NOT_SUCCEEDED = (ToolCallStatus.FAILED, ToolCallStatus.UNFINISHED)


def job_not_found(job_id: str) -> RunnerError:
    return RunnerError(
        ErrorKind.NOT_FOUND, "JOB_NOT_FOUND", f"job {job_id} does not exist", {"job_id": job_id}
    )


def phase_not_found(job_id: str, phase_id: str) -> RunnerError:
    return RunnerError(
        ErrorKind.NOT_FOUND,
        "PHASE_NOT_FOUND",
        f"phase {phase_id} of job {job_id} does not exist",
        {"job_id": job_id, "phase_id": phase_id},
    )


class JobViewCache:
    """Job views by job id, least recently used out first; an entry holds while its job row's
    (create_time_ns, view_version, sequence_sum) is what it was built from.

    The creation time is in the key so that a job deleted by retention and created again under the
    same id (its version starting over) never matches the old view. A view may be built from data
    newer than its version (its job row was read first): then the next read sees a newer version and
    rebuilds, so a view is never older than its key says.
    """

    def __init__(self, capacity: int, max_bytes: int = VIEW_CACHE_BYTES):
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[str, tuple[tuple[int, int, int], JobView, int]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, job: JobRow) -> JobView | None:
        entry = self._entries.get(job.job_id)
        if entry is None or entry[0] != (job.create_time_ns, job.view_version, job.sequence_sum):
            self.misses += 1
            return None
        self._entries.move_to_end(job.job_id)
        self.hits += 1
        return entry[1]

    def put(self, job: JobRow, view: JobView) -> None:
        size = _estimated_size(view)
        old = self._entries.pop(job.job_id, None)
        if old is not None:
            self.bytes -= old[2]
        if size > self.max_bytes // 16:
            return  # one huge job would push out many others: built on each read instead
        self._entries[job.job_id] = ((job.create_time_ns, job.view_version, job.sequence_sum), view, size)
        self.bytes += size
        while len(self._entries) > self.capacity or self.bytes > self.max_bytes:
            self.bytes -= self._entries.popitem(last=False)[1][2]

    def __len__(self) -> int:
        return len(self._entries)


class PhaseQueries:
    """Answers the API's questions from a ``Store`` and the phases running in this server."""

    def __init__(
        self,
        store: Store,
        live: Callable[[str, str], LivePhase | None],
        *,
        view_cache_jobs: int = DEFAULT_VIEW_CACHE_JOBS,
    ):
        """``live`` finds a phase running in this server (``PhaseService.get_live``);
        ``view_cache_jobs`` job views are kept (0: none, every answer is built from the store)."""
        self._store = store
        self._live = live
        self.view_cache = JobViewCache(view_cache_jobs) if view_cache_jobs > 0 else None

    # -- jobs -------------------------------------------------------------------------------

    def job(self, job_id: str) -> JobView:
        """One job with its phases and cost totals; NOT_FOUND if there is none. One query when cached."""
        row = self._store.get_job(job_id)
        if row is None:
            raise job_not_found(job_id)
        return self._job_views([row])[0]

    def list_jobs(
        self,
        project_id: str | Sequence[str] | None,
        statuses: Sequence[PhaseStatus],
        limit: int,
        after: tuple[int, str] | None,
    ) -> JobPage:
        """A page of jobs, newest first, in at most three store queries whatever ``limit`` is; of one
        project, of the projects a caller may see (a sequence), or of all (None or "")."""
        rows = self._store.list_jobs(project_id or None if isinstance(project_id, str) else project_id,
                                     statuses, limit + 1, after)
        more = len(rows) > limit
        rows = rows[:limit]
        next_after = (rows[-1].create_time_ns, rows[-1].job_id) if more and rows else None
        return JobPage(tuple(self._job_views(rows)), next_after)

    def _job_views(self, jobs: list[JobRow]) -> list[JobView]:
        """Views of these jobs: cached ones whose version still holds, the others built in two queries."""
        cache = self.view_cache
        if cache is None:
            return self._build_views(jobs)
        views: list[JobView | None] = []
        stale: list[int] = []
        for job in jobs:
            view = cache.get(job)
            if view is not None and self._runs_here(view):
                view = None  # a phase started here since: its live figures are wanted
            if view is None:
                stale.append(len(views))
            views.append(view)
        if stale:
            for i, view in zip(stale, self._build_views([jobs[i] for i in stale]), strict=True):
                views[i] = view
                if all(p.live is None for p in view.phases):
                    cache.put(jobs[i], view)
        return views  # type: ignore[return-value]  # every slot is filled

    def _runs_here(self, view: JobView) -> bool:
        return any(self._running(p.job_id, p.phase_id) is not None for p in view.phases)

    def _build_views(self, jobs: list[JobRow]) -> list[JobView]:
        ids = [j.job_id for j in jobs]
        phases: dict[str, list[PhaseRow]] = defaultdict(list)
        for row in self._store.phases_of_jobs(ids):
            phases[row.job_id].append(row)
        models: dict[str, list[ModelCostRow]] = defaultdict(list)
        for job_id, row in self._store.model_cost_sums(job_ids=ids) if ids else ():
            models[job_id].append(row)
        return [
            JobView(
                job.job_id,
                job.project_id,
                job.status,
                job.create_time_ns,
                job.update_time_ns,
                tuple(self._phase_view(p) for p in phases[job.job_id]),
                _totals(_phase_sums(phases[job.job_id]), models[job.job_id]),
            )
            for job in jobs
        ]

    # -- phases -----------------------------------------------------------------------------

    def phase(self, job_id: str, phase_id: str) -> PhaseView:
        """One phase, with its live figures while it runs here; NOT_FOUND if there is none."""
        return self._phase_view(self._require_phase(job_id, phase_id))

    def _require_phase(self, job_id: str, phase_id: str) -> PhaseRow:
        row = self._store.get_phase(job_id, phase_id)
        if row is None:
            raise phase_not_found(job_id, phase_id)
        return row

    def _running(self, job_id: str, phase_id: str) -> PhaseRun | None:
        live = self._live(job_id, phase_id)
        return None if live is None or live.done.is_set() else live.run

    def _phase_view(self, row: PhaseRow) -> PhaseView:
        run = self._running(row.job_id, row.phase_id)
        snapshot = None if run is None else run.snapshot()
        return PhaseView(
            row.job_id,
            row.phase_id,
            row.project_id,
            row.status,
            row.status_reason,
            row.session_id,
            row.model,
            row.working_dir,
            row.prompt,
            row.on_disconnect,
            row.create_time_ns,
            row.start_time_ns,
            row.end_time_ns,
            row.last_sequence if snapshot is None else snapshot.last_sequence,
            row.result_pb,
            row.cost_pb,
            row.tool_stats_pb,
            snapshot,
            row.attempts_pb,
            row.fork_pb,
        )

    async def inspect(self, job_id: str, phase_id: str, include_context_usage: bool = False) -> Inspection:
        """The phase, its latest events and, if asked and it runs here, the CLI's context usage."""
        view = self.phase(job_id, phase_id)
        tail = self._store.read_events(
            job_id, phase_id, max(0, view.last_sequence - RECENT_EVENTS), RECENT_EVENTS
        )
        usage = None
        run = self._running(job_id, phase_id) if include_context_usage and view.live is not None else None
        if run is not None:
            usage = await run.context_usage()
        live = self._running(job_id, phase_id)
        checkpoints = live.checkpoints.checkpoints if live is not None and live.checkpoints is not None \
            else self._store.list_checkpoints(job_id, phase_id)
        return Inspection(view, tuple(RecentEvent(e.kind, e.body) for e in tail), usage,
                          tuple(sorted(checkpoints, key=lambda c: c.number)))

    # -- tool calls -------------------------------------------------------------------------

    def list_tool_calls(
        self,
        job_id: str,
        phase_id: str | None,
        tool_name: str | None,
        only_failed: bool,
        limit: int,
        after: tuple[int, int, str] | None,
    ) -> ToolCallPage:
        """A page of a job's (or one phase's) calls in start order, with statistics over all matching calls."""
        if self._store.get_job(job_id) is None:
            raise job_not_found(job_id)
        if phase_id:
            self._require_phase(job_id, phase_id)
        statuses = _NOT_SUCCEEDED if only_failed else ()
        rows = self._store.list_tool_calls(
            job_id, phase_id or None, tool_name or None, statuses, limit + 1, after
        )
        more = len(rows) > limit
        rows = rows[:limit]
        next_after = None
        if more and rows:
            last = rows[-1]
            next_after = (last.phase_ordinal, last.start_sequence, last.tool_use_id)
        stats = self._store.tool_call_stats(job_id, phase_id or None, tool_name or None, statuses)
        return ToolCallPage(
            tuple(StoredToolCall(r.status, r.body) for r in rows),
            next_after,
            tuple(sorted(stats, key=lambda s: s.name)),  # by code point, as ToolTracker.stats
        )

    # -- costs ------------------------------------------------------------------------------

    def project_of(self, job_id: str) -> str | None:
        """The project of a job (None: no such job); a job's project never changes."""
        row = self._store.get_job(job_id)
        return None if row is None else row.project_id

    def audit_entries(self, projects: Sequence[str] | None, job_id: str, principal: str, limit: int,
                      before_id: int | None) -> list[AuditEntry]:
        return self._store.list_audit(projects, job_id, principal, limit, before_id)

    def cost_totals(self, project_id: str = "", job_id: str = "", phase_id: str = "") -> CostTotals:
        """Totals of one phase (job + phase), a job, or a project (the default project when empty)."""
        if phase_id and not job_id:
            raise invalid_field("job_id", "is required when phase_id is set")
        if job_id:
            if self._store.get_job(job_id) is None:
                raise job_not_found(job_id)
            if phase_id:
                self._require_phase(job_id, phase_id)
            sums = self._store.phase_cost_sums(job_id=job_id, phase_id=phase_id or None)
            models = self._store.model_cost_sums(job_ids=[job_id], phase_id=phase_id or None)
        else:
            project = project_id or DEFAULT_PROJECT
            sums = self._store.phase_cost_sums(project_id=project)
            models = self._store.model_cost_sums(project_id=project)
        return _totals(sums, [row for _, row in models])


def _estimated_size(view: JobView) -> int:
    """Bytes a cached view holds, roughly: its phases' text and blobs and a fixed part, twice (its
    encoding is kept with it)."""
    size = 512 + 128 * len(view.cost.models)
    for p in view.phases:
        size += 256 + len(p.prompt) + len(p.working_dir) + len(p.status_reason)
        size += len(p.result_pb or b"") + len(p.cost_pb or b"") + len(p.tool_stats_pb or b"")
        size += len(p.attempts_pb or b"")
    return 2 * size


def _phase_sums(phases: Iterable[PhaseRow]) -> PhaseCostSums:
    count = reported = computed = computed_only = 0
    for p in phases:
        count += 1
        reported += p.reported_usd or 0.0
        computed += p.computed_usd
        computed_only += bool(p.computed_only)
    return PhaseCostSums(count, float(reported), float(computed), computed_only)


def _totals(sums: PhaseCostSums, rows: Iterable[ModelCostRow]) -> CostTotals:
    """CostTotals from summed phase columns and per-model rows (several rows of a model add up).

    A model priced from different sources in different phases shows the least certain one:
    UNPRICED over OVERRIDE over PRICE_TABLE.
    """
    by_model: dict[str, ModelCost] = {}
    unpriced: set[str] = set()
    for r in rows:
        tokens = TokenUsage(
            r.input_tokens,
            r.output_tokens,
            r.cache_read_input_tokens,
            r.cache_write_5m_input_tokens,
            r.cache_write_1h_input_tokens,
            r.web_search_requests,
        )
        if r.pricing_source is PricingSource.UNPRICED:
            unpriced.add(r.model)
        known = by_model.get(r.model)
        if known is None:
            by_model[r.model] = ModelCost(r.model, tokens, r.reported_usd, r.computed_usd, r.pricing_source)
            continue
        reported = known.reported_usd
        if r.reported_usd is not None:
            reported = (reported or 0.0) + r.reported_usd
        by_model[r.model] = ModelCost(
            r.model,
            known.tokens + tokens,
            reported,
            known.computed_usd + r.computed_usd,
            max(known.pricing_source, r.pricing_source),
        )
    models = tuple(by_model[name] for name in sorted(by_model))
    tokens = models[0].tokens if models else TokenUsage()
    for m in models[1:]:
        tokens = tokens + m.tokens
    return CostTotals(
        sums.phase_count,
        sums.reported_usd,
        sums.computed_usd,
        sums.computed_only_phase_count,
        tokens,
        models,
        tuple(sorted(unpriced)),
    )
