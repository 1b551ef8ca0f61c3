"""Where the real-CLI transcripts are: the vendored subset, and the optional full external corpus.

``tests/fixtures/corpus/`` (``real/`` and ``examples/``, provenance in their ``SOURCES.md``) is part of
the repository. The full corpus is optional: ``$HELIX_CORPUS_DIR`` (the directory holding ``real/``),
else ``<repo>/../shared/corpus`` when that exists; a location that does not exist counts as none.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
VENDORED_CORPUS = REPO_ROOT / "tests" / "fixtures" / "corpus"
CORPUS_ENV = "HELIX_CORPUS_DIR"


def external_corpus() -> Path | None:
    """The full external corpus directory (it holds ``real/``), or None when there is none."""
    base = Path(os.environ.get(CORPUS_ENV) or REPO_ROOT.parent / "shared" / "corpus")
    return base if (base / "real").is_dir() else None


def stdout_transcripts(real: Path) -> dict[str, Path]:
    """CLI stdout transcripts in a ``real/`` directory by name (driver wrappers and stdin logs left out)."""
    return {
        p.name: p
        for p in sorted(real.glob("*.jsonl"))
        if not p.name.endswith((".both.jsonl", ".stdin.jsonl"))
    }
