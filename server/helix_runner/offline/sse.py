"""Server-sent events: a scripted :class:`Reply` rendered as the Messages API streams a message.

``message_start``, ``ping``, then per content block ``content_block_start``, its deltas (text and
thinking in word-sized pieces, tool input as JSON text in fixed-size pieces after an empty first
``partial_json``, as the API sends it) and ``content_block_stop``, then ``message_delta`` with the stop
reason and usage, and ``message_stop``. ``message_json`` is the same message for a non-streaming
request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from helix_runner.offline.script import Reply, ToolUseBlock


def _sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _word_chunks(text: str) -> list[str]:
    """Split text into word-sized deltas (each keeps its trailing whitespace), like the API streams."""
    return re.findall(r"\s*\S+\s*|\s+", text) or [""]


def _fixed_chunks(text: str, size: int = 24) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def render_blocks(reply: Reply, new_tool_id: Callable[[], str]) -> list[dict[str, Any]]:
    """The reply's content as API content blocks, with tool ids filled in."""
    rendered: list[dict[str, Any]] = []
    for block in reply.content:
        data = block.to_dict()
        if isinstance(block, ToolUseBlock) and block.id is None:
            data = {"type": "tool_use", "id": new_tool_id(), "name": block.name, "input": dict(block.input)}
        rendered.append(data)
    return rendered


def message_json(message_id: str, model: str, blocks: list[dict[str, Any]], reply: Reply) -> dict[str, Any]:
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": reply.effective_stop_reason,
        "stop_sequence": None,
        "usage": reply.usage.to_dict(),
    }


def sse_events(message_id: str, model: str, blocks: list[dict[str, Any]], reply: Reply) -> Iterator[bytes]:
    """The event sequence the Messages API streams for one message."""
    usage = reply.usage
    start_usage = {
        "input_tokens": usage.input_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
        "cache_read_input_tokens": usage.cache_read_input_tokens,
        "output_tokens": 1,
    }
    yield _sse(
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": start_usage,
            },
        },
    )
    yield _sse("ping", {"type": "ping"})
    for index, block in enumerate(blocks):
        kind = block["type"]
        if kind == "text":
            start: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": chunk} for chunk in _word_chunks(block["text"])]
        elif kind == "thinking":
            start = {"type": "thinking", "thinking": ""}
            deltas = [{"type": "thinking_delta", "thinking": c} for c in _word_chunks(block["thinking"])]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            # The API opens with an empty partial_json, then sends the JSON text in arbitrary pieces.
            payload = json.dumps(block["input"], separators=(",", ":"))
            deltas = [{"type": "input_json_delta", "partial_json": ""}]
            deltas += [{"type": "input_json_delta", "partial_json": c} for c in _fixed_chunks(payload)]
        yield _sse(
            "content_block_start", {"type": "content_block_start", "index": index, "content_block": start}
        )
        for delta in deltas:
            yield _sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
    yield _sse(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": reply.effective_stop_reason, "stop_sequence": None},
            "usage": {**start_usage, "output_tokens": usage.output_tokens},
        },
    )
    yield _sse("message_stop", {"type": "message_stop"})
