"""The async facade over a fake RunnerService served by grpc.aio in-process (real transport and trailers)."""

from __future__ import annotations

import asyncio
import collections
import datetime
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


def rich_status(
    code: grpc.StatusCode, message: str, reason: str, retry_delay: float | None = None, **metadata: str
) -> grpc.Status:
    info = google_rpc.ErrorInfo(reason=reason, domain=ERROR_DOMAIN, metadata=metadata)
    details = [AnyMessage(type_url="type.googleapis.com/google.rpc.ErrorInfo", value=bytes(info))]
    if retry_delay is not None:
        retry = google_rpc.RetryInfo(retry_delay=datetime.timedelta(seconds=retry_delay))
        details.append(AnyMessage(type_url="type.googleapis.com/google.rpc.RetryInfo", value=bytes(retry)))
    status = google_rpc.Status(code=code.value[0], message=message, details=details)
    return _Status(code, message, (("grpc-status-details-bin", bytes(status)),))


def moved(job_id: str, after: int, replica: str = "replica-a", retry_delay: float = 15.0) -> grpc.Status:
    """What a draining replica ends a phase's stream with (the contract in docs/scale-out.md)."""
    return rich_status(grpc.StatusCode.UNAVAILABLE, f"phase p1 of job {job_id} moved to another replica",
                       "PHASE_MOVED", retry_delay, job_id=job_id, phase_id="p1", after_sequence=str(after),
                       from_replica=replica)  # fmt: skip


def event(sequence: int, text: str = "") -> pb.StreamEvent:
    return pb.StreamEvent(
        sequence=sequence, assistant_text=pb.AssistantText(text=text or f"event {sequence}")
    )


class FakeRunner:
    """Just enough of RunnerService to exercise the facade."""

    def __init__(self) -> None:
        self.cancelled = asyncio.Event()
        self.authorization: list[str | None] = []
        self.jobs = [pb.Job(job_id=f"job-{i}") for i in range(5)]
        self.watches: list[int] = []  # after_sequence of each WatchPhase
        self.draining_answers = 1  # re-attaches the draining replica still answers PHASE_MOVED
        self.stopping_answers = 0  # re-attaches cancelled by the draining replica's server stopping
        self.watching = asyncio.Event()

    async def run_phase(self, request: pb.RunPhaseRequest, context: grpc.aio.ServicerContext):
        self.authorization.append(dict(context.invocation_metadata()).get("authorization"))
        if request.job_id in ("moving", "lost", "stuck"):  # the replica drains after event 2
            yield pb.RunPhaseResponse(events=[event(1), event(2)])
            await context.abort_with_status(
                moved(request.job_id, 2, retry_delay=15.0 if request.job_id == "moving" else 0.1)
            )
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
        self.watches.append(request.after_sequence)
        if request.job_id == "stuck":  # the re-attached watch waits (for the adopter)
            self.watching.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        if request.job_id == "lost":  # every replica it reaches is the draining one
            await context.abort_with_status(moved("lost", request.after_sequence, retry_delay=0.1))
        if request.job_id == "moving":
            if self.stopping_answers:  # its server stops under the re-attach: gRPC says CANCELLED
                self.stopping_answers -= 1
                await context.abort(grpc.StatusCode.CANCELLED, "CANCELLED")
            if self.draining_answers:  # the first re-attach lands on the draining replica again
                self.draining_answers -= 1
                await context.abort_with_status(moved("moving", request.after_sequence))
            # The adopter: a re-sent event at the cursor (never shown twice), the rest, the result.
            yield pb.WatchPhaseResponse(events=[event(request.after_sequence), event(3), event(4)])
            yield pb.WatchPhaseResponse(events=[event(5)])
            yield pb.WatchPhaseResponse(
                result=pb.PhaseResult(status=pb.PhaseStatus.SUCCEEDED, last_sequence=5)
            )
            return
        for sequence in range(request.after_sequence + 1, 4):
            yield pb.WatchPhaseResponse(events=[event(sequence)])
        yield pb.WatchPhaseResponse(result=pb.PhaseResult(status=pb.PhaseStatus.CANCELLED, last_sequence=3))

    async def get_job(self, request: pb.GetJobRequest, context: grpc.aio.ServicerContext):
        await context.abort_with_status(
            rich_status(
                grpc.StatusCode.NOT_FOUND,
                f"job {request.job_id} does not exist",
                "JOB_NOT_FOUND",
                job_id=request.job_id,
            )
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
            factory = (
                grpc.unary_stream_rpc_method_handler if streaming else grpc.unary_unary_rpc_method_handler
            )
            methods[rpc] = factory(
                implementation,
                request_deserializer=request_type.FromString,
                response_serializer=response_type.SerializeToString,
            )
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
        async with client.run_phase(
            pb.RunPhaseRequest(job_id="slow", prompt="hi", working_dir="/tmp")
        ) as phase:
            async for e in phase:
                assert e.sequence == 1
                break
        await asyncio.wait_for(fake.cancelled.wait(), 30)  # bounded; loaded CI can take seconds
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
        await asyncio.wait_for(fake.cancelled.wait(), 30)  # bounded; loaded CI can take seconds


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


async def test_a_moved_phase_is_followed_through_watch_phase_as_one_gap_free_stream(fake):
    async with RunnerClient(fake.address) as client:
        seen = []
        phase = client.run_phase(pb.RunPhaseRequest(job_id="moving", phase_id="p1", prompt="hi", working_dir="/tmp"),
                                 on_move=seen.append)  # fmt: skip
        events, result = await phase.collect()
    assert [e.sequence for e in events] == [1, 2, 3, 4, 5]
    assert result.status == pb.PhaseStatus.SUCCEEDED and phase.last_sequence == 5
    # Re-attached after what it received; the draining replica's second PHASE_MOVED was retried.
    assert fake.watches == [2, 2]
    assert [(m.job_id, m.phase_id, m.from_replica, m.after_sequence) for m in phase.moves] == [
        ("moving", "p1", "replica-a", 2)
    ]
    assert seen == phase.moves


async def test_a_re_attach_cancelled_by_a_stopping_server_is_tried_again(fake):
    fake.draining_answers, fake.stopping_answers = 0, 1
    async with RunnerClient(fake.address) as client:
        phase = client.run_phase(pb.RunPhaseRequest(job_id="moving", phase_id="p1", prompt="hi", working_dir="/tmp"))
        events, result = await phase.collect()
    assert [e.sequence for e in events] == [1, 2, 3, 4, 5] and result.status == pb.PhaseStatus.SUCCEEDED
    assert fake.watches == [2, 2]


async def test_a_watch_follows_a_move_too(fake):
    async with RunnerClient(fake.address) as client:
        fake.draining_answers = 2
        phase = client.watch_phase("moving", "p1", after_sequence=2)
        assert [e.sequence async for e in phase] == [3, 4, 5]  # the first answers were PHASE_MOVED
    assert fake.watches == [2, 2, 2] and len(phase.moves) == 1


async def test_without_following_a_move_is_a_runner_error_with_what_watch_phase_needs(fake):
    async with RunnerClient(fake.address, follow_moves=False) as client:
        phase = client.run_phase(
            pb.RunPhaseRequest(job_id="moving", phase_id="p1", prompt="hi", working_dir="/tmp")
        )
        with pytest.raises(RunnerError) as raised:
            await phase.collect()
    err = raised.value
    assert err.code == grpc.StatusCode.UNAVAILABLE and err.phase_moved and err.retry_delay == 15.0
    assert dict(err.metadata) == {"job_id": "moving", "phase_id": "p1", "after_sequence": "2",
                                  "from_replica": "replica-a"}  # fmt: skip
    assert fake.watches == []


async def test_a_move_no_replica_takes_raises_after_the_move_timeout(fake):
    async with RunnerClient(fake.address, move_timeout=0.5) as client:
        phase = client.run_phase(
            pb.RunPhaseRequest(job_id="lost", phase_id="p1", prompt="hi", working_dir="/tmp")
        )
        with pytest.raises(RunnerError) as raised:
            await asyncio.wait_for(phase.collect(), 30)
    assert raised.value.phase_moved
    assert len(fake.watches) >= 2 and set(fake.watches) == {2}  # retried, always after what it had


async def test_cancelling_while_following_a_move_cancels_the_watch(fake):
    async with RunnerClient(fake.address) as client:
        phase = client.run_phase(
            pb.RunPhaseRequest(job_id="stuck", phase_id="p1", prompt="hi", working_dir="/tmp")
        )
        seen = []

        async def read():
            async for e in phase:
                seen.append(e.sequence)

        reader = asyncio.create_task(read())
        await asyncio.wait_for(fake.watching.wait(), 10)  # it follows the move and waits in WatchPhase
        phase.cancel()
        await asyncio.wait_for(fake.cancelled.wait(), 30)  # bounded; loaded CI can take seconds  # the watch call itself was cancelled
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
    assert seen == [1, 2] and phase.result is None


def test_error_info_decoding_ignores_other_trailers_and_reasons():
    assert error_info_from_metadata(None) is None
    assert error_info_from_metadata((("x-other", "v"),)) is None
    foreign = RunnerError(
        grpc.StatusCode.NOT_FOUND, "m", google_rpc.ErrorInfo(reason="JOB_NOT_FOUND", domain="x.y")
    )
    assert foreign.reason == "JOB_NOT_FOUND" and foreign.error_reason is None
    newer = RunnerError(
        grpc.StatusCode.NOT_FOUND, "m", google_rpc.ErrorInfo(reason="BRAND_NEW", domain=ERROR_DOMAIN)
    )
    assert newer.error_reason is None


def test_the_async_stub_covers_every_rpc_of_the_generated_stub():
    generated = {
        name
        for name, member in inspect.getmembers(pb.RunnerServiceStub, inspect.isfunction)
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
