"""How a phase's CLI reaches the model and the network ([gateway], [egress]): offline mode's scripted
API, the key broker, or the model-API gateway and the egress proxy; what the child's environment
gets and withholds for it; and the host ports a phase must reach through them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from helix_runner.config import ServerConfig
from helix_runner.domain.addresses import OperatorExceptions
from helix_runner.egress.allowlist import EgressPolicy, parse_pattern
from helix_runner.egress.gateway import GatewaySettings
from helix_runner.egress.proxy import ProxySettings
from helix_runner.egress.service import Egress, EgressSettings
from helix_runner.egress.upstream import UpstreamUrl
from helix_runner.egress.vault import Vault, VaultKeyError
from helix_runner.offline import Script, ScriptedApi, ScriptError
from helix_runner.process.child_env import CREDENTIAL_ENV, matches_any
from helix_runner.process.key_broker import KeyBroker, KeySource
from helix_runner.server.lifecycle import StartupError

log = logging.getLogger(__name__)


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
        vault = Vault.load(config.vault_key_file, server_env, config.data_dir) if config.egress_proxy else None
        egress = await Egress(EgressSettings(
            gateway=gateway, proxy=ProxySettings(
                config.egress_proxy_port, max_connections_per_phase=config.egress_max_connections_per_phase,
                max_bytes_per_phase=config.egress_max_bytes_per_phase) if config.egress_proxy else None,
            policy=_egress_policy(config), ca_dir=config.data_dir / "egress",
            upstream_ca_file=config.egress_upstream_ca_file, vault=vault)).start()
    except (VaultKeyError, ValueError) as exc:  # a vault key or a kept CA that cannot be used
        if creds.offline_api is not None:
            creds.offline_api.stop()
        raise StartupError(f"cannot start the egress proxy: {exc}") from None
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


class ModelAccess:
    """The part that owns [gateway] and [egress]: started before the phases need it, stopped after
    the last phase ended (the scripted API, then the key broker, then the gateway and proxy)."""

    name = "model access"

    def __init__(self, config: ServerConfig, server_env: dict[str, str]):
        self.config = config
        self.server_env = server_env
        self.creds = ChildCredentials({})

    async def start(self) -> None:
        self.creds = await child_credentials(self.config, self.server_env)

    async def stop(self) -> None:
        if self.creds.offline_api is not None:
            self.creds.offline_api.stop()
        if self.creds.key_broker is not None:
            await self.creds.key_broker.stop()
        if self.creds.egress is not None:
            await self.creds.egress.stop()
