"""TLS and mutual TLS on the gRPC port, certificate reload, and control forwarded between replicas over mTLS.

The certificates are made in-process (tests/support/certs.py); the servers are the real server
in-process (tests/support/runner_server.py), without a CLI except for the forwarding test, which
runs a real-CLI phase on replica A and controls it through replica B.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import urllib.request

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from support.certs import CertificateAuthority
from support.runner_server import start_runner

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix.runner.v1 import runner_service_pb2_grpc as pb_grpc
from helix_runner.api.forwarding import OwnerForwarder
from helix_runner.config import ConfigError, load_config
from helix_runner.errors import RunnerError
from helix_runner.offline import Reply

SERVER_NAMES = {"dns": ("localhost", "helix-runner.test"), "ips": ("127.0.0.1",)}
# Each test channel gets its own subchannels: grpc otherwise shares connections between channels.
CHANNEL_OPTIONS = [("grpc.use_local_subchannel_pool", 1)]


@pytest.fixture
def pki(tmp_path):
    """A CA with a server certificate and a client certificate, and a second CA nobody trusts."""
    ca = CertificateAuthority(tmp_path / "pki")
    other = CertificateAuthority(tmp_path / "pki-other", "another CA")
    return {
        "ca": ca,
        "server": ca.issue("server", **SERVER_NAMES),
        "client": ca.issue("client", dns=("a-client",), server=False),
        "other": other,
        "stranger": other.issue("stranger", dns=("stranger",), server=False),
    }


@contextlib.asynccontextmanager
async def server(tmp_path, pki, *, mutual=False, **config):
    harness = start_runner(
        tmp_path,
        None,
        tls_cert_file=str(pki["server"].cert_file),
        tls_key_file=str(pki["server"].key_file),
        tls_client_ca_file=str(pki["ca"].ca_file) if mutual else None,
        **config,
    )
    runner = await anext(harness)
    try:
        yield runner
    finally:
        await harness.aclose()


async def list_jobs(port, *, roots=None, cert=None, plaintext=False, token=None):
    """ListJobs over a fresh channel: the response, or the AioRpcError."""
    if plaintext:
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS)
    else:
        creds = grpc.ssl_channel_credentials(
            roots, cert.key if cert else None, cert.cert if cert else None
        )
        channel = grpc.aio.secure_channel(f"localhost:{port}", creds, options=CHANNEL_OPTIONS)
    metadata = [("authorization", f"Bearer {token}")] if token else None
    try:
        return await pb_grpc.RunnerServiceStub(channel).ListJobs(
            pb.ListJobsRequest(), timeout=5, metadata=metadata
        )
    except grpc.aio.AioRpcError as exc:
        return exc
    finally:
        await channel.close()


def refused(outcome) -> bool:
    return isinstance(outcome, grpc.aio.AioRpcError) and outcome.code() == grpc.StatusCode.UNAVAILABLE


def answered(outcome) -> bool:
    return isinstance(outcome, pb.ListJobsResponse)


async def until(attempt, accept, limit: float = 20.0) -> None:
    """Makes new connections (``attempt()``) until one's outcome is accepted; bounded by ``limit``."""
    async with asyncio.timeout(limit):
        while not accept(await attempt()):  # noqa: ASYNC110 - polls a server's handshake, no event to await
            await asyncio.sleep(0.1)


async def test_a_tls_port_serves_tls_clients_and_refuses_plaintext(tmp_path, pki):
    async with server(tmp_path, pki) as runner:
        port = runner.server.port
        assert answered(await list_jobs(port, roots=pki["ca"].ca))
        assert refused(await list_jobs(port, plaintext=True))
        # A client that does not trust the issuer refuses the server.
        assert refused(await list_jobs(port, roots=pki["other"].ca))


async def test_mutual_tls_requires_a_client_certificate_from_the_ca(tmp_path, pki):
    async with server(tmp_path, pki, mutual=True) as runner:
        port = runner.server.port
        assert refused(await list_jobs(port, roots=pki["ca"].ca))  # no certificate
        assert refused(await list_jobs(port, roots=pki["ca"].ca, cert=pki["stranger"]))  # another CA's
        assert answered(await list_jobs(port, roots=pki["ca"].ca, cert=pki["client"]))


async def test_the_bearer_token_is_still_required_over_mutual_tls(tmp_path, pki):
    token_file = tmp_path / "token"
    token_file.write_text("a-token-of-sixteen-chars-or-more\n")
    async with server(tmp_path, pki, mutual=True, auth_token_file=str(token_file)) as runner:
        port = runner.server.port
        without = await list_jobs(port, roots=pki["ca"].ca, cert=pki["client"])
        assert isinstance(without, grpc.aio.AioRpcError)
        assert without.code() == grpc.StatusCode.UNAUTHENTICATED
        with_token = await list_jobs(
            port, roots=pki["ca"].ca, cert=pki["client"], token="a-token-of-sixteen-chars-or-more"
        )
        assert isinstance(with_token, pb.ListJobsResponse)


async def test_a_certificate_replaced_on_disk_is_served_to_new_connections(tmp_path, pki):
    async with server(tmp_path, pki, mutual=True) as runner:
        port = runner.server.port
        client = pki["client"]
        assert answered(await list_jobs(port, roots=pki["ca"].ca, cert=client))
        # Rotate to a certificate from the other CA, each file replaced atomically (as a renewal does).
        fresh = pki["other"].issue("server-rotated", **SERVER_NAMES)
        os.replace(fresh.cert_file, pki["server"].cert_file)
        os.replace(fresh.key_file, pki["server"].key_file)
        await until(lambda: list_jobs(port, roots=pki["other"].ca, cert=client), answered)
        assert refused(await list_jobs(port, roots=pki["ca"].ca, cert=client))  # the old certificate is gone
        # The client CA is re-read too: only clients of the new CA are admitted after it changes.
        os.replace(pki["other"].ca_file, pki["ca"].ca_file)
        await until(lambda: list_jobs(port, roots=pki["other"].ca, cert=client), refused)
        stranger = await list_jobs(port, roots=pki["other"].ca, cert=pki["stranger"])
        assert isinstance(stranger, pb.ListJobsResponse)


async def test_a_half_written_rotation_keeps_the_previous_certificate(tmp_path, pki):
    async with server(tmp_path, pki) as runner:
        port = runner.server.port
        fresh = pki["other"].issue("server-rotated", **SERVER_NAMES)
        os.replace(fresh.cert_file, pki["server"].cert_file)  # the key does not match it yet
        assert answered(await list_jobs(port, roots=pki["ca"].ca))
        os.replace(fresh.key_file, pki["server"].key_file)
        assert answered(await list_jobs(port, roots=pki["other"].ca))


async def test_the_health_port_answers_probes_in_plaintext(tmp_path, pki):
    async with server(tmp_path, pki, mutual=True, health_port=0) as runner:
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{runner.server.health_port}")
        try:
            stub = health_pb2_grpc.HealthStub(channel)
            answer = await stub.Check(health_pb2.HealthCheckRequest(service="readiness"), timeout=5)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
            with pytest.raises(grpc.aio.AioRpcError) as caught:  # nothing but health on this port
                await pb_grpc.RunnerServiceStub(channel).ListJobs(pb.ListJobsRequest(), timeout=5)
            assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
        finally:
            await channel.close()


def test_tls_files_are_checked_at_start(tmp_path, pki):
    server_cert = pki["server"]
    base = {"workspace_roots": [str(tmp_path)]}

    def error(**flags) -> str:
        with pytest.raises(ConfigError) as caught:
            load_config(flags={**base, **flags}, environ={})
        message = str(caught.value)
        assert "\n" not in message
        return message

    assert "give both" in error(tls_cert_file=str(server_cert.cert_file))
    assert "cannot read tls_key_file" in error(tls_cert_file=str(server_cert.cert_file),
                                               tls_key_file=str(tmp_path / "missing.pem"))
    mismatched = error(tls_cert_file=str(server_cert.cert_file), tls_key_file=str(pki["client"].key_file))
    assert "not a PEM certificate and its unencrypted private key" in mismatched
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello")
    assert "holds no PEM CA certificate" in error(
        tls_cert_file=str(server_cert.cert_file), tls_key_file=str(server_cert.key_file),
        tls_client_ca_file=str(not_pem),
    )
    assert "needs tls_cert_file" in error(tls_client_ca_file=str(pki["ca"].ca_file))
    # Off loopback: a token or mutual TLS; TLS alone does not say who the client is.
    assert "without --auth-token-file or mutual TLS" in error(
        host="0.0.0.0", tls_cert_file=str(server_cert.cert_file), tls_key_file=str(server_cert.key_file)
    )
    config = load_config(
        flags={**base, "host": "0.0.0.0", "tls_cert_file": str(server_cert.cert_file),
               "tls_key_file": str(server_cert.key_file), "tls_client_ca_file": str(pki["ca"].ca_file)},
        environ={},
    )
    assert config.mutual_tls and not config.is_loopback
    from_env = load_config(flags=base, environ={
        "HELIX_RUNNER_TLS_CERT_FILE": str(server_cert.cert_file),
        "HELIX_RUNNER_TLS_KEY_FILE": str(server_cert.key_file),
    })
    assert from_env.tls and not from_env.mutual_tls


def breakpoint_hit(e) -> bool:
    return e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT


@pytest.mark.real_cli
async def test_control_is_forwarded_between_replicas_over_mutual_tls(
    claude_binary, scripted_api, postgres_url, tmp_path
):
    # One certificate for every replica, naming a Service rather than each replica's address:
    # forwarding checks it under tls_server_name, as in deploy/k8s/replicas.
    ca = CertificateAuthority(tmp_path / "pki")
    replica_cert = ca.issue("replica", dns=("helix-runner.test",))
    client = ca.issue("client", dns=("a-client",), server=False)
    tls = {
        "tls_cert_file": str(replica_cert.cert_file),
        "tls_key_file": str(replica_cert.key_file),
        "tls_client_ca_file": str(ca.ca_file),
        "tls_server_name": "helix-runner.test",
        "database_url": postgres_url,
    }
    api = scripted_api([Reply.tool_use("Bash", {"command": "echo forwarded"}), Reply.text("Done.")])
    async with contextlib.AsyncExitStack() as stack:
        stubs = []
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            harness = start_runner(tmp_path / name, api if name == "a" else None, replica_id=f"tls-{name}", **tls)
            runner = await anext(harness)
            stack.push_async_callback(harness.aclose)
            creds = grpc.ssl_channel_credentials(ca.ca, client.key, client.cert)
            channel = grpc.aio.secure_channel(
                f"127.0.0.1:{runner.server.port}", creds,
                options=[("grpc.ssl_target_name_override", "helix-runner.test")],
            )
            stack.push_async_callback(channel.close)
            stubs.append((runner, pb_grpc.RunnerServiceStub(channel)))
        (a, a_stub), (_, b_stub) = stubs
        ids = {"job_id": "job-tls", "phase_id": "p1"}
        request = pb.RunPhaseRequest(
            **ids, prompt="go", working_dir=str(a.workdir),
            options=pb.PhaseOptions(allowed_tools=["Bash"],
                                    breakpoints=[res.Breakpoint(tool_name="Bash", once=True)]),
        )
        call = a_stub.RunPhase(request, timeout=120)
        hit = None
        async with asyncio.timeout(60):
            async for response in call:
                hit = next((e for e in response.events if breakpoint_hit(e)), None)
                if hit is not None:
                    break
        assert hit is not None
        # A forwarder without TLS cannot reach the owner (A speaks only TLS): OWNER_UNREACHABLE.
        plaintext = OwnerForwarder(None)
        try:
            with pytest.raises(RunnerError) as caught:
                await plaintext.forward("ListBreakpoints", pb.ListBreakpointsRequest(**ids),
                                        f"127.0.0.1:{a.server.port}", {"owner": "tls-a"}, 5.0)
            assert caught.value.reason == "OWNER_UNREACHABLE"
        finally:
            await plaintext.close()
        # B forwards to A over mutual TLS, presenting the replica certificate: A answers.
        listed = await b_stub.ListBreakpoints(pb.ListBreakpointsRequest(**ids), timeout=10)
        assert listed == await a_stub.ListBreakpoints(pb.ListBreakpointsRequest(**ids), timeout=10)
        await b_stub.ResolveToolCall(
            pb.ResolveToolCallRequest(**ids, tool_use_id=hit.control.tool_use_id, approve=pb.ApproveDecision()),
            timeout=10,
        )
        result = None
        async with asyncio.timeout(60):
            async for response in call:
                if response.HasField("result"):
                    result = response.result
        assert result is not None and result.status == res.PHASE_STATUS_SUCCEEDED, result



def test_the_files_are_reread_only_when_their_content_changes(pki):
    from helix_runner.api.tls import CertificateFiles, ForwardingCredentials

    server_cert = pki["server"]
    files = CertificateFiles(server_cert.cert_file, server_cert.key_file, pki["ca"].ca_file)
    forwarding = ForwardingCredentials(files)
    assert forwarding.generation == 0
    os.utime(server_cert.cert_file, ns=(1, 1))  # touched, same content: nothing to reload
    assert not files.refresh() and forwarding.generation == 0
    fresh = pki["ca"].issue("renewed", **SERVER_NAMES)
    os.replace(fresh.cert_file, server_cert.cert_file)  # half-way: the key is still the old one
    assert not files.refresh() and files.current.private_key == server_cert.key
    os.replace(fresh.key_file, server_cert.key_file)
    assert forwarding.generation == 1  # the forwarder re-makes its channels with the renewed identity
    assert files.current.certificate_chain == server_cert.cert


def _https_get(url: str, ca_file) -> int | Exception:
    """GET ``url`` over a fresh HTTPS connection trusting ``ca_file``: the status, or the error."""
    context = ssl.create_default_context(cafile=str(ca_file))
    try:
        with urllib.request.urlopen(url, context=context, timeout=5) as response:
            return response.status
    except (OSError, ssl.SSLError) as exc:
        return exc


async def test_the_dashboard_serves_https_with_the_same_certificate_and_its_rotation(tmp_path, pki):
    async with server(tmp_path, pki, mutual=True, web_port=0) as runner:
        url = runner.server.web.url
        assert url.startswith("https://127.0.0.1:")
        assert await asyncio.to_thread(_https_get, url, pki["ca"].ca_file) == 200
        plain = await asyncio.to_thread(_https_get, url.replace("https://", "http://"), pki["ca"].ca_file)
        assert isinstance(plain, Exception)  # no plaintext HTTP on a TLS port
        # No client certificate needed (browsers): the API behind it keeps the token rule.
        fresh = pki["other"].issue("server-rotated", **SERVER_NAMES)
        os.replace(fresh.cert_file, pki["server"].cert_file)
        os.replace(fresh.key_file, pki["server"].key_file)
        untrusted = await asyncio.to_thread(_https_get, url, pki["ca"].ca_file)
        assert isinstance(untrusted, Exception) and "CERTIFICATE_VERIFY_FAILED" in str(untrusted)
        assert await asyncio.to_thread(_https_get, url, pki["other"].ca_file) == 200
