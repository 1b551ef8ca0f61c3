"""`helix-runner run` for newcomers: one line for Ctrl-C and bad flags, a progress line that fits."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from helix_runner_client import pb
from support.processes import serve_env, serving_port, start_serve

from helix_runner.cli.render import PhaseModel
from helix_runner.cli.run import progress_line
from helix_runner.offline import Reply, Script, Usage


def _event(seq: int, **payload) -> pb.StreamEvent:
    return pb.StreamEvent(
        sequence=seq, receive_time=datetime(2026, 1, 1, tzinfo=UTC), job_id="j", phase_id="p", **payload
    )


def _busy_view() -> PhaseModel:
    view = PhaseModel()
    events = [
        _event(
            1,
            tool_call_started=pb.ToolCallStarted(
                tool_use_id="t1", name="mcp__filesystem__read_multiple_files", input_json="{}"
            ),
        ),
        _event(
            2,
            tool_call_finished=pb.ToolCallFinished(
                tool_use_id="t1",
                name="mcp__filesystem__read_multiple_files",
                is_error=True,
                duration=timedelta(seconds=2),
            ),
        ),
        _event(
            3,
            cost_update=pb.CostUpdate(
                cost=pb.PhaseCost(
                    computed_usd=12.3456,
                    reported_usd=12.5,
                    tokens=pb.TokenUsage(
                        input_tokens=1_234_567, output_tokens=98_765, cache_read_input_tokens=5_000_000
                    ),
                )
            ),
        ),
        _event(
            4,
            tool_call_started=pb.ToolCallStarted(
                tool_use_id="t2", name="mcp__github__create_pull_request_review", input_json="{}"
            ),
        ),
        _event(
            5,
            api_retry=pb.ApiRetry(
                attempt=3,
                max_retries=10,
                error="rate_limit",
                error_status=429,
                retry_delay=timedelta(seconds=4),
            ),
        ),
    ]
    for event in events:
        view.apply(event)
    return view


@pytest.mark.parametrize("width", [40, 80, 120])
def test_the_progress_line_never_wraps(width):
    line = progress_line(_busy_view(), 3725.0, width)
    assert len(line) <= width - 1


def test_the_progress_line_shows_a_retry_while_the_cli_retries_and_counts_them_after():
    view = _busy_view()
    assert "retry 3/10 429 rate_limit" in progress_line(view, 12.0, 200)
    view.apply(_event(6, assistant_text=pb.AssistantText(text="back")))
    line = progress_line(view, 13.0, 200)
    assert "retry 3/10" not in line and line.endswith("| 1 retry")


def test_a_missing_token_file_is_one_line(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "helix_runner",
            "run",
            "--server",
            "127.0.0.1:9",
            "--workdir",
            str(tmp_path),
            "--prompt",
            "go",
            "--token-file",
            str(tmp_path / "missing-token"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=serve_env(tmp_path),
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"helix-runner: error: cannot read the token file {tmp_path / 'missing-token'}: No such file or directory"
    ]


def test_an_unreachable_server_is_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "helix_runner", "jobs", "--server", "127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=60,
        env=serve_env(tmp_path),
    )
    assert result.returncode == 3
    assert result.stderr.splitlines() == [
        "helix-runner: error: cannot reach the server at 127.0.0.1:9: connection refused"
    ]


def _default_sigint() -> None:
    """Ctrl-C as a terminal delivers it: a command started in the background of a non-interactive
    shell (a CI runner's `cmd &`) inherits SIGINT *ignored*, and Python then never raises
    KeyboardInterrupt; the children here get the default disposition, as from a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class _Lines:
    """A child's stdout read line by line in a thread, with bounded waits."""

    def __init__(self, stream):
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream) -> None:
        for line in stream:
            self._queue.put(line)
        self._queue.put(None)

    def wait_for(self, needle: str, limit: float = 60.0) -> str:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            self.lines.append(line)
            if needle in line:
                return line
        raise AssertionError(f"{needle!r} never appeared; output so far:\n{''.join(self.lines)}")


LONG = "python3 -c 'import time; time.sleep(60)'"


@pytest.mark.real_cli
def test_ctrl_c_cancels_the_phase_and_says_so(claude_binary, tmp_path):
    script = tmp_path / "script.json"
    # Not `sleep 60`: the CLI's Bash tool refuses long plain sleeps at once.
    Script([Reply.tool_use("Bash", {"command": LONG}), Reply.text("never")]).save(script)
    work = tmp_path / "work"
    work.mkdir()
    log = tmp_path / "serve.log"
    server = start_serve(tmp_path, log, "--offline-script", str(script))
    try:
        address = f"127.0.0.1:{serving_port(log, server)}"
        run = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "helix_runner",
                "run",
                "--server",
                address,
                "--workdir",
                str(work),
                "--prompt",
                "go",
                "--allowed-tool",
                "Bash",
                "--job-id",
                "ctrl-c",
                "--phase-id",
                "p1",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=serve_env(tmp_path),
            start_new_session=True,
            preexec_fn=_default_sigint,
        )
        try:
            _Lines(run.stdout).wait_for(f'→ Bash  {{"command":"{LONG}"}}')
            watch = subprocess.Popen(
                [sys.executable, "-m", "helix_runner", "watch", "ctrl-c", "p1", "--server", address],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**serve_env(tmp_path), "PYTHONFAULTHANDLER": "1"},
                preexec_fn=_default_sigint,
            )
            try:
                _Lines(watch.stdout).wait_for(f'→ Bash  {{"command":"{LONG}"}}')
                watch.send_signal(signal.SIGINT)
                try:
                    watch.wait(timeout=30)
                except subprocess.TimeoutExpired:  # say where it hangs: faulthandler dumps every thread
                    watch.send_signal(signal.SIGABRT)
                    watch.wait(10)
                    raise AssertionError("watch ignored Ctrl-C; its stacks:\n" + watch.stderr.read()) from None
                assert watch.returncode == 130
                assert watch.stderr.read().splitlines() == [
                    "helix-runner: stopped watching (the phase goes on)"
                ]
            finally:
                if watch.poll() is None:
                    watch.kill()
            assert run.poll() is None  # the phase goes on
            os.kill(run.pid, signal.SIGINT)
            code = run.wait(timeout=60)
            stderr = run.stderr.read()
        finally:
            if run.poll() is None:
                run.kill()
        assert code == 130
        assert stderr.splitlines() == ["helix-runner: interrupted: phase p1 of job ctrl-c was cancelled"]
        phases = subprocess.run(
            [sys.executable, "-m", "helix_runner", "phases", "ctrl-c", "--json", "--server", address],
            capture_output=True,
            text=True,
            timeout=60,
            env=serve_env(tmp_path),
        )
        (phase,) = json.loads(phases.stdout)["phases"]
        assert phase["status"] == "PHASE_STATUS_CANCELLED"
        assert "Ctrl-C" in phase["statusReason"]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)


def test_run_starts_with_pattern_and_tool_breakpoints():
    """Issue 22 item 10: `run ... &` then `break add --pattern` raced (PHASE_NOT_FOUND, then
    ILLEGAL_TRANSITION once the phase had ended); the breakpoint goes in with the request instead."""
    from helix_runner.cli.main import build_parser
    from helix_runner.cli.run import build_request

    args = build_parser().parse_args(["run", "--workdir", "/w", "--prompt", "go", "--break-on-pattern", r"rm\s+-rf",
                                      "--break-on-tool", "Edit"])
    breakpoints = build_request(args).options.breakpoints
    assert [(b.tool_name or "", b.input_pattern.regex if b.input_pattern else "") for b in breakpoints] == [
        ("Edit", ""), ("", r"rm\s+-rf")]


def test_the_progress_line_shows_no_cost_before_one_is_known_and_marks_a_computed_one():
    """Issue 22 item 14: the progress line said "$0.0000" before any cost and "1 tools"."""
    view = PhaseModel()
    view.apply(_event(1, tool_call_started=pb.ToolCallStarted(tool_use_id="t1", name="Bash", input_json="{}")))
    line = progress_line(view, 1.0, 200)
    assert " 1 tool " in line and line.endswith("| -")
    view.apply(_event(2, cost_update=pb.CostUpdate(cost=pb.PhaseCost(computed_usd=0.0004))))
    assert progress_line(view, 2.0, 200).endswith("| $0.0004*")
    view.apply(_event(3, cost_update=pb.CostUpdate(cost=pb.PhaseCost(computed_usd=0.0016, reported_usd=0.0016))))
    assert progress_line(view, 3.0, 200).endswith("| $0.0016")


def _prompt_of(argv: list[str], stdin: bytes | None = None, monkeypatch=None) -> str:
    from helix_runner.cli.main import build_parser
    from helix_runner.cli.run import build_request

    if stdin is not None:
        import io

        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    return build_request(build_parser().parse_args(["run", "--workdir", "/w", *argv])).prompt


def test_run_reads_its_prompt_from_a_file_or_standard_input(tmp_path, monkeypatch):
    (tmp_path / "p.md").write_text("Fix the build.\nThen run the tests.\n")
    assert _prompt_of(["--prompt-file", str(tmp_path / "p.md")]) == "Fix the build.\nThen run the tests.\n"
    assert _prompt_of(["--prompt-file", "-"], "from stdin ✓".encode(), monkeypatch) == "from stdin ✓"


@pytest.mark.parametrize(("content", "says"), [
    (b"x" * (1024 * 1024 + 1), "over the limit of 1048576 bytes"),
    (b"\xff\xfe not text", "not UTF-8"),
    (b"  \n", "empty"),
    (None, "cannot read the prompt"),
])
def test_run_refuses_a_prompt_file_it_cannot_send_with_one_line(tmp_path, content, says):
    from helix_runner.cli.common import CliError

    path = tmp_path / "p.md"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(CliError) as caught:
        _prompt_of(["--prompt-file", str(path)])
    assert says in caught.value.message and caught.value.code == 2


@pytest.mark.real_cli
def test_an_offline_run_says_its_cost_was_not_billed(claude_binary, tmp_path):
    """Offline runs showed dollar costs while the README says nothing is billed."""
    from helix_runner.cli.run import OFFLINE_COST_NOTE

    script = tmp_path / "script.json"
    Script([Reply.text("hello", usage=Usage(input_tokens=1000, output_tokens=100))]).save(script)
    work = tmp_path / "work"
    work.mkdir()
    log = tmp_path / "serve.log"
    server = start_serve(tmp_path, log, "--offline-script", str(script))
    try:
        address = f"127.0.0.1:{serving_port(log, server)}"
        run = subprocess.run([sys.executable, "-m", "helix_runner", "run", "--server", address, "--workdir",
                              str(work), "--prompt", "hi"], capture_output=True, text=True, timeout=120,
                             env=serve_env(tmp_path))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
    assert run.returncode == 0, run.stderr
    assert "SUCCEEDED" in run.stdout and OFFLINE_COST_NOTE in " ".join(run.stdout.split()), run.stdout
