"""The cost of a phase that ran as several attempts, and the budget left for the next one.

Rules (evidence in ``docs/retries-and-admission.md`` and ``tests/fixtures/retry/README.md``):

* **Inside an attempt** (one CLI process) the CLI's figures are running totals: the latest result
  wins and results are never summed. ``CostLedger`` already applies this; each attempt gets its own
  ledger, and its latest snapshot is the attempt's cost.
* **A resumed attempt can carry cost in.** When a process exits normally, the CLI saves its totals
  in its config for the session; ``--resume`` of that session restores them, so the new process's
  ``total_cost_usd`` and ``modelUsage`` include the earlier process's cost (CLI 2.1.330: attempt 2
  reported $0.0102 = $0.005 restored + $0.0052 of its own). A killed process saves nothing, so
  whether anything is carried cannot be known in advance. The first result of the process tells:
  its ``model_usage_since_last_result`` is only the process's own usage, so ``modelUsage`` minus it
  is the carried part (:func:`carried_usage`), which :func:`own_cost` removes.
* **Across attempts** the attempts' own costs add up (:func:`sum_costs`, :func:`phase_cost`).
* **Budget**: ``max_budget_usd`` is for the whole phase. The CLI compares ``--max-budget-usd`` with
  its own process's spending only (a resumed process restored $0.005 and still ran a request under
  a $0.006 budget), so the next attempt gets the phase budget minus what the attempts spent
  (:func:`budget_for_next_attempt`), and none when nothing is left.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from helix_runner.domain.cost_ledger import ModelCost, PhaseCostSnapshot
from helix_runner.domain.events import ModelUsage, TokenUsage, TurnResult
from helix_runner.domain.pricing import PriceTable, PricingSource

MIN_ATTEMPT_BUDGET_USD = 0.000001
"""The smallest budget worth an attempt: ``--max-budget-usd`` is passed with 6 decimals (runner/claude_command.py)."""

_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_write_5m_input_tokens",
    "cache_write_1h_input_tokens",
    "web_search_requests",
)


def _minus(a: TokenUsage, b: TokenUsage) -> TokenUsage:
    """``a - b`` per kind, never below zero (the two splits of cache writes can disagree slightly)."""
    return TokenUsage(*(max(0, getattr(a, f) - getattr(b, f)) for f in _FIELDS))


def carried_usage(first_result: TurnResult) -> tuple[ModelUsage, ...]:
    """What a process's running totals carry over from the session it resumed, per model.

    Pass the *first* result of the process. Empty when nothing was carried, and also when the
    result cannot tell (no ``modelUsage`` or no ``model_usage_since_last_result``: CLIs before
    2.1.x), in which case the totals are taken as the process's own.
    """
    own = first_result.usage_since_last_result
    if own is None or not first_result.has_model_usage:
        return ()
    own_by_model = {mu.model: mu for mu in own}
    carried = []
    for total in first_result.model_usage:
        mine = own_by_model.get(total.model)
        tokens = total.tokens if mine is None else _minus(total.tokens, mine.tokens)
        own_usd = (mine.cost_usd or 0.0) if mine is not None else 0.0
        cost = None if total.cost_usd is None else max(0.0, total.cost_usd - own_usd)
        if tokens != TokenUsage() or cost:
            carried.append(ModelUsage(total.model, tokens, cost))
    return tuple(carried)


def own_cost(
    snapshot: PhaseCostSnapshot, carried: Sequence[ModelUsage], prices: PriceTable
) -> PhaseCostSnapshot:
    """An attempt's own cost: its ledger's ``snapshot`` without the ``carried`` part (re-priced)."""
    if not carried:
        return snapshot
    carried_by_model = {mu.model: mu for mu in carried}
    models = []
    for model in snapshot.models:
        out = carried_by_model.get(model.model)
        if out is None:
            models.append(model)
            continue
        tokens = _minus(model.tokens, out.tokens)
        computed, source = prices.cost_usd(model.model, tokens)
        reported = model.reported_usd
        if reported is not None and out.cost_usd is not None:
            reported = max(0.0, reported - out.cost_usd)
        models.append(ModelCost(model.model, tokens, reported, computed, source))
    reported_total = snapshot.reported_usd
    if reported_total is not None:
        reported_total = max(0.0, reported_total - sum(mu.cost_usd or 0.0 for mu in carried))
    return _snapshot(models, reported_total, snapshot.computed_only)


def sum_costs(costs: Iterable[PhaseCostSnapshot]) -> PhaseCostSnapshot | None:
    """The cost of several attempts together: their own costs added up (None for no attempts).

    ``reported_usd`` adds the attempts that reported a figure (unset when none did);
    ``difference_usd`` compares it with the computed cost of those same attempts only;
    ``computed_only`` holds when no attempt wrote a result.
    """
    costs = list(costs)
    if not costs:
        return None
    by_model: dict[str, list[ModelCost]] = {}
    for cost in costs:
        for model in cost.models:
            by_model.setdefault(model.model, []).append(model)
    models = [_merge(name, entries) for name, entries in sorted(by_model.items())]
    reported_parts = [c for c in costs if c.reported_usd is not None]
    reported = sum(c.reported_usd for c in reported_parts) if reported_parts else None  # type: ignore[misc]
    snapshot = _snapshot(models, reported, all(c.computed_only for c in costs))
    if reported is None:
        return snapshot
    comparable = sum(c.computed_usd for c in reported_parts)
    return PhaseCostSnapshot(
        reported_usd=reported,
        computed_usd=snapshot.computed_usd,
        difference_usd=comparable - reported,
        computed_only=snapshot.computed_only,
        tokens=snapshot.tokens,
        models=snapshot.models,
        unpriced_models=snapshot.unpriced_models,
    )


def phase_cost(updates: Iterable[tuple[int, PhaseCostSnapshot]]) -> PhaseCostSnapshot | None:
    """The phase's cost from ``(attempt number, own cost snapshot)`` updates in stream order.

    Within an attempt the latest update wins (running totals); across attempts they add up.
    """
    latest: dict[int, PhaseCostSnapshot] = {}
    for attempt, snapshot in updates:
        latest[attempt] = snapshot
    return sum_costs(latest[n] for n in sorted(latest))


def spent_usd(costs: Iterable[PhaseCostSnapshot]) -> float:
    """What the attempts spent: each one's reported figure (what the CLI budgets against), or
    its computed figure when it wrote no result."""
    return sum(c.reported_usd if c.reported_usd is not None else c.computed_usd for c in costs)


@dataclass(frozen=True)
class NextAttemptBudget:
    """Whether the budget allows another attempt, and the ``--max-budget-usd`` to give it."""

    allowed: bool
    max_budget_usd: float | None
    """None when the phase has no budget."""
    reason: str = ""


def budget_for_next_attempt(max_budget_usd: float | None, spent: float) -> NextAttemptBudget:
    """The budget left for the next attempt of a phase whose budget is ``max_budget_usd`` overall.

    The CLI checks its budget after each API response, so one attempt can overshoot by one
    request (tests/fixtures/retry/cli-maxbudget.jsonl); whatever was overspent is taken from what
    is left, and no attempt starts once less than :data:`MIN_ATTEMPT_BUDGET_USD` remains.
    """
    if max_budget_usd is None:
        return NextAttemptBudget(True, None)
    left = max_budget_usd - max(0.0, spent)
    if left < MIN_ATTEMPT_BUDGET_USD:
        return NextAttemptBudget(
            False, None, f"the attempts spent ${spent:.6f} of the phase's ${max_budget_usd:.6f} budget"
        )
    return NextAttemptBudget(True, left, f"${left:.6f} of the phase's ${max_budget_usd:.6f} budget is left")


def _merge(model: str, entries: list[ModelCost]) -> ModelCost:
    tokens = TokenUsage()
    for entry in entries:
        tokens = tokens + entry.tokens
    reported_parts = [e.reported_usd for e in entries if e.reported_usd is not None]
    sources = {e.pricing_source for e in entries}
    # The same model is priced the same way in every attempt; if one attempt had no price for it,
    # the sum lacks that part, so the merged entry says so.
    if PricingSource.UNPRICED in sources:
        source = PricingSource.UNPRICED
    else:
        source = max(sources - {PricingSource.UNSPECIFIED}, default=PricingSource.UNSPECIFIED)
    return ModelCost(
        model,
        tokens,
        sum(reported_parts) if reported_parts else None,
        sum(e.computed_usd for e in entries),
        source,
    )


def _snapshot(models: list[ModelCost], reported: float | None, computed_only: bool) -> PhaseCostSnapshot:
    tokens = TokenUsage()
    for model in models:
        tokens = tokens + model.tokens
    computed = sum(m.computed_usd for m in models)
    return PhaseCostSnapshot(
        reported_usd=reported,
        computed_usd=computed,
        difference_usd=None if reported is None else computed - reported,
        computed_only=computed_only,
        tokens=tokens,
        models=tuple(models),
        unpriced_models=tuple(sorted(m.model for m in models if m.pricing_source is PricingSource.UNPRICED)),
    )


def restored_cost(
    carried: Sequence[ModelUsage], others: Iterable[PhaseCostSnapshot], prices: PriceTable
) -> PhaseCostSnapshot | None:
    """What an attempt that ended without a result really cost, from what the next process restored.

    A process stopped with SIGTERM (a hand-over, docs/scale-out.md) saves the session's totals
    before it exits, its last API message's final usage included; the stream showed only that
    message's starting usage (docs/claude-cli-protocol.md §0.2). The resumed process's first result
    carries those totals in (``carried``); minus the ``others`` earlier attempts of the session that
    reported their own, they are the stopped attempt's. None when nothing was carried.
    """
    if not carried:
        return None
    spent: dict[str, tuple[TokenUsage, float]] = {}
    for cost in others:
        for model in cost.models:
            tokens, usd = spent.get(model.model, (TokenUsage(), 0.0))
            spent[model.model] = (tokens + model.tokens, usd + (model.reported_usd or 0.0))
    models = []
    for mu in carried:
        tokens, usd = spent.get(mu.model, (TokenUsage(), 0.0))
        own = _minus(mu.tokens, tokens)
        computed, source = prices.cost_usd(mu.model, own)
        reported = None if mu.cost_usd is None else max(0.0, mu.cost_usd - usd)
        models.append(ModelCost(mu.model, own, reported, computed, source))
    parts = [m.reported_usd for m in models]
    return _snapshot(models, sum(parts) if all(p is not None for p in parts) else None, False)  # type: ignore[misc]
