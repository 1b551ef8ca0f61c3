"""Line repair: unpaired surrogate escapes and invalid UTF-8 become U+FFFD; nothing else changes."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from helix_runner.domain.events import ParseErrorReason
from helix_runner.domain.line_repair import repair_line

R = ParseErrorReason


@pytest.mark.parametrize(
    ("line", "fixed", "reason"),
    [
        (rb'{"t":"\ud83d"}', rb'{"t":"\ufffd"}', R.UNPAIRED_SURROGATE),  # high half, cut at the end
        (rb'{"t":"\ude00x"}', rb'{"t":"\ufffdx"}', R.UNPAIRED_SURROGATE),  # low half alone
        (rb'{"t":"\uD83D\u0041"}', rb'{"t":"\ufffd\u0041"}', R.UNPAIRED_SURROGATE),  # upper case, no pair
        (rb'{"t":"\ud83d\ud83d\ude00"}', rb'{"t":"\ufffd\ud83d\ude00"}', R.UNPAIRED_SURROGATE),  # then a pair
        (b'{"t":"caf\xe9"}', '{"t":"caf\ufffd"}'.encode(), R.INVALID_UTF8),
        (b'{"t":"\xed\xa0\xbd"}', '{"t":"\ufffd\ufffd\ufffd"}'.encode(), R.INVALID_UTF8),  # CESU-8 surrogate
        (b'{"t":"\xff\\ud83d"}', '{"t":"\ufffd\\ufffd"}'.encode(), R.INVALID_UTF8),  # both at once
    ],
)
def test_repairs(line, fixed, reason):
    repaired, why, detail = repair_line(line)
    assert (repaired, why) == (fixed, reason)
    assert "U+FFFD" in detail
    orjson.loads(repaired)


@pytest.mark.parametrize(
    "line",
    [
        rb'{"t":"\ud83d\ude00"}',  # a proper pair
        rb'{"t":"\\ud83d"}',  # an escaped backslash, then the letters "ud83d"
        rb'{"t":"\\\\\ud83d\ude00"}',
        b'{"t":"plain"',  # broken JSON, but nothing to repair
        '{"t":"\U0001f600"}'.encode(),
    ],
)
def test_nothing_to_repair(line):
    assert repair_line(line) is None


@given(st.text(alphabet=st.characters(codec=None), max_size=40))
def test_any_string_node_could_write_parses_after_repair(text):
    # JSON.stringify escapes lone surrogates (ES2019), as json.dumps does; pairs stay pairs.
    line = json.dumps({"type": "x", "t": text}).encode()
    expected = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    repair = repair_line(line)
    if repair is None:
        assert orjson.loads(line)["t"] == expected
    else:
        assert orjson.loads(repair[0])["t"] == expected
