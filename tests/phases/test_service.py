"""``PhaseService.start`` refuses what it cannot run, before anything is recorded or started.

A real store in ``tmp_path``; the containment is a stand-in that fails the test if a scope (the
first step of launching) is ever asked for.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from helix_runner.api.proto_records import ProtoRecordEncoder
from helix_runner.config import ServerConfig
from helix_runner.domain.phase_spec import PhaseSpec
from helix_runner.errors import ErrorKind, RunnerError
from helix_runner.phases.service import PhaseService
from helix_runner.process.containment import subreaper_scope
from helix_runner.store.sqlite_store import SqliteStore


class NoLaunchContainment:
    """Fails loudly if the service gets as far as preparing a launch."""

    mode = 0
    limits_available = ()

    def scope(self, *args, **kwargs):
        raise AssertionError("a rejected request reached the launch")

    def close(self) -> None:
        pass


@pytest.fixture
def workspace(tmp_path):
    root = tmp_path / "root"
    (root / "project").mkdir(parents=True)
    return root


class PlanOnlyContainment(NoLaunchContainment):
    """Lets the service plan a launch (a scope is a plan; nothing runs until the phase starts)."""

    def scope(self, *args, **kwargs):
        return subreaper_scope()


@pytest.fixture
def service(tmp_path, workspace):
    store = SqliteStore(tmp_path / "db.sqlite3")
    config = ServerConfig(
        data_dir=tmp_path / "data",
        workspace_roots=(workspace,),
        claude_path=str(tmp_path / "no-claude-here"),
        max_concurrent_phases=2,
    )
    svc = PhaseService(
        config,
        store,
        ProtoRecordEncoder(),
        NoLaunchContainment(),
        server_env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    yield svc
    store.close()


def spec(workspace, **values) -> PhaseSpec:
    return PhaseSpec.create(
        **{
            "job_id": "job",
            "phase_id": "phase",
            "project_id": "",
            "prompt": "hello",
            "working_dir": str(workspace / "project"),
            **values,
        }
    )


async def refused(service: PhaseService, phase: PhaseSpec) -> RunnerError:
    with pytest.raises(RunnerError) as err:
        await asyncio.wait_for(service.start(phase), 10)
    assert service.store.get_phase(phase.job_id, phase.phase_id) is None  # nothing recorded
    assert service.store.get_job(phase.job_id) is None
    assert all(job == "busy" for job, _ in service.live)  # no phase of ours became live
    return err.value


async def test_a_draining_server_accepts_no_phase(service, workspace):
    service.draining = True
    err = await refused(service, spec(workspace))
    assert (err.kind, err.reason) == (ErrorKind.UNAVAILABLE, "DRAINING")


async def test_a_full_queue_is_refused_with_a_retry_hint(tmp_path, workspace):
    # Beyond the running limit a phase waits QUEUED; only a full queue refuses, before any row is written.
    claude = tmp_path / "claude"
    claude.write_text("#!/bin/sh\nexit 0\n")
    claude.chmod(0o755)
    store = SqliteStore(tmp_path / "db.sqlite3")
    config = ServerConfig(data_dir=tmp_path / "data", workspace_roots=(workspace,), claude_path=str(claude),
                          max_concurrent_phases=1, max_queued_phases=1)
    service = PhaseService(config, store, ProtoRecordEncoder(), PlanOnlyContainment(),
                           server_env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    try:
        service.admission.submit(("busy", "0"), "default", "server")  # takes the running slot
        service.admission.submit(("busy", "1"), "default", "server")  # waits: the queue is now full
        err = await refused(service, spec(workspace))
        assert (err.kind, err.reason) == (ErrorKind.RESOURCE_EXHAUSTED, "QUEUE_FULL")
        assert float(err.metadata["retry_after_ms"]) > 0
    finally:
        store.close()


@pytest.mark.parametrize(
    ("working_dir", "reason"),
    [
        ("relative/path", "INVALID_FIELD"),
        ("{root}/missing", "INVALID_FIELD"),
        ("/", "WORKING_DIR_OUTSIDE_ROOTS"),
    ],
)
async def test_a_bad_working_dir(service, workspace, working_dir, reason):
    err = await refused(service, spec(workspace, working_dir=working_dir.format(root=workspace)))
    assert (err.kind, err.reason, err.metadata["field"]) == (
        ErrorKind.INVALID_ARGUMENT,
        reason,
        "working_dir",
    )


async def test_bypass_permissions_is_refused_unless_the_server_allows_it(service, workspace):
    err = await refused(service, spec(workspace, permission_mode="bypassPermissions"))
    assert (err.kind, err.reason, err.metadata) == (
        ErrorKind.INVALID_ARGUMENT,
        "INVALID_FIELD",
        {"field": "options.permission_mode"},
    )
    service.config = replace(service.config, allow_bypass_permissions=True)
    err = await refused(service, spec(workspace, permission_mode="bypassPermissions"))
    assert err.reason == "CLAUDE_NOT_FOUND"  # past that check


async def test_preflight_names_the_missing_commands(service, workspace):
    service.config = replace(service.config, required_commands=("sh", "helix-no-such-tool", "helix-nor-this"))
    err = await refused(service, spec(workspace))
    assert (err.kind, err.reason) == (ErrorKind.FAILED_PRECONDITION, "PREFLIGHT_FAILED")
    assert err.metadata == {"missing": "helix-no-such-tool,helix-nor-this"}


async def test_a_missing_claude_binary(service, workspace):
    err = await refused(service, spec(workspace))
    assert (err.kind, err.reason) == (ErrorKind.FAILED_PRECONDITION, "CLAUDE_NOT_FOUND")
