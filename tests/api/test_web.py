"""The dashboard's HTTP port: RunnerService over Connect through the gRPC servicer's own handlers
(same results, same errors), the page's assets, and the port's bearer-token and loopback rules."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import socket
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
from connectrpc.code import Code
from connectrpc.compat import google_protobuf_json_codec
from connectrpc.errors import ConnectError
from google.rpc import error_details_pb2

from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix.runner.v1.runner_service_connect import RunnerServiceClient
from helix_runner.api.errors import error_info
from helix_runner.config import ConfigError, load_config
from helix_runner.offline import Reply, TextBlock
from helix_runner.server import StartupError, start_server

TOKEN = "a-token-of-at-least-16-characters"


def connect_client(runner, **kwargs) -> RunnerServiceClient:
    return RunnerServiceClient(runner.server.web.url.rstrip("/"), **kwargs)


def the_error_info(error: ConnectError) -> error_details_pb2.ErrorInfo:
    assert len(error.details) == 1, error.details
    detail = error.details[0]
    assert detail.type_name == "google.rpc.ErrorInfo"
    return error_details_pb2.ErrorInfo.FromString(detail.message_bytes)


def http(url: str, *, method: str = "GET", body: bytes | None = None, headers: dict[str, str] | None = None):
    """(status, headers, body) of one plain HTTP request; errors are answers too."""
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


async def ahttp(*args, **kwargs):
    return await asyncio.get_running_loop().run_in_executor(None, lambda: http(*args, **kwargs))


async def test_an_error_over_connect_is_the_grpc_error(runner_factory):
    async with runner_factory(None, web_port=0) as runner:
        with pytest.raises(grpc.aio.AioRpcError) as grpc_failure:
            await runner.stub.GetJob(pb.GetJobRequest(job_id="missing"), timeout=10)
        async with connect_client(runner) as client:
            with pytest.raises(ConnectError) as connect_failure:
                await client.get_job(pb.GetJobRequest(job_id="missing"))
            with pytest.raises(ConnectError) as stream_failure:
                async for _ in client.watch_phase(pb.WatchPhaseRequest(job_id="missing", phase_id="p")):
                    pass
            with pytest.raises(ConnectError) as invalid:
                await client.get_cost_totals(pb.GetCostTotalsRequest(phase_id="p"))
    assert connect_failure.value.code is Code.NOT_FOUND
    assert connect_failure.value.message == grpc_failure.value.details()
    assert the_error_info(connect_failure.value) == error_info(grpc_failure.value)
    assert the_error_info(connect_failure.value).metadata["job_id"] == "missing"
    assert stream_failure.value.code is Code.NOT_FOUND
    assert the_error_info(stream_failure.value).domain == "runner.helix"
    assert invalid.value.code is Code.INVALID_ARGUMENT
    assert the_error_info(invalid.value).metadata["field"] == "job_id"


async def test_every_method_answers_over_connect_as_over_grpc(runner_factory):
    """Each RPC with an empty request: the same response, or the same code and ErrorInfo."""
    service = pb.DESCRIPTOR.services_by_name["RunnerService"]
    async with runner_factory(None, web_port=0) as runner, connect_client(runner) as client:
        channel = runner.channel
        for method in service.methods:
            request = getattr(pb, method.input_type.name)()
            response_class = getattr(pb, method.output_type.name)
            path = f"/{service.full_name}/{method.name}"
            snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in method.name).lstrip("_")
            call = getattr(client, snake)
            if method.server_streaming:
                grpc_call = channel.unary_stream(
                    path,
                    request_serializer=request.SerializeToString,
                    response_deserializer=response_class.FromString,
                )
                grpc_outcome = await _outcome(_collect(grpc_call(request, timeout=10)))
                connect_outcome = await _outcome(_collect(call(request)))
            else:
                grpc_call = channel.unary_unary(
                    path,
                    request_serializer=request.SerializeToString,
                    response_deserializer=response_class.FromString,
                )
                grpc_outcome = await _outcome(grpc_call(request, timeout=10))
                connect_outcome = await _outcome(call(request))
            if method.name == "SetProjectQuota":  # each call sets the quota again, at its own time
                for outcome in (grpc_outcome, connect_outcome):
                    outcome.quota.ClearField("update_time")
            assert connect_outcome == grpc_outcome, method.name


async def _collect(stream):
    return [response async for response in stream]


async def _outcome(awaitable):
    """The response, or (code name, ErrorInfo) of the failure, comparable across transports."""
    try:
        return await awaitable
    except grpc.aio.AioRpcError as exc:
        return exc.code().name.replace("CANCELLED", "CANCELED"), error_info(exc)
    except ConnectError as exc:
        return exc.code.name, the_error_info(exc)


async def test_an_unexpected_exception_is_internal_without_its_text(runner_factory, monkeypatch):
    async with runner_factory(None, web_port=0) as runner:

        def broken(job_id):
            raise RuntimeError("secret detail /srv/private")

        monkeypatch.setattr(runner.server.queries, "job", broken)
        async with connect_client(runner) as client:
            with pytest.raises(ConnectError) as failure:
                await client.get_job(pb.GetJobRequest(job_id="j"))
    assert failure.value.code is Code.INTERNAL
    info = the_error_info(failure.value)  # the same single ErrorInfo as over gRPC
    assert info.reason == "INTERNAL" and info.metadata["method"] == "GetJob"
    assert "secret" not in failure.value.message and "secret" not in str(info)


async def test_json_over_connect_answers_curl(runner_factory):
    async with runner_factory(None, web_port=0) as runner:
        url = runner.server.web.url + "helix.runner.v1.RunnerService/"
        ok = await ahttp(
            url + "ListJobs", method="POST", body=b"{}", headers={"content-type": "application/json"}
        )
        missing = await ahttp(
            url + "GetJob",
            method="POST",
            body=b'{"jobId": "nope"}',
            headers={"content-type": "application/json"},
        )
        async with connect_client(runner, codec=google_protobuf_json_codec()) as client:
            assert list((await client.list_jobs(pb.ListJobsRequest())).jobs) == []
    assert ok[0] == 200 and json.loads(ok[2]) == {}
    assert missing[0] == 404
    error = json.loads(missing[2])
    assert error["code"] == "not_found" and error["details"][0]["type"] == "google.rpc.ErrorInfo"


async def test_a_json_body_nested_thousands_of_levels_is_invalid_argument_without_exception_text(runner_factory):
    """Issue 22 item 2: protobuf's JSON parser ran json.loads into its RecursionError, whose text the
    caller saw ("maximum recursion depth exceeded ..."), with no ErrorInfo."""
    deep = b'{"jobId": "j", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    async with runner_factory(None, web_port=0) as runner:
        status, _, body = await ahttp(runner.server.web.url + "helix.runner.v1.RunnerService/GetJob",
                                      method="POST", body=deep, headers={"content-type": "application/json"})
    error = json.loads(body)
    assert status == 400 and error["code"] == "invalid_argument", error
    assert error["message"] == "the request body nests 5001 levels deep; the limit is 64"
    info = error_details_pb2.ErrorInfo.FromString(base64.b64decode(error["details"][0]["value"] + "=="))
    assert dict(info.metadata) == {"field": "request", "depth": "5001", "max_depth": "64"}


@pytest.mark.parametrize("stored", ["token", "digest"])
async def test_the_bearer_token_guards_the_api_but_not_the_page(stored, runner_factory, tmp_path: Path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN if stored == "token" else f"sha256:{hashlib.sha256(TOKEN.encode()).hexdigest()}")
    async with runner_factory(None, web_port=0, auth_token_file=str(token_file)) as runner:
        async with connect_client(runner) as client:
            with pytest.raises(ConnectError) as missing:
                await client.list_jobs(pb.ListJobsRequest())
            with pytest.raises(ConnectError) as wrong:
                await client.list_jobs(
                    pb.ListJobsRequest(), headers={"authorization": "Bearer not-the-token"}
                )
            with pytest.raises(ConnectError) as stream:
                async for _ in client.watch_phase(pb.WatchPhaseRequest(job_id="j", phase_id="p")):
                    pass
            listed = await client.list_jobs(
                pb.ListJobsRequest(), headers={"authorization": f"Bearer {TOKEN}"}
            )
        page = await ahttp(runner.server.web.url)
    for failure in (missing, wrong, stream):
        assert failure.value.code is Code.UNAUTHENTICATED
        assert the_error_info(failure.value).reason == "UNAUTHENTICATED"
    assert list(listed.jobs) == []
    assert page[0] == 200


async def test_without_a_token_only_loopback_host_names_are_answered(runner_factory):
    async with runner_factory(None, web_port=0) as runner:
        port = runner.server.web.port
        base = runner.server.web.url
        rebound = await ahttp(base, headers={"host": f"attacker.example:{port}"})
        api = await ahttp(
            base + "helix.runner.v1.RunnerService/ListJobs",
            method="POST",
            body=b"{}",
            headers={"host": f"attacker.example:{port}", "content-type": "application/json"},
        )
        local = await ahttp(base, headers={"host": f"localhost:{port}"})
    assert rebound[0] == 403 and api[0] == 403
    assert local[0] == 200


async def test_the_page_is_served_with_its_security_headers(runner_factory):
    async with runner_factory(None, web_port=0) as runner:
        base = runner.server.web.url
        index = await ahttp(base)
        script = await ahttp(base + "app.js")
        cached = await ahttp(base + "app.js", headers={"if-none-match": script[1]["etag"]})
        head = await ahttp(base + "app.css", method="HEAD")
        post = await ahttp(base, method="POST", body=b"x")
        missing = await ahttp(base + "../../etc/passwd")
        unknown = await ahttp(
            base + "helix.runner.v1.RunnerService/NoSuchMethod",
            method="POST",
            body=b"{}",
            headers={"content-type": "application/json"},
        )
    assert index[0] == 200 and b'<div id="app">' in index[2]
    assert index[1]["content-type"].startswith("text/html")
    assert "frame-ancestors 'none'" in index[1]["content-security-policy"]
    assert index[1]["x-frame-options"] == "DENY" and index[1]["x-content-type-options"] == "nosniff"
    assert (
        script[0] == 200
        and script[1]["content-type"].startswith("text/javascript")
        and len(script[2]) > 10_000
    )
    assert cached[0] == 304
    assert head[0] == 200 and head[2] == b"" and int(head[1]["content-length"]) > 0
    assert post[0] == 405
    assert missing[0] == 404
    assert unknown[0] == 404


def test_config_keeps_the_dashboard_on_loopback_without_a_token(tmp_path: Path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    with pytest.raises(ConfigError, match="non-loopback address 0.0.0.0 without --auth-token-file"):
        load_config(flags={"web_port": 8080, "web_host": "0.0.0.0"}, environ={})
    with pytest.raises(ConfigError, match="web port 70000 is out of range"):
        load_config(flags={"web_port": 70000}, environ={})
    with pytest.raises(ConfigError, match="HELIX_RUNNER_WEB_PORT"):
        load_config(environ={"HELIX_RUNNER_WEB_PORT": "eighty"})
    assert load_config(environ={}).web_port is None  # off unless asked for
    assert load_config(environ={"HELIX_RUNNER_WEB_PORT": "0"}).web_port == 0
    served = load_config(
        flags={"web_port": 8080, "web_host": "0.0.0.0", "auth_token_file": str(token_file)}, environ={}
    )
    assert served.web_host == "0.0.0.0" and not served.web_is_loopback
    # The gRPC port's host stays loopback: the two addresses are checked separately.
    assert load_config(flags={"web_port": 0, "web_host": "::1"}, environ={}).web_is_loopback


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def test_a_busy_port_stops_startup_with_one_line_and_leaves_the_other_free(tmp_path: Path):
    grpc_port, web_port = free_port(), free_port()
    flags = {
        "port": grpc_port,
        "web_port": web_port,
        "data_dir": str(tmp_path / "data"),
        "workspace_roots": [str(tmp_path)],
    }
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", web_port))
        busy.listen()
        with pytest.raises(
            StartupError, match=f"cannot serve the dashboard on 127.0.0.1:{web_port}"
        ) as failure:
            await start_server(load_config(flags=flags, environ={}))
    assert "\n" not in str(failure.value)
    with socket.socket() as again:
        again.bind(("127.0.0.1", grpc_port))  # the gRPC port was never taken

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", grpc_port))
        busy.listen()
        with pytest.raises(StartupError, match="cannot listen on"):
            await start_server(load_config(flags=flags, environ={}))
    with socket.socket() as again:
        again.bind(("127.0.0.1", web_port))  # the dashboard's socket was closed


@pytest.mark.real_cli
async def test_watch_over_connect_carries_exactly_the_grpc_events(
    claude_binary, scripted_api, runner_factory
):
    api = scripted_api([Reply.tool_use("Bash", {"command": "echo hi"}), Reply.text("done")])
    async with runner_factory(api, web_port=0) as runner:
        events, result = await runner.run_phase("say hi", allowed_tools=["Bash"])
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        request = pb.WatchPhaseRequest(job_id="job-1", phase_id="p1")
        for codec in (None, google_protobuf_json_codec()):
            kwargs = {"codec": codec} if codec else {}
            watched, final = [], None
            async with connect_client(runner, **kwargs) as client:
                async for response in client.watch_phase(request):
                    watched.extend(response.events)
                    if response.HasField("result"):
                        final = response.result
            assert [e.SerializeToString() for e in watched] == [e.SerializeToString() for e in events]
            assert final == result
        # From a cursor: only what follows it.
        async with connect_client(runner) as client:
            tail = [
                e
                async for r in client.watch_phase(
                    pb.WatchPhaseRequest(job_id="job-1", phase_id="p1", after_sequence=3)
                )
                for e in r.events
            ]
        assert [e.sequence for e in tail] == [e.sequence for e in events[3:]]


@pytest.mark.real_cli
async def test_a_browser_that_drops_run_phase_cancels_the_phase(claude_binary, scripted_api, runner_factory):
    slow = Reply(content=[TextBlock("streaming slowly " * 40)], chunk_delay=0.1)
    api = scripted_api([slow])
    async with runner_factory(api, web_port=0) as runner:
        request = pb.RunPhaseRequest(
            job_id="dropped", phase_id="p", prompt="go", working_dir=str(runner.workdir)
        )
        async with connect_client(runner) as client:
            stream = client.run_phase(request)
            first = await asyncio.wait_for(anext(stream), 30)
            assert first.events
            await stream.aclose()  # the tab goes away mid-phase
        watch = runner.stub.WatchPhase(pb.WatchPhaseRequest(job_id="dropped", phase_id="p"), timeout=30)
        final = None
        with contextlib.suppress(StopAsyncIteration):
            async for response in watch:
                if response.HasField("result"):
                    final = response.result
    assert final is not None and final.status == res.PHASE_STATUS_CANCELLED
    assert "disconnected" in final.reason
