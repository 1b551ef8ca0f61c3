"""The host side of the CLI's stdin control protocol, against a recording fake of the CLI's stdin.

The shapes are compared with what the real CLI accepted in corpus capture localcli-23
(``tests/fixtures/corpus/real/*.stdin.jsonl``; docs/claude-cli-protocol.md §3).
"""

from __future__ import annotations

import asyncio
import gc
import json

import orjson
import pytest
from support.corpus import VENDORED_CORPUS

from helix_runner.errors import ErrorKind, RunnerError
from helix_runner.process.control_protocol import (
    HOLD_TIMEOUT_SECONDS,
    INTERRUPT_CALLBACK,
    PRE_SKILL_SHELL_CALLBACK,
    PRE_TOOL_USE_CALLBACK,
    ControlChannel,
    allow_hook,
    deny_hook,
    edit_hook,
    skill_shell_answer,
    user_line,
)

CAPTURES = VENDORED_CORPUS / "real"


def captured_stdin(name: str) -> list[dict]:
    return [json.loads(line) for line in (CAPTURES / name).read_text().splitlines()]


def shape(value):
    """Key structure and value types, without the values."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value[:1]]
    return type(value).__name__


class FakeStdin:
    """Records the lines written to the CLI; ``accepting=False`` is a CLI whose stdin is closed."""

    def __init__(self, accepting: bool = True):
        self.lines: list[bytes] = []
        self.accepting = accepting

    async def send(self, line: bytes) -> bool:
        if self.accepting:
            self.lines.append(line)
        return self.accepting

    def sent(self) -> list[dict]:
        return [orjson.loads(line) for line in self.lines]


def assert_one_compact_line(line: bytes) -> None:
    # A non-JSON or multi-line write kills the CLI (localcli-22).
    assert b"\n" not in line and line == orjson.dumps(orjson.loads(line))


def test_user_line_matches_what_the_cli_accepted_and_stays_one_line():
    line = user_line('two\nlines, "quotes" and ünïcode')
    assert_one_compact_line(line)
    obj = orjson.loads(line)
    assert obj["message"] == {"role": "user", "content": 'two\nlines, "quotes" and ünïcode'}
    captured = captured_stdin("localcli-23-ctl-hook-breakpoint.stdin.jsonl")[1]
    captured.pop("session_id")  # optional (docs/claude-cli-protocol.md §3.4)
    assert shape(obj) == shape(captured)
    assert orjson.loads(user_line("hi", message_uuid="u-1"))["uuid"] == "u-1"
    assert "uuid" not in orjson.loads(user_line("hi"))


def test_hook_answers_have_the_captured_shapes():
    stdin = captured_stdin("localcli-23-ctl-hook-breakpoint.stdin.jsonl")
    assert allow_hook() == stdin[2]["response"]["response"]
    assert deny_hook("breakpoint: denied by operator") == stdin[3]["response"]["response"]
    edited = edit_hook({"command": "echo safe"})["hookSpecificOutput"]
    assert edited == {
        "hookEventName": "PreToolUse",
        "permissionDecision": "allow",
        "updatedInput": {"command": "echo safe"},
    }


async def test_initialize_registers_one_matcherless_pre_tool_use_hook():
    stdin = FakeStdin()
    channel = ControlChannel(stdin.send)
    request_id, line = channel.initialize_line()
    assert_one_compact_line(line)
    obj = orjson.loads(line)
    assert obj["request_id"] == request_id
    (hook,) = obj["request"]["hooks"]["PreToolUse"]
    # No matcher: it fires before every tool call, pre-allowed and read-only ones included.
    assert hook == {"hookCallbackIds": [PRE_TOOL_USE_CALLBACK], "timeout": HOLD_TIMEOUT_SECONDS}
    # The hook events no tool call stands behind (a skill's shell command, an interrupt) have
    # callbacks of their own (docs/claude-cli-protocol.md §3.9).
    assert obj["request"]["hooks"].pop("PreSkillShellCommand") == [
        {"hookCallbackIds": [PRE_SKILL_SHELL_CALLBACK], "timeout": HOLD_TIMEOUT_SECONDS}]
    assert obj["request"]["hooks"].pop("Interrupt") == [{"hookCallbackIds": [INTERRUPT_CALLBACK]}]
    assert shape(obj) == shape(captured_stdin("localcli-23-ctl-hook-breakpoint.stdin.jsonl")[0])


def test_a_skill_shell_answer_keeps_the_decision_under_its_own_event_name():
    reason = "not here"
    assert skill_shell_answer(deny_hook(reason)) == {"hookSpecificOutput": {
        "hookEventName": "PreSkillShellCommand", "permissionDecision": "deny", "permissionDecisionReason": reason}}
    assert skill_shell_answer(allow_hook()) == {"continue": True}


async def test_request_ids_are_unique_per_channel_and_between_channels():
    first, second = ControlChannel(FakeStdin().send), ControlChannel(FakeStdin().send)
    ids = [first.next_id() for _ in range(3)] + [second.next_id() for _ in range(3)]
    assert len(set(ids)) == 6


async def test_a_request_gets_the_payload_of_its_own_response():
    stdin = FakeStdin()
    channel = ControlChannel(stdin.send)
    task = asyncio.create_task(channel.request("get_context_usage", {"detail": "summary"}))
    await asyncio.sleep(0)
    (sent,) = stdin.sent()
    assert sent["type"] == "control_request" and sent["request"] == {
        "subtype": "get_context_usage",
        "detail": "summary",
    }
    assert_one_compact_line(stdin.lines[0])
    channel.on_response("unknown-id", True, {"other": 1}, "")  # ignored (§3.1)
    channel.on_response(sent["request_id"], True, {"totalTokens": 1234}, "")
    assert await asyncio.wait_for(task, 5) == {"totalTokens": 1234}
    channel.on_response(sent["request_id"], True, {"late": True}, "")  # after the waiter is gone: ignored


async def test_an_error_response_is_failed_precondition_naming_the_request():
    stdin = FakeStdin()
    channel = ControlChannel(stdin.send)
    task = asyncio.create_task(channel.request("rewind_files"))
    await asyncio.sleep(0)
    # As in localcli-21: the CLI answers an unsupported subtype with an error, the session goes on.
    channel.on_response(stdin.sent()[0]["request_id"], False, {}, "Unsupported control request subtype")
    with pytest.raises(RunnerError) as caught:
        await asyncio.wait_for(task, 5)
    assert caught.value.kind is ErrorKind.FAILED_PRECONDITION
    assert "rewind_files" in caught.value.message and "Unsupported" in caught.value.message


async def test_a_closed_stdin_fails_at_once():
    channel = ControlChannel(FakeStdin(accepting=False).send)
    with pytest.raises(RunnerError) as caught:
        await channel.request("interrupt")
    assert (caught.value.kind, caught.value.reason) == (ErrorKind.FAILED_PRECONDITION, "PHASE_NOT_RUNNING")


async def test_an_unanswered_request_times_out_as_unavailable_and_is_forgotten():
    stdin = FakeStdin()
    channel = ControlChannel(stdin.send)
    with pytest.raises(RunnerError) as caught:
        await channel.request("interrupt", wait_s=0.01)
    assert caught.value.kind is ErrorKind.UNAVAILABLE and "did not answer interrupt" in caught.value.message
    channel.on_response(stdin.sent()[0]["request_id"], True, {}, "")  # a late answer is harmless


async def test_fail_all_wakes_every_waiter_when_the_process_is_gone():
    channel = ControlChannel(FakeStdin().send)
    tasks = [asyncio.create_task(channel.request(s, wait_s=30)) for s in ("interrupt", "get_context_usage")]
    await asyncio.sleep(0)
    channel.fail_all("the CLI exited")
    for task, subtype in zip(tasks, ("interrupt", "get_context_usage"), strict=True):
        with pytest.raises(RunnerError, match=f"{subtype}: the CLI exited"):
            await asyncio.wait_for(task, 5)


async def test_answers_use_the_success_and_error_envelopes():
    stdin = FakeStdin()
    channel = ControlChannel(stdin.send)
    assert await channel.answer("cli-req-1", allow_hook())
    assert await channel.answer_error("cli-req-2", "no such callback")
    success, error = stdin.sent()
    captured = captured_stdin("localcli-23-ctl-hook-breakpoint.stdin.jsonl")[2]
    assert success == {**captured, "response": {**captured["response"], "request_id": "cli-req-1"}}
    assert error == {
        "type": "control_response",
        "response": {"subtype": "error", "request_id": "cli-req-2", "error": "no such callback"},
    }
    assert not await ControlChannel(FakeStdin(accepting=False).send).answer("x", allow_hook())


@pytest.mark.parametrize("ending", ["process gone", "refused"])
async def test_an_initialize_nobody_awaits_leaves_no_unretrieved_error(ending):
    """The initialize answer is not awaited; a CLI that exits (or refuses) must not make the loop
    log 'Future exception was never retrieved' (seen for every fake-CLI phase in CI)."""
    loop = asyncio.get_running_loop()
    reported: list[dict] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        channel = ControlChannel(FakeStdin().send)
        request_id, _ = channel.initialize_line()
        if ending == "refused":
            channel.on_response(request_id, False, {}, "no")
        channel.fail_all("the attempt ended")
        del channel
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(previous)
    assert [c["message"] for c in reported] == []
