"""Traps a phase leaves in its repository for the user, the server and later phases, judged by their
effect on the host (support/phase_box.py): in every sandbox mode, as root and as nobody, in place and
in a git worktree.

The model writes an fsmonitor, an alias and a textconv driver into the git config, hooks (and a whole
new hooks directory in place of the old), attributes that select its driver, a submodule URL that runs
a command, Claude Code settings with a hook and an ``.mcp.json``; in a worktree also a ``commondir``
and a ``.git`` file that point at a git directory of its own. Afterwards the test runs git in those
repositories as the server's user, outside any sandbox: each trap that survived runs ``touch`` on a
marker. Before the fix every trap ran in every mode. Commits, refs and the index must still work, and
``allow_repository_config_writes`` must let a phase change its config.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helix.runner.v1 import resources_pb2 as res

pytestmark = [pytest.mark.real_cli, pytest.mark.slow, pytest.mark.timeout(1800)]


def test_no_trap_left_in_a_repository_runs_later(boxed):
    assert boxed.effects["markers"] == [], (boxed.who, "traps that ran", boxed.effects["markers"],
                                            boxed.effects["git_runs"])


@pytest.mark.parametrize("repo", ["trap", "wtrepo"], ids=["in-place", "worktree"])
def test_the_protected_files_hold_what_they_held_before_the_phase(boxed, repo):
    before, after = boxed.effects["before"][repo], boxed.effects[f"after_{repo}"]
    changed = {path: (before[path], after[path]) for path in before if before[path] != after[path]}
    assert not changed, (boxed.who, changed)


def test_the_worktree_redirects_point_where_the_server_made_them(boxed):
    fx = boxed.effects
    assert fx["worktree"], (boxed.who, "no worktree was kept")
    own = Path(fx["worktree_gitfile"].removeprefix("gitdir:").strip())
    assert own.parent == Path(fx["wtrepo_common"]) / "worktrees", (boxed.who, fx["worktree_gitfile"])
    assert fx["worktree_commondir"] == "../..", (boxed.who, fx["worktree_commondir"])


@pytest.mark.parametrize("phase", ["repo-inplace", "repo-worktree"], ids=["in-place", "worktree"])
def test_work_in_the_repository_still_commits(boxed, phase):
    run = boxed.phase(phase)
    assert run.result is not None and run.result.status == res.PHASE_STATUS_SUCCEEDED, (boxed.who, run.ended)
    assert run.reports.get("commit", {}).get("ok"), (boxed.who, run.reports)


def test_a_phase_that_asks_may_change_its_git_config(boxed):
    run = boxed.phase("optin")
    assert run.result is not None and run.result.status == res.PHASE_STATUS_SUCCEEDED, (boxed.who, run.ended)
    assert "optin = yes" in boxed.effects["optin_config"], boxed.effects["optin_config"]
