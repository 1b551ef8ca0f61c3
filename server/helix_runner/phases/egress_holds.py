"""A phase's network breakpoints at work: requests through the egress proxy held until decided.

The proxy asks ``gate`` about each destination once it has applied the phase's allowlist
(``refusal``: why the allowlist refuses the name, or None). A request to a host the phase or its
project approved before goes through; one a network breakpoint matches (its host pattern, or "any
host the allowlist does not name") is *held*: the phase is AWAITING_APPROVAL, its stream gets an
``EGRESS_HELD`` event with the request (destination, method and path where the proxy sees them),
and the proxy's connection waits. ``resolve`` (ResolveEgressHold) decides: approved once, for the
phase or for the project (a stored allowance), or denied with a reason that becomes the proxy's
403 body, so the model reads why. Undecided after ``timeout_s`` it is denied saying so. The
address checks (no private address unless the operator allowed it) still apply after an approval:
an approval lifts the allowlist, not the network rules (docs/network.md, "Network breakpoints").
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from helix_runner.domain.access import actor
from helix_runner.domain.breakpoints import Breakpoint
from helix_runner.domain.egress_hold import EgressDecision, EgressScope
from helix_runner.domain.events import GatewayEvent, GatewayEventKind
from helix_runner.errors import ErrorKind, RunnerError

DEFAULT_HOLD_TIMEOUT_S = 300.0


@dataclass
class EgressHold:
    hold_id: str
    destination: str
    method: str
    path: str
    breakpoint_id: str
    since_ns: int
    decision: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class EgressHolds:
    """The held requests of one phase, and the hosts approved for it."""

    def __init__(self, *, project: str, breakpoints: Callable[[], list[Breakpoint]],
                 emit: Callable[[GatewayEvent], Any], changed: Callable[[], None],
                 hold_watchdog: Callable[[bool], None], timeout_s: float = DEFAULT_HOLD_TIMEOUT_S,
                 project_allows: Callable[[str, str], Awaitable[bool]] | None = None,
                 allow_project: Callable[[str, str, str], Awaitable[None]] | None = None):
        self.project = project
        self._breakpoints = breakpoints
        self._emit = emit
        self._changed = changed
        self._hold_watchdog = hold_watchdog
        self.timeout_s = timeout_s
        self._project_allows = project_allows
        self._allow_project = allow_project
        self.holds: dict[str, EgressHold] = {}
        self.approved: set[str] = set()  # host:port approved for the rest of the phase

    def configure_project(self, project_allows: Callable[[str, str], Awaitable[bool]],
                          allow_project: Callable[[str, str, str], Awaitable[None]]) -> None:
        """Where approvals for the project are stored and read (the shared store)."""
        self._project_allows, self._allow_project = project_allows, allow_project

    @property
    def waiting(self) -> bool:
        return bool(self.holds)

    def reason(self) -> str:
        """The status reason while requests wait."""
        first = next(iter(self.holds.values()))
        more = f" (and {len(self.holds) - 1} more)" if len(self.holds) > 1 else ""
        return f"a network request to {first.destination} waits for approval ({first.hold_id}){more}"

    async def gate(self, host: str, port: int, method: str, path: str, refusal: str | None) -> str | None:
        """Why the request is refused after all (None: it goes on to the address checks)."""
        destination = f"{host.lower().rstrip('.')}:{port}"
        if destination in self.approved:
            return None
        if refusal is not None and self._project_allows is not None and \
                await self._project_allows(self.project, destination):
            return None
        bp = next((b for b in self._breakpoints() if b.holds_egress(host, port, refusal is None)), None)
        if bp is None:
            return refusal
        bp.hit_count += 1
        hold = EgressHold(f"eg-{uuid.uuid4().hex[:10]}", destination, method, path, bp.breakpoint_id,
                          time.time_ns())
        self.holds[hold.hold_id] = hold
        self._hold_watchdog(True)
        self._emit(GatewayEvent(kind=GatewayEventKind.EGRESS_HELD, http_status=0, destination=destination,
                                method=method, path=path, hold_id=hold.hold_id, breakpoint_id=bp.breakpoint_id,
                                message=f"held by breakpoint {bp.breakpoint_id}"))
        self._changed()
        try:
            decision: EgressDecision = await asyncio.wait_for(asyncio.shield(hold.decision), self.timeout_s)
        except TimeoutError:
            why = f"not decided within {self.timeout_s:g} s (egress_hold_timeout_seconds)"
            self._emit(GatewayEvent(kind=GatewayEventKind.EGRESS_DENIED, http_status=403, destination=destination,
                                    method=method, path=path, hold_id=hold.hold_id, message=why))
            return why
        except asyncio.CancelledError:  # the request's connection closed while it was held
            if not hold.decision.done():
                hold.decision.cancel()
                self._emit(GatewayEvent(kind=GatewayEventKind.EGRESS_DENIED, http_status=0, destination=destination,
                                        method=method, path=path, hold_id=hold.hold_id,
                                        message="the request's connection closed while it was held"))
            raise
        finally:
            self.holds.pop(hold.hold_id, None)
            self._hold_watchdog(False)
            self._changed()
        return None if decision.approve else f"denied: {decision.reason}"

    async def resolve(self, hold_id: str, decision: EgressDecision) -> EgressHold:
        """Decides a held request (FAILED_PRECONDITION ``EGRESS_NOT_HELD`` when none waits under that id)."""
        hold = self.holds.get(hold_id)
        if hold is None or hold.decision.done():
            raise RunnerError(ErrorKind.FAILED_PRECONDITION, "EGRESS_NOT_HELD",
                              f"no network request of this phase is held as {hold_id}", {"hold_id": hold_id})
        who = actor()
        if decision.approve and decision.scope is not EgressScope.ONCE:
            self.approved.add(hold.destination)
            if decision.scope is EgressScope.PROJECT and self._allow_project is not None:
                await self._allow_project(self.project, hold.destination, who)
        if hold.decision.done():  # timed out while the allowance was written
            raise RunnerError(ErrorKind.FAILED_PRECONDITION, "EGRESS_NOT_HELD",
                              f"no network request of this phase is held as {hold_id}", {"hold_id": hold_id})
        kind = GatewayEventKind.EGRESS_APPROVED if decision.approve else GatewayEventKind.EGRESS_DENIED
        self._emit(GatewayEvent(kind=kind, http_status=0 if decision.approve else 403, destination=hold.destination,
                                method=hold.method, path=hold.path, hold_id=hold.hold_id, actor=who,
                                message=decision.describe()[:1024]))
        hold.decision.set_result(decision)
        return hold

    def release(self, why: str) -> None:
        """The phase ends: every held request is refused with ``why``."""
        for hold in list(self.holds.values()):
            if not hold.decision.done():
                hold.decision.set_result(EgressDecision(False, EgressScope.ONCE, why))
