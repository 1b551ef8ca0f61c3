"""phases/workspace_cap.py: a phase is stopped once it grew what it may write past its cap."""

from __future__ import annotations

import asyncio
from pathlib import Path

from helix_runner.phases.workspace_cap import WorkspaceCap
from helix_runner.process.disk_usage import DiskUsage

MiB = 1 << 20


class Disk:
    """A stand-in for the measurement: what the workspace holds now, and how often it was walked."""

    def __init__(self, start: int):
        self.now = start
        self.walks = 0

    def __call__(self, roots) -> DiskUsage:
        self.walks += 1
        return DiskUsage(self.now, 1, True)


def test_growth_past_the_cap_stops_the_phase_once_with_a_reason_naming_the_cap():
    async def main():
        disk, stops = Disk(500 * MiB), []
        cap = WorkspaceCap([Path("/ws")], 16 * MiB, stops.append, measure=disk, min_interval_s=0.01)
        async with cap.watching():
            disk.now += 10 * MiB  # the repository's own 500 MiB do not count, only what the phase adds
            await asyncio.sleep(0.1)
            assert stops == []
            disk.now += 7 * MiB
            for _ in range(200):
                if stops:
                    break
                await asyncio.sleep(0.01)
            disk.now += 50 * MiB
            await asyncio.sleep(0.1)
        return stops, cap

    stops, cap = asyncio.run(main())
    assert stops == ["the phase grew the disk use of its workspace by 17 MiB, past its cap of 16 MiB "
                     "(workspace_max_bytes); it was stopped"]
    assert cap.hit


def test_the_baseline_is_the_first_attempts_and_the_end_of_an_attempt_is_measured():
    async def main():
        disk, stops = Disk(0), []
        cap = WorkspaceCap([Path("/ws")], 16 * MiB, stops.append, measure=disk, min_interval_s=60)
        async with cap.watching():
            disk.now = 10 * MiB  # written between samples, just before the attempt ended
        first = list(stops)
        async with cap.watching():  # a retry: its growth adds to the first attempt's
            disk.now = 20 * MiB
        return first, stops, cap

    first, stops, cap = asyncio.run(main())
    assert first == [] and cap.baseline == 0
    assert len(stops) == 1 and "by 20 MiB" in stops[0]


def test_no_cap_walks_nothing():
    async def main():
        disk = Disk(0)
        cap = WorkspaceCap([Path("/ws")], 0, lambda reason: None, measure=disk, min_interval_s=0.01)
        async with cap.watching():
            await asyncio.sleep(0.05)
        return disk.walks

    assert asyncio.run(main()) == 0


def test_a_slow_walk_spaces_the_samples_out():
    async def main():
        disk = Disk(0)

        def slow(roots):
            import time
            time.sleep(0.02)
            return disk(roots)

        cap = WorkspaceCap([Path("/ws")], 16 * MiB, lambda reason: None, measure=slow, min_interval_s=0.001)
        async with cap.watching():
            await asyncio.sleep(0.5)
        return disk.walks

    # Each walk takes 20 ms, so the next waits 20 x that (0.4 s): a few walks in 0.5 s, not hundreds.
    assert asyncio.run(main()) <= 5


def test_a_request_may_lower_the_servers_cap_but_not_raise_it():
    import pytest

    from helix_runner.config import ServerConfig
    from helix_runner.domain.phase_spec import PhaseSpec
    from helix_runner.errors import RunnerError
    from helix_runner.phases.launch import workspace_cap

    def spec(cap: int) -> PhaseSpec:
        return PhaseSpec.create(job_id="j", phase_id="p", project_id="", prompt="x", working_dir="/w",
                                workspace_max_bytes=cap)

    assert workspace_cap(spec(0), ServerConfig(workspace_max_bytes=0)) == 0
    assert workspace_cap(spec(64 * MiB), ServerConfig(workspace_max_bytes=0)) == 64 * MiB
    assert workspace_cap(spec(0), ServerConfig(workspace_max_bytes=1024 * MiB)) == 1024 * MiB
    assert workspace_cap(spec(64 * MiB), ServerConfig(workspace_max_bytes=1024 * MiB)) == 64 * MiB
    with pytest.raises(RunnerError) as caught:
        workspace_cap(spec(2048 * MiB), ServerConfig(workspace_max_bytes=1024 * MiB))
    assert caught.value.reason == "INVALID_FIELD" and "workspace_max_bytes" in str(caught.value)
    with pytest.raises(RunnerError):  # below what the CLI's own session files need
        spec(1 * MiB).validate()
