"""Quota windows and the decision, as plain values."""

from __future__ import annotations

import datetime as dt

import pytest

from helix_runner.domain.quotas import ProjectQuota, Spend, check_limit, violation, window_starts


def ns(*args: int) -> int:
    return int(dt.datetime(*args, tzinfo=dt.UTC).timestamp()) * 1_000_000_000


def test_the_windows_are_the_utc_day_and_month():
    assert window_starts(ns(2026, 12, 5, 23, 59, 59)) == (ns(2026, 12, 5), ns(2026, 12, 1))
    assert window_starts(ns(2027, 1, 1, 0, 0, 0)) == (ns(2027, 1, 1), ns(2027, 1, 1))


def test_the_first_cap_reached_is_named_and_zero_means_none():
    quota = ProjectQuota("p", spend_usd_per_day=1.0, spend_usd_per_month=10.0)
    assert violation(quota, Spend(0.99, 9.99)) is None
    assert violation(quota, Spend(1.0, 1.0)).quota == "spend_usd_per_day"
    assert violation(quota, Spend(0.5, 10.0)).quota == "spend_usd_per_month"
    assert violation(ProjectQuota("p"), Spend(1e6, 1e6)) is None and not ProjectQuota("p").any
    assert "$1.0000 spent today of $1.0000" in violation(quota, Spend(1.0, 1.0)).describe("p")


@pytest.mark.parametrize("value", [-1.0, float("nan"), 1e12])
def test_a_cap_out_of_range_is_refused(value):
    with pytest.raises(ValueError, match="between 0"):
        check_limit("spend_usd_per_day", value)
