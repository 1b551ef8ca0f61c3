"""Fixtures for the stream-engine tests: the shared corpus of real CLI transcripts, and a replayer.

The corpus lives outside the repository (``$HELIX_CORPUS_DIR``, default ``<repo>/../shared/corpus``).
Tests that need it FAIL, not skip, when it is missing: a silently skipped conformance suite would
look green while checking nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from helix_runner.domain.events import Event
from helix_runner.domain.phase_stream import PhaseStream, PhaseStreamOptions
from helix_runner.domain.pricing import PriceTable

REPO_ROOT = Path(__file__).resolve().parents[2]
CORPUS_ENV = "HELIX_CORPUS_DIR"


def _corpus_location() -> Path:
    return Path(os.environ.get(CORPUS_ENV) or REPO_ROOT.parent / "shared" / "corpus")


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    """The corpus directory (it holds ``real/``); fails the test when it is not there."""
    base = _corpus_location()
    if not (base / "real").is_dir():
        pytest.fail(
            f"stream-json corpus not found: looked for {base / 'real'} "
            f"(set {CORPUS_ENV} to the directory holding real/)",
            pytrace=False,
        )
    return base


@pytest.fixture(scope="session")
def real_transcripts(corpus_dir: Path) -> dict[str, Path]:
    """Every CLI stdout transcript in ``real/`` by file name (driver wrappers and stdin logs left out)."""
    return {
        p.name: p
        for p in sorted((corpus_dir / "real").glob("*.jsonl"))
        if not p.name.endswith((".both.jsonl", ".stdin.jsonl"))
    }


@pytest.fixture(scope="session")
def price_table() -> PriceTable:
    """One genai-prices table for the session (loading it takes a moment)."""
    return PriceTable()


class FakeClock:
    """A deterministic nanosecond clock: each call advances by ``step`` (or set ``now`` directly)."""

    def __init__(self, start: int = 1_700_000_000_000_000_000, step: int = 1_000_000) -> None:
        self.now = start
        self.step = step

    def __call__(self) -> int:
        self.now += self.step
        return self.now


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


Replay = Callable[..., tuple[PhaseStream, list[Event]]]


@pytest.fixture
def replay(price_table: PriceTable) -> Replay:
    """``replay(data_or_path, chunk=65536, **options)`` → (finished PhaseStream, all its events)."""

    def run(
        source: bytes | Path,
        chunk: int | Iterable[int] = 65536,
        clock: Callable[[], int] | None = None,
        **options,
    ) -> tuple[PhaseStream, list[Event]]:
        data = source.read_bytes() if isinstance(source, Path) else source
        stream = PhaseStream(PhaseStreamOptions(**options), clock or FakeClock(), price_table=price_table)
        events: list[Event] = []
        sizes = iter([chunk]) if isinstance(chunk, int) else iter(chunk)
        size = next(sizes, 65536)
        pos = 0
        while pos < len(data):
            events += stream.feed(data[pos : pos + size])
            pos += size
            size = next(sizes, size)
        events += stream.finish()
        return stream, events

    return run
