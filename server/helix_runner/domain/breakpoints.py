"""Breakpoints: conditions that hold a tool call before it runs until a person decides.

Tool-name and input-pattern breakpoints fire on every matching call (unless ``once``).
Cost and turn-count breakpoints are thresholds: they fire on the first tool call after the
threshold is reached, then stay spent (a threshold is crossed once).
"""

from __future__ import annotations

import enum
import re
import uuid
from dataclasses import dataclass, field

from helix_runner.errors import ErrorKind, RunnerError, invalid_field

MAX_REGEX_BYTES = 4 * 1024
MAX_BREAKPOINTS = 256


class BreakpointKind(enum.Enum):
    TOOL_NAME = "tool_name"
    INPUT_PATTERN = "input_pattern"
    COST_THRESHOLD = "cost_threshold_usd"
    TURN_COUNT = "turn_count"


@dataclass
class Breakpoint:
    """One breakpoint of a phase (mirrors ``helix.runner.v1.Breakpoint``)."""

    breakpoint_id: str
    kind: BreakpointKind
    tool_name: str = ""
    regex: str = ""
    cost_threshold_usd: float = 0.0
    turn_count: int = 0
    once: bool = False
    hit_count: int = 0
    _pattern: re.Pattern[str] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def create(
        cls,
        *,
        kind: BreakpointKind,
        breakpoint_id: str = "",
        tool_name: str = "",
        regex: str = "",
        cost_threshold_usd: float = 0.0,
        turn_count: int = 0,
        once: bool = False,
    ) -> Breakpoint:
        """A validated breakpoint; INVALID_ARGUMENT names the bad field."""
        if breakpoint_id and not re.match(r"^[A-Za-z0-9._:-]{1,128}$", breakpoint_id):
            raise invalid_field("breakpoint.breakpoint_id", "must be 1-128 characters of [A-Za-z0-9._:-]")
        pattern = None
        if kind is BreakpointKind.TOOL_NAME and not tool_name:
            raise invalid_field("breakpoint.tool_name", "must not be empty")
        if kind is BreakpointKind.INPUT_PATTERN:
            if not regex or len(regex.encode()) > MAX_REGEX_BYTES:
                raise invalid_field("breakpoint.input_pattern.regex", f"must be 1 to {MAX_REGEX_BYTES} bytes")
            try:
                pattern = re.compile(regex)
            except re.error as exc:
                raise invalid_field("breakpoint.input_pattern.regex", f"does not compile: {exc}") from None
        if kind is BreakpointKind.COST_THRESHOLD and not cost_threshold_usd > 0:
            raise invalid_field("breakpoint.cost_threshold_usd", "must be positive")
        if kind is BreakpointKind.TURN_COUNT and turn_count < 1:
            raise invalid_field("breakpoint.turn_count", "must be at least 1")
        return cls(
            breakpoint_id or f"bp-{uuid.uuid4().hex[:8]}",
            kind,
            tool_name,
            regex,
            cost_threshold_usd,
            turn_count,
            once,
            0,
            pattern,
        )

    @property
    def is_threshold(self) -> bool:
        return self.kind in (BreakpointKind.COST_THRESHOLD, BreakpointKind.TURN_COUNT)

    def matches(self, tool_name: str, input_json: str, cost_usd: float, turns: int) -> bool:
        if self.is_threshold and self.hit_count:
            return False  # a threshold is crossed once
        if self.kind is BreakpointKind.TOOL_NAME:
            return tool_name == self.tool_name
        if self.kind is BreakpointKind.INPUT_PATTERN:
            if self.tool_name and tool_name != self.tool_name:
                return False
            assert self._pattern is not None
            return self._pattern.search(input_json) is not None
        if self.kind is BreakpointKind.COST_THRESHOLD:
            return cost_usd >= self.cost_threshold_usd
        return turns >= self.turn_count


class BreakpointSet:
    """The breakpoints of one phase, in the order they were added."""

    def __init__(self) -> None:
        self._items: dict[str, Breakpoint] = {}

    def add(self, bp: Breakpoint) -> Breakpoint:
        if bp.breakpoint_id in self._items:
            raise RunnerError(
                ErrorKind.ALREADY_EXISTS,
                "INVALID_FIELD",
                f"breakpoint {bp.breakpoint_id} already exists",
                {"field": "breakpoint.breakpoint_id"},
            )
        if len(self._items) >= MAX_BREAKPOINTS:
            raise RunnerError(
                ErrorKind.RESOURCE_EXHAUSTED,
                "INVALID_FIELD",
                f"a phase can have at most {MAX_BREAKPOINTS} breakpoints",
                {"field": "breakpoint"},
            )
        self._items[bp.breakpoint_id] = bp
        return bp

    def remove(self, breakpoint_id: str) -> Breakpoint:
        try:
            return self._items.pop(breakpoint_id)
        except KeyError:
            raise RunnerError(
                ErrorKind.NOT_FOUND,
                "BREAKPOINT_NOT_FOUND",
                f"breakpoint {breakpoint_id} does not exist",
                {"breakpoint_id": breakpoint_id},
            ) from None

    def list(self) -> list[Breakpoint]:
        return list(self._items.values())

    def hit(self, tool_name: str, input_json: str, cost_usd: float, turns: int) -> Breakpoint | None:
        """The first breakpoint this call triggers (its hit is counted; ``once`` ones are removed)."""
        for bp in self._items.values():
            if bp.matches(tool_name, input_json, cost_usd, turns):
                bp.hit_count += 1
                if bp.once:
                    del self._items[bp.breakpoint_id]
                return bp
        return None
