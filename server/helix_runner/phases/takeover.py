"""Dead-replica takeover on a shared database: phases whose replica is gone are recorded INTERRUPTED.

The replicated counterpart of ``phases.recovery.recover``: on SQLite one process owns everything, so
at start it marks every active phase; on PostgreSQL other replicas' phases are alive, so each
replica sweeps, at start and then every third of a lease, only the phases whose owner's lease ran
out (or that its own previous incarnation left behind), through the cluster's fenced sweep. The
terminal event and result are the ones ``recover`` writes (docs/scale-out.md, "Dead-replica takeover").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from helix_runner.domain.events import Event, PhaseStatusChanged
from helix_runner.domain.phase_result import PhaseResult, queue_wait_ns
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.phases.attempts import interrupted_attempt
from helix_runner.phases.ports import RecordEncoder
from helix_runner.phases.webhooks import PhaseNotifier
from helix_runner.store.cluster import Cluster
from helix_runner.store.protocol import EventRow, OutboxRow, PhaseRow, StoreError

log = logging.getLogger(__name__)

REASON = "the replica running the phase stopped (its lease ran out, or it restarted); its process is gone"


class Takeover:
    """Sweeps phases of dead replicas into INTERRUPTED, with the same event and result as recovery."""

    def __init__(self, cluster: Cluster, encoder: RecordEncoder, *, interval_seconds: float,
                 notifier: Callable[[PhaseRow], PhaseNotifier | None] = lambda row: None):
        self.cluster = cluster
        self.encoder = encoder
        self.interval_seconds = interval_seconds
        # A swept phase's webhook notifier (PhaseService.notifier_of): its deliveries ride the sweep.
        self.notifier = notifier
        self._events: dict[tuple[str, str], Event] = {}

    def _reason(self, row: PhaseRow) -> str:
        """REASON, and why the phase could not continue on another replica when it was kept for that
        (docs/scale-out.md "Hand-over"): its workspace, its retry policy, ..."""
        handover = self.cluster.handover()
        state = handover.state(row.job_id, row.phase_id) if handover is not None else None
        if state is not None and state.not_movable_reason:
            return f"{REASON}; it could not continue on another replica: {state.not_movable_reason}"
        return REASON

    def _event(self, row: PhaseRow, sequence: int) -> Event:
        """The terminal event of a swept phase (made once: the outbox maps the one the sweep writes)."""
        key = (row.job_id, row.phase_id)
        event = self._events.get(key)
        if event is None or event.sequence != sequence:
            change = PhaseStatusChanged(row.status, PhaseStatus.INTERRUPTED, self._reason(row))
            event = self._events[key] = Event(sequence, time.time_ns(), row.session_id, "", "", "", change)
        return event

    def _outbox(self, row: PhaseRow, sequence: int) -> Sequence[OutboxRow]:
        notifier = self.notifier(row)
        return notifier.outbox([self._event(row, sequence)]) if notifier is not None else ()

    def _interrupt(self, row: PhaseRow, sequence: int) -> tuple[EventRow, dict[str, object]]:
        event = self._event(row, sequence)
        reason = event.payload.reason
        now = event.receive_time_ns
        result = PhaseResult(
            job_id=row.job_id,
            phase_id=row.phase_id,
            status=PhaseStatus.INTERRUPTED,
            reason=reason,
            session_id=row.session_id,
            start_time_ns=row.start_time_ns,
            end_time_ns=now,
            last_sequence=sequence,
            queue_wait_ns=queue_wait_ns(row.create_time_ns, row.start_time_ns),
        )
        encoded = self.encoder.encode_event(row.job_id, row.phase_id, event)
        return EventRow(sequence, now, self.encoder.event_kind(event), encoded), {
            "status_reason": reason,
            "end_time_ns": now,
            # The cost and attempts the dead replica recorded: what GetJob shows, WatchPhase's result carries.
            "result_pb": self.encoder.encode_result(
                result,
                cost_pb=row.cost_pb,
                attempts_pb=row.attempts_pb,
                interrupted=interrupted_attempt(
                    row.status, reason, session_id=row.session_id, end_time_ns=now, last_sequence=sequence - 1
                ),
            ),
        }

    def sweep(self) -> list[PhaseRow]:
        """One sweep until nothing is left to take; returns the phases it interrupted."""
        swept: list[PhaseRow] = []
        try:
            while batch := self.cluster.sweep_expired_owners(self._interrupt, outbox=self._outbox):
                swept.extend(batch)
        finally:
            self._events.clear()
        return swept

    async def run(self) -> None:
        """Sweeps every ``interval_seconds`` until cancelled; a failing database is retried."""
        while True:
            try:
                swept = await asyncio.to_thread(self.sweep)
                if swept:
                    log.warning(
                        "took over phases of a stopped replica", extra={"fields": {"count": len(swept)}}
                    )
            except StoreError as exc:
                log.warning("takeover sweep failed", extra={"fields": {"error": str(exc)}})
            except Exception:  # a database error must not end the loop
                log.exception("takeover sweep failed")
            await asyncio.sleep(self.interval_seconds)
