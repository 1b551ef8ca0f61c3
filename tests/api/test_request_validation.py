"""Every request is checked before it does anything, and no failure leaks an exception's text.

The enum test is generated from the service descriptor: every enum field of every request
message, at any depth, gets a number its enum does not define (proto3 enums are open, so the
wire carries it), and the server must answer INVALID_ARGUMENT naming that field. Fields and RPCs
added later are covered without touching this file.
"""

from __future__ import annotations

import logging
from pathlib import Path

import grpc
import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix.runner.v1 import runner_service_pb2_grpc as pb_grpc
from helix_runner.api.errors import error_info
from helix_runner.config import load_config
from helix_runner.domain.bounds import PROMPT_MAX_BYTES, MiB
from helix_runner.server import start_server

SERVICE = pb.DESCRIPTOR.services_by_name["RunnerService"]


def enum_paths(message: type[Message] | object, prefix: tuple = (), seen: frozenset = frozenset()):
    """(path of field descriptors) for every enum field reachable from a message type."""
    descriptor = message if not hasattr(message, "DESCRIPTOR") else message.DESCRIPTOR
    for field in descriptor.fields:
        if field.type == FieldDescriptor.TYPE_ENUM:
            yield (*prefix, field)
        elif field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.full_name not in seen:
            yield from enum_paths(field.message_type, (*prefix, field), seen | {descriptor.full_name})


def undefined_number(enum) -> int:
    return max(enum.values_by_number) + 1000


def build(method, path: tuple) -> tuple[Message, str]:
    """A request with the enum at ``path`` set to an undefined number, and the field path the error names."""
    request = getattr(pb, method.input_type.name)()
    target, names, fields = request, [], list(path)
    while fields:
        field = fields.pop(0)
        if field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
            value_field = fields.pop(0)  # the entry's `value`
            names.append(f"{field.name}['k']")
            entries = getattr(target, field.name)
            if value_field.type == FieldDescriptor.TYPE_ENUM:
                entries["k"] = undefined_number(value_field.enum_type)
            else:
                target = entries["k"]
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            target = getattr(target, field.name).add() if field.is_repeated else getattr(target, field.name)
            names.append(f"{field.name}[0]" if field.is_repeated else field.name)
        elif field.is_repeated:  # a repeated enum: a valid value first, so the error must name index 1
            getattr(target, field.name).extend(
                [max(field.enum_type.values_by_number), undefined_number(field.enum_type)]
            )
            names.append(f"{field.name}[1]")
        else:
            setattr(target, field.name, undefined_number(field.enum_type))
            names.append(field.name)
    return request, ".".join(names)


CASES = [
    pytest.param(method, path, id=f"{method.name}:{'.'.join(f.name for f in path)}")
    for method in SERVICE.methods
    for path in enum_paths(method.input_type)
]


def test_the_generated_cases_cover_the_known_enum_fields():
    ids = {p.id for p in CASES}
    assert {
        "RunPhase:options.permission_mode",
        "RunPhase:options.on_disconnect",
        "ListJobs:statuses",
        "PausePhase:mode",
        "InjectMessage:mode",
    } <= ids


@pytest.fixture
async def stub(tmp_path: Path):
    config = load_config(
        flags={"port": 0, "data_dir": str(tmp_path / "data"), "workspace_roots": [str(tmp_path)]}, environ={}
    )
    server = await start_server(config)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            yield pb_grpc.RunnerServiceStub(channel), server
    finally:
        await server.server.stop(0)
        server.store.close()


async def call(stub, method, request):
    """Makes the call; returns the error (a stream's error comes with its first read)."""
    rpc = getattr(stub, method.name)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        if method.server_streaming:
            async for _ in rpc(request, timeout=10):
                pass
        else:
            await rpc(request, timeout=10)
    return caught.value


@pytest.mark.parametrize(("method", "path"), CASES)
async def test_an_undefined_enum_value_is_invalid_argument_naming_the_field(stub, method, path):
    request, field = build(method, path)
    error = await call(stub[0], method, request)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    info = error_info(error)
    assert (info.domain, info.reason, dict(info.metadata)) == (
        "runner.helix",
        "INVALID_FIELD",
        {"field": field},
    )
    assert field in error.details()


async def test_list_jobs_with_an_unknown_status_names_it(stub):
    error = await call(stub[0], SERVICE.methods_by_name["ListJobs"], pb.ListJobsRequest(statuses=[99]))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(error).metadata["field"] == "statuses[0]"
    assert "Exception" not in error.details() and "ValueError" not in error.details()


SECRET = "sk-ant-do-not-leak-0123"


async def test_an_unexpected_exception_is_internal_without_its_text(stub, monkeypatch, caplog):
    stub, server = stub

    def broken(*_args, **_kwargs):
        raise RuntimeError(f"database exploded with {SECRET}")

    monkeypatch.setattr(server.queries, "job", broken)
    monkeypatch.setattr(server.service, "watch", broken)
    caplog.set_level(logging.ERROR)
    for method, request in (
        (SERVICE.methods_by_name["GetJob"], pb.GetJobRequest(job_id="j")),
        (SERVICE.methods_by_name["WatchPhase"], pb.WatchPhaseRequest(job_id="j", phase_id="p")),
    ):
        error = await call(stub, method, request)
        assert error.code() == grpc.StatusCode.INTERNAL
        assert SECRET not in error.details() and "RuntimeError" not in error.details()
        info = error_info(error)
        assert (info.domain, info.reason, dict(info.metadata)) == (
            "runner.helix",
            "INTERNAL",
            {"method": method.name},
        )
    # The server's log has what the caller must not see, with the traceback.
    logged = [r for r in caplog.records if r.exc_info and SECRET in str(r.exc_info[1])]
    assert {r.getMessage() for r in logged} == {
        "GetJob failed unexpectedly",
        "WatchPhase failed unexpectedly",
    }


async def test_an_exception_mid_stream_ends_the_stream_internal(stub, monkeypatch):
    stub, server = stub

    async def deliveries():
        from helix_runner.phases.event_log import Delivery

        yield Delivery(events=[], result=None)
        raise KeyError(SECRET)

    async def watch(*_args):
        return deliveries()

    monkeypatch.setattr(server.service, "watch", watch)
    error = await call(
        stub, SERVICE.methods_by_name["WatchPhase"], pb.WatchPhaseRequest(job_id="j", phase_id="p")
    )
    assert error.code() == grpc.StatusCode.INTERNAL and SECRET not in error.details()
    assert error_info(error).reason == "INTERNAL"


def _breakpoints(n: int) -> list[res.Breakpoint]:
    return [res.Breakpoint(tool_name=f"Tool{i}") for i in range(n)]


@pytest.mark.parametrize(
    ("breakpoints", "field"),
    [
        (_breakpoints(257), "options.breakpoints"),
        (_breakpoints(2) + [res.Breakpoint(breakpoint_id="x", tool_name="A")] * 2, "options.breakpoints"),
        (
            _breakpoints(2) + [res.Breakpoint(input_pattern=res.InputPatternCondition(regex=r"(a)\1"))],
            "options.breakpoints[2].input_pattern.regex",
        ),
        (_breakpoints(1) + [res.Breakpoint()], "options.breakpoints[1]"),
    ],
)
async def test_a_rejected_run_phase_leaves_nothing_behind(stub, tmp_path, breakpoints, field):
    stub, server = stub
    request = pb.RunPhaseRequest(
        job_id="j",
        phase_id="p",
        prompt="hi",
        working_dir=str(tmp_path),
        options=pb.PhaseOptions(breakpoints=breakpoints),
    )
    error = await call(stub, SERVICE.methods_by_name["RunPhase"], request)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(error).metadata["field"] == field
    # Nothing was persisted: no job, no PENDING phase, so a corrected retry may reuse the ids.
    assert server.store.get_job("j") is None and server.store.get_phase("j", "p") is None
    assert not server.service.live


async def test_a_phase_that_cannot_be_set_up_is_failed_not_left_pending(tmp_path):
    claude = tmp_path / "claude"  # never started: setting up the phase fails first
    claude.write_text("#!/bin/sh\nexit 1\n")
    claude.chmod(0o755)
    config = load_config(
        flags={
            "port": 0,
            "data_dir": str(tmp_path / "data"),
            "workspace_roots": [str(tmp_path)],
            "claude_path": str(claude),
        },
        environ={},
    )
    server = await start_server(config)
    config.recordings_dir.parent.mkdir(parents=True, exist_ok=True)
    config.recordings_dir.write_text("a file where the recordings directory should be")
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = pb_grpc.RunnerServiceStub(channel)
            request = pb.RunPhaseRequest(job_id="j", phase_id="p", prompt="hi", working_dir=str(tmp_path))
            error = await call(stub, SERVICE.methods_by_name["RunPhase"], request)
            assert error.code() == grpc.StatusCode.INTERNAL
            assert "recordings" not in error.details() and "Errno" not in error.details()
            assert error_info(error).reason == "INTERNAL"
            phase = (await stub.GetJob(pb.GetJobRequest(job_id="j"), timeout=10)).job.phases[0]
            assert phase.status == res.PHASE_STATUS_FAILED and "could not set up" in phase.status_reason
            assert phase.result.status == res.PHASE_STATUS_FAILED
    finally:
        await server.server.stop(0)
        server.store.close()


@pytest.mark.parametrize("method", ["GetJob", "WatchPhase"])
@pytest.mark.parametrize("body", [b"\x0a\x02\xff\xfe", b"\x0a\x05ab"], ids=["string-not-utf8", "corrupt"])
async def test_a_malformed_request_is_invalid_argument(tmp_path, method, body):
    config = load_config(
        flags={"port": 0, "data_dir": str(tmp_path / "data"), "workspace_roots": [str(tmp_path)]}, environ={}
    )
    server = await start_server(config)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            path = f"/{SERVICE.full_name}/{method}"
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                if SERVICE.methods_by_name[method].server_streaming:
                    async for _ in channel.unary_stream(path)(body, timeout=10):
                        pass
                else:
                    await channel.unary_unary(path)(body, timeout=10)
    finally:
        await server.server.stop(0)
        server.store.close()
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(caught.value).metadata["field"] == "request"


@pytest.mark.parametrize("name", ["json_schema", "settings", "mcp_config", "agents"])
async def test_json_options_nested_thousands_of_levels_are_invalid_argument_with_error_info(stub, name, tmp_path):
    """Issue 22 item 2: these were INTERNAL (json.loads' RecursionError in the server log)."""
    inner = '{"a":' * 3000 + "1" + "}" * 3000
    value = {"mcp_config": '{"mcpServers": {"db": ' + inner + "}}",
             "agents": '{"rev": {"description": "d", "prompt": "p", "x": ' + inner + "}}"}.get(name, inner)
    request = pb.RunPhaseRequest(job_id="deep", phase_id="p", prompt="hi", working_dir=str(tmp_path),
                                 options=pb.PhaseOptions(**{name: value}))
    error = await call(stub[0], SERVICE.methods_by_name["RunPhase"], request)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    info = error_info(error)
    assert info.reason == "INVALID_FIELD" and info.metadata["field"] == f"options.{name}"
    assert info.metadata["max_depth"] == "64" and int(info.metadata["depth"]) >= 3000


@pytest.mark.parametrize("size", [PROMPT_MAX_BYTES + 1, 5 * MiB])
async def test_a_prompt_over_the_limit_is_invalid_argument_naming_the_limit(stub, tmp_path, size):
    """Over 4 MiB (gRPC's default receive limit) it was a transport error quoting 4 MiB."""
    stub, server = stub
    request = pb.RunPhaseRequest(job_id="j", phase_id="p", prompt="x" * size, working_dir=str(tmp_path))
    error = await call(stub, SERVICE.methods_by_name["RunPhase"], request)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(error).metadata["field"] == "prompt"
    assert str(PROMPT_MAX_BYTES) in error.details()
    assert server.store.get_job("j") is None
