"""cgroup discovery (from fake /proc files for every layout) and one phase cgroup's operations
(on the host's real cgroup hierarchies: v2 ``unified`` and the v1 freezer / memory / cpu)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from support.processes import wait_gone

from helix_runner.process import procfs
from helix_runner.process.cgroups import PhaseCgroup, ResourceLimits, Role, discover
from helix_runner.process.containment import shim_command


def fake_proc(tmp_path: Path, cgroup: str, mountinfo: str) -> str:
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "cgroup").write_text(cgroup)
    (tmp_path / "self" / "mountinfo").write_text(mountinfo)
    return str(tmp_path)


def test_discover_pure_v2(tmp_path):
    proc = fake_proc(
        tmp_path,
        "0::/kubepods/pod1/ctr\n",
        "30 24 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
        "24 1 8:1 / / rw - ext4 /dev/sda1 rw\n",
    )
    (h,) = discover(proc)
    assert (h.version, h.mount, h.own) == (2, Path("/sys/fs/cgroup"), "/kubepods/pod1/ctr")
    assert h.own_dir == Path("/sys/fs/cgroup/kubepods/pod1/ctr")


def test_discover_a_container_whose_mount_shows_only_its_own_subtree(tmp_path):
    # Without a cgroup namespace, a container's mount root is its own cgroup.
    proc = fake_proc(
        tmp_path, "0::/docker/abc\n", "30 24 0:26 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    )
    (h,) = discover(proc)
    assert h.own_dir == Path("/sys/fs/cgroup")
    assert h.to_dir("/docker/abc/helix-runner") == Path("/sys/fs/cgroup/helix-runner")
    assert h.to_dir("/elsewhere") is None


def test_discover_hybrid_and_v1(tmp_path):
    proc = fake_proc(
        tmp_path,
        "6:freezer:/\n4:memory:/svc/x\n2:cpu,cpuacct:/\n1:name=systemd:/\n0::/\n",
        "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
        "33 31 0:30 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
        "34 31 0:31 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer\n"
        "35 31 0:32 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd\n"
        "36 31 0:33 / /sys/fs/cgroup/unified\\040dir rw - cgroup2 cgroup2 rw\n",
    )
    found = {(h.version, frozenset(h.controllers)): h for h in discover(proc)}
    assert found[(1, frozenset({"cpu", "cpuacct"}))].mount == Path("/sys/fs/cgroup/cpu,cpuacct")
    assert found[(1, frozenset({"memory"}))].own_dir == Path("/sys/fs/cgroup/memory/svc/x")
    assert (1, frozenset({"freezer"})) in found and (1, frozenset({"name=systemd"})) in found
    assert found[(2, frozenset())].mount == Path("/sys/fs/cgroup/unified dir")  # octal escape decoded


def test_discover_nothing_mounted(tmp_path):
    assert discover(fake_proc(tmp_path, "0::/\n", "24 1 8:1 / / rw - ext4 /dev/sda1 rw\n")) == []
    assert discover(str(tmp_path / "missing")) == []


# -- the host's real hierarchies -------------------------------------------------------------

HIERARCHIES = {h.version if h.version == 2 else next(iter(h.controllers)): h for h in discover()}


def _base(key: str, tmp_path: Path) -> Role:
    h = HIERARCHIES.get(key)
    if h is None or h.own_dir is None:
        pytest.skip(f"no {key} cgroup hierarchy here")
    base = h.own_dir / "helix-runner-test" / f"t-{uuid.uuid4().hex[:8]}"
    try:
        base.mkdir(parents=True)
    except OSError as exc:
        pytest.skip(f"cannot create cgroups under {h.own_dir}: {exc.strerror}")
    return Role(h.version, base)


@pytest.fixture
def roles(tmp_path):
    made: list[Role] = []

    def make(key: str) -> Role:
        role = _base(key, tmp_path)
        made.append(role)
        return role

    yield make
    for role in made:
        for d in (role.base, role.base.parent):
            try:
                d.rmdir()
            except OSError:
                pass


def _start_in(cgroup: PhaseCgroup, script: str, tmp_path: Path) -> tuple[subprocess.Popen, list[int]]:
    """The shim joining the cgroup, running a shell that leaves a setsid'd and a double-forked job."""
    pids = tmp_path / "pids"
    body = (
        f"setsid sleep 60 </dev/null >/dev/null 2>&1 & echo $! >> {pids}; "
        f"( sleep 61 </dev/null >/dev/null 2>&1 & echo $! >> {pids} ); {script}"
    )
    proc = subprocess.Popen(
        shim_command(["/bin/sh", "-c", body], joins=cgroup.procs_files),
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 10
    while not (pids.exists() and len(pids.read_text().split()) == 2) and time.monotonic() < deadline:
        time.sleep(0.02)
    return proc, [int(p) for p in pids.read_text().split()]


@pytest.mark.parametrize("core", [2, "freezer"])
async def test_kill_ends_every_member_whatever_its_session(core, roles, tmp_path):
    cg = PhaseCgroup(roles(core), "phase-kill")
    cg.create()
    proc, jobs = _start_in(cg, "sleep 62", tmp_path)
    try:
        members = cg.live_members()
        assert proc.pid in members and set(jobs) <= set(members)
        killed = await cg.kill()
        assert killed >= 4  # shim, shell, and both jobs
        assert cg.members() == [] and wait_gone([proc.pid, *jobs]) == []
        proc.wait(10)
        assert cg.remove() and not cg.core_dir.exists()
    finally:
        proc.kill()


@pytest.mark.parametrize("core", [2, "freezer"])
async def test_signal_all_stops_every_member_at_once(core, roles, tmp_path):
    cg = PhaseCgroup(roles(core), "phase-stop")
    cg.create()
    proc, jobs = _start_in(cg, "sleep 62", tmp_path)
    try:
        stopped = await cg.signal_all(signal.SIGSTOP, exclude=frozenset({proc.pid}))
        assert set(jobs) <= set(stopped) and proc.pid not in stopped
        for _ in range(200):
            if all(procfs.process_state(p) == "T" for p in stopped):
                break
            await asyncio.sleep(0.01)
        assert [procfs.process_state(p) for p in jobs] == ["T", "T"]
        assert procfs.process_state(proc.pid) != "T"  # the shim keeps running (it reaps)
        await cg.signal_all(signal.SIGCONT)
        for _ in range(200):
            if all(procfs.process_state(p) != "T" for p in jobs):
                break
            await asyncio.sleep(0.01)
        assert all(procfs.process_state(p) in ("S", "R") for p in jobs)
    finally:
        await cg.kill()
        proc.wait(10)
        cg.remove()


async def test_limits_are_written_and_an_oom_kill_is_counted(roles, tmp_path):
    core, memory, cpu = roles(2 if 2 in HIERARCHIES else "freezer"), roles("memory"), roles("cpu")
    limits = ResourceLimits(memory_bytes=64 * 1024 * 1024, cpu_millicores=500)
    cg = PhaseCgroup(core, "phase-limits", memory, cpu, limits)
    cg.create()
    try:
        mem_file = "memory.max" if memory.version == 2 else "memory.limit_in_bytes"
        assert int((cg.memory_dir / mem_file).read_text()) == limits.memory_bytes
        if cpu.version == 2:
            assert (cg.cpu_dir / "cpu.max").read_text().split() == ["50000", "100000"]
        else:
            assert int((cg.cpu_dir / "cpu.cfs_quota_us").read_text()) == 50_000
        assert cg.oom_kills() == 0
        hog = await asyncio.to_thread(
            subprocess.run,
            shim_command([sys.executable, "-c", "b = bytearray(256 * 1024 * 1024)"], joins=cg.procs_files),
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert hog.returncode == 128 + signal.SIGKILL  # the shim relays the OOM kill of its child
        assert cg.oom_kills() >= 1
        assert cg.memory_peak() >= 32 * 1024 * 1024
    finally:
        await cg.kill()
        cg.remove()


def test_create_leaves_nothing_behind_when_a_limit_cannot_be_applied(roles):
    core = roles(2 if 2 in HIERARCHIES else "freezer")
    cg = PhaseCgroup(core, "phase-nolimit", limits=ResourceLimits(memory_bytes=64 * 1024 * 1024))
    with pytest.raises(Exception, match="no memory controller"):
        cg.create()
    assert not cg.core_dir.exists()


def test_members_of_a_missing_cgroup_is_empty(tmp_path):
    cg = PhaseCgroup(Role(2, tmp_path), "nope")
    assert cg.members() == [] and cg.oom_kills() == 0 and cg.memory_peak() is None


def test_create_survives_a_sibling_pruning_the_shared_base(tmp_path, monkeypatch):
    """Another phase ending removes the (then empty) server directory between our ``ensure`` and
    our ``mkdir`` (seen in CI: two phases of one server, one ending as the next started)."""
    role = Role(2, tmp_path / "srv-x")
    ensure = Role.ensure
    pruned: list[bool] = []

    def ensure_then_sibling_prunes(self: Role) -> None:
        ensure(self)
        if not pruned:
            pruned.append(True)
            self.prune()

    monkeypatch.setattr(Role, "ensure", ensure_then_sibling_prunes)
    cg = PhaseCgroup(role, "phase-a")
    cg.create()
    assert cg.core_dir.is_dir() and pruned
