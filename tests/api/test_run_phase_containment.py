"""Containment with the real CLI: whatever its Bash tools do, no process of a phase outlives it.

CLI 2.1.330 runs every Bash command in a session of its own, so before containment a phase that
SUCCEEDED could leave its background jobs running, a hard pause froze only the CLI, a cancel of a
hard-paused phase left the tool running re-parented to init, and recovery after ``kill -9`` of the
server killed the CLI's group but not its tools. Each case runs with the mechanism detection
picks here (``auto``: a cgroup) and with the subreaper fallback forced, and checks /proc at the
end: every pid the tools wrote down, and every process carrying the run's scope marker, is gone.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import grpc
import pytest
from support.processes import (
    SELF_IDENTITY,
    alive,
    find_process,
    scope_processes,
    serving_port,
    start_serve,
    wait_gone,
)
from support.streams import start_phase

from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix.runner.v1 import runner_service_pb2_grpc as pb_grpc
from helix_runner.api.errors import error_info
from helix_runner.offline import Reply, Script
from helix_runner.process import procfs
from helix_runner.process.containment import MARKER_NAME, instance_id

MODES = ["auto", "subreaper"]
# The phases run in the default sandbox, a PID namespace among its layers: the tools write down who
# they are (support.processes.SELF_IDENTITY: their pid in their own namespace and their start
# time), and the test finds them on the host from that (find_process).

# Helpers the Bash tool runs (a standalone `sleep N` is refused by the CLI's Bash tool).
SLEEPER = f"import os, sys, time\nopen(sys.argv[1], 'w').write({SELF_IDENTITY})\ntime.sleep(120)\n"
# Counts to N, one tick per 0.1 s, writing the count (a hard pause must hold it).
TICKER = textwrap.dedent("""
    import os, sys, time
    open(sys.argv[1] + ".pid", "w").write(IDENTITY)
    for i in range(1, int(sys.argv[2]) + 1):
        open(sys.argv[1], "w").write(str(i))
        time.sleep(0.1)
""").replace("IDENTITY", SELF_IDENTITY)
# Returns once every named file exists (so the tool's jobs are known before it returns).
WAIT_FOR = textwrap.dedent("""
    import os, sys, time
    deadline = time.monotonic() + 30
    while not all(os.path.exists(p) and open(p).read() for p in sys.argv[1:]) and time.monotonic() < deadline:
        time.sleep(0.02)
""")
ESCAPES = (
    "nohup python3 sleeper.py nohup.pid >/dev/null 2>&1 &\n"
    "setsid python3 sleeper.py setsid.pid >/dev/null 2>&1 </dev/null &\n"
    "( python3 sleeper.py fork.pid >/dev/null 2>&1 & )\n"
    "python3 wait_for.py nohup.pid setsid.pid fork.pid; echo started"
)
JOB_FILES = ("nohup.pid", "setsid.pid", "fork.pid")


def helpers(workdir: Path) -> None:
    (workdir / "sleeper.py").write_text(SLEEPER)
    (workdir / "ticker.py").write_text(TICKER)
    (workdir / "wait_for.py").write_text(WAIT_FOR)


def identities(workdir: Path, *names: str) -> list[str]:
    """What the tools wrote down about themselves (``SELF_IDENTITY``)."""
    return [(workdir / name).read_text() for name in names]


async def host_pid(path: Path) -> int:
    """The host pid of the live tool that wrote ``path``."""
    identity = await wait_file(path)
    pid = find_process(identity)
    assert pid is not None, f"no live process wrote {identity!r}"
    return pid


async def until(predicate, limit: float = 30.0) -> None:
    """Polls ``predicate`` (files, process tables: nothing to await) until true; bounded."""
    async with asyncio.timeout(limit):
        while not predicate():  # noqa: ASYNC110 - nothing to wait on but the file system / /proc
            await asyncio.sleep(0.05)


async def wait_file(path: Path, limit: float = 30.0) -> str:
    await until(lambda: path.exists() and path.read_text().strip(), limit)
    return path.read_text().strip()


def expected_mode(setting: str) -> set[int]:
    if setting == "subreaper":
        return {res.CONTAINMENT_MODE_SUBREAPER}
    return {res.CONTAINMENT_MODE_CGROUP_V2, res.CONTAINMENT_MODE_CGROUP_V1, res.CONTAINMENT_MODE_SUBREAPER}


def assert_contained_and_gone(result, data_dir: Path, setting: str, *tools: int | str) -> None:
    """Nothing of the phase is left: its tools (host pids, or what they wrote about themselves),
    its marked processes, its cgroup; and it ran in the sandbox's PID namespace."""
    containment = result.diagnostics.containment
    assert containment.mode in expected_mode(setting)
    assert {layer.name: layer.active for layer in result.diagnostics.sandbox.layers}["namespaces"]
    assert [t for t in tools if (alive(t) if isinstance(t, int) else find_process(t) is not None)] == []
    assert scope_processes(data_dir, result.diagnostics.recording_path) == []
    if containment.mode != res.CONTAINMENT_MODE_SUBREAPER:
        assert containment.cgroup_paths and not any(Path(p).exists() for p in containment.cgroup_paths)


def script(command: str) -> list[Reply]:
    return [Reply.tool_use("Bash", {"command": command}), Reply.text("done")]


@pytest.mark.real_cli
@pytest.mark.parametrize("setting", MODES)
async def test_background_setsid_and_double_forked_jobs_end_with_the_phase(
    setting, claude_binary, scripted_api, runner_factory
):
    api = scripted_api(script(ESCAPES))
    async with runner_factory(api, containment=setting) as runner:
        helpers(runner.workdir)
        events, result = await runner.run_phase("go", allowed_tools=["Bash"], deadline=90)
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        finished = [e.tool_call_finished for e in events if e.HasField("tool_call_finished")]
        assert "started" in finished[0].content_preview  # the jobs really ran...
        assert_contained_and_gone(
            result, runner.data_dir, setting, *identities(runner.workdir, *JOB_FILES)
        )  # ...and are gone


@pytest.mark.real_cli
@pytest.mark.parametrize("setting", MODES)
async def test_hard_pause_stops_the_running_tool_until_resume(
    setting, claude_binary, scripted_api, runner_factory
):
    # The ticker runs in a session of its own, as every Bash command does.
    api = scripted_api(script("setsid python3 ticker.py ticks 30; echo done"))
    async with runner_factory(api, containment=setting) as runner:
        helpers(runner.workdir)
        phase = start_phase(runner, "hard", allowed_tools=["Bash"])
        ticks = runner.workdir / "ticks"
        tool = await host_pid(runner.workdir / "ticks.pid")
        await until(lambda: ticks.exists() and int(ticks.read_text() or "0") >= 3)
        paused = (
            await runner.stub.PausePhase(
                pb.PausePhaseRequest(**phase.ids(), mode=pb.PAUSE_MODE_HARD), timeout=20
            )
        ).phase
        assert paused.status == res.PHASE_STATUS_PAUSED
        live = runner.server.service.get_live("hard", "p").run
        cli = live.supervisor.pid
        phase_pids = [p for p in live.plan.scope.processes() if p != live.plan.scope.shim_pid]
        assert tool in phase_pids and cli in phase_pids
        assert {p: procfs.process_state(p) for p in phase_pids} == dict.fromkeys(phase_pids, "T")
        count = ticks.read_text()
        await asyncio.sleep(1.0)  # ten ticks' worth
        assert ticks.read_text() == count and procfs.process_state(tool) == "T"
        inspection = (
            await runner.stub.InspectPhase(pb.InspectPhaseRequest(**phase.ids()), timeout=10)
        ).inspection
        assert inspection.hard_paused and inspection.containment.mode in expected_mode(setting)
        assert inspection.containment.process_count == len(phase_pids) + 1  # and the shim
        if inspection.containment.mode != res.CONTAINMENT_MODE_SUBREAPER and inspection.containment.cgroup_paths:
            # The cgroup holds the whole sandbox (the CLI alone takes well over 10 MB).
            if inspection.containment.HasField("memory_current_bytes"):
                assert inspection.containment.memory_current_bytes > 10 << 20
        await runner.stub.ResumePhase(pb.ResumePhaseRequest(**phase.ids()), timeout=10)
        assert procfs.process_state(tool) != "T"
        result = await phase.finish(90)
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    assert ticks.read_text() == "30"  # it carried on from where it was stopped
    assert_contained_and_gone(result, runner.data_dir, setting, tool, cli)


@pytest.mark.real_cli
@pytest.mark.parametrize(
    ("setting", "how"), [("auto", "cancel"), ("subreaper", "cancel"), ("auto", "disconnect")]
)
async def test_cancel_while_hard_paused_ends_the_stopped_tool(
    setting, how, claude_binary, scripted_api, runner_factory
):
    api = scripted_api(script("setsid python3 sleeper.py tool.pid; echo done"))
    async with runner_factory(api, containment=setting) as runner:
        helpers(runner.workdir)
        phase = start_phase(runner, "cancel", allowed_tools=["Bash"])
        tool = await host_pid(runner.workdir / "tool.pid")
        await runner.stub.PausePhase(pb.PausePhaseRequest(**phase.ids(), mode=pb.PAUSE_MODE_HARD), timeout=20)
        live = runner.server.service.get_live("cancel", "p").run
        cli, shim = live.supervisor.pid, live.plan.scope.shim_pid
        assert procfs.process_state(tool) == "T"
        if how == "cancel":
            await runner.stub.CancelPhase(pb.CancelPhaseRequest(**phase.ids(), reason="stop it"), timeout=30)
            result = await phase.finish(90)
        else:
            phase.call.cancel()
            await until(lambda: runner.server.service.get_live("cancel", "p") is None)
            row = runner.server.service.require_phase("cancel", "p")
            result = res.PhaseResult.FromString(row.result_pb)
    assert result.status == res.PHASE_STATUS_CANCELLED, result.reason
    assert_contained_and_gone(result, runner.data_dir, setting, tool, cli, shim)


def _kill_server_and_shims(server: subprocess.Popen, data_dir: Path) -> list[int]:
    """kill -9 of the phase shims, then of the server (so the shims' parent-death cleanup cannot
    run): only recovery can end the tools now. Returns every pid of the phase."""
    marked = procfs.marked(f"{MARKER_NAME}={instance_id(data_dir)}.".encode())
    shims = {int(procfs.stat_fields(p)[1]) for p in marked} - set(marked)
    assert shims, "the phase's shim was not found"
    for shim in shims:
        os.kill(shim, signal.SIGKILL)
    os.killpg(server.pid, signal.SIGKILL)
    server.wait(10)
    return [*marked, *shims]


@pytest.mark.real_cli
@pytest.mark.parametrize(("setting", "pid_namespace"), [("auto", True), ("subreaper", True), ("auto", False),
                                                         ("subreaper", False)])
async def test_server_kill_9_then_restart_ends_the_running_tools(setting, pid_namespace, claude_binary, tmp_path):
    """In the sandbox's PID namespace, the kill of the shims ends every tool at once (bubblewrap dies
    with its parent, and the namespace with its PID 1); without one (``namespaces`` off, as where
    user namespaces are refused), the tools outlive the kill and recovery must find and end them."""
    work = tmp_path / "work"
    work.mkdir()
    helpers(work)
    offline = tmp_path / "script.json"
    Script(
        script(
            "setsid python3 sleeper.py bg.pid >/dev/null 2>&1 </dev/null & python3 sleeper.py fg.pid; echo x"
        )
    ).save(offline)
    args = ("--offline-script", str(offline), "--containment", setting,
            *(() if pid_namespace else ("--sandbox-skip-layers", "namespaces")))
    log1 = tmp_path / "serve1.log"
    server = start_serve(tmp_path, log1, *args)
    try:
        port = await asyncio.to_thread(serving_port, log1, server)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.RunnerServiceStub(channel)
            call = stub.RunPhase(
                pb.RunPhaseRequest(
                    job_id="crash",
                    phase_id="p",
                    prompt="go",
                    working_dir=str(work),
                    options=pb.PhaseOptions(allowed_tools=["Bash"]),
                ),
                timeout=60,
            )
            reader = asyncio.create_task(call.read())
            tools = [await host_pid(work / name) for name in ("bg.pid", "fg.pid")]
            everything = _kill_server_and_shims(server, tmp_path / "data")
            reader.cancel()
            assert set(tools) <= set(everything)
    finally:
        if server.poll() is None:
            server.kill()
    if pid_namespace:
        assert wait_gone(everything) == []  # the kernel ended the PID namespace with the shim
    else:
        await asyncio.sleep(0.2)
        assert all(alive(p) for p in tools)  # orphaned and still running: what recovery used to miss

    log2 = tmp_path / "serve2.log"
    restarted = start_serve(tmp_path, log2, *args)
    try:
        port = await asyncio.to_thread(serving_port, log2, restarted)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.RunnerServiceStub(channel)
            (phase,) = (await stub.GetJob(pb.GetJobRequest(job_id="crash"), timeout=10)).job.phases
        assert phase.status == res.PHASE_STATUS_INTERRUPTED
        if not pid_namespace:
            assert "leftover process(es) of the phase were found and ended" in phase.status_reason
        assert wait_gone(everything) == []  # SIGKILLed at recovery; the kernel may take a moment
        assert procfs.marked(f"{MARKER_NAME}={instance_id(tmp_path / 'data')}.".encode()) == []
    finally:
        restarted.send_signal(signal.SIGTERM)
        restarted.wait(30)
    assert '"containment"' in log2.read_text()  # the mode is logged at start


async def test_memory_limit_oom_is_the_phases_terminal_reason(tmp_path, runner_factory):
    """A fake CLI (the real one needs ~200 MB to start) whose tool allocates past the limit."""
    claude = tmp_path / "fake-claude"
    claude.write_text(
        f"#!{sys.executable}\n"
        + textwrap.dedent("""
        import subprocess, sys, time
        sys.stdin.readline()
        print('{"type":"system","subtype":"init","session_id":"s-1","tools":["Bash"],"model":"m"}', flush=True)
        subprocess.run([sys.executable, "-c", "b = bytearray(512 << 20)"])
        time.sleep(60)
    """)
    )
    claude.chmod(0o755)
    async with runner_factory(None, claude_path=str(claude)) as runner:
        if "memory" not in runner.server.service.containment.limits_available:
            pytest.skip("no memory cgroup on this host")
        _, result = await runner.run_phase("hi", memory_limit_bytes=64 << 20, cpu_limit_millicores=500)
        inspection = (
            await runner.stub.InspectPhase(pb.InspectPhaseRequest(job_id="job-1", phase_id="p1"), timeout=10)
        ).inspection
    assert result.status == res.PHASE_STATUS_FAILED
    assert result.resource_fault == res.RESOURCE_FAULT_OUT_OF_MEMORY
    assert result.reason.startswith(
        "out of memory: the kernel's OOM killer killed 1 process(es) of the phase at its "
        "memory limit of 64 MiB"
    )
    containment = result.diagnostics.containment
    assert (containment.memory_limit_bytes, containment.cpu_limit_millicores) == (64 << 20, 500)
    assert containment.oom_kills == 1 and containment.memory_peak_bytes >= 60 << 20
    assert inspection.containment == containment  # a finished phase keeps its final figures


async def test_limits_without_a_cgroup_are_refused(tmp_path, runner_factory):
    async with runner_factory(None, containment="subreaper") as runner:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await runner.run_phase("hi", memory_limit_bytes=256 << 20)
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await runner.run_phase("hi", memory_limit_bytes=1024)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(caught.value).reason == "LIMITS_UNAVAILABLE"
    assert "memory limit" in caught.value.details()
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(bad.value).metadata["field"] == "options.memory_limit_bytes"


@pytest.fixture
def full_home(tmp_path):
    """A HOME on a tmpfs with no space left (root may mount; skipped where it may not)."""
    home = tmp_path / "home"
    home.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(home)], capture_output=True, check=False
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        (home / "tmp").mkdir()  # the CLI's task output directory (scripted_api.cli_env)
        with open(home / "filler", "wb") as f, pytest.raises(OSError):
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        yield home
    finally:
        subprocess.run(["umount", "-l", str(home)], check=False)


@pytest.mark.real_cli
async def test_a_full_disk_fails_the_phase_with_the_clis_notice(
    full_home, claude_binary, scripted_api, runner_factory
):
    api = scripted_api([Reply.text("answered, but not saved")])
    # The full disk is the server's HOME, which the CLI uses only without the sandbox's private home.
    async with runner_factory(api, sandbox="off") as runner:
        events, result = await runner.run_phase("hi", deadline=90)
    lost = [e.session_writes_lost for e in events if e.HasField("session_writes_lost")]
    assert lost and lost[0].error_code == "ENOSPC" and "transcript" in lost[0].lost
    assert result.session_id in lost[0].session_ids
    assert result.status == res.PHASE_STATUS_FAILED and result.resource_fault == res.RESOURCE_FAULT_DISK_FULL
    assert result.reason.startswith(
        "the disk is full (ENOSPC): the CLI finished but could not save transcript"
    )
    assert result.result_text == "answered, but not saved"  # nothing of what it did is lost
