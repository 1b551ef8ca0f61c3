"""A rolling deploy's hand-over: an old replica drains and a new one continues its phase (docs/scale-out.md).

Two servers in this process on one PostgreSQL database, the real CLI, one shared workspace root (as
in test_handover_postgres.py). Replica A plays the release before the declared form: its phases'
requests are stored as that release stored them, msgspec JSON of the server's dataclasses
(``phases.handover.encode_legacy_request``, byte for byte what main 4f034a8 wrote: checked against its
fixture in test_handover_codec.py). Only that encoder is old; the rest of A is this release's code.
Replica B is this release: it reads the old row, continues the phase, and stores it in the declared form.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import grpc
import pytest
from support.runner_server import start_runner

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.api.errors import error_info
from helix_runner.api.handover_codec import ProtoHandoverCodec
from helix_runner.offline import Reply, Usage
from helix_runner.phases.handover import SavedRequest, decode_legacy_request, encode_legacy_request

pytestmark = [pytest.mark.real_cli, pytest.mark.slow]

IDS = {"job_id": "job-rolling", "phase_id": "p1"}


class OldReleaseCodec:
    """What a replica of the release before the declared form writes and reads."""

    def __init__(self):
        self.written: list[bytes] = []

    def encode_request(self, request: SavedRequest) -> bytes:
        data = encode_legacy_request(request)
        self.written.append(data)
        return data

    def decode_request(self, data: bytes) -> SavedRequest:
        return decode_legacy_request(data)


class RecordingCodec(ProtoHandoverCodec):
    """This release's codec, noting what it read and wrote."""

    def __init__(self):
        self.read: list[bytes] = []
        self.written: list[bytes] = []

    def encode_request(self, request: SavedRequest) -> bytes:
        data = super().encode_request(request)
        self.written.append(data)
        return data

    def decode_request(self, data: bytes) -> SavedRequest:
        self.read.append(data)
        return super().decode_request(data)


@contextlib.asynccontextmanager
async def _two_replicas(tmp_path: Path, api_a, api_b, **settings):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    harness_a = start_runner(tmp_path / "a", api_a, replica_id="replica-old", **settings)
    harness_b = start_runner(tmp_path / "b", api_b, replica_id="replica-new", **settings)
    a = await anext(harness_a)
    b = await anext(harness_b)
    try:
        yield a, b
    finally:
        await harness_b.aclose()
        await harness_a.aclose()


def _held(events) -> str | None:
    for e in events:
        if e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT:
            return e.control.tool_use_id
    return None


async def test_an_old_replica_hands_its_phase_to_a_new_one_in_a_rolling_deploy(
    claude_binary, scripted_api, postgres_url, tmp_path
):
    shared = tmp_path / "shared"
    (shared / "work").mkdir(parents=True)
    (shared / ".helix-runner-shared").write_text("every replica mounts this volume here\n")
    ran = shared / "work" / "ran.txt"
    call_input = {"command": f"echo once >> {ran}", "description": "Append once"}
    api_a = scripted_api([Reply.tool_use("Bash", call_input, usage=Usage(input_tokens=1000, output_tokens=50)),
                          Reply.text("never")])
    api_b = scripted_api([Reply.tool_use("Bash", call_input, tool_use_id="toolu_again",
                                         usage=Usage(input_tokens=1200, output_tokens=40)),
                          Reply.text("Done.", usage=Usage(input_tokens=1300, output_tokens=10))])
    settings = {"workspace_roots": [str(shared)], "database_url": postgres_url, "retry_max_attempts": 3}
    async with _two_replicas(tmp_path, api_a, api_b, **settings) as (a, b):
        old, new = OldReleaseCodec(), RecordingCodec()
        a.server.service.handover_codec = old
        b.server.service.handover_codec = new
        call = a.stub.RunPhase(pb.RunPhaseRequest(
            **IDS, prompt="Append once to ran.txt", working_dir=str(shared / "work"),
            options=pb.PhaseOptions(allowed_tools=["Bash"], model="claude-sonnet-4-5", max_turns=7,
                                    retry=pb.RetryPolicy(max_attempts=3, disable_jitter=True),
                                    breakpoints=[res.Breakpoint(tool_name="Bash", once=True)])),
            timeout=120)
        first = []
        held = None
        async with asyncio.timeout(60):
            async for response in call:
                first.extend(response.events)
                if (held := _held(response.events)) is not None:
                    break
        assert held is not None
        stored = await asyncio.to_thread(a.server.service.handover.state, IDS["job_id"], IDS["phase_id"])
        assert stored is not None and stored.request[:1] == b"{" and old.written  # the old release's row
        drained = asyncio.create_task(a.server.drain(30.0))
        with pytest.raises(grpc.aio.AioRpcError) as moved:
            async with asyncio.timeout(60):
                async for response in call:
                    first.extend(response.events)
        assert error_info(moved.value).reason == "PHASE_MOVED"
        await asyncio.wait_for(drained, 60)

        rest, result, approved = [], None, False
        async with asyncio.timeout(90):
            async for response in b.stub.WatchPhase(pb.WatchPhaseRequest(**IDS, after_sequence=first[-1].sequence),
                                                   timeout=90):
                rest.extend(response.events)
                if not approved and _held(response.events) is not None:
                    await b.stub.ResolveToolCall(pb.ResolveToolCallRequest(**IDS, tool_use_id=held,
                                                                           approve=pb.ApproveDecision()), timeout=10)
                    approved = True
                if response.HasField("result"):
                    result = response.result
        assert result is not None and result.status == res.PHASE_STATUS_SUCCEEDED, result
        assert ran.read_text() == "once\n"
        assert [e.sequence for e in first + rest] == list(range(1, len(first) + len(rest) + 1))
        assert [(x.number, x.replica_id, x.end_kind) for x in result.attempts] == [
            (1, "replica-old", res.ATTEMPT_END_KIND_MOVED), (2, "replica-new", res.ATTEMPT_END_KIND_COMPLETED)]
        # The new replica read the old form, and what it kept while the phase ran there is the declared one.
        assert new.read and new.read[0][:1] == b"{"
        assert new.written and all(data[:1] != b"{" for data in new.written)
        kept = ProtoHandoverCodec().decode_request(new.written[-1])
        assert (kept.spec.model, kept.spec.max_turns, kept.retry.max_attempts, kept.retry.jitter) == (
            "claude-sonnet-4-5", 7, 3, False)
        assert kept.accepted_ns == decode_legacy_request(old.written[0]).accepted_ns
        # The moved attempt came from the old row; the one that ran here was added to it.
        assert [a.replica_id for a in kept.attempts] == ["replica-old", "replica-new"]
