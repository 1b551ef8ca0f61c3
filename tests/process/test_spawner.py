"""Starting a phase's shim from a worker thread (runner.spawner): the loop keeps running meanwhile,
and a phase cancelled while its shim is being started leaves no process and no cgroup behind.

Every case runs with each containment mechanism this host offers (as tests/process/test_containment.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from support.processes import CollectingSink, alive

from helix_runner.domain.phase_outcome import EndCause
from helix_runner.process import procfs, spawner
from helix_runner.process.cgroups import discover
from helix_runner.process.containment import ContainmentError, detect
from helix_runner.process.supervisor import ProcessLimits, ProcessSupervisor

PARENT = "helix-runner-test"
SLOW_S = 0.4


@pytest.fixture(params=["cgroup-v2", "cgroup-v1", "subreaper"])
def containment(request):
    try:
        c = detect(request.param, PARENT, f"srv-test-{uuid.uuid4().hex[:8]}")
    except ContainmentError as exc:
        pytest.skip(f"{request.param} is not available here: {exc}")
    yield c
    c.close()
    for h in discover():
        if h.own_dir is not None:
            with contextlib.suppress(OSError):
                (h.own_dir / PARENT).rmdir()


class SlowPopen(subprocess.Popen):
    """A fork/exec that takes SLOW_S (as on a loaded machine with many phases starting)."""

    entered = threading.Event()

    def __init__(self, *args, **kwargs):
        SlowPopen.entered.set()
        time.sleep(SLOW_S)
        super().__init__(*args, **kwargs)


def _supervisor(containment, tmp_path: Path, body: str, **kwargs) -> ProcessSupervisor:
    script = tmp_path / "child.py"
    script.write_text(body)
    return ProcessSupervisor([sys.executable, str(script)], cwd=tmp_path, env=dict(os.environ), sink=CollectingSink(),
                             limits=ProcessLimits(timeout=30, exit_grace=1, kill_grace=1),
                             scope=containment.scope(uuid.uuid4().hex), **kwargs)


async def test_the_loop_runs_while_a_shim_is_started(containment, tmp_path, monkeypatch):
    monkeypatch.setattr(subprocess, "Popen", SlowPopen)
    sup = _supervisor(containment, tmp_path, "print('hello', flush=True)\n")
    ticks: list[float] = []

    async def tick():
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.01)

    ticker = asyncio.create_task(tick())
    try:
        result = await asyncio.wait_for(sup.run(), 60)
    finally:
        ticker.cancel()
    assert result.cause is EndCause.EXITED and result.exit_code == 0, result
    assert bytes(sup.sink.stdout) == b"hello\n"
    # Spawned on the loop, the 0.4 s fork/exec would have frozen the ticker for all of it.
    longest_gap = max(b - a for a, b in zip(ticks, ticks[1:], strict=False))
    assert longest_gap < SLOW_S / 2, longest_gap


async def test_a_phase_cancelled_while_its_shim_starts_leaves_nothing(containment, tmp_path, monkeypatch):
    monkeypatch.setattr(subprocess, "Popen", SlowPopen)
    SlowPopen.entered.clear()
    pid_file = tmp_path / "pids"
    sup = _supervisor(containment, tmp_path, (
        "import os, subprocess, sys, time\n"
        f"p = subprocess.Popen(['setsid', 'sleep', '60'])\n"
        f"open({str(pid_file)!r}, 'w').write(f'{{os.getpid()}} {{p.pid}}')\n"
        "time.sleep(60)\n"
    ))
    task = asyncio.create_task(sup.run())
    while not SlowPopen.entered.is_set():  # noqa: ASYNC110 - a thread sets it
        await asyncio.sleep(0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 30)
    scope = sup.scope
    assert scope.shim_pid is not None  # the fork/exec finished after the cancel: it was started...
    assert not alive(scope.shim_pid)  # ...and ended
    deadline = time.monotonic() + 5
    while procfs.marked(scope.marker.encode()) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    assert procfs.marked(scope.marker.encode()) == []
    if pid_file.exists():  # the CLI got as far as starting its job: both are gone
        assert not any(alive(int(p)) for p in pid_file.read_text().split())
    assert all(not Path(p).exists() for p in scope.paths)  # the cgroup is removed


async def test_a_missing_binary_is_a_spawn_failure_off_the_loop(containment, tmp_path):
    sup = ProcessSupervisor([str(tmp_path / "no-such-claude")], cwd=tmp_path, env=dict(os.environ), sink=CollectingSink(),
                            limits=ProcessLimits(timeout=10), scope=containment.scope(uuid.uuid4().hex))
    result = await asyncio.wait_for(sup.run(), 30)
    assert result.cause is EndCause.SPAWN_FAILED and "no-such-claude" in result.detail
    assert all(not Path(p).exists() for p in sup.scope.paths)


def test_the_baseline_still_spawns_on_the_loop():
    # spawn_off_loop = false (the benchmarks' baseline) keeps the old path.
    assert ProcessSupervisor(["x"], cwd=Path("."), env={}, sink=CollectingSink(), limits=ProcessLimits(),
                             spawn_off_loop=False)._spawn is spawner.spawn_on_loop


async def test_the_threads_that_fork_shims_outlive_them(containment, tmp_path):
    # The shim's parent-death signal fires when the thread that forked it ends: the spawner's
    # workers must stay (a ThreadPoolExecutor's do until shutdown, and nothing shuts this one down).
    sup = _supervisor(containment, tmp_path, "import time; print('up', flush=True); time.sleep(1.5)\n")
    task = asyncio.create_task(sup.run())
    result = await asyncio.wait_for(task, 60)
    assert result.cause is EndCause.EXITED and result.exit_code == 0  # not ended early by the shim
    threads = spawner._executor()._threads
    assert threads and all(t.is_alive() for t in threads)
