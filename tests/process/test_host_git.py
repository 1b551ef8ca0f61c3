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
from helix_runner.process.host_git import HOST_GIT, GitBox, GitError, HostGit
from helix_runner.process.sandbox import landlock

ROOT = Path(__file__).resolve().parents[2]
BWRAP = host_git.shutil.which("bwrap")
needs_bwrap = pytest.mark.skipif(BWRAP is None or GitBox(BWRAP).works() != "", reason="bubblewrap cannot run here")
LANDLOCK_ABI = landlock.abi()
needs_landlock = pytest.mark.skipif(LANDLOCK_ABI < 4, reason="no Landlock with TCP rules (ABI 4+) here")
# Each helper sandbox: bubblewrap where it runs, Landlock where it does not (configure falls back).
BOXES = [pytest.param("bubblewrap", marks=needs_bwrap), pytest.param("landlock", marks=needs_landlock)]


def configure(runner: HostGit, kind: str, hidden, visible) -> None:
    """Configures ``runner`` with the helper sandbox ``kind`` (Landlock: as if bubblewrap were missing)."""
    bwrap = None if kind == "bubblewrap" else "/nonexistent/bwrap"
    assert runner.configure(hidden=hidden, visible=visible, bwrap=bwrap) == ""
    assert runner.kind == kind

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
    box, note, roots, pins = HOST_GIT.box, HOST_GIT.box_note, HOST_GIT.git_roots, dict(HOST_GIT._pins)
    yield HOST_GIT
    HOST_GIT.box, HOST_GIT.box_note, HOST_GIT.git_roots, HOST_GIT._pins = box, note, roots, pins


def test_git_overrides_alone_run_no_family(tmp_path, runner):
    """Without the helper sandbox (a pod without bubblewrap): the command line and environment do it."""
    assert runner.configure(hidden=[], use_box=False) == "turned off"
    repo, markers = planted_repo(tmp_path)
    done = _servers_operations(repo, tmp_path / "data")
    assert os.listdir(markers) == []
    assert {f.path for f in done["in_place"].changed_files} >= {"a.txt", "b.p", "c.i"}
    assert "d.txt" in {f.path for f in done["worktree"].changed_files} and done["commit"]


@pytest.mark.parametrize("kind", BOXES)
def test_inside_the_helper_sandbox_no_family_runs_and_the_work_is_done(tmp_path, runner, kind):
    visible = [tmp_path] if kind == "bubblewrap" else [tmp_path / "repo", tmp_path / "markers", tmp_path / "data"]
    repo, markers = planted_repo(tmp_path)
    configure(runner, kind, [tmp_path / "data"], visible)
    (tmp_path / "data").mkdir()
    done = _servers_operations(repo, tmp_path / "data")
    assert os.listdir(markers) == []
    assert {f.path for f in done["in_place"].changed_files} >= {"a.txt", "b.p", "c.i"}
    assert "d.txt" in {f.path for f in done["worktree"].changed_files} and done["commit"]
    assert not (tmp_path / "data" / "worktrees" / "j" / "p").exists()


@pytest.mark.parametrize("kind", BOXES)
def test_a_key_the_overrides_miss_runs_only_inside_the_box(tmp_path, monkeypatch, kind):
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
    # Landlock hides nothing inside what it shows: its visible paths are the workspace, as a server's
    # roots are (the data dir outside them, as the server warns at start it should be).
    configure(runner, kind, [tmp_path / "data"], [tmp_path] if kind == "bubblewrap" else [repo])
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
    note = runner.configure(hidden=[], bwrap=str(tmp_path / "no-bwrap"), use_landlock=False)
    assert note.startswith("bubblewrap cannot run here") and "Landlock is not used" in note and runner.box is None
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


def _starts_git(node: ast.AST) -> bool:
    """A constant naming git as a program: ``"git"``, ``"/usr/bin/git"``, or a command line ``"git ..."``."""
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and (
        node.value.split(" ", 1)[0].rsplit("/", 1)[-1] == "git")


def git_starts(tree: ast.AST) -> list[int]:
    """Lines that start git: an argv list or tuple whose first element names git, or a call whose
    first argument does (``create_subprocess_exec("git", ...)``, ``os.execvp("git", ...)``,
    ``shutil.which("git")``)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.List | ast.Tuple) and node.elts and _starts_git(node.elts[0]):
            lines.append(node.lineno)
        elif isinstance(node, ast.Call) and node.args and _starts_git(node.args[0]):
            lines.append(node.lineno)
    return lines


def test_no_git_runs_outside_the_runner():
    """Every git process the server starts goes through host_git.py: no other module spawns git."""
    offenders = [f"{path.relative_to(ROOT)}:{line}"
                 for path in (ROOT / "server" / "helix_runner").rglob("*.py") if path.name != "host_git.py"
                 for line in git_starts(ast.parse(path.read_text()))]
    assert offenders == [], offenders
    # The check finds what it is for.
    sample = ('import asyncio, subprocess, shutil\nsubprocess.run(["git", "status"])\n'
              'asyncio.create_subprocess_exec("git", "diff")\nsubprocess.run("git status", shell=True)\n'
              'shutil.which("git")\nargv = ("/usr/bin/git", "add")\nprint("gitlab")\n')
    assert sorted(git_starts(ast.parse(sample))) == [2, 3, 4, 5, 6]


@pytest.mark.parametrize("kind", BOXES)
def test_removing_one_worktree_in_the_box_leaves_its_neighbour_registered(tmp_path, runner, kind):
    """`git worktree prune` takes a worktree it cannot see for deleted: the phases' worktrees in the
    (hidden) data dir must stay visible to the box, or one phase's removal unregisters another's."""
    data = tmp_path / "data"
    (data / "worktrees").mkdir(parents=True)
    configure(runner, kind, [data], [tmp_path / "repo", git_worktree.worktrees_dir(data)])
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


def test_a_driver_named_with_an_equals_sign_stays_unrun(tmp_path, runner):
    """``-c filter.x=y.clean=`` is read as the key ``filter.x``: a driver whose name holds ``=``
    escaped its override and ran (seen on the runner of -c overrides). Overrides alone, no box."""
    assert runner.configure(hidden=[], use_box=False) == "turned off"
    markers = tmp_path / "markers"
    markers.mkdir()
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / ".gitattributes").write_text("* filter=x=y diff=d=e\n")
    (repo / "f").write_text("x\n")
    with open(repo / ".git" / "config", "a") as f:
        f.write(f"[filter \"x=y\"]\n\tclean = \"sh -c 'touch {markers}/clean; cat'\"\n"
                f"[diff \"d=e\"]\n\ttextconv = \"sh -c 'touch {markers}/textconv; cat'\"\n")
    runner.run(repo, "add", "-A", env={"GIT_INDEX_FILE": str(tmp_path / "index")})
    tree = runner.run(repo, "write-tree", env={"GIT_INDEX_FILE": str(tmp_path / "index")}).decode().strip()
    (repo / "f").write_text("y\n")
    # The server's diff (its flags): an emptied driver would make git fail, not run a program.
    runner.run(repo, "diff", "--no-ext-diff", "--no-textconv", tree)
    assert os.listdir(markers) == []


def test_the_repositorys_core_worktree_does_not_move_the_servers_git(tmp_path, runner):
    """A phase sets ``core.worktree`` to a directory of the host: the server's ``add -A`` read it into
    the repository and its rewind's ``clean`` deleted its files (seen on the runner before the working
    tree was pinned). The server's git works on the tree it found by ``.git``."""
    assert runner.configure(hidden=[], use_box=False) == "turned off"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("sk-ant-outside\n")
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "work.txt").write_text("work\n")
    _git(repo, "config", "core.worktree", str(outside))
    index = {"GIT_INDEX_FILE": str(tmp_path / "index")}
    runner.run(repo, "add", "-A", env=index)
    listed = runner.run(repo, "ls-files", "-z", env=index).decode().split("\0")
    assert "work.txt" in listed and "secret.txt" not in listed
    runner.run(repo, "clean", "--quiet", "-d", "--force", writable=(repo,))
    assert (outside / "secret.txt").exists(), "the server's git deleted a file outside the repository"
    assert git_worktree.repo_toplevel(repo) == repo.resolve()


def test_only_the_servers_builtin_commands_run(tmp_path, runner):
    """No alias is ever looked up: every command the runner allows is a builtin of this git (an alias
    never shadows a builtin), and any other name is refused before git starts."""
    builtins = set(subprocess.run(["git", "--list-cmds=builtins"], capture_output=True, text=True,
                                  check=True).stdout.split())
    assert host_git.COMMANDS <= builtins, host_git.COMMANDS - builtins
    assert runner.configure(hidden=[], use_box=False) == "turned off"
    markers = tmp_path / "markers"
    markers.mkdir()
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    with open(repo / ".git" / "config", "a") as f:
        f.write(f"[alias]\n\thx = \"!touch {markers}/alias\"\n\tstatus = \"!touch {markers}/shadow\"\n")
    with pytest.raises(GitError, match="not a command the server runs"):
        runner.run(repo, "hx")
    with pytest.raises(GitError):
        runner.run(repo, "-c", "user.name=x", "status")
    assert host_git.subcommand(("-c", "a=b", "--literal-pathspecs", "add", "-A")) == "add"
    assert os.listdir(markers) == []


@needs_landlock
def test_landlock_box_keeps_the_data_dir_and_home_out_and_writes_only_what_the_command_writes(tmp_path):
    """The Landlock fallback is an allowlist: a program git runs reads the repository, not the data
    dir, /etc's other files or /proc; it writes the git directory, not the working tree."""
    runner = HostGit()
    data = tmp_path / "data"
    (data / "secret").mkdir(parents=True)
    (data / "secret" / "key").write_text("sk-ant-data\n")
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    configure(runner, "landlock", [data], [repo])
    (repo / ".gitattributes").write_text("* filter=evil\n")
    (repo / "f").write_text("x\n")
    probe = (f"cat {data}/secret/key > .git/leak 2>&1; ls /proc/1 > .git/proc 2>&1; ls /root > .git/home 2>&1; "
             f"touch {repo}/wt-write 2>/dev/null; touch .git/ran; cat")
    with open(repo / ".git" / "config", "a") as f:
        f.write(f"[filter \"evil\"]\n\tclean = \"bash -c '{probe}'\"\n")
    import unittest.mock
    with unittest.mock.patch.object(host_git, "drivers", lambda names: []):
        runner.run(repo, "add", "-A", env={"GIT_INDEX_FILE": str(repo / ".git" / "hx-index")})
    assert (repo / ".git" / "ran").exists()
    assert "sk-ant-data" not in (repo / ".git" / "leak").read_text()
    assert "Permission denied" in (repo / ".git" / "proc").read_text()
    assert "Permission denied" in (repo / ".git" / "home").read_text() or not Path("/root").exists()
    assert not (repo / "wt-write").exists()


@needs_landlock
def test_landlock_spawner_kills_a_timed_out_program_and_comes_back_after_it_died(tmp_path):
    """The single-threaded spawner that starts the server's git in its Landlock domain: a program past
    its time is killed with its process group; a spawner that died is started again."""
    import signal
    import time

    from helix_runner.process.host_git import LandlockBox
    box = LandlockBox(LANDLOCK_ABI)
    try:
        fs = box.rules(tmp_path, [tmp_path])
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            box.run(["sh", "-c", "sleep 60 & echo $! > child; wait"], tmp_path, {"PATH": "/usr/bin:/bin"}, fs,
                    timeout=1.0)
        assert time.monotonic() - started < 10
        child = int((tmp_path / "child").read_text())
        for _ in range(100):  # bounded: the spawner kills the group as soon as it sees the socket closed
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the timed-out program's child still runs")
        assert box._spawner is not None
        box._spawner.send_signal(signal.SIGKILL)
        box._spawner.wait(timeout=10)
        status, out, _ = box.run(["echo", "back"], tmp_path, {"PATH": "/usr/bin:/bin"}, fs, timeout=20)
        assert (status, out) == (0, b"back\n")
    finally:
        box.close()


@pytest.mark.parametrize("kind", BOXES)
def test_a_git_file_pointing_outside_the_roots_gets_no_writable_git_dir(tmp_path, runner, kind):
    """A phase writes its working tree, so also a ``.git`` file there: one naming another repository's
    git dir made the server's next git call (its diff's ``add -A``) write that repository."""
    victim = tmp_path / "victim"
    victim.mkdir()
    _git(victim, "init", "-q")
    (victim / "kept").write_text("x\n")
    _git(victim, "add", "kept")
    _git(victim, "commit", "-q", "-m", "kept")
    index = (victim / ".git" / "index").read_bytes()
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".git").write_text(f"gitdir: {victim / '.git'}\n")  # what the phase wrote
    (ws / "planted").write_text("y\n")
    configure(runner, kind, [tmp_path / "data"], [ws])
    assert runner.git_dirs_of(ws) == []
    with pytest.raises(GitError):
        runner.run(ws, "add", "-A")
    assert (victim / ".git" / "index").read_bytes() == index


@pytest.mark.parametrize("kind", BOXES)
def test_a_git_file_naming_another_repository_inside_the_roots_gets_no_writable_git_dir(tmp_path, runner, kind):
    """The same with the other repository inside the roots too (two workspaces of one server): the
    git dirs a phase's directory had when it started are the only ones the server's git writes there."""
    roots = tmp_path / "roots"
    victim, ws = roots / "victim", roots / "ws"
    for d in (victim, ws):
        d.mkdir(parents=True)
    _git(victim, "init", "-q")
    (victim / "kept").write_text("x\n")
    _git(victim, "add", "kept")
    _git(victim, "commit", "-q", "-m", "kept")
    index = (victim / ".git" / "index").read_bytes()
    configure(runner, kind, [tmp_path / "data"], [roots])
    runner.pin(ws)  # the phase starts: its directory is no repository
    try:
        (ws / ".git").write_text(f"gitdir: {victim / '.git'}\n")  # what the phase wrote
        (ws / "planted").write_text("y\n")
        assert runner.git_dirs_of(ws) == []
        with pytest.raises(GitError):
            runner.run(ws, "add", "-A")
        assert (victim / ".git" / "index").read_bytes() == index
    finally:
        runner.unpin(ws)
    assert runner.git_dirs_of(victim) == [(victim / ".git").resolve()]  # its own phases still write it


def test_a_repository_the_roots_lie_in_stays_writable(tmp_path, runner):
    """A workspace root inside a repository (``serve`` started in a subdirectory): its git dir counts."""
    repo = tmp_path / "repo"
    (repo / "sub").mkdir(parents=True)
    _git(repo, "init", "-q")
    assert runner.configure(hidden=[], visible=[repo / "sub"], use_box=False) == "turned off"
    assert runner.git_dirs_of(repo / "sub") == [(repo / ".git").resolve()]
