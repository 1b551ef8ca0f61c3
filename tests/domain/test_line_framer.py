"""The line framer: complete lines out of arbitrary reads, CRLF, blank lines, a bounded buffer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.properties import examples

from helix_runner.domain.events import ParseError, ParseErrorReason
from helix_runner.domain.line_framer import LineFramer


def frame(data: bytes, cuts: list[int] | None = None, cap: int = 1 << 20) -> tuple[list, list]:
    """Push ``data`` split at ``cuts`` (positions); returns (pushed items, finish items)."""
    framer = LineFramer(cap)
    items: list = []
    start = 0
    for cut in sorted(cuts or []) + [len(data)]:
        items += framer.push(data[start:cut])
        start = cut
    return items, framer.finish()


def test_lines_come_out_with_number_and_offset():
    items, tail = frame(b'{"a":1}\n{"b":2}\n')
    assert items == [(b'{"a":1}', 1, 0), (b'{"b":2}', 2, 8)]
    assert tail == []


def test_a_line_is_returned_only_once_its_newline_arrives():
    framer = LineFramer()
    assert framer.push(b'{"type":') == []
    assert framer.push(b'"user"}') == []
    assert framer.pending_bytes == 15
    assert framer.push(b"\n") == [(b'{"type":"user"}', 1, 0)]
    assert framer.pending_bytes == 0


def test_crlf_is_stripped_and_blank_lines_are_skipped_but_counted():
    items, _ = frame(b'{"a":1}\r\n\r\n   \n\n{"b":2}\r\n')
    assert items == [(b'{"a":1}', 1, 0), (b'{"b":2}', 5, 16)]


def test_cr_split_from_its_lf_by_a_read_is_still_stripped():
    items, _ = frame(b'{"a":1}\r\n{"b":2}\n', cuts=[8])
    assert items == [(b'{"a":1}', 1, 0), (b'{"b":2}', 2, 9)]


def test_noise_lines_pass_through_for_the_parser_to_report():
    items, _ = frame(b"[SandboxDebug] hello\n{}\n")
    assert items == [(b"[SandboxDebug] hello", 1, 0), (b"{}", 2, 21)]


def test_multibyte_character_split_across_reads_is_intact():
    line = '{"text":"héllo → 世界 🎉"}'.encode()
    for cut in range(1, len(line)):
        items, _ = frame(line + b"\n", cuts=[cut])
        assert items == [(line, 1, 0)]
        assert items[0][0].decode() == '{"text":"héllo → 世界 🎉"}'


def test_over_cap_line_is_reported_without_content_and_framing_goes_on():
    data = b'{"ok":1}\n' + b"x" * 100 + b'\n{"ok":2}\n'
    items, tail = frame(data, cap=50)
    assert items == [
        (b'{"ok":1}', 1, 0),
        ParseError(ParseErrorReason.LINE_TOO_LONG, 100, 2, 9, ""),
        (b'{"ok":2}', 3, 110),
    ]
    assert tail == []


def test_over_cap_line_spread_over_many_reads_is_never_buffered():
    framer = LineFramer(64)
    assert framer.push(b'{"a":') == []
    for _ in range(1000):  # 1000 reads of 1 KiB: the line grows far past the cap
        assert framer.push(b"y" * 1024) == []
        assert framer.pending_bytes <= 64
    items = framer.push(b'}\n{"b":1}\n')
    assert items == [
        ParseError(ParseErrorReason.LINE_TOO_LONG, 5 + 1024 * 1000 + 1, 1, 0, ""),
        (b'{"b":1}', 2, 1024007),
    ]


def test_line_exactly_at_the_cap_is_kept():
    line = b'{"a":"' + b"z" * 10 + b'"}'
    items, _ = frame(line + b"\n", cap=len(line))
    assert items == [(line, 1, 0)]
    items, _ = frame(line + b"\n", cap=len(line) - 1)
    assert [type(i) for i in items] == [ParseError]


def test_truncated_final_fragment_is_reported_at_eof_not_parsed():
    items, tail = frame(b'{"a":1}\n{"b":')
    assert items == [(b'{"a":1}', 1, 0)]
    assert tail == [ParseError(ParseErrorReason.TRUNCATED_AT_EOF, 5, 2, 8, "")]


def test_over_cap_fragment_at_eof_is_reported_with_its_full_size():
    framer = LineFramer(8)
    framer.push(b"0123456789abcdef")
    assert framer.finish() == [ParseError(ParseErrorReason.TRUNCATED_AT_EOF, 16, 1, 0, "over the line cap")]


def test_blank_fragment_at_eof_is_not_an_error():
    assert frame(b'{"a":1}\n  ')[1] == []
    assert frame(b"")[1] == []


def test_cap_must_be_positive():
    with pytest.raises(ValueError):
        LineFramer(0)


# ------------------------------------------------------------------------------------------------
# Properties: however the bytes are cut into reads, the framing is the same.

_line = st.one_of(
    st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")),  # noise, invalid UTF-8, CRs
    st.text(max_size=30).map(lambda t: ('{"t":' + repr(t) + "}").encode("utf-8", "surrogatepass")),
    st.sampled_from([b"", b"\r", b"  ", b'{"type":"user"}\r']),
)


@st.composite
def streams(draw):
    lines = draw(st.lists(_line, max_size=25))
    data = b"\n".join(lines) + draw(st.sampled_from([b"", b"\n"]))
    cuts = draw(st.lists(st.integers(0, max(len(data), 0)), max_size=12))
    return data, cuts


@settings(max_examples=examples(300), deadline=None)
@given(streams(), st.integers(4, 64))
def test_any_chunking_gives_the_same_lines(stream, cap):
    data, cuts = stream
    assert frame(data, cuts, cap) == frame(data, None, cap)


@settings(max_examples=examples(200), deadline=None)
@given(streams())
def test_lines_and_offsets_describe_the_input(stream):
    data, cuts = stream
    items, tail = frame(data, cuts)
    physical = data.split(b"\n")

    def without_cr(raw: bytes) -> bytes:  # one CR, the one of a CRLF
        return raw[:-1] if raw.endswith(b"\r") else raw

    for line, number, offset in items:
        raw = physical[number - 1]
        assert without_cr(raw) == line
        assert data[offset : offset + len(raw)] == raw
        assert line.strip()  # blank lines never come out
    expected = [without_cr(raw) for raw in physical[:-1] if without_cr(raw).strip()]
    assert [line for line, _, _ in items] == expected
    assert bool(tail) == bool(physical[-1].strip())


def test_over_cap_says_when_the_unfinished_line_passed_the_cap_and_memory_stays_at_it():
    framer = LineFramer(max_line_bytes=1024)
    framer.push(b"x" * 1000)
    assert not framer.over_cap and framer.pending_bytes == 1000
    for _ in range(64):  # 64 KiB more without a newline: dropped as it comes, never held
        framer.push(b"x" * 1024)
    assert framer.over_cap and framer.pending_bytes == 0
    assert framer.push(b"\n{}\n")[0].reason is ParseErrorReason.LINE_TOO_LONG
    assert not framer.over_cap
