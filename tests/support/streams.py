"""A RunPhase or WatchPhase call read in the background, for tests that act while a phase runs."""

from __future__ import annotations

import asyncio

import grpc

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import runner_service_pb2 as pb


class Stream:
    """The call's events and result as they arrive, with bounded waits for an event.

    An RPC error ends the stream: ``finish`` raises it, or, with ``keep_error``, keeps it in
    ``error`` for the test to check (a stream the test expects to break).
    """

    def __init__(self, call, *, wait_limit: float = 30.0, keep_error: bool = False):
        self.call = call
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


class PhaseCall(Stream):
    """A RunPhase call read in the background (``Stream``), started from its ids and options."""

    def __init__(self, stub, job_id: str, phase_id: str, workdir, prompt: str = "go", **options):
        self.job_id, self.phase_id = job_id, phase_id
        request = pb.RunPhaseRequest(job_id=job_id, phase_id=phase_id, prompt=prompt, working_dir=str(workdir),
                                     options=pb.PhaseOptions(**options))
        super().__init__(stub.RunPhase(request, timeout=120))

    async def finish(self, limit: float = 60.0):
        """The result, once the call ended."""
        return (await super().finish(limit))[1]

    def ids(self, **kw):
        return {"job_id": self.job_id, "phase_id": self.phase_id, **kw}


def start_phase(runner, job_id: str, **options) -> PhaseCall:
    """RunPhase ``go`` as phase ``p`` of ``job_id`` in the runner's workdir, read in the background."""
    return PhaseCall(runner.stub, job_id, "p", runner.workdir, **options)
