"""`helix-runner run` and `watch` when the phase they follow moves to another replica: the serving
replica drains and ends the stream with UNAVAILABLE / PHASE_MOVED (its ErrorInfo says where to
re-attach); both commands say so and go on through WatchPhase, showing each event once.

The server is a fake RunnerService in this process (real gRPC transport and trailers); the
commands run as real child processes.
"""

from __future__ import annotations

import asyncio
import datetime
import subprocess
import sys

import grpc
import pytest
from helix_runner_client import ERROR_DOMAIN, google_rpc, pb
from helix_runner_client._client import _METHODS
from helix_runner_client._proto.google.protobuf import Any as AnyMessage
from support.processes import serve_env


class _Status(grpc.Status):
    def __init__(self, code, details, trailing_metadata):
        self.code, self.details, self.trailing_metadata = code, details, trailing_metadata


def moved(job_id: str, after: int) -> grpc.Status:
    info = google_rpc.ErrorInfo(reason="PHASE_MOVED", domain=ERROR_DOMAIN, metadata={
        "job_id": job_id, "phase_id": "p1", "after_sequence": str(after), "from_replica": "replica-a"})  # fmt: skip
    retry = google_rpc.RetryInfo(retry_delay=datetime.timedelta(seconds=15))
    details = [AnyMessage(type_url="type.googleapis.com/google.rpc.ErrorInfo", value=bytes(info)),
               AnyMessage(type_url="type.googleapis.com/google.rpc.RetryInfo", value=bytes(retry))]  # fmt: skip
    message = f"phase p1 of job {job_id} moved to another replica"
    status = google_rpc.Status(code=grpc.StatusCode.UNAVAILABLE.value[0], message=message, details=details)
    return _Status(grpc.StatusCode.UNAVAILABLE, message, (("grpc-status-details-bin", bytes(status)),))


def text(sequence: int) -> pb.StreamEvent:
    return pb.StreamEvent(sequence=sequence, assistant_text=pb.AssistantText(text=f"line-{sequence}"))


class MovingRunner:
    """Serves phase p1 of any job as a replica that drains after event 2, then as the adopter."""

    def __init__(self) -> None:
        self.watches: list[int] = []

    async def run_phase(self, request, context):
        yield pb.RunPhaseResponse(events=[text(1), text(2)])
        await context.abort_with_status(moved(request.job_id, 2))

    async def watch_phase(self, request, context):
        self.watches.append(request.after_sequence)
        if len(self.watches) == 1 and request.job_id == "watched":  # the draining replica answers first
            await context.abort_with_status(moved(request.job_id, request.after_sequence))
        yield pb.WatchPhaseResponse(events=[text(s) for s in range(request.after_sequence + 1, 5)])
        yield pb.WatchPhaseResponse(result=pb.PhaseResult(status=pb.PhaseStatus.SUCCEEDED, last_sequence=4))

    def handler(self) -> grpc.GenericRpcHandler:
        methods = {}
        for name, rpc, request_type, response_type, _streaming in _METHODS:
            if hasattr(self, name):
                methods[rpc] = grpc.unary_stream_rpc_method_handler(
                    getattr(self, name), request_deserializer=request_type.FromString,
                    response_serializer=response_type.SerializeToString)  # fmt: skip
        return grpc.method_handlers_generic_handler("helix.runner.v1.RunnerService", methods)


@pytest.fixture
async def moving():
    runner = MovingRunner()
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((runner.handler(),))
    runner.address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    await server.start()
    yield runner
    await server.stop(None)


async def helix(tmp_path, *args: str) -> subprocess.CompletedProcess:
    """`helix-runner ARGS` as a child process, bounded to 60 s (its output decoded)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "helix_runner", *args, env=serve_env(tmp_path), cwd=tmp_path,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        async with asyncio.timeout(60):
            out, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
    return subprocess.CompletedProcess(args, proc.returncode, out.decode(), err.decode())


def lines_of(stdout: str) -> list[str]:
    return [word for line in stdout.splitlines() for word in line.split() if word.startswith("line-")]


async def test_run_follows_a_moved_phase_to_its_end(moving, tmp_path):
    run = await helix(tmp_path, "run", "--server", moving.address, "--job-id", "ran", "--phase-id", "p1",
                      "--workdir", str(tmp_path), "--prompt", "go")  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert lines_of(run.stdout) == ["line-1", "line-2", "line-3", "line-4"]  # each once, in order
    assert moving.watches == [2]
    assert "the phase moved from replica replica-a (draining); following it after sequence 2" in run.stderr
    assert "SUCCEEDED" in run.stdout


async def test_watch_follows_a_move_even_before_its_first_event(moving, tmp_path):
    run = await helix(tmp_path, "watch", "watched", "p1", "--from", "1", "--server", moving.address)
    assert run.returncode == 0, run.stderr
    assert lines_of(run.stdout) == ["line-2", "line-3", "line-4"]
    assert moving.watches == [1, 1]
    assert "moved from replica replica-a" in run.stderr
