"""Per-project spend quotas applied to phases: refused at start, paused once crossed (docs/tenancy.md).

A new phase of a project that has reached a cap is refused with RESOURCE_EXHAUSTED
(``QUOTA_EXCEEDED``, a ``QuotaFailure`` naming the quota). A running phase checks at each tool
boundary, after its own cost is written: once its project has reached a cap it pauses before the
call, saying which quota (a soft pause: ResumePhase lets it go on, e.g. once the quota is raised;
it is checked again at the next boundary). Replicas share the ledger (the store), so they enforce
one quota together; what a phase spends in the turn in flight when the cap is crossed still lands,
so a project may exceed its cap by at most one turn per running phase.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from helix_runner.domain.quotas import ProjectQuota, Spend, Violation, violation, window_starts
from helix_runner.errors import ErrorKind, RunnerError

# How long a replica keeps a project's quota before reading it again.
QUOTA_TTL_SECONDS = 2.0


def quota_exceeded(project_id: str, found: Violation) -> RunnerError:
    return RunnerError(ErrorKind.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED", found.describe(project_id),
                       {"project_id": project_id, "quota": found.quota, "limit_usd": f"{found.limit_usd:.4f}",
                        "spent_usd": f"{found.spent_usd:.4f}"},
                       quota_violation=(f"project:{project_id}", found.describe(project_id)))


class QuotaGuard:
    """Reads a project's quota and spend from the store (off the event loop) and decides."""

    def __init__(self, store: Any, off_loop: Callable[..., Awaitable[Any]],
                 committed: Callable[[], Awaitable[None]] | None = None, ttl_s: float = QUOTA_TTL_SECONDS):
        self.store = store
        self.off_loop = off_loop
        self.committed = committed  # waits until the queued row writes are in the store
        self.ttl_s = ttl_s
        self._quotas: dict[str, tuple[ProjectQuota | None, float]] = {}

    async def quota(self, project_id: str) -> ProjectQuota | None:
        """The project's quota, read at most every ``ttl_s`` (a change on any replica applies within it)."""
        hit = self._quotas.get(project_id)
        now = time.monotonic()
        if hit is not None and hit[1] > now:
            return hit[0]
        quota = await self.off_loop(self.store.get_quota, project_id)
        self._quotas[project_id] = (quota, now + self.ttl_s)
        return quota

    def forget(self, project_id: str) -> None:
        """Drops the cached quota (it was just changed here)."""
        self._quotas.pop(project_id, None)

    async def limited(self, project_id: str) -> bool:
        quota = await self.quota(project_id)
        return quota is not None and quota.any

    async def violation(self, project_id: str, *, after_writes: bool = False) -> Violation | None:
        """The cap the project has reached, if any; ``after_writes``: once the costs written so far
        are committed (a running phase's own)."""
        quota = await self.quota(project_id)
        if quota is None or not quota.any:
            return None
        if after_writes and self.committed is not None:
            await self.committed()
        return violation(quota, await self._spent(project_id))

    async def set(self, quota: ProjectQuota) -> None:
        await self.off_loop(self.store.put_quota, quota)
        self.forget(quota.project_id)

    async def spend(self, project_id: str) -> tuple[ProjectQuota, Spend]:
        """The project's quota (all caps 0 without one) and what it spent today and this month."""
        quota = await self.off_loop(self.store.get_quota, project_id) or ProjectQuota(project_id)
        return quota, await self._spent(project_id)

    async def _spent(self, project_id: str) -> Spend:
        day, month = window_starts(time.time_ns())
        return await self.off_loop(self.store.project_spend, project_id, day, month)

    async def admit(self, project_id: str) -> None:
        """Raises QUOTA_EXCEEDED when the project has reached a cap."""
        found = await self.violation(project_id)
        if found is not None:
            raise quota_exceeded(project_id, found)
