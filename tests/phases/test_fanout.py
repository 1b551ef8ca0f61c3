"""The run's fan-out: every observer sees every batch whole, in order; batches published from an
observer wait until the current batch has been through every observer."""

from __future__ import annotations

import pytest

from helix_runner.phases.fanout import Fanout


def test_observers_run_in_list_order_for_each_batch():
    calls = []
    fanout = Fanout([lambda b: calls.append(("persist", b)), lambda b: calls.append(("control", b))])
    fanout.publish([1, 2])
    fanout.publish([])  # nothing to fan out
    fanout.publish([3])
    assert calls == [("persist", [1, 2]), ("control", [1, 2]), ("persist", [3]), ("control", [3])]


def test_a_batch_published_by_an_observer_follows_the_current_batch():
    calls = []

    def controller(batch):
        calls.append(("control", batch))
        if batch == [1, 2]:
            fanout.publish([3])  # e.g. STEP_COMPLETE emitted while observing a tool result
            fanout.publish([4])
            calls.append(("control returned", batch))

    fanout = Fanout(
        [lambda b: calls.append(("persist", b)), controller, lambda b: calls.append(("telemetry", b))]
    )
    fanout.publish([1, 2])
    assert calls == [
        ("persist", [1, 2]),
        ("control", [1, 2]),
        ("control returned", [1, 2]),
        ("telemetry", [1, 2]),
        ("persist", [3]),
        ("control", [3]),
        ("telemetry", [3]),
        ("persist", [4]),
        ("control", [4]),
        ("telemetry", [4]),
    ]


def test_an_observer_that_raises_does_not_lose_queued_batches():
    calls = []

    def flaky(batch):
        if batch == [1]:
            fanout.publish([2])
            raise RuntimeError("boom")
        calls.append(batch)

    fanout = Fanout([flaky])
    with pytest.raises(RuntimeError):
        fanout.publish([1])
    fanout.publish([3])
    assert calls == [[2], [3]]  # the queued batch goes first, in order
