"""The stream engine against a recorded reference: every event, field by field, must stay the same.

``snapshots/stream_engine.json.xz`` holds what the engine produced, before its decoding was
rewritten (commit a09c643, dict-based ``orjson`` parsing), for

* every vendored transcript (``tests/fixtures/corpus/real`` and ``examples``), with partial
  messages and raw unknowns off and on;
* several hundred generated streams: corpus lines mutated at random (wrong types, nulls, missing
  keys, unknown types and content blocks, oversized text, integers past 64 bits, numbers out of
  double range, lone surrogate escapes, invalid UTF-8, cut lines, noise, CRLF), cut into random
  read sizes. The generator below is seeded, so the inputs are rebuilt here, not stored.

For each stream the reference has every event (each payload field, recursively) and the state
after ``finish()`` (tool calls and statistics, cost, results, counters). A change that alters any
of it fails here with the first differing field. Intentional differences are listed in
``ALLOWED_DIFFERENCES`` with the reason; there are none today.

Re-recorded once, at the merge of main's retries work, for main's intended parser change only:
every TurnResult gained ``startup_failure_reason`` and ``usage_since_last_result`` (nothing else
changed; main's dict-based engine gave the same output as this one on every stream).

Regenerate (only for an intentional change, and say so in the commit):
``.venv/bin/python tests/domain/test_stream_engine_differential.py --write``.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import enum
import json
import lzma
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if __name__ == "__main__":  # run as a script (--write): make the package and tests/support importable
    sys.path[:0] = [str(REPO_ROOT / "server"), str(REPO_ROOT / "tests")]

from support.corpus import VENDORED_CORPUS  # noqa: E402
from support.properties import examples  # noqa: E402

from helix_runner.domain.phase_stream import PhaseStream, PhaseStreamOptions  # noqa: E402
from helix_runner.domain.pricing import ModelPrice, PriceTable  # noqa: E402

SNAPSHOT = Path(__file__).parent / "snapshots" / "stream_engine.json.xz"
SEED = 20261123
GENERATED_STREAMS = 600
# The generated streams checked: all of them in the full suite, the first 60 in the fast tier
# (support/properties.py; the corpus streams are always checked).
CHECKED_STREAMS = examples(GENERATED_STREAMS, sample=60)

# Prices by override only (never genai-prices, whose table changes between versions): two models
# are priced, every other model is UNPRICED, so both paths of the ledger are covered.
PRICES = {
    "claude-opus-5-5": ModelPrice(15.0, 75.0),
    "claude-sonnet-4-5-20250929": ModelPrice(3.0, 15.0, 0.3, 3.75, 6.0),
}

# (stream name, path of a field) → why a difference from the reference is intended. Empty: the
# rewrite reproduces the reference exactly.
ALLOWED_DIFFERENCES: dict[tuple[str, str], str] = {}
# Fields added after the reference was recorded, allowed to be missing from it while they hold their
# default (a stream that sets one still fails): TurnResult's structured output (--json-schema).
ADDED_FIELDS: dict[str, Any] = {"structured_output": "", "structured_output_truncated": False}


class FakeClock:
    """Deterministic nanosecond clock (as in conftest.py): each call advances 1 ms."""

    def __init__(self) -> None:
        self.now = 1_700_000_000_000_000_000

    def __call__(self) -> int:
        self.now += 1_000_000
        return self.now


# --------------------------------------------------------------------------------------------------
# Events → plain JSON values, field by field.


def plain(value: Any) -> Any:
    """A domain value as JSON: objects as {"": class name, field: value, ...}, enums by name."""
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if value is None or isinstance(value, bool | int | float | str):
        if isinstance(value, float) and value != value:  # NaN: not JSON
            return "NaN"
        return value
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    names = getattr(type(value), "__struct_fields__", None)  # a msgspec Struct
    if names is None and dataclasses.is_dataclass(value):
        names = [f.name for f in dataclasses.fields(value)]
    if names is None:
        raise TypeError(f"cannot snapshot {type(value).__name__}")
    return {"": type(value).__name__, **{name: plain(getattr(value, name)) for name in names}}


def run_stream(data: bytes, chunks: list[int], options: dict[str, bool]) -> dict[str, Any]:
    """Feed ``data`` in reads of the given sizes (the last one repeats); events and final state."""
    stream = PhaseStream(
        PhaseStreamOptions(**options), FakeClock(), price_table=PriceTable(PRICES, use_genai_prices=False)
    )
    events = []
    pos, i = 0, 0
    while pos < len(data):
        size = chunks[min(i, len(chunks) - 1)]
        events += stream.feed(data[pos : pos + size])
        pos += size
        i += 1
    events += stream.finish()
    tools = stream.tools
    return {
        "events": [plain(e) for e in events],
        "state": plain(
            {
                "calls": tools.calls,
                "stats": tools.stats(),
                "orphans": tools.orphan_results,
                "unfinished": tools.unfinished_count,
                "cost": stream.cost,
                "results": stream.results,
                "result_count": stream.result_count,
                "parse_errors": stream.parse_error_count,
                "session_id": stream.session_id,
                "last_sequence": stream.last_sequence,
                "stdout_bytes": stream.stdout_bytes,
            }
        ),
    }


# --------------------------------------------------------------------------------------------------
# The inputs.


def corpus_files() -> list[Path]:
    """Every vendored transcript, stdin logs and driver wrappers included (more shapes to check)."""
    return sorted((VENDORED_CORPUS / "real").glob("*.jsonl")) + sorted(
        (VENDORED_CORPUS / "examples").glob("*.jsonl")
    )


_ODD_VALUES: list[Any] = [
    None,
    "",
    0,
    -7,
    3.5,
    1e300,
    True,
    False,
    [],
    {},
    "naïve 😀 ☃",
    2**64 + 5,
    -(2**63) - 1,
    2**63 + 1,
    {"type": "zz_unknown"},
    ["a", 1, None],
    "text_delta",
    "tool_use",
    "message_start",
    "message_delta",
]


def _paths(value: Any, prefix: tuple = ()) -> Iterator[tuple]:
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


def _mutate(obj: Any, rng: random.Random) -> Any:
    """One structural change at a random place: an odd value, a removed key or an unknown type."""
    paths = [p for p in _paths(obj) if p]
    if not paths:
        return obj
    path = rng.choice(paths)
    parent = obj
    for key in path[:-1]:
        parent = parent[key]
    last = path[-1]
    op = rng.random()
    if op < 0.55:
        parent[last] = copy.deepcopy(rng.choice(_ODD_VALUES))  # a fresh copy: later changes stay local
    elif op < 0.7 and isinstance(parent, dict):
        del parent[last]
    elif op < 0.8 and isinstance(parent, dict) and "type" in parent:
        parent["type"] = rng.choice(["zz_unknown", "server_tool_use", "redacted_thinking", "image"])
    elif op < 0.9 and isinstance(parent, dict) and "subtype" in parent:
        parent["subtype"] = rng.choice(["zz_unknown", "success", "error_max_turns", "init", "status"])
    elif isinstance(parent, dict):
        parent[rng.choice(["error", "is_api_error_message", "isReplay", "extra"])] = copy.deepcopy(
            rng.choice(_ODD_VALUES)
        )
    return obj


def _dump(obj: Any, rng: random.Random) -> bytes:
    """JSON as the CLI writes it (compact, UTF-8), or with spaces, or with every non-ASCII escaped."""
    style = rng.random()
    if style < 0.7:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
    if style < 0.85:
        return json.dumps(obj, ensure_ascii=False).encode()
    return json.dumps(obj, ensure_ascii=True, separators=(",", ":")).encode()


def _damage(line: bytes, rng: random.Random) -> bytes:
    """A byte-level defect: lone surrogate escape, invalid UTF-8, a cut, noise, CR, not an object."""
    quotes = [i for i in range(len(line)) if line[i : i + 2] == b'":' and line[i + 2 : i + 3] == b'"']
    op = rng.random()
    if op < 0.25 and quotes:
        i = rng.choice(quotes) + 3
        return line[:i] + rng.choice([b"\\ud83d", b"\\udc00x", b"\\ud83d\\ude00"]) + line[i:]
    if op < 0.45 and quotes:
        i = rng.choice(quotes) + 3
        return line[:i] + rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xe2\x82"]) + line[i:]
    if op < 0.6:
        return line[: rng.randrange(len(line) + 1)]
    if op < 0.7:
        return line + b"\r"
    if op < 0.8:
        return rng.choice([b"[SandboxDebug] hello", b"[1,2]", b'"text"', b"123", b"null", b"  ", b"{}"])
    if op < 0.9:
        return line.replace(b"}", b"} ", 1)
    return rng.choice([b'{"type":5}', b'{"type":null}', b'{"type":["assistant"]}', b'{"type":"assistant"}'])


def generated_streams(count: int = GENERATED_STREAMS) -> Iterator[tuple[str, bytes, list[int], dict[str, bool]]]:
    """The first ``count`` seeded streams of corpus lines, most of them changed in one or more ways."""
    rng = random.Random(SEED)
    lines: list[bytes] = []
    for path in corpus_files():
        for line in path.read_bytes().splitlines():
            if line.strip() and len(line) < 6000:
                lines.append(line)
    for n in range(count):
        out = []
        start = rng.randrange(len(lines))
        for k in range(rng.randint(4, 24)):
            # Mostly consecutive lines (tool calls and their results stay together).
            line = lines[(start + k) % len(lines)] if rng.random() < 0.8 else rng.choice(lines)
            if rng.random() < 0.6:
                obj = orjson.loads(line)
                for _ in range(rng.choice([1, 1, 1, 2, 3])):
                    obj = _mutate(obj, rng)
                if rng.random() < 0.03:  # oversized text: every bound is 256 KiB or less
                    obj = {**obj, "result": "y" * 70_000} if isinstance(obj, dict) else obj
                line = _dump(obj, rng)
            if rng.random() < 0.12:
                line = _damage(line, rng)
            out.append(line)
        data = b"\n".join(out) + (b"\n" if rng.random() < 0.9 else b"")
        chunks = [rng.choice([1 << 20, 65536, 4096, 97, 7])]
        options = {
            "include_partial_messages": rng.random() < 0.7,
            "include_raw_unknown": rng.random() < 0.5,
        }
        yield f"generated-{n:03d}", data, chunks, options


def all_cases(generated: int = GENERATED_STREAMS) -> Iterator[tuple[str, bytes, list[int], dict[str, bool]]]:
    for path in corpus_files():
        data = path.read_bytes()
        name = f"{path.parent.name}/{path.name}"
        yield name, data, [65536], {}
        yield (
            f"{name}+partial+raw",
            data,
            [65536],
            {
                "include_partial_messages": True,
                "include_raw_unknown": True,
            },
        )
    yield from generated_streams(generated)


# --------------------------------------------------------------------------------------------------
# The check.


def _first_difference(expected: Any, actual: Any, path: str = "") -> str | None:
    if type(expected) is not type(actual):
        return f"{path or '.'}: expected {expected!r:.200}, got {actual!r:.200}"
    if isinstance(expected, dict):
        for key in expected.keys() | actual.keys():
            if key not in expected and key in ADDED_FIELDS and actual[key] == ADDED_FIELDS[key]:
                continue
            if key not in expected or key not in actual:
                return f"{path}.{key}: only in {'actual' if key in actual else 'expected'}"
            found = _first_difference(expected[key], actual[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(expected, list):
        for i, (e, a) in enumerate(zip(expected, actual, strict=False)):
            found = _first_difference(e, a, f"{path}[{i}]")
            if found:
                return found
        if len(expected) != len(actual):
            return f"{path}: {len(expected)} items expected, got {len(actual)}"
        return None
    if expected != actual or type(expected) is not type(actual):
        return f"{path}: expected {expected!r:.200}, got {actual!r:.200}"
    return None


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    if not SNAPSHOT.is_file():
        pytest.fail(f"reference snapshot missing: {SNAPSHOT}", pytrace=False)
    return json.loads(lzma.decompress(SNAPSHOT.read_bytes()))


def test_the_reference_covers_every_vendored_transcript(reference):
    names = {f"{p.parent.name}/{p.name}" for p in corpus_files()}
    assert names <= set(reference), sorted(names - set(reference))
    assert sum(name.startswith("generated-") for name in reference) == GENERATED_STREAMS


def test_generated_inputs_are_the_recorded_ones(reference):
    # The generator must rebuild exactly the inputs the reference was made from.
    for name, data, chunks, options in generated_streams(CHECKED_STREAMS):
        ref = reference[name]
        assert (ref["sha"], ref["chunks"], ref["options"]) == (_digest(data), chunks, options), name


def test_every_event_and_the_final_state_match_the_reference(reference):
    failures = []
    for name, data, chunks, options in all_cases(CHECKED_STREAMS):
        difference = _first_difference(reference[name]["result"], run_stream(data, chunks, options))
        if difference and not any(name == n and difference.startswith(p) for (n, p) in ALLOWED_DIFFERENCES):
            failures.append(f"{name}: {difference}")
    assert not failures, "\n".join(failures[:10]) + f"\n({len(failures)} streams differ)"


def _digest(data: bytes) -> str:
    import hashlib

    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def write_reference() -> None:
    out = {}
    for name, data, chunks, options in all_cases():
        out[name] = {
            "sha": _digest(data),
            "chunks": chunks,
            "options": options,
            "result": run_stream(data, chunks, options),
        }
    SNAPSHOT.parent.mkdir(exist_ok=True)
    SNAPSHOT.write_bytes(
        lzma.compress(json.dumps(out, sort_keys=True).encode(), preset=9 | lzma.PRESET_EXTREME)
    )
    print(f"wrote {SNAPSHOT} ({SNAPSHOT.stat().st_size / 1e6:.2f} MB, {len(out)} streams)")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(__doc__)
    write_reference()
