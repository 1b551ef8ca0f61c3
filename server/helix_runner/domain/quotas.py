"""A project's spend quota and the windows it is counted in (issue 32 item 3; docs/tenancy.md).

A quota caps what a project's phases may cost per UTC day and per UTC month (0: no cap). Spend
is read from the same ledger as the cost totals (each phase's reported cost, else its computed
one), counted in the window in which the phase was created: a phase that runs past midnight
counts for the day it started. Plain Python: the store sums, this module decides.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

MAX_QUOTA_USD = 1_000_000.0


@dataclass(frozen=True, slots=True)
class ProjectQuota:
    project_id: str
    spend_usd_per_day: float = 0.0  # 0: no cap
    spend_usd_per_month: float = 0.0
    update_time_ns: int = 0
    updated_by: str = ""

    @property
    def any(self) -> bool:
        return self.spend_usd_per_day > 0 or self.spend_usd_per_month > 0


@dataclass(frozen=True, slots=True)
class Spend:
    """What a project spent in the current day and month (USD)."""

    today_usd: float
    this_month_usd: float


@dataclass(frozen=True, slots=True)
class Violation:
    """A quota a project has reached: which (``spend_usd_per_day``), its limit and what was spent."""

    quota: str
    limit_usd: float
    spent_usd: float

    def describe(self, project_id: str) -> str:
        window = "today" if self.quota.endswith("day") else "this month"
        return (f"project {project_id} reached its {self.quota} quota: ${self.spent_usd:.4f} spent {window} "
                f"of ${self.limit_usd:.4f}")


def window_starts(now_ns: int) -> tuple[int, int]:
    """The start of the current UTC day and of the current UTC month, in ns since the epoch."""
    now = dt.datetime.fromtimestamp(now_ns / 1e9, dt.UTC)
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    month = day.replace(day=1)
    return int(day.timestamp()) * 1_000_000_000, int(month.timestamp()) * 1_000_000_000


def violation(quota: ProjectQuota, spend: Spend) -> Violation | None:
    """The first cap reached (day before month), or None."""
    if quota.spend_usd_per_day > 0 and spend.today_usd >= quota.spend_usd_per_day:
        return Violation("spend_usd_per_day", quota.spend_usd_per_day, spend.today_usd)
    if quota.spend_usd_per_month > 0 and spend.this_month_usd >= quota.spend_usd_per_month:
        return Violation("spend_usd_per_month", quota.spend_usd_per_month, spend.this_month_usd)
    return None


def check_limit(name: str, value: float) -> float:
    """A cap as given by a caller (ValueError when it is not a finite amount from 0 to the maximum)."""
    if not (value == value) or value < 0 or value > MAX_QUOTA_USD:  # NaN, negative, absurd
        raise ValueError(f"{name} must be between 0 (no cap) and {MAX_QUOTA_USD:g} USD")
    return float(value)
