"""Request validation before anything runs: ids, sizes, values that could pose as CLI flags."""

from __future__ import annotations

import pytest

from helix_runner.domain.bounds import MAX_JSON_DEPTH
from helix_runner.domain.json_depth import nesting_depth
from helix_runner.domain.phase_spec import PhaseSpec
from helix_runner.errors import ErrorKind, RunnerError
from helix_runner.process.claude_command import build_argv, prompt_line, redact_argv

BASE = {"job_id": "job-1", "phase_id": "plan", "project_id": "", "prompt": "hi", "working_dir": "/w"}


def test_valid_spec_builds_argv():
    spec = PhaseSpec.create(**BASE, model="claude-sonnet-4-5", allowed_tools=("Bash(git:*)", "Read"), max_turns=3,
                            max_budget_usd=1.5, include_partial_messages=True, permission_mode="acceptEdits")
    argv = build_argv("/bin/claude", spec)
    assert argv[:7] == ["/bin/claude", "-p", "--output-format", "stream-json", "--verbose", "--input-format",
                        "stream-json"]
    assert argv[argv.index("--allowedTools") + 1] == "Bash(git:*),Read"
    assert argv[argv.index("--max-turns") + 1] == "3"
    assert "--include-partial-messages" in argv
    assert "hi" not in argv  # the prompt travels on stdin


def test_prompt_line_is_one_json_line():
    line = prompt_line('multi\nline "quoted"')
    assert b"\n" not in line
    assert line.startswith(b'{"type":"user"')


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"job_id": ""}, "job_id"),
        ({"job_id": "a b"}, "job_id"),
        ({"phase_id": "x" * 129}, "phase_id"),
        ({"prompt": "   "}, "prompt"),
        ({"prompt": "x" * (1024 * 1024 + 1)}, "prompt"),
        ({"model": "--dangerously-skip-permissions"}, "options.model"),
        ({"resume_session_id": "-x"}, "options.resume_session_id"),
        ({"allowed_tools": ("--help",)}, "options.allowed_tools"),
        ({"allowed_tools": ("Bash,Write",)}, "options.allowed_tools"),
        ({"permission_mode": "yolo"}, "options.permission_mode"),
        ({"max_turns": -1}, "options.max_turns"),
        ({"max_budget_usd": 0.0}, "options.max_budget_usd"),
        ({"env": {"BAD NAME": "x"}}, "options.env"),
        ({"env": {"X": "a\x00b"}}, "options.env"),
        ({"working_dir": ""}, "working_dir"),
        ({"memory_limit_bytes": 1024}, "options.memory_limit_bytes"),
        ({"memory_limit_bytes": -1}, "options.memory_limit_bytes"),
        ({"cpu_limit_millicores": 5}, "options.cpu_limit_millicores"),
        ({"cpu_limit_millicores": 2_000_000}, "options.cpu_limit_millicores"),
    ],
)
def test_invalid_fields_are_named(change, field):
    with pytest.raises(RunnerError) as caught:
        PhaseSpec.create(**{**BASE, **change})
    assert caught.value.kind.name == "INVALID_ARGUMENT"
    assert caught.value.metadata["field"] == field


@pytest.mark.parametrize(("values", "field"), [
    ({"workspace": "DOCKER"}, "options.workspace"),
    ({"worktree_retention": "SOMETIMES", "workspace": "GIT_WORKTREE"}, "options.worktree_retention"),
    ({"base_ref": "main"}, "options.base_ref"),  # only with GIT_WORKTREE
    ({"base_ref": "-x", "workspace": "GIT_WORKTREE"}, "options.base_ref"),
    ({"base_ref": "a..b", "workspace": "GIT_WORKTREE"}, "options.base_ref"),
    ({"add_dirs": ("/ok\n--bad",)}, "options.add_dirs"),
    ({"add_dirs": tuple(f"/d{i}" for i in range(33))}, "options.add_dirs"),
])
def test_workspace_options_are_validated(values, field):
    with pytest.raises(RunnerError) as caught:
        PhaseSpec.create(job_id="j", phase_id="p", project_id="", prompt="x", working_dir="/w", **values)
    assert caught.value.metadata["field"] == field


def test_a_worktree_spec_with_a_base_ref_is_valid():
    spec = PhaseSpec.create(job_id="j", phase_id="p", project_id="", prompt="x", working_dir="/w",
                            workspace="GIT_WORKTREE", base_ref="origin/main~2", worktree_retention="KEEP")
    assert spec.base_ref == "origin/main~2"


@pytest.mark.parametrize("schema", [
    '{"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}',
    '{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}',
    '{"$schema": "https://json-schema.org/draft-07/schema", "type": "object"}',
])
def test_a_draft_07_json_schema_is_accepted_and_passed_as_one_argument(schema):
    spec = PhaseSpec.create(job_id="j", phase_id="p", project_id="", prompt="hi", working_dir="/w", json_schema=schema)
    assert f"--json-schema={schema}" in build_argv("claude", spec)



def test_an_invalid_json_schema_names_where_and_why_in_the_error_metadata():
    """The check's error carries the schema's path and the validator's message (it raised a
    TypeError instead, an INTERNAL, when a metadata key clashed with an argument name)."""
    with pytest.raises(RunnerError) as caught:
        PhaseSpec.create(job_id="j", phase_id="p", project_id="", prompt="hi", working_dir="/w",
                         json_schema='{"type": "object", "properties": {"a": {"type": 5}}}')
    assert caught.value.kind == ErrorKind.INVALID_ARGUMENT
    meta = caught.value.metadata
    assert meta["field"] == "options.json_schema" and meta["at"] == "properties/a/type"
    assert "5" in meta["schema_error"] and meta["schema_error"] in caught.value.message

def _nested(depth: int) -> str:
    """An object nested ``depth`` levels: {"a": {"a": ... 1 ...}}."""
    return '{"a":' * (depth - 1) + '{"a": 1}' + "}" * (depth - 1)


def _items_schema(levels: int) -> str:
    """A valid draft-07 schema of ``levels`` arrays of arrays of integers: one JSON level each, plus the leaf."""
    schema = '{"type": "integer"}'
    for _ in range(levels):
        schema = '{"type": "array", "items": ' + schema + "}"
    return schema


JSON_FIELDS = {
    "json_schema": lambda inner: inner,
    "settings": lambda inner: inner,
    "mcp_config": lambda inner: '{"mcpServers": {"db": ' + inner + "}}",
    "agents": lambda inner: '{"rev": {"description": "d", "prompt": "p", "x": ' + inner + "}}",
}


@pytest.mark.parametrize("name", sorted(JSON_FIELDS))
@pytest.mark.parametrize("depth", [3000, 6000])
def test_json_options_nested_thousands_of_levels_are_invalid_argument(name, depth):
    """Issue 22 item 2: a few thousand levels in 10-40 KB ended in json.loads' RecursionError (INTERNAL)."""
    value = JSON_FIELDS[name](_nested(depth))
    assert 10_000 < len(value) < 60_000
    with pytest.raises(RunnerError) as caught:
        PhaseSpec.create(job_id="j", phase_id="p", project_id="", prompt="hi", working_dir="/w", **{name: value})
    assert caught.value.kind is ErrorKind.INVALID_ARGUMENT
    assert caught.value.metadata["field"] == f"options.{name}"
    assert int(caught.value.metadata["depth"]) > MAX_JSON_DEPTH


def test_a_valid_schema_200_levels_deep_is_invalid_argument_not_a_recursion_error():
    """The meta-schema check recursed past Python's limit from about 180 levels of `items`."""
    with pytest.raises(RunnerError) as caught:
        PhaseSpec.create(job_id="j", phase_id="p", project_id="", prompt="hi", working_dir="/w",
                         json_schema=_items_schema(200))
    assert caught.value.metadata == {"field": "options.json_schema", "depth": "201",
                                     "max_depth": str(MAX_JSON_DEPTH)}


@pytest.mark.parametrize("name", sorted(JSON_FIELDS))
def test_json_options_at_the_documented_depth_are_accepted_and_reach_the_cli(name):
    if name == "json_schema":
        value = _items_schema(MAX_JSON_DEPTH - 1)  # a valid draft-07 schema exactly MAX_JSON_DEPTH deep
    else:
        value = JSON_FIELDS[name](_nested(MAX_JSON_DEPTH + 1 - nesting_depth(JSON_FIELDS[name]("{}"))))
    assert nesting_depth(value) == MAX_JSON_DEPTH
    spec = PhaseSpec.create(job_id="j", phase_id="p", project_id="", prompt="hi", working_dir="/w",
                            **{name: value})
    argv = build_argv("claude", spec, settings='{"apiKeyHelper": "helper"}')  # settings merged and re-written
    assert any(arg.startswith(("--json-schema=", "--settings", "--mcp-config", "--agents")) for arg in argv)
    redact_argv(argv)  # the record's copy parses them again


@pytest.mark.parametrize(("change", "values"), [
    ({"prompt": "x" * (1024 * 1024 + 1)}, [1024 * 1024 + 1]),
    ({"settings": '{"a": "' + "x" * 110_000 + '"}'}, [110_009]),
    ({"settings": '{"a": 1,}'}, [1, 9]),
    ({"env": {"1BAD": "x"}}, ["1BAD"]),
    ({"base_ref": "a..b", "workspace": "GIT_WORKTREE"}, ["a..b"]),
    ({"model": "-rf"}, ["-rf"]),
    ({"agents": '{"rev": {"description": 1}}'}, ["rev"]),
])
def test_every_dynamic_value_of_a_message_is_in_the_metadata(change, values):
    """Issue 22 item 4: sizes, names and refs a message quotes are in the ErrorInfo metadata too."""
    with pytest.raises(RunnerError) as caught:
        PhaseSpec.create(**{**BASE, **change})
    err = caught.value
    assert "field" in err.metadata
    for value in map(str, values):
        assert value in err.message and value in err.metadata.values(), (err.message, err.metadata)
