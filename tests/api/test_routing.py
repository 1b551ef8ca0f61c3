"""The routing table (api/routing.py): every RPC has a route it can take, and each kind routes as it says.

The replicas are fakes here (a cluster that answers who owns what, a store of rows, a forwarder that
records instead of sending); tests/api/test_routing_postgres.py runs the table between two real
servers on one PostgreSQL database.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.api import routing
from helix_runner.api.authorization import Authorization
from helix_runner.api.call_access import CallAccess
from helix_runner.api.forwarding import FORWARDED_HEADER, OwnerForwarder
from helix_runner.api.principals import Authenticator
from helix_runner.api.routing import HERE, ROUTES, Forward, Place, Route, Router, check_routes
from helix_runner.api.service_descriptor import SERVICE
from helix_runner.api.servicer import RunnerServicer, add_runner_service
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.errors import RunnerError
from helix_runner.phases.placement import PlacementTarget
from helix_runner.phases.replicas import Replicas
from helix_runner.store.cluster import PhaseOwner, ReplicaCapacity
from helix_runner.store.protocol import PhaseRow

RUNNING = PhaseRow(job_id="j", phase_id="p", ordinal=1, project_id="x", status=PhaseStatus.RUNNING, create_time_ns=1)
ENDED = replace(RUNNING, status=PhaseStatus.SUCCEEDED, end_time_ns=5)


class FakeCluster:
    """Replica ``me`` among others: who owns which phase, who has room."""

    shared = True
    replica_id = "me"

    def __init__(self, owner: str | None = "other", live: bool = True, capacity=()):
        self.owner, self.live, self.capacity = owner, live, list(capacity)

    def phase_owner(self, job_id, phase_id):
        return PhaseOwner(self.owner, f"{self.owner}:50051", 1, self.live)

    def replica_capacity(self):
        return self.capacity


class Rows:
    def __init__(self, *rows: PhaseRow):
        self.rows = {(r.job_id, r.phase_id): r for r in rows}

    def get_phase(self, job_id, phase_id):
        return self.rows.get((job_id, phase_id))


class Context:
    """The part of a gRPC call the router reads: its metadata and deadline."""

    def __init__(self, *metadata: tuple[str, str]):
        self.metadata = metadata

    def invocation_metadata(self):
        return self.metadata

    def time_remaining(self):
        return 7.5


def router(cluster=None, rows=(RUNNING,), *, runs_here=False, full_here=False, forwarder=True, place=True) -> Router:
    replicas = Replicas(cluster or FakeCluster(), Rows(*rows), runs_here=lambda job, phase: runs_here,
                        full_here=lambda: full_here)
    return Router(replicas, OwnerForwarder(None) if forwarder else None, place_on_free_replica=place,
                  new_phase_id=lambda: "new-phase")


def request(method: str):
    """``method``'s request for phase p of job j (as far as it names them)."""
    message = getattr(pb, SERVICE.methods_by_name[method].input_type.name)()
    for name, value in (("job_id", "j"), ("phase_id", "p")):
        if name in message.DESCRIPTOR.fields_by_name:
            setattr(message, name, value)
    return message


def test_every_rpc_has_a_route():
    assert sorted(ROUTES) == sorted(m.name for m in SERVICE.methods)
    check_routes(SERVICE)  # and each can take its route


def test_a_method_without_a_route_stops_registration(monkeypatch):
    monkeypatch.setattr(routing, "ROUTES", {k: v for k, v in ROUTES.items() if k != "StopTask"})
    with pytest.raises(TypeError, match="StopTask has no route"):
        check_routes(SERVICE)
    with pytest.raises(TypeError, match="StopTask has no route"):  # before anything is registered
        add_runner_service(object.__new__(RunnerServicer), NoServer())


class NoServer:
    def add_generic_rpc_handlers(self, handlers):
        raise AssertionError("registered a service with an unrouted method")


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"GetJob": Route.OWNER}, "GetJob is routed to the phase's owner, but its request names no phase"),
        ({"GetPhaseDiff": Route.PLACE}, "GetPhaseDiff is routed to a replica with room, which relays a stream"),
        ({"WatchPhase": Route.OWNER}, "WatchPhase is routed to the phase's owner, which forwards a unary call"),
        ({"NoSuchMethod": Route.ANY}, "ROUTES names NoSuchMethod"),
    ],
)
def test_a_route_its_method_cannot_take_is_refused(changes, problem):
    with pytest.raises(TypeError, match=problem):
        check_routes(SERVICE, {**ROUTES, **changes})


@pytest.mark.parametrize("method", [name for name, route in ROUTES.items() if route is Route.OWNER])
def test_an_owner_route_forwards_a_phase_another_replica_runs(method):
    decision = router().decide(method, request(method), Context())
    assert decision == Forward("other:50051", {"owner": "other", "job_id": "j", "phase_id": "p"})


@pytest.mark.parametrize(
    ("method", "kwargs", "context"),
    [
        ("PausePhase", {"runs_here": True}, Context()),  # the phase runs in this process
        ("PausePhase", {"rows": (ENDED,)}, Context()),  # ended: answered from the database
        ("PausePhase", {"cluster": FakeCluster(owner="me")}, Context()),  # this replica owns it
        ("PausePhase", {"cluster": FakeCluster(owner=None)}, Context()),  # swept: no owner
        ("PausePhase", {"rows": ()}, Context()),  # no such phase: NOT_FOUND here
        ("PausePhase", {}, Context((FORWARDED_HEADER, "1"))),  # forwarded once already
        ("PausePhase", {"forwarder": False}, Context()),  # the database is not shared
        ("GetJob", {}, Context()),  # ANY: any replica answers
        ("WatchPhase", {}, Context()),
    ],
)
def test_calls_that_are_served_here(method, kwargs, context):
    assert router(**kwargs).decide(method, request(method), context) is HERE


def test_an_owner_whose_lease_ran_out_is_unreachable():
    with pytest.raises(RunnerError) as caught:
        router(FakeCluster(live=False)).decide("StopTask", request("StopTask"), Context())
    assert caught.value.reason == "OWNER_UNREACHABLE" and caught.value.metadata["owner"] == "other"


def test_a_diff_goes_to_the_owner_while_it_runs_and_to_the_recorder_once_it_ended():
    running = router().decide("GetPhaseDiff", request("GetPhaseDiff"), Context())
    assert running == Forward("other:50051", {"owner": "other", "job_id": "j", "phase_id": "p"})
    ended = router(rows=(ENDED,)).decide("GetPhaseDiff", request("GetPhaseDiff"), Context())
    assert ended == Forward("other:50051", {"replica": "other", "owner": "other", "job_id": "j", "phase_id": "p"})
    with pytest.raises(RunnerError) as caught:  # its recorder is gone and its diff is not on this disk
        router(FakeCluster(live=False), rows=(ENDED,)).decide("GetPhaseDiff", request("GetPhaseDiff"), Context())
    assert caught.value.reason == "RECORDING_REPLICA_UNAVAILABLE"


def test_a_run_phase_is_placed_only_when_this_replica_is_full_and_another_has_room():
    room = [ReplicaCapacity("me", "me:1", 1, 1, True), ReplicaCapacity("other", "other:1", 4, 1, True)]
    place = router(FakeCluster(capacity=room), full_here=True)
    assert place.decide("RunPhase", pb.RunPhaseRequest(job_id="j"), Context()) == Place(
        PlacementTarget("other", "other:1", 3))
    assert router(FakeCluster(capacity=room), full_here=False).decide("RunPhase", pb.RunPhaseRequest(), Context()) \
        is HERE
    assert router(FakeCluster(capacity=room), full_here=True, place=False).decide(
        "RunPhase", pb.RunPhaseRequest(), Context()) is HERE  # place_on_free_replica off
    assert router(FakeCluster(capacity=[]), full_here=True).decide("RunPhase", pb.RunPhaseRequest(), Context()) is HERE


class RecordingForwarder(OwnerForwarder):
    def __init__(self):
        super().__init__(None)
        self.sent = []

    async def forward(self, method, request, address, owner_metadata, time_remaining):
        self.sent.append((method, request, address, time_remaining))
        return "the owner's answer"


@pytest.mark.parametrize("method", [name for name, route in ROUTES.items() if route is Route.OWNER])
async def test_each_owner_routed_handler_sends_the_call_to_the_owner(method):
    """The handler wrappers ask the router, so no RPC can be missed: its handler never runs here."""
    servicer = object.__new__(RunnerServicer)  # no service: a handler that ran here would fail
    servicer.access = CallAccess(Authenticator(None), Authorization(lambda job_id: "default", lambda _: None))
    forwarder = RecordingForwarder()
    servicer.router = router()
    servicer.router.forwarder = forwarder
    message = request(method)
    answer = await getattr(servicer, method)(message.SerializeToString(), Context())
    assert answer == "the owner's answer"
    assert forwarder.sent == [(method, message, "other:50051", 7.5)]
