"""One routing table for every RPC: which replica answers a call (docs/scale-out.md, "Routing").

On a shared database a call may reach any replica. Each RunnerService method has one route here:

* ``ANY``: any replica answers from the shared database (the reads, WatchPhase: a phase another
  replica runs is followed through LISTEN/NOTIFY);
* ``OWNER``: it needs the phase's process, so while another replica runs the phase the call is
  forwarded to that replica (``api/forwarding.py``);
* ``OWNER_OR_RECORDER``: the owner while the phase runs; once it ended, the replica whose disk holds
  its recording (GetPhaseDiff);
* ``PLACE``: a new phase that would queue for this replica's own limit is relayed to a replica with
  room (RunPhase, ``api/placement.py``).

``Router.decide`` turns a call's route into what to do with it: serve it here (``HERE``), forward it
(``Forward``) or place it (``Place``). The handler wrappers in ``api/servicer.py`` ask it once per
call, so a handler never mentions replicas, and the Connect path (``api/connect_app.py``) routes
the same way because it calls the same wrapped handlers. Each method also has the permission it
needs (``PERMISSIONS``: a role on the project its scope names, checked before routing by
``api/authorization.py``). ``check_routes`` runs at registration: a method without a route or a
permission, an entry for no method, or a route its method cannot take (no phase ids, a stream where
a unary call is forwarded) stops the server from starting, so a new RPC cannot be left out. A forwarded call carries ``x-helix-forwarded`` and is always served where it arrives.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf.descriptor import ServiceDescriptor

from helix_runner.api.forwarding import FORWARDED_HEADER, OwnerForwarder
from helix_runner.api.phase_diff import diff_path
from helix_runner.api.placement import place_run_phase
from helix_runner.domain.access import Role
from helix_runner.phases.placement import PlacementTarget
from helix_runner.phases.replicas import Replicas


class Route(enum.Enum):
    """Where a method is answered on a shared database (see the module docstring)."""

    ANY = "any replica"
    OWNER = "the phase's owner"
    OWNER_OR_RECORDER = "the phase's owner, or the replica that recorded it"
    PLACE = "a replica with room"


ROUTES: Mapping[str, Route] = {
    "RunPhase": Route.PLACE,
    "WatchPhase": Route.ANY,
    "GetJob": Route.ANY,
    "ListJobs": Route.ANY,
    "ListToolCalls": Route.ANY,
    "GetCostTotals": Route.ANY,
    "GetServerStatus": Route.ANY,  # the sandbox and containment of the replica asked, not forwarded
    "GetPhaseDiff": Route.OWNER_OR_RECORDER,
    "InspectPhase": Route.OWNER,  # the context usage is asked of the running CLI
    "CancelPhase": Route.OWNER,
    "PausePhase": Route.OWNER,
    "ResumePhase": Route.OWNER,
    "StepPhase": Route.OWNER,
    "InterruptPhase": Route.OWNER,
    "SetPhaseModel": Route.OWNER,
    "SetPhasePermissionMode": Route.OWNER,
    "StopTask": Route.OWNER,
    "GetTaskOutput": Route.OWNER,
    "InjectMessage": Route.OWNER,
    "AddBreakpoint": Route.OWNER,
    "ListBreakpoints": Route.OWNER,
    "RemoveBreakpoint": Route.OWNER,
    "ResolveToolCall": Route.OWNER,
    # Webhooks live in the shared database: any replica creates, lists, deletes and reads them.
    "CreateWebhook": Route.ANY,
    "ListWebhooks": Route.ANY,
    "DeleteWebhook": Route.ANY,
    "ListWebhookDeliveries": Route.ANY,
    # The vault's rows are in the shared database too (sealed with the key every replica shares).
    "PutEgressSecret": Route.ANY,
    "ListEgressSecrets": Route.ANY,
    "DeleteEgressSecret": Route.ANY,
    # A fork reads the phase's checkpoints and transcript from the shared database and its files from
    # the repository (on a root every replica mounts), so any replica starts it (docs/fork-and-rewind.md).
    "ForkPhase": Route.ANY,
    # A rewind stops and resumes the phase's CLI: its owner's.
    "RewindPhase": Route.OWNER,
    # The audit trail is in the shared database; who the caller is, any replica can say.
    "ListAuditEntries": Route.ANY,
    "WhoAmI": Route.ANY,
    # Quotas are rows of the shared database; the spend is summed there.
    "SetProjectQuota": Route.ANY,
    "GetProjectQuota": Route.ANY,
    # A held network request waits in the proxy of the phase's replica: its owner decides.
    "ResolveEgressHold": Route.OWNER,
    "ListEgressAllowances": Route.ANY,
    "DeleteEgressAllowance": Route.ANY,
}



class Scope(enum.Enum):
    """Which project a call touches, for its permission check (``api/authorization.py``)."""

    PHASE = "the project of the job the request names"
    PROJECT = "the request's project_id (empty: the default project)"
    PROJECTS = "the request's project_id (empty: every project)"
    WEBHOOK = "the project of the webhook the request names, else of its job, else every project"
    COSTS = "the job's project when the request names one, else its project_id (empty: the default)"
    LISTING = "every project the caller may see (the answer is filtered)"
    SERVER = "the server itself: a grant on every project (\"*\")"


@dataclass(frozen=True)
class Need:
    """What a call needs: ``role`` on the project its ``scope`` names; an action (not a read) that
    needs more than ``viewer`` is recorded in the audit trail."""

    role: Role
    scope: Scope
    read: bool = False  # a read that needs more than viewer (listing secrets, the audit trail)
    also: Role | None = None  # a second role that may do it too (an approver resumes a paused phase)

    def allows(self, may: Callable[[Role], bool]) -> bool:
        """Whether a principal that ``may`` hold roles (on the project in question) may make the call."""
        return may(self.role) or (self.also is not None and may(self.also))

    @property
    def audited(self) -> bool:
        return self.role is not Role.VIEWER and not self.read


_V, _O, _A, _ADMIN = Role.VIEWER, Role.OPERATOR, Role.APPROVER, Role.ADMIN

# The permission each RPC needs (docs/tenancy.md); check_routes stops a start without one.
PERMISSIONS: Mapping[str, Need] = {
    "RunPhase": Need(_O, Scope.PROJECT),
    "WatchPhase": Need(_V, Scope.PHASE),
    "GetJob": Need(_V, Scope.PHASE),
    "ListJobs": Need(_V, Scope.LISTING),
    "ListToolCalls": Need(_V, Scope.PHASE),
    "GetCostTotals": Need(_V, Scope.COSTS),
    "GetServerStatus": Need(_ADMIN, Scope.SERVER, read=True),
    "GetPhaseDiff": Need(_V, Scope.PHASE),
    "InspectPhase": Need(_V, Scope.PHASE),
    "CancelPhase": Need(_O, Scope.PHASE),
    "PausePhase": Need(_O, Scope.PHASE),
    # An approver may let a paused phase go on too (a phase a spend quota paused, once it is raised).
    "ResumePhase": Need(_O, Scope.PHASE, also=_A),
    "StepPhase": Need(_O, Scope.PHASE),
    "InterruptPhase": Need(_O, Scope.PHASE),
    "SetPhaseModel": Need(_O, Scope.PHASE),
    "SetPhasePermissionMode": Need(_O, Scope.PHASE),
    "StopTask": Need(_O, Scope.PHASE),
    "GetTaskOutput": Need(_V, Scope.PHASE),
    "InjectMessage": Need(_O, Scope.PHASE),
    "AddBreakpoint": Need(_O, Scope.PHASE),
    "ListBreakpoints": Need(_V, Scope.PHASE),
    "RemoveBreakpoint": Need(_O, Scope.PHASE),
    "ResolveToolCall": Need(_A, Scope.PHASE),
    "CreateWebhook": Need(_ADMIN, Scope.PROJECTS),  # no project: a server-wide subscription
    "ListWebhooks": Need(_ADMIN, Scope.PROJECTS, read=True),
    "DeleteWebhook": Need(_ADMIN, Scope.WEBHOOK),
    "ListWebhookDeliveries": Need(_ADMIN, Scope.WEBHOOK, read=True),
    "ForkPhase": Need(_O, Scope.PHASE),
    "RewindPhase": Need(_O, Scope.PHASE),
    "PutEgressSecret": Need(_ADMIN, Scope.PROJECT),
    "ListEgressSecrets": Need(_ADMIN, Scope.PROJECT, read=True),
    "DeleteEgressSecret": Need(_ADMIN, Scope.PROJECT),
    "ListAuditEntries": Need(_ADMIN, Scope.PROJECTS, read=True),
    "WhoAmI": Need(_V, Scope.LISTING),
    "SetProjectQuota": Need(_ADMIN, Scope.PROJECT),
    "GetProjectQuota": Need(_V, Scope.PROJECT),
    "ResolveEgressHold": Need(_A, Scope.PHASE),
    "ListEgressAllowances": Need(_ADMIN, Scope.PROJECT, read=True),
    "DeleteEgressAllowance": Need(_ADMIN, Scope.PROJECT),
}

_PHASE_IDS = frozenset({"job_id", "phase_id"})


def check_routes(service: ServiceDescriptor, routes: Mapping[str, Route] | None = None) -> None:
    """Raises ``TypeError`` unless every method of ``service`` has exactly one route (``ROUTES``) it can take."""
    routes = ROUTES if routes is None else routes
    methods = {m.name: m for m in service.methods}
    problems = [f"{name} has no route in api/routing.py ROUTES" for name in methods if name not in routes]
    problems += [f"ROUTES names {name}, which {service.full_name} does not have" for name in routes
                 if name not in methods]
    problems += [f"{name} has no permission in api/routing.py PERMISSIONS" for name in methods
                 if name not in PERMISSIONS]
    problems += [f"PERMISSIONS names {name}, which {service.full_name} does not have" for name in PERMISSIONS
                 if name not in methods]
    for name, need in PERMISSIONS.items():
        method = methods.get(name)
        fields = set(method.input_type.fields_by_name) if method is not None else set()
        wanted = {Scope.PHASE: {"job_id"}, Scope.PROJECT: {"project_id"}, Scope.PROJECTS: {"project_id"},
                  Scope.COSTS: {"job_id", "project_id"}}.get(need.scope, set())
        if method is not None and not wanted <= fields:
            problems.append(f"{name} needs {need.role.value} on {need.scope.value}, but its request has no "
                            f"{', '.join(sorted(wanted - fields))}")
    for name, route in routes.items():
        method = methods.get(name)
        if method is None or route is Route.ANY:
            continue
        if not _PHASE_IDS <= set(method.input_type.fields_by_name):
            problems.append(f"{name} is routed to {route.value}, but its request names no phase (job_id, phase_id)")
        elif route is Route.PLACE and not method.server_streaming:
            problems.append(f"{name} is routed to {route.value}, which relays a stream; it is unary")
        elif route is not Route.PLACE and method.server_streaming:
            problems.append(f"{name} is routed to {route.value}, which forwards a unary call; it streams")
    if problems:
        raise TypeError("; ".join(problems))


class Here:
    """Serve the call on this replica."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "HERE"


HERE = Here()


@dataclass(frozen=True)
class Forward:
    """Send the call to the replica at ``address``; ``metadata`` names it and the phase in errors."""

    address: str
    metadata: dict[str, str]


@dataclass(frozen=True)
class Place:
    """Relay the RunPhase to ``target``, which has room (it may still refuse: then it runs here)."""

    target: PlacementTarget


Decision = Here | Forward | Place


class Router:
    """Decides each call's route from ``ROUTES`` and sends the calls that go elsewhere.

    Without a forwarder (the database is not shared) every call is served here.
    """

    def __init__(self, replicas: Replicas, forwarder: OwnerForwarder | None, *, place_on_free_replica: bool,
                 new_phase_id: Callable[[], str]):
        self.replicas = replicas
        self.forwarder = forwarder
        self.place_on_free_replica = place_on_free_replica
        self._new_phase_id = new_phase_id

    def decide(self, method: str, request: Any, context: Any) -> Decision:
        """Where this call is answered. Raises ``OWNER_UNREACHABLE`` / ``RECORDING_REPLICA_UNAVAILABLE``
        when the replica it must go to cannot answer (``OwnerForwarder``)."""
        route = ROUTES[method]
        if self.forwarder is None or route is Route.ANY or forwarded(context):
            return HERE
        if route is Route.PLACE:
            if not self.place_on_free_replica:
                return HERE
            target = self.replicas.placement_target()
            return HERE if target is None else Place(target)
        located = self.replicas.locate(request.job_id, request.phase_id)
        if located is None:
            return HERE
        row = located.row
        if located.running:
            where = self.forwarder.route(located.owner, row.job_id, row.phase_id)
        elif route is Route.OWNER_OR_RECORDER and row.end_time_ns:
            # A finished phase's recording is on the disk of the replica that ran it; here too when
            # the recordings directory is a shared volume.
            path = diff_path(row)
            where = self.forwarder.recording_route(located.owner, row.job_id, row.phase_id,
                                                   path is not None and path.is_file())
        else:
            return HERE
        return HERE if where is None else Forward(*where)

    async def forward(self, method: str, request: Any, decision: Forward, context: Any) -> Any:
        """The other replica's answer (its error status as ``OwnerStatus``)."""
        assert self.forwarder is not None
        return await self.forwarder.forward(method, request, decision.address, decision.metadata,
                                            time_remaining(context))

    async def place(self, request: Any, decision: Place, context: Any) -> AsyncIterator[bytes] | None:
        """The target's RunPhase stream; None when it refused and wrote nothing (then it runs here,
        under the same phase id)."""
        assert self.forwarder is not None
        request.phase_id = request.phase_id or self._new_phase_id()
        with self.replicas.placements.placing(decision.target):  # until the target answered
            return await place_run_phase(self.forwarder, request, decision.target, context,
                                         functools.partial(self.replicas.recorded, request.job_id, request.phase_id))


def forwarded(context: Any) -> bool:
    """Whether another replica forwarded this call (then it is answered here, never forwarded again)."""
    return any(key == FORWARDED_HEADER for key, _ in context.invocation_metadata() or ())


def time_remaining(context: Any) -> float | None:
    """The caller's remaining deadline in seconds (None: none)."""
    return context.time_remaining()
