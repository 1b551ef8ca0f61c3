"""Cross-language conformance: the same scenarios through the Rust, TypeScript and Python clients.

One real server (``helix-runner serve`` in a subprocess) runs the real Claude Code CLI against the
scripted Messages API (``script.json``), so every phase is deterministic. Each client's program
(``clients/<lang>/conformance/main.*``) runs every scenario of ``scenarios.json`` with its own job
prefix and prints a normalized JSON transcript; each must equal ``golden.json``. The README
quickstarts run against the same server. Build the programs first with ``scripts/test-clients``.

To re-record the golden file after an intended change of behaviour:
``CONFORMANCE_UPDATE_GOLDEN=1 python -m pytest conformance -k 'golden and python'``, then review the
diff and check that the other clients still match it.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "conformance"
GOLDEN = HERE / "golden.json"
LANGUAGES = ("rust", "typescript", "python")
PROGRAM_TIMEOUT = 110  # below pytest-timeout's 120 s per test

BUILD_HINT = "build the client programs first: scripts/test-clients"


def program(language: str) -> list[str]:
    """The conformance program of a client, as a command line (checked to be built)."""
    if language == "python":
        return [sys.executable, str(ROOT / "clients/python/conformance/main.py")]
    if language == "rust":
        path = ROOT / "clients/rust/target/debug/examples/conformance"
        return [str(path)] if path.exists() else pytest.fail(f"{path} is missing; {BUILD_HINT}")
    path = ROOT / "clients/typescript/dist/conformance/main.js"
    return ["node", str(path)] if path.exists() else pytest.fail(f"{path} is missing; {BUILD_HINT}")


@dataclass(frozen=True)
class Quickstart:
    source: Path
    readme: Path
    command: list[str]


def quickstart(language: str) -> Quickstart:
    if language == "python":
        source = ROOT / "clients/python/examples/quickstart.py"
        return Quickstart(source, ROOT / "clients/python/README.md", [sys.executable, str(source)])
    if language == "rust":
        binary = ROOT / "clients/rust/target/debug/examples/quickstart"
        if not binary.exists():
            pytest.fail(f"{binary} is missing; {BUILD_HINT}")
        return Quickstart(ROOT / "clients/rust/examples/quickstart.rs", ROOT / "clients/rust/README.md", [str(binary)])
    compiled = ROOT / "clients/typescript/dist/examples/quickstart.js"
    if not compiled.exists():
        pytest.fail(f"{compiled} is missing; {BUILD_HINT}")
    return Quickstart(ROOT / "clients/typescript/examples/quickstart.ts", ROOT / "clients/typescript/README.md",
                      ["node", str(compiled)])


def client_env() -> dict[str, str]:
    env = dict(os.environ)
    # The Python client from the source tree, whether or not it is installed in the virtualenv.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "clients/python/src"), env.get("PYTHONPATH")]))
    return env


@dataclass(frozen=True)
class Server:
    address: str
    workdir: Path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The real server in offline mode (the real CLI against script.json), on a free loopback port."""
    from helix_runner.process.claude_locator import ClaudeNotFoundError, locate_claude

    try:
        locate_claude()
    except ClaudeNotFoundError as exc:
        pytest.skip(str(exc))
    base = tmp_path_factory.mktemp("conformance")
    home, workdir, data = base / "home", base / "work", base / "data"
    home.mkdir()
    workdir.mkdir()
    log = base / "server.log"
    env = {**os.environ, "HOME": str(home)}
    argv = [sys.executable, "-m", "helix_runner", "serve", "--port", "0", "--data-dir", str(data),
            "--workspace-root", str(workdir), "--log-format", "json", "--offline-script", str(HERE / "script.json")]
    with log.open("wb") as stderr:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr, env=env)
    try:
        address = _wait_for_address(process, log)
        yield Server(address, workdir)
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def _wait_for_address(process: subprocess.Popen, log: Path, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if '"msg":"serving"' in line:
                return json.loads(line)["address"]
        if process.poll() is not None:
            pytest.fail(f"the server exited with {process.returncode}:\n{log.read_text(errors='replace')}")
        time.sleep(0.1)
    pytest.fail(f"the server did not log its address within {timeout:.0f} s:\n{log.read_text(errors='replace')}")


def run(command: list[str], *, timeout: float = PROGRAM_TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env=client_env())


GIT_ENV = {"GIT_AUTHOR_NAME": "conformance", "GIT_AUTHOR_EMAIL": "conformance@example.invalid",
           "GIT_COMMITTER_NAME": "conformance", "GIT_COMMITTER_EMAIL": "conformance@example.invalid",
           "PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True, capture_output=True, text=True,
                          timeout=30).stdout


def make_repository(path: Path) -> Path:
    """The git repository the worktree scenario's phase works on (one commit, one tracked file)."""
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text("conformance repository\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "base")
    return path


def describe_difference(expected: object, actual: object) -> str:
    a = json.dumps(expected, indent=2, sort_keys=True).splitlines()
    b = json.dumps(actual, indent=2, sort_keys=True).splitlines()
    return "\n".join(difflib.unified_diff(a, b, "golden.json", "transcript", lineterm="", n=2))


@pytest.mark.real_cli
@pytest.mark.slow
@pytest.mark.parametrize("language", LANGUAGES)
def test_transcript_matches_golden(language: str, server: Server) -> None:
    command = program(language) + ["--address", server.address, "--workdir", str(server.workdir),
                                   "--scenarios", str(HERE / "scenarios.json"), "--prefix", f"conf-{language}"]
    spec = json.loads((HERE / "scenarios.json").read_text())
    repo = make_repository(server.workdir / f"conf-{language}-{spec['worktree']['repo']}")
    done = run(command)
    assert done.returncode == 0, f"{language} program failed ({done.returncode}):\n{done.stderr}\n{done.stdout}"
    transcript = json.loads(done.stdout)
    if language == "python" and os.environ.get("CONFORMANCE_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(transcript, indent=2, sort_keys=True) + "\n")
    golden = json.loads(GOLDEN.read_text())
    assert transcript == golden, f"{language} differs from golden.json:\n{describe_difference(golden, transcript)}"
    # The cancel scenarios' tool really ran (it wrote its pid and start time once started; inside the
    # phase's PID namespace the pid is the namespace's) and did not outlive the cancel.
    for job in ("cancel", "drop"):
        started = server.workdir / f"conf-{language}-{job}.started"
        assert started.exists(), f"the {job} scenario's tool never started running"
        identity = started.read_text()
        assert _gone(identity), f"the {job} scenario's tool ({identity}) still runs after its phase was cancelled"
    # The worktree phase wrote into its own worktree: the repository's main worktree is untouched.
    assert git(repo, "status", "--porcelain") == "" and not (repo / "notes.txt").exists()
    assert f"helix/conf-{language}-{spec['worktree']['job']}/" in git(repo, "branch", "--list")


def _gone(identity: str, timeout: float = 10.0) -> bool:
    """Whether the process that wrote ``identity`` ("<pid> <start ticks>") is gone (or a zombie),
    waiting up to ``timeout`` seconds (as tests/support/processes.py ``find_process``, standalone here)."""
    own, start = (int(x) for x in identity.split())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(_is(pid, own, start) for pid in os.listdir("/proc") if pid.isdigit()):
            return True
        time.sleep(0.1)
    return False


def _is(pid: str, own: int, start: int) -> bool:
    """Whether live process ``pid`` started at ``start`` ticks with pid ``own`` in its innermost namespace."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] == "Z" or int(fields[19]) != start:
            return False
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except (OSError, ValueError, IndexError):
        return False
    nspid = next((line.split()[1:] for line in status if line.startswith("NSpid:")), [pid])
    return int(nspid[-1]) == own


@pytest.mark.real_cli
@pytest.mark.slow
@pytest.mark.parametrize("language", LANGUAGES)
def test_readme_quickstart_runs_as_written(language: str, server: Server) -> None:
    example = quickstart(language)
    assert example.source.read_text().strip() in example.readme.read_text(), (
        f"{example.readme.relative_to(ROOT)} must show {example.source.relative_to(ROOT)} verbatim"
    )
    done = run(example.command + [server.address, str(server.workdir)], timeout=120)
    assert done.returncode == 0, f"quickstart failed ({done.returncode}):\n{done.stderr}\n{done.stdout}"
    lines = done.stdout.strip().splitlines()
    # The attempt's ATTEMPT_STARTED control event opens every phase (docs/retries-and-admission.md, section 3).
    assert lines[:2] == ["1 control", "2 status_changed"], done.stdout
    assert any(line.endswith(" session_init") for line in lines), done.stdout
    assert lines[-1] == "PHASE_STATUS_SUCCEEDED Hello from the scripted API.", done.stdout


def test_client_versions_follow_the_contract() -> None:
    """Every client carries the version of the server release whose proto/ it is generated from."""
    server_version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    versions = {
        "rust": tomllib.loads((ROOT / "clients/rust/Cargo.toml").read_text())["package"]["version"],
        "typescript": json.loads((ROOT / "clients/typescript/package.json").read_text())["version"],
        "typescript VERSION": re.search(r'VERSION = "([^"]+)"', (ROOT / "clients/typescript/src/index.ts").read_text())[1],
        "python": tomllib.loads((ROOT / "clients/python/pyproject.toml").read_text())["project"]["version"],
    }
    assert versions == dict.fromkeys(versions, server_version)
