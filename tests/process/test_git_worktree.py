"""Workspaces with real git: worktree creation, artifacts, retention and the startup sweep."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest
from support.git_repos import sh

from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.errors import RunnerError
from helix_runner.process.git_worktree import branch_name, plan_workspace, sweep


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    (r / "sub").mkdir(parents=True)
    sh(r, "init", "-q", "-b", "main")
    (r / "shared.txt").write_text("original\n")
    (r / "sub" / "keep.txt").write_text("keep\n")
    (r / ".gitignore").write_text("*.log\n")
    sh(r, "add", "-A")
    sh(r, "commit", "-q", "-m", "base")
    return r


def plan(repo: Path, tmp_path: Path, phase: str, **kw):
    values = dict(mode="GIT_WORKTREE", workdir=repo, job_id="j", phase_id=phase, base_ref="", retention="REMOVE",
                  roots=(tmp_path,), data_dir=tmp_path / "data", recording_dir=tmp_path / "rec" / phase)
    values.update(kw)
    return plan_workspace(**values)


def test_worktree_phase_changes_become_artifacts_and_retention_removes_it(repo, tmp_path):
    ws = plan(repo, tmp_path, "p1", workdir=repo / "sub")
    asyncio.run(ws.create())
    assert ws.cwd == ws.worktree_path / "sub" and ws.cwd.is_dir()
    assert sh(ws.worktree_path, "rev-parse", "--abbrev-ref", "HEAD").strip() == "helix/j/p1"
    (ws.worktree_path / "shared.txt").write_text("changed by p1\n")
    (ws.worktree_path / "new.txt").write_text("a\nb\n")
    (ws.worktree_path / "noise.log").write_text("ignored\n")
    (ws.worktree_path / "sub" / "keep.txt").unlink()
    artifacts = asyncio.run(ws.collect())
    assert artifacts.git_available and artifacts.base_commit == sh(repo, "rev-parse", "HEAD").strip()
    assert artifacts.final_commit == ""  # nothing committed
    assert [(f.path, f.status, f.lines_added, f.lines_deleted) for f in artifacts.changed_files] == [
        ("new.txt", "A", 2, 0), ("shared.txt", "M", 1, 1), ("sub/keep.txt", "D", 0, 1)]
    assert "+changed by p1" in artifacts.diff and not artifacts.diff_truncated
    assert ws.diff_path.read_bytes().decode() == artifacts.diff
    # The main worktree and its index are untouched.
    assert (repo / "shared.txt").read_text() == "original\n"
    assert sh(repo, "status", "--porcelain") == ""
    asyncio.run(ws.release(PhaseStatus.SUCCEEDED))
    assert not ws.worktree_path.exists() and not ws.manifest_path.exists()
    assert "helix/j/p1" in sh(repo, "branch", "--list", "helix/*")  # the branch stays
    # Issue 22 item 5: the job's directory under <data-dir>/worktrees/ went empty and stayed.
    assert list((tmp_path / "data" / "worktrees").iterdir()) == []


def test_a_jobs_directory_stays_while_another_of_its_worktrees_is_kept(repo, tmp_path):
    removed, kept = plan(repo, tmp_path, "gone", retention="REMOVE"), plan(repo, tmp_path, "kept", retention="KEEP")
    for ws in (removed, kept):
        asyncio.run(ws.create())
    for ws in (removed, kept):
        asyncio.run(ws.release(PhaseStatus.SUCCEEDED))
    job_dir = tmp_path / "data" / "worktrees" / "j"
    assert sorted(p.name for p in job_dir.iterdir()) == ["kept", "kept.json"]
    assert sweep(tmp_path / "data") == {} and job_dir.is_dir()  # kept: left alone, its directory too


def test_a_commit_in_the_worktree_is_the_final_commit(repo, tmp_path):
    ws = plan(repo, tmp_path, "p2", retention="REMOVE_ON_SUCCESS")
    asyncio.run(ws.create())
    (ws.worktree_path / "shared.txt").write_text("committed\n")
    sh(ws.worktree_path, "commit", "-q", "-am", "phase work")
    artifacts = asyncio.run(ws.collect())
    assert artifacts.final_commit == sh(ws.worktree_path, "rev-parse", "HEAD").strip() != artifacts.base_commit
    assert [f.path for f in artifacts.changed_files] == ["shared.txt"]
    assert ws.with_retention(artifacts, PhaseStatus.FAILED).worktree_kept
    asyncio.run(ws.release(PhaseStatus.FAILED))
    assert ws.worktree_path.is_dir()  # kept for a look, the manifest says so
    assert json.loads(ws.manifest_path.read_text())["state"] == "kept"
    assert sweep(tmp_path / "data") == {}  # a kept worktree stays kept


def test_in_place_diff_is_what_the_phase_changed_not_what_was_dirty_before(repo, tmp_path):
    (repo / "shared.txt").write_text("dirty before the phase\n")
    ws = plan(repo, tmp_path, "p3", mode="IN_PLACE")
    asyncio.run(ws.create())
    (repo / "added.txt").write_text("x\n")
    artifacts = asyncio.run(ws.collect())
    assert [(f.path, f.status) for f in artifacts.changed_files] == [("added.txt", "A")]
    assert sh(repo, "status", "--porcelain").splitlines() == [" M shared.txt", "?? added.txt"]  # index untouched


def test_non_git_directory_says_no_diff_is_available(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    ws = plan(plain, tmp_path, "p4", mode="IN_PLACE")
    asyncio.run(ws.create())
    artifacts = asyncio.run(ws.collect())
    assert not artifacts.git_available and "not inside a git repository" in artifacts.unavailable_reason
    with pytest.raises(RunnerError, match="needs a git repository"):
        plan(plain, tmp_path, "p5")


def test_bad_base_ref_and_taken_branch_are_refused_before_anything_is_made(repo, tmp_path):
    with pytest.raises(RunnerError, match="not a commit"):
        plan(repo, tmp_path, "p6", base_ref="no-such-branch")
    sh(repo, "branch", branch_name("j", "p7"))
    with pytest.raises(RunnerError, match="already exists"):
        plan(repo, tmp_path, "p7")
    outside = tmp_path / "roots-elsewhere"
    outside.mkdir()
    with pytest.raises(RunnerError, match="outside the workspace roots"):
        plan(repo, tmp_path, "p8", roots=(outside,))
    assert not (tmp_path / "data").exists()


def test_branch_names_from_ids_are_legal_refs():
    for job, phase in [("a:b", "..x"), ("job.lock", "p."), (".hidden", "ok")]:
        name = branch_name(job, phase)
        subprocess.run(["git", "check-ref-format", "--branch", name], check=True, capture_output=True)


def test_sweep_after_a_crash_applies_the_policy_and_removes_half_made_worktrees(repo, tmp_path):
    removed = plan(repo, tmp_path, "crash-remove", retention="REMOVE")
    kept = plan(repo, tmp_path, "crash-keep", retention="REMOVE_ON_SUCCESS")
    for ws in (removed, kept):
        asyncio.run(ws.create())  # state "active": the server died while the phase ran
    half = plan(repo, tmp_path, "half")
    half._write_manifest("creating")  # died between the manifest and `git worktree add` finishing
    sh(repo, "branch", half.branch, half.base_commit)
    half.worktree_path.mkdir(parents=True)
    actions = sweep(tmp_path / "data")
    assert actions == {str(removed.worktree_path): "removed", str(kept.worktree_path): "kept",
                       str(half.worktree_path): "removed"}
    assert not removed.worktree_path.exists() and kept.worktree_path.is_dir() and not half.worktree_path.exists()
    assert half.branch not in sh(repo, "branch", "--list")  # the empty branch of the half-made one is gone
    assert removed.branch in sh(repo, "branch", "--list")
    listed = sh(repo, "worktree", "list", "--porcelain")
    assert str(kept.worktree_path) in listed and str(removed.worktree_path) not in listed
    # Only the kept one's job directory is left (all three are of job "j"); a job with nothing left goes.
    other = plan(repo, tmp_path, "crash-other", job_id="other", retention="REMOVE")
    asyncio.run(other.create())
    sweep(tmp_path / "data")
    assert sorted(p.name for p in (tmp_path / "data" / "worktrees").iterdir()) == ["j"]


def test_every_path_and_ref_an_error_names_is_in_its_metadata(repo, tmp_path):
    """Issue 22 item 4: the contract promises every dynamic value of a message in the ErrorInfo
    metadata; a non-git directory and a missing base_ref carried only `field`."""
    plain = tmp_path / "plain"
    plain.mkdir()
    sh(repo, "branch", branch_name("j", "taken"))
    outside = tmp_path / "roots-elsewhere"
    outside.mkdir()
    cases = [
        (dict(workdir=plain, phase_id="a"), [plain]),
        (dict(workdir=repo, phase_id="b", base_ref="no-such-branch"), ["no-such-branch", repo]),
        (dict(workdir=repo, phase_id="taken"), [branch_name("j", "taken"), repo]),
        (dict(workdir=repo, phase_id="c", roots=(outside,)), [repo]),
    ]
    for change, values in cases:
        with pytest.raises(RunnerError) as caught:
            plan(change.pop("workdir"), tmp_path, change.pop("phase_id"), **change)
        err = caught.value
        assert "field" in err.metadata, err
        for value in map(str, values):
            assert value in err.message and value in err.metadata.values(), (err.message, err.metadata)


def test_the_diff_file_replaces_a_symlink_planted_in_its_place_instead_of_writing_through_it(repo, tmp_path):
    """A phase that can write into its recording directory must not make the server overwrite
    another file (found by the attack suite: `open(..., "wb")` followed the link)."""
    ws = plan(repo, tmp_path, "p1")
    asyncio.run(ws.create())
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    ws.diff_path.parent.mkdir(parents=True, exist_ok=True)
    ws.diff_path.symlink_to(victim)
    (ws.worktree_path / "shared.txt").write_text("changed\n")
    artifacts = asyncio.run(ws.collect())
    assert victim.read_text() == "keep me\n"
    assert not ws.diff_path.is_symlink() and ws.diff_path.read_bytes().decode() == artifacts.diff
    assert "+changed" in artifacts.diff


def test_a_directory_git_could_not_find_a_repository_from_costs_no_git_run(repo, tmp_path, monkeypatch):
    # A phase's start asks for the repository of its working directory; outside any (no `.git`,
    # nothing that looks like a git directory, at or above it) the answer is known without git.
    from helix_runner.process import git_worktree

    plain = tmp_path / "plain" / "deeper"
    plain.mkdir(parents=True)
    bare = tmp_path / "bare.git"
    sh(tmp_path, "init", "-q", "--bare", str(bare))
    (tmp_path / "dangling").mkdir()
    (tmp_path / "dangling" / ".git").symlink_to(tmp_path / "nowhere")
    (tmp_path / "via-link").symlink_to(repo / "sub")  # git walks the physical path
    ran: list[Path] = []
    real_git = git_worktree.git
    monkeypatch.setattr(git_worktree, "git", lambda cwd, *args, **kw: ran.append(cwd) or real_git(cwd, *args, **kw))

    assert git_worktree.repo_toplevel(plain) is None
    assert ran == []
    assert git_worktree.repo_toplevel(repo / "sub") == repo.resolve()
    assert git_worktree.repo_toplevel(tmp_path / "via-link") == repo.resolve()
    # Where git might find one, git answers (a bare repository has no top level; a dangling link no repository).
    assert git_worktree.repo_toplevel(bare) is None
    assert git_worktree.repo_toplevel(tmp_path / "dangling") is None
    assert ran == [repo / "sub", tmp_path / "via-link", bare, tmp_path / "dangling"]
