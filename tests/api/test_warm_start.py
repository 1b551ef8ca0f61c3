"""Warm starts with the real CLI (runner.warm_pool): a phase whose spawn signature matches the
declared one runs on a CLI process started ahead; another phase spawns cold; the pool refills with
new processes (none is used twice); drain leaves no pool process.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from support.processes import alive

from helix.runner.v1 import resources_pb2 as res
from helix_runner.offline import Reply
from helix_runner.process import procfs
from helix_runner.process.containment import MARKER_NAME

MODEL = "claude-sonnet-4-5"


async def _ready(pool, count: int = 1, limit_s: float = 60) -> list[int]:
    deadline = time.monotonic() + limit_s
    while len(pool.ready_pids) < count:
        assert time.monotonic() < deadline, "the warm pool did not fill"
        await asyncio.sleep(0.05)
    return pool.ready_pids


def _reasons(events) -> list[str]:
    return [e.status_changed.reason for e in events if e.WhichOneof("payload") == "status_changed"]


@pytest.mark.real_cli
async def test_a_matching_phase_starts_warm_and_others_cold(claude_binary, scripted_api, runner_factory, tmp_path):
    api = scripted_api([Reply.text("hello from a warm start")])
    workdir = tmp_path / "work"
    workdir.mkdir(exist_ok=True)
    async with runner_factory(api, warm_pool={"size": 1, "working_dir": str(workdir),
                                              "options": {"model": MODEL}}) as runner:
        service = runner.server.service
        pool = service.warm_pool
        (warm_shim,) = await _ready(pool)
        await asyncio.sleep(1.0)
        assert api.message_requests() == []  # a waiting CLI asks the API nothing before its prompt

        events, result = await runner.run_phase("say hello", job_id="warm", model=MODEL, deadline=120)
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        assert result.result_text == "hello from a warm start"
        assert service.store.get_phase("warm", "p1").pid == warm_shim  # the prestarted shim ran it
        assert any("warm start" in r for r in _reasons(events))
        assert pool.taken == 1
        assert not alive(warm_shim)  # ended with its phase

        (refill,) = await _ready(pool)  # a new process replaced it; the used one is never handed out again
        assert refill != warm_shim

        events, result = await runner.run_phase("say hello", job_id="cold", model="claude-opus-4-1", deadline=120)
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        assert service.store.get_phase("cold", "p1").pid not in (warm_shim, refill)
        assert not any("warm start" in r for r in _reasons(events))
        assert pool.taken == 1 and pool.ready_pids == [refill]  # the other signature left it waiting
        instance = service.containment.instance
    # drain ended the waiting process and everything in its scope
    deadline = time.monotonic() + 10
    while alive(refill) and time.monotonic() < deadline:  # noqa: ASYNC110 - another process
        await asyncio.sleep(0.05)
    assert not alive(refill)
    assert procfs.marked(f"{MARKER_NAME}={instance}.warm-".encode()) == []
