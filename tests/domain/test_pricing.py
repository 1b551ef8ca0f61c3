"""Prices: genai-prices' table, the override table, unpriced models, and the cache-write split rule."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from helix_runner.domain.events import TokenUsage
from helix_runner.domain.pricing import ModelPrice, PriceTable, PricingSource, split_cache_writes

M = 1_000_000


def test_known_claude_model_comes_from_the_price_table(price_table):
    price, source = price_table.lookup("claude-sonnet-4-5-20250929")
    assert source is PricingSource.PRICE_TABLE
    # Sonnet 4.5 base tier: $3 in, $15 out, cache read $0.30, 5m write $3.75, 1h write $6 per MTok.
    assert (price.input_per_mtok, price.output_per_mtok) == (3.0, 15.0)
    assert (price.cache_read_per_mtok, price.cache_write_5m_per_mtok, price.cache_write_1h_per_mtok) == (
        0.3,
        3.75,
        6.0,
    )
    assert price.web_search_per_request == pytest.approx(0.01)


def test_cost_reproduces_the_clis_figure_for_hivemind_1(price_table):
    # modelUsage["claude-sonnet-4-5-20250929"] of corpus hivemind-1: costUSD 1.26568625.
    tokens = TokenUsage(183, 17323, 2294220, 79207, 0, 2)
    cost, source = price_table.cost_usd("claude-sonnet-4-5-20250929", tokens)
    assert cost == pytest.approx(1.26568625, rel=1e-12) and source is PricingSource.PRICE_TABLE


def test_long_context_tiers_are_not_applied_to_summed_usage(price_table):
    # 1M input tokens summed over many requests must not trigger the >200k-per-request tier.
    cost, _ = price_table.cost_usd("claude-sonnet-4-5-20250929", TokenUsage(input_tokens=M))
    assert cost == pytest.approx(3.0)


def test_one_hour_cache_writes_cost_more_than_five_minute_ones(price_table):
    five, _ = price_table.cost_usd("claude-haiku-4-5-20251001", TokenUsage(cache_write_5m_input_tokens=M))
    hour, _ = price_table.cost_usd("claude-haiku-4-5-20251001", TokenUsage(cache_write_1h_input_tokens=M))
    assert (five, hour) == (pytest.approx(1.25), pytest.approx(2.0))


def test_unknown_model_is_unpriced_and_never_silently_zero():
    table = PriceTable()
    assert table.lookup("totally-made-up-model") == (None, PricingSource.UNPRICED)
    assert table.cost_usd("totally-made-up-model", TokenUsage(input_tokens=M)) == (
        0.0,
        PricingSource.UNPRICED,
    )


def test_override_prices_unknown_models_and_wins_over_the_table():
    table = PriceTable(
        {"my-gateway-model": ModelPrice(2.0, 8.0), "Claude-Haiku-4-5-20251001": ModelPrice(9.0, 9.0)}
    )
    cost, source = table.cost_usd("my-gateway-model", TokenUsage(input_tokens=M, output_tokens=M))
    assert (cost, source) == (pytest.approx(10.0), PricingSource.OVERRIDE)
    price, source = table.lookup("claude-haiku-4-5-20251001")  # ids match case-insensitively
    assert (price.input_per_mtok, source) == (9.0, PricingSource.OVERRIDE)


def test_override_cache_prices_default_to_anthropics_multipliers():
    price = ModelPrice(input_per_mtok=4.0, output_per_mtok=20.0)
    usage = TokenUsage(0, 0, M, M, M, 3)
    assert price.cost_usd(usage) == pytest.approx(0.4 + 5.0 + 8.0 + 0.03)


def test_override_only_table_leaves_everything_else_unpriced():
    table = PriceTable({"x": ModelPrice(1.0, 1.0)}, use_genai_prices=False)
    assert table.lookup("claude-sonnet-4-5-20250929")[1] is PricingSource.UNPRICED


def test_dated_prices_use_the_given_date():
    table = PriceTable(at=datetime(2025, 12, 1, tzinfo=UTC))
    price, source = table.lookup("claude-opus-4-5-20251101")
    assert source is PricingSource.PRICE_TABLE and price.input_per_mtok == 5.0


@pytest.mark.parametrize(
    ("total", "split_5m", "split_1h", "main_loop_1h", "expected"),
    [
        (100, 60, 40, 0, (60, 40)),  # rule 1: the CLI's per-model split is exact
        (240, 0, 0, 0, (240, 0)),  # rule 1: unsplit remainder priced at 5m (localcli-24 reproduces the CLI)
        (100, None, None, 0, (100, 0)),  # rule 2: no split, nothing says 1h → 5m, the API default
        (100, None, None, 30, (70, 30)),  # rule 2: the main loop's 1h writes
        (100, None, None, 500, (0, 100)),  # rule 2: capped at the model's total
        (0, None, None, 0, (0, 0)),
    ],
)
def test_split_cache_writes(total, split_5m, split_1h, main_loop_1h, expected):
    write_5m, write_1h = split_cache_writes(total, split_5m, split_1h, main_loop_1h)
    assert (write_5m, write_1h) == expected
    assert write_5m + write_1h >= total  # never loses a token


def test_preload_loads_the_table_up_front():
    from helix_runner.domain.pricing import preload

    preload()
    assert PriceTable().lookup("claude-haiku-4-5-20251001")[1] is PricingSource.PRICE_TABLE
