"""Workspace snapshots at checkpoints, on real repositories (process/checkpoint_git.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.git_repos import make_repo, sh

from helix_runner.domain.checkpoints import WorkspaceKind
from helix_runner.process.checkpoint_git import (
    WorkspaceSnapshots,
    checkpoint_ref,
    delete_refs,
    fork_commit,
    has_objects,
    restore,
)


def files_of(repo: Path, rev: str) -> dict[str, str]:
    names = sh(repo, "ls-tree", "-r", "--name-only", rev).split()
    return {n: sh(repo, "show", f"{rev}:{n}") for n in names}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = make_repo(tmp_path / "repo")
    (r / ".gitignore").write_text("*.log\n")
    sh(r, "add", "-A")
    sh(r, "commit", "-q", "-m", "ignore logs")
    return r


@pytest.mark.parametrize("watch", [True, False], ids=["watched", "staged-whole"])
def test_each_snapshot_holds_exactly_the_working_tree_then(repo: Path, tmp_path: Path, watch: bool) -> None:
    snaps = WorkspaceSnapshots(WorkspaceKind.GIT_COMMIT, repo, repo, tmp_path / "rec", "job", "ph", watch=watch)
    start = snaps.start()
    (repo / "a.txt").write_text("one\n")
    (repo / "shared.txt").write_text("changed\n")
    (repo / "x.log").write_text("ignored\n")
    first = snaps.take(1)
    (repo / "d" / "e").mkdir(parents=True)
    (repo / "d" / "e" / "deep.txt").write_text("deep\n")
    os.symlink("a.txt", repo / "link")
    (repo / "a.txt").unlink()
    second = snaps.take(2)
    third = snaps.take(3)  # nothing changed since
    snaps.close()
    assert files_of(repo, start.tree) == {".gitignore": "*.log\n", "shared.txt": "original\n"}
    assert files_of(repo, first.commit) == {".gitignore": "*.log\n", "a.txt": "one\n", "shared.txt": "changed\n"}
    assert files_of(repo, second.tree) == {".gitignore": "*.log\n", "d/e/deep.txt": "deep\n", "link": "a.txt",
                                           "shared.txt": "changed\n"}
    assert "120000" in sh(repo, "ls-tree", second.tree, "link")  # a symlink is kept as one, never followed
    assert third == second.__class__(**{**second.__dict__, "same_as": 2})  # deduplicated
    # A worktree checkpoint is a commit on HEAD under a hidden ref of its own; no branch, the index untouched.
    assert sh(repo, "rev-parse", checkpoint_ref("job", "ph", 2)).strip() == second.commit
    assert sh(repo, "rev-parse", f"{second.commit}^").strip() == sh(repo, "rev-parse", "HEAD").strip()
    assert sh(repo, "branch", "--list").split() == ["*", "main"]
    assert sh(repo, "diff", "--cached", "--name-only") == ""
    if watch:
        assert snaps.staged_everything == 1  # the start only: later snapshots staged just what changed


def test_a_removed_directory_is_staged_whole_and_in_place_keeps_trees_only(repo: Path, tmp_path: Path) -> None:
    (repo / "dir").mkdir()
    (repo / "dir" / "f.txt").write_text("f\n")
    snaps = WorkspaceSnapshots(WorkspaceKind.GIT_TREE, repo, repo, tmp_path / "rec", "job", "ph")
    start = snaps.start()
    for p in (repo / "dir").iterdir():
        p.unlink()
    (repo / "dir").rmdir()
    after = snaps.take(1)
    snaps.close()
    assert "dir/f.txt" in files_of(repo, start.tree) and "dir/f.txt" not in files_of(repo, after.tree)
    assert after.commit == "" and after.ref == ""
    assert sh(repo, "for-each-ref", "refs/helix") == ""  # the user's repository gets no ref in place
    commit = fork_commit(after, "job", "ph", 1)  # a fork's worktree starts from the tree on its HEAD
    assert sh(repo, "rev-parse", f"{commit}^{{tree}}").strip() == after.tree
    assert has_objects(after)


def test_restore_puts_the_tree_back_and_keeps_ignored_files(repo: Path, tmp_path: Path) -> None:
    snaps = WorkspaceSnapshots(WorkspaceKind.GIT_COMMIT, repo, repo, tmp_path / "rec", "job", "ph")
    snaps.start()
    (repo / "kept.txt").write_text("at the checkpoint\n")
    (repo / "shared.txt").write_text("edited then\n")
    at = snaps.take(1)
    (repo / "later.txt").write_text("after the checkpoint\n")
    (repo / "kept.txt").write_text("changed later\n")
    (repo / "x.log").write_text("ignored\n")
    sh(repo, "add", "later.txt")
    sh(repo, "commit", "-q", "-m", "a commit after the checkpoint")
    restore(at, repo)
    snaps.close()
    assert sh(repo, "rev-parse", "HEAD").strip() == at.head
    assert not (repo / "later.txt").exists()
    assert (repo / "kept.txt").read_text() == "at the checkpoint\n"
    assert (repo / "shared.txt").read_text() == "edited then\n"
    assert (repo / "x.log").read_text() == "ignored\n"
    assert sh(repo, "diff", "--cached", "--name-only") == ""  # the changes are back unstaged, as they were


def test_a_checkpoint_commit_not_written_yet_still_gives_a_fork_its_files(repo: Path, tmp_path: Path) -> None:
    snaps = WorkspaceSnapshots(WorkspaceKind.GIT_COMMIT, repo, repo, tmp_path / "rec", "job", "ph")
    snaps.start()
    (repo / "new.txt").write_text("new\n")
    snap = snaps.take(1)  # its commit and ref wait for the next batch
    assert sh(repo, "cat-file", "-t", snap.tree).strip() == "tree" and has_objects(snap)
    commit = fork_commit(snap, "job", "ph", 1)
    assert files_of(repo, commit)["new.txt"] == "new\n"
    snaps.flush()
    assert sh(repo, "rev-parse", checkpoint_ref("job", "ph", 1)).strip() == snap.commit  # the id promised
    assert fork_commit(snap, "job", "ph", 1) == snap.commit
    snaps.close()


def test_retention_deletes_a_phases_refs_only(repo: Path, tmp_path: Path) -> None:
    for phase in ("a", "b"):
        snaps = WorkspaceSnapshots(WorkspaceKind.GIT_COMMIT, repo, repo, tmp_path / phase, "job", phase)
        snaps.start()
        (repo / f"{phase}.txt").write_text(phase)
        snaps.take(1)
        snaps.close()
    assert delete_refs(repo, "job", "a") == 2
    assert sh(repo, "for-each-ref", "--format=%(refname)", "refs/helix").split() == [
        checkpoint_ref("job", "b", 0), checkpoint_ref("job", "b", 1)]


def test_no_repository_keeps_no_files_and_says_so(tmp_path: Path) -> None:
    snaps = WorkspaceSnapshots(WorkspaceKind.NONE, None, None, tmp_path, "job", "ph")
    snap = snaps.start()
    assert snap.kind is WorkspaceKind.NONE and "only the conversation" in snap.reason and not snap.kept


def _box_params():
    from helix_runner.process.host_git import GitBox, shutil
    from helix_runner.process.sandbox import landlock

    bwrap = shutil.which("bwrap")
    return [pytest.param("none"),
            pytest.param("bubblewrap", marks=pytest.mark.skipif(bwrap is None or GitBox(bwrap).works() != "",
                                                                reason="bubblewrap cannot run here")),
            pytest.param("landlock", marks=pytest.mark.skipif(landlock.abi() < 4, reason="no Landlock ABI 4+ here"))]


@pytest.mark.parametrize("box", _box_params())
def test_a_watched_checkpoint_stages_and_writes_its_tree_in_one_git_run(repo: Path, tmp_path: Path, box: str,
                                                                       monkeypatch) -> None:
    """Each start of the server's git costs a box start (bubblewrap, ~5 ms): the changed paths' add and
    the write-tree run as one (HostGit.run_then), in every box, with the same tree as two runs give."""
    from helix_runner.process.host_git import HOST_GIT

    saved = HOST_GIT.box, HOST_GIT.box_note, HOST_GIT.git_roots
    try:
        if box == "none":
            HOST_GIT.configure(hidden=[], use_box=False)
        else:
            assert HOST_GIT.configure(hidden=[tmp_path / "data"], visible=[tmp_path],
                                      bwrap=None if box == "bubblewrap" else "/nonexistent/bwrap") == ""
        snaps = WorkspaceSnapshots(WorkspaceKind.GIT_TREE, repo, repo, tmp_path / "rec", "job", "ph")
        snaps.start()
        runs: list[str] = []
        real_run, real_then = HOST_GIT.run, HOST_GIT.run_then
        monkeypatch.setattr(HOST_GIT, "run", lambda cwd, *args, **kw: runs.append(args[-1]) or real_run(cwd, *args, **kw))
        monkeypatch.setattr(HOST_GIT, "run_then",
                            lambda cwd, first, then, **kw: runs.append("then") or real_then(cwd, first, then, **kw))
        (repo / "a.txt").write_text("one\n")
        (repo / "x.log").write_text("ignored, and named by the watch\n")
        first = snaps.take(1)
        (repo / "shared.txt").write_text("again\n")
        second = snaps.take(2)
        snaps.close()
    finally:
        HOST_GIT.box, HOST_GIT.box_note, HOST_GIT.git_roots = saved
    assert runs == ["then", "then"] and snaps.staged_everything == 1  # the start's only
    assert files_of(repo, first.tree) == {".gitignore": "*.log\n", "a.txt": "one\n", "shared.txt": "original\n"}
    assert files_of(repo, second.tree) == {".gitignore": "*.log\n", "a.txt": "one\n", "shared.txt": "again\n"}
