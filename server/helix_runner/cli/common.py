"""What every client verb shares: where the server is, credentials, exit codes, errors as one line.

Every client verb is a thin use of the public API through the repository's Python client
(``helix_runner_client``), so it works the same against a remote server: ``--server host:port``,
a bearer token from ``--token-file`` or the environment, TLS with ``--tls`` / ``--tls-ca``, and a
client certificate (``--tls-cert`` / ``--tls-key``) for a server that requires mutual TLS.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from helix_runner_client import RunnerClient, RunnerError
    from rich.console import Console

DEFAULT_SERVER = "127.0.0.1:50051"
DEFAULT_PORT = 50051
# What a pasted URL may start with, and whether it means TLS (`--server https://host:port`).
_SCHEMES = {"http": False, "grpc": False, "https": True, "grpcs": True}
# The dashboard's HTTP port names the gRPC port of its server in this response header (api/web.py).
GRPC_PORT_HEADER = "x-helix-runner-grpc-port"

EXIT_OK = 0
EXIT_PHASE_NOT_SUCCEEDED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_REFUSED = 4
EXIT_INTERRUPTED = 130

EXIT_CODES_HELP = """\
exit codes:
  0    success (run, watch, replay: the phase ended SUCCEEDED)
  1    run, watch, replay: the phase ended with another status (FAILED, CANCELLED, ...)
  2    bad usage: an unknown flag, an unreadable token file, invalid JSON
  3    the server cannot be reached, did not answer in time, or refused the credentials
  4    the server refused the request (phase not found, illegal transition, invalid field,
       a regex its RE2 does not accept)
  130  interrupted with Ctrl-C"""

ENV_HELP = """\
environment:
  HELIX_RUNNER_SERVER      host:port of the service (default 127.0.0.1:50051)
  HELIX_RUNNER_TOKEN_FILE  file holding the bearer token (like --token-file)
  HELIX_RUNNER_TOKEN       the bearer token itself (when no token file is given)
  HELIX_RUNNER_TOKEN_COMMAND  a command that prints the token (like --token-command)
  HELIX_RUNNER_TLS         1: connect with TLS (like --tls)
  HELIX_RUNNER_TLS_CA      PEM root certificates for TLS (like --tls-ca; also HELIX_RUNNER_CA_FILE)
  HELIX_RUNNER_TLS_CERT    PEM client certificate for mutual TLS (like --tls-cert)
  HELIX_RUNNER_TLS_KEY     its PEM private key (like --tls-key)
  HELIX_RUNNER_TLS_SERVER_NAME  the name in the server's certificate (like --tls-server-name)
  NO_COLOR / FORCE_COLOR   turn colour off / on regardless of the terminal"""


class CliError(Exception):
    """A failure reported as one line on stderr, with the command's exit status."""

    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(message)
        self.message = message
        self.code = code


def add_connection_args(parser: argparse.ArgumentParser) -> None:
    """``--server``, ``--token-file``, the TLS flags and the unary call deadline."""
    group = parser.add_argument_group("connection")
    group.add_argument(
        "--server",
        metavar="HOST:PORT",
        help=f"the service's gRPC port, or a URL such as http://HOST:PORT (https:// means --tls; "
        f"env HELIX_RUNNER_SERVER; default {DEFAULT_SERVER})",
    )
    group.add_argument(
        "--token-file",
        metavar="PATH",
        help="file holding the bearer token (env HELIX_RUNNER_TOKEN_FILE, or the token "
        "itself in HELIX_RUNNER_TOKEN)",
    )
    group.add_argument(
        "--token-command",
        metavar="CMD",
        help="a command that prints the bearer token, run once per invocation without a shell "
        "(short-lived tokens, e.g. from an identity provider; env HELIX_RUNNER_TOKEN_COMMAND)",
    )
    group.add_argument(
        "--tls",
        action="store_true",
        default=None,
        help="connect with TLS (env HELIX_RUNNER_TLS=1); verified against the system's roots",
    )
    group.add_argument(
        "--tls-ca",
        "--ca-file",
        dest="ca_file",
        metavar="PEM",
        help="root certificates to verify the server with (implies --tls; env HELIX_RUNNER_TLS_CA)",
    )
    group.add_argument(
        "--tls-cert",
        metavar="PEM",
        help="client certificate for a server with mutual TLS (implies --tls; env HELIX_RUNNER_TLS_CERT)",
    )
    group.add_argument(
        "--tls-key", metavar="PEM", help="the private key of --tls-cert (env HELIX_RUNNER_TLS_KEY)"
    )
    group.add_argument(
        "--tls-server-name",
        metavar="NAME",
        help="the name in the server's certificate when it is not the host dialled "
        "(an IP, a port-forward; env HELIX_RUNNER_TLS_SERVER_NAME)",
    )
    group.add_argument(
        "--call-timeout",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="deadline of each request/response call (default 15)",
    )


@dataclass(frozen=True)
class Connection:
    """Where and how to reach the service, resolved from flags and the environment."""

    target: str
    token: str | None = None
    tls: bool = False
    root_certificates: bytes | None = None
    call_timeout: float = 15.0
    certificate_chain: bytes | None = None
    private_key: bytes | None = None
    server_name: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Connection:
        """Flags win over the environment; an unreadable token or CA file is a usage error."""
        env = os.environ if environ is None else environ
        target, scheme_tls = server_target(args.server or env.get("HELIX_RUNNER_SERVER") or DEFAULT_SERVER)
        token_file = args.token_file or env.get("HELIX_RUNNER_TOKEN_FILE")
        if token_file:
            token: str | None = _read_file(token_file, "token file").decode("utf-8", "replace").strip()
            if not token:
                raise CliError(f"the token file {token_file} is empty")
        elif getattr(args, "token_command", None) or env.get("HELIX_RUNNER_TOKEN_COMMAND"):
            token = _token_from_command(getattr(args, "token_command", None) or env["HELIX_RUNNER_TOKEN_COMMAND"])
        else:
            token = env.get("HELIX_RUNNER_TOKEN", "").strip() or None
        ca_file = args.ca_file or env.get("HELIX_RUNNER_TLS_CA") or env.get("HELIX_RUNNER_CA_FILE")
        cert_file = getattr(args, "tls_cert", None) or env.get("HELIX_RUNNER_TLS_CERT")
        key_file = getattr(args, "tls_key", None) or env.get("HELIX_RUNNER_TLS_KEY")
        if bool(cert_file) != bool(key_file):
            raise CliError("--tls-cert and --tls-key go together (a client certificate and its key)")
        server_name = getattr(args, "tls_server_name", None) or env.get("HELIX_RUNNER_TLS_SERVER_NAME") or None
        tls = (
            bool(args.tls)
            or scheme_tls
            or bool(ca_file)
            or bool(cert_file)
            or bool(server_name)
            or env.get("HELIX_RUNNER_TLS", "").lower() in ("1", "true", "yes")
        )
        roots = _read_file(ca_file, "CA file") if ca_file else None
        cert = _read_file(cert_file, "client certificate") if cert_file else None
        key = _read_file(key_file, "client key") if key_file else None
        timeout = getattr(args, "call_timeout", 15.0)
        if timeout <= 0:
            raise CliError("--call-timeout must be positive")
        return cls(target, token, tls, roots, timeout, cert, key, server_name)

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[RunnerClient]:
        """A client over a new channel (TLS when asked), closed on exit."""
        import grpc
        from helix_runner_client import RunnerClient, secure_channel

        if self.tls:
            channel = secure_channel(
                self.target,
                root_certificates=self.root_certificates,
                certificate_chain=self.certificate_chain,
                private_key=self.private_key,
                server_name=self.server_name,
            )
        else:
            channel = grpc.aio.insecure_channel(self.target)
        try:
            yield RunnerClient(self.target, channel=channel, token=self.token, timeout=self.call_timeout)
        finally:
            await channel.close()


def server_target(value: str) -> tuple[str, bool]:
    """``--server`` as gRPC dials it: ``host:port`` as given, or a pasted URL (``http://host:port/``)
    without its scheme (``https``/``grpcs`` mean TLS); a URL without a port gets 50051."""
    scheme, sep, rest = value.strip().partition("://")
    if not sep or scheme.lower() not in _SCHEMES:
        return value.strip(), False
    host_port, _, path = rest.partition("/")
    if path or not host_port:
        raise CliError(f"--server takes HOST:PORT or a URL without a path, not {value!r}")
    has_port = host_port.rsplit("]", 1)[-1].count(":") == 1 if host_port.startswith("[") else ":" in host_port
    return (host_port if has_port else f"{host_port}:{DEFAULT_PORT}"), _SCHEMES[scheme.lower()]


def _read_file(path: str, what: str) -> bytes:
    try:
        return Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None


def describe_error(exc: RunnerError, target: str) -> tuple[str, int]:
    """One line for a failed call, and the exit status that goes with it."""
    import grpc

    code = exc.code
    if code == grpc.StatusCode.UNAVAILABLE and _http1_answer(exc.message):
        return _not_grpc(target), EXIT_UNREACHABLE
    if code == grpc.StatusCode.UNAVAILABLE:
        return f"cannot reach the server at {target}: {_transport_detail(exc.message)}", EXIT_UNREACHABLE
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return (
            f"the server at {target} refused the credentials ({exc.message}); "
            "pass --token-file or set HELIX_RUNNER_TOKEN"
        ), EXIT_UNREACHABLE
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"the server at {target} did not answer in time", EXIT_UNREACHABLE
    text = exc.message or code.name
    status = exc.metadata.get("status")
    if status and status not in text:
        text += f" (the phase is {status})"
    reason = exc.reason or code.name
    return f"{text} [{reason}]", EXIT_REFUSED


def _transport_detail(message: str) -> str:
    lowered = message.lower()
    for needle, short in (
        ("connection refused", "connection refused"),
        ("ssl", "TLS handshake failed (does the server use TLS?)"),
        ("tls handshake", "TLS handshake failed (wrong CA, server name or client certificate?)"),
        ("socket closed", "the connection was closed (does the server use TLS, or require a client "
         "certificate?)"),
        ("dns resolution failed", "the host name does not resolve"),
        ("deadline", "timed out connecting"),
    ):
        if needle in lowered:
            return short
    return _cut(message.splitlines()[0], 200) if message else "unavailable"


def _cut(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters, cut at a word boundary with an ellipsis, never mid-word."""
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0].rstrip(" ,;:(") + " …"


def _http1_answer(message: str) -> bool:
    """Whether gRPC's error says an HTTP/1.x server answered (a dashboard's port, or any web server)."""
    lowered = message.lower()
    return "http1.x server" in lowered or "expected settings frame" in lowered


def _not_grpc(target: str) -> str:
    """One line for a ``--server`` that answers HTTP/1.1: the dashboard's port names its gRPC port."""
    host, _, port = target.rpartition(":")
    grpc_port = _dashboard_grpc_port(host, port)
    if grpc_port is not None:
        return (f"{target} is the dashboard's HTTP port of a helix-runner server, not its gRPC port; "
                f"use --server {host}:{grpc_port}")
    return (f"{target} answers HTTP/1.1, not gRPC: is it a dashboard's port or another web server? "
            f"(scripts/serve puts gRPC on {DEFAULT_PORT}, the dashboard on {DEFAULT_PORT + 1})")


def _dashboard_grpc_port(host: str, port: str) -> int | None:
    """The gRPC port a helix-runner dashboard at ``host:port`` names in its response header, if it is one."""
    import http.client

    for connection_class in (http.client.HTTPConnection, http.client.HTTPSConnection):
        kwargs: dict[str, Any] = {"timeout": 3.0}
        if connection_class is http.client.HTTPSConnection:
            import ssl

            # Only a header is read and nothing is sent (no token): the certificate does not matter here.
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            kwargs["context"] = context
        connection = connection_class(host.strip("[]"), int(port), **kwargs)
        try:
            connection.request("HEAD", "/")
            value = connection.getresponse().getheader(GRPC_PORT_HEADER)
            return int(value) if value and value.isdigit() else None
        except (OSError, ValueError, http.client.HTTPException):
            continue
        finally:
            connection.close()
    return None


def run_async(coro: Coroutine[Any, Any, int]) -> int:
    """Runs a verb's coroutine; its return value is the exit status."""
    return asyncio.run(coro)


def with_client(fn):
    """A verb's handler running ``fn(client, args)`` with a client opened from the connection flags."""

    def handler(args: argparse.Namespace) -> int:
        connection = Connection.from_args(args)

        async def go() -> int:
            async with connection.open() as client:
                return await fn(client, args)

        return run_async(go())

    return handler


def make_console(file: Any = None, *, stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr): colour on terminals only, never re-wrapping lines, and
    never writing a control character or bidi override it was given (``cli.visible``).

    Off a terminal rich assumes 80 columns; tables for scripts and logs get more room instead.
    """
    from rich.console import Console

    from helix_runner.cli.visible import VisibleGuard

    stream = file if file is not None else (sys.stderr if stderr else sys.stdout)
    is_tty = hasattr(stream, "isatty") and stream.isatty()
    width = None if is_tty else max(160, int(os.environ.get("COLUMNS", "0") or 0))
    console = Console(file=stream, highlight=False, markup=False, width=width, soft_wrap=False, emoji=False)
    # What a phase wrote is escaped by the views before layout; the guard escapes what slipped through.
    console.push_render_hook(VisibleGuard())
    return console


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON (one document) for scripts")


def print_json(data: Any, file: Any = None) -> None:
    from helix_runner.cli.visible import dumps_json

    stream = file if file is not None else sys.stdout
    # Lossless: control characters and bidi overrides inside strings are written as \u escapes.
    stream.write(dumps_json(data, indent=2, default=str) + "\n")
    stream.flush()


def _token_from_command(command: str) -> str:
    """The token a command prints (its first line), run without a shell within 30 s; a usage error
    saying why when it fails (its own output is not echoed: it may hold a secret)."""
    import shlex
    import subprocess

    try:
        argv = shlex.split(command)
        done = subprocess.run(argv, capture_output=True, timeout=30, check=False, stdin=subprocess.DEVNULL)
    except (ValueError, OSError, subprocess.TimeoutExpired) as exc:
        raise CliError(f"the token command could not run: {type(exc).__name__}") from None
    if done.returncode != 0:
        raise CliError(f"the token command exited {done.returncode}")
    token = done.stdout.decode("utf-8", "replace").strip().splitlines()
    if not token or not token[0].strip():
        raise CliError("the token command printed nothing")
    return token[0].strip()
