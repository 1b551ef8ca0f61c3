"""The cost of a phase: the CLI's reported figure and our own, side by side.

Rules (docs/claude-cli-protocol.md §0.3, §0.5, §7.4; tests/fixtures/corpus/README.md):

* ``result.total_cost_usd`` and ``result.modelUsage`` are running totals for the process, and a
  process can write several results (queued turns, background subagents; corpus localcli-09, -16
  and -17). The latest result wins; results are never summed.
* Our computed cost prices the latest result's ``modelUsage`` (subagents and compaction included)
  per model, plus the usage of API messages seen *after* that result, which it cannot cover yet.
  That usage comes from assistant lines, de-duplicated by ``message.id`` (one line per content
  block, all repeating the message_start usage; docs/claude-cli-protocol.md §0.2), with the
  output count raised by a later line or a ``stream_event`` ``message_delta`` of the same message.
* A phase without any result has only that assistant-line usage: its snapshot is
  ``computed_only`` (the CLI never reported a cost).
* A result without ``modelUsage`` (very old CLIs) does not reset the assistant-line usage, which
  then stays the basis of the computed figure.

Memory: usage after the latest result is kept as rows (the usage objects themselves, at most
256) and summed per model only when a cost is computed or the rows fill up — usually a result
replaces them first, so most messages are never counted at all; message ids (to de-duplicate and
to apply a later output count) are remembered for the last 1,024 messages only — the lines of one
message are consecutive, so that is plenty.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from msgspec import UNSET

from helix_runner.domain.cost import ModelCost, PhaseCostSnapshot
from helix_runner.domain.events import TurnResult
from helix_runner.domain.pricing import PriceTable, PricingSource, split_cache_writes
from helix_runner.domain.stream_lines import Usage
from helix_runner.domain.usage import ModelUsage, TokenUsage

__all__ = ["CostLedger", "ModelCost", "PhaseCostSnapshot"]  # the values live in domain.cost

_RECENT_IDS_KEPT = 1024
_FOLD_ROWS = 256


def _count(value: Any) -> int:
    return value if value.__class__ is int and value > 0 else 0


def usage_counts(usage: Usage) -> list[int]:
    """A message's usage → [input, output, cache read, 5m writes, 1h writes, web searches].

    Raw or typed (``stream_lines.ApiUsage.counts``, the same rule for integer counts).
    """
    if usage.__class__ is dict:
        return _usage_counts(usage)  # type: ignore[arg-type]
    return usage.counts()  # type: ignore[union-attr]


def _usage_counts(usage: dict[str, Any]) -> list[int]:
    """Raw Messages-API usage → [input, output, cache read, 5m writes, 1h writes, web searches]."""
    get = usage.get
    inp = get("input_tokens", 0)
    out = get("output_tokens", 0)
    read = get("cache_read_input_tokens", 0)
    write = get("cache_creation_input_tokens", 0)
    if not (
        inp.__class__ is int and out.__class__ is int and read.__class__ is int and write.__class__ is int
    ):
        inp, out, read, write = _count(inp), _count(out), _count(read), _count(write)
    split = get("cache_creation")
    if write and split.__class__ is dict:
        five = split.get("ephemeral_5m_input_tokens")
        hour = split.get("ephemeral_1h_input_tokens")
        write_5m, write_1h = split_cache_writes(
            write,
            five if five.__class__ is int and five > 0 else 0,  # _count, inlined (one call a message)
            hour if hour.__class__ is int and hour > 0 else 0,
        )
    else:
        write_5m, write_1h = write, 0
    server = get("server_tool_use")
    searches = _count(server.get("web_search_requests")) if server.__class__ is dict else 0
    return [inp, out, read, write_5m, write_1h, searches]


class CostLedger:
    """Keeps the latest CLI-reported totals and computes our own cost from token usage."""

    def __init__(self, prices: PriceTable | None = None) -> None:
        self._prices = prices or PriceTable()
        self._reported_usd: float | None = None
        self._baseline: dict[str, ModelUsage] = {}  # latest result's modelUsage, by model
        # Usage of messages after the latest result: per-model sums (see _usage_counts) plus rows
        # not yet added in, which are folded in batches (sums in C) to keep observing cheap. A row
        # holds counts, or a message's raw usage object, counted only when folded (see _fold).
        self._pending: dict[str, list[int]] = {}
        self._rows: list[tuple[str, list[int] | Usage]] = []
        # The last _RECENT_IDS_KEPT message ids → [model, output so far, baseline generation]. A
        # message is covered by the baseline once a result with modelUsage came after it, i.e. when
        # its generation is older than the current one (a counter, so that a result does not have
        # to visit every remembered message).
        self._recent: dict[str, list[Any]] = {}
        self._generation = 0
        self._recent_order: deque[str] = deque()
        self._result_count = 0
        self._snapshot: PhaseCostSnapshot | None = None

    # ----------------------------------------------------------------------------------------------
    # Updates.

    def observe_message(self, message_id: str, model: str, usage: Usage) -> bool:
        """Usage from an assistant line or ``message_start``; returns True for a new message.

        ``usage`` is the line's raw usage object, or its typed form (``stream_lines.ApiUsage``).
        It is kept, not copied, until it is counted: pass an object nobody changes (the parsed
        line's, as PhaseStream does).
        """
        recent = self._recent
        known = recent.get(message_id)
        if usage.__class__ is dict:
            if known is not None:
                self._raise_output(known, usage.get("output_tokens"))  # 2.0.x lines may grow (HM-1)
                return False
            output = usage.get("output_tokens", 0)
            if output.__class__ is not int or output < 0:  # odd values: as _usage_counts counts them
                output = _usage_counts(usage)[1]  # type: ignore[arg-type]
        else:  # typed: the counts are integers (or the output count is UNSET when absent)
            output = usage.output_tokens  # type: ignore[union-attr]
            if known is not None:
                self._raise_output(known, output)
                return False
            if output is UNSET:
                output = 0
        recent[message_id] = [model, output, self._generation]
        order = self._recent_order
        order.append(message_id)
        if len(order) > _RECENT_IDS_KEPT:
            del recent[order.popleft()]
        rows = self._rows
        rows.append((model, usage))  # counted in _fold, if ever: a result usually drops it first
        if len(rows) >= _FOLD_ROWS:
            self._fold()
        self._snapshot = None
        return True

    def observe_output(self, message_id: str, usage: Usage) -> None:
        """Final output count of a message from a ``stream_event`` ``message_delta``.

        See docs/claude-cli-protocol.md §2.6.
        """
        known = self._recent.get(message_id)
        if known is not None:
            output = usage.get("output_tokens") if usage.__class__ is dict else usage.output_tokens  # type: ignore[union-attr]
            self._raise_output(known, output)

    def _raise_output(self, known: list[Any], output: Any) -> None:
        if output.__class__ is int and output > known[1]:
            if known[2] == self._generation:  # not yet covered by a result's modelUsage
                self._rows.append((known[0], [0, output - known[1], 0, 0, 0, 0]))
                self._snapshot = None
            known[1] = output

    def _fold(self) -> None:
        """Add the pending rows into the per-model sums."""
        by_model: dict[str, list[list[int]]] = {}
        for model, counts in self._rows:
            if counts.__class__ is not list:  # a message's usage (raw or typed), not counted yet
                counts = usage_counts(counts)  # type: ignore[arg-type]
            by_model.setdefault(model, []).append(counts)  # type: ignore[arg-type]
        self._rows = []
        for model, rows in by_model.items():
            sums = self._pending.get(model)
            if sums is not None:
                rows.append(sums)
            self._pending[model] = [sum(column) for column in zip(*rows, strict=True)]

    def on_result(self, result: TurnResult) -> None:
        """A ``result`` line: its totals replace the previous ones (latest wins, never summed)."""
        self._result_count += 1
        if result.total_cost_usd is not None:
            self._reported_usd = result.total_cost_usd
        if result.has_model_usage:
            self._baseline = {mu.model: mu for mu in result.model_usage}
            self._generation += 1  # every message seen so far is now covered
            self._pending = {}
            self._rows = []
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
        if self._rows:
            self._fold()
        tokens_by_model: dict[str, TokenUsage] = {m: mu.tokens for m, mu in self._baseline.items()}
        for model, counts in self._pending.items():
            previous = tokens_by_model.get(model)
            usage = TokenUsage(*counts)
            tokens_by_model[model] = usage if previous is None else previous + usage
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
