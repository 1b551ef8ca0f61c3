"""A real server in each sandbox mode, as root and as nobody, running phases of the real CLI whose
model does legitimate work, leaves traps in its repository, or goes past the phase's limits
(tests/security/test_legitimate_work.py, test_attack_repository.py, test_attack_limits.py).

One scenario per (mode, user): ``helix-runner serve`` (through ``setpriv`` for nobody) in offline
mode, its data dir outside the workspace root ``ws`` (itself a git repository, so a phase can run
*in* the root), and these phases, each told apart by a tag in its prompt (``[[legit-root]]``...):

- legitimate work (``box_battery.legit``) with the working directory equal to the workspace root
  and inside it (``ws/proj``), including a package install from a stand-in registry through the
  egress proxy;
- traps in the repository (``box_battery.repo``): in place in ``ws/trap``, and in a git worktree of
  ``ws/wtrepo`` kept after the phase; and the same write in ``ws/optin`` with
  ``allow_repository_config_writes``;
- limits: a line of 8 MiB without a newline (``max_line_bytes`` 1 MiB), 64 MiB of output
  (``phase_output_max_bytes`` 16 MiB), 64 MiB downloaded through the egress proxy
  (``egress_max_bytes_per_phase`` 8 MiB), a fork bomb (``pids_limit`` 64), and up to 232 MiB written
  into the workspace (``workspace_max_bytes`` 16 MiB), while a neighbour phase of another job streams.

After the phases the scenario runs git in the repositories as the server's user would, outside any
sandbox, with markers for each trap (a trap that runs creates its marker). Everything is torn down
before the tests read the ``BoxOutcome``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from helix.runner.v1 import runner_service_pb2 as pb
from helix.runner.v1 import runner_service_pb2_grpc as pb_grpc
from helix_runner.offline import Reply, RequestMatcher, Script
from support import box_battery
from support.processes import (
    NOBODY,
    SERVER_SRC,
    as_nobody,
    nobody_env,
    nobody_python,
    serve_argv,
    serving_port,
)
from support.registry import Registry
from support.streams import Stream
from support.test_claude import test_claude

# Sandbox modes: name -> the layers turned off (config ``sandbox_skip_layers``), as the attack suite's.
# ``off``: ``sandbox = off``, no layer at all (legitimate work must work there too; the repository's
# protection is the sandbox's, so it has none: tests/security/conftest.py's BOX_GAPS).
MODES = {"every-layer": (), "no-bubblewrap": ("namespaces",), "landlock-only": ("namespaces", "network"),
         "no-landlock": ("landlock",), "no-seccomp": ("seccomp",), "off": None}
USERS = ("root", "nobody")
SCENARIOS = tuple((mode, user) for mode in MODES for user in USERS)


def sandbox_config(mode: str) -> dict[str, object]:
    """The in-process server's configuration for one of ``MODES`` (runner_factory's keywords)."""
    return {"sandbox": "off"} if MODES[mode] is None else {"sandbox_skip_layers": MODES[mode]}
REGISTRY_HOST = "127.0.0.2"
PIDS_LIMIT = 64
FORKS = 300
LINE_CAP = 1 << 20
OUTPUT_CAP = 16 << 20
EGRESS_CAP = 8 << 20  # egress_max_bytes_per_phase: the egress flood downloads 64 MiB
DISK_CAP = 16 << 20  # PhaseOptions.workspace_max_bytes of the disk flood, which writes up to 232 MiB
PYTHON = "/usr/bin/python3"  # a Python both users can run, inside every sandbox (/usr)


@dataclass
class PhaseRun:
    """One phase: its events, result and the battery's reports (probe -> report)."""

    events: list = field(default_factory=list)
    result: Any = None
    error: str = ""
    reports: dict[str, dict] = field(default_factory=dict)

    @property
    def ended(self) -> str:
        if self.result is None:
            return f"no result ({self.error})"
        return f"{self.result.status} {self.result.reason}"


@dataclass(repr=False)
class BoxOutcome:
    """What one scenario's phases did and what was seen from outside after them."""

    mode: str
    user: str
    phases: dict[str, PhaseRun] = field(default_factory=dict)
    effects: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"BoxOutcome({self.who})"

    @property
    def who(self) -> str:
        return f"as {self.user}, {self.mode}"

    def phase(self, name: str) -> PhaseRun:
        assert name in self.phases, f"{self.who}: phase {name} did not run ({self.effects.get('log_tail')})"
        return self.phases[name]


def _git(cwd: Path, *args: str, env: dict[str, str] | None = None, user: str = "root") -> subprocess.CompletedProcess:
    """git as ``user`` (the server's: git refuses a repository another user owns)."""
    full = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.invalid", **(env or {})}
    argv = ["git", *args] if user == "root" else as_nobody("git", *args)
    return subprocess.run(argv, cwd=cwd, env=full, capture_output=True, text=True, timeout=60)


def _repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    _git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text("a project\n")
    _git(path, "add", "README.md")
    _git(path, "commit", "-q", "-m", "start")
    return path


def snapshot(repo: Path) -> dict[str, str]:
    """What the repository's protected files hold now (a missing one as ``-``)."""
    common = Path(_git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir").stdout.strip() or repo / ".git")
    out = {}
    for path in (common / "config", common / "info" / "attributes", repo / ".gitmodules", repo / ".mcp.json",
                 repo / ".claude" / "settings.json", repo / ".git"):
        out[str(path)] = path.read_text(errors="replace") if path.is_file() else ("dir" if path.is_dir() else "-")
    hooks = common / "hooks"
    out[str(hooks)] = " ".join(sorted(os.listdir(hooks))) if hooks.is_dir() else "-"
    return out


class BoxScenario:
    """One scenario (module docstring); ``run()`` returns the outcome, torn down."""

    def __init__(self, mode: str, user: str, claude: str):
        self.mode, self.user, self.claude = mode, user, claude
        self.outcome = BoxOutcome(mode, user)
        self.root = Path(tempfile.mkdtemp(prefix=f"helix-box-{mode}-{user}-"))
        self.ws = self.root / "ws"
        self.markers = self.root / "markers"
        self.proc: subprocess.Popen | None = None
        self.channel: grpc.aio.Channel | None = None

    def script(self) -> Script:
        def turns(tag: str, command: str) -> list[Reply]:
            match = RequestMatcher(first_user_contains=tag)
            return [Reply(content=r.content, match=match, label=tag) for r in (
                Reply.tool_use("Bash", {"command": command, "timeout": 300000}), Reply.text(f"{tag} done"))]

        battery = f"{PYTHON} .hxbox/box_battery.py"
        return Script([
            *turns("[[legit-root]]", f"{battery} legit {self.registry.address}"),
            *turns("[[legit-inside]]", f"{battery} legit {self.registry.address}"),
            *turns("[[repo-inplace]]", f"{battery} repo {self.markers}"),
            *turns("[[repo-worktree]]", f"{battery} repo {self.markers}"),
            *turns("[[optin]]", f"{battery} optin {self.markers}"),
            *turns("[[hostgit]]", f"{battery} hostgit {self.markers}"),
            *turns("[[hostgit-wt]]", f"{battery} worktree_work {self.markers}"),
            *turns("[[hostgit-redirect]]", f"{battery} hostgit_worktree {self.markers}"),
            *turns("[[line]]", f"{battery} flood line"),
            *turns("[[output]]", f"{battery} flood output"),
            *turns("[[egress]]", f"{battery} egress_flood {self.registry.address}"),
            *turns("[[disk]]", f"{battery} disk_flood -"),
            *turns("[[forkbomb]]", f"{battery} forkbomb {FORKS}"),
            *turns("[[neighbour]]", f"{battery} stream 200"),
        ])

    def lay_out(self) -> None:
        self.markers.mkdir()
        (self.root / "outside").mkdir()  # what a planted core.worktree points the server's git at
        (self.root / "outside" / "secret.txt").write_text(f"{box_battery.OUTSIDE_SECRET}\n")
        _repo(self.ws)
        for name in ("proj", "trap", "wtrepo", "optin", "hostgit", "redirect"):
            _repo(self.ws / name)
        (self.ws / "trap" / ".gitmodules").write_text("")
        _git(self.ws / "trap", "add", ".gitmodules")
        _git(self.ws / "trap", "commit", "-q", "-m", "modules")
        (self.ws / "limits").mkdir()
        for d in (self.ws, *(self.ws / n for n in ("proj", "trap", "wtrepo", "optin", "hostgit", "redirect", "limits"))):
            (d / ".hxbox").mkdir()
            shutil.copyfile(box_battery.__file__, d / ".hxbox" / "box_battery.py")
        for name in ("proj", "trap", "wtrepo", "optin", "hostgit", "redirect"):  # the battery's copy is not the project's work
            (self.ws / name / ".git" / "info" / "exclude").write_text(".hxbox/\nhxbox-site/\n")
        (self.ws / ".git" / "info" / "exclude").write_text(".hxbox/\nhxbox-site/\nhx-disk/\n")
        for name in ("wtrepo", "hostgit"):  # a worktree holds what is committed
            _git(self.ws / name, "add", "-f", ".hxbox")
            _git(self.ws / name, "commit", "-q", "-m", "battery")
        self.before = {name: snapshot(self.ws / name) for name in ("trap", "wtrepo")}
        self.script().save(self.root / "script.json")
        (self.root / "home").mkdir()
        if self.user == "nobody":
            for p in [self.root, *self.root.rglob("*")]:
                os.lchown(p, NOBODY, NOBODY)

    async def start_server(self) -> None:
        python = nobody_python() if self.user == "nobody" else sys.executable
        assert python is not None
        argv = serve_argv(python, self.root, "--claude-path", self.claude, "--offline-script",
                          str(self.root / "script.json"), workspace_root=self.ws)
        env = {"HOME": str(self.root / "home"), "PYTHONUNBUFFERED": "1",
               "HELIX_RUNNER_EGRESS_PRIVATE_ALLOW": self.registry.address,
               "HELIX_RUNNER_MAX_LINE_BYTES": str(LINE_CAP), "HELIX_RUNNER_PHASE_OUTPUT_MAX_BYTES": str(OUTPUT_CAP),
               "HELIX_RUNNER_EGRESS_MAX_BYTES_PER_PHASE": str(EGRESS_CAP)}
        if MODES[self.mode] is None:
            env["HELIX_RUNNER_SANDBOX"] = "off"
        elif MODES[self.mode]:
            env["HELIX_RUNNER_SANDBOX_SKIP_LAYERS"] = ",".join(MODES[self.mode])
        log = self.root / "serve.log"
        # This checkout's server first, for both users (a checkout of an earlier commit imports its own).
        full_env = nobody_env(**env) if self.user == "nobody" else {"PATH": os.environ["PATH"],
                                                                     "PYTHONPATH": SERVER_SRC, **env}
        if test_claude():  # the CLI the real-CLI tests were told to run
            full_env.setdefault("HELIX_RUNNER_CLAUDE_PATH", test_claude())
        with open(log, "w") as stderr:
            self.proc = subprocess.Popen(as_nobody(*argv) if self.user == "nobody" else argv, env=full_env, cwd="/",  # noqa: ASYNC220
                                         stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)
        port = await asyncio.to_thread(serving_port, log, self.proc, 60.0)
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        self.stub = pb_grpc.RunnerServiceStub(self.channel)
        try:
            status = (await self.stub.GetServerStatus(pb.GetServerStatusRequest(), timeout=30)).status
        except grpc.aio.AioRpcError as exc:  # say why: the server's own last words, and whether it still runs
            tail = log.read_text(errors="replace")[-3000:]
            raise AssertionError(f"the {self.mode}/{self.user} server did not answer ({exc.code().name}); exit "
                                 f"status {self.proc.poll()}; its log ends:\n{tail}") from None
        self.outcome.effects["layers"] = {layer.name: layer.active for layer in status.sandbox.layers}

    def start(self, name: str, tag: str, workdir: Path, **options: Any) -> Stream:
        # Options this checkout's API does not know are left out (an earlier commit runs the same scenario).
        known = pb.PhaseOptions.DESCRIPTOR.fields_by_name
        options = {key: value for key, value in options.items() if key in known}
        request = pb.RunPhaseRequest(job_id=f"box-{name}", phase_id="p", prompt=f"{tag} go", working_dir=str(workdir),
                                     options=pb.PhaseOptions(allowed_tools=["Bash"], **options))
        return Stream(self.stub.RunPhase(request, timeout=400), wait_limit=120, keep_error=True)

    async def finish(self, name: str, stream: Stream, limit: float = 300) -> PhaseRun:
        run = PhaseRun()
        with contextlib.suppress(TimeoutError):
            await stream.finish(limit)
        run.events, run.result = stream.events, stream.result
        run.error = repr(stream.error) if stream.error is not None else ""
        for e in run.events:
            if e.HasField("tool_call_finished"):
                for line in e.tool_call_finished.content_preview.splitlines():
                    with contextlib.suppress(ValueError, TypeError):
                        report = json.loads(line)
                        if isinstance(report, dict) and "probe" in report:
                            run.reports[report["probe"]] = report
        self.outcome.phases[name] = run
        return run

    async def phases(self) -> None:
        ws = self.ws
        for name, tag, workdir, options in (
                ("legit-root", "[[legit-root]]", ws, {}),
                ("legit-inside", "[[legit-inside]]", ws / "proj", {}),
                ("repo-inplace", "[[repo-inplace]]", ws / "trap", {}),
                ("repo-worktree", "[[repo-worktree]]", ws / "wtrepo",
                 {"workspace": pb.WORKSPACE_MODE_GIT_WORKTREE, "worktree_retention": pb.WORKTREE_RETENTION_KEEP}),
                ("optin", "[[optin]]", ws / "optin", {"allow_repository_config_writes": True}),
                # Every family planted for the server's own git (issue 30.1): its diff of this phase,
                # then a worktree of the same repository made, diffed and removed.
                ("hostgit", "[[hostgit]]", ws / "hostgit", {"allow_repository_config_writes": True}),
                ("hostgit-wt", "[[hostgit-wt]]", ws / "hostgit", {"workspace": pb.WORKSPACE_MODE_GIT_WORKTREE}),
                # The repository's core.worktree pointed outside: the server's diff must stay here.
                ("hostgit-redirect", "[[hostgit-redirect]]", ws / "redirect", {"allow_repository_config_writes": True}),
                ("forkbomb", "[[forkbomb]]", ws / "limits", {"pids_limit": PIDS_LIMIT})):
            await self.finish(name, self.start(name, tag, workdir, **options))
        # What the server's own git ran, before the user's git below runs anything.
        self.outcome.effects["host_git_markers"] = sorted(n for n in os.listdir(self.markers) if n.startswith("hg-"))
        # The floods, each while a neighbour of another job streams.
        for flood in ("line", "output", "egress", "disk"):
            flooding = self.start(flood, f"[[{flood}]]", ws / "limits",
                                  **({"workspace_max_bytes": DISK_CAP} if flood == "disk" else {}))
            await flooding.wait_for(lambda e: e.HasField("tool_call_started"), limit=120)
            neighbour = self.start(f"neighbour-{flood}", "[[neighbour]]", ws / "limits",
                                   include_partial_messages=True)
            started = time.monotonic()
            await self.finish(f"neighbour-{flood}", neighbour, limit=120)
            self.outcome.effects[f"neighbour_{flood}_seconds"] = round(time.monotonic() - started, 1)
            await self.finish(flood, flooding, limit=120)
        written = ws / "limits" / "hx-disk"
        big = written / "big.bin"
        self.outcome.effects["disk_big_bytes"] = big.stat().st_size if big.is_file() else None
        self.outcome.effects["disk_files"] = len(os.listdir(written)) if written.is_dir() else None
        shutil.rmtree(written, ignore_errors=True)

    def observe(self) -> None:
        """As the server's user would, outside any sandbox: git in each repository (each trap that
        survived creates its marker); and what the protected files hold now."""
        fx = self.outcome.effects
        for name in ("trap", "wtrepo"):
            fx[f"after_{name}"] = snapshot(self.ws / name)
        fx["before"] = self.before
        worktree = next((p for p in (self.root / "data" / "worktrees").rglob(".git") if p.is_file()), None) \
            if (self.root / "data" / "worktrees").is_dir() else None
        fx["worktree"] = str(worktree.parent) if worktree else ""
        if worktree is not None:  # what the kept worktree's redirects say now
            fx["worktree_gitfile"] = worktree.read_text().strip()
            own = Path(fx["worktree_gitfile"].removeprefix("gitdir:").strip())
            fx["worktree_commondir"] = (own / "commondir").read_text().strip() if (own / "commondir").is_file() else "-"
            fx["wtrepo_common"] = str((self.ws / "wtrepo" / ".git").resolve())
        runs = []
        for repo in [self.ws / "trap", self.ws / "wtrepo", *([worktree.parent] if worktree else [])]:
            for args in (("status",), ("st",), ("diff", "HEAD~1"), ("checkout", "-q", "-b", "after-box"),
                         ("commit", "-q", "--allow-empty", "-m", "after"), ("submodule", "update", "--init")):
                done = _git(repo, *args, env={"GIT_ALLOW_PROTOCOL": "ext:file"}, user=self.user)
                runs.append((str(repo), " ".join(args), done.returncode))
        fx["git_runs"] = runs
        fx["markers"] = sorted(os.listdir(self.markers))
        forked = self.ws / "limits" / "hxbox-forked"
        fx["forked"] = int(forked.read_text().strip() or 0) if forked.exists() else None
        optin = self.ws / "optin" / ".git" / "config"
        fx["optin_config"] = optin.read_text() if optin.exists() else ""

    async def run(self) -> BoxOutcome:
        try:
            with Registry(REGISTRY_HOST) as self.registry:
                self.lay_out()
                await self.start_server()
                await self.phases()
                self.outcome.effects["registry_requests"] = [path for path, _ in self.registry.requests]
            await asyncio.to_thread(self.observe)
            return self.outcome
        finally:
            await self.tear_down()

    async def tear_down(self) -> None:
        if self.channel is not None:
            await self.channel.close()
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                await asyncio.to_thread(self.proc.wait, 30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                await asyncio.to_thread(self.proc.wait, 10)
        log = self.root / "serve.log"
        self.outcome.effects["log_tail"] = log.read_text()[-4000:] if log.exists() else ""
        shutil.rmtree(self.root, ignore_errors=True)


AT_ONCE = 2


async def run_box_scenarios(scenarios: list[tuple[str, str]], claude: str,
                            scenario: type[BoxScenario] = BoxScenario) -> dict[tuple[str, str], Any]:
    """Each scenario (of class ``scenario``), ``AT_ONCE`` at a time; its outcome or what it raised (a skip included)."""
    gate = asyncio.Semaphore(AT_ONCE)

    async def one(mode: str, user: str) -> BoxOutcome:
        if os.geteuid() != 0:
            pytest.skip("stages servers as root and as nobody: needs root")
        if user == "nobody" and nobody_python() is None:
            pytest.skip("needs root, setpriv and a Python that nobody can run")
        async with gate:
            return await scenario(mode, user, claude).run()

    results = await asyncio.gather(*(one(m, u) for m, u in scenarios), return_exceptions=True)
    return dict(zip(scenarios, results, strict=True))
