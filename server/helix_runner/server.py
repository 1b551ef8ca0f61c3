"""Wires the gRPC server: RunnerService, health (liveness / readiness), reflection, auth, draining.

Health service names: ``liveness`` answers as long as the event loop does; ``readiness`` and
``helix.runner.v1.RunnerService`` are SERVING while new phases are accepted and NOT_SERVING
while draining. We never call ``enter_graceful_shutdown()``: it would flip liveness too and
get a draining pod killed early (notes/grpc-python-service.md §3.5).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from helix.runner.v1 import runner_service_pb2
from helix_runner.api.auth import BearerTokenInterceptor
from helix_runner.api.record_codec import ProtoRecordCodec
from helix_runner.api.servicer import RunnerServicer, add_runner_service
from helix_runner.config import ServerConfig
from helix_runner.domain import pricing
from helix_runner.phase_manager import PhaseManager
from helix_runner.scripted_api import Script, ScriptedApi, ScriptError
from helix_runner.store.sqlite_store import SqliteStore, StoreError
from helix_runner.telemetry import Telemetry
from helix_runner.telemetry.tracing import TracingConfigError

log = logging.getLogger(__name__)

SERVICE_NAME = runner_service_pb2.DESCRIPTOR.services_by_name["RunnerService"].full_name
LIVENESS = "liveness"
READINESS = "readiness"


class StartupError(Exception):
    """The server cannot start; the message is one line for a person."""


@dataclass
class RunningServer:
    """A started server and what is needed to drain it."""

    server: grpc.aio.Server
    health: health.aio.HealthServicer
    port: int
    store: SqliteStore
    manager: PhaseManager
    offline_api: ScriptedApi | None = None
    telemetry: Telemetry | None = None

    async def drain(self, grace: float) -> None:
        """Stops accepting phases, gives running ones ``grace`` seconds, records the rest INTERRUPTED."""
        for name in (READINESS, SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        log.info("draining", extra={"fields": {"grace_seconds": grace}})
        await self.manager.drain(grace)
        # Streams have delivered their final results by now; give them a moment to flush.
        await self.server.stop(1.0)
        self.manager.writer.flush()
        self.store.close()
        if self.offline_api is not None:
            self.offline_api.stop()
        if self.telemetry is not None:  # telemetry: stop /metrics, flush spans
            await self.telemetry.stop()


def _start_offline_api(config: ServerConfig) -> tuple[ScriptedApi | None, dict[str, str]]:
    """Offline mode: a scripted loopback Messages API the CLI talks to instead of Anthropic."""
    if config.offline_script is None:
        return None, {}
    try:
        script = Script.load(config.offline_script)
    except (OSError, ScriptError, ValueError) as exc:
        raise StartupError(f"cannot load offline script {config.offline_script}: {exc}") from None
    api = ScriptedApi(script).start()
    log.warning("offline mode: the CLI talks to a scripted Messages API, not Anthropic",
                extra={"fields": {"base_url": api.base_url, "script": str(config.offline_script)}})
    return api, {
        "ANTHROPIC_BASE_URL": api.base_url,
        "ANTHROPIC_API_KEY": "offline-mode",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }


async def start_server(config: ServerConfig, *, server_env: dict[str, str] | None = None,
                       telemetry: Telemetry | None = None) -> RunningServer:
    """Opens the store, recovers phases a previous process left active, binds the port, serves.

    ``telemetry`` defaults to what the config and the ``OTEL_*`` environment ask for.
    """
    try:  # telemetry
        telemetry = telemetry or Telemetry.from_config(config, server_env)
    except TracingConfigError as exc:
        raise StartupError(str(exc)) from None
    try:
        config.data_dir.mkdir(parents=True, exist_ok=True)
        probe = config.data_dir / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise StartupError(f"data directory {config.data_dir} is not writable: {exc.strerror}") from None
    try:
        store = SqliteStore(config.db_path)
    except StoreError as exc:  # carries a one-line message
        raise StartupError(str(exc)) from None

    interceptors: list[grpc.aio.ServerInterceptor] = [telemetry.interceptor()]  # telemetry: outermost
    token = config.read_auth_token()
    if token is not None:
        interceptors.append(BearerTokenInterceptor(token))
    server = grpc.aio.server(
        interceptors=interceptors,
        options=[
            # Idle watch streams behind proxies need keepalive pings to stay up.
            ("grpc.keepalive_time_ms", 60_000),
            ("grpc.http2.min_ping_interval_without_data_ms", 30_000),
            ("grpc.so_reuseport", 0),
        ],
    )
    # The first price lookup loads genai-prices' table (~0.7 s); pay it here, not in a phase's hot path.
    await asyncio.get_running_loop().run_in_executor(None, pricing.preload)
    offline_api, env_overrides = _start_offline_api(config)
    manager = PhaseManager(config, store, ProtoRecordCodec(), server_env=server_env, env_overrides=env_overrides,
                           telemetry=telemetry)
    telemetry.attach(manager)
    recovered = manager.recover()
    if recovered:
        log.warning("marked phases INTERRUPTED after an unclean stop", extra={"fields": {"count": len(recovered)}})
    add_runner_service(RunnerServicer(manager), server)

    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )

    address = f"{config.host}:{config.port}" if ":" not in config.host else f"[{config.host}]:{config.port}"
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as exc:
        store.close()
        raise StartupError(f"cannot listen on {address}: {exc} (is the port already in use?)") from None
    if port == 0:
        store.close()
        raise StartupError(f"cannot listen on {address}: the port is already in use or the address is invalid")
    try:  # telemetry: /metrics and the event-loop lag probe
        await telemetry.start()
    except OSError as exc:
        await server.stop(None)
        store.close()
        if offline_api is not None:
            offline_api.stop()
        raise StartupError(f"cannot serve metrics on {config.metrics_host}:{config.metrics_port}: "
                           f"{exc.strerror or exc}") from None
    await server.start()
    for name in ("", LIVENESS, READINESS, SERVICE_NAME):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    log.info(
        "serving",
        extra={"fields": {"address": f"{config.host}:{port}", "data_dir": str(config.data_dir),
                          "workspace_roots": [str(r) for r in config.workspace_roots],
                          "auth": token is not None}},
    )
    return RunningServer(server, health_servicer, port, store, manager, offline_api, telemetry)


async def serve(config: ServerConfig) -> None:
    """Runs until SIGTERM or SIGINT, then drains."""
    running = await start_server(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await running.drain(config.drain_grace_seconds)
    log.info("stopped")
