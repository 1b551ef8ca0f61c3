"""A phase cannot starve its neighbours (support/phase_box.py), in every sandbox mode, as root and as
nobody: a line of 8 MiB without a newline into its CLI's stdout (``max_line_bytes`` 1 MiB here), 64
MiB of output (``phase_output_max_bytes`` 16 MiB here), 64 MiB downloaded through the egress proxy
(``egress_max_bytes_per_phase`` 8 MiB here), a fork bomb (``pids_limit`` 64), and a workspace grown
by up to 232 MiB (``workspace_max_bytes`` 16 MiB here). Only the
offender fails, with the limit it hit as its typed fault and its reason, and a neighbour phase of
another job that streams meanwhile ends SUCCEEDED with every one of its events delivered.

Before the fix the line was dropped and the phase went on (SUCCEEDED), the output was all written
to the data dir, the download came whole, and the fork bomb started all its processes.
"""

from __future__ import annotations

import pytest
from support.phase_box import DISK_CAP, FORKS, PIDS_LIMIT

from helix.runner.v1 import resources_pb2 as res

pytestmark = [pytest.mark.real_cli, pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.mark.parametrize(("flood", "fault", "words"), [
    ("line", "RESOURCE_FAULT_LINE_LIMIT", "max_line_bytes"),
    ("output", "RESOURCE_FAULT_OUTPUT_LIMIT", "phase_output_max_bytes"),
    ("egress", "RESOURCE_FAULT_EGRESS_LIMIT", "egress_max_bytes_per_phase"),
    ("disk", "RESOURCE_FAULT_WORKSPACE_LIMIT", "workspace_max_bytes"),
])
def test_a_phase_past_an_output_limit_fails_with_that_limit(boxed, flood, fault, words):
    run = boxed.phase(flood)
    assert run.result is not None, (boxed.who, run.ended)
    got = (run.result.status, res.ResourceFault.Name(run.result.resource_fault))
    assert got == (res.PHASE_STATUS_FAILED, fault), (boxed.who, run.ended)
    assert words in run.result.reason
    kinds = [res.AttemptEndKind.Name(a.end_kind) for a in run.result.attempts]
    assert kinds == ["ATTEMPT_END_KIND_RESOURCE_LIMIT"], kinds  # not retried: it would do the same


@pytest.mark.parametrize("flood", ["line", "output", "egress", "disk"])
def test_a_neighbour_streams_to_its_end_while_a_phase_floods(boxed, flood):
    run = boxed.phase(f"neighbour-{flood}")
    assert run.result is not None and run.result.status == res.PHASE_STATUS_SUCCEEDED, (boxed.who, run.ended)
    sequences = [e.sequence for e in run.events]
    assert sequences == list(range(1, len(sequences) + 1)), (boxed.who, "a gap or a repeat in the neighbour's events")
    assert run.result.last_sequence == sequences[-1]
    assert run.reports.get("streamed", {}).get("ok"), run.reports


def test_no_file_of_a_phase_grows_past_its_workspace_cap(boxed):
    # The kernel stops the one big file at the cap (RLIMIT_FSIZE); the many small ones are the
    # server's to stop (above), before the 200 the flood would write.
    assert boxed.effects["disk_big_bytes"] == DISK_CAP, (boxed.who, boxed.effects["disk_big_bytes"])
    assert boxed.effects["disk_files"] < 200, (boxed.who, boxed.effects["disk_files"])


def test_a_fork_bomb_is_held_at_the_process_limit(boxed):
    run = boxed.phase("forkbomb")
    assert run.result is not None, (boxed.who, run.ended)
    if res.ResourceFault.Name(run.result.resource_fault) == "RESOURCE_FAULT_PROCESS_LIMIT":  # a pids cgroup: stopped
        assert run.result.status == res.PHASE_STATUS_FAILED and f"limit of {PIDS_LIMIT} processes" in run.result.reason
        return
    # No pids cgroup (an unprivileged server): RLIMIT_NPROC in the phase's user namespace refuses the
    # forks (and the CLI's own threads past the limit: it may die of it, and the attempt be retried);
    # the server cannot see the refusals, so the phase is not failed for the limit by name.
    assert boxed.user == "nobody", (boxed.who, run.ended)
    forked = boxed.effects["forked"]
    assert forked is not None and forked < PIDS_LIMIT < FORKS, (boxed.who, forked, run.ended)
