"""What a phase may not change in its repository (process/sandbox/repo_guard.py): the layouts read
as git reads them, the protected paths of each, and the guard that puts back what a phase changed
where the sandbox could not keep it read-only (never following a link the phase planted)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from support.git_repos import make_repo

from helix_runner.process.sandbox.repo_guard import RepoGuard, layout, protection


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def test_layout_of_a_main_worktree_and_of_a_linked_one(tmp_path):
    repo = tmp_path / "repo"
    make_repo(repo)
    main = layout(repo)
    assert main is not None and main.git_dir == main.common_dir == (repo / ".git").resolve() and main.gitfile is None
    git(repo, "worktree", "add", "-q", "-b", "side", str(tmp_path / "side"))
    linked = layout(tmp_path / "side", common_dir=main.common_dir)
    assert linked is not None and linked.common_dir == main.common_dir
    assert linked.git_dir == main.common_dir / "worktrees" / "side" and linked.gitfile == tmp_path / "side" / ".git"
    assert layout(tmp_path) is None  # not a working tree's top


def test_a_gitfile_is_followed_only_into_the_repository_the_server_made_the_worktree_of(tmp_path):
    """What a .git file says was written by whoever wrote the repository (an earlier phase): followed
    blindly, the sandbox would bind another workspace's git directory into the phase's view."""
    repo, other = make_repo(tmp_path / "repo"), make_repo(tmp_path / "other-tenant")
    git(repo, "worktree", "add", "-q", "-b", "side", str(tmp_path / "side"))
    common = layout(repo).common_dir
    assert layout(tmp_path / "side") is None  # a gitfile in place: not followed at all
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / ".git").write_text(f"gitdir: {other / '.git'}\n")
    assert layout(planted, common_dir=common) is None
    (tmp_path / "side" / ".git").write_text(f"gitdir: {other / '.git'}\n")  # redirected after the fact
    assert layout(tmp_path / "side", common_dir=common) is None
    (repo / ".git" / "worktrees" / "side" / "commondir").write_text(f"{other / '.git'}\n")
    (tmp_path / "side" / ".git").write_text(f"gitdir: {common / 'worktrees' / 'side'}\n")
    assert layout(tmp_path / "side", common_dir=common) is None  # its commondir leads elsewhere
    (planted / ".git").unlink()
    (planted / ".git").symlink_to(other / ".git")
    assert layout(planted) is None  # a .git that is a link is not trusted either


def test_a_main_worktree_protects_config_hooks_info_worktrees_and_project_settings(tmp_path):
    repo = tmp_path / "repo"
    make_repo(repo)
    (repo / ".gitmodules").write_text("")
    (repo / ".mcp.json").write_text("{}")
    for name in ("hooks", "info"):  # a repository made without git's templates
        (repo / ".git" / name).rmdir() if not any((repo / ".git" / name).iterdir()) else None
    git(repo, "worktree", "add", "-q", "-b", "other", str(tmp_path / "other"))
    got = protection([layout(repo)], [repo])
    common = (repo / ".git").resolve()
    assert {str(common / n) for n in ("config", "hooks", "info", "worktrees")} <= set(got.paths)
    assert {str(repo / ".gitmodules"), str(repo / ".mcp.json")} <= set(got.paths)
    assert str(repo / ".claude" / "settings.json") not in got.paths  # missing: guarded, not bound
    assert str(repo / ".claude" / "settings.json") in got.guarded
    assert str(common / "worktrees" / "other" / "commondir") in got.guarded  # another worktree's redirect
    assert got.writable == ()
    assert (common / "hooks").is_dir() and (common / "info").is_dir()  # made, so that a bind has them


def test_a_linked_worktree_keeps_its_own_administration_writable_but_its_redirects_not(tmp_path):
    repo = tmp_path / "repo"
    make_repo(repo)
    git(repo, "worktree", "add", "-q", "-b", "mine", str(tmp_path / "mine"))
    linked = layout(tmp_path / "mine", common_dir=layout(repo).common_dir)
    got = protection([linked], [tmp_path / "mine"])
    assert got.writable == (str(linked.git_dir),)
    assert {str(linked.git_dir / "commondir"), str(linked.git_dir / "gitdir"),
            str(tmp_path / "mine" / ".git")} <= set(got.paths)


def test_a_symlinked_protected_entry_is_not_bound_but_its_target_is(tmp_path):
    repo = tmp_path / "repo"
    make_repo(repo)
    hooks = repo / ".git" / "hooks"
    if hooks.exists():
        subprocess.run(["rm", "-rf", str(hooks)], check=True)
    (repo / ".githooks").mkdir()
    hooks.symlink_to("../.githooks")
    got = protection([layout(repo)], [repo])
    assert str(hooks.resolve()) in got.paths and str(repo.resolve() / ".git" / "hooks") not in got.paths


def test_the_guard_puts_back_what_a_phase_changed_created_and_removed(tmp_path):
    repo = tmp_path / "repo"
    make_repo(repo)
    git_dir = repo / ".git"
    (git_dir / "hooks").mkdir(exist_ok=True)
    (git_dir / "hooks" / "pre-commit.sample").write_text("#!/bin/sh\n")
    config_before = (git_dir / "config").read_bytes()
    hooks_before = sorted(os.listdir(git_dir / "hooks"))
    got = protection([layout(repo)], [repo])
    guard = RepoGuard(got.guarded)
    # What a hostile phase does without bubblewrap:
    with open(git_dir / "config", "a") as f:
        f.write("[core]\n\tfsmonitor = touch /tmp/pwned\n")
    (git_dir / "hooks" / "post-checkout").write_text("#!/bin/sh\ntouch /tmp/pwned\n")
    (git_dir / "hooks" / "post-checkout").chmod(0o755)
    (git_dir / "hooks" / "pre-commit.sample").unlink()
    (git_dir / "info" / "attributes").write_text("* filter=evil\n")
    (repo / ".claude").mkdir()
    (repo / ".claude" / "settings.json").write_text('{"hooks": {}}')
    restored, failed = guard.restore()
    assert failed == []
    assert set(restored) == {str(git_dir / "config"), str(git_dir / "hooks"), str(git_dir / "info"),
                             str(repo / ".claude" / "settings.json")}
    assert (git_dir / "config").read_bytes() == config_before
    assert sorted(os.listdir(git_dir / "hooks")) == hooks_before and "post-checkout" not in hooks_before
    assert (git_dir / "hooks" / "pre-commit.sample").read_text() == "#!/bin/sh\n"
    assert not (git_dir / "info" / "attributes").exists()
    assert not (repo / ".claude" / "settings.json").exists()
    assert guard.restore() == ([], [])  # nothing left to put back


def test_the_guard_never_writes_through_a_link_the_phase_planted(tmp_path):
    repo = tmp_path / "repo"
    make_repo(repo)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("mine")
    hooks = repo / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "a.sample").write_text("sample")
    guard = RepoGuard(protection([layout(repo)], [repo]).guarded)
    subprocess.run(["rm", "-rf", str(hooks)], check=True)
    hooks.symlink_to(outside)  # so that a naive restore writes the samples into `outside`, or empties it
    restored, _ = guard.restore()
    assert str(hooks) in restored
    assert not hooks.is_symlink() and (hooks / "a.sample").read_text() == "sample"
    assert sorted(os.listdir(outside)) == ["keep"]


def test_a_guarded_directory_replaced_on_the_way_is_reported_not_followed(tmp_path):
    repo = tmp_path / "repo"
    make_repo(repo)
    guard = RepoGuard(protection([layout(repo)], [repo]).guarded)
    os.rename(repo / ".git", repo / ".git-moved")
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    (repo / ".git").symlink_to(decoy)
    restored, failed = guard.restore()
    assert str(repo / ".git" / "config") in failed
    assert os.listdir(decoy) == []  # nothing written into the link's target
