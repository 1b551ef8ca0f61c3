"""The host side of the CLI's stdin control protocol (``--input-format stream-json``).

Envelopes (docs/claude-cli-protocol.md §3.1, confirmed in corpus captures localcli-16 and -23):
request ``{"type":"control_request","request_id":…,"request":{"subtype":…}}``, answer
``{"type":"control_response","response":{"subtype":"success"|"error","request_id":…,…}}``.
Every line is one compact JSON object: a non-JSON line on stdin kills the CLI (corpus localcli-22).
"""

from __future__ import annotations

import asyncio
import itertools
import math
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from helix_runner.errors import ErrorKind, RunnerError

# The id we register our PreToolUse hook callback under in `initialize`.
PRE_TOOL_USE_CALLBACK = "helix_pre_tool_use"
# The ids of the callbacks for the hook events no tool call stands behind (domain/skill_shell.py): a
# skill's shell command (PreSkillShellCommand, CLI 2.1.332) and an interrupt ending a turn
# (Interrupt, CLI 2.1.337; an older CLI takes the registration and never calls it).
PRE_SKILL_SHELL_CALLBACK = "helix_pre_skill_shell"
INTERRUPT_CALLBACK = "helix_interrupt"
# Hook timeout in seconds: a person may hold a call for a long time (docs/claude-cli-protocol.md §3.6).
HOLD_TIMEOUT_SECONDS = 7 * 24 * 3600


# InspectPhase keeps at most this much of the CLI's get_context_usage answer (ContextUsage.raw_json).
CONTEXT_USAGE_RAW_MAX_BYTES = 64 * 1024


@dataclass(frozen=True)
class ContextUsage:
    """How full the session's context window is (``resources.proto`` ContextUsage)."""

    total_tokens: int
    max_tokens: int
    percentage: float
    raw_json: str  # the CLI's whole answer, cut at CONTEXT_USAGE_RAW_MAX_BYTES (on a UTF-8 boundary)


def context_usage(answer: dict[str, Any]) -> ContextUsage:
    """The CLI's ``get_context_usage`` answer (``totalTokens``, ``maxTokens``, ``percentage``) as a value.

    A missing percentage is computed from the two counts; a figure that is not a number counts as missing.
    """
    total = int(_number(answer.get("totalTokens")))
    limit = int(_number(answer.get("maxTokens")))
    percentage = _number(answer.get("percentage")) or (100.0 * total / limit if limit else 0.0)
    raw = orjson.dumps(answer)[:CONTEXT_USAGE_RAW_MAX_BYTES].decode("utf-8", "ignore")
    return ContextUsage(total, limit, percentage, raw)


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 0.0
    return float(value)


def _line(obj: dict[str, Any]) -> bytes:
    return orjson.dumps(obj)


def user_line(text: str, message_uuid: str | None = None) -> bytes:
    """A user message line (docs/claude-cli-protocol.md §3.4); the CLI queues it as the next turn."""
    obj: dict[str, Any] = {"type": "user", "message": {"role": "user", "content": text}, "parent_tool_use_id": None}
    if message_uuid:
        obj["uuid"] = message_uuid
    return _line(obj)


def allow_hook() -> dict[str, Any]:
    """Let the call proceed through the CLI's normal permission checks."""
    return {"continue": True}


def deny_hook(reason: str) -> dict[str, Any]:
    """Refuse the call; the model sees ``PreToolUse:<tool> hook error: <reason>`` as its result.

    As in corpus localcli-23.
    """
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                   "permissionDecisionReason": reason}}


def edit_hook(new_input: dict[str, Any]) -> dict[str, Any]:
    """Run the call with a rewritten input (``updatedInput``, TS PreToolUseHookSpecificOutput)."""
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow",
                                   "updatedInput": new_input}}


def skill_shell_answer(hook_answer: dict[str, Any]) -> dict[str, Any]:
    """A PreToolUse hook answer as the answer to a ``PreSkillShellCommand`` callback: the same
    decision under that event's name (the CLI reads ``hookSpecificOutput`` by its event name).
    ``allow`` adds nothing there: the command runs unless a hook refuses it."""
    specific = hook_answer.get("hookSpecificOutput") or {}
    if specific.get("permissionDecision") == "deny":
        return {"hookSpecificOutput": {"hookEventName": "PreSkillShellCommand", "permissionDecision": "deny",
                                       "permissionDecisionReason": specific.get("permissionDecisionReason") or "denied"}}
    return {"continue": True}


def permission_answer(hook_answer: dict[str, Any], tool_input: dict[str, Any]) -> dict[str, Any]:
    """A PreToolUse hook answer (``allow_hook``, ``deny_hook``, ``edit_hook``) as the answer to a
    ``can_use_tool`` request (PY types.py ``PermissionResultAllow``/``Deny``): under --bare the
    permission prompt stands in for the hook (docs/claude-cli-protocol.md §3.6)."""
    specific = hook_answer.get("hookSpecificOutput") or {}
    if specific.get("permissionDecision") == "deny":
        return {"behavior": "deny", "message": specific.get("permissionDecisionReason") or "denied"}
    return {"behavior": "allow", "updatedInput": specific.get("updatedInput", tool_input)}


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


class ControlChannel:
    """Sends control requests, matches their responses, and answers the CLI's own requests."""

    def __init__(self, send: Callable[[bytes], Awaitable[bool]]):
        self._send = send
        self._ids = itertools.count(1)
        self._salt = secrets.token_hex(3)
        self._pending: dict[str, tuple[str, asyncio.Future[dict[str, Any]]]] = {}

    def next_id(self) -> str:
        return f"req_{next(self._ids)}_{self._salt}"

    def initialize_line(self) -> tuple[str, bytes]:
        """The ``initialize`` request registering one PreToolUse callback with no matcher, so it fires
        before every tool call, read-only and pre-allowed ones included (localcli-23), and one for
        each hook event no tool call stands behind (a skill's shell command, an interrupt)."""
        request_id = self.next_id()
        # Nothing awaits this answer (the CLI's first lines follow it anyway); mark a failure as
        # seen so a CLI that exits first does not leave "Future exception was never retrieved".
        self._expect(request_id, "initialize").add_done_callback(_retrieve)
        hooks = {"PreToolUse": [{"hookCallbackIds": [PRE_TOOL_USE_CALLBACK], "timeout": HOLD_TIMEOUT_SECONDS}],
                 "PreSkillShellCommand": [{"hookCallbackIds": [PRE_SKILL_SHELL_CALLBACK],
                                           "timeout": HOLD_TIMEOUT_SECONDS}],
                 "Interrupt": [{"hookCallbackIds": [INTERRUPT_CALLBACK]}]}
        return request_id, _line({"type": "control_request", "request_id": request_id,
                                  "request": {"subtype": "initialize", "hooks": hooks}})

    def _expect(self, request_id: str, subtype: str) -> asyncio.Future[dict[str, Any]]:
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = (subtype, future)
        return future

    async def request(self, subtype: str, fields: dict[str, Any] | None = None, *, wait_s: float = 5.0) -> dict:
        """Sends a request and waits (bounded) for its success payload."""
        request_id = self.next_id()
        future = self._expect(request_id, subtype)
        sent = await self._send(_line({"type": "control_request", "request_id": request_id,
                                       "request": {"subtype": subtype, **(fields or {})}}))
        if not sent:
            self._pending.pop(request_id, None)
            raise RunnerError(ErrorKind.FAILED_PRECONDITION, "PHASE_NOT_RUNNING",
                              f"the CLI no longer accepts control requests ({subtype})", {"operation": subtype})
        try:
            return await asyncio.wait_for(future, wait_s)
        except TimeoutError:
            raise RunnerError(ErrorKind.UNAVAILABLE, "PHASE_NOT_RUNNING",
                              f"the CLI did not answer {subtype} within {wait_s:g} s", {"operation": subtype}) from None
        finally:
            self._pending.pop(request_id, None)

    def on_response(self, request_id: str, success: bool, response: dict[str, Any], error: str) -> None:
        """Routes a ``control_response`` to its waiter.

        Answers to unknown ids are ignored (docs/claude-cli-protocol.md §3.1).
        """
        entry = self._pending.get(request_id)
        if entry is None or entry[1].done():
            return
        if success:
            entry[1].set_result(response)
        else:
            entry[1].set_exception(RunnerError(ErrorKind.FAILED_PRECONDITION, "PHASE_NOT_RUNNING",
                                               f"the CLI refused {entry[0]}: {error}", {"operation": entry[0]}))

    async def answer(self, request_id: str, response: dict[str, Any]) -> bool:
        return await self._send(_line({"type": "control_response", "response": {
            "subtype": "success", "request_id": request_id, "response": response}}))

    async def answer_error(self, request_id: str, message: str) -> bool:
        return await self._send(_line({"type": "control_response", "response": {
            "subtype": "error", "request_id": request_id, "error": message}}))

    def fail_all(self, reason: str) -> None:
        """Wakes every waiter when the process is gone."""
        for subtype, future in self._pending.values():
            if not future.done():
                future.set_exception(RunnerError(ErrorKind.FAILED_PRECONDITION, "PHASE_NOT_RUNNING",
                                                 f"{subtype}: {reason}", {"operation": subtype}))
        self._pending.clear()
