"""Lines of the CLI's stdout (``--output-format stream-json``) for tests that feed a parser or a run.

Shapes as the real CLI writes them (tests/fixtures/corpus, docs/claude-cli-protocol.md): an
``assistant`` line carries one API message, a ``user`` line the tool results, a ``result`` line
ends a turn. The builders return the line's bytes with its newline; ``assistant`` returns the
object, for tests that change it first.
"""

from __future__ import annotations

import orjson

SID = "ef4b424a-7e54-4602-a60a-f6f946f73852"


def line(obj: dict) -> bytes:
    """One stdout line: the object as compact JSON, then the newline."""
    return orjson.dumps(obj) + b"\n"


def assistant(*blocks: dict, message_id: str = "msg_01", model: str = "claude-opus-5-5",
              usage: dict | None = None, session_id: str = SID, **extra) -> dict:
    """An ``assistant`` line (as an object) with these content blocks."""
    message = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": list(blocks),
        "stop_reason": None,
        "usage": usage or {"input_tokens": 10, "output_tokens": 1},
    }
    return {
        "type": "assistant",
        "message": message,
        "parent_tool_use_id": None,
        "session_id": session_id,
        "uuid": "u-1",
        **extra,
    }


def init(session_id: str = SID, model: str = "m") -> bytes:
    return line({"type": "system", "subtype": "init", "session_id": session_id, "model": model, "tools": ["Bash"],
                 "uuid": "u0"})


def text(message_id: str = "msg_1", body: str = "hello", usage: dict | None = None, *, session_id: str = SID,
         model: str = "m") -> bytes:
    """An assistant message with one text block."""
    return line(assistant({"type": "text", "text": body}, message_id=message_id, model=model,
                          usage=usage or {"input_tokens": 1000, "output_tokens": 1}, session_id=session_id,
                          uuid=f"u-{message_id}"))


def tool_use(tool_use_id: str, name: str = "Bash", message_id: str = "msg_2", *, session_id: str = SID,
             model: str = "m") -> bytes:
    """An assistant message asking for one tool call (``{"command": "ls"}``)."""
    return line(assistant({"type": "tool_use", "id": tool_use_id, "name": name, "input": {"command": "ls"}},
                          message_id=message_id, model=model, session_id=session_id, uuid=f"u-{tool_use_id}"))


def tool_result(tool_use_id: str, is_error: bool = False, *, session_id: str = SID) -> bytes:
    """The ``user`` line with the tool call's result (``out``)."""
    block = {"type": "tool_result", "tool_use_id": tool_use_id, "content": "out"}
    if is_error:
        block["is_error"] = True
    return line({"type": "user", "session_id": session_id, "message": {"role": "user", "content": [block]}})


def result(total: float, input_tokens: int = 2000, *, session_id: str = SID, model: str = "m") -> bytes:
    """A successful ``result`` line with the turn's total cost."""
    return line({
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "session_id": session_id,
        "num_turns": 1,
        "total_cost_usd": total,
        "result": "done",
        "modelUsage": {model: {"inputTokens": input_tokens, "outputTokens": 0, "costUSD": total}},
    })
