"""A phase's network breakpoints as the proxy asks them (phases/egress_holds.py), without a proxy:
which requests are held, what an approval for the phase or the project lets through later."""

from __future__ import annotations

import asyncio

import pytest

from helix_runner.domain.breakpoints import Breakpoint, BreakpointKind
from helix_runner.domain.egress_hold import EgressDecision, EgressScope
from helix_runner.domain.events import GatewayEventKind
from helix_runner.phases.egress_holds import EgressHolds

REFUSED = "pypi.example is not in the phase's egress allowlist"


def holds(*breakpoints: Breakpoint, allowed: set[str] | None = None, timeout_s: float = 5.0):
    events, project = [], set(allowed or ())

    async def project_allows(project_id: str, host: str) -> bool:
        return host in project

    async def allow_project(project_id: str, host: str, by: str) -> None:
        project.add(host)

    h = EgressHolds(project="p", breakpoints=lambda: list(breakpoints), emit=events.append, changed=lambda: None,
                    hold_watchdog=lambda held: None, timeout_s=timeout_s, project_allows=project_allows,
                    allow_project=allow_project)
    return h, events, project


def unlisted() -> Breakpoint:
    return Breakpoint.create(kind=BreakpointKind.EGRESS, breakpoint_id="any", egress_unlisted=True)


async def decide(h: EgressHolds, events: list, decision: EgressDecision):
    for _ in range(1000):  # the gate's task runs until it holds (a few loop turns)
        if h.holds:
            break
        await asyncio.sleep(0)
    (hold_id,) = h.holds
    await h.resolve(hold_id, decision)


async def test_unlisted_hosts_are_held_and_listed_ones_are_not():
    h, events, _ = holds(unlisted())
    assert await h.gate("pypi.org", 443, "CONNECT", "", None) is None  # listed: not held
    gate = asyncio.ensure_future(h.gate("pypi.example", 443, "CONNECT", "", REFUSED))
    await decide(h, events, EgressDecision(True, EgressScope.PHASE))
    assert await gate is None
    # Approved for the phase: the next request to it is not held again.
    assert await h.gate("pypi.example", 443, "CONNECT", "", REFUSED) is None
    assert [e.kind for e in events] == [GatewayEventKind.EGRESS_HELD, GatewayEventKind.EGRESS_APPROVED]


async def test_an_approval_for_the_project_lets_its_later_phases_past_the_allowlist():
    h, events, project = holds(unlisted())
    gate = asyncio.ensure_future(h.gate("pypi.example", 443, "CONNECT", "", REFUSED))
    await decide(h, events, EgressDecision(True, EgressScope.PROJECT))
    assert await gate is None and project == {"pypi.example:443"}
    later, later_events, _ = holds(allowed=project)  # another phase, no breakpoint
    assert await later.gate("pypi.example", 443, "CONNECT", "", REFUSED) is None
    assert await later.gate("other.example", 443, "CONNECT", "", "other.example is not in ...") is not None
    assert later_events == []


async def test_a_host_pattern_holds_matching_hosts_only():
    bp = Breakpoint.create(kind=BreakpointKind.EGRESS, breakpoint_id="gh", egress_host="*.github.com:443")
    h, events, _ = holds(bp)
    assert await h.gate("github.com", 443, "CONNECT", "", None) is None
    assert await h.gate("api.github.com", 80, "GET", "/", None) is None  # another port
    gate = asyncio.ensure_future(h.gate("api.github.com", 443, "CONNECT", "", None))
    await decide(h, events, EgressDecision.deny("no pushes today"))
    assert await gate == "denied: no pushes today" and bp.hit_count == 1


async def test_a_held_request_whose_client_went_away_is_held_no_longer():
    h, events, _ = holds(unlisted())
    gate = asyncio.ensure_future(h.gate("pypi.example", 443, "CONNECT", "", REFUSED))
    for _ in range(1000):
        if h.holds:
            break
        await asyncio.sleep(0)
    (hold_id,) = h.holds
    gate.cancel()  # what the proxy does when the tool's connection closes
    with pytest.raises(asyncio.CancelledError):
        await gate
    assert h.holds == {} and not h.waiting  # the phase no longer waits on it
    assert [e.kind for e in events] == [GatewayEventKind.EGRESS_HELD, GatewayEventKind.EGRESS_DENIED]
    with pytest.raises(Exception, match="EGRESS_NOT_HELD|no network request"):
        await h.resolve(hold_id, EgressDecision(True))


@pytest.mark.parametrize(("host", "unlisted_hosts", "problem"), [
    ("", False, "exactly one"), ("a.example", True, "exactly one"), ("http://x", False, "host pattern"),
])
def test_a_network_breakpoint_names_exactly_one_valid_condition(host, unlisted_hosts, problem):
    from helix_runner.errors import RunnerError

    with pytest.raises(RunnerError, match=problem):
        Breakpoint.create(kind=BreakpointKind.EGRESS, egress_host=host, egress_unlisted=unlisted_hosts)
