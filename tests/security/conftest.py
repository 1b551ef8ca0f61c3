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
  workspace's files (0600 too); tampering with the live database; writes into the server's HOME,
  another workspace, the workspace root, the data dir and the server's installed package; a symlink
  planted where the server writes the phase's diff, and symlinks from the workspace into its artifacts.
- ``test_attack_processes.py``: other processes through ``/proc`` and signals: another phase's CLI
  environment and memory, SIGSTOP and ptrace of it, the server's ``fd/``, ptrace and signals to the
  server; the phase's cgroup (raise its memory limit, move out of it) and processes that outlive
  the phase (setsid, double fork).
- ``test_attack_network.py``: TCP to an internal service on loopback, to a link-local (metadata)
  address and to another host; UDP (a DNS query); a raw ICMP socket; an abstract unix socket.
- ``test_attack_api_key.py``: the API key from the server's environment, the CLI's own environment
  and memory, the key helper run by the model, and the key helper run by an MCP server planted in
  the workspace for the project's next phase.
- ``test_attack_persistence.py``: hooks planted in the CLI's user configuration and in the
  workspace's ``.claude/settings.json``, ``/tmp``, ``~/.gitconfig`` and ``~/.bashrc``, each checked
  in a later, unrelated phase.

On ``main`` before the sandbox and the gateway (issue 21), most attacks succeed, so most tests fail;
the table in the final report of the ``attacks`` branch (and the docstring of each test module)
says which. Tests that pass already are regressions to keep (e.g. the server's ``/proc/<pid>/environ``
as nobody, whose server is non-dumpable).
"""

from __future__ import annotations

import asyncio

import pytest
from support.attacks import SERVER_USERS, AttackOutcome, run_attack_scenario


@pytest.fixture(scope="session", params=SERVER_USERS)
def attacked(request) -> AttackOutcome:
    """The scenario's outcome with the server as ``root`` or ``nobody`` (run once per user, torn down)."""
    return asyncio.run(run_attack_scenario(request.param))
