"""Replicas as separate `helix-runner serve` processes on one PostgreSQL database, for the cluster
tests (tests/api/test_three_replicas.py, tests/api/test_handover_cluster.py) and the hand-over
benchmark: start them together, restart one (SIGTERM, wait, start again on the same port, data dir
and replica id, as a Kubernetes StatefulSet pod comes back), kill one, and reach them one by one or
all at once through a round-robin channel that stands in for a Kubernetes Service.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from helix.runner.v1 import runner_service_pb2_grpc as pb_grpc
from helix_runner.offline import Reply, Script
from helix_runner.offline.script import RequestMatcher
from helix_runner.process.containment import MARKER_NAME, instance_id
from helix_runner.process.procfs import marked
from support.processes import serve_argv, serve_env, serving_port
from support.streams import Stream

NAMES = ("a", "b", "c")
# The file that marks a workspace root as a volume every replica mounts at the same path: only a
# phase under such a root can move to another replica (issue 24; phases/handover.py SHARED_MARKER).
SHARED_MARKER = ".helix-runner-shared"


def shared_workspace(path: Path) -> Path:
    """``path`` made a workspace root every replica shares (created, with the marker file)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / SHARED_MARKER).write_text("")
    return path


def free_port() -> int:
    """A free port a replica keeps across restarts, below the kernel's ephemeral range: a port the
    kernel hands out itself (a bind to port 0, an outgoing connection's local end: the phases' CLIs,
    the gateways, the scripted APIs) could be taken while the replica is down, and its restart fail."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(max(1024, low - 12000), low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port below the ephemeral range")


@dataclass
class Replica:
    """One `helix-runner serve` child: its directories, its process and a channel to it."""

    name: str
    root: Path
    proc: subprocess.Popen
    log: Path
    argv: list[str] = field(default_factory=list, repr=False)
    env: dict[str, str] = field(default_factory=dict, repr=False)
    port: int = 0
    channel: grpc.aio.Channel | None = None
    stub: pb_grpc.RunnerServiceStub | None = field(default=None, repr=False)
    starts: int = 1
    retired: list[grpc.aio.Channel] = field(default_factory=list, repr=False)  # channels of earlier starts

    @property
    def replica_id(self) -> str:
        return f"replica-{self.name}"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def workdir(self) -> Path:
        return self.root / "work"

    def scope_processes(self) -> list[int]:
        """Live processes carrying this replica's containment marker (any of its phases)."""
        return marked(f"{MARKER_NAME}={instance_id(self.data_dir)}.".encode())

    async def connect(self, limit_s: float = 60.0) -> None:
        """Waits (bounded) for the "serving" line, then opens a channel to the port it names."""
        self.port = await asyncio.to_thread(serving_port, self.log, self.proc, limit_s)
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{self.port}")
        self.stub = pb_grpc.RunnerServiceStub(self.channel)

    async def close_channel(self) -> None:
        """Closes every channel this replica had (at the cluster's end)."""
        self.retire_channel()
        for channel in self.retired:
            await channel.close()
        self.retired.clear()

    def retire_channel(self) -> None:
        """The server is gone: no new calls through its channel, but the calls on it end as the
        server left them (closing it now would cancel them locally, before the UNAVAILABLE arrives)."""
        if self.channel is not None:
            self.retired.append(self.channel)
            self.channel, self.stub = None, None

    async def stop(self, limit_s: float = 60.0) -> int:
        """SIGTERM (the server drains), then waits up to ``limit_s`` for the exit; returns its code."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return await asyncio.to_thread(self.proc.wait, limit_s)
        finally:
            self.retire_channel()

    async def kill(self) -> None:
        """SIGKILL of the server process only (its phases' processes end by containment)."""
        os.kill(self.proc.pid, signal.SIGKILL)
        await asyncio.to_thread(self.proc.wait, 10)
        self.retire_channel()

    async def start_again(self, limit_s: float = 60.0) -> None:
        """Starts the same server again (same arguments, data dir, replica id; the log appended)."""
        assert self.proc.poll() is not None, "start_again after stop or kill"
        # serving_port reads the first "serving" line: the previous start's log is kept aside.
        self.log.rename(self.root / f"serve.{self.starts}.log")
        self.starts += 1
        self.proc = _popen(self.argv, self.env, self.log)
        await self.connect(limit_s)

    def logs(self) -> str:
        """Every start's log, for a failing assertion's message."""
        parts = sorted(self.root.glob("serve*.log"))
        return "\n".join(p.read_text(errors="replace")[-20000:] for p in parts)


def _popen(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "w") as stderr:
        return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=stderr, start_new_session=True)  # fmt: skip


def spawn(
    root: Path,
    name: str,
    database_url: str,
    args: list[str],
    env: dict[str, str],
    *,
    port: int = 0,
    workspace_root: Path | None = None,
) -> Replica:
    """Starts `helix-runner serve` as replica ``replica-<name>`` under ``root`` (not waited for)."""
    root.mkdir()
    (root / "work").mkdir()
    log = root / "serve.log"
    argv = serve_argv(sys.executable, root, "--database-url", database_url, "--replica-id", f"replica-{name}",
                      "--port", str(port), *args, workspace_root=workspace_root)  # fmt: skip
    full_env = {**serve_env(root), **env}
    return Replica(name, root, _popen(argv, full_env, log), log, argv, full_env)


@contextlib.asynccontextmanager
async def cluster(
    tmp_path: Path,
    database_url: str,
    *args: str,
    env: dict[str, str] | None = None,
    fixed_ports: bool = False,
    workspace_root: Path | None = None,
):
    """Replicas a, b and c (started together) on one database; all stopped (SIGTERM, then SIGKILL)
    after, and every process of their phases ended. ``fixed_ports``: each listens on a port chosen
    here, kept across ``start_again`` (so ``service_target`` stays right); ``workspace_root``: one
    workspace root for all three (a volume every replica reaches), else each has its own."""
    ports = [free_port() if fixed_ports else 0 for _ in NAMES]
    group = [
        spawn(tmp_path / n, n, database_url, list(args), env or {}, port=p, workspace_root=workspace_root)
        for n, p in zip(NAMES, ports, strict=True)
    ]
    try:
        await asyncio.gather(*(r.connect() for r in group))
        yield group
    finally:
        await shutdown(group)


async def shutdown(group: list[Replica]) -> None:
    for replica in group:
        await replica.close_channel()
        if replica.proc.poll() is None:
            replica.proc.send_signal(signal.SIGTERM)
    for replica in group:
        try:
            await asyncio.to_thread(replica.proc.wait, 30)
        except subprocess.TimeoutExpired:
            os.killpg(replica.proc.pid, signal.SIGKILL)
            replica.proc.wait(10)
        for pid in replica.scope_processes():  # nothing of a phase may outlive the test
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def service_target(group: list[Replica]) -> str:
    """One gRPC target naming every replica (``ipv4:`` with several addresses); with
    ``SERVICE_OPTIONS`` a channel spreads calls over them round-robin and skips one that is down,
    as a Kubernetes Service does. Needs ``fixed_ports`` so a restarted replica keeps its address."""
    return "ipv4:" + ",".join(f"127.0.0.1:{r.port}" for r in group)


SERVICE_OPTIONS = [("grpc.lb_policy_name", "round_robin")]


def done(k: int) -> str:
    return f"<done-{k}>"


SHORT = "[short]"
"""In a phase's prompt: with ``stepped_script(short=n)``, the phase ends after n steps."""


def stepped_script(steps: int, sleep_s: float, *, short: int | None = None) -> Script:
    """A script a phase can follow across replicas (each has its own scripted API, which counts
    turn uses per session and per process): every step is chosen by what the conversation holds.
    ``steps`` Bash calls, then a final text. Step k sleeps, appends k to ``steps.txt`` in the
    phase's directory and prints ``<done-k>`` (written in the command so that the command itself
    never contains it); it is served while the conversation holds ``<done-(k-1)>`` and not
    ``<done-k>``. ``times`` is per session and per stand-in: never the limit here.
    A phase whose prompt holds ``SHORT`` ends after ``short`` steps instead (its end turn comes
    first, so it is served before step ``short + 1``)."""
    turns = []
    if short is not None:
        end = RequestMatcher(first_user_contains=SHORT, contains=done(short))
        turns.append(Reply.text("Short phase done.", match=end, times=1000, label="short end"))
    for k in range(1, steps + 1):
        command = f'sleep {sleep_s}; echo {k} >> steps.txt; echo "<done-$(({k - 1}+1))>"'
        match = RequestMatcher(contains=done(k - 1) if k > 1 else None, not_contains=done(k))
        turns.append(Reply.tool_use("Bash", {"command": command, "description": f"step {k}"}, match=match,
                                    times=1000, label=f"step {k}"))  # fmt: skip
    turns.append(
        Reply.text("All steps done.", match=RequestMatcher(contains=done(steps)), times=1000, label="end")
    )
    return Script(turns)


def follow(call) -> Stream:
    """Waits up to 60 s for an event (phases here cross three processes); an RPC error is kept in
    ``error`` (tests expect some streams to break)."""
    return Stream(call, wait_limit=60.0, keep_error=True)


# A fake CLI for scale tests: the init line, LINES assistant texts "i=<k>" paced STEP seconds
# apart, a success result; then it waits for stdin EOF as the real one does. Control requests
# (the server's `initialize`) get a success answer.
FAKE_CLI = r"""#!{python} -IS
import json, os, sys, time
N = int(os.environ.get("HELIX_TEST_LINES", "20"))
STEP = float(os.environ.get("HELIX_TEST_STEP", "0.005"))
SID = "f0000000-0000-4000-8000-%012x" % os.getpid()
def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()
def answer(msg):
    if msg.get("type") == "control_request":
        out({{"type": "control_response", "response": {{"subtype": "success",
             "request_id": msg.get("request_id"), "response": {{}}}}}})
for line in sys.stdin:
    if line.strip():
        msg = json.loads(line)
        if msg.get("type") == "user":
            break
        answer(msg)
out({{"type": "system", "subtype": "init", "cwd": os.getcwd(), "session_id": SID, "tools": [],
     "model": "claude-sonnet-4-5", "permissionMode": "default", "claude_code_version": "2.1.330", "uuid": SID}})
for i in range(1, N + 1):
    time.sleep(STEP)
    out({{"type": "assistant", "session_id": SID, "parent_tool_use_id": None, "uuid": "u-%d" % i,
         "message": {{"id": "msg_%d" % i, "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                     "content": [{{"type": "text", "text": "i=%d" % i}}], "stop_reason": None,
                     "usage": {{"input_tokens": 10, "output_tokens": 1}}}}}})
out({{"type": "result", "subtype": "success", "is_error": False, "duration_ms": 5, "duration_api_ms": 4,
     "num_turns": 1, "result": "done", "session_id": SID, "total_cost_usd": 0.0,
     "usage": {{"input_tokens": 10, "output_tokens": N}}}})
for line in sys.stdin:
    if line.strip():
        answer(json.loads(line))
"""


def write_fake_cli(directory: Path) -> Path:
    """``FAKE_CLI`` as an executable under ``directory``, run by this interpreter's base Python."""
    fake = directory / "fake-claude"
    fake.write_text(
        FAKE_CLI.format(python=os.path.realpath(getattr(sys, "_base_executable", sys.executable)))
    )
    fake.chmod(0o755)
    return fake
