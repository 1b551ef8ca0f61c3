"""Bytes from the CLI's stdout → complete lines, with bounded memory.

The CLI writes UTF-8 NDJSON, one object per ``\\n``-terminated line (notes §1), but reads hand us
arbitrary chunks: a line may span many reads and a read may end inside a multibyte character. The
framer therefore never decodes: it hands complete lines on as bytes (``push``) or as zero-copy
memoryviews into the chunk (``push_lines``, the hot path), and the parser decodes each
complete line (orjson validates UTF-8 per line), so a character split across reads is harmless
(notes §4, CL 2.1.94).

Memory is bounded by ``max_line_bytes`` plus one chunk: a line that grows past the cap is dropped
byte by byte until its newline arrives (never buffered) and reported as a ``LINE_TOO_LONG`` parse
error with its length and position only (notes §4 "huge lines").
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate
from typing import Any

from helix_runner.domain.events import ParseError, ParseErrorReason

DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024

# One framed line: (line bytes without "\n"/"\r", 1-based line number, byte offset of its start).
FramedLine = tuple[bytes, int, int]


class LineFramer:
    """Splits a byte stream on ``\\n``; strips a trailing ``\\r``; skips blank lines; caps line length.

    ``push`` returns, in stream order, framed lines and ``ParseError`` values for over-long lines.
    Line numbers count every ``\\n``-terminated line (blank ones too), so they match ``sed -n Np``.
    """

    __slots__ = ("_max", "_pending", "_pending_len", "_skipping", "_skip_len", "_line_no", "_offset")

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be positive")
        self._max = max_line_bytes
        self._pending: list[bytes] = []  # fragments of the current line (none contains "\n")
        self._pending_len = 0
        self._skipping = False  # the current line is over the cap: drop until its newline
        self._skip_len = 0
        self._line_no = 1  # number of the current (incomplete) line
        self._offset = 0  # byte offset where the current line starts

    @property
    def over_cap(self) -> bool:
        """Whether the current, unfinished line has passed the cap (its bytes are being dropped)."""
        return self._skipping

    @property
    def pending_bytes(self) -> int:
        """Bytes held for the incomplete current line (never more than the cap)."""
        return self._pending_len

    def push(self, chunk: bytes) -> list[FramedLine | ParseError]:
        """Add a chunk; return the lines it completed (and over-long line reports), in order."""
        lines, line_no, offsets = self.push_lines(chunk)
        out: list[FramedLine | ParseError] = []
        for i, line in enumerate(lines):
            if line.__class__ is ParseError:
                out.append(line)  # type: ignore[arg-type]
            elif line and (line[0] == 123 or not bytes(line).isspace()):  # 123 == "{"
                out.append((bytes(line), line_no + i, offsets[i]))
        return out

    def push_lines(self, chunk: bytes) -> tuple[list[Any], int, Sequence[int]]:
        """``push`` for the hot path: (lines, number of the first line, byte offset of each line).

        Every ``\\n``-terminated line the chunk completes is an entry, blank and whitespace-only
        lines included (``push`` drops those; a caller of this method must skip them, e.g. when
        they fail to parse): entry ``i`` is line number ``first + i`` and starts at byte
        ``offsets[i]``. A line is a ``memoryview`` into ``chunk`` (no copy; do not keep it past
        the call), or ``bytes`` when it spans chunks; a trailing ``\\r`` is stripped; an over-long
        line is its ``LINE_TOO_LONG`` ``ParseError`` instead. The offsets are computed on first
        use: only error reports need them.
        """
        if chunk.__class__ is not bytes:
            chunk = bytes(chunk)  # views must not pin a caller's mutable buffer
        find = chunk.find
        end = find(b"\n")  # memchr: much faster than bytes.split, which tests byte by byte
        line_no = self._line_no
        if end < 0:
            if chunk:
                self._extend_current(chunk)
            return [], line_no, ()
        max_len = self._max
        view = memoryview(chunk)
        line_start = self._offset  # the first line may have begun in an earlier chunk

        # The first line: the fragments held from earlier chunks (if any) plus chunk[:end].
        first: Any
        if self._skipping:
            size = self._skip_len + end
            first = _too_long(size, line_no, line_start)
            self._skipping = False
            self._skip_len = 0
        elif self._pending:
            size = self._pending_len + end
            if size > max_len:
                first = _too_long(size, line_no, line_start)
            else:
                self._pending.append(chunk[:end])
                first = b"".join(self._pending)
                if first[-1:] == b"\r":  # the CR may have come at the end of the previous chunk
                    first = first[:-1]
            self._pending = []
            self._pending_len = 0
        else:
            size = end
            if size > max_len:
                first = _too_long(size, line_no, line_start)
            elif end and chunk[end - 1] == 13:  # "\r" of a CRLF
                first = view[: end - 1]
            else:
                first = view[:end]
        base = line_start + size - end  # stream offset of chunk[0]

        # The other lines lie wholly inside the chunk. The loop only cuts (a handful of bytecodes a
        # line); CRs and over-long lines, which are rare, are dealt with afterwards.
        rest: list[Any] = []
        append = rest.append
        start = second = end + 1
        end = find(b"\n", start)
        while end >= 0:
            append(view[start:end])
            start = end + 1
            end = find(b"\n", start)
        offsets = _Offsets(line_start, base + second, rest)
        if rest and (b"\r" in chunk or max(map(len, rest)) > max_len):
            offsets.materialize()  # from the raw lengths, before any is cut
            for i, line in enumerate(rest):
                if len(line) > max_len:
                    rest[i] = _too_long(len(line), line_no + 1 + i, offsets[1 + i])
                elif line and line[-1] == 13:  # "\r" of a CRLF
                    rest[i] = line[:-1]
        self._line_no = line_no + 1 + len(rest)
        self._offset = base + start
        if start < len(chunk):
            self._extend_current(chunk[start:])
        return [first, *rest], line_no, offsets

    def finish(self) -> list[ParseError]:
        """End of stream: report a final line that never got its newline (it is never parsed)."""
        size = self._skip_len if self._skipping else self._pending_len
        fragment_is_blank = not self._skipping and b"".join(self._pending).isspace()
        out: list[ParseError] = []
        if size and not fragment_is_blank:
            detail = "over the line cap" if self._skipping else ""
            out.append(
                ParseError(ParseErrorReason.TRUNCATED_AT_EOF, size, self._line_no, self._offset, detail)
            )
        self._pending = []
        self._pending_len = 0
        self._skipping = False
        self._skip_len = 0
        return out

    def _extend_current(self, fragment: bytes) -> None:
        """Append a newline-free fragment to the current line, switching to skip mode past the cap."""
        if self._skipping:
            self._skip_len += len(fragment)
            return
        size = self._pending_len + len(fragment)
        if size > self._max:
            self._skipping = True
            self._skip_len = size
            self._pending = []
            self._pending_len = 0
        else:
            self._pending.append(fragment)
            self._pending_len = size


def _too_long(size: int, line_no: int, offset: int) -> ParseError:
    return ParseError(ParseErrorReason.LINE_TOO_LONG, size, line_no, offset, "")


class _Offsets(Sequence[int]):
    """Start offsets of the lines ``push_lines`` returns, computed on first use.

    ``first`` is where the first line starts (maybe in an earlier chunk), ``second`` where the
    second starts; each later one follows the previous raw line and its ``\\n``.
    """

    __slots__ = ("_first", "_second", "_rest", "_list")

    def __init__(self, first: int, second: int, rest: list[Any]) -> None:
        self._first = first
        self._second = second
        self._rest = rest
        self._list: list[int] | None = None

    def materialize(self) -> list[int]:
        """Compute the offsets now (from the lines' raw lengths, before any is cut)."""
        if self._list is None:
            offsets = [self._first]
            if self._rest:
                second = self._second
                before = accumulate(map(len, self._rest[:-1]), initial=0)  # raw bytes before each
                offsets += [second + n + k for k, n in enumerate(before)]  # (+ k newlines)
            self._list = offsets
            self._rest = []
        return self._list

    def __getitem__(self, index: int) -> int:  # type: ignore[override]
        return self.materialize()[index]

    def __len__(self) -> int:
        return len(self.materialize())
