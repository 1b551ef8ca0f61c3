"""Workspaces and artifacts end to end: the real CLI, driven by the scripted Messages API.

Two phases on one repository each get a git worktree on their own branch, change the same file
differently, and report exactly that; the main worktree is never touched; retention removes the
worktrees, and a server killed mid-phase has its leftover settled at the next start.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import grpc
import pytest
from support.git_repos import full_diff, make_repo, sh
from support.processes import serving_port, start_serve

from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix.runner.v1 import runner_service_pb2_grpc as pb_grpc
from helix_runner.api.errors import error_info
from helix_runner.offline import Reply

pytestmark = pytest.mark.real_cli

# Each phase writes its own worktree's name (= its phase id) into the same file, and commits it.
WRITE_AND_COMMIT = ('basename "$PWD" > shared.txt && '
                    'git -c user.name=phase -c user.email=phase@example.invalid commit -qam "$(basename "$PWD")"')


async def _gone(path: Path, limit: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + limit
    for _ in iter(path.exists, False):
        assert asyncio.get_running_loop().time() < deadline, f"{path} still there after {limit} s"
        await asyncio.sleep(0.02)


async def test_two_worktree_phases_on_one_repository(claude_binary, scripted_api, runner_factory):
    api = scripted_api([Reply.tool_use("Bash", {"command": WRITE_AND_COMMIT}), Reply.text("Wrote it.")])
    async with runner_factory(api) as runner:
        repo = make_repo(runner.workdir)
        base = sh(repo, "rev-parse", "HEAD").strip()
        options = dict(allowed_tools=["Bash"], workspace=pb.WORKSPACE_MODE_GIT_WORKTREE,
                       worktree_retention=pb.WORKTREE_RETENTION_REMOVE)
        (_, a), (_, b) = await asyncio.gather(
            runner.run_phase("write", job_id="job-w", phase_id="p-a", deadline=90, **options),
            runner.run_phase("write", job_id="job-w", phase_id="p-b", deadline=90, **options))
        for result, phase in ((a, "p-a"), (b, "p-b")):
            assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
            art = result.artifacts
            assert art.git_available and art.base_commit == base and art.branch == f"helix/job-w/{phase}"
            assert art.final_commit and art.final_commit == sh(repo, "rev-parse", art.branch).strip()
            assert sh(repo, "show", f"{art.branch}:shared.txt") == f"{phase}\n"
            assert [(f.path, f.status, f.lines_added, f.lines_deleted) for f in art.changed_files] == [
                ("shared.txt", "M", 1, 1)]
            assert f"-original\n+{phase}\n" in art.diff and not art.diff_truncated
            # Retention REMOVE: the worktree goes (the branch and the stored diff stay). The removal
            # follows the result (phases/service.py _drive), so it is waited for, bounded.
            assert not art.worktree_kept
            await _gone(Path(art.worktree_path))
            assert (await full_diff(runner.stub, "job-w", phase, page_size=37)).decode() == art.diff
        assert a.artifacts.worktree_path != b.artifacts.worktree_path
        # The main worktree never changed, and git knows no other worktree now.
        assert (repo / "shared.txt").read_text() == "original\n" and sh(repo, "status", "--porcelain") == ""
        assert sh(repo, "rev-parse", "HEAD").strip() == base
        assert sh(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
        # GetJob carries the same artifacts.
        job = (await runner.stub.GetJob(pb.GetJobRequest(job_id="job-w"), timeout=10)).job
        assert {p.phase_id: p.result.artifacts.branch for p in job.phases} == {
            "p-a": "helix/job-w/p-a", "p-b": "helix/job-w/p-b"}


async def test_outside_git_there_is_no_diff_and_add_dirs_are_confined(claude_binary, scripted_api, runner_factory,
                                                                       tmp_path):
    api = scripted_api([Reply.text("Nothing to do.")])
    extra = tmp_path / "extra"
    extra.mkdir()
    async with runner_factory(api) as runner:
        _, result = await runner.run_phase("hi", job_id="job-n", phase_id="p", add_dirs=[str(extra)])
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        assert not result.artifacts.git_available
        assert "no diff is available" in result.artifacts.unavailable_reason
        argv = list(result.diagnostics.argv)
        assert argv[argv.index("--add-dir") + 1] == str(extra.resolve())
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await runner.stub.GetPhaseDiff(pb.GetPhaseDiffRequest(job_id="job-n", phase_id="p"), timeout=10)
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert error_info(caught.value).reason == "DIFF_NOT_AVAILABLE"

        for add_dirs, reason in (([os.path.dirname(str(tmp_path))], "WORKING_DIR_OUTSIDE_ROOTS"),
                                 (["relative/dir"], "INVALID_FIELD"), (["-rf"], "INVALID_FIELD")):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await runner.run_phase("hi", job_id="job-n", phase_id="bad", add_dirs=add_dirs)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            info = error_info(caught.value)
            assert (info.reason, info.metadata["field"]) == (reason, "options.add_dirs")
        with pytest.raises(grpc.aio.AioRpcError) as caught:  # GIT_WORKTREE needs a repository
            await runner.run_phase("hi", job_id="job-n", phase_id="bad", workspace=pb.WORKSPACE_MODE_GIT_WORKTREE)
        assert error_info(caught.value).metadata["field"] == "options.workspace"
        # Refused before anything was recorded: the id is still free.
        job = (await runner.stub.GetJob(pb.GetJobRequest(job_id="job-n"), timeout=10)).job
        assert [p.phase_id for p in job.phases] == ["p"]


@pytest.mark.parametrize("retention", ["REMOVE", "REMOVE_ON_SUCCESS"])
async def test_server_killed_mid_phase_then_restarted_settles_the_worktree(claude_binary, tmp_path, retention):
    repo = make_repo(tmp_path / "work")
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [
        {"content": [{"type": "tool_use", "name": "Bash",
                      "input": {"command": "echo half > shared.txt; python3 -c 'import time; time.sleep(300)'"}}]},
        {"content": [{"type": "text", "text": "never"}]}]}))
    args = ("--offline-script", str(script))
    log1 = tmp_path / "serve1.log"
    proc = start_serve(tmp_path, log1, *args)
    worktree = tmp_path / "data" / "worktrees" / "job-k" / "p"
    try:
        port = await asyncio.to_thread(serving_port, log1, proc, 30)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.RunnerServiceStub(channel)
            options = pb.PhaseOptions(allowed_tools=["Bash"], workspace=pb.WORKSPACE_MODE_GIT_WORKTREE,
                                      worktree_retention=pb.WorktreeRetention.Value(f"WORKTREE_RETENTION_{retention}"))
            call = stub.RunPhase(pb.RunPhaseRequest(job_id="job-k", phase_id="p", prompt="x", working_dir=str(repo),
                                                    options=options), timeout=90)
            async for response in call:
                if any(e.HasField("tool_call_started") for e in response.events):
                    break
            for _ in range(100):  # the tool has written into the worktree
                if (worktree / "shared.txt").read_text() == "half\n":
                    break
                await asyncio.sleep(0.1)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert worktree.is_dir()  # the dead server left it
    log2 = tmp_path / "serve2.log"
    proc2 = start_serve(tmp_path, log2, *args)
    try:
        await asyncio.to_thread(serving_port, log2, proc2, 30)
        if retention == "REMOVE":
            assert not worktree.exists()
            assert str(worktree) not in sh(repo, "worktree", "list", "--porcelain")
        else:  # the phase was INTERRUPTED, not SUCCEEDED: kept for a look, still a registered worktree
            assert (worktree / "shared.txt").read_text() == "half\n"
            assert str(worktree) in sh(repo, "worktree", "list", "--porcelain")
        assert "helix/job-k/p" in sh(repo, "branch", "--list")
        assert (repo / "shared.txt").read_text() == "original\n"
    finally:
        proc2.send_signal(signal.SIGTERM)
        proc2.wait(30)
