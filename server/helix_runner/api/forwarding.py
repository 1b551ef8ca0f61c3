"""Control RPCs for a phase another replica runs go to that replica (docs/scale-out.md, "Control forwarding").

A phase's process lives on its owner, so the RPCs the routing table (``api/routing.py``) routes to
the owner are answered there: the receiving replica looks up the owner's
registered address and sends it the same request with the caller's bearer token and remaining
deadline, and returns the owner's answer or the owner's error status unchanged. An owner that
cannot be reached is UNAVAILABLE with reason ``OWNER_UNREACHABLE``. A forwarded call carries
``x-helix-forwarded`` so the owner answers it itself: a request is forwarded at most once.

With TLS configured the call goes over TLS, the replica presenting its own certificate as its
client identity (the owner requires one under mutual TLS) and verifying the owner's against the
client CA (api/tls.py); the bearer token is sent as well, so a replica is authenticated the same
way a client is, by whatever the owner requires.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc
from grpc_status import rpc_status

from helix.runner.v1 import runner_service_pb2
from helix_runner.api.principals import principal_header
from helix_runner.api.service_descriptor import SERVICE
from helix_runner.api.tls import ForwardingCredentials
from helix_runner.domain.access import acting
from helix_runner.errors import ErrorKind, RunnerError
from helix_runner.phases.replicas import RemoteOwner

log = logging.getLogger(__name__)

FORWARDED_HEADER = "x-helix-forwarded"
# The caller a forwarded call acts for (api/principals.py principal_header).
PRINCIPAL_HEADER = "x-helix-principal"
DEFAULT_DEADLINE_SECONDS = 30.0

_RESPONSE_TYPES = {m.name: getattr(runner_service_pb2, m.output_type.name) for m in SERVICE.methods}


class OwnerStatus(Exception):
    """The owner answered with an error: the caller gets its status (code, message, details) as is."""

    def __init__(self, status: grpc.Status):
        super().__init__(status.details)
        self.status = status


def owner_unreachable(message: str, metadata: dict[str, str]) -> RunnerError:
    return RunnerError(ErrorKind.UNAVAILABLE, "OWNER_UNREACHABLE", message, metadata)


def owner_status(exc: grpc.aio.AioRpcError) -> OwnerStatus | None:
    """The other replica's own rich status, to relay unchanged; None when it never answered."""
    status = rpc_status.from_call(exc)
    if status is not None and status.details:
        return OwnerStatus(rpc_status.to_status(status))
    return None


class OwnerForwarder:
    """Sends a control RPC to the replica that runs the phase; one channel per owner address."""

    def __init__(self, token: str | None, tls: ForwardingCredentials | None = None):
        self.token = token
        self.tls = tls
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._generation = tls.generation if tls is not None else 0
        self._stale: list[grpc.aio.Channel] = []  # channels of a rotated identity, closed at close()
        # Placed RunPhase calls being relayed (api/placement.py): a drain lets them finish first.
        self._relays: set[Any] = set()
        self._relays_idle = asyncio.Event()
        self._relays_idle.set()

    def route(
        self, owner: RemoteOwner | None, job_id: str, phase_id: str
    ) -> tuple[str, dict[str, str]] | None:
        """The owner's address (and ids for errors) for a phase running elsewhere, or None (answer here).

        Raises ``OWNER_UNREACHABLE`` when the owner's lease ran out (the phase is swept to
        INTERRUPTED within a sweep interval) or it registered no address.
        """
        if owner is None:
            return None
        metadata = {"owner": owner.replica_id, "job_id": job_id, "phase_id": phase_id}
        if not owner.live:
            raise owner_unreachable(
                f"phase {phase_id} runs on replica {owner.replica_id}, whose lease ran out; it will be "
                "marked INTERRUPTED shortly",
                metadata,
            )
        if not owner.address:
            raise owner_unreachable(
                f"phase {phase_id} runs on replica {owner.replica_id}, which registered no address", metadata
            )
        return owner.address, metadata

    def recording_route(
        self, recorder: RemoteOwner, job_id: str, phase_id: str, on_this_disk: bool
    ) -> tuple[str, dict[str, str]] | None:
        """Where a finished phase's diff is read: the other replica that recorded it while that one is
        live, else here when the file is on this disk as well (a shared volume), else an error.

        Raises ``RECORDING_REPLICA_UNAVAILABLE`` (UNAVAILABLE: a replica with a stable id comes back
        with its disk) when the recording replica's lease ran out or it registered no address.
        """
        metadata = {"replica": recorder.replica_id, "job_id": job_id, "phase_id": phase_id}
        if recorder.live and recorder.address:
            return recorder.address, {**metadata, "owner": recorder.replica_id}
        if on_this_disk:
            return None
        raise RunnerError(
            ErrorKind.UNAVAILABLE,
            "RECORDING_REPLICA_UNAVAILABLE",
            f"phase {phase_id} ran on replica {recorder.replica_id}, whose disk holds its diff; that replica "
            "is not running now",
            metadata,
        )

    async def forward(
        self,
        method: str,
        request: Any,
        address: str,
        owner_metadata: dict[str, str],
        time_remaining: float | None,
    ) -> Any:
        """The owner's response to ``request``; its error as ``OwnerStatus``, or OWNER_UNREACHABLE."""
        call = self.channel(address).unary_unary(
            f"/{SERVICE.full_name}/{method}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=_RESPONSE_TYPES[method].FromString,
        )
        metadata = self.call_metadata()
        timeout = DEFAULT_DEADLINE_SECONDS if time_remaining is None else max(0.0, time_remaining)
        try:
            return await call(request, metadata=metadata, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            if (answered := owner_status(exc)) is not None:  # the owner answered: its status, unchanged
                raise answered from None
            log.warning(
                "cannot reach a phase's owner",
                extra={
                    "fields": {
                        "method": method,
                        "address": address,
                        "code": exc.code().name,
                        **owner_metadata,
                    }
                },
            )
            raise owner_unreachable(
                f"the replica that owns this phase ({owner_metadata.get('owner')} at {address}) did not answer: "
                f"{exc.code().name}",
                {**owner_metadata, "address": address, "code": exc.code().name},
            ) from None

    def track_relay(self, call: Any) -> None:
        """Counts a relayed RunPhase call until it is done (``relays_done``)."""
        self._relays.add(call)
        self._relays_idle.clear()

        def done(_: object) -> None:
            self._relays.discard(call)
            if not self._relays:
                self._relays_idle.set()

        call.add_done_callback(done)

    async def relays_done(self) -> None:
        """Returns once no relayed RunPhase is open (the caller bounds the wait: drain's grace)."""
        await self._relays_idle.wait()

    def call_metadata(self) -> list[tuple[str, str]]:
        """A forwarded call's metadata: the header that stops a second forward, the bearer token, and
        the caller's principal, which the replica answering checks the call against (a replica's own
        credentials are not a way around the caller's permissions; docs/tenancy.md)."""
        metadata = [(FORWARDED_HEADER, "1")]
        if self.token is not None:
            metadata.append(("authorization", f"Bearer {self.token}"))
        caller = acting.get()
        if caller is not None:
            metadata.append((PRINCIPAL_HEADER, principal_header(caller)))
        return metadata

    def channel(self, address: str) -> grpc.aio.Channel:
        """The shared channel to another replica (TLS as configured; also api/placement.py); all are
        re-made when the TLS files changed (a new identity)."""
        if self.tls is not None and self.tls.generation != self._generation:
            # Calls in flight keep their channel; it is closed with the forwarder.
            self._stale.extend(self._channels.values())
            self._channels.clear()
            self._generation = self.tls.generation
        channel = self._channels.get(address)
        if channel is None:
            channel = grpc.aio.insecure_channel(address) if self.tls is None else self.tls.channel(address)
            self._channels[address] = channel
        return channel

    async def close(self) -> None:
        for channel in [*self._channels.values(), *self._stale]:
            await channel.close()
        self._channels.clear()
        self._stale.clear()
