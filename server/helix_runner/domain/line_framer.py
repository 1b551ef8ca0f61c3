"""Bytes from the CLI's stdout → complete lines, with bounded memory.

The CLI writes UTF-8 NDJSON, one object per ``\\n``-terminated line (notes §1), but reads hand us
arbitrary chunks: a line may span many reads and a read may end inside a multibyte character. The
framer therefore never decodes: it hands complete lines on as bytes, and the parser decodes each
complete line (orjson validates UTF-8 per line), so a character split across reads is harmless
(notes §4, CL 2.1.94).

Memory is bounded by ``max_line_bytes`` plus one chunk: a line that grows past the cap is dropped
byte by byte until its newline arrives (never buffered) and reported as a ``LINE_TOO_LONG`` parse
error with its length and position only (notes §4 "huge lines").
"""

from __future__ import annotations

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
    def pending_bytes(self) -> int:
        """Bytes held for the incomplete current line (never more than the cap)."""
        return self._pending_len

    def push(self, chunk: bytes) -> list[FramedLine | ParseError]:
        """Add a chunk; return the lines it completed (and over-long line reports), in order."""
        if b"\n" not in chunk:
            if chunk:
                self._extend_current(chunk)
            return []
        parts = chunk.split(b"\n")
        tail = parts.pop()
        out: list[FramedLine | ParseError] = []
        line_no = self._line_no
        offset = self._offset
        max_len = self._max

        first = parts[0]
        start = 0
        if self._skipping:
            size = self._skip_len + len(first)
            out.append(_too_long(size, line_no, offset))
            self._skipping = False
            self._skip_len = 0
            line_no += 1
            offset += size + 1
            start = 1
        elif self._pending:
            size = self._pending_len + len(first)
            if size > max_len:
                out.append(_too_long(size, line_no, offset))
                line_no += 1
                offset += size + 1
                start = 1
            else:
                self._pending.append(first)
                parts[0] = b"".join(self._pending)
            self._pending = []
            self._pending_len = 0

        if start:
            del parts[0]
        append = out.append
        crlf = b"\r" in chunk or (parts and parts[0][-1:] == b"\r")  # a CR may end the pending part
        if not crlf and (not parts or max(map(len, parts)) <= max_len):
            # Common case, checked in C: no CR anywhere and no line over the cap.
            for line in parts:
                size = len(line)
                if size and (line[0] == 123 or not line.isspace()):  # 123 == "{"
                    append((line, line_no, offset))
                line_no += 1
                offset += size + 1
        else:
            for line in parts:
                size = len(line)
                if size > max_len:
                    append(_too_long(size, line_no, offset))
                elif size:
                    if line[-1] == 13:  # "\r" of a CRLF
                        line = line[:-1]
                    if line and (line[0] == 123 or not line.isspace()):
                        append((line, line_no, offset))
                line_no += 1
                offset += size + 1

        self._line_no = line_no
        self._offset = offset
        if tail:
            self._extend_current(tail)
        return out

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
