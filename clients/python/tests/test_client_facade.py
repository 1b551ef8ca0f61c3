"""The async facade over a fake RunnerService served by grpc.aio in-process (real transport and trailers)."""

from __future__ import annotations

import asyncio
import collections
import inspect

import grpc
import pytest

from helix_runner_client import (
    ERROR_DOMAIN,
    PhaseStream,
    RunnerClient,
    RunnerError,
    RunnerServiceAsyncStub,
    error_info_from_metadata,
    event_kind,
    google_rpc,
    pb,
)
from helix_runner_client._client import _METHODS
from helix_runner_client._proto.google.protobuf import Any as AnyMessage

SERVICE = "helix.runner.v1.RunnerService"


class _Status(collections.namedtuple("_Status", ("code", "details", "trailing_metadata")), grpc.Status):
    pass


def rich_status(code: grpc.StatusCode, message: str, reason: str, **metadata: str) -> grpc.Status:
    info = google_rpc.ErrorInfo(reason=reason, domain=ERROR_DOMAIN, metadata=metadata)
    detail = AnyMessage(type_url="type.googleapis.com/google.rpc.ErrorInfo", value=bytes(info))
    status = google_rpc.Status(code=code.value[0], message=message, details=[detail])
    return _Status(code, message, (("grpc-status-details-bin", bytes(status)),))


def event(sequence: int, text: str = "") -> pb.StreamEvent:
    return pb.StreamEvent(sequence=sequence, assistant_text=pb.AssistantText(text=text or f"event {sequence}"))


class FakeRunner:
    """Just enough of RunnerService to exercise the facade."""

    def __init__(self) -> None:
        self.cancelled = asyncio.Event()
        self.authorization: list[str | None] = []
        self.jobs = [pb.Job(job_id=f"job-{i}") for i in range(5)]

    async def run_phase(self, request: pb.RunPhaseRequest, context: grpc.aio.ServicerContext):
        self.authorization.append(dict(context.invocation_metadata()).get("authorization"))
        if request.job_id == "slow":
            yield pb.RunPhaseResponse(events=[event(1)])
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
            return
        if request.job_id == "truncated":
            yield pb.RunPhaseResponse(events=[event(1)])
            return
        yield pb.RunPhaseResponse(events=[event(1), event(2)])
        yield pb.RunPhaseResponse(events=[event(3)])
        yield pb.RunPhaseResponse(result=pb.PhaseResult(status=pb.PhaseStatus.SUCCEEDED, last_sequence=3))

    async def watch_phase(self, request: pb.WatchPhaseRequest, context: grpc.aio.ServicerContext):
        for sequence in range(request.after_sequence + 1, 4):
            yield pb.WatchPhaseResponse(events=[event(sequence)])
        yield pb.WatchPhaseResponse(result=pb.PhaseResult(status=pb.PhaseStatus.CANCELLED, last_sequence=3))

    async def get_job(self, request: pb.GetJobRequest, context: grpc.aio.ServicerContext):
        await context.abort_with_status(
            rich_status(grpc.StatusCode.NOT_FOUND, f"job {request.job_id} does not exist", "JOB_NOT_FOUND",
                        job_id=request.job_id)
        )

    async def list_jobs(self, request: pb.ListJobsRequest, context: grpc.aio.ServicerContext):
        start = int(request.page_token or 0)
        end = start + request.page_size
        token = str(end) if end < len(self.jobs) else ""
        return pb.ListJobsResponse(jobs=self.jobs[start:end], next_page_token=token)

    def handler(self) -> grpc.GenericRpcHandler:
        methods = {}
        for name, rpc, request_type, response_type, streaming in _METHODS:
            implementation = getattr(self, name, None)
            if implementation is None:
                continue
            factory = grpc.unary_stream_rpc_method_handler if streaming else grpc.unary_unary_rpc_method_handler
            methods[rpc] = factory(implementation, request_deserializer=request_type.FromString,
                                   response_serializer=response_type.SerializeToString)
        return grpc.method_handlers_generic_handler(SERVICE, methods)


@pytest.fixture
async def fake():
    runner = FakeRunner()
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((runner.handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    runner.address = f"127.0.0.1:{port}"
    yield runner
    await server.stop(None)


async def test_run_phase_yields_every_event_then_the_result(fake):
    async with RunnerClient(fake.address, token="s3cret") as client:
        phase = client.run_phase(pb.RunPhaseRequest(job_id="job-1", prompt="hi", working_dir="/tmp"))
        events, result = await phase.collect()
    assert [e.sequence for e in events] == [1, 2, 3]
    assert event_kind(events[0]) == "assistant_text"
    assert result.status == pb.PhaseStatus.SUCCEEDED and result.status.proto_name == "PHASE_STATUS_SUCCEEDED"
    assert phase.result is result
    assert fake.authorization == ["Bearer s3cret"]


async def test_watch_phase_starts_after_the_cursor(fake):
    async with RunnerClient(fake.address) as client:
        phase = client.watch_phase("job-1", "p1", after_sequence=1)
        assert [e.sequence async for e in phase] == [2, 3]
    assert phase.result.status == pb.PhaseStatus.CANCELLED


async def test_leaving_the_context_cancels_the_call(fake):
    async with RunnerClient(fake.address) as client:
        async with client.run_phase(pb.RunPhaseRequest(job_id="slow", prompt="hi", working_dir="/tmp")) as phase:
            async for e in phase:
                assert e.sequence == 1
                break
        await asyncio.wait_for(fake.cancelled.wait(), 5)
        assert phase.result is None
        assert [e async for e in phase] == []


async def test_cancel_ends_the_iteration_quietly(fake):
    async with RunnerClient(fake.address) as client:
        phase = client.run_phase(pb.RunPhaseRequest(job_id="slow", prompt="hi", working_dir="/tmp"))
        seen = []
        async for e in phase:
            seen.append(e.sequence)
            phase.cancel()
        assert seen == [1]
        await asyncio.wait_for(fake.cancelled.wait(), 5)


async def test_a_stream_without_a_result_is_an_internal_error(fake):
    async with RunnerClient(fake.address) as client:
        phase = client.run_phase(pb.RunPhaseRequest(job_id="truncated", prompt="hi", working_dir="/tmp"))
        with pytest.raises(RunnerError) as raised:
            await phase.collect()
    assert raised.value.code == grpc.StatusCode.INTERNAL and raised.value.info is None


async def test_errors_carry_the_decoded_error_info(fake):
    async with RunnerClient(fake.address) as client:
        with pytest.raises(RunnerError) as raised:
            await client.get_job("nope")
    err = raised.value
    assert err.code == grpc.StatusCode.NOT_FOUND
    assert err.message == "job nope does not exist"
    assert (err.reason, err.domain, dict(err.metadata)) == ("JOB_NOT_FOUND", ERROR_DOMAIN, {"job_id": "nope"})
    assert err.error_reason == pb.ErrorReason.JOB_NOT_FOUND
    assert str(err) == "NOT_FOUND: job nope does not exist [JOB_NOT_FOUND]"


async def test_unimplemented_rpcs_are_runner_errors_without_info(fake):
    async with RunnerClient(fake.address) as client:
        with pytest.raises(RunnerError) as raised:
            await client.call("pause_phase", pb.PausePhaseRequest(job_id="j", phase_id="p"))
    assert raised.value.code == grpc.StatusCode.UNIMPLEMENTED
    assert raised.value.reason is None and raised.value.metadata == {} and raised.value.error_reason is None


async def test_iter_jobs_follows_page_tokens(fake):
    async with RunnerClient(fake.address) as client:
        assert [job.job_id async for job in client.iter_jobs(page_size=2)] == [f"job-{i}" for i in range(5)]


def test_error_info_decoding_ignores_other_trailers_and_reasons():
    assert error_info_from_metadata(None) is None
    assert error_info_from_metadata((("x-other", "v"),)) is None
    foreign = RunnerError(grpc.StatusCode.NOT_FOUND, "m", google_rpc.ErrorInfo(reason="JOB_NOT_FOUND", domain="x.y"))
    assert foreign.reason == "JOB_NOT_FOUND" and foreign.error_reason is None
    newer = RunnerError(grpc.StatusCode.NOT_FOUND, "m", google_rpc.ErrorInfo(reason="BRAND_NEW", domain=ERROR_DOMAIN))
    assert newer.error_reason is None


def test_the_async_stub_covers_every_rpc_of_the_generated_stub():
    generated = {
        name for name, member in inspect.getmembers(pb.RunnerServiceStub, inspect.isfunction)
        if not name.startswith("_")
    }
    assert {name for name, *_ in _METHODS} == generated
    for name, rpc, request_type, response_type, streaming in _METHODS:
        source = inspect.getsource(getattr(pb.RunnerServiceStub, name))
        assert f'"/{SERVICE}/{rpc}"' in source
        assert f"{request_type.__name__}.SerializeToString" in source
        assert f"{response_type.__name__}.FromString" in source
        assert ("unary_stream" in source) == streaming
    assert isinstance(PhaseStream, type) and RunnerServiceAsyncStub.__doc__
