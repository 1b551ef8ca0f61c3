"""The warm pool's rules with a stand-in CLI that waits on stdin (runner.warm_pool): a process is
handed out once, only for its exact signature, a dead one is never handed out, and close ends all.
The real CLI's case is tests/api/test_warm_start.py."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

import pytest
from support.processes import alive

from helix_runner.process import procfs
from helix_runner.process.cgroups import ResourceLimits
from helix_runner.process.containment import subreaper_scope
from helix_runner.process.warm_pool import SpawnSignature, WarmPool

WAITER = "import sys; line = sys.stdin.readline(); print('got', line.strip(), flush=True)"


@pytest.fixture
def pool(tmp_path):
    containment = subreaper_scope().containment
    sig = SpawnSignature.of([sys.executable, "-c", WAITER], tmp_path, dict(os.environ), ResourceLimits())
    return WarmPool(containment, sig, ResourceLimits(), 2)


async def _ready(pool, count: int) -> list[int]:
    deadline = time.monotonic() + 30
    while len(pool.ready_pids) < count:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    return pool.ready_pids


async def test_each_process_serves_one_matching_phase(pool, tmp_path):
    pool.start()
    try:
        first = await _ready(pool, 2)
        other = SpawnSignature.of([sys.executable, "-c", "pass"], tmp_path, dict(os.environ), ResourceLimits())
        assert pool.take(other) is None  # another signature: cold
        a, b = pool.take(pool.signature), pool.take(pool.signature)
        assert {a.scope.shim_pid, b.scope.shim_pid} == set(first)
        refill = await _ready(pool, 2)
        assert not set(refill) & set(first)  # replacements, never the ones handed out
        for sup in (a, b):
            await sup.discard()
    finally:
        await pool.close()


async def test_a_process_that_died_waiting_is_not_handed_out(pool):
    pool.start()
    try:
        shims = await _ready(pool, 2)
        for sup in pool._ready:
            os.kill(sup.pid, signal.SIGKILL)  # the CLI dies; its shim exits after it
        deadline = time.monotonic() + 10
        while any(sup.prestarted_alive for sup in pool._ready) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
        assert pool.take(pool.signature) is None
        assert not any(alive(p) for p in shims)
    finally:
        await pool.close()


async def test_close_ends_every_waiting_process(pool):
    pool.start()
    shims = await _ready(pool, 2)
    markers = [sup.scope.marker.encode() for sup in pool._ready]
    await pool.close()
    assert not any(alive(p) for p in shims)
    assert all(procfs.marked(m) == [] for m in markers)
    assert pool.take(pool.signature) is None  # closed: nothing is handed out or started
