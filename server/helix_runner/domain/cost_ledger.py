"""The cost of a phase: the CLI's reported figure and our own, side by side.

Rules (notes §0.3, §0.5, §7.4; corpus README):

* ``result.total_cost_usd`` and ``result.modelUsage`` are running totals for the process, and a
  process can write several results (queued turns, background subagents; CAP 09/16/17). The
  latest result wins; results are never summed.
* Our computed cost prices the latest result's ``modelUsage`` (subagents and compaction included)
  per model, plus the usage of API messages seen *after* that result, which it cannot cover yet.
  That usage comes from assistant lines, de-duplicated by ``message.id`` (one line per content
  block, all repeating the message_start usage; notes §0.2), with the output count raised by a
  later line or a ``stream_event`` ``message_delta`` of the same message.
* A phase without any result has only that assistant-line usage: its snapshot is
  ``computed_only`` (the CLI never reported a cost).
* A result without ``modelUsage`` (very old CLIs) does not reset the assistant-line usage, which
  then stays the basis of the computed figure.

Memory: assistant-line usage is kept only for messages after the latest result; the ids of
messages already covered by a result are remembered for the last 1,024 messages only (the lines of
one message are consecutive, so that is plenty to ignore a straggler line).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from helix_runner.domain.events import ModelUsage, TokenUsage, TurnResult
from helix_runner.domain.pricing import PriceTable, PricingSource, split_cache_writes

_COVERED_IDS_KEPT = 1024


@dataclass(frozen=True, slots=True)
class ModelCost:
    """Usage and cost of one model in the phase (mirrors ``resources.proto`` ModelCost)."""

    model: str
    tokens: TokenUsage
    reported_usd: float | None
    computed_usd: float
    pricing_source: PricingSource


@dataclass(frozen=True, slots=True)
class PhaseCostSnapshot:
    """Reported (latest result) and computed cost of a phase (mirrors ``resources.proto`` PhaseCost)."""

    reported_usd: float | None
    computed_usd: float
    difference_usd: float | None
    computed_only: bool
    tokens: TokenUsage
    models: tuple[ModelCost, ...]
    unpriced_models: tuple[str, ...]


class _MessageUsage:
    """Usage of one API message seen on assistant lines (input side fixed, output may grow)."""

    __slots__ = ("model", "input", "cache_read", "write_5m", "write_1h", "output", "searches")

    def __init__(self, model: str, usage: dict[str, Any]) -> None:
        self.model = model
        self.input = _count(usage.get("input_tokens"))
        self.cache_read = _count(usage.get("cache_read_input_tokens"))
        split = usage.get("cache_creation")
        total = _count(usage.get("cache_creation_input_tokens"))
        if split.__class__ is dict:
            self.write_5m, self.write_1h = split_cache_writes(
                total,
                _count(split.get("ephemeral_5m_input_tokens")),
                _count(split.get("ephemeral_1h_input_tokens")),
            )
        else:
            self.write_5m, self.write_1h = total, 0
        self.output = _count(usage.get("output_tokens"))
        server = usage.get("server_tool_use")
        self.searches = _count(server.get("web_search_requests")) if server.__class__ is dict else 0

    def tokens(self) -> TokenUsage:
        return TokenUsage(
            self.input, self.output, self.cache_read, self.write_5m, self.write_1h, self.searches
        )


def _count(value: Any) -> int:
    return value if value.__class__ is int and value > 0 else 0


class CostLedger:
    """Keeps the latest CLI-reported totals and computes our own cost from token usage."""

    def __init__(self, prices: PriceTable | None = None) -> None:
        self._prices = prices or PriceTable()
        self._reported_usd: float | None = None
        self._baseline: dict[str, ModelUsage] = {}  # latest result's modelUsage, by model
        self._pending: dict[str, _MessageUsage] = {}  # messages after the latest result, by id
        self._covered: deque[str] = deque(maxlen=_COVERED_IDS_KEPT)
        self._covered_set: set[str] = set()
        self._result_count = 0
        self._snapshot: PhaseCostSnapshot | None = None

    # ----------------------------------------------------------------------------------------------
    # Updates.

    def observe_message(self, message_id: str, model: str, usage: dict[str, Any]) -> bool:
        """Usage from an assistant line or ``message_start``; returns True for a new message."""
        known = self._pending.get(message_id)
        if known is not None:
            output = usage.get("output_tokens")
            if output.__class__ is int and output > known.output:  # 2.0.x lines may grow (HM-1)
                known.output = output
                self._snapshot = None
            return False
        if message_id in self._covered_set:
            return False
        self._pending[message_id] = _MessageUsage(model, usage)
        self._snapshot = None
        return True

    def observe_output(self, message_id: str, usage: dict[str, Any]) -> None:
        """Final output count of a message from a ``stream_event`` ``message_delta`` (notes §2.6)."""
        known = self._pending.get(message_id)
        output = usage.get("output_tokens")
        if known is not None and output.__class__ is int and output > known.output:
            known.output = output
            self._snapshot = None

    def on_result(self, result: TurnResult) -> None:
        """A ``result`` line: its totals replace the previous ones (latest wins, never summed)."""
        self._result_count += 1
        if result.total_cost_usd is not None:
            self._reported_usd = result.total_cost_usd
        if result.has_model_usage:
            self._baseline = {mu.model: mu for mu in result.model_usage}
            for message_id in self._pending:
                if len(self._covered) == self._covered.maxlen:
                    self._covered_set.discard(self._covered[0])
                self._covered.append(message_id)
                self._covered_set.add(message_id)
            self._pending = {}
        self._snapshot = None

    # ----------------------------------------------------------------------------------------------
    # Queries.

    @property
    def result_count(self) -> int:
        return self._result_count

    def snapshot(self) -> PhaseCostSnapshot:
        """The cost now (cached until the next change)."""
        if self._snapshot is None:
            self._snapshot = self._compute()
        return self._snapshot

    def _compute(self) -> PhaseCostSnapshot:
        tokens_by_model: dict[str, TokenUsage] = {m: mu.tokens for m, mu in self._baseline.items()}
        for message in self._pending.values():
            previous = tokens_by_model.get(message.model)
            usage = message.tokens()
            tokens_by_model[message.model] = usage if previous is None else previous + usage
        models = []
        unpriced = []
        computed = 0.0
        total_tokens = TokenUsage()
        for model in sorted(tokens_by_model):
            tokens = tokens_by_model[model]
            cost, source = self._prices.cost_usd(model, tokens)
            if source is PricingSource.UNPRICED:
                unpriced.append(model)
            computed += cost
            total_tokens = total_tokens + tokens
            baseline = self._baseline.get(model)
            models.append(ModelCost(model, tokens, baseline.cost_usd if baseline else None, cost, source))
        reported = self._reported_usd
        return PhaseCostSnapshot(
            reported_usd=reported,
            computed_usd=computed,
            difference_usd=None if reported is None else computed - reported,
            computed_only=self._result_count == 0,
            tokens=total_tokens,
            models=tuple(models),
            unpriced_models=tuple(unpriced),
        )
