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


# ------------------------------------------------------------------------------------------------
# Caller-supplied patterns: linear time (RE2), bounded input, RE2 syntax only.

# Patterns that take exponential time on a backtracking engine (Python's re) when the input almost
# matches; with 64 "a"s even the first one never finishes there.
CATASTROPHIC = [r"(a+)+$", r"(a|aa)+$", r"(a|a?)+$", r"(a*)*b", r"^(\w+\s?)*$", r"(x+x+)+y", r"(.*a){20}!"]
CATASTROPHIC_CHECK = """
import json, sys
from helix_runner.domain.breakpoints import Breakpoint, BreakpointKind
out = {}
for regex in json.loads(sys.argv[1]):
    bp = Breakpoint.create(kind=BreakpointKind.INPUT_PATTERN, regex=regex)
    out[regex] = [
        bp.matches("Bash", json.dumps({"command": "a" * 64 + "!"}), 0, 0),
        bp.matches("Bash", json.dumps({"command": "a" * 65000 + "!"}), 0, 0),  # inside the 64 KiB searched
        bp.matches("Bash", "x" * 64 + "y", 0, 0),
    ]
print(json.dumps(out))
"""


def test_catastrophic_patterns_finish_on_long_inputs():
    # In a child process: a backtracking engine would hold the GIL (and this process) forever.
    import json
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", CATASTROPHIC_CHECK, json.dumps(CATASTROPHIC)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    results = json.loads(done.stdout)
    assert results == {
        r"(a+)+$": [False, False, False],
        r"(a|aa)+$": [False, False, False],
        r"(a|a?)+$": [True, True, True],  # matches the empty string at the end
        r"(a*)*b": [False, False, False],
        r"^(\w+\s?)*$": [False, False, True],
        r"(x+x+)+y": [False, False, True],
        r"(.*a){20}!": [True, True, False],
    }


def test_patterns_search_only_the_first_64_kib_of_the_input():
    from helix_runner.domain.bounds import BREAKPOINT_SEARCH_MAX_BYTES as MAX_SEARCH_BYTES

    bp = Breakpoint.create(kind=K.INPUT_PATTERN, regex="NEEDLE")
    assert bp.matches("Bash", "x" * (MAX_SEARCH_BYTES - 6) + "NEEDLE", 0, 0)
    assert not bp.matches("Bash", "x" * (MAX_SEARCH_BYTES - 5) + "NEEDLE", 0, 0)
    assert Breakpoint.create(kind=K.INPUT_PATTERN, regex="é$").matches("Bash", "café", 0, 0)  # UTF-8 aware


@pytest.mark.parametrize("regex", [r"(a)\1", r"(?=x)", r"(?!x)y", r"(?<=x)y", r"(?<!x)y", r"a++", r"\Z"])
def test_patterns_re2_cannot_run_in_linear_time_are_invalid(regex):
    with pytest.raises(RunnerError) as caught:
        Breakpoint.create(kind=K.INPUT_PATTERN, regex=regex, field_path="options.breakpoints[3]")
    assert caught.value.kind.name == "INVALID_ARGUMENT"
    assert caught.value.metadata == {"field": "options.breakpoints[3].input_pattern.regex"}
    assert "RE2" in caught.value.message


def test_pattern_size_bound_stays_4_kib():
    Breakpoint.create(kind=K.INPUT_PATTERN, regex="a" * 4096)
    with pytest.raises(RunnerError) as caught:
        Breakpoint.create(kind=K.INPUT_PATTERN, regex="é" * 2049)  # 4098 bytes
    assert caught.value.metadata["field"] == "breakpoint.input_pattern.regex"


def test_a_phase_starts_with_at_most_256_breakpoints_with_unique_ids():
    many = [Breakpoint.create(kind=K.TOOL_NAME, tool_name="Bash") for _ in range(257)]
    assert len(BreakpointSet.of(many[:256]).list()) == 256
    for bad in (many, [many[0], many[0]]):
        with pytest.raises(RunnerError) as caught:
            BreakpointSet.of(bad)
        assert (caught.value.kind.name, caught.value.metadata) == (
            "INVALID_ARGUMENT",
            {"field": "options.breakpoints"},
        )


def test_a_hit_found_off_the_loop_does_not_count_once_its_breakpoint_is_gone():
    from helix_runner.domain.breakpoints import first_match

    bps = BreakpointSet()
    bp = bps.add(Breakpoint.create(kind=K.INPUT_PATTERN, breakpoint_id="p", regex="rm"))
    found = first_match(bps.list(), "Bash", '{"command":"rm x"}', 0, 0)
    assert found is bp and bp.hit_count == 0  # finding changes nothing
    bps.remove("p")
    assert not bps.record_hit(found) and bp.hit_count == 0
