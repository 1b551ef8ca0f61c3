"""Async Python client for the Helix Runner gRPC service (``helix.runner.v1.RunnerService``).

The messages are betterproto2 dataclasses generated from the repository's ``proto/`` (see
``helix_runner_client.pb``); :class:`RunnerClient` calls the service over ``grpc.aio``::

    async with RunnerClient("127.0.0.1:50051") as client:
        phase = client.run_phase(pb.RunPhaseRequest(job_id="demo", prompt="Say hello", working_dir="/srv/work"))
        async for event in phase:
            print(event.sequence, event_kind(event))
        print(phase.result.status)

Every failed call raises :class:`RunnerError`, which carries the decoded ``google.rpc.ErrorInfo``.
"""

from importlib.metadata import PackageNotFoundError, version

from ._client import PhaseMove, PhaseStream, RunnerClient, RunnerServiceAsyncStub, event_kind, secure_channel
from ._errors import (
    ERROR_DOMAIN,
    PHASE_MOVED,
    RunnerError,
    error_info_from_metadata,
    retry_delay_from_metadata,
)
from ._proto.google import rpc as google_rpc
from ._proto.helix.runner import v1 as pb

CONTRACT = "helix.runner.v1"
"""The protobuf package this client speaks."""

try:
    __version__ = version("helix-runner-client")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without installing
    __version__ = "0.0.0"

__all__ = [
    "CONTRACT",
    "ERROR_DOMAIN",
    "PHASE_MOVED",
    "PhaseMove",
    "PhaseStream",
    "RunnerClient",
    "RunnerError",
    "RunnerServiceAsyncStub",
    "__version__",
    "error_info_from_metadata",
    "retry_delay_from_metadata",
    "event_kind",
    "google_rpc",
    "pb",
    "secure_channel",
]
