"""The server shell: health names, reflection, rich errors, auth and draining, over a real port."""

from __future__ import annotations

import hashlib
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from helix.runner.v1 import runner_service_pb2 as pb
from helix.runner.v1 import runner_service_pb2_grpc as pb_grpc
from helix_runner.api.errors import error_info
from helix_runner.config import load_config
from helix_runner.server import StartupError, start_server

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def _config(tmp_path: Path, **flags):
    return load_config(
        flags={"port": 0, "data_dir": str(tmp_path / "data"), "workspace_roots": [str(tmp_path)], **flags},
        environ={},
    )


@pytest.fixture
async def running(tmp_path):
    server = await start_server(_config(tmp_path))
    try:
        yield server
    finally:
        await server.server.stop(0)
        server.store.close()


async def _check(channel, service: str) -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    return (await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)).status


async def test_health_reports_liveness_and_readiness_separately(running):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        for name in ("", "liveness", "readiness", "helix.runner.v1.RunnerService"):
            assert await _check(channel, name) == SERVING, name
        # Draining flips readiness only; a liveness probe must keep passing or the pod is killed early.
        for name in ("readiness", "helix.runner.v1.RunnerService"):
            await running.health.set(name, NOT_SERVING)
        assert await _check(channel, "readiness") == NOT_SERVING
        assert await _check(channel, "liveness") == SERVING


async def test_drain_sets_readiness_not_serving_before_stopping(tmp_path):
    server = await start_server(_config(tmp_path))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service="readiness"))
        assert (await watch.read()).status == SERVING
        await server.drain(grace=0.5)
        assert (await watch.read()).status == NOT_SERVING


async def test_reflection_lists_every_rpc_of_the_contract(running):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        call = stub.ServerReflectionInfo()
        await call.write(reflection_pb2.ServerReflectionRequest(list_services=""))
        response = await call.read()
        await call.done_writing()
    names = {s.name for s in response.list_services_response.service}
    assert "helix.runner.v1.RunnerService" in names
    assert "grpc.health.v1.Health" in names
    expected = {m.name for m in pb.DESCRIPTOR.services_by_name["RunnerService"].methods}
    assert {"RunPhase", "WatchPhase", "GetJob", "ListJobs", "ResolveToolCall", "InspectPhase"} <= expected


async def test_errors_carry_one_error_info_with_metadata(running):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        stub = pb_grpc.RunnerServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.PausePhase(pb.PausePhaseRequest(job_id="j", phase_id="p"), timeout=5)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert "phase p of job j" in caught.value.details()
    info = error_info(caught.value)
    assert info is not None and info.domain == "runner.helix" and info.reason == "PHASE_NOT_FOUND"
    assert dict(info.metadata) == {"job_id": "j", "phase_id": "p"}


async def test_auth_token_required_except_for_health(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token-0123456789\n")
    server = await start_server(_config(tmp_path, auth_token_file=str(token_file)))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            assert await _check(channel, "readiness") == SERVING  # the kubelet sends no credentials
            stub = pb_grpc.RunnerServiceStub(channel)
            for metadata in ((), (("authorization", "Bearer wrong"),)):
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await stub.GetJob(pb.GetJobRequest(job_id="j"), metadata=metadata, timeout=5)
                assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
                assert error_info(caught.value).reason == "UNAUTHENTICATED"
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                stream = stub.WatchPhase(pb.WatchPhaseRequest(job_id="j", phase_id="p"), timeout=5)
                await stream.read()
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.GetJob(
                    pb.GetJobRequest(job_id="j"),
                    metadata=(("authorization", "Bearer s3cret-token-0123456789"),),
                    timeout=5,
                )
            # Past authentication: the call reaches the service and gets its own answer.
            assert caught.value.code() != grpc.StatusCode.UNAUTHENTICATED
    finally:
        await server.server.stop(0)
        server.store.close()


async def test_a_token_digest_authenticates_the_token_and_not_itself(tmp_path):
    """The file holds ``sha256:<hex>``: a phase that reads it (it runs as the server's user)
    learns nothing it can call the service with."""
    token = "s3cret-token-0123456789"
    digest = "sha256:" + hashlib.sha256(token.encode()).hexdigest()
    token_file = tmp_path / "token"
    token_file.write_text(digest + "\n")
    server = await start_server(_config(tmp_path, auth_token_file=str(token_file)))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = pb_grpc.RunnerServiceStub(channel)
            for presented in (digest, digest[len("sha256:"):], "wrong-token-0123456789"):
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await stub.GetJob(pb.GetJobRequest(job_id="j"), metadata=(("authorization", f"Bearer {presented}"),),
                                      timeout=5)
                assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED, presented
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.GetJob(pb.GetJobRequest(job_id="j"), metadata=(("authorization", f"Bearer {token}"),),
                                  timeout=5)
            assert caught.value.code() == grpc.StatusCode.NOT_FOUND  # past authentication: the service's answer
    finally:
        await server.server.stop(0)
        server.store.close()


async def test_replicas_refuse_a_token_digest_they_could_not_forward_with(tmp_path, postgres_url):
    token_file = tmp_path / "token"
    token_file.write_text("sha256:" + "ab" * 32)
    with pytest.raises(StartupError, match="sha256 digest"):
        await start_server(_config(tmp_path, auth_token_file=str(token_file), database_url=postgres_url))


@pytest.mark.parametrize("content", ["sha256:" + "ab" * 31, "sha256:" + "xy" * 32, "short"])
async def test_a_malformed_token_file_is_a_one_line_startup_error(tmp_path, content):
    token_file = tmp_path / "token"
    token_file.write_text(content)
    with pytest.raises(StartupError, match="auth token"):
        await start_server(_config(tmp_path, auth_token_file=str(token_file)))

