"""A running phase's place in the admission queue, attempt after attempt (phases/admission.py).

Each attempt of a phase holds one ticket: submitted by the service for the first, by the run for a
retry (with its backoff as ``not_before``) or a rewind; waited for before the CLI starts; its start
slot freed when the CLI first writes; released when the attempt ends, with its credential held
back after a rate limit. ``AttemptAdmission`` keeps that ticket and nothing else of the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from helix_runner.domain.events import QueueState
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.phases.admission import AdmissionClosedError, Ticket, TicketState
from helix_runner.phases.attempts import AttemptEnd, Retries


class AttemptAdmission:
    """The admission ticket of a phase's current attempt (none without an admission queue).

    ``on_queued(state)``: the phase starts waiting in the queue; ``status()``: the phase's status.
    ``closed`` says why ``admitted`` answered False when the queue shut down under it.
    """

    def __init__(self, retries: Retries, key: tuple[str, str], *, on_queued: Callable[[QueueState], None],
                 status: Callable[[], PhaseStatus]):
        self.retries = retries
        self.key = key
        self.ticket: Ticket | None = retries.ticket
        self.starting = False  # the CLI of the admitted attempt has not written yet: it holds a start slot
        self.closed = False
        self._on_queued, self._status = on_queued, status

    def queue_state(self) -> QueueState | None:
        """Where the phase stands in the admission queue now (None: not waiting)."""
        admission, ticket = self.retries.admission, self.ticket
        if admission is None or ticket is None:
            return None
        status = admission.queue.status(ticket.key)
        return None if status is None else admission.queue.queue_state(status)

    async def admitted(self, stopping: Callable[[], bool], stopped: asyncio.Event) -> bool:
        """Waits for the attempt's admission (QUEUED meanwhile); False when the phase was stopped
        (``stopping()``, or ``stopped`` set while it waits) or the queue shut down (``closed``)."""
        admission, ticket = self.retries.admission, self.ticket
        if stopping():
            if admission is not None and ticket is not None:
                admission.release(ticket)
            return False
        if admission is None or ticket is None or ticket.state is not TicketState.QUEUED:
            return True
        status = admission.queue.status(ticket.key)
        if status is not None and self._status() is not PhaseStatus.QUEUED:
            self._on_queued(admission.queue.queue_state(status))
        wait = asyncio.ensure_future(admission.wait(ticket))
        stop = asyncio.ensure_future(stopped.wait())
        try:
            await asyncio.wait((wait, stop), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not wait.done():
                wait.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await wait
        if wait.cancelled() or wait.exception() is not None:
            self.closed = isinstance(wait.exception() if not wait.cancelled() else None, AdmissionClosedError)
            return False
        if stopping():  # admitted in the same moment it was stopped
            admission.release(ticket)
            return False
        return True

    def attempt_starting(self) -> None:
        """The admitted attempt's CLI starts: it holds a start slot until its first output."""
        self.starting = self.ticket is not None

    def cli_is_up(self) -> None:
        """The CLI wrote its first output: its start slot is free for the next phase."""
        if self.starting:
            self.starting = False
            self.retries.admission.started(self.ticket)  # type: ignore[union-attr,arg-type]

    def release(self) -> None:
        """The phase leaves this replica's queue (it moves to another replica)."""
        admission, ticket = self.retries.admission, self.ticket
        if admission is not None and ticket is not None:
            admission.release(ticket)

    def attempt_ended(self, end: AttemptEnd) -> None:
        """Frees the attempt's slot; after a rate limit its credential waits out the backoff (or longer)."""
        admission, ticket = self.retries.admission, self.ticket
        if admission is not None and ticket is not None:
            self.starting = False
            admission.release(ticket)
            if end.verdict.hold_credential:
                wait = end.decision.delay_s if end.decision.retry else self.retries.policy.initial_backoff_s
                if end.verdict.retry_not_before_s is not None:
                    wait = max(wait, end.verdict.retry_not_before_s - time.time())
                admission.hold(self.retries.credential, time.monotonic() + wait, end.verdict.reason)

    def requeue(self, attempt: int, delay_s: float | None = None) -> bool:
        """Queues attempt number ``attempt`` (after ``delay_s``); False without an admission queue."""
        admission = self.retries.admission
        if admission is None:
            return False
        extra = {} if delay_s is None else {"not_before": time.monotonic() + delay_s}
        self.ticket = admission.submit(self.key, self.retries.project, self.retries.credential,
                                       attempt=attempt, retry=True, **extra)
        return True
