"""Other processes, reached from inside a phase through ``/proc``, signals, ptrace and cgroups.

The victim is another job's phase held at a breakpoint; the test hands the attacker its CLI's host
pid and the server's pid, as ``/proc`` shows them to any process of the server's user.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.real_cli, pytest.mark.slow, pytest.mark.timeout(600)]


def test_a_phase_cannot_read_another_phase_s_environment(attacked):
    """``/proc/<victim CLI>/environ`` (the victim's request set a secret variable)."""
    assert attacked.secrets["venv"] not in attacked.found("victim_environ"), attacked.describe("victim_environ")


def test_a_phase_cannot_read_another_phase_s_memory(attacked):
    """``/proc/<victim CLI>/mem`` through its ``maps``: the victim's prompt is in there."""
    report = attacked.probe("victim_memory")
    assert "out of time" not in report["note"], attacked.describe("victim_memory")
    assert attacked.secrets["vprompt"] not in report["found"], attacked.describe("victim_memory")


def test_a_phase_cannot_approve_another_phase_s_held_tool_call(attacked):
    """Another job's phase holds a Bash call at a breakpoint (an approval gate); the attacker reads
    the CLI's ``hook_callback`` request from that phase's recording and writes the answer into its
    CLI's stdin through ``/proc/<pid>/fd/0``: the held call must not run."""
    attacked.probe("forge_approval")
    assert attacked.effects["held_call_ran"] == [], attacked.describe("forge_approval")


def test_a_phase_cannot_stop_another_phase(attacked):
    """``kill -STOP`` of the victim's CLI: its state, read from outside after the attack, is not T."""
    attacked.probe("stop_victim")
    assert attacked.effects["victim_state"] != "T", attacked.describe("stop_victim")


@pytest.mark.parametrize("probe", ["ptrace_victim", "ptrace_server"])
def test_a_phase_cannot_ptrace_other_processes(attacked, probe):
    """PTRACE_SEIZE of the victim's CLI or of the server: the target named the attacker as its tracer."""
    assert "traced" not in attacked.found(probe), attacked.describe(probe)


def test_a_phase_cannot_signal_the_server(attacked):
    """SIGSTOP to the server (then SIGCONT): the server was seen stopped."""
    assert "stopped" not in attacked.found("signal_server"), attacked.describe("signal_server")


def test_a_phase_cannot_list_the_server_s_open_files(attacked):
    """``/proc/<server>/fd``: its links name the database (regression as nobody: non-dumpable)."""
    assert "helix-runner.sqlite3" not in attacked.found("server_fds"), attacked.describe("server_fds")


def test_a_phase_cannot_raise_its_own_memory_limit(attacked):
    """Writing ``max`` / ``-1`` into its cgroup's memory limit (a limit exists only where the server
    has cgroups, i.e. as root here; regression as nobody)."""
    assert "raised" not in attacked.found("cgroup_limit"), attacked.describe("cgroup_limit")


@pytest.mark.parametrize("probe", ["outlive_phase", "cgroup_escape"])
def test_nothing_a_phase_starts_outlives_it(attacked, probe):
    """A setsid'd, double-forked process (``outlive_phase``), and one that first moved itself to the
    root cgroup of every hierarchy (``cgroup_escape``): alive after the phase's result was sent?"""
    attacked.probe(probe)
    assert attacked.effects["alive"][probe] == [], attacked.describe(probe)
