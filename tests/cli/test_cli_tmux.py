"""The terminal verbs in a real terminal: tmux runs them, `send-keys` presses keys, `capture-pane`
reads the screen. `attach` shows a held call and it disappears once approved; `run`'s progress
line fits an 80-column terminal and reports the API retry."""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable

import pytest
from support.streams import PhaseCall

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix_runner.offline import ApiError, Reply

TMUX = shutil.which("tmux")
pytestmark = [
    pytest.mark.real_cli,
    pytest.mark.slow,
    pytest.mark.skipif(TMUX is None, reason="tmux is not installed (scripts/bootstrap installs it with apt)"),
]



def terminal_env() -> dict[str, str]:
    """The views' environment in a tmux window: ours without tmux's and the server's variables, and
    without COLUMNS/LINES (pytest-xdist's workers carry 80x24, which the views obey over the window's size)."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("TMUX", "HELIX_RUNNER_")) and k not in ("COLUMNS", "LINES")}

class Terminal:
    """One tmux window on a private tmux server, running ``argv``; the shell reports its exit."""

    def __init__(self, name: str, argv: list[str], *, width: int, height: int):
        self.socket = f"helix-test-{os.getpid()}-{name}"
        self.name = name
        command = f"{shlex.join(argv)}; echo EXIT=$?; sleep 60"
        env = terminal_env()
        env["TERM"] = "xterm-256color"
        subprocess.run(
            [
                TMUX,
                "-L",
                self.socket,
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-s",
                name,
                "-x",
                str(width),
                "-y",
                str(height),
                command,
            ],
            check=True,
            timeout=30,
            env=env,
        )

    def _tmux(self, *args: str) -> str:
        return subprocess.run(
            [TMUX, "-L", self.socket, *args], capture_output=True, text=True, timeout=30, check=True
        ).stdout

    def screen(self, *, joined: bool = False) -> str:
        """What the window shows; ``joined``: rows a long line wrapped onto are joined back."""
        return self._tmux("capture-pane", "-p", *(["-J"] if joined else []), "-t", self.name)

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", self.name, *keys)

    async def wait_for(self, predicate: Callable[[str], bool], what: str, limit: float = 30.0) -> str:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        while True:
            screen = await asyncio.to_thread(self.screen)
            if predicate(screen):
                return screen
            if loop.time() > deadline:
                raise AssertionError(f"timed out waiting for {what}; the screen:\n{screen}")
            await asyncio.sleep(0.2)

    def close(self) -> None:
        subprocess.run([TMUX, "-L", self.socket, "kill-server"], capture_output=True, timeout=30)


def held_panel(screen: str) -> str:
    """The rows of the dashboard's held-calls box."""
    rows = screen.splitlines()
    start = next(i for i, row in enumerate(rows) if "held tool calls" in row)
    end = next(i for i in range(start + 1, len(rows)) if "╰" in rows[i])
    return "\n".join(rows[start : end + 1])


async def test_attach_in_a_terminal_approve_and_pause_keys(claude_binary, scripted_api, runner_factory):
    api = scripted_api(
        [Reply.tool_use("Bash", {"command": f"touch {n}"}, chunk_delay=0.05) for n in ("one", "two")]
        + [Reply.text("done")]
    )
    async with runner_factory(api) as runner:
        phase = PhaseCall(
            runner.stub,
            "tj",
            "p1",
            str(runner.workdir),
            allowed_tools=["Bash"],
            breakpoints=[res.Breakpoint(breakpoint_id="bp", tool_name="Bash", once=True)],
        )
        await phase.control(ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT)
        term = Terminal(
            "attach",
            [
                sys.executable,
                "-m",
                "helix_runner",
                "attach",
                "tj",
                "p1",
                "--server",
                f"127.0.0.1:{runner.server.port}",
            ],
            width=150,
            height=45,
        )
        try:
            screen = await term.wait_for(lambda s: "touch one" in held_panel_or_empty(s), "the held call")
            assert "AWAITING_APPROVAL" in screen and "breakpoint bp" in held_panel(screen)

            term.keys("p")
            await phase.control(ev.CONTROL_EVENT_KIND_PAUSE_REQUESTED)
            await term.wait_for(lambda s: "[pause requested]" in s, "the pause request in the header")

            term.keys("a")
            paused = await phase.control(ev.CONTROL_EVENT_KIND_PAUSED)
            screen = await term.wait_for(
                lambda s: "touch one" not in held_panel_or_empty(s) and "touch two" in held_panel_or_empty(s),
                "the approved call to leave the held list and the paused one to appear",
            )
            assert paused.control.tool_use_id in held_panel(screen) and "PAUSED" in screen
            assert (runner.workdir / "one").exists() and not (runner.workdir / "two").exists()

            term.keys("r")
            result = await phase.finish()
            screen = await term.wait_for(lambda s: "SUCCEEDED" in s and "none held" in s, "the final status")
            term.keys("q")
            await term.wait_for(lambda s: "EXIT=0" in s, "attach to quit with status 0")
        finally:
            term.close()
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    assert (runner.workdir / "two").exists()


def held_panel_or_empty(screen: str) -> str:
    try:
        return held_panel(screen)
    except StopIteration:
        return ""


async def test_run_progress_fits_80_columns_and_reports_the_retry(
    claude_binary, scripted_api, runner_factory
):
    api = scripted_api(
        [
            ApiError(429),
            Reply.tool_use("Bash", {"command": "echo " + "long-output " * 20}),
            Reply.text("done " * 30),
        ]
    )
    async with runner_factory(api) as runner:
        term = Terminal(
            "run",
            [
                sys.executable,
                "-m",
                "helix_runner",
                "run",
                "--server",
                f"127.0.0.1:{runner.server.port}",
                "--workdir",
                str(runner.workdir),
                "--prompt",
                "go",
                "--allowed-tool",
                "Bash",
                "--job-id",
                "a-rather-long-job-name-for-the-line",
            ],
            width=80,
            height=30,
        )
        try:
            await term.wait_for(lambda s: "EXIT=0" in s, "run to finish", limit=90)
            rows = term.screen(joined=True).splitlines()
        finally:
            term.close()
    live = rows[: next(i for i, row in enumerate(rows) if row.startswith("SUCCEEDED: "))]
    assert live and all(len(row) <= 80 for row in live), "\n".join(rows)  # one row each, nothing wrapped
    (progress,) = [row for row in live if row.startswith("[")]
    assert "| 1 tool |" in progress and "| 1 retry" in progress
    assert any("api_retry" in row and "HTTP 429" in row for row in rows)
    assert any("assistant_text" in row and "done done" in row for row in live)  # the model's text, one row


# What a phase writes that a terminal would obey: an OSC 52 clipboard write, an OSC 0 title, a screen
# clear with a cursor move home, a C1 CSI, and a bidi override. In the tool's input (raw bytes in the
# JSON string) and in the model's text; the Bash output carries the same through its printf.
HOSTILE = "\x1b]52;c;cHduZWQ=\x07\x1b]0;pwned\x07\x1b[2J\x1b[H\x9b31m\u202efdp.exe"
HOSTILE_BASH = r"printf '\033]52;c;cHduZWQ=\007\033]0;pwned\007\033[2J\033[H fake\n'"


def _obeying_terminal(name: str, argv: list[str], config) -> Terminal:
    """A window whose tmux accepts OSC 52 into its paste buffers (``set-clipboard on``): a write to
    the clipboard leaves a buffer behind, a title sets ``pane_title``."""
    term = Terminal.__new__(Terminal)
    term.socket = f"helix-test-{os.getpid()}-{name}"
    term.name = name
    config.write_text("set -g set-clipboard on\nset -g history-limit 5000\n")
    command = f"echo BEFORE-THE-VIEW; {shlex.join(argv)}; echo EXIT=$?; sleep 60"
    env = terminal_env()
    env["TERM"] = "xterm-256color"
    subprocess.run(
        [
            TMUX,
            "-L",
            term.socket,
            "-f",
            str(config),
            "new-session",
            "-d",
            "-s",
            name,
            "-x",
            "200",
            "-y",
            "50",
            command,
        ],
        check=True,
        timeout=30,
        env=env,
    )
    return term


def _effects(term: Terminal) -> tuple[str, str]:
    """(the pane's title, the tmux paste buffers): what an obeyed OSC 0 / OSC 52 would change."""
    title = term._tmux("display-message", "-p", "-t", term.name, "#{pane_title}").strip()
    buffers = subprocess.run(
        [TMUX, "-L", term.socket, "list-buffers"], capture_output=True, text=True, timeout=30
    ).stdout
    return title, buffers


async def test_the_terminal_detects_what_an_obeyed_escape_does(tmp_path):
    """The control for the test below: raw bytes do set the title and the clipboard here."""
    term = _obeying_terminal(
        "control", ["printf", r"\033]52;c;cHduZWQ=\007\033]0;pwned\007done\n"], tmp_path / "tmux.conf"
    )
    try:
        await term.wait_for(lambda s: "EXIT=0" in s, "printf to finish")
        title, buffers = _effects(term)
    finally:
        term.close()
    assert title == "pwned" and "pwned" in buffers


async def test_views_in_a_real_terminal_obey_nothing_a_phase_wrote(
    claude_binary, scripted_api, runner_factory, tmp_path
):
    """`watch`, `replay` and `attach` (a held call whose input carries the escapes) in tmux: the
    screen is not cleared (the line before the view stays), the title and clipboard are untouched,
    and the escapes are on the screen as text."""
    api = scripted_api(
        [
            Reply.tool_use("Bash", {"command": HOSTILE_BASH, "description": HOSTILE}),
            Reply.text("done " + HOSTILE),
        ]
    )
    async with runner_factory(api) as runner:
        address = f"127.0.0.1:{runner.server.port}"
        phase = PhaseCall(
            runner.stub,
            "esc",
            "p1",
            str(runner.workdir),
            allowed_tools=["Bash"],
            breakpoints=[res.Breakpoint(breakpoint_id="bp", tool_name="Bash", once=True)],
        )
        await phase.control(ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT)
        cli = [sys.executable, "-m", "helix_runner"]
        attach = _obeying_terminal(
            "escattach", [*cli, "attach", "esc", "p1", "--server", address], tmp_path / "attach.conf"
        )
        try:
            held = await attach.wait_for(lambda s: "\\u001b]52;c;" in held_panel_or_empty(s), "the held call")
            attach_effects = _effects(attach)
            attach.keys("a")
            result = await phase.finish()
            attach.keys("q")
        finally:
            attach.close()
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        screens = {"attach": (held, attach_effects)}
        for verb in ("watch", "replay"):
            term = _obeying_terminal(
                f"esc{verb}", [*cli, verb, "esc", "p1", "--server", address], tmp_path / f"{verb}.conf"
            )
            try:
                await term.wait_for(lambda s: "EXIT=" in s, f"{verb} to finish", limit=60)
                screens[verb] = (term.screen(joined=True), _effects(term))
            finally:
                term.close()
    for view, (screen, (title, buffers)) in screens.items():
        assert "pwned" not in title, (view, title)
        assert not buffers.strip(), (view, buffers)
        if view == "attach":  # the held input as JSON escapes: the same value, what an edit starts from
            assert "\\u001b]52;c;cHdu" in screen, screen
        else:  # a full-screen app, the others print lines after the shell's
            assert "\\x1b]52;c;" in screen and "\\u202efdp.exe" in screen, (view, screen)
            assert "BEFORE-THE-VIEW" in screen and "EXIT=0" in screen, (view, screen)
