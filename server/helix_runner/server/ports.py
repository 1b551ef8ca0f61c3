"""Where clients reach the server ([server], [web]): the gRPC port with health and reflection, the
plaintext health-only port, and the dashboard's HTTP port.

Each part binds at ``start`` and begins to serve at ``open``, so a port that cannot be had stops the
start before any client was answered.
"""

from __future__ import annotations

import socket

import grpc
from grpc_health.v1 import health, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from helix_runner.api.service_descriptor import SERVICE_NAME
from helix_runner.api.servicer import RunnerServicer, add_runner_service
from helix_runner.api.tls import CertificateFiles
from helix_runner.api.web import WebServer, bind_web, start_web
from helix_runner.config import ServerConfig
from helix_runner.domain.bounds import MAX_REQUEST_BYTES
from helix_runner.server.lifecycle import StartupError


def listen_address(host: str, port: int) -> str:
    return f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"


def bound_address(host: str, port: int) -> str:
    """host:port as other replicas dial it; a wildcard host is replaced by this machine's name."""
    if host in ("0.0.0.0", "::", ""):
        host = socket.getfqdn()
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def tls_files(config: ServerConfig) -> CertificateFiles | None:
    """The gRPC port's TLS files (None: plaintext); the config checked them, this reads them."""
    if config.tls_cert_file is None or config.tls_key_file is None:
        return None
    try:
        return CertificateFiles(config.tls_cert_file, config.tls_key_file, config.tls_client_ca_file)
    except (OSError, ValueError) as exc:  # changed since the config was validated
        raise StartupError(f"cannot load the TLS certificate {config.tls_cert_file}: {exc}") from None


def tls_mode(config: ServerConfig) -> str:
    return "mutual" if config.mutual_tls else "on" if config.tls else "off"


class GrpcPorts:
    """RunnerService, health and reflection on the configured port (TLS, or mutual TLS, with the
    files re-read on change: api/tls.py); the health-only port; with replicas sharing a port
    (``reuse_port``), a port of this process's own for forwarded control."""

    name = "gRPC ports"

    def __init__(self, config: ServerConfig, servicer: RunnerServicer,
                 interceptors: list[grpc.aio.ServerInterceptor], tls: CertificateFiles | None, *,
                 own_port_needed: bool):
        self.config = config
        self.tls = tls
        self.own_port_needed = own_port_needed
        self.health = health.aio.HealthServicer()
        self.server = grpc.aio.server(
            interceptors=interceptors,
            options=[
                # Idle watch streams behind proxies need keepalive pings to stay up.
                ("grpc.keepalive_time_ms", 60_000),
                ("grpc.http2.min_ping_interval_without_data_ms", 30_000),
                # Off unless configured: a second server on a busy port must fail, not share it silently.
                ("grpc.so_reuseport", 1 if config.reuse_port else 0),
                # gRPC's default (4 MiB) answered a prompt over it with a transport error quoting 4 MiB;
                # a request up to this size is read and refused field by field (a 1 MiB prompt limit).
                ("grpc.max_receive_message_length", MAX_REQUEST_BYTES),
            ],
        )
        add_runner_service(servicer, self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME),
                                            self.server)
        self.port = 0
        self.own_port = 0
        self.health_server: grpc.aio.Server | None = None
        self.health_port: int | None = None
        self._open = False

    async def start(self) -> None:
        config = self.config
        credentials = None if self.tls is None else self.tls.server_credentials()

        def add_port(at: str) -> int:
            if credentials is None:
                return self.server.add_insecure_port(at)
            return self.server.add_secure_port(at, credentials)

        address = listen_address(config.host, config.port)
        try:
            self.port = add_port(address)
        except RuntimeError as exc:
            raise StartupError(f"cannot listen on {address}: {exc} (is the port already in use?)") from None
        if self.port == 0:
            raise StartupError(f"cannot listen on {address}: the port is already in use or the address is invalid")
        if config.health_port is not None:
            self.health_server = grpc.aio.server()
            health_pb2_grpc.add_HealthServicer_to_server(self.health, self.health_server)
            health_address = listen_address(config.host, config.health_port)
            try:
                self.health_port = self.health_server.add_insecure_port(health_address)
            except RuntimeError:
                self.health_port = 0
            if self.health_port == 0:
                raise StartupError(f"cannot serve health checks on {health_address}: the port is already in use "
                                   "or the address is invalid")
        self.own_port = self.port
        if self.own_port_needed:
            # The shared port reaches any process on it; forwarded control must reach this one, over
            # the same credentials as the shared port.
            self.own_port = add_port(listen_address(config.host, 0))

    async def open(self) -> None:
        """Begins to answer on the bound ports."""
        await self.server.start()
        if self.health_server is not None:
            await self.health_server.start()
        self._open = True

    async def stop(self) -> None:
        # Streams have delivered their final results by now (the drain); give them a moment to flush.
        await self.server.stop(1.0 if self._open else None)
        if self.health_server is not None:
            await self.health_server.stop(None)


class Dashboard:
    """The dashboard: the same servicer over Connect, plus the page (api/web.py), on ``web_port``
    when one is configured (a no-op part otherwise)."""

    name = "dashboard"

    def __init__(self, config: ServerConfig, servicer: RunnerServicer, tls: CertificateFiles | None):
        self.config = config
        self.servicer = servicer
        self.tls = tls
        self.socket: socket.socket | None = None
        self.web: WebServer | None = None

    @property
    def port(self) -> int:
        return self.socket.getsockname()[1] if self.socket is not None else 0

    async def start(self) -> None:
        if self.config.web_port is None:
            return
        try:
            self.socket = bind_web(self.config.web_host, self.config.web_port)
        except OSError as exc:
            raise StartupError(f"cannot serve the dashboard on {self.config.web_host}:{self.config.web_port}: "
                               f"{exc.strerror or exc} (is the port already in use?)") from None

    async def open(self, grpc_port: int) -> None:
        if self.socket is not None:
            self.web = await start_web(self.servicer, host=self.config.web_host,
                                       sock=self.socket, tls=self.tls, grpc_port=grpc_port)

    async def stop(self) -> None:
        if self.web is not None:
            await self.web.stop(1.0)
        elif self.socket is not None:
            self.socket.close()
