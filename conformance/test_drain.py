"""Cross-language conformance with a drain in the middle: the phase a stream follows moves to another
replica, and every client (Rust, TypeScript, Python) and the web page must follow it by itself.

Two replicas (`helix-runner serve` processes, offline mode, the real CLI) share one PostgreSQL
database and one workspace root. The clients reach them through a stand-in for a Kubernetes Service
(``support/service_proxy.py``): new connections go to the replicas marked ready. Each participant
starts the ``drain`` scenario's phase on replica A; once the phase's first tool runs, the runner
takes A out of the Service and sends it SIGTERM. A drains: it hands the phase over at the tool's end
and ends the stream with ``UNAVAILABLE`` / ``PHASE_MOVED``; B adopts the phase and resumes it. The
participant must show one gap-free stream, each event once, the move told to its hook, and the
result; the client programs' transcripts must equal ``golden-drain.json``. A is started again for
the next participant.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from test_conformance import HERE, LANGUAGES, PROGRAM_TIMEOUT, ROOT, client_env, describe_difference, program

sys.path.insert(0, str(ROOT / "tests"))  # the shared test support: PostgreSQL, replicas, the Service

from support.cluster import Replica, free_port, shared_workspace, shutdown, spawn
from support.service_proxy import ServiceProxy

pytestmark = [pytest.mark.real_cli, pytest.mark.slow]

GOLDEN = HERE / "golden-drain.json"
# The drain waits for the tool boundary (step 1's tool takes about 3 s), then saves and releases the
# phase; A's exit follows. Bounds, not expectations.
ENV = {"HELIX_RUNNER_HANDOVER_WAIT_SECONDS": "10", "HELIX_RUNNER_DRAIN_GRACE_SECONDS": "20"}
STOP_LIMIT_S = 50
STARTED_LIMIT_S = 60


@pytest.fixture(scope="module")
def postgres() -> Iterator[object]:
    """A throwaway PostgreSQL cluster for this module (skips, saying why, if none starts)."""
    from support.postgres import PostgresCluster, PostgresUnavailable

    try:
        cluster = PostgresCluster().start()
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))
    yield cluster
    cluster.stop()


class Pair:
    """Replicas A and B behind one Service for gRPC and one for the dashboard's HTTP port."""

    def __init__(self, a: Replica, b: Replica, grpc_service: ServiceProxy, web_service: ServiceProxy,
                 web_ports: dict[str, int], workdir: Path):
        self.a, self.b = a, b
        self.grpc, self.web = grpc_service, web_service
        self.web_ports = web_ports
        self.workdir = workdir

    async def drain_a(self) -> None:
        """A leaves the Services' endpoints (its readiness fails), then drains and exits."""
        self.grpc.endpoints = [self.b.port]
        self.web.endpoints = [self.web_ports["b"]]
        code = await self.a.stop(STOP_LIMIT_S)
        assert code == 0, f"replica A exited with {code} after the drain:\n{self.a.logs()[-6000:]}"


@pytest.fixture
async def pair(postgres, tmp_path: Path) -> AsyncIterator[Pair]:
    from helix_runner.process.claude_locator import ClaudeNotFoundError, locate_claude

    try:
        locate_claude()
    except ClaudeNotFoundError as exc:
        pytest.skip(str(exc))
    url = postgres.create_database("drain")
    workdir = shared_workspace(tmp_path / "shared")
    web_ports = {"a": free_port(), "b": free_port()}
    replicas = []
    for name in ("a", "b"):
        args = ["--offline-script", str(HERE / "script.json"), "--web-port", str(web_ports[name])]
        replicas.append(spawn(tmp_path / name, name, url, args, ENV, port=free_port(), workspace_root=workdir))
    a, b = replicas
    try:
        await asyncio.gather(a.connect(), b.connect())
        async with ServiceProxy([a.port]) as grpc_service, ServiceProxy([web_ports["a"]]) as web_service:
            yield Pair(a, b, grpc_service, web_service, web_ports, workdir)
    finally:
        await shutdown(replicas)  # and every process of their phases ends


async def until_started(path: Path, proc: asyncio.subprocess.Process | None = None) -> None:
    """Waits (bounded) until step 1's tool wrote its file: the phase runs a tool on A."""
    for _ in range(int(STARTED_LIMIT_S / 0.1)):
        if await asyncio.to_thread(path.exists):
            return
        if proc is not None and proc.returncode is not None:
            out, err = await proc.communicate()
            pytest.fail(f"the program ended before the phase's first tool ran:\n{err.decode()}\n{out.decode()}")
        await asyncio.sleep(0.1)
    pytest.fail(f"the phase's first tool never ran ({path} missing)")


@pytest.mark.parametrize("language", LANGUAGES)
async def test_each_client_follows_a_phase_through_a_drain(language: str, pair: Pair) -> None:
    prefix = f"drain-{language}"
    started = pair.workdir / f"{prefix}-drain.started"
    command = program(language) + ["--address", pair.grpc.address, "--workdir", str(pair.workdir),
                                   "--scenarios", str(HERE / "scenarios.json"), "--prefix", prefix,
                                   "--scenario", "drain"]  # fmt: skip
    proc = await asyncio.create_subprocess_exec(*command, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                cwd=ROOT, env=client_env())  # fmt: skip
    try:
        await until_started(started, proc)
        await pair.drain_a()
        out, err = await asyncio.wait_for(proc.communicate(), PROGRAM_TIMEOUT)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, f"{language} program failed ({proc.returncode}):\n{err.decode()}\n{out.decode()}"
    transcript = json.loads(out)
    if language == "python" and os.environ.get("CONFORMANCE_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(transcript, indent=2, sort_keys=True) + "\n")
    golden = json.loads(GOLDEN.read_text())
    assert transcript == golden, f"{language} differs from golden-drain.json:\n{describe_difference(golden, transcript)}"
    # The phase really moved: A held it first, B finished it, and the caller's connections went to both.
    assert set(pair.grpc.connections) == {pair.a.port, pair.b.port}, pair.grpc.connections


async def test_the_web_page_follows_a_phase_through_a_drain(pair: Pair) -> None:
    from playwright.async_api import async_playwright
    from support.browser import artifacts_dir, chromium_path

    from helix.runner.v1 import resources_pb2 as res
    from helix.runner.v1 import runner_service_pb2 as pb

    chromium = chromium_path()
    if chromium is None:
        pytest.skip("no chromium: scripts/install-browser installs Debian's package (scripts/test runs it)")
    spec = json.loads((HERE / "scenarios.json").read_text())
    prefix = "drain-web"
    job = f"{prefix}-{spec['drain']['job']}"
    started = pair.workdir / f"{job}.started"
    options = spec["options"]
    request = pb.RunPhaseRequest(
        job_id=job, phase_id=spec["drain"]["phase_id"], project_id=prefix, prompt=spec["drain"]["prompt"],
        working_dir=str(pair.workdir),
        options=pb.PhaseOptions(model=options["model"], allowed_tools=options["allowed_tools"],
                                env={spec["long_tool"]["env"]: str(started)},
                                on_disconnect=res.ON_DISCONNECT_DETACH),
    )  # fmt: skip
    # Started on A; this caller leaves at once (the phase is detached) and only the page follows it.
    assert pair.a.stub is not None
    run = pair.a.stub.RunPhase(request, timeout=30)
    await run.read()
    run.cancel()
    errors: list[str] = []
    shots = artifacts_dir("dashboard")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium)
        try:
            page = await browser.new_page(viewport={"width": 1360, "height": 900})
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            await page.goto(f"http://{pair.web.address}/#/jobs/{job}/phases/{request.phase_id}")
            await until_started(started)
            await page.locator("[data-testid=event-log] .line").first.wait_for(timeout=30_000)
            await pair.drain_a()
            await page.wait_for_selector("[data-testid=phase-status][data-status=SUCCEEDED]", timeout=90_000)
            connection = page.locator("[data-testid=connection]")
            await page.wait_for_selector("[data-testid=connection].ended", timeout=30_000)
            await page.screenshot(path=shots / "moved.png")
            state = {k: await connection.get_attribute(f"data-{k}")
                     for k in ("moves", "last-sequence", "duplicates", "missing")}  # fmt: skip
            notice = await page.locator("[data-testid=moved-notice]").inner_text()
        finally:
            await browser.close()
    assert not errors, errors
    assert pair.b.stub is not None
    job_row = (await pair.b.stub.GetJob(pb.GetJobRequest(job_id=job), timeout=30)).job
    phase = job_row.phases[0]
    assert phase.status == res.PHASE_STATUS_SUCCEEDED
    replicas = [a.replica_id for a in phase.result.attempts]
    assert replicas[0] == "replica-a" and replicas[-1] == "replica-b", replicas
    assert state == {"moves": "1", "last-sequence": str(phase.result.last_sequence), "duplicates": "0",
                     "missing": "0"}, state  # fmt: skip
    assert "replica-a" in notice, notice
