"""The stream parser: one line of the CLI's stdout → typed payloads (shapes from the real corpus)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from support.cli_lines import SID, assistant

from helix_runner.domain.cost_ledger import usage_counts
from helix_runner.domain.events import (
    ApiError,
    ApiRetry,
    AssistantText,
    CliStatus,
    Compaction,
    ControlRequest,
    ControlResponse,
    HookEvent,
    HookEventKind,
    ParseError,
    ParseErrorReason,
    PartialDelta,
    PartialDeltaKind,
    PermissionDenied,
    RateLimit,
    SessionInit,
    SessionWritesLost,
    TaskEvent,
    TaskEventKind,
    Thinking,
    TokenUsage,
    ToolCallFinished,
    ToolCallStarted,
    ToolProgress,
    TurnResult,
    Unknown,
    UserMessage,
)
from helix_runner.domain.stream_parser import StreamParser, token_usage_from_api

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "retry"


def parse(obj_or_line, **options):
    line = obj_or_line if isinstance(obj_or_line, bytes) else orjson.dumps(obj_or_line)
    return StreamParser(**options).parse(line, 7, 100)


def payloads(obj, **options):
    return parse(obj, **options)[4]


def counted(observation):
    """A usage observation with its usage object (raw or typed) as the counts the ledger takes."""
    message_id, model, usage, final = observation
    return message_id, model, usage_counts(usage), final


def user(*blocks, **extra):
    return {
        "type": "user",
        "message": {"role": "user", "content": list(blocks)},
        "parent_tool_use_id": None,
        "session_id": SID,
        "uuid": "u-2",
        **extra,
    }


# ------------------------------------------------------------------------------------------------
# Envelope and robustness.


def test_envelope_fields_come_from_the_line():
    sid, parent, agent, uid, items, _ = parse(
        assistant({"type": "text", "text": "hi"}, parent_tool_use_id="toolu_P", agent_id="a17")
    )
    assert (sid, parent, agent, uid) == (SID, "toolu_P", "a17", "u-1")
    assert items == [AssistantText("hi", 2, False, "msg_01", "claude-opus-5-5")]


def test_key_order_does_not_matter():
    # 2.1.330 writes `type` in the middle of result lines (docs/claude-cli-protocol.md §0.7; localcli-01).
    line = b'{"duration_api_ms":16,"session_id":"s","subtype":"success","is_error":false,"type":"result","num_turns":1}'
    (result,) = payloads(line)
    assert isinstance(result, TurnResult) and result.subtype == "success" and result.num_turns == 1


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"[SandboxDebug] seccomp filter applied", ParseErrorReason.NOT_JSON),
        (b"Claude configuration file not found", ParseErrorReason.NOT_JSON),
        (b'{"type":"assistant","message":', ParseErrorReason.INVALID_JSON),
        (b'{"type":"user","text":"caf\xe9"', ParseErrorReason.INVALID_UTF8),  # and cut: beyond repair
        (b'{"type":"user","text":"\\ud83d"', ParseErrorReason.INVALID_JSON),
        (b"[1,2,3]", ParseErrorReason.NOT_A_MESSAGE),
        (b'{"no_type":true}', ParseErrorReason.NOT_A_MESSAGE),
        (b'{"type":42}', ParseErrorReason.NOT_A_MESSAGE),
        (b'{"type":"assistant","message":"not an object"}', ParseErrorReason.BAD_SHAPE),
        (b'{"type":"user","message":{"content":[{"type":"tool_result"}]}}', ParseErrorReason.BAD_SHAPE),
        (
            b'{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":7}]}}',
            ParseErrorReason.BAD_SHAPE,
        ),
        (
            b'{"type":"assistant","message":{"content":[{"type":"tool_use","id":null,"name":"Bash"}]}}',
            ParseErrorReason.BAD_SHAPE,
        ),
        (
            b'{"type":"assistant","message":{"content":[{"type":"text","text":5}]}}',
            ParseErrorReason.BAD_SHAPE,
        ),
    ],
)
def test_unreadable_lines_become_redacted_parse_errors(line, reason):
    sid, parent, agent, uid, items, usage = parse(line)
    (error,) = items
    assert error == ParseError(reason, len(line), 7, 100, error.detail)
    assert (sid, parent, agent, uid, usage) == ("", "", "", "", None)


def test_a_result_with_an_unpaired_surrogate_is_kept_after_a_warning():
    line = b'{"type":"result","subtype":"success","is_error":false,"num_turns":1,"result":"cut \\ud83d","session_id":"s"}'
    sid, _, _, _, items, _ = parse(line)
    warning, result = items
    assert warning == ParseError(
        ParseErrorReason.UNPAIRED_SURROGATE,
        len(line),
        7,
        100,
        "1 unpaired surrogate escape replaced with U+FFFD",
        True,
    )
    assert isinstance(result, TurnResult) and result.result_text == "cut \ufffd" and sid == "s"


def test_invalid_utf8_is_replaced_and_the_line_kept():
    line = b'{"type":"system","subtype":"status","status":"caf\xe9","session_id":"s"}'
    bad = line.index(b"\xe9")
    warning, status = payloads(line)
    assert (warning.reason, warning.repaired, warning.detail) == (
        ParseErrorReason.INVALID_UTF8,
        True,
        f"invalid UTF-8 from byte {bad} replaced with U+FFFD",
    )
    assert isinstance(status, CliStatus) and status.status == "caf\ufffd"


def test_a_repaired_line_of_a_bad_shape_is_still_reported_as_such():
    warning, error = payloads(b'{"type":"assistant","message":"\xff"}')
    assert warning.repaired and (error.reason, error.repaired) == (ParseErrorReason.BAD_SHAPE, False)


def test_parse_error_never_embeds_the_line():
    secret = "sk-ant-SECRET-do-not-log"
    for line in (
        f"noise {secret}",
        f'{{"type":"user","x":"{secret}"',
        f'{{"type":"assistant","message":"{secret}"}}',
    ):
        (error,) = parse(line.encode())[4]
        assert secret not in repr(error)
    repairable = f'{{"type":"keep_alive","x":"{secret}\\ud83d'.encode() + b'\xff"}'
    (warning,) = parse(repairable)[4]  # a keep_alive line gives no event of its own
    assert warning.repaired and secret not in repr(warning)


def test_unknown_type_and_subtype_pass_through():
    (unknown,) = payloads({"type": "transcript_mirror", "subtype": "x", "session_id": SID})
    assert unknown == Unknown("transcript_mirror", "x", "", unknown.line_bytes) and unknown.line_bytes > 0
    (unknown,) = payloads({"type": "system", "subtype": "thinking_tokens", "estimated_tokens": 15})
    assert (unknown.type, unknown.subtype, unknown.raw_json) == ("system", "thinking_tokens", "")


def test_unknown_carries_bounded_raw_json_only_when_asked():
    obj = {"type": "system", "subtype": "background_tasks_changed", "tasks": [], "pad": "p" * 100_000}
    (unknown,) = payloads(obj, include_raw_unknown=True)
    assert unknown.raw_json.startswith('{"type":"system"') and len(unknown.raw_json) == 64 * 1024
    assert unknown.line_bytes == len(orjson.dumps(obj))


def test_keep_alive_gives_nothing():
    assert payloads({"type": "keep_alive"}) == []


# ------------------------------------------------------------------------------------------------
# system.


def test_session_init():
    line = {
        "type": "system",
        "subtype": "init",
        "cwd": "/home/dev/project",
        "session_id": SID,
        "tools": ["Bash", "Read"],
        "mcp_servers": [{"name": "gh", "status": "connected"}],
        "model": "claude-opus-5-5",
        "permissionMode": "default",
        "apiKeySource": "ANTHROPIC_API_KEY",
        "claude_code_version": "2.1.330",
        "capabilities": ["interrupt_receipt_v1"],
        "uuid": "u0",
    }
    parser = StreamParser()
    first = parser.parse(orjson.dumps(line), 1, 0)[4][0]
    second = parser.parse(orjson.dumps(line), 2, 0)[4][0]
    assert first == SessionInit(
        "claude-opus-5-5",
        ("Bash", "Read"),
        "/home/dev/project",
        "2.1.330",
        "default",
        ("gh:connected",),
        ("interrupt_receipt_v1",),
        "ANTHROPIC_API_KEY",
        1,
    )
    assert second.turn_index == 2  # re-emitted at every turn (localcli-09)


def test_session_init_of_an_old_cli_without_version():
    (init,) = payloads({"type": "system", "subtype": "init", "model": "m", "tools": []})
    assert init.cli_version == "" and init.capabilities == ()


def test_api_retry():
    line = {
        "type": "system",
        "subtype": "api_retry",
        "attempt": 2,
        "max_retries": 10,
        "retry_delay_ms": 1207,
        "error_status": 429,
        "error": "rate_limit",
    }
    assert payloads(line) == [ApiRetry(2, 10, 1207, 429, "rate_limit")]
    line["error_status"] = None
    assert payloads(line)[0].error_status is None


def test_session_writes_lost():
    # The shape CLI 2.1.330 writes at exit when its transcript or config write hit ENOSPC / EDQUOT
    # (captured with HOME on a full tmpfs, see tests/api/test_run_phase_containment.py).
    line = {
        "type": "system",
        "subtype": "session_writes_lost",
        "error_code": "ENOSPC",
        "lost": ["transcript", "global_config"],
        "transcript_session_ids": ["ef9b694a-d3ec-4db5-bf64-bfcc5f9cdfa9"],
        "uuid": "f30def88-8128-4c99-b2c0-ebe2d675e7b4",
        "session_id": "ef9b694a-d3ec-4db5-bf64-bfcc5f9cdfa9",
    }
    assert payloads(line) == [
        SessionWritesLost("ENOSPC", ("transcript", "global_config"), ("ef9b694a-d3ec-4db5-bf64-bfcc5f9cdfa9",))
    ]
    hostile = {"type": "system", "subtype": "session_writes_lost", "error_code": 28, "lost": ["x" * 1000] * 100}
    (lost,) = payloads(hostile)
    assert lost.error_code == "" and lost.session_ids == ()
    assert len(lost.lost) == 16 and all(len(name) == 256 for name in lost.lost)


def test_status_and_compaction():
    assert payloads({"type": "system", "subtype": "status", "status": "requesting"}) == [
        CliStatus("requesting", "")
    ]
    assert payloads({"type": "system", "subtype": "status", "status": "compacting"}) == [Compaction(False)]
    assert payloads({"type": "system", "subtype": "status", "status": None, "compact_result": "success"}) == [
        CliStatus("", "")
    ]
    boundary = {
        "type": "system",
        "subtype": "compact_boundary",
        "compact_metadata": {"trigger": "manual", "pre_tokens": 1102, "post_tokens": 2538, "duration_ms": 37},
    }
    assert payloads(boundary) == [Compaction(True, "manual", 1102, 2538, 37)]


def test_hooks():
    started = {
        "type": "system",
        "subtype": "hook_started",
        "hook_id": "h1",
        "hook_name": "PreToolUse:Bash",
        "hook_event": "PreToolUse",
    }
    response = {
        **started,
        "subtype": "hook_response",
        "output": "pre-hook-ran\n",
        "stdout": "",
        "stderr": "pre-hook-ran\n",
        "exit_code": 0,
        "outcome": "success",
    }
    assert payloads(started) == [
        HookEvent(HookEventKind.STARTED, "h1", "PreToolUse:Bash", "PreToolUse", None, "", "")
    ]
    assert payloads(response) == [
        HookEvent(
            HookEventKind.RESPONSE, "h1", "PreToolUse:Bash", "PreToolUse", 0, "success", "pre-hook-ran\n"
        )
    ]
    del response["output"]
    response["stdout"] = "out|"
    assert payloads(response)[0].output_preview == "out|pre-hook-ran\n"


def test_permission_denied():
    line = {
        "type": "system",
        "subtype": "permission_denied",
        "tool_name": "Write",
        "tool_use_id": "toolu_1",
        "message": "Claude requested permissions to write",
        "agent_id": "a1",
    }
    sid, parent, agent, uid, items, _ = parse(line)
    assert items == [PermissionDenied("Write", "toolu_1", "", "", "Claude requested permissions to write")]
    assert agent == "a1"


def test_task_lifecycle():
    base = {
        "type": "system",
        "task_id": "t1",
        "tool_use_id": "toolu_A",
        "description": "Count files",
        "subagent_type": "general-purpose",
        "task_type": "local_agent",
    }
    started = payloads({**base, "subtype": "task_started", "is_backgrounded": True})[0]
    assert started == TaskEvent(
        TaskEventKind.STARTED,
        "t1",
        "toolu_A",
        "Count files",
        "general-purpose",
        "local_agent",
        "",
        "",
        True,
        0,
        0,
        None,
    )
    progress = payloads(
        {
            **base,
            "subtype": "task_progress",
            "usage": {"total_tokens": 1079, "tool_uses": 1, "duration_ms": 62},
        }
    )[0]
    assert (progress.kind, progress.total_tokens, progress.tool_uses, progress.duration_ms) == (
        TaskEventKind.PROGRESS,
        1079,
        1,
        62,
    )
    updated = payloads(
        {
            "type": "system",
            "subtype": "task_updated",
            "task_id": "t1",
            "patch": {"status": "completed", "end_time": 1},
        }
    )[0]
    assert (updated.kind, updated.status) == (TaskEventKind.UPDATED, "completed")
    note = payloads({**base, "subtype": "task_notification", "status": "completed", "summary": "s" * 5000})[0]
    assert note.kind is TaskEventKind.NOTIFICATION and len(note.summary) == 4096


# ------------------------------------------------------------------------------------------------
# assistant.


def test_one_event_per_content_block_in_order():
    items = payloads(
        assistant(
            {"type": "thinking", "thinking": "plan", "signature": "sig"},
            {"type": "text", "text": "I'll run it."},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "Bash",
                "input": {"command": "ls", "description": "List"},
            },
        )
    )
    assert items == [
        Thinking("plan", 4, False, False, "msg_01"),
        AssistantText("I'll run it.", 12, False, "msg_01", "claude-opus-5-5"),
        ToolCallStarted(
            "toolu_1", "Bash", '{"command":"ls","description":"List"}', 37, False, "msg_01", False
        ),
    ]


def test_redacted_thinking():
    empty, redacted = payloads(
        assistant(
            {"type": "thinking", "thinking": "", "signature": "EqMB"},
            {"type": "redacted_thinking", "data": "x"},
        )
    )
    assert empty == Thinking("", 0, False, True, "msg_01") == redacted


def test_server_tool_use_and_its_result():
    start, done, failed = payloads(
        assistant(
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}},
            {
                "type": "web_search_tool_result",
                "tool_use_id": "srvtoolu_1",
                "content": [{"type": "web_search_result"}],
            },
            {
                "type": "web_search_tool_result",
                "tool_use_id": "srvtoolu_2",
                "content": {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"},
            },
        )
    )
    assert start.server_tool and start.name == "web_search"
    assert (done.tool_use_id, done.is_error) == ("srvtoolu_1", False)
    assert (failed.tool_use_id, failed.is_error) == ("srvtoolu_2", True)


def test_unknown_content_block_passes_through():
    (unknown,) = payloads(assistant({"type": "image", "source": {}}))
    assert (unknown.type, unknown.subtype) == ("assistant", "block:image")


def test_synthetic_api_error_message():
    line = assistant(
        {"type": "text", "text": "API Error: 500 Internal server error (mock)."},
        model="<synthetic>",
        error="server_error",
        is_api_error_message=True,
        api_error_status=500,
    )
    assert parse(line)[4:] == (
        [ApiError("server_error", 500, "API Error: 500 Internal server error (mock).")],
        None,
    )


def test_assistant_usage_is_reported_once_per_message_and_again_only_when_it_grows():
    parser = StreamParser()
    usage = {"input_tokens": 3, "output_tokens": 1, "cache_creation_input_tokens": 10}
    first = parser.parse(orjson.dumps(assistant({"type": "text", "text": "a"}, usage=usage)), 1, 0)[5]
    same = parser.parse(orjson.dumps(assistant({"type": "text", "text": "b"}, usage=usage)), 2, 0)[5]
    grown = parser.parse(
        orjson.dumps(assistant({"type": "text", "text": "c"}, usage={**usage, "output_tokens": 9})), 3, 0
    )[5]
    assert counted(first) == ("msg_01", "claude-opus-5-5", usage_counts(usage), False)
    assert same is None  # the next block of the same message repeats the message_start usage
    assert grown is not None and usage_counts(grown[2])[1] == 9


def test_assistant_text_is_bounded_at_a_character_boundary():
    text = "é" * 200_000  # 400,000 bytes
    (block,) = payloads(assistant({"type": "text", "text": text}))
    assert block.text_bytes == 400_000 and block.text_truncated
    assert len(block.text.encode()) == 256 * 1024 and set(block.text) == {"é"}


def test_tool_input_is_bounded():
    (start,) = payloads(
        assistant({"type": "tool_use", "id": "t", "name": "Write", "input": {"content": "x" * 100_000}})
    )
    assert start.input_bytes == len('{"content":""}') + 100_000
    assert start.input_truncated and len(start.input_json) == 64 * 1024


# ------------------------------------------------------------------------------------------------
# user.


def test_tool_result_with_string_content_and_structured_result():
    line = user(
        {"tool_use_id": "toolu_1", "type": "tool_result", "content": "hello\nnotes.txt", "is_error": False},
        tool_use_result={"stdout": "hello\nnotes.txt", "stderr": "", "interrupted": False},
    )
    assert payloads(line) == [
        ToolCallFinished(
            "toolu_1",
            "",
            False,
            "hello\nnotes.txt",
            15,
            False,
            '{"stdout":"hello\\nnotes.txt","stderr":"","interrupted":false}',
            False,
        )
    ]


def test_absent_is_error_means_false_and_true_means_failed():
    ok = payloads(user({"tool_use_id": "a", "type": "tool_result", "content": "1\tline"}))[0]
    bad = payloads(
        user({"type": "tool_result", "content": "Exit code 3", "is_error": True, "tool_use_id": "b"})
    )[0]
    assert ok.is_error is False and bad.is_error is True


def test_tool_result_with_block_list_content():
    content = [
        {"type": "text", "text": "Async agent launched"},
        {"type": "image", "source": {"data": "QUJD"}},
        {"type": "text", "text": "agentId: a1"},
    ]
    (done,) = payloads(user({"tool_use_id": "a", "type": "tool_result", "content": content}))
    assert done.content_preview == "Async agent launched\n[image]\nagentId: a1"
    image_bytes = len(orjson.dumps(content[1]))
    assert done.content_bytes == len("Async agent launched") + image_bytes + len("agentId: a1") + 2


def test_tool_result_preview_is_bounded_and_reports_full_size():
    (done,) = payloads(
        user(
            {"tool_use_id": "a", "type": "tool_result", "content": "→" * 5000},
            tool_use_result={"stdout": "y" * 20_000},
        )
    )
    assert done.content_bytes == 15_000 and done.content_truncated
    assert len(done.content_preview.encode()) <= 4096 and set(done.content_preview) == {"→"}
    assert done.structured_result_truncated and len(done.structured_result_json) == 16 * 1024


def test_error_tool_use_result_is_a_json_string():
    (done,) = payloads(
        user(
            {"type": "tool_result", "content": "File does not exist.", "is_error": True, "tool_use_id": "r"},
            tool_use_result="Error: File does not exist.",
        )
    )
    assert done.structured_result_json == '"Error: File does not exist."'


def test_user_lines_that_are_not_tool_results():
    replay = {
        "type": "user",
        "message": {"role": "user", "content": "<local-command-stdout>Set model</local-command-stdout>"},
        "isReplay": True,
    }
    assert payloads(replay) == [
        UserMessage("<local-command-stdout>Set model</local-command-stdout>", False, True, False)
    ]
    interrupted = user({"type": "text", "text": "[Request interrupted by user]"})
    assert payloads(interrupted) == [UserMessage("[Request interrupted by user]", False, False, False)]
    synthetic = {"type": "user", "message": {"role": "user", "content": "summary"}, "isSynthetic": True}
    assert payloads(synthetic)[0].is_synthetic


# ------------------------------------------------------------------------------------------------
# result.


def test_success_result_with_model_usage():
    line = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "duration_ms": 173,
        "duration_api_ms": 61,
        "num_turns": 3,
        "result": "Done.",
        "session_id": SID,
        "total_cost_usd": 0.0174552,
        "usage": {
            "input_tokens": 3444,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 4096,
            "output_tokens": 143,
            "server_tool_use": {"web_search_requests": 0},
            "cache_creation": {"ephemeral_1h_input_tokens": 0, "ephemeral_5m_input_tokens": 0},
        },
        "modelUsage": {
            "claude-opus-5-5": {
                "inputTokens": 3444,
                "outputTokens": 143,
                "cacheReadInputTokens": 4096,
                "cacheCreationInputTokens": 0,
                "webSearchRequests": 0,
                "costUSD": 0.0174552,
            }
        },
        "permission_denials": [{"tool_name": "Write", "tool_use_id": "t", "tool_input": {"file_path": "/x"}}],
        "terminal_reason": "completed",
        "api_error_status": None,
        "stop_reason": "end_turn",
        "result_index": 0,
    }
    (result,) = payloads(line)
    assert (result.subtype, result.is_error, result.api_error_status, result.terminal_reason) == (
        "success",
        False,
        None,
        "completed",
    )
    assert (result.duration_ms, result.api_duration_ms, result.total_cost_usd) == (173, 61, 0.0174552)
    assert result.usage == TokenUsage(3444, 143, 4096, 0, 0, 0)
    (model,) = result.model_usage
    assert (model.model, model.tokens.input_tokens, model.cost_usd) == ("claude-opus-5-5", 3444, 0.0174552)
    assert result.permission_denials[0].tool_input_json == '{"file_path":"/x"}'
    assert result.has_model_usage and result.stop_reason == "end_turn"


def test_error_subtype_has_errors_and_no_result_text():
    (result,) = payloads(
        {
            "type": "result",
            "subtype": "error_max_turns",
            "is_error": True,
            "num_turns": 3,
            "errors": ["Reached maximum number of turns (2)"],
            "terminal_reason": "max_turns",
        }
    )
    assert (result.is_error, result.result_text, result.errors) == (
        True,
        "",
        ("Reached maximum number of turns (2)",),
    )
    assert result.total_cost_usd is None and not result.has_model_usage


def test_startup_failure_result_carries_its_reason():
    # The line CLI 2.1.330 wrote when $HOME/.claude.json was not valid JSON (tests/fixtures/retry).
    line = (FIXTURES / "cli-startup-config-invalid.jsonl").read_bytes().splitlines()[0]
    (result,) = parse(line)[4]
    assert (result.subtype, result.is_error, result.num_turns) == ("error_during_execution", True, 0)
    assert result.startup_failure_reason == "config_file_invalid"
    assert result.errors[0].startswith("Configuration error in ")
    (ordinary,) = payloads({"type": "result", "subtype": "success", "is_error": False})
    assert ordinary.startup_failure_reason == ""


def test_usage_since_last_result_is_kept_apart_from_the_running_totals():
    # A resumed process: modelUsage includes what the CLI restored from the session, the
    # since-last-result figure only this process's own usage (tests/fixtures/retry/README.md).
    lines = (FIXTURES / "cli-resume-attempt2.jsonl").read_bytes().splitlines()
    (result,) = [p for line in lines for p in parse(line)[4] if isinstance(p, TurnResult)]
    (total,) = result.model_usage
    (own,) = result.usage_since_last_result
    assert (total.tokens.input_tokens, own.tokens.input_tokens) == (2200, 1200)
    assert (total.cost_usd, own.cost_usd) == (0.0102, 0.0052)
    (old_cli,) = payloads({"type": "result", "subtype": "success", "modelUsage": {}})
    assert old_cli.usage_since_last_result is None


def test_model_usage_cache_writes_follow_the_split_rule():
    per_model_split = {
        "claude-opus-5-5": {
            "cacheCreationInputTokens": 240,
            "cacheCreationEphemeral5mInputTokens": 0,
            "cacheCreationEphemeral1hInputTokens": 0,
        }
    }
    (result,) = payloads({"type": "result", "subtype": "success", "modelUsage": per_model_split})
    assert result.model_usage[0].tokens.cache_write_5m_input_tokens == 240  # remainder → 5m (localcli-24)
    old_cli = {
        "type": "result",
        "subtype": "success",
        "usage": {
            "cache_creation_input_tokens": 500,
            "cache_creation": {"ephemeral_5m_input_tokens": 200, "ephemeral_1h_input_tokens": 300},
        },
        "modelUsage": {"main": {"cacheCreationInputTokens": 900}, "sub": {"cacheCreationInputTokens": 100}},
    }
    (result,) = payloads(old_cli)
    tokens = {m.model: m.tokens for m in result.model_usage}
    assert (tokens["main"].cache_write_5m_input_tokens, tokens["main"].cache_write_1h_input_tokens) == (
        600,
        300,
    )
    assert (tokens["sub"].cache_write_5m_input_tokens, tokens["sub"].cache_write_1h_input_tokens) == (100, 0)


def test_result_text_is_bounded():
    (result,) = payloads({"type": "result", "subtype": "success", "result": "r" * 70_000})
    assert result.result_truncated and len(result.result_text) == 64 * 1024


def test_token_usage_from_api_tolerates_nulls():
    assert token_usage_from_api(
        {"input_tokens": None, "output_tokens": "x", "cache_creation_input_tokens": 7}
    ) == (TokenUsage(0, 0, 0, 7, 0, 0))
    assert token_usage_from_api(None) == TokenUsage()


# ------------------------------------------------------------------------------------------------
# stream_event, rate limits, control lines, tool progress.

MESSAGE_START = {
    "type": "stream_event",
    "session_id": SID,
    "uuid": "u",
    "api_message_id": "msg_9",
    "event": {
        "type": "message_start",
        "message": {
            "id": "msg_9",
            "model": "claude-opus-5-5",
            "usage": {"input_tokens": 5, "output_tokens": 1},
        },
    },
}


def test_stream_events_give_nothing_unless_asked_but_usage_still_counts():
    payloads_, observation = parse(MESSAGE_START)[4:]
    assert (payloads_, counted(observation)) == (
        [],
        ("msg_9", "claude-opus-5-5", usage_counts({"input_tokens": 5, "output_tokens": 1}), False),
    )
    delta = {
        "type": "stream_event",
        "api_message_id": "msg_9",
        "event": {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 31},
        },
    }
    payloads_, observation = parse(delta)[4:]
    assert (payloads_, counted(observation)) == ([], ("msg_9", "", usage_counts({"output_tokens": 31}), True))
    assert payloads(delta, include_partial_messages=True) == [
        PartialDelta(PartialDeltaKind.MESSAGE_DELTA, 0, "", "msg_9", "", "end_turn")
    ]


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "tool_use", "id": "t", "input": {}},
            },
            PartialDelta(PartialDeltaKind.CONTENT_BLOCK_START, 1, "", "m", "tool_use"),
        ),
        (
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello "}},
            PartialDelta(PartialDeltaKind.TEXT_DELTA, 0, "Hello ", "m"),
        ),
        (
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": '{"c'},
            },
            PartialDelta(PartialDeltaKind.INPUT_JSON_DELTA, 1, '{"c', "m"),
        ),
        (
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "thinking_delta", "thinking": "hmm"},
            },
            PartialDelta(PartialDeltaKind.THINKING_DELTA, 0, "hmm", "m"),
        ),
        (
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "signature_delta", "signature": "c2ln"},
            },
            PartialDelta(PartialDeltaKind.SIGNATURE_DELTA, 0, "c2ln", "m"),
        ),
        (
            {"type": "content_block_stop", "index": 1},
            PartialDelta(PartialDeltaKind.CONTENT_BLOCK_STOP, 1, "", "m"),
        ),
        ({"type": "message_stop"}, PartialDelta(PartialDeltaKind.MESSAGE_STOP, 0, "", "m")),
        ({"type": "ping"}, PartialDelta(PartialDeltaKind.OTHER, 0, "", "m")),
    ],
)
def test_stream_event_kinds(event, expected):
    line = {"type": "stream_event", "event": event, "api_message_id": "m"}
    assert payloads(line, include_partial_messages=True) == [expected]


def test_rate_limit_event():
    line = {
        "type": "rate_limit_event",
        "rate_limit_info": {
            "status": "allowed_warning",
            "resetsAt": 1795306531,
            "rateLimitType": "five_hour",
            "utilization": 0.91,
        },
    }
    assert payloads(line) == [RateLimit("allowed_warning", 1795306531, "five_hour", 0.91)]


def test_control_responses_and_requests():
    ok = {
        "type": "control_response",
        "response": {"subtype": "success", "request_id": "req_1", "response": {}},
    }
    err = {
        "type": "control_response",
        "response": {
            "subtype": "error",
            "request_id": "r2",
            "error": "Unsupported",
            "error_code": "unsupported_request",
        },
    }
    assert payloads(ok) == [ControlResponse("req_1", True)]
    assert payloads(err) == [ControlResponse("r2", False, "Unsupported", "unsupported_request")]
    hook = {
        "type": "control_request",
        "request_id": "8a5d",
        "request": {
            "subtype": "hook_callback",
            "callback_id": "hook_0",
            "input": {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_use_id": "toolu_1"},
        },
    }
    (request,) = payloads(hook)
    assert request == ControlRequest("8a5d", "hook_callback", "Bash", "toolu_1")
    assert request.request["callback_id"] == "hook_0"
    ask = {
        "type": "control_request",
        "request_id": "f749",
        "request": {
            "subtype": "can_use_tool",
            "tool_name": "Write",
            "input": {"file_path": "/x"},
            "tool_use_id": "toolu_2",
        },
    }
    assert payloads(ask) == [ControlRequest("f749", "can_use_tool", "Write", "toolu_2")]
    cancel = {"type": "control_cancel_request", "request_id": "f749"}
    assert payloads(cancel) == [ControlRequest("f749", "control_cancel_request", "", "")]


def test_tool_progress():
    line = {
        "type": "tool_progress",
        "tool_use_id": "toolu_1",
        "tool_name": "Bash",
        "elapsed_time_seconds": 12.5,
    }
    assert payloads(line) == [ToolProgress("toolu_1", "Bash", 12.5)]


def _result_line(**extra):
    return {"type": "result", "subtype": "success", "is_error": False, "num_turns": 2, "result": "{}",
            "session_id": "s", **extra}


def test_structured_output_is_kept_as_bounded_compact_json():
    # CLI 2.1.330 with --json-schema (docs/claude-cli-protocol.md §2.5.1).
    (result,) = payloads(_result_line(structured_output={"name": "x", "n": [1, 2]}))
    assert (result.structured_output, result.structured_output_truncated) == ('{"name":"x","n":[1,2]}', False)
    for absent in ({}, {"structured_output": None}):
        (result,) = payloads(_result_line(**absent))
        assert (result.structured_output, result.structured_output_truncated) == ("", False)
    (result,) = payloads(_result_line(structured_output={"big": "x" * (70 * 1024)}))
    assert result.structured_output_truncated and len(result.structured_output.encode()) <= 64 * 1024


def test_a_tool_input_nested_past_every_decoder_is_a_parse_error_not_an_exception():
    """Issue 22 item 2, the model's side: msgspec raised RecursionError out of parse() (which never
    raises) for a tool_use input nested 2,000 levels; the line is now an INVALID_JSON ParseError."""
    deep = '{"a":' * 2000 + "1" + "}" * 2000
    line = ('{"type":"assistant","message":{"id":"m","role":"assistant","model":"x","content":[{"type":"tool_use",'
            '"id":"t1","name":"Bash","input":' + deep + '}]},"session_id":"s","uuid":"u","parent_tool_use_id":null}')
    *_, payloads, _ = StreamParser().parse(line.encode(), 1, 0)
    assert [type(p).__name__ for p in payloads] == ["ParseError"]
