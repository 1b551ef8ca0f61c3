"""bubblewrap's command line for a policy (process/sandbox/bwrap.py): the namespaces and the order
of the mounts (a cover after the allowed path it lies in, an allowed path after the cover it lies
in), on real directories under ``tmp_path`` (the builder checks what exists)."""

from __future__ import annotations

import os

import pytest

from helix_runner.process.sandbox import policy as policy_module
from helix_runner.process.sandbox.bwrap import bwrap_argv
from helix_runner.process.sandbox.policy import make_policy


@pytest.fixture
def tree(tmp_path):
    for d in ("usr", "etc/ssl/private", "roots/job", "roots/other", "data/homes/r1/home", "data/homes/r1/tmp"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "etc" / "shadow").write_text("root:x\n")
    return tmp_path


def policy(t, **overrides):
    args = {"cwd": f"{t}/roots/job", "read_only": [f"{t}/usr", f"{t}/etc", f"{t}/missing"],
            "read_write": [f"{t}/roots/job"], "hidden": [f"{t}/data", f"{t}/etc/shadow", f"{t}/etc/ssl/private"],
            "home": f"{t}/data/homes/r1/home", "tmp": f"{t}/data/homes/r1/tmp", "covered": [f"{t}/roots"]}
    return make_policy(**{**args, **overrides})


def pairs(argv: list[str], option: str) -> list[str]:
    """The first argument of every ``option`` in ``argv``."""
    return [argv[i + 1] for i, a in enumerate(argv) if a == option]


def test_the_namespaces_the_session_and_no_capabilities(tree):
    argv = bwrap_argv("/usr/bin/bwrap", policy(tree))
    assert argv[0] == "/usr/bin/bwrap"
    for option in ("--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--disable-userns",
                   "--die-with-parent"):
        assert option in argv
    # Where the phase's seccomp filter refuses new user namespaces, bubblewrap need not.
    assert "--disable-userns" not in bwrap_argv("bwrap", policy(tree), seccomp_denies_userns=True)
    assert "/sys" not in argv  # its recursive bind is the costliest mount, and tools do without it
    assert "--unshare-net" not in argv  # the shim's child has its own network namespace already
    assert "--new-session" not in argv  # the CLI stays in the shim's session, which the key broker admits
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert argv[-2:] == ["--chdir", f"{tree}/roots/job"]


def test_the_private_tmp_is_bound_first_and_proc_is_the_namespaces_own(tree):
    argv = bwrap_argv("bwrap", policy(tree))
    first_bind = argv.index("--bind")
    assert argv[first_bind + 1: first_bind + 3] == [f"{tree}/data/homes/r1/tmp", "/tmp"]
    assert argv[argv.index("--proc") + 1] == "/proc" and argv[argv.index("--dev") + 1] == "/dev"
    assert first_bind < min(i for i, a in enumerate(argv) if a in ("--ro-bind", "--tmpfs"))


def test_allowed_paths_are_bound_and_missing_read_only_ones_skipped(tree):
    argv = bwrap_argv("bwrap", policy(tree))
    assert pairs(argv, "--ro-bind").count(f"{tree}/usr") == 1
    assert f"{tree}/missing" not in argv
    assert f"{tree}/roots/job" in pairs(argv, "--bind")
    # The home is writable although it lies in the hidden data dir; nothing else of the data dir shows.
    assert f"{tree}/data/homes/r1/home" in pairs(argv, "--bind")
    assert f"{tree}/data" not in pairs(argv, "--bind") + pairs(argv, "--ro-bind")


def test_covers_come_after_the_path_they_lie_in_and_before_the_paths_inside_them(tree):
    t = tree
    argv = bwrap_argv("bwrap", policy(t, read_only=[f"{t}/usr", f"{t}/etc", f"{t}"]))
    position = {(a, argv[i + 1]): i for i, a in enumerate(argv) if a.startswith("--")}
    root_bind = position[("--ro-bind", f"{t}")]
    roots_cover = position[("--tmpfs", f"{t}/roots")]  # the workspace roots, inside the read-only tree
    data_cover = position[("--tmpfs", f"{t}/data")]
    assert root_bind < roots_cover < position[("--bind", f"{t}/roots/job")]
    assert root_bind < data_cover < position[("--bind", f"{t}/data/homes/r1/home")]
    # A file is covered by /dev/null, a directory by an empty tmpfs made read-only at the end.
    shadow = argv.index(f"{t}/etc/shadow")
    assert argv[shadow - 2: shadow] == ["--ro-bind", "/dev/null"]
    assert root_bind < shadow
    assert f"{t}/etc" not in pairs(argv, "--ro-bind")  # inside the read-only tree: no mount of its own
    assert set(pairs(argv, "--remount-ro")) == {f"{t}/roots", f"{t}/data", f"{t}/etc/ssl/private"}
    assert min(position[("--remount-ro", p)] for p in pairs(argv, "--remount-ro")) > max(
        position[("--bind", p)] for p in pairs(argv, "--bind"))


def test_the_phases_own_option_files_are_bound_even_if_made_later(tree):
    t = tree
    argv = bwrap_argv("bwrap", policy(t, read_only=[f"{t}"], private_read_only=[f"{t}/data/phase-secrets/r1"]))
    i = argv.index("--ro-bind-try")
    assert argv[i + 1: i + 3] == [f"{t}/data/phase-secrets/r1"] * 2
    assert i > argv.index(f"{t}/data")  # after the data dir's cover


def test_an_unprivileged_server_covers_only_what_it_could_reach(tree, monkeypatch):
    (tree / "etc" / "shadow").chmod(0)
    monkeypatch.setattr(policy_module.os, "geteuid", lambda: 10001)
    real_access = os.access
    monkeypatch.setattr(policy_module.os, "access", lambda p, m: False if p.endswith("/shadow") else real_access(p, m))
    argv = bwrap_argv("bwrap", policy(tree))
    assert f"{tree}/etc/shadow" not in argv  # unreadable to the phase anyway: no mount spent on it
    assert f"{tree}/etc/ssl/private" in pairs(argv, "--tmpfs")


def test_a_sized_tmp_is_a_tmpfs_of_that_size_instead_of_the_directory(tree):
    argv = bwrap_argv("bwrap", policy(tree), tmp_bytes=64 << 20)
    at = argv.index("--tmpfs")
    assert argv[at + 1] == "/tmp" and argv[at - 4:at] == ["--size", str(64 << 20), "--perms", "0700"]
    assert f"{tree}/data/homes/r1/tmp" not in argv


def test_protected_paths_are_bound_read_only_over_the_writable_tree_and_a_writable_one_inside_after(tree):
    git = tree / "roots" / "job" / ".git"
    for d in ("hooks", "worktrees/mine"):
        (git / d).mkdir(parents=True)
    (git / "config").write_text("")
    (git / "hooks-link").symlink_to(tree / "data")  # a link is never bound (a bind follows it)
    p = policy(tree, read_write=[f"{tree}/roots/job", f"{git}/worktrees/mine"],
               protected=[f"{git}/config", f"{git}/hooks", f"{git}/worktrees", f"{git}/hooks-link", f"{tree}/usr/x"])
    assert p.protected == (f"{git}/config", f"{git}/hooks", f"{git}/worktrees", f"{git}/hooks-link")  # /usr: not writable
    argv = bwrap_argv("bwrap", p)
    ro = pairs(argv, "--ro-bind")
    assert {f"{git}/config", f"{git}/hooks", f"{git}/worktrees"} <= set(ro) and f"{git}/hooks-link" not in ro
    binds = [i for i, a in enumerate(argv) if a in ("--bind", "--ro-bind")]
    where = {argv[i + 1]: i for i in binds}
    assert where[f"{tree}/roots/job"] < where[f"{git}/worktrees"] < where[f"{git}/worktrees/mine"]
