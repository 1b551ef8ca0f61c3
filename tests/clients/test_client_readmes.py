"""The clients' README quickstarts work as written on a fresh clone (commands checked, not run).

The conformance suite runs each quickstart's program against a real server; these checks cover
the steps around it that a newcomer types: start the server, install, build.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LANGUAGES = ("python", "typescript", "rust")


def quickstart_commands(language: str) -> list[str]:
    """The indented command lines of the README's Quickstart section, in order."""
    readme = (ROOT / "clients" / language / "README.md").read_text()
    section = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    section = re.sub(r"^```.*?^```", "", section, flags=re.MULTILINE | re.DOTALL)  # the example's code
    return re.findall(r"^    (\S.*)$", section, flags=re.MULTILINE)


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_server_is_started_with_scripts_serve_from_the_repository_root(language):
    # scripts/serve sets up .venv on a fresh clone; .venv/bin/helix-runner does not exist yet there.
    argv = shlex.split(quickstart_commands(language)[0])
    assert argv[0] == "scripts/serve" and (ROOT / argv[0]).is_file()
    assert (ROOT / argv[argv.index("--offline-script") + 1]).is_file()


def test_typescript_installs_its_toolchain_before_building():
    (command,) = quickstart_commands("typescript")[1:]
    steps = [step.strip() for step in command.split("&&")]
    assert steps[0] == "npm ci", "tsc is only in node_modules after npm ci"
    assert steps[1] == "npm run build"
    program = shlex.split(steps[2])[1]
    assert program == "dist/examples/quickstart.js"
    assert (ROOT / "clients/typescript/examples/quickstart.ts").is_file()


def test_python_runs_with_the_repository_virtualenv_which_has_the_client():
    (run,) = (shlex.split(line) for line in quickstart_commands("python")[1:])
    # A bare `python` is the system interpreter, which has neither grpcio nor the client; the
    # repository's .venv has the client because helix-runner ships it (scripts/serve installs it).
    assert run[0] == ".venv/bin/python" and (ROOT / run[1]).is_file()
