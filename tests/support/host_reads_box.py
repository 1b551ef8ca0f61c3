"""A real server in each sandbox mode, as root and as nobody, whose phases lay links for what the
server later moves, reads and deletes of what they wrote (tests/security/test_attack_host_reads.py).

Built on ``phase_box.BoxScenario`` (its server, its modes and users, its tear-down), with phases of
its own, each told apart by a tag in its prompt:

- ``[[sessions]]``: the phase makes its CLI's ``~/.claude/projects`` a link to a directory outside
  its home, shaped like another phase's (``outside/projects/-w-victim/<session>.jsonl`` and the
  session's subagent directory). At its end the server keeps the phase's session transcripts for
  resume, moving them out of ``projects``;
- ``[[removal]]``: in a git worktree the server removes after it (retention ``REMOVE``), the phase
  plants links to a directory outside (``outside/keep``), at the top, in a subdirectory and in its
  home, which the server removes too.

Afterwards the outside directories are compared with what they held, and the data dir's session
store is searched for the victim's bytes.
"""

from __future__ import annotations

import asyncio
import os
import time

from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.offline import Reply, RequestMatcher, Script
from support.phase_box import NOBODY, BoxScenario, _repo

VICTIM = "9d1e0f00-aaaa-4bbb-8ccc-ddddeeeeffff"
SECRET = b'{"secret": "another phase\'s transcript, hr-7f3a"}\n'
KEPT = b"a file outside every workspace, hr-keep\n"


class HostReadsScenario(BoxScenario):
    """One (mode, user) scenario of the module docstring; ``run()`` returns the outcome, torn down."""

    def __init__(self, mode: str, user: str, claude: str):
        super().__init__(mode, user, claude)
        self.outside = self.root / "outside"

    def script(self) -> Script:
        def turns(tag: str, command: str) -> list[Reply]:
            match = RequestMatcher(first_user_contains=tag)
            return [Reply(content=r.content, match=match, label=tag) for r in (
                Reply.tool_use("Bash", {"command": command, "timeout": 120000}), Reply.text(f"{tag} done"))]

        out = self.outside
        return Script([
            *turns("[[sessions]]", f"cd ~/.claude && mv projects projects.own && ln -s {out}/projects projects "
                                   "&& ls -la ~/.claude && echo planted"),
            *turns("[[removal]]", f"ln -s {out}/keep keeplink && ln -s {out}/keep/file filelink && mkdir -p sub "
                                  f"&& ln -s {out}/keep sub/deeplink && ln -s {out}/keep ~/homelink "
                                  "&& ls -la . sub && echo planted"),
        ])

    def lay_out(self) -> None:
        self.markers.mkdir()
        _repo(self.ws)
        _repo(self.ws / "hr")
        victim = self.outside / "projects" / "-w-victim"
        (victim / VICTIM).mkdir(parents=True)
        (victim / f"{VICTIM}.jsonl").write_bytes(SECRET)
        (victim / VICTIM / "agent.jsonl").write_bytes(SECRET)
        (self.outside / "keep").mkdir()
        (self.outside / "keep" / "file").write_bytes(KEPT)
        self.before = self.outside_files()
        self.script().save(self.root / "script.json")
        (self.root / "home").mkdir()
        if self.user == "nobody":
            for p in [self.root, *self.root.rglob("*")]:
                os.lchown(p, NOBODY, NOBODY)

    def outside_files(self) -> dict[str, bytes]:
        """Every file the outside directories held (path -> bytes)."""
        return {str(p.relative_to(self.outside)): p.read_bytes()
                for p in sorted(self.outside.rglob("*")) if p.is_file() and not p.is_symlink()}

    async def phases(self) -> None:
        hr = self.ws / "hr"
        for name, tag, options in (
                ("sessions", "[[sessions]]", {}),
                ("removal", "[[removal]]", {"workspace": pb.WORKSPACE_MODE_GIT_WORKTREE,
                                            "worktree_retention": pb.WORKTREE_RETENTION_REMOVE})):
            await self.finish(name, self.start(name, tag, hr, **options))
        # The worktree's retention applies after the phase's stream has ended: wait for it (bounded).
        manifest = self.root / "data" / "worktrees" / "box-removal" / "p.json"
        deadline = time.monotonic() + 60
        while manifest.exists() and time.monotonic() < deadline:  # noqa: ASYNC110 - a file, no event
            await asyncio.sleep(0.1)

    def observe(self) -> None:
        fx = self.outcome.effects
        after = self.outside_files()
        fx["outside_lost"] = {path: len(data) for path, data in self.before.items() if after.get(path) != data}
        sessions = self.root / "data" / "sandbox" / "sessions"
        fx["store_files"] = sorted(str(p.relative_to(sessions)) for p in sessions.rglob("*")) \
            if sessions.is_dir() else []
        fx["store_has_secret"] = any(SECRET in p.read_bytes() for p in sessions.rglob("*")
                                     if p.is_file() and not p.is_symlink()) if sessions.is_dir() else False
        worktrees = self.root / "data" / "worktrees"
        fx["worktrees_left"] = sorted(str(p.relative_to(worktrees)) for p in worktrees.rglob("*")) \
            if worktrees.is_dir() else []

    async def run(self):  # no registry: these phases install nothing
        try:
            self.registry = _NoRegistry()
            self.lay_out()
            await self.start_server()
            await self.phases()
            self.observe()
            return self.outcome
        finally:
            await self.tear_down()


class _NoRegistry:
    address = "127.0.0.2:9"
