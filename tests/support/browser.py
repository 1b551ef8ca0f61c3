"""The real browser for the dashboard's tests: Debian's chromium (scripts/install-browser), driven by Playwright."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def chromium_path() -> str | None:
    """``HELIX_CHROMIUM``, else ``chromium`` on PATH (Playwright's own browser download is not used)."""
    explicit = os.environ.get("HELIX_CHROMIUM")
    if explicit:
        return explicit
    return shutil.which("chromium") or shutil.which("chromium-browser")


def artifacts_dir(name: str) -> Path:
    """Where a test leaves screenshots for people: ``$HELIX_TEST_ARTIFACTS/<name>`` (default ``test-artifacts/``)."""
    base = Path(os.environ.get("HELIX_TEST_ARTIFACTS") or REPO / "test-artifacts")
    path = base / name
    path.mkdir(parents=True, exist_ok=True)
    return path
