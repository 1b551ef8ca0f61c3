"""Forks and rewinds across replicas on PostgreSQL (docs/fork-and-rewind.md "Across replicas").

Two servers in this process on one database, each with its own scripted API, the real CLI, and one
workspace root both reach at the same path, marked shared. A phase that ran on replica A is forked
by B; a checkpoint made on A before a hand-over is rewound to on B after it.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
from support.git_repos import make_repo, sh
from support.runner_server import collect, start_runner

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.offline import Reply
from helix_runner.offline.script import RequestMatcher, Usage
from helix_runner.phases.fork import FORK_CONTINUATION

pytestmark = [pytest.mark.real_cli, pytest.mark.slow]

CALLS = [f"toolu_call{i}" for i in range(1, 5)]
USAGE = Usage(input_tokens=100, output_tokens=20)
SHARED_MARKER = ".helix-runner-shared"


@contextlib.asynccontextmanager
async def _two_replicas(tmp_path: Path, api_a, api_b, **settings):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    harness_a = start_runner(tmp_path / "a", api_a, replica_id="replica-a", **settings)
    harness_b = start_runner(tmp_path / "b", api_b, replica_id="replica-b", **settings)
    a = await anext(harness_a)
    b = await anext(harness_b)
    try:
        yield a, b
    finally:
        await harness_b.aclose()
        await harness_a.aclose()


def _calls(n: int, *, not_contains: str | None = FORK_CONTINUATION) -> list[Reply]:
    return [Reply.tool_use("Bash", {"command": f"echo {i} > f{i}.txt", "description": f"write f{i}"},
                           tool_use_id=CALLS[i - 1], usage=USAGE,
                           match=RequestMatcher(tool_use_ids=tuple(CALLS[:i - 1]), not_contains=not_contains))
            for i in range(1, n + 1)]


def _txt(path: Path) -> set[str]:
    return {p.name for p in path.iterdir() if p.name.endswith(".txt")}


async def test_a_replica_forks_a_phase_that_ran_on_another(claude_binary, scripted_api, postgres_url, tmp_path):
    shared = tmp_path / "shared"
    (shared / "repo").mkdir(parents=True)
    repo = make_repo(shared / "repo")
    (shared / SHARED_MARKER).write_text("")
    api_a = scripted_api([*_calls(4), Reply.text("All four.", usage=USAGE,
                                                 match=RequestMatcher(tool_use_ids=tuple(CALLS)))])
    api_b = scripted_api([
        Reply.tool_use("Bash", {"command": "echo b > fork.txt", "description": "fork"}, tool_use_id="toolu_fork_b",
                       usage=USAGE, match=RequestMatcher(tool_use_ids=tuple(CALLS[:2]), contains=FORK_CONTINUATION)),
        Reply.text("Fork done on B.", usage=USAGE, match=RequestMatcher(tool_use_ids=(*CALLS[:2], "toolu_fork_b")))])
    settings = {"workspace_roots": [str(shared)], "database_url": postgres_url}
    async with _two_replicas(tmp_path, api_a, api_b, **settings) as (a, b):
        _, orig = await collect(a.stub.RunPhase(pb.RunPhaseRequest(
            job_id="job-x", phase_id="orig", prompt="Write four files", working_dir=str(repo),
            options=pb.PhaseOptions(allowed_tools=["Bash"], workspace=pb.WORKSPACE_MODE_GIT_WORKTREE,
                                    worktree_retention=pb.WORKTREE_RETENTION_KEEP)), timeout=120))
        assert orig.status == res.PHASE_STATUS_SUCCEEDED, orig.reason
        tip = sh(repo, "rev-parse", "helix/job-x/orig").strip()
        forked = await b.stub.ForkPhase(pb.ForkPhaseRequest(job_id="job-x", phase_id="orig", new_phase_id="fork-b",
                                                            point=pb.ForkPoint(tool_use_id=CALLS[1])), timeout=30)
        assert forked.phase.forked_from.phase_id == "orig"
        _, result = await collect(b.stub.WatchPhase(pb.WatchPhaseRequest(job_id="job-x", phase_id="fork-b"),
                                                    timeout=120))
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        assert api_b.fallback_requests() == [] and len(api_b.message_requests()) == 2
        assert result.attempts[-1].replica_id == "replica-b"
        assert _txt(Path(result.artifacts.worktree_path)) == {"f1.txt", "f2.txt", "fork.txt", "shared.txt"}
        assert _txt(Path(orig.artifacts.worktree_path)) == {"f1.txt", "f2.txt", "f3.txt", "f4.txt", "shared.txt"}
        assert sh(repo, "rev-parse", "helix/job-x/orig").strip() == tip
        assert sum(m.tokens.input_tokens for m in result.cost.models) == 200
        # Any replica shows the lineage.
        job = (await a.stub.GetJob(pb.GetJobRequest(job_id="job-x"), timeout=10)).job
        assert {p.phase_id: p.forked_from.phase_id for p in job.phases} == {"orig": "", "fork-b": "orig"}


async def test_a_checkpoint_made_before_a_hand_over_is_rewound_to_after_it(
        claude_binary, scripted_api, postgres_url, tmp_path):
    shared = tmp_path / "shared"
    (shared / "repo").mkdir(parents=True)
    repo = make_repo(shared / "repo")
    (shared / SHARED_MARKER).write_text("")
    api_a = scripted_api([*_calls(3), Reply.text("never")])
    # B resumes the moved session (call 3, held at the move, closed as interrupted): the model calls it
    # again, held again; after the rewind to call 1 the session carries call 1 only.
    api_b = scripted_api([
        Reply.tool_use("Bash", {"command": "echo 3 > f3.txt", "description": "write f3"}, tool_use_id="toolu_again",
                       usage=USAGE, match=RequestMatcher(tool_use_ids=tuple(CALLS[:3]))),
        Reply.text("Rewound on B.", usage=USAGE, match=RequestMatcher(tool_use_ids=(CALLS[0],),
                                                                      contains=FORK_CONTINUATION))])
    settings = {"workspace_roots": [str(shared)], "database_url": postgres_url, "retry_max_attempts": 2}
    ids = {"job_id": "job-h", "phase_id": "p"}
    async with _two_replicas(tmp_path, api_a, api_b, **settings) as (a, b):
        bp = res.Breakpoint(breakpoint_id="third", input_pattern=res.InputPatternCondition(regex="f3"))
        call = a.stub.RunPhase(pb.RunPhaseRequest(**ids, prompt="Write files", working_dir=str(repo),
                                                  options=pb.PhaseOptions(allowed_tools=["Bash"], breakpoints=[bp])),
                               timeout=120)
        first = []
        async with asyncio.timeout(60):
            async for response in call:
                first.extend(response.events)
                if any(e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT
                       for e in response.events):
                    break
        await asyncio.wait_for(a.server.drain(30.0), 60)
        call.cancel()
        seen: list = []
        answer = None
        result = None
        async with asyncio.timeout(120):
            async for response in b.stub.WatchPhase(pb.WatchPhaseRequest(**ids, after_sequence=first[-1].sequence),
                                                    timeout=120):
                seen.extend(response.events)
                held_again = any(e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT
                                 for e in response.events)
                if held_again and answer is None:
                    # The checkpoint after call 1 was made on A, before the move.
                    answer = await b.stub.RewindPhase(pb.RewindPhaseRequest(
                        **ids, point=pb.ForkPoint(tool_use_id=CALLS[0])), timeout=60)
                if response.HasField("result"):
                    result = response.result
        assert answer is not None and result is not None
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        assert api_b.fallback_requests() == []
        assert _txt(repo) == {"f1.txt", "shared.txt"}  # call 2's file is gone again; call 3 never ran
        assert [a_.replica_id for a_ in result.attempts] == ["replica-a", "replica-b", "replica-b"]
        assert [a_.end_kind for a_ in result.attempts] == [res.ATTEMPT_END_KIND_MOVED, res.ATTEMPT_END_KIND_REWOUND,
                                                          res.ATTEMPT_END_KIND_COMPLETED]
