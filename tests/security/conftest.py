"""The attack suite: a hostile model inside a real phase, with the server as root and as nobody.

(README of tests/security/; the scenario is ``tests/support/attacks.py``, the probes
``tests/support/attack_battery.py``.)

Each server user gets one scenario (the session fixture ``attacked``): a realistic server with a
victim phase of another job held at a breakpoint, and an attacker phase whose scripted model runs a
battery of probes through the real CLI's Bash tool. Every test asserts that one attack is
**refused**, judged by its effect: a secret marker the attacker was never told did not come back, or
nothing changed where the test looks from outside. Tests are grouped by attack class:

- ``test_attack_service_api.py``: the service's own API on loopback (gRPC without a token, the
  dashboard's Connect API, ``/metrics``): list jobs, read another phase's prompt and events, inject
  into it, cancel it; the token file and the TLS key of a hardened server, and a call with the
  stolen token.
- ``test_attack_data.py``: the data dir and other workspaces: a copy of the SQLite database with its
  WAL, another phase's recordings, option files (an MCP credential) and session transcript, another
  workspace's files (0600 too, and through ``/proc/<pid>/cwd`` and ``/proc/<server>/root``); tampering with the live database; writes into the server's HOME,
  another workspace, the workspace root, the data dir and the server's installed package; a symlink
  planted where the server writes the phase's diff, and symlinks from the workspace into its artifacts.
- ``test_attack_processes.py``: other processes through ``/proc`` and signals: another phase's CLI
  environment and memory, SIGSTOP and ptrace of it, approving its held tool call by writing the
  CLI's control protocol into its stdin (``/proc/<pid>/fd/0``); the server's ``fd/``, ptrace and
  signals to the server; the phase's cgroup (raise its memory limit, move out of it) and processes that outlive
  the phase (setsid, double fork).
- ``test_attack_network.py``: TCP to an internal service on loopback, to a link-local (metadata)
  address and to another host; UDP (a DNS query); a raw ICMP socket; an abstract unix socket.
- ``test_attack_api_key.py``: the API key from the server's environment, the CLI's own environment
  and memory, the key helper run by the model, and the key helper run by an MCP server planted in
  the workspace for the project's next phase.
- ``test_attack_persistence.py``: hooks planted in the CLI's user configuration and in the
  workspace's ``.claude/settings.json``, ``/tmp``, ``~/.gitconfig`` and ``~/.bashrc``, each checked
  in a later, unrelated phase.

What succeeds today, on ``main`` before the sandbox and the gateway of issue 21 (a failing test
is an attack that succeeds; this machine: kernel 6.18, no Yama, cgroup v2 containment as root,
the subreaper fallback as nobody): every attack, as root and as nobody, except

- refused as both already (regressions to keep): the key in the CLI's own environment and through
  the key helper run by the model (key-helper mode), a setsid'd double fork outliving the phase
  (containment), symlinks from the workspace into the phase's artifacts (git diff stores links);
- refused as nobody only (regressions): the server's ``/proc/<pid>/environ``, ``fd/``, ``root``
  and ptrace (the server is non-dumpable), writing the installed package (root's), a raw socket
  (no CAP_NET_RAW), raising the memory limit and leaving the cgroup (no cgroup as nobody).
"""

from __future__ import annotations

import asyncio

import pytest
from support.attacks import SCENARIOS, AttackOutcome, run_attack_scenarios
from support.phase_box import SCENARIOS as BOX_SCENARIOS
from support.phase_box import BoxOutcome, run_box_scenarios

# What each sandbox mode cannot stop, by test (its name and its own parameters): the test stays, and
# is expected to fail in that mode only. Strict: once the mode refuses it, the entry must go. The
# README's Sandbox section ("Degraded modes") lists the same.
GAPS: dict[str, dict[tuple[str, ...], str]] = {
    "landlock-only": {
        ("test_a_phase_reaches_no_endpoint_of_the_host", "unix_socket_path"):
            "Landlock (ABI 7) does not govern connect() to a pathname unix socket and seccomp cannot read "
            "its path; only a mount namespace hides the socket",
        ("test_a_phase_reaches_no_endpoint_of_the_host", "tcp_other_host_egress_port"):
            "Landlock's TCP rules allow a port number on every address, and seccomp cannot read "
            "connect()'s address; only a network namespace confines a phase to the host's 127.0.0.1",
        ("test_a_phase_reaches_its_own_loopback_server",):
            "Landlock's TCP rules allow connects to the egress ports only, a phase's own servers' ports "
            "not among them; only a network namespace gives a phase a loopback of its own",
    },
}


# The same for the phase-box scenarios (support/phase_box.py), by (mode, server user).
_NO_NPROC = ("no pids cgroup (an unprivileged server gets none here) and no user namespace, in which RLIMIT_NPROC "
             "would count the phase's processes alone: nothing bounds the processes of one phase")
_OFF = "sandbox = off: the phase runs with the server's view; its repository's files are not protected"
_OFF_GAPS = {
    ("test_no_trap_left_in_a_repository_runs_later",): _OFF,
    ("test_the_protected_files_hold_what_they_held_before_the_phase", "trap"): _OFF,
    ("test_the_protected_files_hold_what_they_held_before_the_phase", "wtrepo"): _OFF,
    ("test_the_worktree_redirects_point_where_the_server_made_them",): _OFF,
}
BOX_GAPS: dict[tuple[str, str], dict[tuple[str, ...], str]] = {
    ("landlock-only", "nobody"): {("test_a_fork_bomb_is_held_at_the_process_limit",): _NO_NPROC},
    ("off", "root"): _OFF_GAPS,
    ("off", "nobody"): {**_OFF_GAPS, ("test_a_fork_bomb_is_held_at_the_process_limit",): _NO_NPROC},
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        params = getattr(item, "callspec", None) and item.callspec.params
        if not params:
            continue
        if "attacked" in params:
            mode, _ = params["attacked"]
            own = tuple(str(value) for name, value in params.items() if name != "attacked")
            reason = GAPS.get(mode, {}).get((item.originalname, *own))
        elif "boxed" in params:
            mode, user = params["boxed"]
            own = tuple(str(value) for name, value in params.items() if name != "boxed")
            reason = BOX_GAPS.get((mode, user), {}).get((item.originalname, *own))
        else:
            continue
        if reason is not None:
            item.add_marker(pytest.mark.xfail(strict=True, reason=f"{mode}: {reason}"))


@pytest.fixture(scope="session")
def attack_outcomes(request) -> dict:
    """Every scenario the selected tests need, run once (a few at a time) and torn down."""
    wanted = [item.callspec.params["attacked"] for item in request.session.items
              if "attacked" in getattr(getattr(item, "callspec", None), "params", {})]
    return asyncio.run(run_attack_scenarios(list(dict.fromkeys(wanted))))


@pytest.fixture(scope="session", params=SCENARIOS, ids=[f"{mode}-{user}" for mode, user in SCENARIOS])
def attacked(request, attack_outcomes) -> AttackOutcome:
    """The scenario's outcome in one sandbox mode with the server as ``root`` or ``nobody``."""
    outcome = attack_outcomes[request.param]
    if isinstance(outcome, BaseException):  # a skip, or the scenario's own failure
        raise outcome
    return outcome


@pytest.fixture(scope="session")
def box_outcomes(request, claude_binary) -> dict:
    """Every phase-box scenario the selected tests need, run once (a few at a time) and torn down."""
    wanted = [item.callspec.params["boxed"] for item in request.session.items
              if "boxed" in getattr(getattr(item, "callspec", None), "params", {})]
    return asyncio.run(run_box_scenarios(list(dict.fromkeys(wanted)), str(claude_binary.path)))


@pytest.fixture(scope="session", params=BOX_SCENARIOS, ids=[f"{mode}-{user}" for mode, user in BOX_SCENARIOS])
def boxed(request, box_outcomes) -> BoxOutcome:
    """The phase-box scenario (support/phase_box.py) in one sandbox mode with the server as ``root`` or
    ``nobody``."""
    outcome = box_outcomes[request.param]
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome
