"""The Anthropic API key, hunted from inside a phase.

The server runs as recommended: the key in its environment, key-helper mode, so the key is in no
phase's environment, argv or file; the CLI gets it from the server's key broker, which answers only
processes in the CLI's own session.
"""

from __future__ import annotations

import pytest
from support.attacks import api_key_evidence

pytestmark = [pytest.mark.real_cli, pytest.mark.slow, pytest.mark.timeout(600)]

# probe -> where it looks
HUNTS = {
    "own_cli_memory": "its own CLI's memory, through /proc/<cli>/mem and maps",
    "own_cli_environ": "its own CLI's environment (regression: key-helper mode keeps it out)",
    "server_environ": "the server's /proc/<pid>/environ (regression as nobody: non-dumpable)",
    "key_helper": "the CLI's apiKeyHelper command, run by the model (regression: not in the CLI's session)",
}


@pytest.mark.parametrize("probe", HUNTS)
def test_a_phase_cannot_get_the_api_key(attacked, probe):
    report = attacked.probe(probe)
    assert "out of time" not in report["note"], attacked.describe(probe)
    assert api_key_evidence(attacked.secrets["api_key"]) not in report["found"], attacked.describe(probe)


def test_an_mcp_server_planted_for_the_next_phase_cannot_get_the_api_key(attacked):
    """A ``.mcp.json`` (enabled by the workspace's ``.claude/settings.json``) whose stdio server runs
    the key helper: the project's next phase's CLI starts it in its own session, where the broker
    answers, and it leaves the key in the workspace."""
    attacked.probe("plant_workspace_hooks")
    assert api_key_evidence(attacked.secrets["api_key"]) not in attacked.effects["mcp_loot"], (
        attacked.effects["mcp_loot"])
