"""The server's own git never runs what a phase planted in its repository (issue 30, item 1).

A phase allowed to change its git config (``allow_repository_config_writes``; without it the config
is read-only inside a phase, but not before this wave, and the user may allow it) plants every
family of git-config(1) and gitattributes(5) that runs a program: clean, smudge and process
filters, textconv and diff drivers, an external diff, fsmonitor, pager, editor, ssh command, gpg
with ``commit.gpgSign``, a credential helper, askpass, a merge driver, a proxy command, an included
config file, hooks (through ``core.hooksPath`` and ``.git/hooks``), a filter and a diff driver named
``x=y`` (which a ``-c`` override cannot name) and aliases shadowing the server's commands; another
phase points its repository's ``core.worktree`` at a directory outside the workspace. The server then runs its own
git on that repository: the phase's diff (a snapshot through a private index, so the filters see
the changed files), and a second phase's git worktree made from it, diffed and removed. Each
planted program touches a marker on the host; judged by the markers, in every sandbox mode, with
the server as root and as nobody (support/phase_box.py).
"""

from __future__ import annotations

import pytest
from support.box_battery import OUTSIDE_SECRET

from helix.runner.v1 import resources_pb2 as res

pytestmark = [pytest.mark.real_cli, pytest.mark.slow, pytest.mark.timeout(1800)]


def test_the_servers_git_runs_nothing_a_phase_planted(boxed):
    planted = boxed.phase("hostgit")
    assert planted.result is not None and planted.result.status == res.PHASE_STATUS_SUCCEEDED, (boxed.who,
                                                                                                  planted.ended)
    assert planted.reports.get("config", {}).get("ok"), (boxed.who, "the config was not planted", planted.reports)
    assert boxed.effects["host_git_markers"] == [], (boxed.who, "programs the server's git ran",
                                                     boxed.effects["host_git_markers"])


def test_the_diff_and_the_worktree_still_work_on_the_planted_repository(boxed):
    planted, worktree = boxed.phase("hostgit"), boxed.phase("hostgit-wt")
    changed = {f.path for f in planted.result.artifacts.changed_files}
    assert {"a.txt", "b.p", "c.i", "e.e"} <= changed, (boxed.who, changed, planted.result.artifacts.unavailable_reason)
    assert worktree.result is not None and worktree.result.status == res.PHASE_STATUS_SUCCEEDED, (boxed.who,
                                                                                                    worktree.ended)
    assert "d.txt" in {f.path for f in worktree.result.artifacts.changed_files}, (boxed.who,
                                                                                   worktree.result.artifacts)


def test_the_servers_git_stays_in_the_phases_working_tree(boxed):
    """The planted ``core.worktree`` points at a directory outside the workspace: the server's
    snapshot would read it into the phase's diff (and a rewind's ``clean`` delete its files)."""
    redirect = boxed.phase("hostgit-redirect")
    assert redirect.result is not None and redirect.result.status == res.PHASE_STATUS_SUCCEEDED, (boxed.who,
                                                                                                    redirect.ended)
    art = redirect.result.artifacts
    changed = {f.path for f in art.changed_files}
    assert "secret.txt" not in changed and OUTSIDE_SECRET not in art.diff, (boxed.who, changed)
    assert changed == {"w.txt"}, (boxed.who, changed, art.unavailable_reason)
