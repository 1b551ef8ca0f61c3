"""Prices per model: the maintained ``genai-prices`` table, a configurable override table, and flagging.

We compute our own cost from token counts so that the CLI's figure can be checked and so that a run
that ends without a ``result`` (the only line carrying the CLI's cost) still has a cost. The price
table is ``genai-prices`` (it dates its prices and has separate 5-minute and 1-hour cache-write
rates). A model it does not know is priced from ``overrides`` (model id → per-MTok prices); if that
fails too the model is *unpriced*: its cost is left out of the total and the model is flagged, never
silently counted as zero.

Long-context tiers: ``genai-prices`` has "cliff" tiers (e.g. Sonnet 4.5 above 200k input tokens)
that apply per *request*. We only see usage summed over many requests (``modelUsage``), which says
nothing about which request crossed a threshold, so we price at the base tier. For requests over the
threshold the computed figure is therefore low; the CLI-reported figure is shown next to it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from helix_runner.domain.usage import TokenUsage

_MTOK = 1_000_000.0


class PricingSource(enum.IntEnum):
    """Where a computed price came from (``resources.proto`` PricingSource)."""

    UNSPECIFIED = 0
    PRICE_TABLE = 1
    OVERRIDE = 2
    UNPRICED = 3


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """USD prices of one model per million tokens (and per web-search request).

    Cache prices default to Anthropic's published multipliers of the input price when not given:
    reads 0.1×, 5-minute writes 1.25×, 1-hour writes 2×.
    """

    input_per_mtok: float
    output_per_mtok: float
    cache_read_per_mtok: float | None = None
    cache_write_5m_per_mtok: float | None = None
    cache_write_1h_per_mtok: float | None = None
    web_search_per_request: float = 0.01

    def cost_usd(self, usage: TokenUsage) -> float:
        """Cost of ``usage`` at these prices."""
        inp = self.input_per_mtok
        cache_read = self.cache_read_per_mtok if self.cache_read_per_mtok is not None else inp * 0.1
        write_5m = self.cache_write_5m_per_mtok if self.cache_write_5m_per_mtok is not None else inp * 1.25
        write_1h = self.cache_write_1h_per_mtok if self.cache_write_1h_per_mtok is not None else inp * 2.0
        tokens_usd = (
            usage.input_tokens * inp
            + usage.output_tokens * self.output_per_mtok
            + usage.cache_read_input_tokens * cache_read
            + usage.cache_write_5m_input_tokens * write_5m
            + usage.cache_write_1h_input_tokens * write_1h
        ) / _MTOK
        return tokens_usd + usage.web_search_requests * self.web_search_per_request


class PriceTable:
    """Looks up a model's prices: override table first, then ``genai-prices``; results are cached.

    ``at`` fixes the date used for dated prices (default: now, at first lookup of each model).
    ``use_genai_prices=False`` restricts pricing to the override table (useful in tests).
    """

    def __init__(
        self,
        overrides: Mapping[str, ModelPrice] | None = None,
        *,
        at: datetime | None = None,
        use_genai_prices: bool = True,
    ) -> None:
        self._overrides = {k.lower(): v for k, v in (overrides or {}).items()}
        self._at = at
        self._use_genai_prices = use_genai_prices
        self._cache: dict[str, tuple[ModelPrice | None, PricingSource]] = {}

    def lookup(self, model: str) -> tuple[ModelPrice | None, PricingSource]:
        """Prices of ``model`` and their source; ``(None, UNPRICED)`` when nobody knows the model."""
        hit = self._cache.get(model)
        if hit is not None:
            return hit
        key = model.lower()
        override = self._overrides.get(key)
        if override is not None:
            found: tuple[ModelPrice | None, PricingSource] = (override, PricingSource.OVERRIDE)
        else:
            price = _from_genai_prices(key, self._at or datetime.now(UTC)) if self._use_genai_prices else None
            found = (price, PricingSource.PRICE_TABLE) if price else (None, PricingSource.UNPRICED)
        self._cache[model] = found
        return found

    def cost_usd(self, model: str, usage: TokenUsage) -> tuple[float, PricingSource]:
        """Cost of ``usage`` on ``model`` (0.0 with source UNPRICED when the model has no price)."""
        price, source = self.lookup(model)
        if price is None:
            return 0.0, source
        return price.cost_usd(usage), source


def preload() -> None:
    """Load genai-prices' table now (it takes most of a second) rather than at the first price lookup.

    The first lookup otherwise happens inside ``PhaseStream.feed`` when the first cost is computed;
    a server calls this once at startup so that no phase's event loop pays for it.
    """
    from genai_prices import data_snapshot

    data_snapshot.get_snapshot()


def _from_genai_prices(model: str, at: datetime) -> ModelPrice | None:
    """Base-tier prices of ``model`` from genai-prices' bundled snapshot, or None if unknown."""
    from genai_prices import data_snapshot  # imported lazily: loading the table takes ~100 ms

    snapshot = data_snapshot.get_snapshot()
    info = None
    for provider_id in ("anthropic", None):  # Claude ids first; then whatever provider matches
        try:
            _, info = snapshot.find_provider_model(model, None, provider_id, None)
            break
        except LookupError:
            continue
    if info is None:
        return None
    prices = info.get_prices(at)
    inp = _base(getattr(prices, "input_mtok", None))
    out = _base(getattr(prices, "output_mtok", None))
    if inp is None or out is None:
        return None
    web = _base(getattr(prices, "web_searches_kcount", None))
    return ModelPrice(
        input_per_mtok=inp,
        output_per_mtok=out,
        cache_read_per_mtok=_base(getattr(prices, "cache_read_mtok", None)),
        cache_write_5m_per_mtok=_base(getattr(prices, "cache_write_mtok", None)),
        cache_write_1h_per_mtok=_base(getattr(prices, "cache_write_1h_mtok", None)),
        web_search_per_request=web / 1000.0 if web is not None else 0.01,
    )


def _base(price: Any) -> float | None:
    """A genai-prices price as float: the base tier of tiered prices (see module docstring)."""
    if price is None:
        return None
    if isinstance(price, Decimal | int | float):
        return float(price)
    base = getattr(price, "base", None)
    return float(base) if base is not None else None


def split_cache_writes(
    total: int, split_5m: int | None, split_1h: int | None, main_loop_1h: int = 0
) -> tuple[int, int]:
    """Split one model's cache-write tokens into (5-minute, 1-hour) for pricing.

    The rule, from the most specific source the CLI gives to the least:

    1. ``modelUsage[model]`` carries ``cacheCreationEphemeral5mInputTokens`` /
       ``cacheCreationEphemeral1hInputTokens`` (CLI 2.1.x, corpus localcli-01): the 1-hour count is
       exact, and every other cache-write token (``cacheCreationInputTokens`` minus the 1-hour
       count) is priced at the 5-minute rate. This reproduces the CLI's own figure even where it
       reports a total with both split fields 0 (localcli-24: 240 tokens, both 0, priced at 1.25× input).
    2. Older CLIs (2.0.x) give only the unsplit ``cacheCreationInputTokens`` per model. The only
       split is ``result.usage.cache_creation`` — main loop only, subagents excluded
       (docs/claude-cli-protocol.md §0.3).
       The caller passes its 1-hour count as ``main_loop_1h`` for the model that ran the main loop
       (the one with the most cache writes) and 0 for the others; those 1-hour tokens (capped at the
       model's total) are priced at the 1-hour rate and the rest at the 5-minute rate, the API's
       default TTL. This never invents 1-hour writes the CLI did not report, never loses a token,
       and keeps the totals exactly as ``modelUsage`` reports them (subagents included).

    For assistant-line usage (a run without result), ``message.usage.cache_creation`` is per
    message and exact; ``cache_creation_input_tokens`` without it is priced at the 5-minute rate.
    """
    total = max(total, 0)
    if split_5m is not None or split_1h is not None:
        one_hour = max(split_1h or 0, 0)
        return max(total - one_hour, split_5m or 0, 0), one_hour
    one_hour = min(max(main_loop_1h, 0), total)
    return total - one_hour, one_hour
