"""Assembles a server from its parts, in the order each needs the ones before it, and drains it.

Health service names: ``liveness`` answers as long as the event loop does; ``readiness`` and
``helix.runner.v1.RunnerService`` are SERVING while new phases are accepted and NOT_SERVING
while draining. We never call ``enter_graceful_shutdown()``: it would flip liveness too and
get a draining pod killed early (docs/grpc-python-service.md §3.5).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import sys
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health, health_pb2

from helix_runner.api.auth import BearerTokenInterceptor, is_digest
from helix_runner.api.forwarding import OwnerForwarder
from helix_runner.api.handover_codec import ProtoHandoverCodec
from helix_runner.api.principals import (
    Authenticator,
    PrincipalsFile,
    PrincipalsFileError,
    load_principals_file,
)
from helix_runner.api.proto_records import ProtoRecordEncoder
from helix_runner.api.service_descriptor import SERVICE_NAME
from helix_runner.api.servicer import RunnerServicer
from helix_runner.api.tls import ForwardingCredentials
from helix_runner.api.web import WebServer
from helix_runner.config import ConfigError, ServerConfig
from helix_runner.domain import pricing
from helix_runner.egress.service import Egress
from helix_runner.errors import RunnerError
from helix_runner.offline import ScriptedApi
from helix_runner.phases.event_log import PhaseEventLog
from helix_runner.phases.queries import PhaseQueries
from helix_runner.phases.recovery import recover
from helix_runner.phases.retention import RetentionPolicy, RetentionSweeper
from helix_runner.phases.service import PhaseService
from helix_runner.phases.takeover import Takeover
from helix_runner.phases.webhook_dispatcher import WebhookDispatcher
from helix_runner.process import git_worktree, secret_files
from helix_runner.process.dumpable import make_undumpable
from helix_runner.process.key_broker import KeyBroker
from helix_runner.server.background import Sweeps, WebhookDelivery, load_webhooks
from helix_runner.server.isolation import (
    box_host_git,
    detect_containment,
    start_sandbox,
    warn_about_phase_limits,
)
from helix_runner.server.lifecycle import Components, ReadyPart, StartupError
from helix_runner.server.model_access import ModelAccess
from helix_runner.server.ports import Dashboard, GrpcPorts, bound_address, tls_files, tls_mode
from helix_runner.server.storage import DataDir, Storage
from helix_runner.store.cluster import SINGLE_NODE, Cluster, ReplicaFeed
from helix_runner.store.protocol import Store, sweep_interval_seconds
from helix_runner.telemetry import Telemetry
from helix_runner.telemetry.grpc_interceptor import annotate_principal
from helix_runner.telemetry.tracing import TracingConfigError

log = logging.getLogger(__name__)

LIVENESS = "liveness"
READINESS = "readiness"


@dataclass
class RunningServer:
    """A started server: its parts (stopped newest first at the end of the drain) and handles to
    what callers and tests use."""

    server: grpc.aio.Server
    health: health.aio.HealthServicer
    port: int
    store: Store
    service: PhaseService
    queries: PhaseQueries
    parts: Components = field(default_factory=Components)
    offline_api: ScriptedApi | None = None
    key_broker: KeyBroker | None = None
    web: WebServer | None = None
    telemetry: Telemetry | None = None
    feed: ReplicaFeed | None = None  # a shared database: other replicas' live events
    forwarder: OwnerForwarder | None = None  # a shared database: calls routed to other replicas
    health_server: grpc.aio.Server | None = None  # the plaintext health-only port (health_port)
    health_port: int | None = None
    cluster: Cluster = SINGLE_NODE  # the replicas sharing the store (store/cluster.py)
    egress: Egress | None = None  # the model-API gateway and the egress proxy (helix_runner/egress)
    webhook_dispatcher: WebhookDispatcher | None = None  # delivers the webhook outbox
    sweeps: Sweeps | None = None  # retention, takeover, adopter

    @property
    def egress_ports(self) -> tuple[int, ...]:
        """The host ports a phase may reach: the gateway's and the egress proxy's."""
        return self.egress.ports if self.egress is not None else ()

    async def drain(self, grace: float) -> None:
        """Stops accepting phases, gives running ones ``grace`` seconds (or hands them over), records
        the rest INTERRUPTED, then stops the parts newest first."""
        for name in (READINESS, SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        log.info("draining", extra={"fields": {"grace_seconds": grace}})
        if self.forwarder is not None:  # no more phases placed here (docs/scale-out.md, placement)
            try:
                self.cluster.advertise_capacity(0)
            except Exception:  # the database's error; drain goes on (a placement here is refused: DRAINING)
                log.warning("withdrawing this replica's capacity failed; placements here fall back", exc_info=True)
        if self.forwarder is None:
            await self.service.drain(grace)
        else:  # phases placed on other replicas through this one get the same grace to end there
            async def relays_done() -> None:
                try:
                    await asyncio.wait_for(self.forwarder.relays_done(), grace)
                except TimeoutError:
                    pass  # cut when the server stops; their owners apply on_disconnect

            await asyncio.gather(self.service.drain(grace), relays_done())
        await self.parts.stop()


class TelemetryPart(ReadyPart):
    """Telemetry ([telemetry]) is built first, so every later part is traced; it is stopped (the
    probe, /metrics, then the spans still queued flushed) after every part that makes spans. Its
    endpoint and the event-loop lag probe start late (``open``): start-up's own stalls must not
    count against ``admission_max_loop_lag_ms``."""

    name = "telemetry"

    def __init__(self, telemetry: Telemetry):
        self.telemetry = telemetry

    async def open(self, config: ServerConfig) -> None:
        try:
            await self.telemetry.start()
        except OSError as exc:
            raise StartupError(f"cannot serve metrics on {config.metrics_host}:{config.metrics_port}: "
                               f"{exc.strerror or exc}") from None
        if self.telemetry.metrics_port is not None and not config.metrics_is_loopback:
            # /metrics takes no token (Prometheus' convention; README "Observability"): say so where it shows.
            log.warning("/metrics is served without authentication on a non-loopback address: whoever reaches "
                        "it reads the counters, costs and tool, model and project names (no job or phase id, no "
                        "secret); restrict the port with a firewall or network policy, or keep metrics_host on "
                        "loopback", extra={"fields": {"address": f"{config.metrics_host}:{self.telemetry.metrics_port}"}})

    async def stop(self) -> None:
        await self.telemetry.stop()


class PhasesPart(ReadyPart):
    """The application layer ([phases], [admission], [retry]): its phases ended by the drain, it
    stops after the ports (no call can reach it any more): the store-call thread and the
    containment directories, then the event writer commits what is left and stops its thread."""

    name = "phases"

    def __init__(self, service: PhaseService):
        self.service = service

    async def stop(self) -> None:
        self.service.close()
        self.service.writer.close()


class ForwarderPart(ReadyPart):
    """With replicas: the channels control calls are forwarded to other replicas over."""

    name = "forwarder"

    def __init__(self, forwarder: OwnerForwarder):
        self.forwarder = forwarder

    async def stop(self) -> None:
        await self.forwarder.close()


async def start_server(config: ServerConfig, *, server_env: dict[str, str] | None = None,
                       telemetry: Telemetry | None = None) -> RunningServer:
    """Starts the parts in order (data dir, telemetry, storage, model access, phases, the
    forwarder, the dashboard, the gRPC ports, webhook delivery, sweeps), recovers phases a previous process left active, serves.

    A part that cannot start stops those started before it, newest first: nothing is left
    half-started. ``telemetry`` defaults to what the config and the ``OTEL_*`` environment ask for.
    """
    import os

    server_env = dict(os.environ if server_env is None else server_env)
    try:
        telemetry = telemetry or Telemetry.from_config(config, server_env)
    except TracingConfigError as exc:
        raise StartupError(str(exc)) from None
    parts = Components()
    try:
        return await _assemble(config, server_env, telemetry, parts)
    except BaseException:
        await parts.stop()
        raise


async def _assemble(config: ServerConfig, server_env: dict[str, str], telemetry: Telemetry,
                    parts: Components) -> RunningServer:
    # Before anything reads or cleans the data dir or this instance's cgroups.
    await parts.start(DataDir(config))
    telemetry_part = await parts.start(TelemetryPart(telemetry))
    storage = await parts.start(Storage(config))
    store, cluster = storage.store, storage.cluster
    assert store is not None
    try:
        token = config.read_auth_token()
    except ConfigError as exc:
        raise StartupError(str(exc)) from None
    authenticator = Authenticator(token, _principals(config), mutual_tls=config.mutual_tls)
    if token is not None and is_digest(token) and cluster.shared:
        raise StartupError("auth_token_file holds the token's sha256 digest, but replicas on a shared database "
                           "call each other with the token itself: give them the token")
    # The first price lookup loads genai-prices' table (~0.7 s); pay it here, not in a phase's hot path.
    await asyncio.get_running_loop().run_in_executor(None, pricing.preload)
    containment = detect_containment(config)
    await asyncio.to_thread(box_host_git, config)
    access = await parts.start(ModelAccess(config, server_env))
    creds = access.creds
    # The sandbox's network layer lets a phase reach only the gateway's and the proxy's ports.
    sandbox = await asyncio.to_thread(start_sandbox, config, server_env, creds, creds.key_broker)
    warn_about_phase_limits(config, containment, sandbox)
    # Webhook subscriptions: the config file's replace those it stored before (phases/webhooks.py).
    webhooks = load_webhooks(config, store)
    service = PhaseService(config, store, ProtoRecordEncoder(), containment, server_env=server_env,
                           env_overrides=creds.overrides, env_withhold=creds.withhold, key_broker=creds.key_broker,
                           telemetry=telemetry, cluster=cluster, egress=creds.egress, sandbox=sandbox,
                           webhooks=webhooks, handover_codec=ProtoHandoverCodec())
    await parts.start(PhasesPart(service))
    telemetry.attach(service, lagged_total=lambda: PhaseEventLog.lagged_total)
    takeover = None
    if cluster.shared:  # only the phases of replicas that are gone (takeover.py)
        takeover = Takeover(cluster, service.encoder,
                            interval_seconds=sweep_interval_seconds(config.replica_lease_seconds),
                            notifier=service.notifier_of)
        recovered = takeover.sweep()
    else:  # alone on its database: every phase a previous process left active
        recovered = await recover(store, service.encoder, containment, service.notifier_of)
    if recovered:
        log.warning("marked phases INTERRUPTED after an unclean stop", extra={"fields": {"count": len(recovered)}})
    settled = git_worktree.sweep(config.data_dir)  # worktrees a previous process left: per their policy
    secret_files.sweep(config.data_dir)  # the private option files of phases a previous process ran
    if settled:
        log.warning("settled leftover phase worktrees", extra={"fields": settled})
    feed = storage.feed
    if feed is not None:
        service.follower = feed.follow
        feed.on_admission_change(service.admission.wake)  # another replica freed a cluster slot, or it is our turn
        if service.adopter is not None:  # a phase released by a draining replica (or a freed slot): claim it
            feed.on_admission_change(service.adopter.wake)
    queries = PhaseQueries(store, service.get_live, view_cache_jobs=config.read_cache_jobs)
    tls = tls_files(config)
    forwarder = None
    if cluster.shared:
        forwarding_tls = None if tls is None else ForwardingCredentials(tls, config.tls_server_name)
        forwarder = (await parts.start(ForwarderPart(OwnerForwarder(token, forwarding_tls)))).forwarder
    servicer = RunnerServicer(service, queries, forwarder, authenticator, annotate_principal)

    interceptors: list[grpc.aio.ServerInterceptor] = [telemetry.interceptor()]  # telemetry: outermost
    if not authenticator.open:
        interceptors.append(BearerTokenInterceptor(authenticator))
    # The dashboard's port is bound before the gRPC port: a grpc server never started keeps the
    # ports it bound until it is collected, so a busy dashboard port must stop the start first.
    dashboard = await parts.start(Dashboard(config, servicer, tls))
    ports = await parts.start(GrpcPorts(
        config, servicer, interceptors, tls,
        own_port_needed=config.reuse_port and forwarder is not None and not config.advertise_address))
    await telemetry_part.open(config)  # /metrics and the event-loop lag probe
    if creds.egress is not None:  # the proxy never connects a phase to one of the server's own ports
        creds.egress.own_ports([ports.port, ports.own_port, ports.health_port or 0, telemetry.metrics_port or 0,
                                dashboard.port])
    await ports.open()
    if forwarder is not None:  # other replicas forward control of this one's phases here
        cluster.advertise(config.advertise_address or bound_address(config.host, ports.own_port))
        # Placement by free slots: how many phases this replica takes (api/placement.py).
        cluster.advertise_capacity(service.admission.queue.limits.max_running)
    await dashboard.open(ports.port)
    for name in ("", LIVENESS, READINESS, SERVICE_NAME):
        await ports.health.set(name, health_pb2.HealthCheckResponse.SERVING)
    # What start-up built (modules, descriptors, the gRPC server) lives as long as the process: out of
    # the collector's reach, a full collection no longer walks it. Each one paused the event loop, and
    # every live stream, for ~40-60 ms (benchmarks/README.md, fan-out).
    gc.freeze()
    jobs = await asyncio.to_thread(store.list_jobs, None, [], JOBS_COUNTED + 1)
    # The default data dir is one per user: a fresh checkout shows the jobs of every other one.
    print(f"Data: {config.data_dir} ({jobs_in_words(len(jobs))})", flush=True)
    log.info(
        "serving",
        extra={"fields": {"address": f"{config.host}:{ports.port}", "data_dir": str(config.data_dir),
                          "jobs": len(jobs),
                          "workspace_roots": [str(r) for r in config.workspace_roots],
                          "auth": token is not None, "tls": tls_mode(config), "health_port": ports.health_port}},
    )
    delivery = await parts.start(WebhookDelivery(config, store, webhooks, cluster))
    service.writer.on_outbox = delivery.dispatcher.wake
    sweeps = await parts.start(Sweeps(_sweeps(config, store, cluster, service, takeover)))
    try:  # once nothing can fail the start any more (its processes end at drain)
        service.start_warm_pool()
    except RunnerError as exc:  # the server still serves; every phase then starts cold
        log.error("warm pool not started", extra={"fields": {"error": exc.message}})
    if dashboard.web is not None:
        log.info("dashboard", extra={"fields": {"url": dashboard.web.url}})
        # Logs are for machines; this line (stdout) is for the person who just started the server.
        print(f"Dashboard: {dashboard.web.url}", flush=True)
    return RunningServer(ports.server, ports.health, ports.port, store, service, queries, parts=parts,
                         offline_api=creds.offline_api, key_broker=creds.key_broker, web=dashboard.web,
                         telemetry=telemetry, feed=feed, forwarder=forwarder, health_server=ports.health_server,
                         health_port=ports.health_port, cluster=cluster, egress=creds.egress,
                         webhook_dispatcher=delivery.dispatcher, sweeps=sweeps)


# How many jobs the start-up line counts at most (one query; "over 1000 jobs" beyond).
JOBS_COUNTED = 1000


def jobs_in_words(count: int) -> str:
    """What the start-up line says of the jobs already in the data dir."""
    if count == 0:
        return "no jobs yet"
    if count > JOBS_COUNTED:
        return f"over {JOBS_COUNTED} jobs from earlier runs"
    return f"{count} job{'s' if count != 1 else ''} from earlier runs"


def _sweeps(config: ServerConfig, store: Store, cluster: Cluster, service: PhaseService,
            takeover: Takeover | None) -> dict:
    """The periodic tasks this server runs: retention when configured; with replicas, the takeover
    of dead replicas' phases and the adopter of phases handed over (docs/scale-out.md "Hand-over")."""
    tasks: dict = {"retention": None, "takeover": None, "adopter": None}
    policy = RetentionPolicy(config.retention_days * 86400, config.recordings_max_bytes,
                             config.retention_interval_seconds)
    if policy.enabled:
        sweeper = RetentionSweeper(store, config.recordings_dir, policy, shared=cluster.shared)
        tasks["retention"] = sweeper.run
    if takeover is not None:
        tasks["takeover"] = takeover.run
        if service.adopter is not None:
            loop = asyncio.get_running_loop()
            service.sweep_now = lambda: loop.run_in_executor(None, takeover.sweep) and None
            adopter = service.adopter
            tasks["adopter"] = lambda: adopter.run(sweep_interval_seconds(config.replica_lease_seconds))
    return tasks


async def serve(config: ServerConfig) -> None:
    """Runs until SIGTERM or SIGINT, then drains. The process is made non-dumpable first, so the
    phases (the same user) cannot read its environment or memory through /proc."""
    if not make_undumpable():
        log.warning("could not make the server process non-dumpable: processes of its user, the phases' "
                    "tools included, can read its environment and memory through /proc")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(sig: signal.Signals) -> None:
        if sig == signal.SIGINT and sys.stderr.isatty():
            sys.stderr.write("\n")  # after the terminal's echoed ^C: the drain's log lines start on their own
        stop.set()

    # Before the start: a signal during it (once "serving" is logged, or earlier) drains, not a traceback.
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    running = await start_server(config)
    await stop.wait()
    await running.drain(config.drain_grace_seconds)
    log.info("stopped")


def _principals(config: ServerConfig) -> PrincipalsFile | None:
    """The principals file's tokens, certificates and JWT rules (docs/tenancy.md), read at start."""
    if config.auth_principals_file is None:
        return None
    try:
        return load_principals_file(config.auth_principals_file)
    except PrincipalsFileError as exc:
        raise StartupError(str(exc)) from None
