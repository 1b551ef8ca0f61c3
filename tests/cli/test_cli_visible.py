"""What a phase wrote is shown, never obeyed: the one escaping function every CLI view uses.

The cases in tests/fixtures/visible/cases.json are shared with the web page's test
(web/test/visible.test.ts): both implementations must show the same text."""

from __future__ import annotations

import io
import json
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.text import Text
from support.properties import examples

from helix_runner.cli.common import make_console
from helix_runner.cli.visible import (
    JOINERS,
    UNSAFE_RANGES,
    VisibleGuard,
    dumps_json,
    escaped_json,
    visible,
    visible_text,
)

CASES = json.loads((Path(__file__).parents[1] / "fixtures" / "visible" / "cases.json").read_text())
# Format characters that draw a glyph of their own (prepended concatenation marks): shown as they are.
GLYPH_FORMAT_CHARS = {0x600, 0x601, 0x602, 0x603, 0x604, 0x605, 0x6DD, 0x70F, 0x890, 0x891, 0x8E2, 0x110BD, 0x110CD}


def _unsafe(cp: int) -> bool:
    return any(a <= cp <= b for a, b in UNSAFE_RANGES)


@pytest.mark.parametrize("case", CASES, ids=[c["what"] for c in CASES])
def test_each_case_shows_its_visible_form(case):
    assert visible(case["text"]) == case["visible"]


def test_every_control_and_invisible_format_character_is_escaped():
    """Complete against this Python's Unicode database: a new format character fails here until
    it is in the table (or known to draw a glyph)."""
    missing = [
        f"U+{cp:04X} {unicodedata.category(chr(cp))}"
        for cp in range(0x110000)
        if unicodedata.category(chr(cp)) in ("Cc", "Cf", "Zl", "Zp", "Cs")
        and chr(cp) not in "\t\n" + JOINERS
        and cp not in GLYPH_FORMAT_CHARS
        and not _unsafe(cp)
    ]
    assert not missing


@settings(max_examples=examples(300))
@given(st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from("\x1b\x9b\u202e\u200d\u2066\U000e0041")))
def test_the_visible_form_has_nothing_a_terminal_obeys(text):
    shown = visible(text)
    assert all(not _unsafe(ord(c)) for c in shown)
    # Joiners are left only between two visible non-ASCII characters.
    for i, c in enumerate(shown):
        if c in JOINERS:
            assert 0 < i < len(shown) - 1 and not shown[i - 1].isascii() and not shown[i + 1].isascii()


@settings(max_examples=examples(300))
@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet=st.characters(codec="utf-8")),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
))
def test_escaped_json_is_the_same_value_with_nothing_to_obey(value):
    raw = json.dumps(value, ensure_ascii=False)
    escaped = escaped_json(raw)
    assert json.loads(escaped) == value
    assert all(not _unsafe(ord(c)) for c in escaped)


def test_escaped_json_keeps_the_exact_bytes_where_they_are_safe():
    raw = '{"command": "echo \u202eevil\u202c; ls",  "n": 1.50}'
    assert escaped_json(raw) == '{"command": "echo \\u202eevil\\u202c; ls",  "n": 1.50}'
    assert escaped_json('{"t":"\U000e0041"}') == '{"t":"\\udb40\\udc41"}'
    assert dumps_json({"a": "\x1b[2J é"}) == '{"a": "\\u001b[2J é"}'


def test_escapes_stand_out_from_what_the_model_typed():
    """An ESC it sent is reverse video; the four characters ``\\x1b`` it typed are not."""
    text = visible_text("typed \\x1b sent \x1b")
    assert text.plain == "typed \\x1b sent \\x1b"
    styled = [(text.plain[s.start : s.end], str(s.style)) for s in text.spans]
    assert styled == [("\\x1b", "reverse")]


def test_the_console_guard_escapes_what_a_view_forgot():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, markup=False, highlight=False, width=120)
    console.push_render_hook(VisibleGuard())
    console.print(Text("title \x1b]0;pwned\x07 clear \x1b[2J bidi \u202e"), "raw \x9b31m")
    written = out.getvalue()
    assert "\x1b]0" not in written and "\x1b[2J" not in written and "\u202e" not in written and "\x9b" not in written
    assert "\\x1b]0;pwned" in written and "\\u202e" in written and "\\x9b31m" in written


def test_every_cli_console_has_the_guard():
    out = io.StringIO()
    make_console(out).print("a\x1b[2Jb")
    assert out.getvalue() == "a\\x1b[2Jb\n"
