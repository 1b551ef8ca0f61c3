"""Nesting depth of caller JSON, measured before any recursive parser sees it (issue 22, item 2)."""

from __future__ import annotations

import json

import pytest

from helix_runner.domain.bounds import MAX_JSON_DEPTH
from helix_runner.domain.json_depth import check_json_depth, nesting_depth
from helix_runner.errors import ErrorKind, RunnerError


@pytest.mark.parametrize(("text", "depth"), [
    ("1", 0),
    ('"[[[{"', 0),  # brackets in strings do not count
    ("{}", 1),
    ('{"a": [1, {"b": "]]]}}"}], "c": {}}', 3),
    (r'{"a": "\"[{", "b": [[]]}', 3),  # an escaped quote does not end the string
    ("[" * 5000 + "]" * 5000, 5000),
    ('{"a":' * 3000 + "1" + "}" * 3000, 3000),
])
def test_nesting_depth_counts_arrays_and_objects_outside_strings(text, depth):
    assert nesting_depth(text) == depth


def test_the_depth_agrees_with_a_parser_on_generated_documents():
    for depth in range(0, 70, 7):
        value: object = "leaf [{"
        for level in range(depth):
            value = {"k": value, "s": "}]"} if level % 2 else [value, "[[", 1]
        text = json.dumps(value)
        assert nesting_depth(text) == depth


def test_over_the_limit_is_invalid_argument_with_every_value_in_the_metadata():
    check_json_depth("options.settings", "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH)
    with pytest.raises(RunnerError) as caught:
        check_json_depth("options.settings", "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1))
    err = caught.value
    assert err.kind is ErrorKind.INVALID_ARGUMENT and err.reason == "INVALID_FIELD"
    assert err.message == f"options.settings: nests {MAX_JSON_DEPTH + 1} levels deep; the limit is {MAX_JSON_DEPTH}"
    assert err.metadata == {"field": "options.settings", "depth": str(MAX_JSON_DEPTH + 1),
                            "max_depth": str(MAX_JSON_DEPTH)}
