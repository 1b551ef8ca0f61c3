"""Which Claude Code CLI the real-CLI tests run: the bundled one, or ``HELIX_TEST_CLAUDE``'s.

``HELIX_TEST_CLAUDE=$(scripts/fetch-cli) .venv/bin/python -m pytest -m real_cli`` runs them against
the newest CLI the registry serves (docs/testing.md, "Another CLI"): the in-process servers, the
``serve`` processes and the ``claude_binary`` fixture all take it.
"""

from __future__ import annotations

import os

ENV_VAR = "HELIX_TEST_CLAUDE"


def test_claude() -> str:
    """The CLI path the tests were told to use ("": the server's own choice, the bundled CLI)."""
    return os.environ.get(ENV_VAR, "")


test_claude.__test__ = False  # type: ignore[attr-defined]  # not a test, despite its name
