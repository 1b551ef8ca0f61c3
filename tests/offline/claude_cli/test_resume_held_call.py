"""What ``--resume`` does with a transcript whose last call was held by the PreToolUse hook (issue 24).

A hand-over stops the CLI while a call waits for its hook answer (a breakpoint), then another replica
resumes the session. These tests record what the real CLI does then; docs/claude-cli-protocol.md §3.7.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from support.sandbox import ClaudeSandbox

from helix_runner.domain.phase_spec import PhaseSpec
from helix_runner.domain.retry_policy import DEFAULT_CONTINUATION_PROMPT
from helix_runner.offline import Reply, ScriptedApi
from helix_runner.process.claude_command import build_argv, prompt_line
from helix_runner.process.control_protocol import allow_hook

pytestmark = pytest.mark.real_cli

PROMPT = "Append to ran.txt, then say done"


class Cli:
    """One CLI process driven the way the runner drives it: initialize (PreToolUse hook), then the prompt."""

    def __init__(self, sandbox: ClaudeSandbox, api: ScriptedApi, prompt: str, resume: str | None = None):
        spec = PhaseSpec.create(
            job_id="job", phase_id="phase", project_id="", prompt=prompt,
            working_dir=str(sandbox.workdir), allowed_tools=("Bash",), resume_session_id=resume,
        )
        self.proc = subprocess.Popen(
            build_argv(str(sandbox.binary), spec),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=sandbox.env(api, max_retries=0), cwd=sandbox.workdir, start_new_session=True,
        )
        self.lines: list[dict[str, Any]] = []
        self._buffer = b""
        hooks = {"PreToolUse": [{"hookCallbackIds": ["hook_0"], "timeout": 3600}]}
        self.write({"type": "control_request", "request_id": "req_init",
                    "request": {"subtype": "initialize", "hooks": hooks}})
        assert self.proc.stdin is not None
        self.proc.stdin.write(prompt_line(prompt) + b"\n")
        self.proc.stdin.flush()

    def write(self, obj: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(obj).encode() + b"\n")
        self.proc.stdin.flush()

    def next_line(self, deadline: float) -> dict[str, Any] | None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no line within the deadline; last lines: {self.lines[-5:]}")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        obj = json.loads(line)
        self.lines.append(obj)
        return obj

    def until_hook(self, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while (line := self.next_line(deadline)) is not None:
            request = line.get("request", {})
            if line.get("type") == "control_request" and request.get("subtype") == "hook_callback":
                return line
        raise AssertionError(f"the CLI ended before asking the hook: {self.lines[-5:]}")

    def kill(self, sig: int) -> int:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)
        try:
            return self.proc.wait(timeout=15)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content or [])


def test_resume_after_a_held_call_closes_it_as_interrupted_and_never_asks_the_hook_again(
    claude_sandbox: ClaudeSandbox, scripted_api
) -> None:
    ran = claude_sandbox.workdir / "ran.txt"
    first_api = scripted_api(
        [Reply.tool_use("Bash", {"command": f"echo once >> {ran}", "description": "Append"}), Reply.text("unused")]
    )
    first = Cli(claude_sandbox, first_api, PROMPT)
    held = first.until_hook()
    tool_use_id = held["request"]["tool_use_id"]
    transcript = Path(held["request"]["input"]["transcript_path"])
    session = held["request"]["input"]["session_id"]
    first.kill(signal.SIGTERM)  # the hand-over stops the CLI while the hook is unanswered
    assert not ran.exists()
    recorded = [json.loads(line) for line in transcript.read_text().splitlines() if line.strip()]
    uses = [b for r in recorded if r.get("type") == "assistant" for b in _blocks(r.get("message", {}))
            if b.get("type") == "tool_use"]
    # SIGTERM flushes the transcript: the held call is its last conversation line, without a result.
    uses = [b for r in recorded if r.get("type") == "assistant" for b in _blocks(r.get("message", {}))
            if b.get("type") == "tool_use"]
    assert [b["id"] for b in uses] == [tool_use_id]
    assert not any(b.get("type") == "tool_result" for r in recorded for b in _blocks(r.get("message", {})))

    second_api = scripted_api([Reply.text("Resumed.")])
    second = Cli(claude_sandbox, second_api, DEFAULT_CONTINUATION_PROMPT, resume=session)
    deadline = time.monotonic() + 60
    hooks: list[dict[str, Any]] = []
    while (line := second.next_line(deadline)) is not None:
        if line.get("type") == "control_request" and line["request"].get("subtype") == "hook_callback":
            hooks.append(line["request"])
            second.write({"type": "control_response", "response": {
                "subtype": "success", "request_id": line["request_id"], "response": allow_hook()}})
        if line.get("type") == "result":
            break
    second.proc.stdin.close()  # type: ignore[union-attr]
    second.kill(signal.SIGTERM)
    assert hooks == []  # the resumed CLI never asks the hook about the held call again
    assert not ran.exists()  # ... and never runs it
    (request,) = second_api.message_requests()
    results = [b for m in request.messages for b in _blocks(m) if b.get("type") == "tool_result"]
    # It closes the call itself with an error result saying its outcome is unknown, and asks the
    # model what next: a call held before the move is not held again under its id.
    assert [(r["tool_use_id"], r.get("is_error")) for r in results] == [(tool_use_id, True)]
    assert "Tool call interrupted" in _text(results[0])
    assert second.lines[-1]["is_error"] is False


def test_a_held_call_reissued_after_resume_reaches_the_hook_under_a_new_id(
    claude_sandbox: ClaudeSandbox, scripted_api
) -> None:
    """A model that re-issues the interrupted call: the hook is asked again, for a new ``tool_use_id``
    with the same name and input, which is how the adopting replica recognises the held call."""
    ran = claude_sandbox.workdir / "ran.txt"
    call = {"command": f"echo once >> {ran}", "description": "Append"}
    first_api = scripted_api([Reply.tool_use("Bash", call), Reply.text("unused")])
    first = Cli(claude_sandbox, first_api, PROMPT)
    held = first.until_hook()["request"]
    first.kill(signal.SIGTERM)
    second_api = scripted_api([Reply.tool_use("Bash", call, tool_use_id="toolu_reissued"), Reply.text("done")])
    second = Cli(claude_sandbox, second_api, DEFAULT_CONTINUATION_PROMPT, resume=held["input"]["session_id"])
    again = second.until_hook()["request"]
    # The first id is the scripted API's own (unique per API instance), the second the re-issue's.
    assert held["tool_use_id"].startswith("toolu_scripted") and again["tool_use_id"] == "toolu_reissued"
    assert (again["input"]["tool_name"], again["input"]["tool_input"]) == (
        held["input"]["tool_name"], held["input"]["tool_input"])
    second.write({"type": "control_response", "response": {
        "subtype": "success", "request_id": "x", "response": allow_hook()}})
    second.kill(signal.SIGTERM)
    assert not ran.exists()
