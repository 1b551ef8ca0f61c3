"""The real Helix Runner server in-process, with its child environment pointed at a scripted API."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from helix.runner.v1 import runner_service_pb2 as pb
from helix.runner.v1 import runner_service_pb2_grpc as pb_grpc
from helix_runner.config import load_config
from helix_runner.offline import ScriptedApi
from helix_runner.server import RunningServer, start_server
from helix_runner.telemetry import Telemetry
from support.test_claude import test_claude


@dataclass
class RunnerHarness:
    """A started server, a channel to it, and the directories a test works in."""

    server: RunningServer
    channel: grpc.aio.Channel
    stub: pb_grpc.RunnerServiceStub
    workdir: Path
    data_dir: Path

    async def run_phase(self, prompt: str, *, job_id: str = "job-1", phase_id: str = "p1", deadline: float = 60,
                        **options: Any) -> tuple[list[Any], Any]:
        """RunPhase to the end: (every StreamEvent in order, the PhaseResult). Bounded by ``deadline``."""
        request = pb.RunPhaseRequest(job_id=job_id, phase_id=phase_id, prompt=prompt, working_dir=str(self.workdir),
                                     options=pb.PhaseOptions(**options))
        return await collect(self.stub.RunPhase(request, timeout=deadline))


async def collect(call) -> tuple[list[Any], Any]:
    """Reads a RunPhase/WatchPhase stream; asserts the result is the last message."""
    events: list[Any] = []
    result = None
    async for response in call:
        assert result is None, "nothing may follow the PhaseResult"
        if response.HasField("result"):
            assert not response.events
            result = response.result
        else:
            assert response.events, "a response carries events or the result"
            events.extend(response.events)
    return events, result


async def start_runner(tmp_path: Path, api: ScriptedApi | None, *, claude_path: str | None = None,
                       telemetry: Telemetry | None = None, server_env_extra: dict[str, str] | None = None,
                       **config: Any) -> AsyncIterator[RunnerHarness]:
    """The server in-process; ``telemetry`` replaces the one the config would build, ``server_env_extra``
    adds to the server's environment (what children may inherit)."""
    home = tmp_path / "home"
    workdir = tmp_path / "work"
    data_dir = tmp_path / "data"
    for d in (home, workdir):
        d.mkdir(exist_ok=True)
    if api is not None:
        server_env = api.cli_env(home, max_retries=2)
    else:
        server_env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home)}
    server_env.update(server_env_extra or {})
    # Retries are off unless a test asks for them (config or PhaseOptions.retry): the fault tests
    # check how one attempt ends, and the retry tests set their own (tiny) backoffs.
    flags = {"port": 0, "data_dir": str(data_dir), "workspace_roots": [str(tmp_path)],
             "claude_path": claude_path or test_claude() or None, "retry_max_attempts": 1, **config}
    cfg = load_config(flags=flags, environ={})
    server = await start_server(cfg, server_env=server_env, telemetry=telemetry)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        yield RunnerHarness(server, channel, pb_grpc.RunnerServiceStub(channel), workdir, data_dir)
    finally:
        await channel.close()
        await server.drain(2.0)


@contextlib.asynccontextmanager
async def replica_pair(
    tmp_path: Path, database_url: str, api_a: ScriptedApi | None, api_b: ScriptedApi | None, **config: Any
) -> AsyncIterator[tuple[RunnerHarness, RunnerHarness]]:
    """In-process replicas ``replica-a`` and ``replica-b`` on one database, each in its own directory
    under ``tmp_path`` (its workspace and data dir), talking to its own scripted API (None: none)."""
    async with contextlib.AsyncExitStack() as stack:
        pair = []
        for name, api in (("a", api_a), ("b", api_b)):
            root = tmp_path / name
            root.mkdir()
            harness = start_runner(root, api, database_url=database_url, replica_id=f"replica-{name}", **config)
            pair.append(await anext(harness))
            stack.push_async_callback(harness.aclose)
        yield pair[0], pair[1]
