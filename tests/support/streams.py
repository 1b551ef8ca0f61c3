"""A RunPhase or WatchPhase call read in the background, for tests that act while a phase runs."""

from __future__ import annotations

import asyncio

import grpc

from helix.runner.v1 import events_pb2 as ev


class Stream:
    """The call's events and result as they arrive, with bounded waits for an event.

    An RPC error ends the stream: ``finish`` raises it, or, with ``keep_error``, keeps it in
    ``error`` for the test to check (a stream the test expects to break).
    """

    def __init__(self, call, *, wait_limit: float = 30.0, keep_error: bool = False):
        self.events: list = []
        self.batch_sizes: list[int] = []  # events per response message carrying events
        self.result = None
        self.error: grpc.aio.AioRpcError | None = None
        self.wait_limit = wait_limit
        self.keep_error = keep_error
        self._changed = asyncio.Condition()
        self._task = asyncio.create_task(self._read(call))

    async def _read(self, call):
        try:
            async for response in call:
                async with self._changed:
                    self.events.extend(response.events)
                    if response.events:
                        self.batch_sizes.append(len(response.events))
                    if response.HasField("result"):
                        self.result = response.result
                    self._changed.notify_all()
        except grpc.aio.AioRpcError as exc:
            self.error = exc
        async with self._changed:
            self._changed.notify_all()

    async def wait_for(self, predicate, limit: float | None = None, after: int = 0):
        """The first event with a sequence above ``after`` matching ``predicate``, waiting at most
        ``limit`` (default ``wait_limit``) s."""
        async with asyncio.timeout(self.wait_limit if limit is None else limit), self._changed:
            while True:
                for e in self.events:
                    if e.sequence > after and predicate(e):
                        return e
                assert self.result is None and not self._task.done(), (
                    f"the stream ended first ({self.error or self.result.reason})"
                )
                await self._changed.wait()

    async def control(self, kind: int, limit: float | None = None, after: int = 0):
        """The first control event of ``kind`` with a sequence above ``after``."""
        return await self.wait_for(lambda e: e.HasField("control") and e.control.kind == kind, limit, after)

    async def finish(self, limit: float = 60.0):
        """The events and the result once the call ended (at most ``limit`` s)."""
        await asyncio.wait_for(asyncio.shield(self._task), limit)
        if self.error is not None and not self.keep_error:
            raise self.error
        return self.events, self.result


def breakpoint_hit(e) -> bool:
    return e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT


def queued(e) -> bool:
    return e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_QUEUED
