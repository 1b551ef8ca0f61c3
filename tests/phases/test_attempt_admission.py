"""AttemptAdmission: a running phase's ticket in the admission queue, without a process or a run."""

from __future__ import annotations

import asyncio

from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.phases.admission import AdmissionLimits, AdmissionQueue, AsyncAdmission, TicketState
from helix_runner.phases.attempt_admission import AttemptAdmission
from helix_runner.phases.attempts import Retries

WAIT_S = 5.0


def one_slot() -> AsyncAdmission:
    return AsyncAdmission(AdmissionQueue(AdmissionLimits(max_running=1, max_starting=1)))


def ticket_for(admission: AsyncAdmission, key: str, queued: list) -> AttemptAdmission:
    retries = Retries(admission=admission, ticket=admission.submit(("j", key), "proj", "default"), project="proj")
    return AttemptAdmission(retries, ("j", key), on_queued=queued.append, status=lambda: PhaseStatus.PENDING)


async def test_a_phase_stopped_while_it_waits_leaves_the_queue_and_says_so():
    admission, queued = one_slot(), []
    first = ticket_for(admission, "first", queued)
    assert await first.admitted(lambda: False, asyncio.Event())
    second = ticket_for(admission, "second", queued)
    stopped = asyncio.Event()
    waiting = asyncio.ensure_future(second.admitted(lambda: stopped.is_set(), stopped))
    await asyncio.sleep(0)
    assert [q.position for q in queued] == [1]  # it said it waits, once
    assert second.queue_state() is not None
    stopped.set()
    assert await asyncio.wait_for(waiting, WAIT_S) is False
    assert not second.closed
    first.release()
    # Its entry is gone: nothing is left queued or running.
    assert admission.queue.queued == 0 and admission.queue.running == 0


async def test_a_queue_closed_under_a_waiting_phase_is_told_apart_from_a_stop():
    admission, queued = one_slot(), []
    first = ticket_for(admission, "first", queued)
    assert await first.admitted(lambda: False, asyncio.Event())
    second = ticket_for(admission, "second", queued)
    waiting = asyncio.ensure_future(second.admitted(lambda: False, asyncio.Event()))
    await asyncio.sleep(0)
    admission.close("the server is draining")
    assert await asyncio.wait_for(waiting, WAIT_S) is False
    assert second.closed


async def test_the_start_slot_is_freed_at_the_first_output_and_the_slot_at_the_end():
    admission, queued = one_slot(), []
    ticket = ticket_for(admission, "p", queued)
    assert await ticket.admitted(lambda: False, asyncio.Event())
    ticket.attempt_starting()
    assert ticket.ticket.state is TicketState.STARTING
    ticket.cli_is_up()
    assert ticket.ticket.state is TicketState.RUNNING and not ticket.starting
    ticket.cli_is_up()  # every later chunk: nothing more
    ticket.release()
    assert admission.queue.running == 0
    assert ticket.requeue(2, delay_s=0.0)  # a retry is queued again, as attempt 2
    assert ticket.ticket.attempt == 2 and ticket.ticket.state is not TicketState.RUNNING


async def test_without_an_admission_queue_nothing_waits():
    ticket = AttemptAdmission(Retries(), ("j", "p"), on_queued=lambda state: None, status=lambda: PhaseStatus.PENDING)
    assert await ticket.admitted(lambda: False, asyncio.Event())
    assert ticket.queue_state() is None and not ticket.requeue(2, 1.0)
    assert await ticket.admitted(lambda: True, asyncio.Event()) is False  # a stopped phase does not start
