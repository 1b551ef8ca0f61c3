"""The fork, rewind and checkpoints verbs, and the lineage tree of `phases` (cli/fork.py)."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest
from support.cli_verbs import helix
from support.git_repos import make_repo
from support.runner_server import collect

from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.cli.common import CliError
from helix_runner.cli.fork import fork_point
from helix_runner.cli.render import lineage
from helix_runner.offline import Reply
from helix_runner.offline.script import RequestMatcher
from helix_runner.phases.fork import FORK_CONTINUATION


def _phase(pid: str, parent: str = ""):
    return SimpleNamespace(phase_id=pid, forked_from=SimpleNamespace(phase_id=parent) if parent else None)


def test_lineage_draws_each_fork_under_the_phase_it_came_from():
    phases = [_phase("a"), _phase("b"), _phase("a1", "a"), _phase("a2", "a"), _phase("a1x", "a1"), _phase("c", "gone")]
    assert [(branch + p.phase_id) for p, branch in lineage(phases)] == [
        "a", "├─ a1", "│  └─ a1x", "└─ a2", "b", "c"]


def _args(**kw):
    base = dict(at=None, turn=None, checkpoint=None, deny=None, edit=None, inject=None)
    return argparse.Namespace(**{**base, **kw})


def test_the_fork_point_of_the_flags():
    point = fork_point(_args(at="toolu_1", deny="no"))
    assert (point.tool_use_id, point.deny.message) == ("toolu_1", "no")
    point = fork_point(_args(turn=3, inject="try again"))
    assert (point.turn, point.inject) == (3, "try again")
    assert fork_point(_args(at="toolu_2", edit='{"command":"ls"}')).edit.input_json == '{"command":"ls"}'
    with pytest.raises(CliError, match="--at"):
        fork_point(_args(turn=2, deny="no"))


@pytest.mark.real_cli
async def test_fork_from_the_command_line_and_see_the_tree(claude_binary, scripted_api, runner_factory):
    calls = ("toolu_c1", "toolu_c2")
    api = scripted_api([
        Reply.tool_use("Bash", {"command": "echo 1 > f1.txt"}, tool_use_id=calls[0],
                       match=RequestMatcher(tool_use_ids=(), not_contains=FORK_CONTINUATION)),
        Reply.tool_use("Bash", {"command": "echo 2 > f2.txt"}, tool_use_id=calls[1],
                       match=RequestMatcher(tool_use_ids=calls[:1], not_contains=FORK_CONTINUATION)),
        Reply.text("both", match=RequestMatcher(tool_use_ids=calls, not_contains=FORK_CONTINUATION)),
        Reply.text("forked", match=RequestMatcher(tool_use_ids=calls[:1], contains="look again")),
    ])
    async with runner_factory(api) as runner:
        make_repo(runner.workdir)
        address = f"127.0.0.1:{runner.server.port}"
        _, result = await runner.run_phase("two files", job_id="cli-f", phase_id="orig", allowed_tools=["Bash"])
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        listed = await helix(address, "checkpoints", "cli-f", "orig")
        assert listed.code == 0 and any(calls[0] in line and "tree" in line for line in listed.lines)
        forked = await helix(address, "fork", "cli-f", "orig", "--at", calls[0], "--inject", "look again",
                             "--as", "again")
        assert forked.code == 0, forked.err
        assert "into cli-f/again" in forked.out and "helix-runner watch cli-f again" in forked.out
        _, fork_result = await collect(runner.stub.WatchPhase(pb.WatchPhaseRequest(job_id="cli-f", phase_id="again"),
                                                              timeout=60))
        assert fork_result.status == res.PHASE_STATUS_SUCCEEDED and api.fallback_requests() == []
        tree = await helix(address, "phases", "cli-f")
        rows = [line for line in tree.lines if "orig" in line or "again" in line]
        assert rows[0].lstrip().startswith("orig") and "└─ again (from orig@1)" in rows[1]
        refused = await helix(address, "rewind", "cli-f", "orig", "--turn", "1")
        assert refused.code != 0 and "ILLEGAL_TRANSITION" in refused.err
