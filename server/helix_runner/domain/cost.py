"""Cost values of a phase: per model and in total, reported by the CLI and computed by us.

Plain values (``resources.proto`` ModelCost and PhaseCost); ``cost_ledger`` computes them and
``events.CostUpdate`` carries them.
"""

from __future__ import annotations

import msgspec

from helix_runner.domain.pricing import PricingSource
from helix_runner.domain.usage import TokenUsage


class ModelCost(msgspec.Struct, frozen=True, gc=False):
    """Usage and cost of one model in the phase (mirrors ``resources.proto`` ModelCost)."""

    model: str
    tokens: TokenUsage
    reported_usd: float | None
    computed_usd: float
    pricing_source: PricingSource


class PhaseCostSnapshot(msgspec.Struct, frozen=True, gc=False):
    """Reported (latest result) and computed cost of a phase (mirrors ``resources.proto`` PhaseCost)."""

    reported_usd: float | None
    computed_usd: float
    difference_usd: float | None
    computed_only: bool
    tokens: TokenUsage
    models: tuple[ModelCost, ...]
    unpriced_models: tuple[str, ...]
