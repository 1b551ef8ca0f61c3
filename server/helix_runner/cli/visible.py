"""What a phase wrote, made visible and inert before a terminal sees it.

Text from a phase (the model's words, a tool's input and output, stderr, even a tool's name) can
hold bytes a terminal obeys rather than shows: OSC 52 writes the clipboard, OSC 8 hides a link
behind other text, OSC 0 sets the window title, CSI clears the screen or moves the cursor to
rewrite earlier lines, and Unicode bidi controls or zero-width characters make a held call read as
something else (Trojan Source, CVE-2021-42574). Every view of the ``helix-runner`` CLI passes such
text through :func:`visible` (or :func:`visible_text`, :func:`escaped_json`): each character a
terminal would obey or hide is shown as its escape (``\\x1b``, ``\\u202e``), the rest is untouched.

Rich (which prints every view) drops only BEL, BS, VT, FF and CR (``rich.control.strip_control_codes``)
and writes ESC, the C1 controls and every format character through as they are: it is the layout
and the styling here (an escape is shown in reverse video, so a literal ``\\x1b`` the model typed
reads differently from an ESC it sent), not the filter. :class:`VisibleGuard` is the last line:
every console of the CLI (``common.make_console``) escapes whatever still reaches it, after layout.

The web page applies the same table (``web/src/visible.ts``); ``tests/fixtures/visible/cases.json``
holds the cases both must agree on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderableType
    from rich.text import Text

# Always escaped: the C0 controls but tab and newline, DEL, the C1 controls; the format characters
# (Unicode category Cf) that draw nothing: bidi embeddings, overrides, isolates and marks
# (U+202A-202E, U+2066-2069, U+200E/200F, U+061C), zero-width space, word joiner and invisible
# operators, the byte-order mark, soft hyphen, the interlinear annotation and musical/hieroglyph
# format controls; the line and paragraph separators; the combining grapheme joiner and the Hangul
# fillers (blank letters); lone surrogates. The Cf characters with a glyph of their own
# (U+0600-0605, U+06DD, U+070F, U+0890-0891, U+08E2, U+110BD, U+110CD) stay.
UNSAFE_RANGES: tuple[tuple[int, int], ...] = (
    (0x00, 0x08),
    (0x0B, 0x1F),
    (0x7F, 0x9F),
    (0xAD, 0xAD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x180E, 0x180E),
    (0x200B, 0x200B),
    (0x200E, 0x200F),
    (0x2028, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x206F),
    (0x3164, 0x3164),
    (0xD800, 0xDFFF),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF9, 0xFFFB),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
)
# Zero-width (non-)joiners shape the letters and emoji around them (Persian, Indic scripts, 👨‍👩‍👧):
# kept between two non-ASCII characters, escaped anywhere else (where they only disguise text).
JOINERS = "\u200c\u200d"
# Tag characters spell the flags of subdivisions after a black flag (🏴 + tags + cancel tag): kept
# there, escaped anywhere else (where they smuggle invisible text).
_FLAG = "\U0001f3f4[\U000e0020-\U000e007e]+\U000e007f"


def _char_class(ranges: Iterable[tuple[int, int]]) -> str:
    return "".join(
        re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges
    )


_UNSAFE_CLASS = _char_class(UNSAFE_RANGES)
_ANY = re.compile(f"[{_UNSAFE_CLASS}{JOINERS}]")
_SCAN = re.compile(f"({_FLAG})|([{JOINERS}])|[{_UNSAFE_CLASS}]")
_UNSAFE_ONLY = re.compile(f"[{_UNSAFE_CLASS}]")


def escape_char(char: str) -> str:
    """The visible form of one character: ``\\x1b``, ``\\u202e``, ``\\U000e0041``."""
    cp = ord(char)
    if cp <= 0xFF:
        return f"\\x{cp:02x}"
    if cp <= 0xFFFF:
        return f"\\u{cp:04x}"
    return f"\\U{cp:08x}"


def _joiner_kept(text: str, at: int) -> bool:
    if at == 0 or at + 1 >= len(text):
        return False
    before, after = text[at - 1], text[at + 1]
    return not (
        before.isascii()
        or after.isascii()
        or _UNSAFE_ONLY.match(before)
        or _UNSAFE_ONLY.match(after)
        or before in JOINERS
        or after in JOINERS
    )


def _pieces(text: str) -> Iterator[tuple[str, bool]]:
    """``text`` as (piece, escape) pairs, in order; a piece to escape is one character."""
    last = 0
    for match in _SCAN.finditer(text):
        if match.group(1) is not None:
            continue  # a subdivision flag
        start = match.start()
        if match.group(2) is not None and _joiner_kept(text, start):
            continue
        if start > last:
            yield text[last:start], False
        yield match.group(), True
        last = match.end()
    if last < len(text):
        yield text[last:], False


def needs_escaping(text: str) -> bool:
    """Whether ``text`` holds a character :func:`visible` would escape (or a joiner it may)."""
    return _ANY.search(text) is not None


def visible(text: str) -> str:
    """``text`` with every character a terminal would obey or hide shown as its escape.

    Tabs and newlines stay (the views lay them out); everything else in ``UNSAFE_RANGES``, and
    joiners or tags out of place, become ``\\x..``/``\\u....``/``\\U........``."""
    if not text or _ANY.search(text) is None:
        return text
    return "".join(escape_char(piece) if escaped else piece for piece, escaped in _pieces(text))


ESCAPE_STYLE = "reverse"


def visible_text(text: str, style: str = "", *, escape_style: str = ESCAPE_STYLE) -> Text:
    """:func:`visible` as a Rich ``Text``, the escapes in ``escape_style`` so they stand out."""
    from rich.text import Text

    if not text or _ANY.search(text) is None:
        return Text(text, style=style)
    out = Text(style=style)
    for piece, escaped in _pieces(text):
        if escaped:
            out.append(escape_char(piece), style=escape_style)
        else:
            out.append(piece)
    return out


def escaped_json(text: str) -> str:
    """JSON text (a tool's input) with every character :func:`visible` would escape written as a
    JSON escape (``\\u001b``, ``\\u202e``, a surrogate pair above U+FFFF).

    Nothing else changes: the result is the same bytes where they are safe, and parses to the same
    value (in valid JSON those characters only occur inside strings), so it is what a person
    approves and what an edit may start from."""
    if not text or _ANY.search(text) is None:
        return text

    def json_escape(char: str) -> str:
        cp = ord(char)
        if cp <= 0xFFFF:
            return f"\\u{cp:04x}"
        cp -= 0x10000
        return f"\\u{0xD800 + (cp >> 10):04x}\\u{0xDC00 + (cp & 0x3FF):04x}"

    return "".join(json_escape(piece) if escaped else piece for piece, escaped in _pieces(text))


def dumps_json(data: Any, **kwargs: Any) -> str:
    """``json.dumps`` for a terminal: readable UTF-8, but what :func:`visible` escapes as ``\\uXXXX``
    (lossless: the JSON parses to the same data)."""
    import json

    return escaped_json(json.dumps(data, ensure_ascii=False, **kwargs))


class VisibleGuard:
    """A Rich render hook: whatever a view printed without :func:`visible` is escaped after layout.

    The views escape before layout (so widths are right); this only catches what slipped through,
    so a view that forgets still shows the bytes instead of obeying them."""

    def process_renderables(self, renderables: list[RenderableType]) -> list[RenderableType]:
        return [_Guarded(r) for r in renderables]


class _Guarded:
    def __init__(self, renderable: RenderableType):
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions):
        from rich.segment import Segment

        for segment in console.render(self.renderable, options):
            text, style, control = segment
            if control or not text or _ANY.search(text) is None:
                yield segment
            else:
                yield Segment(visible(text), style)
