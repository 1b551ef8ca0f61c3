"""Phases a previous server process left active, at start-up alone on its database: ended and recorded.

A server that stopped without draining (a crash, SIGKILL, a lost machine) leaves phase rows active
and may leave processes: the phase shims, their cgroups, strays a shim marked. ``recover`` ends
every process they left (``Containment.recover``; before the shim, the CLI's own process group)
and records each phase INTERRUPTED with a reason saying what was found, an event, its tool calls
marked unfinished, and a result that keeps the cost and attempts its row had. On a shared database
the sweep of a dead replica's phases does the same (``phases/takeover.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from helix_runner.domain.events import Event, PhaseStatusChanged
from helix_runner.domain.phase_result import PhaseResult, queue_wait_ns
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.phases.attempts import interrupted_attempt
from helix_runner.phases.ports import RecordEncoder
from helix_runner.phases.webhooks import PhaseNotifier
from helix_runner.process.containment import Containment, LeftoverRun
from helix_runner.process.process_group import kill_leftover_group
from helix_runner.store.protocol import EventRow, PhaseRow, Store

log = logging.getLogger(__name__)


async def recover(store: Store, encoder: RecordEncoder, containment: Containment,
                  notifier_of: Callable[[PhaseRow], PhaseNotifier | None] = lambda row: None) -> list[PhaseRow]:
    """Marks phases a previous server process left active as INTERRUPTED, with a reason and an
    event, after ending every process they left (their cgroups, shims and marked strays).

    ``notifier_of`` gives a phase's webhook notifier (``PhaseService.notifier_of``): the deliveries
    its INTERRUPTED event causes are written with the event."""
    recovered = store.active_phases()
    runs = [LeftoverRun(_run_id(row.recording_dir), row.pid, row.pid_start_ticks) for row in recovered]
    ended = await containment.recover(runs)
    now = time.time_ns()
    for row, run in zip(recovered, runs, strict=True):
        left = ended.get(run.run_id, 0)
        if not left and row.pid and row.pid_start_ticks is not None:
            # Phases recorded before the shim: the CLI's own process group.
            left = len(kill_leftover_group(row.pid, row.pid_start_ticks))
        reason = "the server stopped while the phase ran (found active at startup); " + (
            f"{left} leftover process(es) of the phase were found and ended" if left
            else "no process of the phase outlived the server")
        previous = row.status
        seq = row.last_sequence + 1
        event = Event(seq, now, row.session_id, "", "", "", PhaseStatusChanged(previous, PhaseStatus.INTERRUPTED,
                                                                                 reason))
        notifier = notifier_of(row)
        store.append_events([(row.job_id, row.phase_id, [
            EventRow(seq, now, encoder.event_kind(event), encoder.encode_event(row.job_id, row.phase_id, event))
        ])], outbox=notifier.outbox([event]) if notifier is not None else ())
        store.mark_tool_calls_unfinished(row.job_id, row.phase_id)
        result = PhaseResult(job_id=row.job_id, phase_id=row.phase_id, status=PhaseStatus.INTERRUPTED,
                             reason=reason, session_id=row.session_id, start_time_ns=row.start_time_ns,
                             end_time_ns=now, last_sequence=seq,
                             queue_wait_ns=queue_wait_ns(row.create_time_ns, row.start_time_ns))
        store.update_phase(row.job_id, row.phase_id, now, status=PhaseStatus.INTERRUPTED,
                           status_reason=reason, end_time_ns=now,
                           # The cost and attempts it recorded before the server stopped.
                           result_pb=encoder.encode_result(
                               result, cost_pb=row.cost_pb, attempts_pb=row.attempts_pb,
                               interrupted=interrupted_attempt(row.status, reason, session_id=row.session_id,
                                                               end_time_ns=now, last_sequence=seq - 1)))
        log.warning("phase interrupted by a previous shutdown",
                    extra={"fields": {"job_id": row.job_id, "phase_id": row.phase_id, "was": row.status.name,
                                      "processes_ended": left}})
    strays = sum(n for run_id, n in ended.items() if run_id not in {r.run_id for r in runs})
    if strays:
        log.warning("ended processes of phases a previous server left", extra={"fields": {"count": strays}})
    return recovered


def _run_id(recording_dir: str) -> str:
    """The run id of a phase row: the suffix of its recording directory (``<phase>-<run id>``, phases/launch.py)."""
    return Path(recording_dir).name.rsplit("-", 1)[-1]
