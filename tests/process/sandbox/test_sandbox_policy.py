"""The sandbox policy (process/sandbox/policy.py): what a phase may see, as pure data.

The allowlist's normalisation, the hidden paths that must be covered inside allowed ones, and the
Landlock expansion around a hidden path (Landlock cannot deny a path inside an allowed directory,
so the directory is replaced by its other children, recursively).
"""

from __future__ import annotations

from helix_runner.process.sandbox.policy import (
    inside,
    landlock_rules,
    make_policy,
    masked,
    outermost,
    reaches,
)

READ, WRITE = 1, 2


def policy(**overrides):
    args = {"cwd": "/w/job", "read_only": ["/usr", "/etc"], "read_write": ["/w/job"], "hidden": ["/data"],
            "home": "/data/homes/r1/home", "tmp": "/data/homes/r1/tmp"}
    return make_policy(**{**args, **overrides})


def test_paths_are_normalised_and_deduplicated_and_ports_sorted():
    p = policy(read_only=["/usr/", "/usr", "/etc//ssl/..", "/etc"], egress_ports=[9, 7, 9])
    assert p.read_only == ("/usr", "/etc")
    assert p.read_write == ("/w/job", "/data/homes/r1/home", "/data/homes/r1/tmp")
    assert p.egress_ports == (7, 9)


def test_a_read_only_path_inside_a_hidden_or_a_writable_one_is_dropped():
    p = policy(read_only=["/usr", "/data/recordings", "/w/job/.git", "/w/jobs"])
    # /data is hidden; /w/job is writable already; /w/jobs only shares a prefix with /w/job.
    assert p.read_only == ("/usr", "/w/jobs")


def test_a_read_only_path_inside_another_is_pruned_unless_a_hidden_one_lies_between():
    assert outermost(("/usr", "/usr/bin", "/opt/x", "/opt"), ()) == ("/usr", "/opt")
    # /root/.pyenv/versions is hidden: the runtime below it needs its own bind, after the cover.
    kept = outermost(("/root/.pyenv", "/root/.pyenv/versions/3.11"), ("/root/.pyenv/versions",))
    assert kept == ("/root/.pyenv", "/root/.pyenv/versions/3.11")
    # The policy applies it: PATH entries inside /usr cost no mount of their own.
    assert policy(read_only=["/usr", "/usr/local/bin", "/usr/bin", "/etc"]).read_only == ("/usr", "/etc")


def test_covered_paths_are_hidden_but_what_is_allowed_inside_them_stays():
    # The workspace roots are covered: other workspaces vanish, the phase's own stays writable.
    p = policy(read_only=["/usr", "/w"], covered=["/w"])
    assert "/w" in p.hidden and "/w" in p.read_only
    assert p.read_write[0] == "/w/job"


def test_masked_lists_the_hidden_paths_inside_allowed_ones_outermost_first():
    p = policy(read_only=["/usr", "/etc", "/"], hidden=["/data", "/etc/shadow", "/srv/elsewhere", "/etc/ssl/private"])
    assert masked(p) == ("/data", "/etc/shadow", "/srv/elsewhere", "/etc/ssl/private")
    q = policy(hidden=["/data", "/etc/shadow", "/srv/elsewhere"])
    # Not inside an allowed path: nothing to cover (bubblewrap's root shows only what is bound).
    assert masked(q) == ("/etc/shadow",)


def test_landlock_rules_expand_an_allowed_directory_around_a_hidden_path():
    tree = {
        "/etc": ["hosts", "ssl", "shadow"],
        "/etc/ssl": ["certs", "private"],
    }
    p = policy(read_only=["/usr", "/etc"], hidden=["/data", "/etc/shadow", "/etc/ssl/private"])
    rules = landlock_rules(p, READ, WRITE, listdir=lambda path: tree[path])
    assert rules == [
        ("/usr", READ),
        ("/etc/hosts", READ),  # /etc holds hidden paths: its other children, one rule each
        ("/etc/ssl/certs", READ),  # and again one level down, around /etc/ssl/private
        ("/w/job", READ | WRITE),
        ("/data/homes/r1/home", READ | WRITE),  # inside hidden /data, allowed explicitly
        ("/data/homes/r1/tmp", READ | WRITE),
    ]


def test_landlock_rules_skip_a_hidden_path_itself_and_keep_private_read_only_ones():
    p = policy(read_only=["/usr", "/data"], private_read_only=["/data/phase-secrets/r1"])
    rules = landlock_rules(p, READ, WRITE, listdir=lambda path: [])
    # /data is hidden: read-only /data is dropped, but the phase's own option files stay readable.
    assert ("/data", READ) not in rules
    assert ("/data/phase-secrets/r1", READ) in rules


def test_landlock_rules_of_an_unlistable_directory_give_nothing_beneath_it():
    def refuse(path):
        raise PermissionError(path)

    p = policy(read_only=["/usr", "/etc"], hidden=["/data", "/etc/shadow"])
    rules = landlock_rules(p, READ, WRITE, listdir=refuse)
    assert not any(inside(path, "/etc") for path, _ in rules)


def test_inside_compares_whole_path_components():
    assert inside("/a/b", "/a") and inside("/a", "/a") and inside("/a/b/", "/a/")
    assert not inside("/ab", "/a") and not inside("/a", "/a/b")


def test_a_phase_whose_directory_is_a_workspace_root_gets_it_under_landlock():
    # Its directory is the root itself: the root covers other workspaces, never the one allowed by name.
    p = policy(cwd="/w", read_write=["/w"], covered=["/w"])
    rules = landlock_rules(p, READ, WRITE, listdir=lambda path: ["job", "other"])
    assert ("/w", READ | WRITE) in rules
    assert reaches(rules, "/w", READ | WRITE)
    # Read-only, the repository's top that is a root: readable (git reads its files).
    q = policy(cwd="/w/sub", read_only=["/usr", "/w"], read_write=["/w/sub"], covered=["/w"])
    assert ("/w", READ) in landlock_rules(q, READ, WRITE, listdir=lambda path: [])


def test_a_hidden_path_inside_the_working_directory_leaves_landlock_unable_to_give_it_whole():
    p = policy(cwd="/w", read_write=["/w"], covered=["/w"], hidden=["/w/data"])
    rules = landlock_rules(p, READ, WRITE, listdir=lambda path: {"/w": ["data", "src"]}[path])
    assert ("/w/src", READ | WRITE) in rules and not reaches(rules, "/w", READ | WRITE)


def test_landlock_splits_a_worktrees_common_dir_around_its_protected_paths():
    tree = {"/r/.git": ["HEAD", "config", "hooks", "objects", "refs", "worktrees"],
            "/r/.git/worktrees": ["mine", "other"]}
    p = policy(cwd="/d/wt", read_write=["/d/wt", "/r/.git", "/r/.git/worktrees/mine"],
               protected=["/r/.git/config", "/r/.git/hooks", "/r/.git/worktrees"], splittable=["/r/.git"])
    rules = landlock_rules(p, READ, WRITE, listdir=lambda path: tree[path])
    assert ("/r/.git", READ) in rules  # its top: readable, no new entries
    for name in ("objects", "refs", "HEAD"):
        assert (f"/r/.git/{name}", READ | WRITE) in rules
    for name in ("config", "hooks", "worktrees"):
        assert (f"/r/.git/{name}", READ) in rules
    assert ("/r/.git/worktrees/mine", READ | WRITE) in rules  # the phase's own administration
    assert not reaches(rules, "/r/.git/worktrees/other", WRITE) and not reaches(rules, "/r/.git/hooks", WRITE)
    # Not splittable (an in-place repository inside the working tree): Landlock cannot, the guard does.
    q = policy(cwd="/r", read_write=["/r", "/r/.git"], protected=["/r/.git/config"])
    assert reaches(landlock_rules(q, READ, WRITE, listdir=lambda path: []), "/r/.git/config", WRITE)
