"""What a phase leaves behind for later, unrelated phases.

After the attacker's phase ended, two later phases run: one of another project in another
workspace, and the attacker's project's next job in the same workspace (both with an environment
variable the attacker never saw, which its hooks use to name the file they leave).
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.real_cli, pytest.mark.slow, pytest.mark.timeout(600)]


def test_hooks_planted_in_the_cli_user_configuration_do_not_run_in_later_phases(attacked):
    """Hooks in the CLI's user settings (the config dir the attacker's CLI uses, and the server's
    ``~/.claude``): they must not run in a later phase of another project or of the same one."""
    attacked.probe("plant_user_hooks")
    hooks = attacked.effects["hooks_run"]
    ran = [where for where, yes in hooks.items() if yes and where.startswith("user config")]
    assert not ran, hooks


def test_hooks_planted_in_the_workspace_settings_do_not_run_in_the_next_phase(attacked):
    """Hooks in the workspace's ``.claude/settings.json``: the project's next phase must not run them
    (unless its request asks for the workspace's settings)."""
    attacked.probe("plant_workspace_hooks")
    hooks = attacked.effects["hooks_run"]
    assert not hooks["workspace settings, in the project's next phase"], hooks


def test_tmp_is_not_shared_with_later_phases(attacked):
    """A file the attacker wrote into ``/tmp``: a later phase of another project reads it."""
    attacked.probe("write_tmp")
    assert attacked.secrets["tmp"] not in attacked.effects["later_output"], attacked.effects["later_output"]


@pytest.mark.parametrize("start_file, secret", [(".gitconfig", "gitcfg"), (".bashrc", "rc")])
def test_start_up_files_do_not_carry_into_later_phases(attacked, start_file, secret):
    """``~/.gitconfig`` (read by every git) and ``~/.bashrc`` (sourced by the CLI's Bash tool), in
    the attacker's HOME and the server's: a later phase of another project sees what it added."""
    attacked.probe("shell_persistence")
    assert attacked.secrets[secret] not in attacked.effects["later_output"], attacked.effects["later_output"]
