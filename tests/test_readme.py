"""The README's command blocks, run as written against the offline server (issue 22, item 8).

Every ```sh block of README.md carries an ``<!-- example: ... -->`` line right above it that says
how this test treats it:

- ``server``: the offline server ("Try it without a key"), started first and kept running;
- ``background``: started and left running (a phase held at a breakpoint), checked at the end;
- ``run``: run to its end (``bash -eo pipefail``), which must succeed; ``expect "TEXT"`` must be in
  its output; ``until "TEXT"``: run again (as a person would) until its output has TEXT;
- ``skip: REASON``: not run, and the reason says why (interactive, needs Docker or a real key).

The blocks run in order in a copy of the checkout's README and examples (a fresh git repository,
with this checkout's ``.venv`` and ``scripts``), with a home of their own, so the default data dir
(``~/.local/share/helix-runner``) and ``$PWD`` are the test's. The only change to the text: the
default ports 50051/50052 become free ones (``HELIX_RUNNER_PORT``/``_WEB_PORT`` for the server,
``HELIX_RUNNER_SERVER`` for the client verbs), so a server of the user's own does not matter.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
_BLOCK = re.compile(r"(?:^<!-- example: (?P<directive>.*?) -->\n)?^```sh\n(?P<body>.*?)^```", re.M | re.S)
_KINDS = ("server", "background", "run", "skip")


@dataclass
class Example:
    kind: str
    body: str
    line: int
    expect: list[str] = field(default_factory=list)
    until: str | None = None
    reason: str = ""


def examples(text: str) -> list[Example]:
    """The README's sh blocks with their directives, in order."""
    found = []
    for match in _BLOCK.finditer(text):
        line = text.count("\n", 0, match.start("body"))
        directive = match["directive"]
        assert directive, f"README.md line {line}: a ```sh block without an <!-- example: ... --> line"
        if directive.startswith("skip:"):
            example = Example("skip", match["body"], line, reason=directive.removeprefix("skip:").strip())
            assert example.reason, f"README.md line {line}: a skipped block says why"
            found.append(example)
            continue
        example = Example(directive.split(";")[0].strip(), match["body"], line)
        assert example.kind in _KINDS, f"README.md line {line}: unknown example kind {example.kind!r}"
        for part in directive.split(";")[1:]:
            word, _, value = part.strip().partition(" ")
            value = value.strip()
            assert word in ("expect", "until") and value.startswith('"') and value.endswith('"'), part
            text_value = value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
            if word == "expect":
                example.expect.append(text_value)
            else:
                example.until = text_value
        found.append(example)
    return found


def test_every_block_says_how_it_is_checked_and_the_offline_server_comes_first():
    found = examples(README.read_text())
    kinds = [e.kind for e in found]
    assert kinds.count("server") == 1
    first_run = next(i for i, e in enumerate(found) if e.kind in ("run", "background"))
    assert kinds.index("server") < first_run
    assert "--offline-script examples/offline/readme.json" in found[kinds.index("server")].body
    # Issue 22 item 9: one form of the command everywhere, the one that works in a fresh checkout.
    for e in found:
        for command in re.findall(r"(?:^|[|;&(])[ \t]*(helix-runner)[ \t]+[a-z]", e.body, re.M):
            pytest.fail(f"README.md line {e.line}: bare `{command}` (not on PATH): write .venv/bin/helix-runner")



# A terminal's first screen: what the project is, the two commands and the one that needs no key
# must all be on it (issue 35, item 4: the old first screen was mostly test-suite detail).
FIRST_SCREEN_LINES = 50


def test_the_first_screen_says_what_it_is_the_two_commands_and_the_command_without_a_key():
    lines = README.read_text().split("\n")
    screen = "\n".join(lines[:FIRST_SCREEN_LINES])
    assert lines[0] == "# Helix Runner"
    assert "Claude Code" in screen and "gRPC" in screen
    blocks = [e.body.strip() for e in examples(screen)]
    assert blocks[:3] == ["scripts/serve", "scripts/test", "scripts/serve --offline-script examples/offline/readme.json"]
    # Reference material lives behind links, not on the first screen.
    assert not re.search(r"^\|", screen, re.M), "a table on the README's first screen"
    for word in ("pytest", "xdist", "Hypothesis", "xfail", "conftest", "attack"):
        assert word not in screen, f"{word!r} on the README's first screen: move it to docs/testing.md"
    assert "docs/testing.md" in screen


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but - and _ dropped, spaces to -."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)
    return {_slug(m[1]) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def test_every_relative_link_of_the_readme_and_docs_resolves():
    """What moved to docs/ stays reachable: each relative link names a file that exists and, with
    a #fragment, a heading of it."""
    broken = []
    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file_part, _, fragment = target.partition("#")
            dest = (page.parent / file_part).resolve() if file_part else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif fragment and dest.suffix == ".md" and fragment not in _anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_every_configuration_key_has_a_row_in_docs_configuration():
    config = pytest.importorskip("helix_runner.config")
    documented = set()
    for row in (ROOT / "docs" / "configuration.md").read_text().splitlines():
        if row.startswith("| `"):
            documented |= set(re.findall(r"`([a-z0-9_]+)`", row.split("|")[1]))
    assert set(config.KEYS) - documented == set()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _checkout(tmp_path: Path) -> Path:
    """A fresh git repository with the README, the examples and what `scripts/serve` reads; .venv and
    scripts are this checkout's (git-ignored there)."""
    co = tmp_path / "checkout"
    co.mkdir()
    for name in ("README.md", "pyproject.toml", ".gitignore"):
        shutil.copy(ROOT / name, co / name)
    shutil.copytree(ROOT / "examples", co / "examples")
    for name in (".venv", "scripts"):
        (co / name).symlink_to(ROOT / name)
    git = ["git", "-c", "user.name=readme-test", "-c", "user.email=readme-test@example.invalid"]
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=co, check=True)
    (co / ".git" / "info" / "exclude").write_text(".venv\nscripts\n")
    subprocess.run([*git, "add", "-A"], cwd=co, check=True)
    subprocess.run([*git, "commit", "-qm", "checkout"], cwd=co, check=True)
    return co


@pytest.mark.real_cli
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_readme_runs_as_written_offline(tmp_path):
    # The checkout's `scripts/serve` bootstraps this checkout's .venv from the copied pyproject.toml: it
    # must find the venv current, or it reinstalls it as an editable install of the temporary checkout.
    subprocess.run([ROOT / "scripts" / "bootstrap"], check=True, capture_output=True, timeout=600)
    co = _checkout(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    port, web_port = _free_port(), _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HELIX_RUNNER_", "ANTHROPIC_", "XDG_"))}
    env.update(HOME=str(home), HELIX_RUNNER_PORT=str(port), HELIX_RUNNER_WEB_PORT=str(web_port),
               HELIX_RUNNER_SERVER=f"127.0.0.1:{port}", HELIX_VENV=str(ROOT / ".venv"), NO_COLOR="1")

    def as_here(body: str) -> str:
        return body.replace("127.0.0.1:50051", f"127.0.0.1:{port}").replace("127.0.0.1:50052", f"127.0.0.1:{web_port}")

    found = examples(README.read_text())
    started: list[tuple[Example, subprocess.Popen, Path]] = []
    try:
        for n, e in enumerate(found):
            if e.kind == "skip":
                continue
            out = tmp_path / f"block-{n}.out"
            if e.kind in ("server", "background"):
                with out.open("w") as sink:
                    proc = subprocess.Popen(["bash", "-c", as_here(e.body)], cwd=co, env=env, stdin=subprocess.DEVNULL,
                                            stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
                started.append((e, proc, out))
                if e.kind == "server":
                    _wait_for("Dashboard: ", proc, out, 120)
                continue
            deadline = time.monotonic() + 60
            while True:
                run = subprocess.run(["bash", "-eo", "pipefail", "-c", as_here(e.body)], cwd=co, env=env,
                                     stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180)
                output = run.stdout + run.stderr
                if e.until is None or e.until in output or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            assert run.returncode == 0, f"README.md line {e.line}: exit {run.returncode}\n{output}"
            for text in [*e.expect, *([e.until] if e.until else [])]:
                assert text in output, f"README.md line {e.line}: {text!r} not in the output:\n{output}"
        for e, proc, out in started:
            if e.kind == "background":
                assert proc.wait(60) == 0, f"README.md line {e.line}:\n{out.read_text()}"
    finally:
        for _, proc, _ in reversed(started):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)


def _wait_for(text: str, proc: subprocess.Popen, out: Path, limit_s: float) -> None:
    """Until ``text`` is in the process's output (it serves once it printed its dashboard URL)."""
    deadline = time.monotonic() + limit_s
    while text not in out.read_text():
        assert proc.poll() is None, out.read_text()
        assert time.monotonic() < deadline, "not ready in time:\n" + out.read_text()
        time.sleep(0.1)
