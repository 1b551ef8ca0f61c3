"""Builds RunPhaseResponse / WatchPhaseResponse bytes from already-encoded events.

Both messages are ``repeated StreamEvent events = 1; PhaseResult result = 2;``, so a response is
the events' stored encodings, each behind the field-1 tag and its length. Events are encoded once
when published; no watcher decodes or re-encodes them (it matters with hundreds of watchers). A
live batch is framed once too (``frame_events``, via ``ProtoRecordEncoder.frame_events``) and the
same message bytes go to every subscriber; ``event_responses`` frames what was not (history pages).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

# Keep each response well under gRPC's default 4 MiB receive limit of clients.
MAX_RESPONSE_BYTES = 1024 * 1024

_EVENTS_TAG = b"\x0a"  # field 1, wire type 2
_RESULT_TAG = b"\x12"  # field 2, wire type 2


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def frame_events(bodies: Sequence[bytes]) -> bytes:
    """One response message carrying these events (no size limit: callers bound the batch).

    Framing is concatenable: ``frame_events(a + b) == frame_events(a) + frame_events(b)``, because
    a message is its fields in order and ``events`` is a repeated field; so framed batches join into
    one message without re-framing (``phases.event_log`` relies on this).
    """
    varint = _varint
    return b"".join([piece for body in bodies for piece in (_EVENTS_TAG, varint(len(body)), body)])


def event_responses(bodies: Sequence[bytes]) -> Iterator[bytes]:
    """Response messages carrying these events in order, split to stay under MAX_RESPONSE_BYTES."""
    parts: list[bytes] = []
    size = 0
    for body in bodies:
        piece = _EVENTS_TAG + _varint(len(body)) + body
        if parts and size + len(piece) > MAX_RESPONSE_BYTES:
            yield b"".join(parts)
            parts, size = [], 0
        parts.append(piece)
        size += len(piece)
    if parts:
        yield b"".join(parts)


def embedded(tag: bytes, data: bytes) -> bytes:
    """One length-delimited field (an embedded message, bytes or a string) of a message: tag, length, data."""
    return tag + _varint(len(data)) + data


def result_response(result: bytes) -> bytes:
    """The last response message: the encoded PhaseResult."""
    return _RESULT_TAG + _varint(len(result)) + result
