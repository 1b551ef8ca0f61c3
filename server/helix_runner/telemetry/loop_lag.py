"""Event-loop lag: how much later than asked the loop wakes a sleeping task, measured all the time.

Every stream the server carries waits on this one loop, so its lag is added to every event's
latency. A task sleeps ``interval_s`` again and again and records how late it woke; each sample
goes to the ``helix_event_loop_lag_seconds`` histogram, and the largest sample of the last
``window_s`` is the server's current lag. Admission refuses new phases while that is above
``admission_max_loop_lag_ms`` (``check``; off by default, docs/retries-and-admission.md): starting a
phase costs the loop a burst of work (the CLI's start-up lines, the store), and a loop already
late would make every running phase later still.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable

from helix_runner.errors import ErrorKind, RunnerError

INTERVAL_S = 0.1
WINDOW_S = 2.0
# How long a refused caller is told to wait: the window must pass without a late wake-up.
RETRY_HINT_S = WINDOW_S


class LoopLagMonitor:
    """Samples the running loop's wake-up delay; ``recent_s`` is the worst of the last window."""

    def __init__(
        self,
        *,
        interval_s: float = INTERVAL_S,
        window_s: float = WINDOW_S,
        observe: Callable[[float], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval_s = interval_s
        self.window_s = window_s
        self._observe = observe
        self._clock = clock
        self._samples: deque[tuple[float, float]] = deque()  # (when, lag s), oldest first
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="loop-lag")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def record(self, lag_s: float) -> None:
        """One sample (the probe's, or a test's)."""
        now = self._clock()
        self._samples.append((now, lag_s))
        while self._samples and self._samples[0][0] < now - self.window_s:
            self._samples.popleft()
        if self._observe is not None:
            self._observe(lag_s)

    @property
    def recent_s(self) -> float:
        """The largest lag sampled in the last ``window_s`` (0 before any sample)."""
        horizon = self._clock() - self.window_s
        return max((lag for when, lag in self._samples if when >= horizon), default=0.0)

    def check(self, limit_s: float) -> None:
        """RESOURCE_EXHAUSTED (``QUEUE_FULL``, scope ``event_loop``, with a retry hint) while the recent
        lag is above ``limit_s``; admission calls it before it takes a new phase."""
        lag = self.recent_s
        if lag <= limit_s:
            return
        raise RunnerError(
            ErrorKind.RESOURCE_EXHAUSTED,
            "QUEUE_FULL",
            f"the server is overloaded: its event loop runs {lag * 1000:.0f} ms late (the limit for "
            f"starting phases is {limit_s * 1000:.0f} ms); retry in about {RETRY_HINT_S:.0f} s",
            {
                "scope": "event_loop",
                "limit": round(limit_s * 1000),
                "loop_lag_ms": round(lag * 1000),
                "retry_after_ms": round(RETRY_HINT_S * 1000),
            },
            retry_after_s=RETRY_HINT_S,
        )

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time()
            await asyncio.sleep(self.interval_s)
            self.record(max(0.0, loop.time() - asked - self.interval_s))
