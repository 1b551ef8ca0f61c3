"""Containment end to end below the API: detection, a supervised fake CLI whose jobs escape its
session (setsid, double fork, nohup), hard pause, OOM, and recovery after the shim itself died.

Every case runs with each mechanism this host offers: cgroup v2 (the hybrid host's ``unified``
mount), the v1 freezer, and the subreaper shim (the fallback, forced).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from support.processes import CollectingSink, alive, wait_gone

from helix_runner.domain.phase_outcome import EndCause
from helix_runner.domain.phase_result import ContainmentMode
from helix_runner.process import procfs
from helix_runner.process.cgroups import ResourceLimits, discover
from helix_runner.process.containment import ContainmentError, LeftoverRun, detect
from helix_runner.process.supervisor import ProcessLimits, ProcessSupervisor

PARENT = "helix-runner-test"
SETTINGS = {
    "cgroup-v2": ContainmentMode.CGROUP_V2,
    "cgroup-v1": ContainmentMode.CGROUP_V1,
    "subreaper": ContainmentMode.SUBREAPER,
}


def _detect(setting: str, instance: str):
    try:
        return detect(setting, PARENT, instance)
    except ContainmentError as exc:
        pytest.skip(f"{setting} is not available here: {exc}")


@pytest.fixture(params=list(SETTINGS))
def containment(request):
    c = _detect(request.param, f"srv-test-{uuid.uuid4().hex[:8]}")
    assert c.mode is SETTINGS[request.param]
    yield c
    c.close()
    for h in discover():  # the test's cgroup_parent (a server leaves its own in place)
        if h.own_dir is not None:
            with contextlib.suppress(OSError):
                (h.own_dir / PARENT).rmdir()


def _fake_cli(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "fake_cli.py"
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


# Leaves a nohup'd job, a setsid'd one and a double-forked one, each writing its pid to a file.
ESCAPES = textwrap.dedent("""
    import os, subprocess, sys
    pids = sys.argv[1]
    quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sh = lambda cmd: subprocess.run(["/bin/sh", "-c", cmd], **quiet)
    sh(f"nohup sleep 60 >/dev/null 2>&1 & echo $! >> {pids}")
    sh(f"setsid sleep 61 & echo $! >> {pids}")
    sh(f"( sleep 62 & echo $! >> {pids} )")
""")


async def _wait_pids(path: Path, count: int) -> list[int]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().split()) >= count:
            return [int(p) for p in path.read_text().split()]
        await asyncio.sleep(0.02)
    raise AssertionError(f"{path}: {path.read_text() if path.exists() else 'missing'}")


def test_detection_reports_what_it_chose(containment):
    assert containment.detail
    if containment.mode is ContainmentMode.SUBREAPER:
        assert containment.limits_available == () and "forced" in containment.detail
    else:
        assert set(containment.limits_available) == {"memory", "cpu", "pids"}  # this host mounts v1 memory, cpu, pids


def test_auto_falls_back_to_the_subreaper_when_no_cgroup_is_usable(tmp_path):
    # A "cgroup2" mount that is a plain directory: the server may create directories but they are
    # no cgroups (no cgroup.freeze), as in a container without delegation.
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "cgroup").write_text("0::/\n")
    (tmp_path / "self" / "mountinfo").write_text(f"30 24 0:26 / {tmp_path / 'cg'} rw - cgroup2 cgroup2 rw\n")
    auto = detect("auto", PARENT, "srv-fallback", proc=str(tmp_path))
    assert auto.mode is ContainmentMode.SUBREAPER and "no cgroup.freeze" in auto.detail
    with pytest.raises(ContainmentError, match="no usable cgroup"):
        detect("cgroup", PARENT, "srv-fallback", proc=str(tmp_path))
    with pytest.raises(ContainmentError, match="not one of"):
        detect("containers", PARENT, "srv-fallback")


async def test_nothing_the_cli_started_outlives_it(containment, tmp_path):
    pids = tmp_path / "pids"
    scope = containment.scope(uuid.uuid4().hex)
    sup = ProcessSupervisor(
        [*_fake_cli(tmp_path, ESCAPES + "print('done', flush=True)\n"), str(pids)],
        cwd=tmp_path,
        env=dict(os.environ),
        sink=CollectingSink(),
        limits=ProcessLimits(exit_grace=1),
        scope=scope,
    )
    result = await asyncio.wait_for(sup.run(), 60)
    assert result.cause is EndCause.EXITED and result.exit_code == 0
    jobs = await _wait_pids(pids, 3)
    assert wait_gone(jobs) == []
    assert procfs.marked(scope.marker.encode()) == []
    assert all(not Path(p).exists() for p in scope.paths)  # the cgroup is removed
    assert containment._instance_dirs() == []  # and, with no phase left, this server's directory


def test_an_idle_server_leaves_no_cgroup(containment):
    assert containment._instance_dirs() == []  # detection's probe cleaned up after itself


async def test_hard_pause_stops_every_process_until_resumed(containment, tmp_path):
    pids = tmp_path / "pids"
    scope = containment.scope(uuid.uuid4().hex)
    sup = ProcessSupervisor(
        [*_fake_cli(tmp_path, ESCAPES + "import time\ntime.sleep(60)\n"), str(pids)],
        cwd=tmp_path,
        env=dict(os.environ),
        sink=CollectingSink(),
        limits=ProcessLimits(),
        scope=scope,
    )
    task = asyncio.create_task(sup.run())
    try:
        jobs = await _wait_pids(pids, 3)
        await sup.stop_processes()
        assert [procfs.process_state(p) for p in (sup.pid, *jobs)] == ["T"] * 4
        assert scope.shim_pid not in jobs and procfs.process_state(scope.shim_pid) != "T"
        await sup.continue_processes()
        for _ in range(200):
            if all(procfs.process_state(p) != "T" for p in (sup.pid, *jobs)):
                break
            await asyncio.sleep(0.01)
        assert all(procfs.process_state(p) in ("S", "R") for p in (sup.pid, *jobs))
        # Stopped again, then cancelled: everything goes, stopped or not.
        await sup.stop_processes()
        sup.request_stop(EndCause.CANCELLED, "cancelled while hard-paused")
        result = await asyncio.wait_for(task, 60)
        assert result.cause is EndCause.CANCELLED and result.exit_signal == "SIGKILL"
        assert wait_gone([sup.pid, scope.shim_pid, *jobs]) == []
    finally:
        task.cancel()


async def test_an_oom_kill_ends_the_phase(containment, tmp_path):
    if "memory" not in containment.limits_available:
        pytest.skip("no memory cgroup with the subreaper fallback")
    scope = containment.scope(uuid.uuid4().hex, ResourceLimits(memory_bytes=64 * 1024 * 1024))
    hog = (
        "import subprocess, sys, time\nsubprocess.run([sys.executable, '-c', 'b = bytearray(512 << 20)'])\n"
        "time.sleep(60)\n"
    )
    sup = ProcessSupervisor(
        _fake_cli(tmp_path, hog),
        cwd=tmp_path,
        env=dict(os.environ),
        sink=CollectingSink(),
        limits=ProcessLimits(),
        scope=scope,
    )
    result = await asyncio.wait_for(sup.run(), 60)
    assert result.cause is EndCause.OUT_OF_MEMORY
    assert "OOM killer killed 1 process(es) of the phase at its memory limit of 64 MiB" in result.detail
    assert sup.final_stats.oom_kills == 1 and sup.final_stats.memory_peak_bytes >= 60 * 1024 * 1024
    assert not alive(result.pid)


def fork_bomb(*, before: str = "", after: str = "") -> str:
    """A script that forks up to 100 sleeping children, prints ``refused <n> <errno>`` when a fork
    fails, then runs ``after`` (``before`` runs first)."""
    return "\n".join(["import os, time", before, textwrap.dedent("""
        kids = []
        try:
            for _ in range(100):
                pid = os.fork()
                if pid == 0:
                    time.sleep(60)
                    os._exit(0)
                kids.append(pid)
        except OSError as exc:
            print("refused", len(kids), exc.errno, flush=True)
    """), after])


async def test_a_fork_past_the_process_limit_ends_the_phase(containment, tmp_path):
    """pids.max in the phase's cgroup: the fork beyond it fails, and the supervisor ends the phase
    with the limit as its cause (a fork bomb would otherwise spin, each fork failing, until its timeout)."""
    if "pids" not in containment.limits_available:
        pytest.skip("no pids cgroup with the subreaper fallback")
    scope = containment.scope(uuid.uuid4().hex, ResourceLimits(pids=16))
    bomb = fork_bomb(after="time.sleep(60)")
    sink = CollectingSink()
    sup = ProcessSupervisor(_fake_cli(tmp_path, bomb), cwd=tmp_path, env=dict(os.environ), sink=sink,
                            limits=ProcessLimits(), scope=scope)
    result = await asyncio.wait_for(sup.run(), 60)
    assert result.cause is EndCause.PROCESS_LIMIT, (result.cause, result.detail)
    assert "its limit of 16 processes" in result.detail
    assert b"refused" in bytes(sink.stdout) and b" 11" in bytes(sink.stdout)  # EAGAIN
    assert not alive(result.pid)


async def test_recovery_ends_what_a_dead_shim_left(containment, tmp_path):
    """The worst case after a server crash: the shim itself was SIGKILLed, so its parent-death
    cleanup never ran, and the phase's jobs were orphaned to init."""
    pids = tmp_path / "pids"
    run_id = uuid.uuid4().hex
    scope = containment.scope(run_id)
    scope.create()
    cli = [*_fake_cli(tmp_path, ESCAPES + "import time\ntime.sleep(60)\n"), str(pids)]
    shim = await asyncio.create_subprocess_exec(
        *scope.command(cli, -1), stdin=subprocess.DEVNULL, start_new_session=True
    )
    jobs = await _wait_pids(pids, 3)
    ticks = procfs.start_ticks(shim.pid)
    os.kill(shim.pid, signal.SIGKILL)
    await asyncio.wait_for(shim.wait(), 10)
    await asyncio.sleep(0.1)
    left = [p for p in jobs if alive(p)]
    assert left == jobs  # orphaned, still running

    restarted = _detect(
        {
            ContainmentMode.CGROUP_V2: "cgroup-v2",
            ContainmentMode.CGROUP_V1: "cgroup-v1",
            ContainmentMode.SUBREAPER: "subreaper",
        }[containment.mode],
        containment.instance,
    )
    ended = await restarted.recover([LeftoverRun(run_id, shim.pid, ticks)])
    assert ended[run_id] >= 4  # the fake CLI and its three jobs
    assert wait_gone(jobs) == []
    assert procfs.marked(scope.marker.encode()) == []
    assert all(not Path(p).exists() for p in scope.paths)


def test_a_limit_needs_the_controller(containment):
    if containment.mode is ContainmentMode.SUBREAPER:
        with pytest.raises(ContainmentError, match="cannot enforce a memory limit"):
            containment.check_limits(ResourceLimits(memory_bytes=64 << 20))
    else:
        containment.check_limits(ResourceLimits(memory_bytes=64 << 20, cpu_millicores=500))


async def test_recovery_skips_an_instance_directory_pruned_since_it_was_listed(tmp_path, monkeypatch):
    """Issue 22 item 1: a second server on a live server's data dir died in recover() with
    FileNotFoundError on srv-<hash> (the first one pruned it when its phase ended). The data-dir lock
    now keeps a second server out; recovery also tolerates a directory that vanished."""
    c = _detect("subreaper", f"srv-test-{uuid.uuid4().hex[:8]}")
    monkeypatch.setattr(c, "_instance_dirs", lambda: [(2, tmp_path / "srv-gone")])
    assert await c.recover([]) == {}


async def test_forks_refused_just_before_the_phase_exits_still_name_the_limit(containment, tmp_path, monkeypatch):
    """The limit is checked every OOM_CHECK_S; a phase whose forks were refused and which exited
    before the next check (a loaded host) still ends with the limit as its cause, not EXITED."""
    if "pids" not in containment.limits_available:
        pytest.skip("no pids cgroup with the subreaper fallback")
    from helix_runner.process import supervisor

    monkeypatch.setattr(supervisor, "OOM_CHECK_S", 3600.0)  # only the first check and the last look
    scope = containment.scope(uuid.uuid4().hex, ResourceLimits(pids=16))
    bomb = fork_bomb(before="time.sleep(0.5)  # after the supervisor's first check",
                     after="for pid in kids:\n    os.kill(pid, 9)\n    os.waitpid(pid, 0)")
    sup = ProcessSupervisor(_fake_cli(tmp_path, bomb), cwd=tmp_path, env=dict(os.environ), sink=CollectingSink(),
                            limits=ProcessLimits(), scope=scope)
    result = await asyncio.wait_for(sup.run(), 60)
    assert result.cause is EndCause.PROCESS_LIMIT, (result.cause, result.detail)
