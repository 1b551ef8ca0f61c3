"""ForkPhase end to end: the real CLI against the scripted Messages API (docs/fork-and-rewind.md).

A phase makes four tool calls, each writing one file in its worktree. Forks of it start from a
checkpoint: the scripted API answers a request only when the history it carries is exactly the one
expected (``RequestMatcher.tool_use_ids``), so a fork whose model saw more (or less) than the turns
up to its point gets the fallback reply, which the tests refuse.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from support.git_repos import make_repo, sh
from support.phase_box import MODES, sandbox_config
from support.runner_server import collect

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.api.errors import error_info
from helix_runner.offline import Reply
from helix_runner.offline.script import RequestMatcher, Usage
from helix_runner.phases.fork import FORK_CONTINUATION

pytestmark = [pytest.mark.real_cli, pytest.mark.slow]

CALLS = [f"toolu_call{i}" for i in range(1, 5)]
USAGE = Usage(input_tokens=100, output_tokens=20)


def original_turns() -> list[Reply]:
    """Four calls (call i writes f<i>.txt), then the answer; each turn only for the history it follows."""
    turns = [Reply.tool_use("Bash", {"command": f"echo {i} > f{i}.txt", "description": f"write f{i}"},
                            tool_use_id=CALLS[i - 1], usage=USAGE,
                            match=RequestMatcher(tool_use_ids=tuple(CALLS[:i - 1]), not_contains=FORK_CONTINUATION))
             for i in range(1, 5)]
    turns.append(Reply.text("All four written.", usage=USAGE,
                            match=RequestMatcher(tool_use_ids=tuple(CALLS), not_contains=FORK_CONTINUATION)))
    return turns


def fork_turns() -> list[Reply]:
    """The fork after call 2: one call of its own, then its answer."""
    return [
        Reply.tool_use("Bash", {"command": "echo fork > fork.txt", "description": "fork"}, tool_use_id="toolu_fork1",
                       usage=USAGE, match=RequestMatcher(tool_use_ids=tuple(CALLS[:2]), contains=FORK_CONTINUATION)),
        Reply.text("Fork done.", usage=USAGE, match=RequestMatcher(tool_use_ids=(*CALLS[:2], "toolu_fork1"))),
    ]


def denied_turns() -> list[Reply]:
    """A fork with call 2 denied: the model's request carries the denial as call 2's result."""
    return [Reply.text("Understood, not writing f2.", usage=USAGE,
                       match=RequestMatcher(tool_use_ids=tuple(CALLS[:2]), contains="not that file, fork"))]


def files(path: Path) -> set[str]:
    return {p.name for p in path.iterdir() if p.name.endswith(".txt")}


def tokens(cost: res.PhaseCost) -> tuple[int, int]:
    return sum(m.tokens.input_tokens for m in cost.models), sum(m.tokens.output_tokens for m in cost.models)


async def _original(runner) -> res.PhaseResult:
    _, result = await runner.run_phase(
        "Write four files", job_id="job-f", phase_id="orig", deadline=120, allowed_tools=["Bash"],
        workspace=pb.WORKSPACE_MODE_GIT_WORKTREE, worktree_retention=pb.WORKTREE_RETENTION_KEEP)
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    return result


# Every sandbox mode: checkpoints write a private index and hidden refs from the server, a fork's
# worktree is made by the server; the phases themselves see their repository's git dir read-only.
@pytest.mark.parametrize("mode", list(MODES))
async def test_a_fork_at_call_2_sees_turns_1_2_only_has_their_files_and_pays_its_own_turns(
        claude_binary, scripted_api, runner_factory, mode):
    api = scripted_api([*original_turns(), *fork_turns()])
    async with runner_factory(api, **sandbox_config(mode)) as runner:
        make_repo(runner.workdir)
        orig = await _original(runner)
        orig_worktree = Path(orig.artifacts.worktree_path)
        orig_tip = sh(runner.workdir, "rev-parse", "helix/job-f/orig").strip()
        inspection = (await runner.stub.InspectPhase(pb.InspectPhaseRequest(job_id="job-f", phase_id="orig"),
                                                     timeout=10)).inspection
        calls = [c for c in inspection.checkpoints if c.kind == res.CHECKPOINT_KIND_TOOL_CALL]
        assert [(c.tool_use_id, c.turn) for c in calls] == [(t, i) for i, t in enumerate(CALLS, 1)]
        assert all(c.workspace.kind == res.CHECKPOINT_WORKSPACE_KIND_GIT_COMMIT and c.workspace.ref for c in calls)

        forked = await runner.stub.ForkPhase(pb.ForkPhaseRequest(
            job_id="job-f", phase_id="orig", new_phase_id="fork-2", point=pb.ForkPoint(tool_use_id=CALLS[1])),
            timeout=30)
        assert forked.checkpoint.tool_use_id == CALLS[1] and forked.phase.forked_from.phase_id == "orig"
        events, result = await collect(runner.stub.WatchPhase(
            pb.WatchPhaseRequest(job_id="job-f", phase_id="fork-2"), timeout=120))
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        assert [r.describe() for r in api.fallback_requests()] == []  # every request's history was the one expected
        served = [r for r in api.message_requests() if r.session_id == result.session_id]
        assert [r.label or r.turn_index for r in served] == [5, 6]  # the fork's two turns, nothing else
        # Its own session, its own worktree at the checkpoint: the files of calls 1-2, then its own.
        assert result.session_id and result.session_id != orig.session_id
        fork_worktree = Path(result.artifacts.worktree_path)
        assert fork_worktree != orig_worktree
        assert files(fork_worktree) == {"f1.txt", "f2.txt", "fork.txt", "shared.txt"}
        assert [f.path for f in result.artifacts.changed_files] == ["fork.txt"]  # against the checkpoint
        # The original is untouched: its branch, its files.
        assert sh(runner.workdir, "rev-parse", "helix/job-f/orig").strip() == orig_tip
        assert files(orig_worktree) == {"f1.txt", "f2.txt", "f3.txt", "f4.txt", "shared.txt"}
        # Cost per phase: the fork pays for its own two requests only (the scripted usage), the
        # original for its five.
        assert tokens(result.cost) == (200, 40)
        assert tokens(orig.cost) == (500, 100)
        job = (await runner.stub.GetJob(pb.GetJobRequest(job_id="job-f"), timeout=10)).job
        fork = next(p for p in job.phases if p.phase_id == "fork-2")
        assert (fork.forked_from.phase_id, fork.forked_from.checkpoint) == ("orig", forked.checkpoint.number)
        assert tokens(fork.cost) == (200, 40)
        assert any(e.WhichOneof("payload") == "tool_call_started" and e.tool_call_started.tool_use_id == "toolu_fork1"
                   for e in events)


async def test_a_fork_denying_call_2_shows_the_model_the_denial_from_the_files_before_it(
        claude_binary, scripted_api, runner_factory):
    # The denial's turn first: the request it answers has calls 1-2 only, as the original's third has.
    api = scripted_api([*denied_turns(), *original_turns()])
    async with runner_factory(api) as runner:
        make_repo(runner.workdir)
        await _original(runner)
        await runner.stub.ForkPhase(pb.ForkPhaseRequest(
            job_id="job-f", phase_id="orig", new_phase_id="fork-deny",
            point=pb.ForkPoint(tool_use_id=CALLS[1], deny=pb.DenyDecision(message="not that file, fork"))), timeout=30)
        events, result = await collect(runner.stub.WatchPhase(
            pb.WatchPhaseRequest(job_id="job-f", phase_id="fork-deny"), timeout=120))
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        assert [r.describe() for r in api.fallback_requests()] == []
        (request,) = [r for r in api.message_requests() if r.session_id == result.session_id]
        assert "not that file, fork" in request.tool_result_text(CALLS[1])
        assert request.tool_results()[0]["is_error"] is True
        denied = [e.control for e in events if e.WhichOneof("payload") == "control"
                  and e.control.kind == ev.CONTROL_EVENT_KIND_TOOL_DENIED]
        assert [d.tool_use_id for d in denied] == [CALLS[1]]
        # The workspace before call 2: call 1's file only; call 2 never ran in the fork.
        assert files(Path(result.artifacts.worktree_path)) == {"f1.txt", "shared.txt"}
        assert tokens(result.cost) == (100, 20)


def edited_turns() -> list[Reply]:
    """A fork with call 2 edited: the model's history carries the edited input and its result."""
    return [Reply.text("Edited file written.", usage=USAGE,
                       match=RequestMatcher(tool_use_ids=tuple(CALLS[:2]), contains="edited > f2e.txt"))]


async def test_a_fork_editing_call_2_runs_the_new_input_on_the_files_before_it(
        claude_binary, scripted_api, runner_factory):
    api = scripted_api([*edited_turns(), *original_turns()])
    async with runner_factory(api) as runner:
        make_repo(runner.workdir)
        await _original(runner)
        await runner.stub.ForkPhase(pb.ForkPhaseRequest(
            job_id="job-f", phase_id="orig", new_phase_id="fork-edit",
            point=pb.ForkPoint(tool_use_id=CALLS[1], edit=pb.EditDecision(
                input_json='{"command": "echo edited > f2e.txt", "description": "edited"}'))), timeout=30)
        events, result = await collect(runner.stub.WatchPhase(
            pb.WatchPhaseRequest(job_id="job-f", phase_id="fork-edit"), timeout=120))
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        assert [r.describe() for r in api.fallback_requests()] == []
        # The edited command ran (not call 2's own), on the files from before call 2.
        assert files(Path(result.artifacts.worktree_path)) == {"f1.txt", "f2e.txt", "shared.txt"}
        served = [r for r in api.message_requests() if r.session_id == result.session_id]
        assert [r.label or r.turn_index for r in served] == [0]  # the edited turn's answer, nothing else
        assert tokens(result.cost) == (100, 20)
        edited = [e.control.tool_use_id for e in events if e.WhichOneof("payload") == "control"
                  and e.control.kind == ev.CONTROL_EVENT_KIND_TOOL_EDITED]
        assert edited == [CALLS[1]]


async def test_a_fork_names_a_checkpoint_that_exists(claude_binary, scripted_api, runner_factory):
    api = scripted_api(original_turns())
    async with runner_factory(api) as runner:
        make_repo(runner.workdir)
        await _original(runner)
        for point, reason in ((pb.ForkPoint(tool_use_id="toolu_nope"), "CHECKPOINT_NOT_FOUND"),
                              (pb.ForkPoint(turn=9), "CHECKPOINT_NOT_FOUND"),
                              (pb.ForkPoint(), "INVALID_FIELD")):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await runner.stub.ForkPhase(pb.ForkPhaseRequest(job_id="job-f", phase_id="orig", point=point),
                                            timeout=10)
            assert error_info(caught.value).reason == reason
