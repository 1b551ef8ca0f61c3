"""cli/sources.LiveEvents without a server: how it treats errors while following a phase."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from helix_runner_client import RunnerError, pb

from helix_runner.cli.sources import LiveEvents


class _CancelledByCaller:
    """A watch stream that yields one event, then waits; cancelled, it ends as gRPC reports a
    cancelled call: a CANCELLED status error rather than ``CancelledError`` (what a Ctrl-C can
    produce when the cancellation lands inside the client library)."""

    def __init__(self, opened: list[int]) -> None:
        opened.append(1)
        self.result = None
        self._sent = False
        self._reopened = len(opened) > 1

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc) -> None:
        return None

    def __aiter__(self):
        return self

    async def __anext__(self) -> pb.StreamEvent:
        if self._reopened:  # a re-attach after the cancellation: end it so the test cannot hang
            raise RunnerError(grpc.StatusCode.FAILED_PRECONDITION, "re-attached after being cancelled")
        if not self._sent:
            self._sent = True
            return pb.StreamEvent(sequence=1)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RunnerError(grpc.StatusCode.CANCELLED, "Locally cancelled by application!") from None
        raise AssertionError("unreachable")


class _Client:
    def __init__(self) -> None:
        self.opened: list[int] = []

    def watch_phase(self, job_id: str, phase_id: str, after: int, **_options) -> _CancelledByCaller:
        return _CancelledByCaller(self.opened)


async def test_a_cancelled_watcher_stops_instead_of_re_attaching() -> None:
    client = _Client()
    first = asyncio.Event()

    async def follow() -> None:
        async for _ in LiveEvents(client, "j", "p", 0, reconnect_seconds=30, on_notice=lambda _m: None):
            first.set()

    task = asyncio.create_task(follow())
    await asyncio.wait_for(first.wait(), 5)
    task.cancel()  # what asyncio.run does on Ctrl-C
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert len(client.opened) == 1  # no re-attach after the caller's own cancellation
