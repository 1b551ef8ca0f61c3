"""An operator's answer to a tool call a phase holds (ResolveToolCall): approve, deny or edit it.

A ``Decision`` is valid once made: the deny message's size and the edited input (a JSON object
within its size and depth) are checked when it is built, before any held call is touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from helix_runner.domain.json_depth import check_json_depth
from helix_runner.errors import invalid_field

MAX_DENY_MESSAGE_BYTES = 4 * 1024
MAX_EDIT_INPUT_BYTES = 64 * 1024


class DecisionKind(StrEnum):
    APPROVE = "approve"
    DENY = "deny"
    EDIT = "edit"


@dataclass(frozen=True, slots=True)
class Decision:
    """What the held call gets: run as asked, refused with a message, or run with new input."""

    kind: DecisionKind
    message: str = ""  # DENY: what the model is told
    new_input: dict[str, Any] | None = None  # EDIT: the call's input instead of its own

    @classmethod
    def approve(cls) -> Decision:
        return cls(DecisionKind.APPROVE)

    @classmethod
    def deny(cls, message: str = "") -> Decision:
        """Refuses the call; ``message`` ("": "denied by the operator") is at most 4 KiB."""
        if len(message.encode()) > MAX_DENY_MESSAGE_BYTES:
            raise invalid_field("deny.message", f"exceeds {MAX_DENY_MESSAGE_BYTES} bytes")
        return cls(DecisionKind.DENY, message=message or "denied by the operator")

    @classmethod
    def edit(cls, input_json: str) -> Decision:
        """Runs the call with ``input_json`` (a JSON object of at most 64 KiB) as its input."""
        if len(input_json.encode()) > MAX_EDIT_INPUT_BYTES:
            raise invalid_field("edit.input_json", f"exceeds {MAX_EDIT_INPUT_BYTES} bytes")
        check_json_depth("edit.input_json", input_json)
        try:
            new_input = orjson.loads(input_json)
        except orjson.JSONDecodeError:
            raise invalid_field("edit.input_json", "is not valid JSON") from None
        if not isinstance(new_input, dict):
            raise invalid_field("edit.input_json", "must be a JSON object")
        return cls(DecisionKind.EDIT, new_input=new_input)
