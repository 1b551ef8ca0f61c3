"""The event-loop lag monitor (telemetry.loop_lag) and the admission refusal it drives.

A loop blocked for longer than ``admission_max_loop_lag_ms`` makes admission refuse new phases
(RESOURCE_EXHAUSTED ``QUEUE_FULL``, scope ``event_loop``, with a retry hint) until a window passes
without a late wake-up; retries of admitted phases still pass; 0 turns the check off.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from helix_runner.api.proto_records import ProtoRecordEncoder
from helix_runner.config import ConfigError, ServerConfig, load_config
from helix_runner.domain.phase_spec import PhaseSpec
from helix_runner.errors import ErrorKind, RunnerError
from helix_runner.phases.service import PhaseService
from helix_runner.process.containment import subreaper_scope
from helix_runner.store.sqlite_store import SqliteStore
from helix_runner.telemetry import Telemetry
from helix_runner.telemetry.loop_lag import LoopLagMonitor


class NoLaunchContainment:
    """Plans a launch (a scope is a plan: nothing runs until the phase is admitted and starts)."""

    mode = 0
    limits_available = ()

    def scope(self, *args, **kwargs):
        return subreaper_scope()

    def close(self) -> None:
        pass


async def test_the_monitor_measures_a_blocked_loop_and_forgets_it_after_its_window():
    seen: list[float] = []
    monitor = LoopLagMonitor(interval_s=0.02, window_s=0.4, observe=seen.append)
    monitor.start()
    try:
        await asyncio.sleep(0.1)
        assert monitor.recent_s < 0.15
        time.sleep(0.25)  # noqa: ASYNC251 - blocks the loop on purpose: the probe wakes 0.25 s late
        await asyncio.sleep(0.05)
        assert monitor.recent_s >= 0.2
        assert max(seen) >= 0.2  # every sample also goes to the histogram
        await asyncio.sleep(0.6)
        assert monitor.recent_s < 0.15
    finally:
        await monitor.stop()


@pytest.fixture
def overloaded_service(tmp_path):
    workspace = tmp_path / "root"
    (workspace / "project").mkdir(parents=True)
    claude = tmp_path / "claude"
    claude.write_text("#!/bin/sh\nexit 0\n")
    claude.chmod(0o755)
    store = SqliteStore(tmp_path / "db.sqlite3")
    config = ServerConfig(data_dir=tmp_path / "data", workspace_roots=(workspace,),
                          claude_path=str(claude), admission_max_loop_lag_ms=100)
    telemetry = Telemetry()
    service = PhaseService(config, store, ProtoRecordEncoder(), NoLaunchContainment(),
                           server_env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, telemetry=telemetry)
    yield service, telemetry.loop_lag, workspace
    store.close()


async def test_admission_refuses_new_phases_while_the_loop_is_late(overloaded_service):
    service, monitor, workspace = overloaded_service
    monitor.record(0.25)  # a sample 250 ms late, against a 100 ms limit
    spec = PhaseSpec.create(job_id="job", phase_id="phase", project_id="", prompt="hi",
                            working_dir=str(workspace / "project"))
    with pytest.raises(RunnerError) as err:
        await asyncio.wait_for(service.start(spec), 10)
    e = err.value
    assert (e.kind, e.reason) == (ErrorKind.RESOURCE_EXHAUSTED, "QUEUE_FULL")
    assert e.metadata["scope"] == "event_loop" and e.metadata["loop_lag_ms"] == "250"
    assert e.retry_after_s and float(e.metadata["retry_after_ms"]) == e.retry_after_s * 1000
    assert service.store.get_phase("job", "phase") is None  # refused before anything was written
    # A retry of an admitted phase is never refused for load (as for a full queue).
    ticket = service.admission.submit(("job", "other"), "default", retry=True)
    service.admission.release(ticket)


async def test_no_limit_no_refusal(tmp_path):
    config = ServerConfig(data_dir=tmp_path / "data", workspace_roots=(tmp_path,))
    telemetry = Telemetry()
    store = SqliteStore(tmp_path / "db.sqlite3")
    try:
        service = PhaseService(config, store, ProtoRecordEncoder(), NoLaunchContainment(), telemetry=telemetry)
        telemetry.loop_lag.record(5.0)
        ticket = service.admission.submit(("job", "phase"), "default")  # admitted despite a 5 s lag
        service.admission.release(ticket)
    finally:
        store.close()


def test_the_limit_is_configurable_and_checked(tmp_path):
    config = load_config(environ={"HELIX_RUNNER_ADMISSION_MAX_LOOP_LAG_MS": "250",
                                  "HELIX_RUNNER_SPAWN_OFF_LOOP": "false"},
                         flags={"workspace_roots": [str(tmp_path)], "data_dir": str(tmp_path / "d")})
    assert config.admission_max_loop_lag_ms == 250 and config.spawn_off_loop is False
    with pytest.raises(ConfigError, match="admission_max_loop_lag_ms"):
        load_config(environ={"HELIX_RUNNER_ADMISSION_MAX_LOOP_LAG_MS": "-1"},
                    flags={"workspace_roots": [str(tmp_path)], "data_dir": str(tmp_path / "d")})
