"""The server's own git (process/host_git.py): each family of programs a repository can name stays
unrun, by git's overrides alone and inside the helper sandbox; what a missed key would run is
contained by the sandbox (issue 30, item 1). Real git on real repositories; no CLI.
"""

from __future__ import annotations

import ast
import os
import socket
import subprocess
from pathlib import Path

import pytest

from helix_runner.process import git_worktree, host_git
from helix_runner.process.host_git import HOST_GIT, GitBox, HostGit

ROOT = Path(__file__).resolve().parents[2]
BWRAP = host_git.shutil.which("bwrap")
needs_bwrap = pytest.mark.skipif(BWRAP is None or GitBox(BWRAP).works() != "", reason="bubblewrap cannot run here")

FAMILIES = ("clean", "smudge", "process", "textconv", "diffcmd", "external", "fsmonitor", "pager", "editor",
            "ssh", "gpg", "credential", "askpass", "merge", "proxy", "include", "hook", "alternate")


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "core.hooksPath=/dev/null",
                    *args], cwd=cwd, check=True, capture_output=True)


def planted_repo(tmp_path: Path) -> tuple[Path, Path]:
    """A repository whose config, attributes, hooks and an included file name a program of every
    family, each touching ``markers/<family>``; files the filters and drivers apply to, committed
    and changed."""
    repo, markers = tmp_path / "repo", tmp_path / "markers"
    markers.mkdir()
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / ".gitattributes").write_text("*.txt filter=hx diff=hx merge=hx\n*.p filter=hp\n*.i filter=inc\n")
    for name in ("a.txt", "b.p", "c.i"):
        (repo / name).write_text(f"{name}\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "start")

    def run(name: str) -> str:
        return f"\"sh -c 'touch {markers}/{name}; cat'\""

    hooks = repo / ".hxhooks"
    hooks.mkdir()
    for hook in ("post-checkout", "reference-transaction", "post-index-change", "pre-commit", "post-commit",
                 "pre-auto-gc"):
        for where in (hooks, repo / ".git" / "hooks"):
            (where / hook).write_text(f"#!/bin/sh\ntouch {markers}/hook\n")
            (where / hook).chmod(0o755)
    (repo / ".hxinc").write_text(f"[filter \"inc\"]\n\tclean = {run('include')}\n")
    with open(repo / ".git" / "config", "a") as f:
        f.write(f"[core]\n\tfsmonitor = \"touch {markers}/fsmonitor\"\n\tpager = \"touch {markers}/pager; cat\"\n"
                f"\teditor = \"touch {markers}/editor\"\n\tsshCommand = \"touch {markers}/ssh\"\n"
                f"\taskPass = \"touch {markers}/askpass\"\n\tgitProxy = \"touch {markers}/proxy\"\n"
                f"\thooksPath = {hooks}\n\talternateRefsCommand = \"touch {markers}/alternate\"\n"
                f"[filter \"hx\"]\n\tclean = {run('clean')}\n\tsmudge = {run('smudge')}\n"
                f"[filter \"hp\"]\n\tprocess = \"touch {markers}/process\"\n"
                f"[diff \"hx\"]\n\ttextconv = \"touch {markers}/textconv\"\n\tcommand = \"touch {markers}/diffcmd\"\n"
                f"[diff]\n\texternal = \"touch {markers}/external\"\n"
                f"[merge \"hx\"]\n\tdriver = \"touch {markers}/merge\"\n"
                f"[gpg]\n\tprogram = \"touch {markers}/gpg\"\n[commit]\n\tgpgSign = true\n"
                f"[credential]\n\thelper = \"!touch {markers}/credential\"\n"
                f"[include]\n\tpath = {repo / '.hxinc'}\n[includeIf \"gitdir:/\"]\n\tpath = {repo / '.hxinc'}\n")
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "attributes").write_text("* diff=hx\n")
    return repo, markers


def change(repo: Path) -> None:
    """The phase's work: the files the filters and drivers apply to, changed."""
    for name in ("a.txt", "b.p", "c.i"):
        (repo / name).write_text(f"{name} changed\n")


def test_the_planted_repository_runs_every_family_for_a_plain_git(tmp_path):
    """The fixture is real: the same operations with plain git run the planted programs."""
    repo, markers = planted_repo(tmp_path)
    change(repo)
    env = {**os.environ, "GIT_INDEX_FILE": str(tmp_path / "index")}
    for name in ("a.txt", "b.p", "c.i"):  # one at a time: the failing process filter stops an add
        subprocess.run(["git", "add", "--", name], cwd=repo, env=env, capture_output=True, check=False)
    subprocess.run(["git", "diff", "HEAD"], cwd=repo, capture_output=True, check=False)
    assert {"clean", "process", "include", "fsmonitor"} <= set(os.listdir(markers)), os.listdir(markers)


def _servers_operations(repo: Path, data: Path) -> dict:
    """What the server does with a phase's repository: the in-place diff, a worktree made, its diff,
    the hand-over commit (gpgSign), its removal."""
    ws = git_worktree.PhaseWorkspace("IN_PLACE", repo, repo, diff_path=data / "in-place.diff")
    ws._create()
    change(repo)
    artifacts = ws._collect()
    worktree = git_worktree.PhaseWorkspace(
        "GIT_WORKTREE", repo, repo, base_commit=git_worktree.head_commit(repo), branch="helix/j/p",
        worktree_path=data / "worktrees" / "j" / "p", manifest_path=data / "worktrees" / "j" / "p.json",
        diff_path=data / "wt.diff")
    worktree._create()
    (worktree.worktree_path / "d.txt").write_text("new\n")
    wt_artifacts = worktree._collect()
    commit = worktree._hand_over()
    return {"in_place": artifacts, "worktree": wt_artifacts, "commit": commit}


@pytest.fixture
def runner(monkeypatch):
    """The process's runner, restored after the test."""
    box, note = HOST_GIT.box, HOST_GIT.box_note
    yield HOST_GIT
    HOST_GIT.box, HOST_GIT.box_note = box, note


def test_git_overrides_alone_run_no_family(tmp_path, runner):
    """Without the helper sandbox (a pod without bubblewrap): the command line and environment do it."""
    assert runner.configure(hidden=[], use_box=False) == "turned off"
    repo, markers = planted_repo(tmp_path)
    done = _servers_operations(repo, tmp_path / "data")
    assert os.listdir(markers) == []
    assert {f.path for f in done["in_place"].changed_files} >= {"a.txt", "b.p", "c.i"}
    assert "d.txt" in {f.path for f in done["worktree"].changed_files} and done["commit"]


@needs_bwrap
def test_inside_the_helper_sandbox_no_family_runs_and_the_work_is_done(tmp_path, runner):
    assert runner.configure(hidden=[tmp_path / "data"], visible=[tmp_path]) == ""
    repo, markers = planted_repo(tmp_path)
    (tmp_path / "data").mkdir()
    done = _servers_operations(repo, tmp_path / "data")
    assert os.listdir(markers) == []
    assert {f.path for f in done["in_place"].changed_files} >= {"a.txt", "b.p", "c.i"}
    assert "d.txt" in {f.path for f in done["worktree"].changed_files} and done["commit"]
    assert not (tmp_path / "data" / "worktrees" / "j" / "p").exists()


@needs_bwrap
def test_a_key_the_overrides_miss_runs_only_inside_the_box(tmp_path, monkeypatch):
    """Defence in depth: pretend the runner missed the filter drivers. The planted clean filter then
    runs, but in the box: it cannot read the hidden secret, write outside what the command writes,
    or reach the network."""
    monkeypatch.setattr(host_git, "drivers", lambda names: [])
    secret = tmp_path / "data" / "api-key"
    secret.parent.mkdir()
    secret.write_text("sk-ant-secret\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / ".gitattributes").write_text("* filter=evil\n")
    (repo / "f").write_text("x\n")
    program = (f"cat {secret} > .git/leak 2>&1; touch {outside}/wrote 2>/dev/null; "
               f"(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && touch .git/connected; touch .git/ran; cat")
    with open(repo / ".git" / "config", "a") as f:
        f.write(f"[filter \"evil\"]\n\tclean = \"bash -c '{program}'\"\n")
    runner = HostGit()
    assert runner.configure(hidden=[tmp_path / "data"], visible=[tmp_path]) == ""
    (tmp_path / "index.d").mkdir()
    runner.run(repo, "add", "-A", env={"GIT_INDEX_FILE": str(tmp_path / "index.d" / "index")})
    assert (repo / ".git" / "ran").exists(), "the missed filter did not run at all"
    assert "sk-ant-secret" not in (repo / ".git" / "leak").read_text()
    assert not (outside / "wrote").exists()
    assert not (repo / ".git" / "connected").exists()
    with pytest.raises(TimeoutError):
        listener.accept()
    listener.close()


def test_without_bubblewrap_the_runner_says_why_and_still_overrides(tmp_path):
    runner = HostGit()
    note = runner.configure(hidden=[], bwrap=str(tmp_path / "no-bwrap"))
    assert note.startswith("bubblewrap cannot run here") and runner.box is None
    repo, markers = planted_repo(tmp_path)
    change(repo)
    runner.run(repo, "add", "-A", env={"GIT_INDEX_FILE": str(tmp_path / "index")})
    assert os.listdir(markers) == []


def test_the_environment_carries_none_of_the_servers_variables(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-x")
    monkeypatch.setenv("GIT_DIR", "/elsewhere")
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", "'core.pager'='evil'")
    env = host_git.git_env({"GIT_INDEX_FILE": "/tmp/i"})
    assert "ANTHROPIC_API_KEY" not in env and "GIT_DIR" not in env and "GIT_CONFIG_PARAMETERS" not in env
    assert env["GIT_CONFIG_GLOBAL"] == "/dev/null" and env["GIT_CONFIG_NOSYSTEM"] == "1"
    assert env["GIT_INDEX_FILE"] == "/tmp/i"


def test_driver_names_with_dots_are_emptied_whole():
    pairs = dict(host_git.drivers(["filter.a.b.clean", "diff.x.textconv", "merge.m.driver", "user.name"]))
    assert pairs["filter.a.b.clean"] == "" and pairs["filter.a.b.process"] == ""
    assert pairs["filter.a.b.required"] == "false" and pairs["diff.x.command"] == ""
    assert pairs["merge.m.driver"] == "" and not any(k.startswith("user.") for k in pairs)


def test_no_git_runs_outside_the_runner():
    """Every git process the server starts goes through host_git.py: no other module spawns git."""
    offenders = []
    for path in (ROOT / "server" / "helix_runner").rglob("*.py"):
        if path.name == "host_git.py":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value == "git":
                parent_lists = [n for n in ast.walk(tree) if isinstance(n, ast.List | ast.Tuple) and node in n.elts]
                if any(n.elts and n.elts[0] is node for n in parent_lists):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == [], offenders


@needs_bwrap
def test_removing_one_worktree_in_the_box_leaves_its_neighbour_registered(tmp_path, runner):
    """`git worktree prune` takes a worktree it cannot see for deleted: the phases' worktrees in the
    (hidden) data dir must stay visible to the box, or one phase's removal unregisters another's."""
    data = tmp_path / "data"
    (data / "worktrees").mkdir(parents=True)
    assert runner.configure(hidden=[data], visible=[tmp_path, git_worktree.worktrees_dir(data)]) == ""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "f").write_text("x\n")
    _git(repo, "add", "f")
    _git(repo, "commit", "-q", "-m", "f")
    spaces = {}
    for phase in ("a", "b"):
        spaces[phase] = git_worktree.PhaseWorkspace(
            "GIT_WORKTREE", repo, repo, base_commit=git_worktree.head_commit(repo), branch=f"helix/j/{phase}",
            worktree_path=data / "worktrees" / "j" / phase, manifest_path=data / "worktrees" / "j" / f"{phase}.json",
            diff_path=tmp_path / f"{phase}.diff", retention="REMOVE")
        spaces[phase]._create()
    git_worktree._settle(spaces["a"].manifest_path, git_worktree.PhaseStatus.SUCCEEDED)
    (spaces["b"].worktree_path / "g").write_text("y\n")
    assert [f.path for f in spaces["b"]._collect().changed_files] == ["g"]
