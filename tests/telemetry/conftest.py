"""Telemetry under test: a tracer provider with an in-memory exporter, and a private metrics registry."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.telemetry import Spans

from helix_runner.telemetry import Telemetry


@pytest.fixture
def spans() -> Iterator[Spans]:
    s = Spans()
    yield s
    s.provider.shutdown()


@pytest.fixture
def telemetry(spans: Spans) -> Telemetry:
    """Tracing into ``spans`` and metrics in a registry of its own."""
    return Telemetry(tracer_provider=spans.provider)
