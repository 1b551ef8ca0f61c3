"""Proof that the real Claude Code CLI runs end to end against the scripted Messages API.

Each test starts the stand-in with a script, runs ``claude -p ... --output-format stream-json --verbose``
in a private HOME and working dir, and checks both what the CLI printed and what it did (files on
disk, tool results sent back to the "model"). The error tests pin down what CLI 2.1.330 emits for
each HTTP error class; the corpus captures localcli-10..13 and -28 show the same shapes.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
from support.cli_run import CliRun, CliTimeoutError
from support.sandbox import ClaudeSandbox
from support.scripted_servers import ScriptedApiFactory

from helix_runner.offline import (
    ApiError,
    Reply,
    RequestMatcher,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    Usage,
)

pytestmark = pytest.mark.real_cli


def assert_clean_exit(run: CliRun) -> dict[str, Any]:
    """rc 0 and a successful final result; returns that result."""
    assert run.returncode == 0, run.describe()
    result = run.result
    assert (result["subtype"], result["is_error"]) == ("success", False), run.describe()
    return result


def test_bash_and_write_tools_run_in_the_working_dir(
    claude_sandbox: ClaudeSandbox, scripted_api: ScriptedApiFactory
) -> None:
    notes = claude_sandbox.workdir / "notes.md"
    api = scripted_api(
        [
            Reply.tool_use(
                "Bash",
                {"command": "echo hello > out.txt && cat out.txt", "description": "Write out.txt"},
                text="I'll create the files.",
            ),
            Reply.tool_use("Write", {"file_path": str(notes), "content": "# Notes\nwritten by Write\n"}),
            Reply.text("Both files are written.", usage=Usage(input_tokens=120, output_tokens=7)),
        ]
    )

    run = claude_sandbox.run(api, "Create out.txt and notes.md")

    result = assert_clean_exit(run)
    init = run.lines[0]
    assert (init["type"], init["subtype"]) == ("system", "init"), run.describe()
    assert os.path.realpath(init["cwd"]) == os.path.realpath(claude_sandbox.workdir)
    assert {"Bash", "Write"} <= set(init["tools"])
    assert init["apiKeySource"] == "ANTHROPIC_API_KEY"

    bash, write = run.tool_uses()
    assert (bash["name"], write["name"]) == ("Bash", "Write")
    assert bash["input"]["command"] == "echo hello > out.txt && cat out.txt"
    bash_result, write_result = run.tool_results()
    assert bash_result["tool_use_id"] == bash["id"]
    assert bash_result["content"] == "hello"
    assert bash_result.get("is_error") is False
    assert write_result["tool_use_id"] == write["id"]
    assert "File created successfully" in write_result["content"]
    assert not write_result.get("is_error")

    assert result["result"] == "Both files are written."
    assert result["num_turns"] == 3
    assert result["usage"]["input_tokens"] == 100 + 100 + 120
    assert result["total_cost_usd"] > 0

    assert (claude_sandbox.workdir / "out.txt").read_text() == "hello\n"
    assert notes.read_text() == "# Notes\nwritten by Write\n"

    # The model saw the real tool output in the follow-up requests.
    requests = api.message_requests()
    assert len(requests) == 3 and not api.fallback_requests()
    assert requests[1].tool_result_text(bash["id"]) == "hello"
    assert "File created successfully" in requests[2].tool_result_text(write["id"])
    # The CLI's state went to the private HOME: the session transcript is there.
    transcripts = list((claude_sandbox.home / ".claude" / "projects").glob(f"*/{result['session_id']}.jsonl"))
    assert len(transcripts) == 1


# status, scripted error count, CLAUDE_CODE_MAX_RETRIES, api_retry "error", assistant "error" field
ERROR_CASES = [
    # A 400 is never retried with backoff, but the CLI re-sends it up to 5 more times with fewer
    # beta features (first request: all betas; later ones drop thinking/tool-search betas).
    pytest.param(400, 10, 1, None, "unknown", id="400-invalid-request"),
    # 401 is retried like a server error (corpus localcli-13: 10 retries, backoff up to ~40 s by default).
    pytest.param(401, 10, 1, "authentication_failed", "authentication_failed", id="401-auth"),
    pytest.param(500, 10, 1, "server_error", "server_error", id="500-server-error"),
    pytest.param(529, 10, 1, "overloaded", "server_error", id="529-overloaded"),
    pytest.param(429, 10, 1, "rate_limit", "rate_limit", id="429-rate-limit-exhausted"),
]


@pytest.mark.parametrize(("status", "times", "max_retries", "retry_error", "assistant_error"), ERROR_CASES)
def test_api_error_ends_the_run_with_an_error_result(
    claude_sandbox: ClaudeSandbox,
    scripted_api: ScriptedApiFactory,
    status: int,
    times: int,
    max_retries: int,
    retry_error: str | None,
    assistant_error: str,
) -> None:
    api = scripted_api([ApiError(status, times=times)])

    run = claude_sandbox.run(api, "Say hi", max_retries=max_retries)

    assert run.returncode == 1, run.describe()
    retries = run.of_type("system", "api_retry")
    if retry_error is None:
        assert retries == []
        requests = api.message_requests()
        assert len(requests) > 1
        assert len(requests[-1].headers["anthropic-beta"]) < len(requests[0].headers["anthropic-beta"])
    else:
        assert [(r["attempt"], r["max_retries"]) for r in retries] == [(1, max_retries)]
        assert retries[0]["error_status"] == status
        assert retries[0]["error"] == retry_error
        assert retries[0]["retry_delay_ms"] >= 500  # backoff base; no env knob shortens it
        assert len(api.message_requests()) == max_retries + 1

    [synthetic] = run.of_type("assistant")
    assert synthetic["message"]["model"] == "<synthetic>"
    assert synthetic["is_api_error_message"] is True
    assert synthetic["api_error_status"] == status
    assert synthetic["error"] == assistant_error

    result = run.result
    assert (result["subtype"], result["is_error"]) == ("success", True)  # "success" with is_error!
    assert result["api_error_status"] == status
    assert result["terminal_reason"] == "api_error"
    assert result["result"] == synthetic["message"]["content"][0]["text"]
    assert {r.status for r in api.requests} == {status}


def test_429_twice_then_success(claude_sandbox: ClaudeSandbox, scripted_api: ScriptedApiFactory) -> None:
    api = scripted_api([ApiError(429, times=2), Reply.text("Recovered after rate limiting.")])

    run = claude_sandbox.run(api, "Say hi", max_retries=2)

    result = assert_clean_exit(run)
    retries = run.of_type("system", "api_retry")
    assert [(r["attempt"], r["error_status"], r["error"]) for r in retries] == [
        (1, 429, "rate_limit"),
        (2, 429, "rate_limit"),
    ]
    assert result["result"] == "Recovered after rate limiting."
    assert [r.status for r in api.requests] == [429, 429, 200]


def test_should_retry_false_fails_fast_without_retries(
    claude_sandbox: ClaudeSandbox, scripted_api: ScriptedApiFactory
) -> None:
    """``x-should-retry: false`` is the one way to make a retryable status fail at once."""
    api = scripted_api([ApiError(500, should_retry=False, times=5)])

    run = claude_sandbox.run(api, "Say hi", max_retries=5)

    assert run.returncode == 1, run.describe()
    assert run.of_type("system", "api_retry") == []
    assert run.result["api_error_status"] == 500
    assert len(api.message_requests()) == 1


async def test_thinking_block_and_cache_usage(
    claude_sandbox: ClaudeSandbox, scripted_api: ScriptedApiFactory
) -> None:
    api = scripted_api(
        [
            Reply(
                content=[
                    ThinkingBlock("Let me think about this.", signature="sig-abc"),
                    TextBlock("The answer is 42."),
                ],
                usage=Usage(
                    input_tokens=100,
                    output_tokens=50,
                    cache_creation_input_tokens=40,
                    cache_read_input_tokens=900,
                ),
            )
        ]
    )

    run = await claude_sandbox.run_async(api, "What is the answer?")

    result = assert_clean_exit(run)
    assistant = run.of_type("assistant")
    assert [line["message"]["content"][0]["type"] for line in assistant] == ["thinking", "text"]
    assert assistant[0]["message"]["content"][0] == {
        "type": "thinking",
        "thinking": "Let me think about this.",
        "signature": "sig-abc",
    }
    assert len({line["message"]["id"] for line in assistant}) == 1  # one API message, one line per block
    assert result["result"] == "The answer is 42."
    assert result["usage"]["cache_read_input_tokens"] == 900
    assert result["usage"]["cache_creation_input_tokens"] == 40
    assert result["usage"]["output_tokens"] == 50


def test_max_tokens_makes_the_cli_ask_for_a_continuation(
    claude_sandbox: ClaudeSandbox, scripted_api: ScriptedApiFactory
) -> None:
    api = scripted_api([Reply.text("The first half", stop_reason="max_tokens"), Reply.text("and the rest.")])

    run = claude_sandbox.run(api, "Write a long answer")

    result = assert_clean_exit(run)
    assert result["result"] == "and the rest."
    assert "Output token limit hit" in api.message_requests()[1].text()


def test_subagent_requests_are_routed_by_matcher(
    claude_sandbox: ClaudeSandbox, scripted_api: ScriptedApiFactory
) -> None:
    (claude_sandbox.workdir / "notes.txt").write_text("x\n")
    main = RequestMatcher(first_user_contains="MAIN-PROMPT")
    sub = RequestMatcher(first_user_contains="[[subagent]]")
    api = scripted_api(
        [
            Reply(
                content=[
                    TextBlock("Delegating."),
                    ToolUseBlock(
                        "Agent",
                        {
                            "description": "Count files",
                            "subagent_type": "general-purpose",
                            "prompt": "[[subagent]] Count the .txt files.",
                        },
                    ),
                ],
                match=main,
                label="main: spawn",
            ),
            Reply.tool_use(
                "Bash", {"command": "ls *.txt", "description": "List txt files"}, match=sub, label="sub: ls"
            ),
            Reply.text("There is 1 .txt file.", match=sub, label="sub: report"),
            # The main thread asks once after the launch and once more after the task notification.
            Reply.text("The subagent reported back.", match=main, label="main: wrap up", times=3),
        ]
    )

    run = claude_sandbox.run(api, "MAIN-PROMPT please delegate")

    assert run.returncode == 0, run.describe()
    [agent_call] = run.tool_uses("Agent")
    [started] = run.of_type("system", "task_started")
    assert started["tool_use_id"] == agent_call["id"]
    sub_lines = [line for line in run.lines if line.get("parent_tool_use_id") == agent_call["id"]]
    sub_tool_results = [
        block for line in sub_lines if line["type"] == "user" for block in line["message"]["content"]
    ]
    assert any(block.get("content") == "notes.txt" for block in sub_tool_results), run.describe()
    notification = run.of_type("system", "task_notification")
    assert notification and notification[-1]["status"] == "completed"
    assert run.result["is_error"] is False

    labels = [r.label for r in api.message_requests()]
    assert labels.count("sub: ls") == labels.count("sub: report") == 1
    assert labels[0] == "main: spawn"
    assert not api.fallback_requests()
    sub_report = next(r for r in api.message_requests() if r.label == "sub: report")
    assert sub_report.tool_result_text() == "notes.txt"


STUCK_DEADLINE = 8.0


def test_a_stuck_cli_is_killed_at_the_deadline(
    claude_sandbox: ClaudeSandbox, scripted_api: ScriptedApiFactory
) -> None:
    """A reply that stalls mid-stream leaves the CLI waiting; the harness kills it and keeps its output."""
    api = scripted_api([Reply.text("this reply never finishes", chunk_delay=60)])

    started = time.monotonic()
    with pytest.raises(CliTimeoutError) as info:
        # The deadline leaves room for a cold first start of the CLI on a fresh machine (CI).
        claude_sandbox.run(api, "Say hi", timeout=STUCK_DEADLINE)

    assert time.monotonic() - started < STUCK_DEADLINE + 5
    partial = info.value.run
    assert partial.timed_out and partial.returncode is not None and partial.returncode < 0
    assert partial.lines and partial.lines[0]["subtype"] == "init"
    assert partial.results == []
    assert len(api.message_requests()) == 1


async def test_a_stuck_cli_is_killed_at_the_deadline_async(
    claude_sandbox: ClaudeSandbox, scripted_api: ScriptedApiFactory
) -> None:
    api = scripted_api([Reply.text("this reply never finishes", chunk_delay=60)])

    started = time.monotonic()
    run = await claude_sandbox.run_async(api, "Say hi", timeout=STUCK_DEADLINE, check_timeout=False)

    assert time.monotonic() - started < STUCK_DEADLINE + 5
    assert run.timed_out and run.returncode is not None and run.returncode < 0
    assert run.lines and run.lines[0]["subtype"] == "init"
    assert run.results == []
