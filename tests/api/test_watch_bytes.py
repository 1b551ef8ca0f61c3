"""Encode once, end to end: the RunPhase caller and every watcher receive the same event bytes.

Events are encoded once at publish and each live batch is framed once; however the server groups
events into messages for a stream (live batches, batches joined for a watcher behind, history
pages), the concatenated bytes of each stream are the same, and decode with the generated code to
the same gap-free events, result last.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.offline import Reply

pytestmark = pytest.mark.real_cli

RUN = "/helix.runner.v1.RunnerService/RunPhase"
WATCH = "/helix.runner.v1.RunnerService/WatchPhase"


async def raw_stream(call) -> tuple[bytes, list[int], bytes | None]:
    """The event bytes of a stream (results apart), the event count of each message, the result message."""
    data, counts, result = bytearray(), [], None
    while (message := await call.read()) is not grpc.aio.EOF:
        if message[:1] == b"\x12":
            result = message
            break
        data += message
        counts.append(len(pb.WatchPhaseResponse.FromString(message).events))
    return bytes(data), counts, result


async def test_caller_and_watchers_get_identical_bytes(claude_binary, scripted_api, runner_factory):
    api = scripted_api([Reply.tool_use("Bash", {"command": f"echo {i}"}) for i in range(3)] + [Reply.text("done")])
    async with runner_factory(api) as runner:
        request = pb.RunPhaseRequest(job_id="bytes", phase_id="p", prompt="x", working_dir=str(runner.workdir),
                                     options=pb.PhaseOptions(allowed_tools=["Bash"]))
        caller = runner.channel.unary_stream(RUN, request_serializer=pb.RunPhaseRequest.SerializeToString,
                                             response_deserializer=None)(request, timeout=60)
        first = await caller.read()  # started: the watchers below join a live phase
        watch = pb.WatchPhaseRequest(job_id="bytes", phase_id="p", after_sequence=0)
        watchers = [runner.channel.unary_stream(WATCH, request_serializer=pb.WatchPhaseRequest.SerializeToString,
                                                response_deserializer=None)(watch, timeout=60) for _ in range(5)]
        streams = await asyncio.wait_for(asyncio.gather(*(raw_stream(w) for w in watchers)), 60)
        rest, _, caller_result = await asyncio.wait_for(raw_stream(caller), 60)
        # Replayed from the store once the phase is over: the same bytes again.
        replay = await raw_stream(runner.channel.unary_stream(
            WATCH, request_serializer=pb.WatchPhaseRequest.SerializeToString, response_deserializer=None)(
            watch, timeout=60))
    result = pb.RunPhaseResponse.FromString(caller_result).result
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    events = pb.WatchPhaseResponse.FromString(streams[0][0]).events
    assert [e.sequence for e in events] == list(range(1, result.last_sequence + 1))
    assert all(isinstance(e, ev.StreamEvent) for e in events)
    for data, counts, watcher_result in [*streams, replay]:
        assert data == streams[0][0] and sum(counts) == result.last_sequence
        assert pb.WatchPhaseResponse.FromString(watcher_result).result == result
    assert first + rest == streams[0][0]  # the caller's first message was read before the others
