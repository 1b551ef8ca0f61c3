"""Placement by free slots: a RunPhase this replica would queue runs on a replica with room.

When this replica's own ``max_running_phases`` is taken and another live replica has a free slot
(``Replicas.placement_target``, ``phases/placement.py``; the route ``PLACE``, ``api/routing.py``),
the RunPhase is sent there: the same
request, under the caller's remaining deadline, with this replica's bearer token and TLS identity
(``OwnerForwarder``'s channels) and ``x-helix-forwarded``, so the target admits it itself (queueing
if it has to) and never forwards it again. The target owns, runs and streams the phase; this
replica relays the stream's messages as they are (bytes, never decoded), so the caller sees what a
RunPhase on the target would show. A caller going away cancels the relayed call, so the target
applies the phase's ``on_disconnect`` as for its own caller; the relay ends when the target's
stream ends, with the target's status.

A target that refuses before its first message (unreachable, draining, its queue full, the
working directory unknown there, ...) and wrote no phase row leaves nothing behind: the phase is
then started here as if nothing was tried (it queues here) and the refusal is logged. A target
that did write the phase answers for it: its error reaches the caller. Design: docs/scale-out.md,
"Cluster admission" → "Placement by free slots".
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from helix_runner.api.forwarding import OwnerForwarder, owner_status, owner_unreachable
from helix_runner.api.service_descriptor import SERVICE
from helix_runner.phases.placement import PlacementTarget

log = logging.getLogger(__name__)

RUN_PHASE = f"/{SERVICE.full_name}/RunPhase"


async def place_run_phase(
    forwarder: OwnerForwarder,
    request: Any,
    target: PlacementTarget,
    context: Any,
    recorded: Callable[[], bool],
) -> AsyncIterator[bytes] | None:
    """The target's RunPhase stream once it sent its first message; None if it refused and wrote nothing.

    ``request`` must carry its phase id (so ``recorded`` can tell whether the target wrote the
    phase, and a fallback here uses the same id). ``context`` is the caller's call: its deadline
    bounds the relayed call, and its end cancels it.
    """
    remaining = getattr(context, "time_remaining", None)
    timeout = remaining() if remaining is not None else None
    call = forwarder.channel(target.address).unary_stream(
        RUN_PHASE, request_serializer=lambda m: m.SerializeToString(), response_deserializer=None
    )(request, metadata=forwarder.call_metadata(), timeout=timeout)
    if hasattr(context, "add_done_callback"):
        # A caller cancel can land while grpc writes a message, outside the relay (servicer.RunPhase).
        context.add_done_callback(lambda _: call.cancel())
    fields = {"job_id": request.job_id, "phase_id": request.phase_id, "target": target.replica_id,
              "address": target.address}
    try:
        first = await call.read()
    except grpc.aio.AioRpcError as exc:
        if recorded():  # the target took the phase: its answer is the phase's
            raise _relayed_error(exc, target, fields) from None
        log.warning("placing a phase on another replica failed; it is admitted here",
                    extra={"fields": {**fields, "code": exc.code().name, "message": exc.details() or ""}})
        return None
    except BaseException:
        call.cancel()
        raise
    if first is grpc.aio.EOF:  # a RunPhase always ends with its result; a bare end is a broken target
        call.cancel()
        if recorded():
            raise owner_unreachable(f"replica {target.replica_id} ended the phase's stream without its result",
                                    fields)
        return None
    log.info("phase placed on another replica (this one is full)", extra={"fields": {**fields, "free": target.free}})
    forwarder.track_relay(call)  # a drain of this replica lets the relay finish (server.drain)
    return _relay(call, first, target, fields)


async def _relay(call: Any, first: bytes, target: PlacementTarget, fields: dict[str, str]) -> AsyncIterator[bytes]:
    """Yields the target's messages as they are; its error status ends the caller's stream the same way."""
    try:
        yield first
        while True:
            message = await call.read()
            if message is grpc.aio.EOF:
                return
            yield message
    except grpc.aio.AioRpcError as exc:
        raise _relayed_error(exc, target, fields) from None
    finally:
        call.cancel()  # the caller went away (or the stream ended: then a no-op)


def _relayed_error(exc: grpc.aio.AioRpcError, target: PlacementTarget, fields: dict[str, str]) -> Exception:
    """The target's rich status unchanged (``OwnerStatus``); without one, OWNER_UNREACHABLE."""
    if (answered := owner_status(exc)) is not None:
        return answered
    log.warning("the replica running a placed phase stopped answering",
                extra={"fields": {**fields, "code": exc.code().name}})
    return owner_unreachable(
        f"the replica running this phase ({target.replica_id} at {target.address}) did not answer: "
        f"{exc.code().name}; WatchPhase on any replica follows the phase",
        {**fields, "owner": target.replica_id, "code": exc.code().name},
    )
