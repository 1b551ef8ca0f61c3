"""How deeply a JSON text nests, measured before it is parsed.

Caller JSON (the JSON options of ``RunPhase``, ``ResolveToolCall``'s edited input) goes through
recursive code: Python's ``json`` and the ``jsonschema`` meta-schema check recurse per level
(a ``RecursionError`` at a few hundred levels, fewer for a schema), and orjson refuses to write
more than 255. So the depth is measured first, without recursion and without parsing, and a text
nested deeper than ``bounds.MAX_JSON_DEPTH`` is refused as INVALID_ARGUMENT naming the field
(issue 22, item 2).
"""

from __future__ import annotations

import re

from helix_runner.domain.bounds import MAX_JSON_DEPTH
from helix_runner.errors import ErrorKind, RunnerError

# A JSON string (with escapes), or a bracket outside strings: the scan sees only these.
_TOKENS = re.compile(r'"(?:[^"\\]+|\\.)*"?|[\[\]{}]', re.DOTALL)
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def nesting_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in ``text`` (0 for a scalar, 1 for ``{}``).

    Brackets inside strings do not count. Linear in the text's length; for malformed JSON the number
    is a best effort (the parser then refuses the text anyway).
    """
    depth = deepest = 0
    for match in _TOKENS.finditer(text):
        step = _STEP.get(match[0], 0)
        depth += step
        if depth > deepest:
            deepest = depth
    return deepest


def check_json_depth(field: str, text: str) -> None:
    """INVALID_ARGUMENT naming ``field`` when ``text`` nests deeper than ``MAX_JSON_DEPTH`` levels."""
    depth = nesting_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise RunnerError(ErrorKind.INVALID_ARGUMENT, "INVALID_FIELD",
                          f"{field}: nests {depth} levels deep; the limit is {MAX_JSON_DEPTH}",
                          {"field": field, "depth": str(depth), "max_depth": str(MAX_JSON_DEPTH)})
