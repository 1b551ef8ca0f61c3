"""Log lines: human-readable on a terminal, JSON otherwise, the same for `serve` and `mock-api` (issue 22, item 15)."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import time

from helix_runner.config import load_config
from helix_runner.structured_logging import JsonFormatter, TextFormatter, configure_logging, resolve_format


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_auto_is_text_on_a_terminal_and_json_elsewhere():
    assert resolve_format("auto", Terminal()) == "text"
    assert resolve_format("auto", io.StringIO()) == "json"
    assert resolve_format("json", Terminal()) == "json" and resolve_format("text", io.StringIO()) == "text"


def test_the_servers_default_log_format_is_auto(tmp_path):
    """JSON logs were the default on a terminal too."""
    assert load_config(flags={"workspace_roots": [str(tmp_path)]}, environ={}).log_format == "auto"


def test_configure_logging_picks_the_formatter_by_where_stderr_goes(monkeypatch):
    root = logging.getLogger()
    saved = list(root.handlers), root.level
    try:
        for stream, formatter in ((Terminal(), TextFormatter), (io.StringIO(), JsonFormatter)):
            monkeypatch.setattr(sys, "stderr", stream)
            configure_logging("info", "auto")
            assert isinstance(root.handlers[0].formatter, formatter)
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


def test_a_text_line_is_short_and_quotes_values_with_spaces():
    record = logging.LogRecord("helix_runner.server", logging.INFO, __file__, 1, "serving", None, None)
    record.fields = {"address": "127.0.0.1:50051", "workspace_roots": ["/a", "/b"], "why": "two words"}
    line = TextFormatter().format(record)
    assert line.endswith('info    serving address=127.0.0.1:50051 workspace_roots=/a,/b why="two words"')
    assert line[:8] == time.strftime("%H:%M:%S", time.localtime(record.created))


def test_mock_api_logs_like_serve(tmp_path):
    """`mock-api` logged plain text while `serve` logged JSON (both off a terminal here)."""
    script = tmp_path / "script.json"
    script.write_text('{"turns": []}')
    proc = subprocess.Popen([sys.executable, "-m", "helix_runner", "mock-api", "--script", str(script)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().startswith("ANTHROPIC_BASE_URL=http://127.0.0.1:")
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines, err
    for line in lines:
        entry = json.loads(line)  # every line is one JSON object, as serve's
        assert {"ts", "level", "logger", "msg"} <= set(entry)


def test_mock_api_takes_the_log_format_flag(tmp_path, fmt="text"):
    script = tmp_path / "script.json"
    script.write_text('{"turns": []}')
    proc = subprocess.Popen([sys.executable, "-m", "helix_runner", "mock-api", "--script", str(script),
                             "--log-format", fmt],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        proc.stdout.readline()
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    first = err.splitlines()[0]
    assert "scripted Messages API listening" in first and not first.startswith("{"), first
