"""Connection options (flags over environment, token files, TLS) and errors as one line, without the
real CLI: the verbs against an in-process server, behind a TLS-terminating proxy when it matters."""

from __future__ import annotations

import argparse
import asyncio
import io
import shutil
import ssl
import subprocess
import sys

import grpc
import pytest
from helix_runner_client import RunnerError, google_rpc
from support.cli_verbs import helix
from support.tcp_proxy import TcpProxy

from helix_runner.cli.common import EXIT_REFUSED, EXIT_UNREACHABLE, CliError, Connection, describe_error


def args(**flags) -> argparse.Namespace:
    base = {"server": None, "token_file": None, "tls": None, "ca_file": None, "call_timeout": 15.0}
    return argparse.Namespace(**{**base, **flags})


def test_flags_win_over_the_environment(tmp_path):
    token = tmp_path / "token"
    token.write_text("from-file\n")
    env = {"HELIX_RUNNER_SERVER": "env-host:1", "HELIX_RUNNER_TOKEN": "from-env"}
    assert Connection.from_args(args(), env) == Connection("env-host:1", "from-env")
    assert Connection.from_args(args(server="flag-host:2", token_file=str(token)), env) == Connection(
        "flag-host:2", "from-file"
    )
    assert Connection.from_args(args(), {}).target == "127.0.0.1:50051"
    assert Connection.from_args(args(), {"HELIX_RUNNER_TOKEN_FILE": str(token)}).token == "from-file"


def test_bad_token_and_ca_files_are_usage_errors(tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(CliError, match="the token file .* is empty") as caught:
        Connection.from_args(args(token_file=str(empty)), {})
    assert caught.value.code == 2
    with pytest.raises(CliError, match="cannot read the CA file .*nope: No such file or directory"):
        Connection.from_args(args(ca_file=str(tmp_path / "nope")), {})
    pem = tmp_path / "ca.pem"
    pem.write_text("roots")
    connection = Connection.from_args(args(ca_file=str(pem)), {})
    assert connection.tls and connection.root_certificates == b"roots"
    assert Connection.from_args(args(), {"HELIX_RUNNER_TLS": "1"}).tls


def test_a_refused_request_names_the_phase_status():
    info = google_rpc.ErrorInfo(
        reason="ILLEGAL_TRANSITION", domain="runner.helix", metadata={"status": "PAUSED", "operation": "step"}
    )
    error = RunnerError(
        grpc.StatusCode.FAILED_PRECONDITION, "cannot step: a hard pause stops the process", info
    )
    assert describe_error(error, "h:1") == (
        "cannot step: a hard pause stops the process (the phase is PAUSED) [ILLEGAL_TRANSITION]",
        EXIT_REFUSED,
    )
    unauthenticated = RunnerError(grpc.StatusCode.UNAUTHENTICATED, "missing or invalid bearer token")
    line, code = describe_error(unauthenticated, "h:1")
    assert code == EXIT_UNREACHABLE and "refused the credentials" in line and "--token-file" in line


async def test_a_token_is_sent_and_a_missing_one_is_one_line(runner_factory, tmp_path):
    token = tmp_path / "token"
    token.write_text("a-long-enough-s3cret-token\n")
    async with runner_factory(None, auth_token_file=str(token)) as runner:
        at = f"127.0.0.1:{runner.server.port}"
        refused = await helix(at, "jobs")
        assert refused.code == 3 and len(refused.err.splitlines()) == 1
        assert refused.err.startswith(f"helix-runner: error: the server at {at} refused the credentials")
        allowed = await helix(at, "jobs", "--token-file", str(token))
        assert allowed.code == 0 and allowed.out == "no jobs\n"


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is needed to make a test certificate")
def _self_signed(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


async def test_tls_with_a_ca_file(runner_factory, tmp_path):
    cert, key = _self_signed(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    context.set_alpn_protocols(["h2"])
    async with runner_factory(None) as runner, TcpProxy(runner.server.port, tls=context) as proxy:
        secure = await helix(proxy.address, "jobs", "--ca-file", str(cert))
        assert secure.code == 0 and secure.out == "no jobs\n", secure.err
        plain = await helix(proxy.address, "jobs", "--call-timeout", "5")
        assert plain.code == 3 and len(plain.err.splitlines()) == 1
        untrusted = await helix(proxy.address, "jobs", "--tls", "--call-timeout", "5")
        assert untrusted.code == 3 and "TLS handshake failed" in untrusted.err


def test_client_certificate_flags_and_environment(tmp_path):
    for name, text in (("ca.pem", "roots"), ("cert.pem", "cert"), ("key.pem", "key")):
        (tmp_path / name).write_text(text)
    flags = args(ca_file=str(tmp_path / "ca.pem"), tls_cert=str(tmp_path / "cert.pem"),
                 tls_key=str(tmp_path / "key.pem"), tls_server_name="helix-runner.svc")
    connection = Connection.from_args(flags, {})
    assert connection.tls and (connection.root_certificates, connection.certificate_chain,
                               connection.private_key, connection.server_name) == (
        b"roots", b"cert", b"key", "helix-runner.svc")
    env = {"HELIX_RUNNER_TLS_CA": str(tmp_path / "ca.pem"), "HELIX_RUNNER_TLS_CERT": str(tmp_path / "cert.pem"),
           "HELIX_RUNNER_TLS_KEY": str(tmp_path / "key.pem")}
    assert Connection.from_args(args(), env) == Connection(
        "127.0.0.1:50051", None, True, b"roots", 15.0, b"cert", b"key", None)
    with pytest.raises(CliError, match="--tls-cert and --tls-key go together"):
        Connection.from_args(args(tls_cert=str(tmp_path / "cert.pem")), {})


async def test_mutual_tls_with_a_client_certificate(runner_factory, tmp_path):
    from support.certs import CertificateAuthority

    ca = CertificateAuthority(tmp_path / "pki")
    server = ca.issue("server", dns=("localhost",), ips=("127.0.0.1",))
    client = ca.issue("client", dns=("cli",), server=False)
    config = {"tls_cert_file": str(server.cert_file), "tls_key_file": str(server.key_file),
              "tls_client_ca_file": str(ca.ca_file)}
    async with runner_factory(None, **config) as runner:
        address = f"127.0.0.1:{runner.server.port}"
        tls = ("--tls-ca", str(ca.ca_file))
        ok = await helix(address, "jobs", *tls, "--tls-cert", str(client.cert_file), "--tls-key", str(client.key_file))
        assert ok.code == 0 and ok.out == "no jobs\n", ok.err
        no_cert = await helix(address, "jobs", *tls, "--call-timeout", "5")
        assert no_cert.code == 3 and len(no_cert.err.splitlines()) == 1, no_cert.err


@pytest.mark.parametrize(("pasted", "target", "tls"), [
    ("http://127.0.0.1:50051", "127.0.0.1:50051", False),
    ("http://127.0.0.1:50051/", "127.0.0.1:50051", False),
    ("https://runner.example:8443", "runner.example:8443", True),
    ("grpc://[::1]:7000", "[::1]:7000", False),
    ("http://localhost", "localhost:50051", False),
    ("127.0.0.1:50051", "127.0.0.1:50051", False),
])
def test_server_takes_a_pasted_url_and_strips_its_scheme(pasted, target, tls):
    """Issue 22 item 13: `--server http://127.0.0.1:50051` failed with "Misformatted domain name"."""
    connection = Connection.from_args(args(server=pasted), {})
    assert (connection.target, connection.tls) == (target, tls)
    assert Connection.from_args(args(), {"HELIX_RUNNER_SERVER": pasted}).target == target


def test_a_url_with_a_path_is_a_usage_error():
    with pytest.raises(CliError, match="--server takes HOST:PORT or a URL without a path"):
        Connection.from_args(args(server="http://127.0.0.1:50052/jobs/x"), {})


async def test_the_dashboards_port_is_named_as_such_with_the_grpc_port(runner_factory):
    """Issue 22 item 13: --server with the dashboard's port gave a gRPC error cut off mid-word."""
    async with runner_factory(None, web_port=0) as runner:
        web = runner.server.web.port
        result = await helix(f"127.0.0.1:{web}", "jobs")
        url = await helix(f"http://127.0.0.1:{web}/", "jobs")
    assert result.code == EXIT_UNREACHABLE
    assert result.err == (f"helix-runner: error: 127.0.0.1:{web} is the dashboard's HTTP port of a helix-runner "
                          f"server, not its gRPC port; use --server 127.0.0.1:{runner.server.port}\n")
    assert url.err == result.err


async def test_another_http_server_is_named_as_not_grpc_in_full_words():
    async def answer(reader, writer):
        await reader.read(100)
        writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        result = await helix(f"127.0.0.1:{port}", "jobs")
    assert result.code == EXIT_UNREACHABLE
    assert result.err == (f"helix-runner: error: 127.0.0.1:{port} answers HTTP/1.1, not gRPC: is it a dashboard's "
                          "port or another web server? (scripts/serve puts gRPC on 50051, the dashboard on "
                          "50052)\n")


def test_an_interrupt_on_a_terminal_starts_its_line_after_the_echoed_ctrl_c(monkeypatch):
    """Issue 22 item 15: Ctrl-C left no newline before `helix-runner: interrupted`."""
    import importlib

    cli_main = importlib.import_module("helix_runner.cli.main")

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for stream, expected in ((Terminal(), "\nhelix-runner: interrupted\n"), (io.StringIO(), "helix-runner: interrupted\n")):
        monkeypatch.setattr(sys, "stderr", stream)
        cli_main._error("interrupted", interrupted=True)
        assert stream.getvalue() == expected
    error = io.StringIO()
    monkeypatch.setattr(sys, "stderr", error)
    cli_main._error("boom")
    assert error.getvalue() == "helix-runner: error: boom\n"
