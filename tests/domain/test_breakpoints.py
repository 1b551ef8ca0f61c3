"""Breakpoint conditions: names, input patterns, thresholds crossed once, `once`, validation."""

from __future__ import annotations

import pytest

from helix_runner.domain.breakpoints import Breakpoint, BreakpointKind, BreakpointSet
from helix_runner.errors import RunnerError

K = BreakpointKind


def test_tool_name_and_pattern():
    bps = BreakpointSet()
    bps.add(Breakpoint.create(kind=K.INPUT_PATTERN, breakpoint_id="rm", regex=r"rm\s+-rf", tool_name="Bash"))
    bps.add(Breakpoint.create(kind=K.TOOL_NAME, breakpoint_id="w", tool_name="Write"))
    assert bps.hit("Bash", '{"command":"ls"}', 0, 1) is None
    assert bps.hit("Bash", '{"command":"rm -rf build"}', 0, 1).breakpoint_id == "rm"
    assert bps.hit("Read", '{"command":"rm -rf build"}', 0, 1) is None  # pattern restricted to Bash
    assert bps.hit("Write", "{}", 0, 1).breakpoint_id == "w"
    assert bps.hit("Write", "{}", 0, 1).hit_count == 2


def test_thresholds_fire_once():
    bps = BreakpointSet()
    bps.add(Breakpoint.create(kind=K.COST_THRESHOLD, breakpoint_id="cost", cost_threshold_usd=0.5))
    bps.add(Breakpoint.create(kind=K.TURN_COUNT, breakpoint_id="turns", turn_count=3))
    assert bps.hit("Bash", "{}", 0.49, 1) is None
    assert bps.hit("Bash", "{}", 0.5, 1).breakpoint_id == "cost"
    assert bps.hit("Bash", "{}", 0.9, 2) is None
    assert bps.hit("Bash", "{}", 0.9, 3).breakpoint_id == "turns"
    assert bps.hit("Bash", "{}", 0.9, 4) is None


def test_once_removes_after_hit_and_remove_unknown():
    bps = BreakpointSet()
    bps.add(Breakpoint.create(kind=K.TOOL_NAME, breakpoint_id="b", tool_name="Bash", once=True))
    assert bps.hit("Bash", "{}", 0, 0) is not None
    assert bps.hit("Bash", "{}", 0, 0) is None and bps.list() == []
    with pytest.raises(RunnerError) as caught:
        bps.remove("b")
    assert caught.value.reason == "BREAKPOINT_NOT_FOUND"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"kind": K.INPUT_PATTERN, "regex": "("}, "breakpoint.input_pattern.regex"),
        ({"kind": K.INPUT_PATTERN, "regex": ""}, "breakpoint.input_pattern.regex"),
        ({"kind": K.TOOL_NAME}, "breakpoint.tool_name"),
        ({"kind": K.COST_THRESHOLD, "cost_threshold_usd": 0}, "breakpoint.cost_threshold_usd"),
        ({"kind": K.TURN_COUNT, "turn_count": 0}, "breakpoint.turn_count"),
        ({"kind": K.TOOL_NAME, "tool_name": "x", "breakpoint_id": "bad id"}, "breakpoint.breakpoint_id"),
    ],
)
def test_validation(kwargs, field):
    with pytest.raises(RunnerError) as caught:
        Breakpoint.create(**kwargs)
    assert caught.value.metadata["field"] == field


def test_duplicate_id():
    bps = BreakpointSet()
    bps.add(Breakpoint.create(kind=K.TOOL_NAME, breakpoint_id="x", tool_name="Bash"))
    with pytest.raises(RunnerError) as caught:
        bps.add(Breakpoint.create(kind=K.TOOL_NAME, breakpoint_id="x", tool_name="Read"))
    assert caught.value.kind.name == "ALREADY_EXISTS"
