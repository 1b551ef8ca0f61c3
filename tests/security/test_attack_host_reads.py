"""What the server moves, reads and deletes of what a phase wrote reaches nothing outside it, judged
on the host after real-CLI phases (support/host_reads_box.py), in every sandbox mode, with the
server as root and as nobody.

- The session store: a phase made its ``~/.claude/projects`` a link to another directory shaped like
  a phase's home. Before, the server's end-of-phase save followed the link and moved that
  directory's transcripts (here the victim's) into the attacker's project store, for the attacker's
  next phase to resume: the victim's files were gone from where they were and their bytes were in
  the store. It failed so on main in every mode with a sandbox (the ``off`` mode keeps no session
  store: its phases use the server's own HOME).
- Removal: the worktree (retention ``REMOVE``) and the private home, removed after the phase, hold
  links to a directory outside; only the links go. ``shutil.rmtree`` already worked on directory
  descriptors, so this passed on main too: it stays as the regression test of the new removal path.
"""

from __future__ import annotations

import asyncio

import pytest
from support.host_reads_box import HostReadsScenario
from support.phase_box import SCENARIOS, run_box_scenarios

from helix.runner.v1 import resources_pb2 as res

pytestmark = [pytest.mark.real_cli, pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def host_reads_outcomes(request, claude_binary) -> dict:
    wanted = [item.callspec.params["host_reads"] for item in request.session.items
              if "host_reads" in getattr(getattr(item, "callspec", None), "params", {})]
    return asyncio.run(run_box_scenarios(list(dict.fromkeys(wanted)), str(claude_binary.path), HostReadsScenario))


@pytest.fixture(scope="module", params=SCENARIOS, ids=[f"{mode}-{user}" for mode, user in SCENARIOS])
def host_reads(request, host_reads_outcomes):
    outcome = host_reads_outcomes[request.param]
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def planted(outcome, name: str) -> None:
    """The phase ran its command (the attack was made, not refused before it started)."""
    run = outcome.phase(name)
    outputs = [e.tool_call_finished.content_preview for e in run.events if e.HasField("tool_call_finished")]
    assert any("planted" in text for text in outputs), (outcome.who, name, run.ended, outputs)


def test_the_session_store_moves_nothing_from_where_a_link_points(host_reads):
    planted(host_reads, "sessions")
    fx = host_reads.effects
    lost = {path: size for path, size in fx["outside_lost"].items() if path.startswith("projects/")}
    assert not lost, (host_reads.who, "files moved out of a directory outside the phase", lost, fx["store_files"])
    assert not fx["store_has_secret"], (host_reads.who, "the victim's transcript is in the store", fx["store_files"])


def test_removing_a_worktree_and_a_home_deletes_nothing_a_link_in_them_points_at(host_reads):
    planted(host_reads, "removal")
    run = host_reads.phase("removal")
    assert run.result is not None and run.result.status == res.PHASE_STATUS_SUCCEEDED, (host_reads.who, run.ended)
    fx = host_reads.effects
    lost = {path: size for path, size in fx["outside_lost"].items() if path.startswith("keep/")}
    assert not lost, (host_reads.who, "files deleted outside the phase", lost)
    assert not [p for p in fx["worktrees_left"] if not p.endswith(".json")], (host_reads.who, fx["worktrees_left"])
