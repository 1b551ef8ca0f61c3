"""Wires the gRPC server: RunnerService, health (liveness / readiness), reflection, auth, draining.

Health service names: ``liveness`` answers as long as the event loop does; ``readiness`` and
``helix.runner.v1.RunnerService`` are SERVING while new phases are accepted and NOT_SERVING
while draining. We never call ``enter_graceful_shutdown()``: it would flip liveness too and
get a draining pod killed early (docs/grpc-python-service.md §3.5).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import sys
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from helix_runner.api.auth import BearerTokenInterceptor, is_digest
from helix_runner.api.forwarding import OwnerForwarder
from helix_runner.api.proto_records import ProtoRecordEncoder, tool_call_duration_ns
from helix_runner.api.service_descriptor import SERVICE_NAME
from helix_runner.api.servicer import RunnerServicer, add_runner_service
from helix_runner.api.tls import CertificateFiles, ForwardingCredentials
from helix_runner.api.web import WebServer, bind_web, start_web
from helix_runner.config import ConfigError, ServerConfig, webhook_schedule, webhook_specs
from helix_runner.domain import pricing
from helix_runner.egress.addresses import OperatorExceptions
from helix_runner.egress.allowlist import EgressPolicy, parse_pattern
from helix_runner.egress.gateway import GatewaySettings
from helix_runner.egress.proxy import ProxySettings
from helix_runner.egress.service import Egress, EgressSettings
from helix_runner.egress.upstream import UpstreamUrl
from helix_runner.errors import RunnerError
from helix_runner.offline import Script, ScriptedApi, ScriptError
from helix_runner.phases.event_log import PhaseEventLog
from helix_runner.phases.queries import PhaseQueries
from helix_runner.phases.recovery import recover
from helix_runner.phases.retention import RetentionPolicy, RetentionSweeper
from helix_runner.phases.service import PhaseService
from helix_runner.phases.takeover import Takeover
from helix_runner.phases.webhook_dispatcher import DispatchSettings, WebhookDispatcher
from helix_runner.phases.webhooks import Webhooks
from helix_runner.process import git_worktree, secret_files
from helix_runner.process.child_env import CREDENTIAL_ENV, matches_any
from helix_runner.process.containment import MODE_NAMES, Containment, ContainmentError, detect, instance_id
from helix_runner.process.data_dir_lock import DataDirInUse, DataDirLock
from helix_runner.process.dumpable import make_undumpable
from helix_runner.process.key_broker import KeyBroker, KeySource
from helix_runner.process.sandbox.detect import SandboxBroken
from helix_runner.process.sandbox.phase_sandbox import Sandbox
from helix_runner.store.cluster import SINGLE_NODE, Cluster, ReplicaFeed
from helix_runner.store.factory import open_storage
from helix_runner.store.protocol import Store, StoreError, sweep_interval_seconds
from helix_runner.telemetry import Telemetry
from helix_runner.telemetry.tracing import TracingConfigError
from helix_runner.webhook_http.sender import SenderSettings, WebhookSender

log = logging.getLogger(__name__)

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
    store: Store
    service: PhaseService
    queries: PhaseQueries
    offline_api: ScriptedApi | None = None
    key_broker: KeyBroker | None = None
    retention_task: asyncio.Task | None = None
    web: WebServer | None = None
    telemetry: Telemetry | None = None
    takeover_task: asyncio.Task | None = None
    feed: ReplicaFeed | None = None  # a shared database: other replicas' live events
    forwarder: OwnerForwarder | None = None  # a shared database: calls routed to other replicas
    health_server: grpc.aio.Server | None = None  # the plaintext health-only port (health_port)
    health_port: int | None = None
    cluster: Cluster = SINGLE_NODE  # the replicas sharing the store (store/cluster.py)
    data_dir_lock: DataDirLock | None = None  # held for the server's life: one server per data dir
    egress: Egress | None = None  # the model-API gateway and the egress proxy (helix_runner/egress)
    webhook_dispatcher: WebhookDispatcher | None = None  # delivers the webhook outbox
    adopter_task: asyncio.Task | None = None  # claims phases other replicas released or lost (adoption.py)

    @property
    def egress_ports(self) -> tuple[int, ...]:
        """The host ports a phase may reach: the gateway's and the egress proxy's."""
        return self.egress.ports if self.egress is not None else ()

    async def drain(self, grace: float) -> None:
        """Stops accepting phases, gives running ones ``grace`` seconds, records the rest INTERRUPTED."""
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
        for task in (self.retention_task, self.takeover_task, self.adopter_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self.service.close()
        if self.webhook_dispatcher is not None:  # attempts in flight get a moment; the rest stay PENDING
            await self.webhook_dispatcher.stop(2.0)
        # Streams have delivered their final results by now; give them a moment to flush.
        if self.web is not None:
            await self.web.stop(1.0)
        await self.server.stop(1.0)
        if self.health_server is not None:
            await self.health_server.stop(None)
        self.service.writer.close()  # commits what is left, stops its thread (before the store closes)
        if self.feed is not None:
            await self.feed.stop()
        if self.forwarder is not None:
            await self.forwarder.close()
        self.store.close()
        if self.offline_api is not None:
            self.offline_api.stop()
        if self.key_broker is not None:
            await self.key_broker.stop()
        if self.egress is not None:
            await self.egress.stop()
        if self.telemetry is not None:  # telemetry: stop /metrics, flush spans
            await self.telemetry.stop()
        if self.data_dir_lock is not None:  # last: nothing of this server touches the data dir any more
            self.data_dir_lock.release()


@dataclass
class ChildCredentials:
    """What a phase's child gets for talking to the model and the network: env overrides, withheld
    variables, and the key broker or the gateway and egress proxy."""

    overrides: dict[str, str]
    withhold: tuple[str, ...] = ()
    key_broker: KeyBroker | None = None
    offline_api: ScriptedApi | None = None
    egress: Egress | None = None


def _start_offline_api(config: ServerConfig) -> ChildCredentials:
    """Offline mode: a scripted loopback Messages API the CLI talks to instead of Anthropic.

    The CLI's model is a script here, and whatever the CLI has, the script's tool calls can read:
    so the child inherits no credential at all (``CREDENTIAL_ENV``); its config dir is the
    phase's private one (process/sandbox/private_home.py), not the server user's ``~/.claude``.
    """
    try:
        script = Script.load(config.offline_script)
    except (OSError, ScriptError, ValueError) as exc:
        raise StartupError(f"cannot load offline script {config.offline_script}: {exc}") from None
    api = ScriptedApi(script).start()
    log.warning("offline mode: the CLI talks to a scripted Messages API, not Anthropic",
                extra={"fields": {"base_url": api.base_url, "script": str(config.offline_script)}})
    return ChildCredentials(
        overrides={
            "ANTHROPIC_BASE_URL": api.base_url,
            "ANTHROPIC_API_KEY": "offline-mode",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        },
        withhold=CREDENTIAL_ENV,
        offline_api=api,
    )


async def child_credentials(config: ServerConfig, server_env: dict[str, str]) -> ChildCredentials:
    """Decides how the CLI reaches the model and the network: through the gateway (the default, with
    a key or offline), the key helper, or the environment; and whether the egress proxy is its way out."""
    creds, key = await _model_credentials(config, server_env)
    gateway = None
    if config.api_gateway and (creds.offline_api is not None or key is not None):
        gateway = _gateway_settings(config, server_env, creds.offline_api, key)
    elif config.api_gateway:
        log.warning("api_gateway is on but the server has no API key (api_key_file, ANTHROPIC_API_KEY): the CLI "
                    "uses its own credentials (OAuth, Bedrock, Vertex) and reaches the API without the gateway")
    if gateway is None and not config.egress_proxy:
        return creds
    try:
        egress = await Egress(EgressSettings(
            gateway=gateway, proxy=ProxySettings(config.egress_proxy_port) if config.egress_proxy else None,
            policy=_egress_policy(config))).start()
    except OSError as exc:
        if creds.offline_api is not None:
            creds.offline_api.stop()
        raise StartupError(f"cannot start the API gateway or the egress proxy on 127.0.0.1: {exc.strerror or exc} "
                           "(is api_gateway_port or egress_proxy_port in use?)") from None
    creds.egress = egress
    if gateway is not None:
        # The phase holds no credential at all (its capability comes per phase): as offline mode.
        creds.withhold = tuple(dict.fromkeys((*creds.withhold, *CREDENTIAL_ENV)))
        creds.overrides = {k: v for k, v in creds.overrides.items() if k not in ("ANTHROPIC_BASE_URL",
                                                                               "ANTHROPIC_API_KEY")}
    creds.withhold = tuple(dict.fromkeys((*creds.withhold, *egress.withheld_env)))
    creds.overrides.update(egress.static_env())
    return creds


async def _model_credentials(config: ServerConfig, server_env: dict[str, str]) -> tuple[ChildCredentials, object]:
    """Without the gateway's part: offline, key helper (the default with a key), the environment, or
    nothing; and the key source (None without a key)."""
    if config.offline_script is not None:
        return _start_offline_api(config), None
    env_key = server_env.get("ANTHROPIC_API_KEY") if matches_any("ANTHROPIC_API_KEY", config.inherit_env) else None
    if config.api_key_file is not None:
        source = KeySource(path=config.api_key_file)
    elif env_key:
        source = KeySource(value=env_key)
    else:  # no API key: OAuth, Bedrock, Vertex or a proxy token, passed as configured
        return ChildCredentials({}), None
    try:
        key = source.read()
    except (OSError, ValueError) as exc:
        raise StartupError(f"cannot read the API key from {source.describe()}: {exc}") from None
    if config.api_gateway:  # the gateway adds the key; it never reaches the phase
        log.info("API gateway: the CLI holds a per-phase capability; the server adds the API key",
                 extra={"fields": {"source": source.describe()}})
        return ChildCredentials({}), source
    if not config.api_key_helper:
        log.warning("the API key is in every phase's environment: any command the model runs can read it "
                    "(api_gateway = true or api_key_helper = true keeps it out)")
        return ChildCredentials({"ANTHROPIC_API_KEY": key}), source
    broker = await KeyBroker(source).start()
    log.info("key-helper mode: the CLI asks the server for the API key; it is not in the phase's environment",
             extra={"fields": {"source": source.describe(), "socket": str(broker.socket_path)}})
    return ChildCredentials({}, withhold=("ANTHROPIC_API_KEY",), key_broker=broker), source


def _gateway_settings(config: ServerConfig, server_env: dict[str, str], offline_api: ScriptedApi | None,
                      source) -> GatewaySettings:
    """Where the gateway forwards: offline mode's scripted API, ``api_upstream_url``, the server's own
    ``ANTHROPIC_BASE_URL``, or the Anthropic API."""
    if offline_api is not None:
        url, key = offline_api.base_url, (lambda: "offline-mode")
    else:
        url = config.api_upstream_url or server_env.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com"
        key = source.read
    try:
        upstream = UpstreamUrl.parse(url)
    except ValueError as exc:
        raise StartupError(f"the API gateway's upstream: {exc}") from None
    return GatewaySettings(upstream, key, ca_file=config.api_upstream_ca_file, port=config.api_gateway_port)


def _egress_policy(config: ServerConfig) -> EgressPolicy:
    """The server's part of every phase's egress policy (the config validated each entry)."""
    ports = frozenset(config.egress_allowed_ports)
    return EgressPolicy(allowlist=tuple(parse_pattern(e, ports) for e in config.egress_allowlist), ports=ports,
                        exceptions=OperatorExceptions.parse(config.egress_private_allow))


def _detect_containment(config: ServerConfig) -> Containment:
    """The containment of phases (process/containment.py), logged with what it can and cannot do."""
    try:
        containment = detect(config.containment, config.cgroup_parent, instance_id(config.data_dir))
    except ContainmentError as exc:
        raise StartupError(f"phase containment: {exc}") from None
    # One short line (it comes first, also before any start-up error); the cgroup paths and the
    # reasons a cgroup was not usable are the detail: debug, or a warning when auto fell back.
    fields = {"mode": MODE_NAMES[containment.mode], "limits": list(containment.limits_available)}
    log.info("containment", extra={"fields": fields})
    if fields["mode"] == "subreaper" and config.containment == "auto":
        log.warning("no usable cgroup: phases are contained by a subreaper shim, without memory or cpu limits",
                    extra={"fields": {"detail": containment.detail}})
    else:
        log.debug("containment detail", extra={"fields": {"setting": config.containment,
                                                           "detail": containment.detail}})
    for name, value in (("memory", config.default_memory_limit_bytes), ("cpu", config.default_cpu_limit_millicores)):
        if value and name not in containment.limits_available:
            log.warning("default limit not enforced: no cgroup with this controller",
                        extra={"fields": {"limit": name, "value": value}})
    return containment


OTLP_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                  "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT")


def egress_ports(config: ServerConfig, server_env: dict[str, str],
                 creds: ChildCredentials) -> tuple[tuple[int, ...] | None, str]:
    """The host loopback ports a phase must reach (the gateway's and the egress proxy's; with the
    gateway off, the model API's and a loopback proxy's), or None with the reason when the model API
    is not on this host: then no network layer can confine a phase."""
    def inherited(name: str) -> str:
        if name in creds.overrides:
            return creds.overrides[name]
        return server_env.get(name, "") if matches_any(name, config.inherit_env) else ""

    # The gateway and the proxy (helix_runner/egress): the phase's ANTHROPIC_BASE_URL and HTTP(S)_PROXY.
    ports: list[int] = list(creds.egress.ports) if creds.egress is not None else []
    base = inherited("ANTHROPIC_BASE_URL")
    if not base:
        return None, ("the CLI reaches the model API (api.anthropic.com) directly: no network layer can confine a "
                      "phase that must reach the internet (no model gateway on this server)")
    port = _loopback_port(base)
    if port is None:
        return None, f"the model API ({base}) is not on this host's loopback: no network layer can confine a phase"
    ports.append(port)
    # A loopback proxy, and the collector the CLI exports its own telemetry to (OTEL_* the
    # operator lets it inherit): a phase reaches those too. Off this host they stay unreachable.
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", *OTLP_ENDPOINTS):
        if (url := inherited(name)) and (port := _loopback_port(url)) is not None:
            ports.append(port)
    return tuple(dict.fromkeys(ports)), ""


def _loopback_port(url: str) -> int | None:
    """The port of an http(s) URL on a loopback address, else None."""
    import ipaddress
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    if host == "localhost":
        return port
    try:
        return port if ipaddress.ip_address(host).is_loopback else None
    except ValueError:
        return None


def _warn_about_phase_limits(config: ServerConfig, containment: Containment, sandbox: Sandbox | None) -> None:
    """Logs what this host leaves unenforced of the per-phase limits and of the file layer."""
    if config.default_pids_limit and "pids" not in containment.limits_available and not (
            sandbox is not None and sandbox.enforces_nproc):
        log.warning("default limit not enforced: no pids cgroup and no user namespace per phase",
                    extra={"fields": {"limit": "pids", "value": config.default_pids_limit}})
    if sandbox is not None and sandbox.on and not sandbox.layers.bwrap and sandbox.layers.landlock_abi:
        holding = [str(r) for r in config.workspace_roots if config.data_dir.resolve().is_relative_to(r)]
        if holding:  # Landlock cannot hide it inside an allowed directory: phases there are refused
            log.warning("the data dir lies inside a workspace root: without bubblewrap, a phase whose directory "
                        "holds it is refused (SANDBOX_WORKDIR_UNREACHABLE); keep the data dir outside the roots",
                        extra={"fields": {"data_dir": str(config.data_dir), "roots": holding}})


def _start_sandbox(config: ServerConfig, server_env: dict[str, str], creds: ChildCredentials,
                   key_broker: KeyBroker | None) -> Sandbox | None:
    """The per-phase sandbox (process/sandbox/), detected and probed once; None when it is off and
    the phases need no private home either (offline mode always gets one)."""
    if config.sandbox == "off" and creds.offline_api is None:
        log.warning("sandbox", extra={"fields": {"setting": "off", "layers": "none: every phase runs with the "
                                                 "server's view of files, processes and network"}})
        return None
    ports, note = egress_ports(config, server_env, creds)
    hidden = [p for p in (config.auth_token_file, config.tls_cert_file, config.tls_key_file, config.tls_client_ca_file,
                          config.api_key_file) if p is not None]
    try:
        return Sandbox.start(config.sandbox, data_dir=config.data_dir, skip=config.sandbox_skip_layers,
                             egress_ports=ports, egress_note=note, template=config.sandbox_home_template,
                             read_paths=config.sandbox_read_paths, hidden=hidden,
                             required_layers=config.sandbox_required_layers, tmp_max_bytes=config.phase_tmp_max_bytes,
                             transcripts_max_bytes=config.phase_output_max_bytes)
    except OSError as exc:
        raise StartupError(f"cannot set up the phase sandbox: {exc.strerror or exc}") from None
    except SandboxBroken as exc:  # sandbox = auto degrades only layers the host lacks
        raise StartupError(f"cannot set up the phase sandbox: {exc}") from None


async def start_server(config: ServerConfig, *, server_env: dict[str, str] | None = None,
                       telemetry: Telemetry | None = None) -> RunningServer:
    """Opens the store, recovers phases a previous process left active, binds the port, serves.

    ``telemetry`` defaults to what the config and the ``OTEL_*`` environment ask for.
    """
    server_env = dict(os.environ if server_env is None else server_env)
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
    # Before anything reads or cleans the data dir or this instance's cgroups: a second server on it
    # would take the first one's running phases for a crash's leftovers (process/data_dir_lock.py).
    try:
        lock = DataDirLock.acquire(config.data_dir)
    except DataDirInUse as exc:
        raise StartupError(str(exc)) from None
    except OSError as exc:
        raise StartupError(f"cannot lock the data directory {config.data_dir}: {exc.strerror}") from None
    try:
        storage = open_storage(config.database, replica_id=config.replica_id or None,
                               lease_seconds=config.replica_lease_seconds)
    except StoreError as exc:  # carries a one-line message
        lock.release()
        raise StartupError(str(exc)) from None
    store, cluster = storage.store, storage.cluster
    if store.migrated_from:
        log.info("database schema migrated", extra={"fields": {"from": store.migrated_from, "path": str(config.db_path)}})
    filled = store.backfill_tool_call_durations(tool_call_duration_ns)  # once, after the migration to version 2
    if filled:
        log.info("tool-call durations filled in for the statistics", extra={"fields": {"count": filled}})

    try:
        token = config.read_auth_token()
    except ConfigError as exc:
        store.close()
        lock.release()
        raise StartupError(str(exc)) from None
    if token is not None and is_digest(token) and cluster.shared:
        store.close()
        lock.release()
        raise StartupError("auth_token_file holds the token's sha256 digest, but replicas on a shared database "
                           "call each other with the token itself: give them the token")
    # Watchers here of phases other replicas run follow them by LISTEN/NOTIFY (docs/scale-out.md).
    try:
        feed = await _start_feed(cluster, store)
    except StartupError:
        lock.release()
        raise

    interceptors: list[grpc.aio.ServerInterceptor] = [telemetry.interceptor()]  # telemetry: outermost
    if token is not None:
        interceptors.append(BearerTokenInterceptor(token))
    server = grpc.aio.server(
        interceptors=interceptors,
        options=[
            # Idle watch streams behind proxies need keepalive pings to stay up.
            ("grpc.keepalive_time_ms", 60_000),
            ("grpc.http2.min_ping_interval_without_data_ms", 30_000),
            # Off unless configured: a second server on a busy port must fail, not share it silently.
            ("grpc.so_reuseport", 1 if config.reuse_port else 0),
        ],
    )
    # What a start that fails half-way must undo, newest first; emptied once nothing can fail.
    undo = contextlib.AsyncExitStack()
    undo.callback(lock.release)
    undo.push_async_callback(_close, store, feed)
    # The first price lookup loads genai-prices' table (~0.7 s); pay it here, not in a phase's hot path.
    await asyncio.get_running_loop().run_in_executor(None, pricing.preload)
    try:
        containment = _detect_containment(config)
        creds = await child_credentials(config, server_env)
    except StartupError:
        await undo.aclose()
        raise
    if creds.offline_api is not None:
        undo.callback(creds.offline_api.stop)
    if creds.key_broker is not None:
        undo.push_async_callback(creds.key_broker.stop)
    if creds.egress is not None:
        undo.push_async_callback(creds.egress.stop)
    try:  # the sandbox's network layer lets a phase reach only the gateway's and the proxy's ports
        sandbox = await asyncio.to_thread(_start_sandbox, config, server_env, creds, creds.key_broker)
        _warn_about_phase_limits(config, containment, sandbox)
        # Webhook subscriptions: the config file's replace those it stored before (phases/webhooks.py).
        webhooks = _webhooks(config, store)
    except StartupError:
        await undo.aclose()
        raise
    service = PhaseService(config, store, ProtoRecordEncoder(), containment, server_env=server_env,
                           env_overrides=creds.overrides, env_withhold=creds.withhold, key_broker=creds.key_broker,
                           telemetry=telemetry, cluster=cluster, egress=creds.egress, sandbox=sandbox,
                           webhooks=webhooks)
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
    if feed is not None:
        service.follower = feed.follow
        feed.on_admission_change(service.admission.wake)  # another replica freed a cluster slot, or it is our turn
        if service.adopter is not None:  # a phase released by a draining replica (or a freed slot): claim it
            feed.on_admission_change(service.adopter.wake)
    queries = PhaseQueries(store, service.get_live, view_cache_jobs=config.read_cache_jobs)
    try:
        tls_files = _tls_files(config)
    except StartupError:
        await undo.aclose()
        raise
    forwarding_tls = None if tls_files is None else ForwardingCredentials(tls_files, config.tls_server_name)
    forwarder = OwnerForwarder(token, forwarding_tls) if cluster.shared else None
    servicer = RunnerServicer(service, queries, forwarder)
    add_runner_service(servicer, server)

    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )

    web_socket = None
    if config.web_port is not None:
        try:  # bound before the gRPC port: a failure here leaves nothing half-started
            web_socket = bind_web(config.web_host, config.web_port)
        except OSError as exc:
            await undo.aclose()
            raise StartupError(f"cannot serve the dashboard on {config.web_host}:{config.web_port}: "
                               f"{exc.strerror or exc} (is the port already in use?)") from None
        undo.callback(web_socket.close)
    # TLS, or mutual TLS with a client CA, on every gRPC port; files re-read on change (api/tls.py).
    credentials = None if tls_files is None else tls_files.server_credentials()

    def add_port(at: str) -> int:
        return server.add_insecure_port(at) if credentials is None else server.add_secure_port(at, credentials)

    address = _listen_address(config.host, config.port)
    try:
        port = add_port(address)
    except RuntimeError as exc:
        await undo.aclose()
        raise StartupError(f"cannot listen on {address}: {exc} (is the port already in use?)") from None
    if port == 0:
        await undo.aclose()
        raise StartupError(f"cannot listen on {address}: the port is already in use or the address is invalid")
    undo.push_async_callback(server.stop, None)
    health_server, health_port = None, None
    if config.health_port is not None:
        health_server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, health_server)
        health_address = _listen_address(config.host, config.health_port)
        try:
            health_port = health_server.add_insecure_port(health_address)
        except RuntimeError:
            health_port = 0
        if health_port == 0:
            await undo.aclose()
            raise StartupError(f"cannot serve health checks on {health_address}: the port is already in use "
                               "or the address is invalid")
        undo.push_async_callback(health_server.stop, None)
    own_port = port
    if config.reuse_port and forwarder is not None and not config.advertise_address:
        # The shared port reaches any process on it; forwarded control must reach this one, over
        # the same credentials as the shared port.
        own_port = add_port(_listen_address(config.host, 0))
    try:  # telemetry: /metrics and the event-loop lag probe
        await telemetry.start()
    except OSError as exc:
        await undo.aclose()
        raise StartupError(f"cannot serve metrics on {config.metrics_host}:{config.metrics_port}: "
                           f"{exc.strerror or exc}") from None
    if telemetry.metrics_port is not None and not config.metrics_is_loopback:
        # /metrics takes no token (Prometheus' convention; README "Observability"): say so where it shows.
        log.warning("/metrics is served without authentication on a non-loopback address: whoever reaches it "
                    "reads the counters, costs and tool, model and project names (no job or phase id, no "
                    "secret); restrict the port with a firewall or network policy, or keep metrics_host on "
                    "loopback", extra={"fields": {"address": f"{config.metrics_host}:{telemetry.metrics_port}"}})
    if creds.egress is not None:  # the proxy never connects a phase to one of the server's own ports
        creds.egress.own_ports([port, own_port, health_port or 0, telemetry.metrics_port or 0,
                                web_socket.getsockname()[1] if web_socket is not None else 0])
    undo.pop_all()  # from here on the running server owns all of it (its drain stops it)
    await server.start()
    if health_server is not None:
        await health_server.start()
    if forwarder is not None:  # other replicas forward control of this one's phases here
        cluster.advertise(config.advertise_address or _bound_address(config.host, own_port))
        # Placement by free slots: how many phases this replica takes (api/placement.py).
        cluster.advertise_capacity(service.admission.queue.limits.max_running)
    # The dashboard: the same servicer over Connect, plus the page (api/web.py).
    web = None if web_socket is None else await start_web(servicer, host=config.web_host, token=token,
                                                          sock=web_socket, tls=tls_files, grpc_port=port)
    for name in ("", LIVENESS, READINESS, SERVICE_NAME):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    # What start-up built (modules, descriptors, the gRPC server) lives as long as the process: out of
    # the collector's reach, a full collection no longer walks it. Each one paused the event loop, and
    # every live stream, for ~40-60 ms (benchmarks/README.md, fan-out).
    gc.freeze()
    log.info(
        "serving",
        extra={"fields": {"address": f"{config.host}:{port}", "data_dir": str(config.data_dir),
                          "workspace_roots": [str(r) for r in config.workspace_roots],
                          "auth": token is not None, "tls": _tls_mode(config), "health_port": health_port}},
    )
    policy = RetentionPolicy(config.retention_days * 86400, config.recordings_max_bytes,
                             config.retention_interval_seconds)
    retention_task = None
    if policy.enabled:
        sweeper = RetentionSweeper(store, config.recordings_dir, policy, shared=cluster.shared)
        retention_task = asyncio.create_task(sweeper.run(), name="retention")
    takeover_task = None if takeover is None else asyncio.create_task(takeover.run(), name="takeover")
    adopter_task = None
    if takeover is not None and service.adopter is not None:  # hand-over (docs/scale-out.md "Hand-over")
        loop = asyncio.get_running_loop()
        service.sweep_now = lambda: loop.run_in_executor(None, takeover.sweep) and None
        adopter_task = asyncio.create_task(
            service.adopter.run(sweep_interval_seconds(config.replica_lease_seconds)), name="adopter")
    # Webhook deliveries: woken by every group commit that wrote outbox rows (phases/webhook_dispatcher.py).
    dispatcher = _webhook_dispatcher(config, store, webhooks, cluster).start()
    service.writer.on_outbox = dispatcher.wake
    try:  # once nothing can fail the start any more (its processes end at drain)
        service.start_warm_pool()
    except RunnerError as exc:  # the server still serves; every phase then starts cold
        log.error("warm pool not started", extra={"fields": {"error": exc.message}})
    if web is not None:
        log.info("dashboard", extra={"fields": {"url": web.url}})
        # Logs are for machines; this line (stdout) is for the person who just started the server.
        print(f"Dashboard: {web.url}", flush=True)
    return RunningServer(server, health_servicer, port, store, service, queries, creds.offline_api,
                         creds.key_broker, retention_task, web, telemetry, takeover_task, feed, forwarder,
                         health_server, health_port, cluster, lock, creds.egress, dispatcher,
                         adopter_task=adopter_task)


def _webhooks(config: ServerConfig, store: Store) -> Webhooks:
    """The subscriptions, with the config file's loaded into the store (StartupError naming a bad one)."""
    webhooks = Webhooks(store, exceptions=OperatorExceptions.parse(config.webhook_private_allow),
                        dashboard_url=config.dashboard_url)
    try:
        webhooks.load_config(webhook_specs(config))
    except ConfigError as exc:
        raise StartupError(str(exc)) from None
    except RunnerError as exc:
        raise StartupError(f"webhooks: {exc.message}") from None
    return webhooks


def _webhook_dispatcher(config: ServerConfig, store: Store, webhooks: Webhooks, cluster: Cluster) -> WebhookDispatcher:
    """The delivery loop and its HTTP client (webhook_http/sender.py), as configured."""
    sender = WebhookSender(SenderSettings(
        timeout_s=config.webhook_timeout_seconds, connect_timeout_s=min(5.0, config.webhook_timeout_seconds),
        max_response_bytes=config.webhook_max_response_bytes, exceptions=webhooks.exceptions,
        ca_file=config.webhook_ca_file))
    settings = DispatchSettings(schedule=webhook_schedule(config), lease_s=config.webhook_timeout_seconds + 20,
                                owner=cluster.replica_id or "local")
    return WebhookDispatcher(store, webhooks, sender, settings, shared=cluster.shared)


def _listen_address(host: str, port: int) -> str:
    return f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"


def _tls_files(config: ServerConfig) -> CertificateFiles | None:
    """The gRPC port's TLS files (None: plaintext); the config checked them, this reads them."""
    if config.tls_cert_file is None or config.tls_key_file is None:
        return None
    try:
        return CertificateFiles(config.tls_cert_file, config.tls_key_file, config.tls_client_ca_file)
    except (OSError, ValueError) as exc:  # changed since the config was validated
        raise StartupError(f"cannot load the TLS certificate {config.tls_cert_file}: {exc}") from None


def _tls_mode(config: ServerConfig) -> str:
    return "mutual" if config.mutual_tls else "on" if config.tls else "off"


def _bound_address(host: str, port: int) -> str:
    """host:port as other replicas dial it; a wildcard host is replaced by this machine's name."""
    if host in ("0.0.0.0", "::", ""):
        host = socket.getfqdn()
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def _start_feed(cluster: Cluster, store: Store) -> ReplicaFeed | None:
    """The replica's news from the others (one LISTEN connection), None alone; a database that does
    not answer within 10 s stops the start."""
    feed = cluster.feed()
    if feed is None:
        return None
    try:
        return await asyncio.wait_for(feed.start(), 10.0)
    except TimeoutError:
        await feed.stop()
        store.close()
        raise StartupError("cannot LISTEN for events on the PostgreSQL database (no connection within 10 s)") from None


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


async def _close(store: Store, feed: ReplicaFeed | None) -> None:
    """A start that failed half-way: the LISTEN connection, then the store."""
    if feed is not None:
        await feed.stop()
    store.close()
