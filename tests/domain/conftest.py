"""Fixtures for the stream-engine tests: the corpus of real CLI transcripts, and a replayer.

The corpus comes in two parts:

* a vendored subset in ``tests/fixtures/corpus/``, always present: the tests that use it FAIL, not
  skip, if a file is missing, since a silently skipped conformance suite would look green while
  checking nothing;
* optionally, the full external corpus (``support/corpus.py`` says where it is looked for). Its
  extra transcripts are replayed too; facts about transcripts that are in neither place are
  skipped with a reason. An external location that does not exist is ignored, never an error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from support.corpus import VENDORED_CORPUS, external_corpus, stdout_transcripts

from helix_runner.domain.events import Event
from helix_runner.domain.phase_stream import PhaseStream, PhaseStreamOptions
from helix_runner.domain.pricing import PriceTable


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    """The vendored corpus directory (it holds ``real/`` and ``examples/``)."""
    if not (VENDORED_CORPUS / "real").is_dir():
        pytest.fail(f"vendored corpus missing: {VENDORED_CORPUS / 'real'}", pytrace=False)
    return VENDORED_CORPUS


@pytest.fixture(scope="session")
def vendored_transcripts(corpus_dir: Path) -> dict[str, Path]:
    """The vendored CLI stdout transcripts by file name."""
    return stdout_transcripts(corpus_dir / "real")


@pytest.fixture(scope="session")
def real_transcripts(vendored_transcripts: dict[str, Path]) -> dict[str, Path]:
    """Every available CLI stdout transcript by file name: the vendored ones, plus the external corpus's."""
    external = external_corpus()
    extra = stdout_transcripts(external / "real") if external else {}
    return {**extra, **vendored_transcripts}


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
