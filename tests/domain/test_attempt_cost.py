"""Cost across attempts: latest wins inside an attempt, attempts add up, carried-over cost is not counted twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from helix_runner.domain.attempt_cost import (
    MIN_ATTEMPT_BUDGET_USD,
    budget_for_next_attempt,
    carried_usage,
    own_cost,
    phase_cost,
    spent_usd,
    sum_costs,
)
from helix_runner.domain.cost_ledger import ModelCost, PhaseCostSnapshot
from helix_runner.domain.events import ModelUsage, TokenUsage, TurnResult
from helix_runner.domain.phase_stream import PhaseStream
from helix_runner.domain.pricing import ModelPrice, PriceTable, PricingSource

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "retry"
MODEL = "claude-opus-5-5"
# The prices the CLI used in these captures: $0.005 for 1000 in + 50 out, $0.0052 for 1200 in + 20 out.
PRICES = PriceTable({MODEL: ModelPrice(4.0, 20.0)}, use_genai_prices=False)


def run_attempt(fixture: str) -> tuple[PhaseCostSnapshot, tuple[ModelUsage, ...]]:
    """One attempt through its own PhaseStream: (its ledger's final snapshot, what its CLI carried in)."""
    stream = PhaseStream(price_table=PRICES)
    events = stream.feed((FIXTURES / fixture).read_bytes()) + stream.finish()
    results = [e.payload for e in events if isinstance(e.payload, TurnResult)]
    return stream.cost, carried_usage(results[0]) if results else ()


def test_a_resumed_attempt_does_not_count_the_restored_cost_twice():
    first, carried_1 = run_attempt("cli-resume-attempt1.jsonl")
    second, carried_2 = run_attempt("cli-resume-attempt2.jsonl")
    assert carried_1 == ()
    # The resumed CLI restored attempt 1's totals: its own figures say $0.0102 for 2200 input tokens.
    assert (second.reported_usd, second.tokens.input_tokens) == (0.0102, 2200)
    (restored,) = carried_2
    assert (restored.model, restored.tokens.input_tokens, restored.tokens.output_tokens) == (MODEL, 1000, 50)
    assert restored.cost_usd == pytest.approx(0.005)

    own_2 = own_cost(second, carried_2, PRICES)
    assert own_2.reported_usd == pytest.approx(0.0052) and own_2.computed_usd == pytest.approx(0.0052)
    assert (own_2.tokens.input_tokens, own_2.tokens.output_tokens) == (1200, 20)
    assert own_2.models[0].reported_usd == pytest.approx(0.0052)

    total = sum_costs([own_cost(first, carried_1, PRICES), own_2])
    assert total.reported_usd == pytest.approx(0.0102)  # not 0.005 + 0.0102
    assert total.computed_usd == pytest.approx(0.0102) and total.difference_usd == pytest.approx(0.0)
    assert (total.tokens.input_tokens, total.tokens.output_tokens) == (2200, 70)
    assert not total.computed_only and total.unpriced_models == ()


def test_after_a_crash_nothing_is_carried_and_the_crashed_attempt_counts_as_computed():
    crashed, carried_1 = run_attempt("cli-resume-crash-attempt1.jsonl")
    resumed, carried_2 = run_attempt("cli-resume-crash-attempt2.jsonl")
    assert crashed.computed_only and crashed.reported_usd is None and crashed.computed_usd > 0
    assert carried_1 == () and carried_2 == ()
    total = sum_costs([crashed, own_cost(resumed, carried_2, PRICES)])
    assert total.reported_usd == pytest.approx(0.0008)
    assert total.computed_usd == pytest.approx(crashed.computed_usd + resumed.computed_usd)
    # Only the attempt that reported a figure is compared with it.
    assert total.difference_usd == pytest.approx(resumed.computed_usd - 0.0008)
    assert not total.computed_only
    assert spent_usd([crashed, resumed]) == pytest.approx(crashed.computed_usd + 0.0008)


def snap(reported: float | None, computed: float, tokens: int, model: str = "m", **kw) -> PhaseCostSnapshot:
    usage = TokenUsage(input_tokens=tokens)
    source = kw.pop("source", PricingSource.PRICE_TABLE)
    return PhaseCostSnapshot(
        reported_usd=reported,
        computed_usd=computed,
        difference_usd=None if reported is None else computed - reported,
        computed_only=reported is None,
        tokens=usage,
        models=(ModelCost(model, usage, reported, computed, source),),
        unpriced_models=(model,) if source is PricingSource.UNPRICED else (),
    )


def test_inside_an_attempt_the_latest_snapshot_wins_and_attempts_add_up():
    updates = [
        (1, snap(0.10, 0.11, 100)),
        (1, snap(0.30, 0.31, 300)),  # a running total: replaces 0.10
        (2, snap(0.05, 0.05, 50)),
        (2, snap(0.20, 0.21, 200)),
        (3, snap(None, 0.07, 70)),  # crashed before any result
    ]
    total = phase_cost(updates)
    assert total.reported_usd == pytest.approx(0.50)
    assert total.computed_usd == pytest.approx(0.31 + 0.21 + 0.07)
    assert total.difference_usd == pytest.approx(0.31 + 0.21 - 0.50)
    assert total.tokens.input_tokens == 570
    (model,) = total.models
    assert (model.reported_usd, model.tokens.input_tokens) == (pytest.approx(0.50), 570)
    assert phase_cost([]) is None and sum_costs([]) is None


def test_attempts_without_any_result_stay_computed_only():
    total = sum_costs([snap(None, 0.02, 10), snap(None, 0.03, 20)])
    assert total.computed_only and total.reported_usd is None and total.difference_usd is None
    assert total.computed_usd == pytest.approx(0.05)


def test_models_merge_by_name_and_unpriced_stays_flagged():
    total = sum_costs(
        [
            snap(0.1, 0.1, 10, "a"),
            snap(0.2, 0.0, 20, "x", source=PricingSource.UNPRICED),
            snap(0.3, 0.3, 30, "a", source=PricingSource.OVERRIDE),
        ]
    )
    a, x = total.models
    assert (a.model, a.tokens.input_tokens, a.pricing_source) == ("a", 40, PricingSource.OVERRIDE)
    assert (x.model, x.pricing_source) == ("x", PricingSource.UNPRICED)
    assert total.unpriced_models == ("x",)


def test_an_old_cli_without_the_since_field_carries_nothing():
    result = TurnResult(
        "success",
        False,
        None,
        "completed",
        1,
        "",
        False,
        None,
        None,
        0.01,
        TokenUsage(),
        (ModelUsage("m", TokenUsage(input_tokens=10), 0.01),),
        (),
        (),
        0,
        "",
    )
    assert carried_usage(result) == ()
    snapshot = snap(0.01, 0.01, 10)
    assert own_cost(snapshot, (), PRICES) is snapshot


@pytest.mark.parametrize(
    ("budget", "spent", "allowed", "left"),
    [
        (None, 5.0, True, None),
        (1.0, 0.0, True, 1.0),
        (1.0, 0.25, True, 0.75),
        (1.0, 1.0, False, None),
        (1.0, 1.2, False, None),  # the CLI overshoots by up to one request
        (1.0, 1.0 - MIN_ATTEMPT_BUDGET_USD / 2, False, None),
        (1.0, 1.0 - 2 * MIN_ATTEMPT_BUDGET_USD, True, pytest.approx(2 * MIN_ATTEMPT_BUDGET_USD)),
        (1.0, -3.0, True, 1.0),  # a nonsense negative figure does not raise the budget
    ],
)
def test_budget_for_the_next_attempt(budget, spent, allowed, left):
    result = budget_for_next_attempt(budget, spent)
    assert (result.allowed, result.max_budget_usd) == (allowed, left)
    if not allowed:
        assert "spent" in result.reason


def test_an_attempt_stopped_without_a_result_gets_what_the_resumed_process_restored():
    from helix_runner.domain.attempt_cost import restored_cost
    from helix_runner.domain.events import ModelUsage, TokenUsage
    from helix_runner.domain.pricing import PriceTable

    prices = PriceTable(use_genai_prices=False)
    earlier = restored_cost([ModelUsage("claude-sonnet-4-5", TokenUsage(400, 10), 0.002)], [], prices)
    # The session's totals restored: an earlier attempt that reported its own, and the stopped one.
    carried = [ModelUsage("claude-sonnet-4-5", TokenUsage(1400, 60), 0.007)]
    stopped = restored_cost(carried, [earlier], prices)
    assert (stopped.tokens.input_tokens, stopped.tokens.output_tokens) == (1000, 50)
    assert stopped.reported_usd == pytest.approx(0.005) and not stopped.computed_only
    assert restored_cost([], [earlier], prices) is None
