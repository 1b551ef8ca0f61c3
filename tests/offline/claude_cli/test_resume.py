"""What a retry by ``--resume`` does with the real CLI: the facts docs/retries-and-admission.md builds on.

Each test runs a first attempt the way the runner does (``build_argv`` + the prompt as a stream-json
stdin line), makes it fail, then runs a second attempt with ``--resume <session id>`` and a
continuation prompt, and checks what the CLI sent the (scripted) Messages API and what it reported.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from support.cli_run import CliRun, run_cli
from support.sandbox import ClaudeSandbox

from helix_runner.domain.attempt_cost import carried_usage, own_cost
from helix_runner.domain.events import TurnResult
from helix_runner.domain.phase_spec import PhaseSpec
from helix_runner.domain.phase_stream import PhaseStream
from helix_runner.domain.pricing import PriceTable
from helix_runner.domain.retry_policy import DEFAULT_CONTINUATION_PROMPT
from helix_runner.offline import ApiError, Reply, ScriptedApi, Usage
from helix_runner.process.claude_command import build_argv, prompt_line

pytestmark = pytest.mark.real_cli

PROMPT = "Write a.txt, then say done"


def attempt_argv(sandbox: ClaudeSandbox, **spec: Any) -> list[str]:
    """The runner's command line for one attempt (tools pre-allowed, so nothing asks permission)."""
    phase = PhaseSpec.create(
        job_id="job",
        phase_id="phase",
        project_id="",
        prompt=PROMPT,
        working_dir=str(sandbox.workdir),
        allowed_tools=("Bash",),
        **spec,
    )
    return build_argv(str(sandbox.binary), phase)


def run_attempt(sandbox: ClaudeSandbox, api: ScriptedApi, prompt: str, **spec: Any) -> CliRun:
    return run_cli(
        attempt_argv(sandbox, **spec),
        env=sandbox.env(api, max_retries=0),
        cwd=sandbox.workdir,
        timeout=60,
        stdin_text=prompt_line(prompt).decode() + "\n",
    )


def own_reported_cost(run: CliRun) -> tuple[float | None, float | None]:
    """(what the CLI reported, that minus what it carried in), through the runner's domain code."""
    prices = PriceTable(use_genai_prices=False)
    stream = PhaseStream(price_table=prices)
    events = stream.feed(b"".join(orjson.dumps(line) + b"\n" for line in run.lines)) + stream.finish()
    first = next(e.payload for e in events if isinstance(e.payload, TurnResult))
    return stream.cost.reported_usd, own_cost(stream.cost, carried_usage(first), prices).reported_usd


def test_resume_continues_the_failed_attempts_conversation_and_carries_its_cost(
    claude_sandbox: ClaudeSandbox, scripted_api
) -> None:
    first_api = scripted_api(
        [
            Reply.tool_use(
                "Bash",
                {"command": "echo first-attempt > a.txt && cat a.txt", "description": "Write a.txt"},
                text="Writing a.txt.",
                usage=Usage(input_tokens=1000, output_tokens=50),
            ),
            ApiError(529, times=3),
        ]
    )
    first = run_attempt(claude_sandbox, first_api, PROMPT)
    assert first.returncode == 1 and first.result["api_error_status"] == 529, first.describe()
    session = first.result["session_id"]
    (tool_use,) = first.tool_uses("Bash")
    assert (claude_sandbox.workdir / "a.txt").read_text() == "first-attempt\n"

    second_api = scripted_api(
        [Reply.text("a.txt is written; done.", usage=Usage(input_tokens=1200, output_tokens=20))]
    )
    second = run_attempt(claude_sandbox, second_api, DEFAULT_CONTINUATION_PROMPT, resume_session_id=session)

    assert second.returncode == 0 and second.result["is_error"] is False, second.describe()
    init = second.of_type("system", "init")[0]
    assert init["session_id"] == session == second.result["session_id"]  # resumed, not forked
    (request,) = second_api.message_requests()
    history = request.messages
    user_texts = [_text(m) for m in history if m["role"] == "user"]
    assert PROMPT in user_texts[0]
    tool_uses = [
        b for m in history if m["role"] == "assistant" for b in _blocks(m) if b.get("type") == "tool_use"
    ]
    assert [b["id"] for b in tool_uses] == [tool_use["id"]]  # the first attempt's call, with its result:
    results = [b for m in history for b in _blocks(m) if b.get("type") == "tool_result"]
    assert [(r["tool_use_id"], _text(r)) for r in results] == [(tool_use["id"], "first-attempt")]
    assert DEFAULT_CONTINUATION_PROMPT in _text(history[-1])
    assistant_texts = [_text(m) for m in history if m["role"] == "assistant"]
    assert not any("529" in text for text in assistant_texts), "the synthetic API-error message is replayed"

    # The resumed CLI restored the first process's totals: its running total includes them ...
    reported, own = own_reported_cost(second)
    assert reported == pytest.approx(first.result["total_cost_usd"] + own)
    # ... and the domain rule takes them out again, so the phase's sum counts them once.
    assert own == pytest.approx(second.result["model_usage_since_last_result"][init["model"]]["costUSD"])


def _pid_in(marker: Path) -> int | None:
    """The pid a tool's shell wrote into ``marker`` (``echo $$``), once it is all there."""
    text = marker.read_text() if marker.exists() else ""
    return int(text) if text.endswith("\n") and text.strip().isdigit() else None


def _transcript_has_the_call(home: Path) -> bool:
    """Whether the CLI's session transcript holds the slow call already."""
    for path in (home / ".claude" / "projects").rglob("*.jsonl"):
        with contextlib.suppress(OSError):
            if b'"tool_use"' in path.read_bytes():
                return True
    return False


def test_resume_after_a_crash_keeps_the_interrupted_call_and_carries_no_cost(
    claude_sandbox: ClaudeSandbox, scripted_api
) -> None:
    marker = claude_sandbox.workdir / "started.txt"
    first_api = scripted_api(
        [
            Reply.tool_use(
                "Bash",
                {"command": f"echo $$ > {marker} && sleep 60", "description": "A slow step"},
                usage=Usage(input_tokens=900, output_tokens=40),
            ),
            Reply.text("never reached"),
        ]
    )
    proc = subprocess.Popen(
        attempt_argv(claude_sandbox),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=claude_sandbox.env(first_api, max_retries=0),
        cwd=claude_sandbox.workdir,
        start_new_session=True,
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write(prompt_line(PROMPT) + b"\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 60
        # Until the shell wrote its whole pid: the file exists a moment before it holds it.
        while not _pid_in(marker) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert _pid_in(marker), "the slow tool call never started"
        # The CLI appends the call to its session transcript (~/.claude/projects) on its own schedule:
        # a crash before that leaves nothing to resume (CI saw "No conversation found" under load).
        while not _transcript_has_the_call(claude_sandbox.home) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _transcript_has_the_call(claude_sandbox.home), "the CLI never wrote the call to its transcript"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # a crash: no chance to write a result or save state
        stdout, _ = proc.communicate(timeout=30)
        # The CLI runs each Bash command in a session of its own, so killing its group leaves the
        # tool running (a server phase's containment would end it; this test runs the CLI bare).
        if tool := _pid_in(marker):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(os.getpgid(tool), signal.SIGKILL)
    first = CliRun.from_output([], proc.returncode, stdout, b"", 0.0, False)
    assert first.results == []
    session = first.of_type("system", "init")[0]["session_id"]
    (tool_use,) = first.tool_uses("Bash")

    second_api = scripted_api([Reply.text("Resumed after the crash.")])
    second = run_attempt(claude_sandbox, second_api, DEFAULT_CONTINUATION_PROMPT, resume_session_id=session)
    assert second.returncode == 0 and second.result["session_id"] == session, second.describe()
    history = second_api.message_requests()[0].messages
    results = [b for m in history for b in _blocks(m) if b.get("type") == "tool_result"]
    assert [r["tool_use_id"] for r in results] == [tool_use["id"]]
    assert "interrupted" in _text(results[0]).lower()  # the CLI closes the dangling call itself
    reported, own = own_reported_cost(second)
    assert reported == own  # nothing was carried over from the killed process


def test_a_resumed_attempts_budget_counts_only_its_own_spending(
    claude_sandbox: ClaudeSandbox, scripted_api
) -> None:
    api = scripted_api(
        [
            Reply.text("one", usage=Usage(input_tokens=1000, output_tokens=50)),
            Reply.tool_use(
                "Bash",
                {"command": "true", "description": "x"},
                usage=Usage(input_tokens=1200, output_tokens=20),
            ),
            Reply.text("two", usage=Usage(input_tokens=1200, output_tokens=20)),
        ]
    )
    first = run_attempt(claude_sandbox, api, PROMPT)
    carried = first.result["total_cost_usd"]
    assert first.returncode == 0 and carried > 0, first.describe()
    # One request of the resumed attempt costs a little more than the first attempt ($0.0052 vs
    # $0.005 at the CLI's prices), so 1.2 x that lies between one request and one request plus the
    # restored cost. A check that counted the restored cost would stop after the resumed attempt's
    # first request; the CLI makes a second one, then stops for the budget.
    budget = 1.2 * carried
    second = run_attempt(
        claude_sandbox, api, "go on", resume_session_id=first.result["session_id"], max_budget_usd=budget
    )
    assert second.result["subtype"] == "error_max_budget_usd", second.describe()
    assert len(api.message_requests()) == 1 + 2, second.describe()


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content or [])
