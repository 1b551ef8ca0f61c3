"""RunHandover: a running phase's move to another replica, built alone around a real stream: it stops
the CLI only at a tool boundary (or at the deadline), mirrors the transcript at each boundary, and
lets go of what the phase holds here only once the shared store has taken it."""

from __future__ import annotations

import asyncio

from support.cli_lines import SID, init, tool_result, tool_use

from helix_runner.api.proto_records import ProtoRecordEncoder
from helix_runner.domain.phase_outcome import EndCause
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.phase_stream import PhaseStream, PhaseStreamOptions
from helix_runner.phases.control import ControlState
from helix_runner.phases.run_handover import RunHandover

WAIT_S = 5.0
DEADLINE_S = 60.0  # the move's deadline: far beyond WAIT_S, so only a boundary stops the CLI in time


class Durability:
    def __init__(self, movable: bool = True, released: bool = True) -> None:
        self.movable, self.released = movable, released
        self.progressed: list[str] = []
        self.saved: list = []
        self.release_asked = 0

    def progress(self, session_id: str, attempts: tuple) -> None:
        self.progressed.append(session_id)

    async def hand_over(self, session_id: str, attempts: tuple, control) -> bool:
        self.saved.append(session_id)
        return True

    def release(self, reason: str) -> bool:
        self.release_asked += 1
        return self.released


class Control:
    def __init__(self) -> None:
        self.pending: dict = {}
        self.began = False
        self.closed: list[str] = []

    def begin_handover(self) -> None:
        self.began = True

    def state(self) -> ControlState:
        return ControlState()

    def close(self, reason: str) -> None:
        self.closed.append(reason)


class Record:
    job_id, phase_id = "j", "p"

    def __init__(self) -> None:
        self.statuses: list[PhaseStatus] = []

    def publish(self, events) -> None:
        pass

    def set_status(self, status: PhaseStatus, reason: str, **columns: object) -> None:
        self.statuses.append(status)


class Recorder:
    def write_tools(self, calls) -> None:
        pass

    def write_cost(self, force: bool = False) -> None:
        pass


class Events:
    def __init__(self) -> None:
        self.moved: list = []

    def flushed(self, done) -> None:
        done()

    def end_moved(self, moved) -> None:
        self.moved.append(moved)


class Telemetry:
    def on_moved(self) -> None:
        pass


class Stops(list):
    """The CLI stops asked for, and an event set at the first."""

    def __init__(self) -> None:
        super().__init__()
        self.first = asyncio.Event()

    def __call__(self, cause: EndCause, reason: str) -> None:
        self.append((cause, reason))
        self.first.set()


def make(durability: Durability | None = None):
    stream = PhaseStream(PhaseStreamOptions())
    stops = Stops()
    let_go: list[int] = []
    released_here: list[int] = []

    async def release_here() -> None:
        released_here.append(1)

    handover = RunHandover(durability or Durability(), replica_id="r1", control=Control(), stream=stream,
                           record=Record(), recorder=Recorder(), encoder=ProtoRecordEncoder(), events=Events(),
                           telemetry=Telemetry(), attempts=[], workspace=None,
                           stop_cli=stops,
                           let_go=lambda: let_go.append(1), release_here=release_here)
    return handover, stream, stops, let_go, released_here


async def stopped(stops: Stops) -> None:
    await asyncio.wait_for(stops.first.wait(), WAIT_S)


async def test_the_cli_is_stopped_at_the_next_tool_boundary_not_in_the_middle_of_a_call():
    handover, stream, stops, _, _ = make()
    handover.on_events(stream.feed(init() + tool_use("t1")))
    assert handover.request("moved to r2 (draining)", wait_s=DEADLINE_S)
    assert handover.control.began and handover.moving == "moved to r2 (draining)"
    await asyncio.sleep(0.05)
    assert stops == []  # the call runs: the CLI is left alone
    handover.on_events(stream.feed(tool_result("t1")))  # the call finished: a boundary
    await stopped(stops)
    assert stops == [(EndCause.INTERRUPTED, "moved to r2 (draining)")]
    assert handover.durability.progressed == [SID]  # the transcript was mirrored at the boundary


async def test_a_held_call_is_a_boundary_too():
    handover, stream, stops, _, _ = make()
    handover.on_events(stream.feed(init() + tool_use("t1")))
    handover.request("moving", wait_s=DEADLINE_S)
    await asyncio.sleep(0.05)
    assert stops == []
    stream.tools.mark_held("t1", "bp")
    handover.tool_held()
    await stopped(stops)


async def test_a_phase_that_cannot_move_is_not_touched():
    handover, stream, stops, _, _ = make(Durability(movable=False))
    assert not handover.request("moving", wait_s=0.0)
    assert handover.moving is None and not handover.control.began
    await asyncio.sleep(0.01)
    assert stops == []


async def test_what_the_phase_holds_here_goes_only_once_another_replica_can_have_it():
    handover, stream, stops, let_go, released_here = make(Durability(released=False))
    handover.on_events(stream.feed(init()))
    handover.request("moving", wait_s=0.0)
    await stopped(stops)
    assert await handover.hand_over() is False  # the store did not take it: it ends here instead
    assert handover.durability.saved == [SID] and handover.durability.release_asked == 1
    assert released_here == [] and not handover.moved and handover.events.moved == []

    handover, stream, stops, let_go, released_here = make()
    handover.on_events(stream.feed(init()))
    handover.request("moving", wait_s=0.0)
    await stopped(stops)
    assert await handover.hand_over() is True
    assert let_go == [1] and released_here == [1] and handover.moved
    assert handover.record.statuses == [PhaseStatus.QUEUED] and handover.control.closed == ["moving"]
    assert [m.from_replica for m in handover.events.moved] == ["r1"]
