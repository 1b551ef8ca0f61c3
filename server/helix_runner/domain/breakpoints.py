"""Breakpoints: conditions that hold a tool call before it runs until a person decides.

Tool-name and input-pattern breakpoints fire on every matching call (unless ``once``).
Cost and turn-count breakpoints are thresholds: they fire on the first tool call after the
threshold is reached, then stay spent (a threshold is crossed once).

Input patterns come from callers, so they run on RE2 (``google-re2``), whose search time is linear
in the input: a backtracking engine such as Python's ``re`` takes exponential time on patterns
like ``(a+)+$`` and would pin the event loop. RE2 has no backreferences or lookaround; patterns
using them are rejected as invalid. The text searched is bounded too (``BREAKPOINT_SEARCH_MAX_BYTES``).
"""

from __future__ import annotations

import enum
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import re2

from helix_runner.domain.bounds import (
    BREAKPOINT_REGEX_MAX_BYTES,
    BREAKPOINT_SEARCH_MAX_BYTES,
    MAX_BREAKPOINTS,
)
from helix_runner.errors import ErrorKind, RunnerError, invalid_field

# A pattern sees the first 64 KiB of the input's compact JSON (BREAKPOINT_SEARCH_MAX_BYTES): the
# bound of ToolCall.input_json, so a pattern matches what a client is shown. With RE2 a search
# costs at most about (bytes searched) x (compiled program size), so bounding both bounds the time.
# RE2's own default; it caps the compiled program and the lazily built DFA of one pattern.
REGEX_MAX_MEM = 8 << 20


def _re2_options() -> re2.Options:
    options = re2.Options()
    options.never_capture = True  # only "is there a match" matters; no submatch bookkeeping
    options.log_errors = False  # a bad pattern is the caller's error, not a line on our stderr
    options.max_mem = REGEX_MAX_MEM
    return options


_RE2_OPTIONS = _re2_options()


def compile_pattern(regex: str, field_name: str) -> Any:
    """The RE2 pattern for a caller's regex; INVALID_ARGUMENT naming ``field_name`` if it is not one."""
    if not regex or len(regex.encode("utf-8", "surrogatepass")) > BREAKPOINT_REGEX_MAX_BYTES:
        raise invalid_field(field_name, f"must be 1 to {BREAKPOINT_REGEX_MAX_BYTES} bytes")
    try:
        return re2.compile(regex, _RE2_OPTIONS)
    except re2.error as exc:
        why = exc.args[0] if exc.args else ""
        if isinstance(why, bytes):
            why = why.decode("utf-8", "replace")
        raise invalid_field(
            field_name, f"is not a valid RE2 pattern (no backreferences or lookaround): {why}"[:512]
        ) from None
    except (TypeError, UnicodeError):  # e.g. a lone surrogate, which has no UTF-8 form
        raise invalid_field(field_name, "is not valid UTF-8") from None


def search_bytes(input_json: str | bytes) -> bytes:
    """The part of a tool input that patterns search: its first ``BREAKPOINT_SEARCH_MAX_BYTES`` bytes."""
    if isinstance(input_json, str):
        input_json = input_json.encode("utf-8", "surrogatepass")
    return input_json[:BREAKPOINT_SEARCH_MAX_BYTES]


# A network breakpoint's host: a name or *.suffix (letters, digits, dots, hyphens), or an IPv4
# address, with an optional port.
_EGRESS_HOST = re.compile(r"^(\*\.)?[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?(:[0-9]{1,5})?$")


class BreakpointKind(enum.Enum):
    TOOL_NAME = "tool_name"
    INPUT_PATTERN = "input_pattern"
    COST_THRESHOLD = "cost_threshold_usd"
    TURN_COUNT = "turn_count"
    EGRESS = "egress"  # a network breakpoint: holds requests through the egress proxy, never tool calls


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
    _pattern: Any = field(default=None, repr=False, compare=False)  # the compiled RE2 pattern
    egress_host: str = ""  # EGRESS: a host pattern (example.com, *.example.com, optional :port)
    egress_unlisted: bool = False  # EGRESS: any host the phase's allowlist does not name

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
        field_path: str = "breakpoint",
        egress_host: str = "",
        egress_unlisted: bool = False,
    ) -> Breakpoint:
        """A validated breakpoint; INVALID_ARGUMENT names the bad field under ``field_path``."""
        if breakpoint_id and not re.match(r"^[A-Za-z0-9._:-]{1,128}$", breakpoint_id):
            raise invalid_field(f"{field_path}.breakpoint_id", "must be 1-128 characters of [A-Za-z0-9._:-]")
        pattern = None
        if kind is BreakpointKind.TOOL_NAME and not tool_name:
            raise invalid_field(f"{field_path}.tool_name", "must not be empty")
        if kind is BreakpointKind.INPUT_PATTERN:
            pattern = compile_pattern(regex, f"{field_path}.input_pattern.regex")
        if kind is BreakpointKind.COST_THRESHOLD and not cost_threshold_usd > 0:
            raise invalid_field(f"{field_path}.cost_threshold_usd", "must be positive")
        if kind is BreakpointKind.TURN_COUNT and turn_count < 1:
            raise invalid_field(f"{field_path}.turn_count", "must be at least 1")
        if kind is BreakpointKind.EGRESS:
            egress_host = egress_host.strip().lower()
            if bool(egress_host) == egress_unlisted:
                raise invalid_field(f"{field_path}.egress", "set exactly one of host and unlisted_hosts")
            if egress_host and not _EGRESS_HOST.match(egress_host):
                raise invalid_field(f"{field_path}.egress.host", "must be a host pattern: example.com, "
                                    "*.example.com or an IP address, optionally with :port")
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
            egress_host,
            egress_unlisted,
        )

    def holds_egress(self, host: str, port: int, listed: bool) -> bool:
        """Whether this network breakpoint holds a request to ``host:port`` (``listed``: the phase's
        allowlist names the host)."""
        if self.kind is not BreakpointKind.EGRESS:
            return False
        if self.egress_unlisted:
            return not listed
        pattern, _, want_port = self.egress_host.partition(":")
        if want_port and want_port != str(port):
            return False
        name = host.lower().rstrip(".")
        if pattern.startswith("*."):
            return name.endswith(pattern[1:]) and name != pattern[2:]
        return name == pattern

    @property
    def is_threshold(self) -> bool:
        return self.kind in (BreakpointKind.COST_THRESHOLD, BreakpointKind.TURN_COUNT)

    def searches(self, tool_name: str) -> bool:
        """Whether deciding on a call of ``tool_name`` runs this breakpoint's pattern."""
        return self.kind is BreakpointKind.INPUT_PATTERN and (
            not self.tool_name or tool_name == self.tool_name
        )

    def matches(self, tool_name: str, input_json: str | bytes, cost_usd: float, turns: int) -> bool:
        """Whether a call triggers this breakpoint (pure: safe off the event loop, see ``first_match``)."""
        if self.kind is BreakpointKind.EGRESS:
            return False  # network breakpoints hold requests (holds_egress), not tool calls
        if self.is_threshold and self.hit_count:
            return False  # a threshold is crossed once
        if self.kind is BreakpointKind.TOOL_NAME:
            return tool_name == self.tool_name
        if self.kind is BreakpointKind.INPUT_PATTERN:
            if self.tool_name and tool_name != self.tool_name:
                return False
            assert self._pattern is not None
            return self._pattern.search(search_bytes(input_json)) is not None
        if self.kind is BreakpointKind.COST_THRESHOLD:
            return cost_usd >= self.cost_threshold_usd
        return turns >= self.turn_count


class BreakpointSet:
    """The breakpoints of one phase, in the order they were added."""

    def __init__(self) -> None:
        self._items: dict[str, Breakpoint] = {}

    @classmethod
    def of(cls, breakpoints: Iterable[Breakpoint], field_path: str = "options.breakpoints") -> BreakpointSet:
        """A phase's initial breakpoints, checked as a whole (count, unique ids) before anything runs."""
        bps = list(breakpoints)
        if len(bps) > MAX_BREAKPOINTS:
            raise invalid_field(field_path, f"a phase can have at most {MAX_BREAKPOINTS} breakpoints")
        if len({bp.breakpoint_id for bp in bps}) != len(bps):
            raise invalid_field(field_path, "breakpoint ids must be unique")
        out = cls()
        for bp in bps:
            out.add(bp)
        return out

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
        bp = first_match(self.list(), tool_name, input_json, cost_usd, turns)
        if bp is not None:
            self.record_hit(bp)
        return bp

    def record_hit(self, bp: Breakpoint) -> bool:
        """Counts a hit found by ``first_match``; False if ``bp`` was removed meanwhile (no hit)."""
        if self._items.get(bp.breakpoint_id) is not bp:
            return False
        bp.hit_count += 1
        if bp.once:
            del self._items[bp.breakpoint_id]
        return True


def first_match(
    breakpoints: list[Breakpoint], tool_name: str, input_json: str, cost_usd: float, turns: int
) -> Breakpoint | None:
    """The first of ``breakpoints`` a call triggers, changing nothing.

    Pure, so it may run in a worker thread over a snapshot of a set (RE2 releases the GIL while
    it searches); the caller then counts the hit with ``BreakpointSet.record_hit``.
    """
    text = search_bytes(input_json)  # encoded once for every pattern
    for bp in breakpoints:
        if bp.matches(tool_name, text, cost_usd, turns):
            return bp
    return None
