"""Unit tests of the scripted Messages API stand-in, spoken to over plain HTTP with urllib."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from helix_runner.offline import (
    DEFAULT_API_KEY,
    SESSION_HEADER,
    ApiError,
    Reply,
    RequestMatcher,
    Script,
    ScriptedApi,
    ScriptError,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    Usage,
    cli_env,
)
from helix_runner.offline import server as offline_server

HTTP_TIMEOUT = 10.0


def post(
    api: ScriptedApi,
    body: Any,
    *,
    path: str = "/v1/messages?beta=true",
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """POST to the stand-in; returns status, lower-cased headers and the body, for errors too."""
    data = raw if raw is not None else json.dumps(body).encode()
    request = urllib.request.Request(
        api.base_url + path,
        data=data,
        method="POST",
        headers={"content-type": "application/json", "x-api-key": "sk-secret", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as err:
        with err:
            return err.code, {k.lower(): v for k, v in err.headers.items()}, err.read()


def messages_body(prompt: str = "hello", *, stream: bool = True, **extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-test-model",
        "max_tokens": 1024,
        "stream": stream,
        "messages": [{"role": "user", "content": prompt}],
        **extra,
    }


def parse_sse(payload: bytes) -> list[tuple[str, dict[str, Any]]]:
    """Split an SSE body into (event name, parsed data); asserts every event has both lines."""
    events = []
    for chunk in payload.decode().split("\n\n"):
        if not chunk.strip():
            continue
        lines = chunk.split("\n")
        assert len(lines) == 2, chunk
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), chunk
        events.append((lines[0].removeprefix("event: "), json.loads(lines[1].removeprefix("data: "))))
    return events


def assemble(events: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Rebuild the message from its stream the way an SDK client does."""
    message: dict[str, Any] = {}
    partial_json: dict[int, str] = {}
    for name, data in events:
        if name == "message_start":
            message = dict(data["message"])
            message["content"] = []
        elif name == "content_block_start":
            assert data["index"] == len(message["content"])
            message["content"].append(dict(data["content_block"]))
        elif name == "content_block_delta":
            block, delta = message["content"][data["index"]], data["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] = delta["signature"]
            elif delta["type"] == "input_json_delta":
                partial_json[data["index"]] = partial_json.get(data["index"], "") + delta["partial_json"]
        elif name == "content_block_stop":
            if data["index"] in partial_json:
                message["content"][data["index"]]["input"] = json.loads(partial_json[data["index"]])
        elif name == "message_delta":
            message["stop_reason"] = data["delta"]["stop_reason"]
            message["usage"] = {**message["usage"], **data["usage"]}
    return message


@pytest.fixture
def api() -> Any:
    with ScriptedApi() as server:
        yield server


# ---- streaming shape ------------------------------------------------------------------------------


def test_streamed_reply_has_the_messages_api_event_sequence(api: ScriptedApi) -> None:
    api.set_script(
        [
            Reply(
                content=[
                    ThinkingBlock("Thinking it over.", signature="sig-123"),
                    TextBlock("Let me run that for you."),
                    ToolUseBlock(
                        "Bash", {"command": "echo 'hi there' > out.txt", "timeout": 5000}, id="toolu_A"
                    ),
                ],
                usage=Usage(
                    input_tokens=11,
                    output_tokens=22,
                    cache_creation_input_tokens=33,
                    cache_read_input_tokens=44,
                ),
            )
        ]
    )

    status, headers, payload = post(api, messages_body())

    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    assert headers["request-id"].startswith("req_")
    events = parse_sse(payload)
    names = [name for name, _ in events]
    assert all(name == data["type"] for name, data in events)
    assert names[:2] == ["message_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    assert names.count("content_block_start") == names.count("content_block_stop") == 3
    delta_types = [data["delta"]["type"] for name, data in events if name == "content_block_delta"]
    assert {"thinking_delta", "signature_delta", "text_delta", "input_json_delta"} <= set(delta_types)
    # signature_delta closes the thinking block, after all thinking_deltas
    thinking_deltas = [d for d in delta_types if d in ("thinking_delta", "signature_delta")]
    assert thinking_deltas[-1] == "signature_delta" and thinking_deltas.count("signature_delta") == 1

    message = assemble(events)
    assert message["model"] == "claude-test-model"  # echoed from the request
    assert message["id"].startswith("msg_")
    assert message["content"] == [
        {"type": "thinking", "thinking": "Thinking it over.", "signature": "sig-123"},
        {"type": "text", "text": "Let me run that for you."},
        {
            "type": "tool_use",
            "id": "toolu_A",
            "name": "Bash",
            "input": {"command": "echo 'hi there' > out.txt", "timeout": 5000},
        },
    ]
    assert message["stop_reason"] == "tool_use"
    assert message["usage"] == {
        "input_tokens": 11,
        "output_tokens": 22,
        "cache_creation_input_tokens": 33,
        "cache_read_input_tokens": 44,
    }
    start_usage = events[0][1]["message"]["usage"]
    assert start_usage["output_tokens"] == 1  # like the real API: final output_tokens only in message_delta


def test_text_is_streamed_in_several_deltas(api: ScriptedApi) -> None:
    api.set_script([Reply.text("one two three four")])

    _, _, payload = post(api, messages_body())

    deltas = [d["delta"]["text"] for name, d in parse_sse(payload) if name == "content_block_delta"]
    assert len(deltas) == 4
    assert "".join(deltas) == "one two three four"


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (Reply.text("done"), "end_turn"),
        (Reply.tool_use("Read", {"file_path": "/x"}), "tool_use"),
        (Reply.text("cut off", stop_reason="max_tokens"), "max_tokens"),
    ],
)
def test_stop_reason(api: ScriptedApi, reply: Reply, expected: str) -> None:
    api.set_script([reply])

    _, _, payload = post(api, messages_body())

    assert assemble(parse_sse(payload))["stop_reason"] == expected


def test_turn_model_overrides_the_request_model(api: ScriptedApi) -> None:
    api.set_script([Reply.text("hi", model="claude-haiku-scripted")])

    _, _, payload = post(api, messages_body())

    assert assemble(parse_sse(payload))["model"] == "claude-haiku-scripted"


def test_generated_tool_ids_are_unique_across_repeats(api: ScriptedApi) -> None:
    api.set_script([Reply.tool_use("Bash", {"command": "true"}, times=2)])

    ids = [assemble(parse_sse(post(api, messages_body())[2]))["content"][0]["id"] for _ in range(2)]

    assert ids[0].startswith("toolu_") and ids[0] != ids[1]


def test_generated_ids_differ_between_stand_ins() -> None:
    # Replicas each run a stand-in; a phase moved between them must never see an id twice.
    script = [Reply.tool_use("Bash", {"command": "true"})]
    ids = []
    for _ in range(2):
        with ScriptedApi(script) as server:
            message = assemble(parse_sse(post(server, messages_body())[2]))
            ids.append((message["id"], message["content"][0]["id"]))
    assert ids[0][0] != ids[1][0] and ids[0][1] != ids[1][1]


def test_chunk_delay_spreads_the_stream_out(api: ScriptedApi) -> None:
    api.set_script([Reply.text("a b c", chunk_delay=0.05)])

    started = time.monotonic()
    _, _, payload = post(api, messages_body())
    elapsed = time.monotonic() - started

    events = parse_sse(payload)
    assert elapsed >= (len(events) - 1) * 0.05  # one delay between each pair of events
    assert assemble(events)["content"][0]["text"] == "a b c"


def test_non_streaming_request_gets_the_whole_message(api: ScriptedApi) -> None:
    api.set_script(
        [Reply(content=[TextBlock("hi"), ToolUseBlock("Write", {"file_path": "/a", "content": "b"})])]
    )

    status, headers, payload = post(api, messages_body(stream=False))

    assert status == 200
    assert headers["content-type"] == "application/json"
    message = json.loads(payload)
    assert message["type"] == "message" and message["role"] == "assistant"
    assert message["content"][0] == {"type": "text", "text": "hi"}
    assert message["content"][1]["name"] == "Write" and message["content"][1]["input"] == {
        "file_path": "/a",
        "content": "b",
    }
    assert message["stop_reason"] == "tool_use"
    assert message["usage"]["output_tokens"] == 20


# ---- errors -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error_type"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (529, "overloaded_error"),
    ],
)
def test_error_turn_has_the_api_error_body(api: ScriptedApi, status: int, error_type: str) -> None:
    api.set_script([ApiError(status)])

    got_status, headers, payload = post(api, messages_body())

    assert got_status == status
    body = json.loads(payload)
    assert body["type"] == "error"
    assert body["error"]["type"] == error_type
    assert body["error"]["message"]
    assert body["request_id"] == headers["request-id"]


def test_error_n_times_then_next_turn(api: ScriptedApi) -> None:
    api.set_script([ApiError(429, times=2, message="slow down"), Reply.text("finally")])

    statuses = [post(api, messages_body())[0] for _ in range(3)]

    assert statuses == [429, 429, 200]
    assert [r.outcome for r in api.requests] == ["error", "error", "reply"]
    assert [r.turn_index for r in api.requests] == [0, 0, 1]
    assert api.pending_turns() == []


def test_error_headers_and_custom_type(api: ScriptedApi) -> None:
    api.set_script(
        [ApiError(503, error_type="overloaded_error", message="busy", retry_after=2, should_retry=False)]
    )

    status, headers, payload = post(api, messages_body())

    assert status == 503
    assert headers["retry-after"] == "2"
    assert headers["x-should-retry"] == "false"
    assert json.loads(payload)["error"] == {"type": "overloaded_error", "message": "busy"}


def test_error_turns_validate_their_fields() -> None:
    with pytest.raises(ScriptError):
        ApiError(200)
    with pytest.raises(ScriptError):
        ApiError(500, times=0)
    with pytest.raises(ScriptError):
        Reply.text("x", times=0)


# ---- matchers ---------------------------------------------------------------------------------------


def test_matcher_routes_interleaved_requests(api: ScriptedApi) -> None:
    sub = RequestMatcher(first_user_contains="[[sub]]")
    main = RequestMatcher(first_user_contains="MAIN")
    api.set_script(
        [
            Reply.text("sub answer", match=sub, label="sub"),
            Reply.text("main answer", match=main, label="main"),
        ]
    )

    main_reply = assemble(parse_sse(post(api, messages_body("MAIN task"))[2]))
    sub_reply = assemble(parse_sse(post(api, messages_body("[[sub]] count files"))[2]))

    assert main_reply["content"][0]["text"] == "main answer"
    assert sub_reply["content"][0]["text"] == "sub answer"
    assert [(r.label, r.turn_index) for r in api.requests] == [("main", 1), ("sub", 0)]


def test_first_unconsumed_matching_turn_wins(api: ScriptedApi) -> None:
    api.set_script([Reply.text("first"), Reply.text("second")])

    texts = [assemble(parse_sse(post(api, messages_body())[2]))["content"][0]["text"] for _ in range(2)]

    assert texts == ["first", "second"]


def test_first_user_matcher_ignores_later_mentions() -> None:
    """The main thread's follow-up request quotes the subagent prompt inside a tool_use input."""
    sub = RequestMatcher(first_user_contains="[[sub]]")
    main_follow_up = {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "MAIN task"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "t1", "name": "Agent", "input": {"prompt": "[[sub]] go"}}
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "launched"}],
            },
        ]
    }
    subagent = {"messages": [{"role": "user", "content": [{"type": "text", "text": "[[sub]] go"}]}]}

    assert not sub.matches(main_follow_up)
    assert sub.matches(subagent)
    assert RequestMatcher(contains="[[sub]]").matches(main_follow_up)
    assert RequestMatcher(last_user_contains="launched").matches(main_follow_up)
    assert not RequestMatcher(last_user_contains="launched").matches(subagent)


def test_matcher_conditions_are_combined() -> None:
    body = {
        "model": "claude-opus-x",
        "system": [{"type": "text", "text": "You are a helpful agent."}],
        "messages": [{"role": "user", "content": "do the thing"}],
    }

    assert RequestMatcher(system_contains="helpful", model_contains="opus").matches(body)
    assert not RequestMatcher(system_contains="helpful", model_contains="haiku").matches(body)
    assert RequestMatcher(not_contains="secret").matches(body)
    assert not RequestMatcher(not_contains="thing").matches(body)
    assert not RequestMatcher(contains="text").matches(body)  # block "type" values are not text
    assert not RequestMatcher(contains="x").matches("not a dict")


# ---- fallback ---------------------------------------------------------------------------------------


def test_exhausted_script_serves_the_default_fallback(api: ScriptedApi) -> None:
    api.set_script([Reply.text("only one")])

    post(api, messages_body())
    status, _, payload = post(api, messages_body())

    assert status == 200
    assert "no turn left" in assemble(parse_sse(payload))["content"][0]["text"]
    assert [r.outcome for r in api.requests] == ["reply", "fallback"]
    assert api.fallback_requests()[0].turn_index is None


def test_unmatched_request_gets_the_fallback_even_if_turns_remain(api: ScriptedApi) -> None:
    api.set_script(
        Script([Reply.text("for sub", match=RequestMatcher(contains="[[sub]]"))], fallback=ApiError(500))
    )

    status, _, _ = post(api, messages_body("unrelated"))

    assert status == 500
    assert api.requests[0].outcome == "fallback"
    assert api.pending_turns() == [0]


def test_every_cli_session_plays_the_script_from_its_start(api: ScriptedApi) -> None:
    # One CLI process = one session id (its subagents send the same one); in offline mode one
    # phase, so a phase never finds the turns used up by the phases before it.
    api.set_script([Reply.text("first"), Reply.text("second")])

    def text(session: str | None) -> str:
        headers = {SESSION_HEADER: session} if session else {}
        return assemble(parse_sse(post(api, messages_body(), headers=headers)[2]))["content"][0]["text"]

    assert [text("phase-a"), text("phase-a")] == ["first", "second"]
    assert text("phase-b") == "first"
    assert "no turn left" in text("phase-a")
    assert text("phase-b") == "second"
    assert api.pending_turns("phase-b") == [] and api.pending_turns("phase-c") == [0, 1]
    assert [r.session_id for r in api.message_requests()][:3] == ["phase-a", "phase-a", "phase-b"]
    # Requests without a session id (curl, tools) share one state of their own.
    assert [text(None), text(None)] == ["first", "second"]
    assert api.pending_turns() == []


def test_session_states_are_bounded(api: ScriptedApi, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(offline_server, "MAX_SESSIONS", 2)
    api.set_script([Reply.text("only")])
    for session in ("s1", "s2", "s3"):
        post(api, messages_body(), headers={SESSION_HEADER: session})
    assert api.pending_turns("s2") == api.pending_turns("s3") == []
    assert api.pending_turns("s1") == [0]  # forgotten: it would start over


# ---- recording --------------------------------------------------------------------------------------


def test_requests_are_recorded_with_redacted_credentials(api: ScriptedApi) -> None:
    api.set_script([Reply.text("ok", label="greeting")])

    post(
        api,
        messages_body("hi", system="be brief"),
        headers={"anthropic-beta": "x-1", "authorization": "Bearer t"},
    )

    [request] = api.requests
    assert request.method == "POST"
    assert request.path == "/v1/messages"
    assert request.query == "beta=true"
    assert request.headers["x-api-key"] == "<redacted>"
    assert request.headers["authorization"] == "<redacted>"
    assert request.headers["anthropic-beta"] == "x-1"
    assert request.body["messages"] == [{"role": "user", "content": "hi"}]
    assert request.model == "claude-test-model"
    assert request.streaming
    assert request.system_text == "be brief"
    assert (request.outcome, request.status, request.turn_index, request.label) == (
        "reply",
        200,
        0,
        "greeting",
    )


def test_tool_results_of_the_last_user_message(api: ScriptedApi) -> None:
    body = messages_body()
    body["messages"] = [
        {"role": "user", "content": "run it"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "hello"}]},
                {"type": "text", "text": "reminder"},
            ],
        },
    ]

    post(api, body)

    request = api.requests[0]
    assert [b["tool_use_id"] for b in request.tool_results()] == ["t1"]
    assert request.tool_result_text() == "hello"
    assert request.tool_result_text("other") == ""


def test_gzip_request_body_is_decoded(api: ScriptedApi) -> None:
    raw = gzip.compress(json.dumps(messages_body("zipped")).encode())

    status, _, _ = post(api, None, raw=raw, headers={"content-encoding": "gzip"})

    assert status == 200
    assert api.requests[0].body["messages"][0]["content"] == "zipped"


def test_wait_for_requests_returns_when_they_arrive(api: ScriptedApi) -> None:
    thread = threading.Thread(target=lambda: [post(api, messages_body()) for _ in range(2)])
    thread.start()

    got = api.wait_for_requests(2, timeout=HTTP_TIMEOUT)
    thread.join(HTTP_TIMEOUT)

    assert len(got) == 2


def test_wait_for_requests_times_out(api: ScriptedApi) -> None:
    with pytest.raises(TimeoutError, match="expected 1 request"):
        api.wait_for_requests(1, timeout=0.05)


async def test_usable_from_async_code() -> None:
    async with ScriptedApi([Reply.text("async hello")]) as server:
        status, _, payload = await asyncio.to_thread(post, server, messages_body())
        [request] = await server.wait_for_requests_async(1, timeout=HTTP_TIMEOUT)

    assert status == 200
    assert request.outcome == "reply"
    assert not server.running


# ---- other endpoints --------------------------------------------------------------------------------


def test_count_tokens(api: ScriptedApi) -> None:
    status, _, payload = post(api, messages_body("x" * 400), path="/v1/messages/count_tokens?beta=true")

    assert status == 200
    assert json.loads(payload)["input_tokens"] > 100
    assert api.requests[0].outcome == "count_tokens"
    assert api.message_requests() == []


def test_unknown_endpoint_is_recorded_not_fatal(api: ScriptedApi) -> None:
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(api.base_url + "/v1/models", timeout=HTTP_TIMEOUT)
    with info.value as err:
        body = json.loads(err.read())

    assert info.value.code == 404
    assert body["error"]["type"] == "not_found_error"
    assert (api.requests[0].method, api.requests[0].path, api.requests[0].outcome) == (
        "GET",
        "/v1/models",
        "unknown_endpoint",
    )
    assert post(api, messages_body())[0] == 200  # still serving


def test_malformed_messages_request_is_a_400(api: ScriptedApi) -> None:
    status, _, payload = post(api, None, raw=b"{not json")

    assert status == 400
    assert json.loads(payload)["error"]["type"] == "invalid_request_error"
    assert api.requests[0].outcome == "bad_request"
    assert api.requests[0].body == "{not json"


# ---- lifecycle --------------------------------------------------------------------------------------


def test_stop_does_not_wait_for_a_slow_stream() -> None:
    server = ScriptedApi([Reply.text("word " * 50, chunk_delay=1.0)]).start()
    errors: list[BaseException] = []

    def client() -> None:
        try:
            post(server, messages_body())
        except BaseException as exc:  # noqa: BLE001 - the cut stream's error type is the client's business
            errors.append(exc)

    thread = threading.Thread(target=client)
    thread.start()
    server.wait_for_requests(1, timeout=HTTP_TIMEOUT)

    started = time.monotonic()
    server.stop()
    thread.join(HTTP_TIMEOUT)

    assert time.monotonic() - started < 2.0
    assert not thread.is_alive()
    assert errors, "the client should see the stream cut short"
    server.stop()  # idempotent


def test_binds_loopback_on_an_ephemeral_port() -> None:
    with ScriptedApi() as first, ScriptedApi() as second:
        assert first.base_url.startswith("http://127.0.0.1:")
        assert first.port != second.port and first.port > 0

    with pytest.raises(RuntimeError):
        _ = first.port


# ---- script (de)serialisation -----------------------------------------------------------------------


def full_script() -> Script:
    return Script(
        turns=[
            Reply(
                content=[
                    ThinkingBlock("hmm", signature="s1"),
                    TextBlock("calling"),
                    ToolUseBlock("Agent", {"prompt": "[[sub]] go", "nested": {"a": [1, 2]}}, id="toolu_x"),
                ],
                stop_reason="tool_use",
                usage=Usage(1, 2, 3, 4),
                model="m",
                chunk_delay=0.01,
                times=2,
                match=RequestMatcher(first_user_contains="MAIN", not_contains="zzz"),
                label="main-1",
            ),
            ApiError(429, times=3, message="slow", retry_after=1.5, should_retry=True, label="rl"),
            ApiError(529, error_type="overloaded_error", match=RequestMatcher(model_contains="haiku")),
            Reply.text("bye", stop_reason="max_tokens"),
        ],
        fallback=ApiError(500, message="unexpected request"),
    )


def test_script_round_trips_through_json(tmp_path: Path) -> None:
    script = full_script()

    assert Script.from_json(script.to_json()) == script
    script.save(tmp_path / "script.json")
    assert Script.load(tmp_path / "script.json") == script


def test_script_from_hand_written_dict() -> None:
    script = Script.from_dict(
        [
            {"content": "plain text reply"},
            {"status": 529, "times": 2},
            {"kind": "reply", "content": [{"type": "tool_use", "name": "Bash", "input": {"command": "ls"}}]},
        ]
    )

    assert script.turns[0] == Reply.text("plain text reply")
    assert script.turns[1] == ApiError(529, times=2)
    assert script.turns[2].content[0] == ToolUseBlock("Bash", {"command": "ls"})
    assert script.fallback == Script().fallback


@pytest.mark.parametrize(
    "bad",
    [
        {"turns": [{"content": "x", "stop_reasn": "end_turn"}]},
        {"turns": [{"content": [{"type": "image"}]}]},
        {"turns": [{"kind": "sleep"}]},
        {"turns": [{"status": 500, "match": {"contains_all": "x"}}]},
        {"turns": "nope"},
        {"turn": []},
    ],
)
def test_malformed_scripts_are_rejected(bad: dict[str, Any]) -> None:
    with pytest.raises(ScriptError):
        Script.from_dict(bad)


def test_server_accepts_a_script_dict() -> None:
    with ScriptedApi({"turns": [{"content": "from a dict"}]}) as server:
        _, _, payload = post(server, messages_body())

    assert assemble(parse_sse(payload))["content"][0]["text"] == "from a dict"


# ---- CLI environment and command ----------------------------------------------------------------------


def test_cli_env_isolates_the_child(tmp_path: Path) -> None:
    base = {
        "PATH": "/usr/bin",
        "ANTHROPIC_AUTH_TOKEN": "real-token",
        "CLAUDE_CONFIG_DIR": "/root/.claude",
        "CLAUDE_CODE_USE_BEDROCK": "1",
        "CLAUDECODE": "1",
        "HOME": "/root",
    }

    env = cli_env("http://127.0.0.1:1234", home=tmp_path, base_env=base, max_retries=1, extra={"X": "y"})

    assert env["PATH"] == "/usr/bin"
    assert env["HOME"] == str(tmp_path)
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:1234"
    assert env["ANTHROPIC_API_KEY"] == DEFAULT_API_KEY
    assert env["CLAUDE_CODE_MAX_RETRIES"] == "1"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert env["IS_SANDBOX"] == "1"
    assert env["X"] == "y"
    assert Path(env["CLAUDE_CODE_TMPDIR"]).is_dir()
    for leaked in ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CONFIG_DIR", "CLAUDE_CODE_USE_BEDROCK", "CLAUDECODE"):
        assert leaked not in env


def test_command_line_serves_a_script_file(tmp_path: Path) -> None:
    script_file = tmp_path / "script.json"
    Script([Reply.text("from the file")]).save(script_file)
    proc = subprocess.Popen(
        [sys.executable, "-m", "helix_runner.offline", "--script", str(script_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.startswith("ANTHROPIC_BASE_URL=http://127.0.0.1:"), line
        base_url = line.strip().split("=", 1)[1]
        request = urllib.request.Request(
            base_url + "/v1/messages", data=json.dumps(messages_body()).encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as response:
            text = assemble(parse_sse(response.read()))["content"][0]["text"]
        assert text == "from the file"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=HTTP_TIMEOUT)
        assert proc.returncode == 0
        assert "served 1 request(s), 0 by the fallback" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(HTTP_TIMEOUT)
