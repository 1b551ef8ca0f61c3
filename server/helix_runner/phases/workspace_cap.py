"""The workspace cap: a phase that grows the disk use of what it may write past its cap is stopped.

No kernel interface caps a directory's disk use for an unprivileged server on a common file
system (project quotas need XFS or ext4 with ``prjquota``, and root). So the cap has two parts:

- the kernel bounds any one file at the cap (``RLIMIT_FSIZE``, set by the phase shim for every
  process of the phase: a write past it fails with ``EFBIG``, or ``SIGXFSZ`` ends the writer);
- this watcher samples the disk use of the phase's writable directories (``process/disk_usage.py``)
  and stops the phase once it has grown by more than the cap since the phase started.

Between two samples a phase can write past the cap with many files, by its write speed times the
interval. The interval follows the cost of a walk (``COST_SHARE``: a walk takes at most a
twentieth of the watcher's time), between ``MIN_INTERVAL_S`` and ``MAX_INTERVAL_S``; each walk
runs in a thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

from helix_runner.domain.bounds import human_bytes
from helix_runner.process.disk_usage import DiskUsage, disk_usage

log = logging.getLogger(__name__)

MIN_INTERVAL_S = 0.5
MAX_INTERVAL_S = 15.0
COST_SHARE = 20  # interval >= 20 x the last walk's time


class WorkspaceCap:
    """Watches one phase's writable directories against ``max_bytes`` of growth (0: no cap)."""

    def __init__(self, roots: Sequence[Path], max_bytes: int, at_limit: Callable[[str], None], *,
                 measure: Callable[[Sequence[Path]], DiskUsage] = disk_usage,
                 min_interval_s: float = MIN_INTERVAL_S):
        self.roots = list(roots)
        self.max_bytes = max_bytes
        self._at_limit = at_limit
        self._measure = measure
        self._min_interval_s = min_interval_s
        self.baseline: int | None = None  # the disk use when the phase started (its first attempt)
        self.last: DiskUsage | None = None
        self.hit = False

    @property
    def on(self) -> bool:
        return self.max_bytes > 0 and bool(self.roots)

    def grown(self) -> int:
        """Bytes added since the phase started, by the last sample (0 before two samples)."""
        if self.baseline is None or self.last is None:
            return 0
        return max(0, self.last.bytes - self.baseline)

    async def sample(self) -> float:
        """Measures once; stops the phase past the cap. Returns the walk's time in seconds."""
        started = time.monotonic()
        usage = await asyncio.to_thread(self._measure, self.roots)
        took = time.monotonic() - started
        self.last = usage
        if self.baseline is None:
            self.baseline = usage.bytes
            return took
        if not self.hit and self.grown() > self.max_bytes:
            self.hit = True
            self._at_limit(
                f"the phase grew the disk use of its workspace by {human_bytes(self.grown())}, past its cap of "
                f"{human_bytes(self.max_bytes)} (workspace_max_bytes); it was stopped")
        return took

    async def _watch(self) -> None:
        while not self.hit:
            took = await self.sample()
            await asyncio.sleep(min(MAX_INTERVAL_S, max(self._min_interval_s, took * COST_SHARE)))

    @contextlib.asynccontextmanager
    async def watching(self) -> AsyncIterator[None]:
        """Samples while the block runs (one attempt's process); the baseline is the first attempt's."""
        if not self.on:
            yield
            return
        if self.baseline is None:
            await self.sample()
        task = asyncio.create_task(self._watch(), name="workspace-cap")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            if not self.hit:  # what the last moments wrote still counts against the cap
                with contextlib.suppress(OSError):
                    await self.sample()
