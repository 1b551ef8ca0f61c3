"""Repairs a stdout line that is JSON in every way but its text encoding, so its event is not lost.

Two defects make orjson reject a whole line that is otherwise fine:

* an unpaired UTF-16 surrogate escape such as ``"\\ud83d"``: the CLI (Node) writes one when it
  cuts a string inside a character outside the BMP, e.g. an emoji at a truncation boundary; a
  lone surrogate has no UTF-8 form, so strict parsers refuse it (RFC 8259 §8.2 leaves it open);
* bytes that are not UTF-8 (a tool's raw output passed through).

Losing such a line is worse than a replaced character: a lost tool result leaves the call
UNFINISHED, a lost ``result`` line turns a finished phase into a failure. So each defect is
replaced with U+FFFD, and the caller reports the repair (without content) and parses the result.
Only lines orjson already rejected come here; the common path never pays for this.
"""

from __future__ import annotations

import re

from helix_runner.domain.events import ParseErrorReason

# JSON escapes in order: a valid surrogate pair (kept), a lone high or low surrogate (replaced),
# or any other escape, which is consumed whole so that an escaped backslash followed by "ud83d"
# is never mistaken for an escape. Escapes only occur inside strings, so no string tracking is
# needed. Linear: a left-to-right scan of fixed-length alternatives.
_ESCAPES = re.compile(
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"
    rb"|\\u[dD][89a-fA-F][0-9a-fA-F]{2}"
    rb"|\\.",
    re.DOTALL,
)
_LONE_SURROGATE_HINT = re.compile(rb"\\u[dD][89a-fA-F]")
_REPLACEMENT_ESCAPE = b"\\ufffd"


def repair_line(line: bytes) -> tuple[bytes, ParseErrorReason, str] | None:
    """The line with invalid UTF-8 and unpaired surrogate escapes replaced by U+FFFD, the reason
    to report, and a content-free detail; None when there is nothing of the kind to repair."""
    details: list[str] = []
    reason = ParseErrorReason.UNPAIRED_SURROGATE
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as err:
        reason = ParseErrorReason.INVALID_UTF8
        details.append(f"invalid UTF-8 from byte {err.start}")
        line = line.decode("utf-8", "replace").encode("utf-8")
    if _LONE_SURROGATE_HINT.search(line):
        lone = 0

        def fix(match: re.Match[bytes]) -> bytes:
            nonlocal lone
            escape = match.group()
            if len(escape) == 6:  # \uXXXX alone (a pair is 12 bytes, other escapes 2)
                lone += 1
                return _REPLACEMENT_ESCAPE
            return escape

        line = _ESCAPES.sub(fix, line)
        if lone:
            details.append(f"{lone} unpaired surrogate escape{'s' if lone > 1 else ''}")
    if not details:
        return None
    return line, reason, "; ".join(details) + " replaced with U+FFFD"
