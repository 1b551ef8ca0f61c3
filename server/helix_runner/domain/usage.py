"""Token usage values: what the CLI reports a turn or a model consumed (``resources.proto`` TokenUsage).

Immutable ``msgspec.Struct``s (built in C, no GC tracking: they hold only numbers and strings), so
the parser can make several per stdout line cheaply.
"""

from __future__ import annotations

import msgspec


class TokenUsage(msgspec.Struct, frozen=True, gc=False):
    """Tokens by kind (``resources.proto`` TokenUsage); input excludes cache reads and writes."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_write_5m_input_tokens: int = 0
    cache_write_1h_input_tokens: int = 0
    web_search_requests: int = 0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
            self.cache_write_5m_input_tokens + other.cache_write_5m_input_tokens,
            self.cache_write_1h_input_tokens + other.cache_write_1h_input_tokens,
            self.web_search_requests + other.web_search_requests,
        )

    @property
    def total_tokens(self) -> int:
        """All tokens of every kind (web searches are requests, not tokens, and are left out)."""
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_input_tokens
            + self.cache_write_5m_input_tokens
            + self.cache_write_1h_input_tokens
        )


class ModelUsage(msgspec.Struct, frozen=True, gc=False):
    """One entry of ``result.modelUsage`` (subagents included; a running total for the process)."""

    model: str
    tokens: TokenUsage
    cost_usd: float | None = None
