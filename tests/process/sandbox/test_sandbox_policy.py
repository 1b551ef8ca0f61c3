"""The sandbox policy (process/sandbox/policy.py): what a phase may see, as pure data.

The allowlist's normalisation, the hidden paths that must be covered inside allowed ones, and the
Landlock expansion around a hidden path (Landlock cannot deny a path inside an allowed directory,
so the directory is replaced by its other children, recursively).
"""

from __future__ import annotations

from helix_runner.process.sandbox.policy import inside, landlock_rules, make_policy, masked, outermost

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
