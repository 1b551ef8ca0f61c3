"""Placement by free slots: the choice of a replica, and when this replica counts as full."""

from __future__ import annotations

from dataclasses import dataclass

from helix_runner.phases.admission import AdmissionLimits, AdmissionQueue
from helix_runner.phases.placement import Placements, PlacementTarget, choose_replica, would_queue_here


@dataclass(frozen=True)
class Room:
    replica_id: str
    max_running: int
    active: int
    live: bool = True
    address: str = ""

    def __post_init__(self):
        if not self.address:
            object.__setattr__(self, "address", f"{self.replica_id}:50051")


def test_the_replica_with_the_most_free_slots_is_chosen():
    rooms = [Room("a", 4, 3), Room("b", 8, 5), Room("c", 4, 2)]
    assert choose_replica(rooms, "me") == PlacementTarget("b", "b:50051", 3)


def test_ties_go_to_fewer_active_phases_then_the_id():
    assert choose_replica([Room("b", 8, 6), Room("a", 4, 2)], "me").replica_id == "a"
    assert choose_replica([Room("c", 4, 2), Room("b", 4, 2)], "me").replica_id == "b"


def test_self_expired_unaddressed_unadvertised_and_full_replicas_are_never_chosen():
    rooms = [
        Room("me", 10, 0),  # this replica
        Room("dead", 10, 0, live=False),  # its lease ran out
        Room("hidden", 10, 0),
        Room("draining", 0, 0),  # publishes no capacity
        Room("full", 2, 2),
        Room("over", 2, 3),  # more active than its limit (queued phases)
    ]
    object.__setattr__(rooms[2], "address", "")  # registered no address
    assert choose_replica(rooms, "me") is None
    assert choose_replica([*rooms, Room("ok", 2, 1)], "me") == PlacementTarget("ok", "ok:50051", 1)


def test_this_replica_is_full_when_its_running_and_waiting_phases_fill_its_limit():
    queue = AdmissionQueue(AdmissionLimits(max_running=2, max_starting=2))
    assert not would_queue_here(queue)
    queue.submit(("j", "1"), "p")
    assert not would_queue_here(queue)  # waiting, but a slot is free for it
    queue.pump()
    queue.submit(("j", "2"), "p")
    assert would_queue_here(queue)  # one running, one waiting: a third would queue
    queue.pump()
    assert queue.running == 2 and would_queue_here(queue)


def test_placements_in_flight_take_their_targets_slots_until_answered():
    rooms = [Room("a", 4, 2), Room("b", 3, 0)]
    placements = Placements()
    first = choose_replica(rooms, "me", placements.pending)
    assert first == PlacementTarget("b", "b:50051", 3)
    with placements.placing(first), placements.placing(first):
        # b: 3 - 2 in flight = 1 free; a: 2 free now
        assert choose_replica(rooms, "me", placements.pending) == PlacementTarget("a", "a:50051", 2)
        with placements.placing(PlacementTarget("a", "a:50051", 2)), placements.placing(
                PlacementTarget("a", "a:50051", 1)):
            assert choose_replica(rooms, "me", placements.pending) == PlacementTarget("b", "b:50051", 1)
    assert placements.pending == {}  # answered (or refused): counted by the registry, not here
