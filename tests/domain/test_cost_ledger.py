"""Cost ledger: latest result wins (never summed), usage after it counts, computed-only without results."""

from __future__ import annotations

import pytest

from helix_runner.domain.cost_ledger import CostLedger
from helix_runner.domain.events import ModelUsage, TokenUsage, TurnResult
from helix_runner.domain.pricing import ModelPrice, PriceTable, PricingSource

M = 1_000_000
PRICES = PriceTable({"m": ModelPrice(1.0, 10.0), "sub": ModelPrice(2.0, 20.0)}, use_genai_prices=False)


def result(
    total_cost_usd: float | None, *model_usage: ModelUsage, has_model_usage: bool = True
) -> TurnResult:
    return TurnResult(
        "success",
        False,
        None,
        "completed",
        1,
        "",
        False,
        None,
        None,
        total_cost_usd,
        TokenUsage(),
        model_usage,
        (),
        (),
        0,
        "end_turn",
        has_model_usage,
    )


def usage(input_tokens: int = 0, output_tokens: int = 0, **extra) -> dict:
    return {"input_tokens": input_tokens, "output_tokens": output_tokens, **extra}


def test_a_new_ledger_is_computed_only_and_zero():
    cost = CostLedger(PRICES).snapshot()
    assert (cost.reported_usd, cost.computed_usd, cost.difference_usd, cost.computed_only) == (
        None,
        0.0,
        None,
        True,
    )


def test_latest_result_wins_and_results_are_never_summed():
    ledger = CostLedger(PRICES)
    ledger.on_result(result(1.5, ModelUsage("m", TokenUsage(M, 0), 1.0)))
    ledger.on_result(result(1.5, ModelUsage("m", TokenUsage(M, 0), 1.0)))  # localcli-09: same total again
    assert ledger.snapshot().reported_usd == 1.5
    ledger.on_result(result(2.0, ModelUsage("m", TokenUsage(2 * M, 0), 2.0)))
    cost = ledger.snapshot()
    assert (cost.reported_usd, cost.computed_usd) == (2.0, pytest.approx(2.0))
    assert cost.difference_usd == pytest.approx(0.0) and not cost.computed_only
    assert ledger.result_count == 3


def test_assistant_usage_is_deduplicated_by_message_id():
    ledger = CostLedger(PRICES)
    assert ledger.observe_message("msg_1", "m", usage(M, 1)) is True
    assert ledger.observe_message("msg_1", "m", usage(M, 1)) is False  # second block, same message
    assert ledger.observe_message("msg_2", "m", usage(M, 1)) is True
    cost = ledger.snapshot()
    assert cost.tokens.input_tokens == 2 * M and cost.computed_usd == pytest.approx(2.0, rel=1e-4)
    assert cost.computed_only


def test_a_later_output_count_raises_the_message_once():
    ledger = CostLedger(PRICES)
    ledger.observe_message("msg_1", "m", usage(0, 1))
    ledger.observe_output("msg_1", {"output_tokens": M})  # stream_event message_delta
    ledger.observe_message("msg_1", "m", usage(0, M))  # a later line with the same count: no change
    ledger.observe_output("msg_1", {"output_tokens": 5})  # never lowered
    ledger.observe_output("msg_unknown", {"output_tokens": 99})
    assert ledger.snapshot().tokens.output_tokens == M


def test_usage_after_the_latest_result_is_added_and_usage_before_it_is_not_double_counted():
    ledger = CostLedger(PRICES)
    ledger.observe_message("msg_1", "m", usage(M))
    ledger.on_result(result(1.0, ModelUsage("m", TokenUsage(M), 1.0)))  # covers msg_1
    ledger.observe_message("msg_1", "m", usage(M, 7))  # a straggler line of a covered message
    ledger.observe_output("msg_1", {"output_tokens": 500})
    assert ledger.snapshot().computed_usd == pytest.approx(1.0)
    ledger.observe_message("msg_2", "sub", usage(M))  # after the result, e.g. a background subagent
    cost = ledger.snapshot()
    assert cost.reported_usd == 1.0 and cost.computed_usd == pytest.approx(3.0)
    assert cost.difference_usd == pytest.approx(2.0)
    assert {(m.model, m.reported_usd) for m in cost.models} == {("m", 1.0), ("sub", None)}


def test_cache_write_split_on_assistant_usage():
    ledger = CostLedger(PriceTable({"m": ModelPrice(1.0, 1.0)}, use_genai_prices=False))
    ledger.observe_message(
        "a",
        "m",
        usage(
            cache_creation_input_tokens=M,
            cache_creation={"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": M},
        ),
    )
    ledger.observe_message("b", "m", usage(cache_creation_input_tokens=M))  # no split: 5m
    cost = ledger.snapshot()
    assert (cost.tokens.cache_write_1h_input_tokens, cost.tokens.cache_write_5m_input_tokens) == (M, M)
    assert cost.computed_usd == pytest.approx(2.0 + 1.25)


def test_unpriced_models_are_flagged_and_left_out_of_the_sum():
    ledger = CostLedger(PRICES)
    ledger.on_result(
        result(5.0, ModelUsage("m", TokenUsage(M), 1.0), ModelUsage("mystery", TokenUsage(M), 4.0))
    )
    cost = ledger.snapshot()
    assert cost.unpriced_models == ("mystery",) and cost.computed_usd == pytest.approx(1.0)
    mystery = next(m for m in cost.models if m.model == "mystery")
    assert (mystery.pricing_source, mystery.computed_usd, mystery.reported_usd) == (
        PricingSource.UNPRICED,
        0.0,
        4.0,
    )


def test_result_without_model_usage_keeps_the_assistant_usage():
    ledger = CostLedger(PRICES)
    ledger.observe_message("msg_1", "m", usage(M))
    ledger.on_result(result(0.25, has_model_usage=False))  # very old CLIs (rustclaudecodes-1)
    cost = ledger.snapshot()
    assert (cost.reported_usd, cost.computed_usd, cost.computed_only) == (0.25, pytest.approx(1.0), False)


def test_a_result_without_total_cost_keeps_the_previous_reported_figure():
    ledger = CostLedger(PRICES)
    ledger.on_result(result(0.5))
    ledger.on_result(result(None))
    assert ledger.snapshot().reported_usd == 0.5


def test_snapshots_are_cached_until_something_changes():
    ledger = CostLedger(PRICES)
    first = ledger.snapshot()
    assert ledger.snapshot() is first
    ledger.observe_message("x", "m", usage(1))
    assert ledger.snapshot() is not first


def test_many_messages_fold_into_exact_totals():
    ledger = CostLedger(PRICES)
    for i in range(5000):  # past the fold batch and the remembered-ids window
        ledger.observe_message(f"msg_{i}", "m" if i % 2 else "sub", usage(3, 2))
    cost = ledger.snapshot()
    by_model = {m.model: m.tokens for m in cost.models}
    assert by_model["m"] == by_model["sub"] == TokenUsage(7500, 5000)
