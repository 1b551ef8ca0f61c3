"""The gateway's duplicate-key check (egress/gateway.py ``duplicate_key``) against a reference:
Python's own JSON parser, which hands every member to ``object_pairs_hook``, repeats included."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st
from support.properties import examples

from helix_runner.egress.gateway import _decode_top, duplicate_key

KEYS = st.sampled_from(["model", "messages", "stream", "m\"x", "k\\", "", "é"])
# Small numbers, so that one is often another's start (1 and 12): a walk must not take one for the other.
SCALARS = st.none() | st.booleans() | st.integers(0, 30) | st.sampled_from([1.5, -1, 10.0]) | st.text(
    alphabet='ab"\\{}[],: \n', max_size=8)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(KEYS, inner, max_size=3), max_leaves=8)
SPACE = st.sampled_from(["", " ", "\n", "\t ", "\r\n  "])


@st.composite
def objects(draw) -> tuple[bytes, list[str]]:
    """A JSON object's text with its top-level members (keys may repeat), spaced and escaped at random."""
    members = draw(st.lists(st.tuples(KEYS, VALUES), max_size=6))
    ascii_only = draw(st.booleans())

    def sp() -> str:
        return draw(SPACE)

    def key(k: str) -> str:  # as json.dumps writes it, or every character escaped ("\u006d...")
        return "".join(f"\\u{ord(c):04x}" for c in k).join('""') if draw(st.booleans()) else json.dumps(
            k, ensure_ascii=ascii_only)

    parts = [f"{sp()}{key(k)}{sp()}:{sp()}{json.dumps(v, ensure_ascii=ascii_only)}{sp()}" for k, v in members]
    return f"{sp()}{{{','.join(parts) or sp()}}}{sp()}".encode(), [k for k, _ in members]


def repeated_keys(text: bytes) -> set[str]:
    """The top-level keys ``text`` holds more than once, by the reference parser."""
    objects_seen: list[list[str]] = []

    def hook(pairs):
        objects_seen.append([k for k, _ in pairs])
        return dict(pairs)

    assert isinstance(json.loads(text, object_pairs_hook=hook), dict)
    keys = objects_seen[-1]  # the top-level object is completed last
    return {k for i, k in enumerate(keys) if k in keys[:i]}


@settings(max_examples=examples(400), deadline=None)
@given(objects())
def test_duplicate_key_finds_what_a_full_parser_sees(case):
    text, _ = case
    found, repeated = duplicate_key(text, _decode_top(text)), repeated_keys(text)
    assert (found is None) == (not repeated) and (found is None or found in repeated), (text, found, repeated)


def test_examples():
    assert duplicate_key(b"{}", {}) is None
    nested = b' { "a" : [1, {"a": 2}] , "b":"}\\"a\\":"}\n'
    assert duplicate_key(nested, _decode_top(nested)) is None
    same = b'{"model":"x","model":"x"}'
    assert duplicate_key(same, _decode_top(same)) == "model"  # repeated alike: still twice
    escaped = b'{"mod\\u0065l":"a","n":1,"model":"b"}'
    assert duplicate_key(escaped, _decode_top(escaped)) == "model"
    for text in (b'{"a":12,"a":1}', b'{"a":1 ,"a":12}', b'{"a":true, "a":true}', b'{"a":[1],"b":2,"a":[1]}'):
        assert duplicate_key(text, _decode_top(text)) == "a", text
