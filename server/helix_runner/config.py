"""Server configuration: defaults < TOML file < ``HELIX_RUNNER_*`` environment < command-line flags.

Every value is validated here, once, so the rest of the server can trust it; a bad value raises
``ConfigError`` whose message is a single line meant for a person.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import ssl
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from helix_runner.config_file import SECTION_OF, TOP_LEVEL, ConfigFileError, flatten
from helix_runner.domain.addresses import OperatorExceptions
from helix_runner.domain.api_features import validate_names
from helix_runner.domain.phase_spec import (
    MAX_CPU_LIMIT_MILLICORES,
    MAX_PIDS_LIMIT,
    MIN_CPU_LIMIT_MILLICORES,
    MIN_MEMORY_LIMIT_BYTES,
    MIN_PIDS_LIMIT,
    MIN_WORKSPACE_MAX_BYTES,
)
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.pricing import ModelPrice
from helix_runner.domain.retry_policy import RetryPolicy
from helix_runner.domain.webhooks import (
    RetrySchedule,
    WebhookEvent,
    WebhookFormat,
    WebhookSpec,
    check_subscription,
)
from helix_runner.egress.allowlist import parse_pattern
from helix_runner.egress.upstream import UpstreamUrl
from helix_runner.errors import RunnerError
from helix_runner.store.database_url import DatabaseUrl, default_database_url, parse_database_url
from helix_runner.store.protocol import (
    DEFAULT_LEASE_SECONDS,
    MAX_LEASE_SECONDS,
    MIN_LEASE_SECONDS,
    TAKEOVER_BOUND_SECONDS,
)
from helix_runner.webhook_http.target import WebhookUrl

ENV_PREFIX = "HELIX_RUNNER_"

# Variables the child CLI may inherit from the server's environment (exact names or prefixes
# ending in `*`). Everything else is dropped: the child's environment is composed, not inherited.
DEFAULT_INHERIT_ENV = (
    "ANTHROPIC_*",
    "CLAUDE_CODE_*",
    "CLAUDE_CONFIG_DIR",
    "AWS_*",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "CLOUD_ML_REGION",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_*",
    "TZ",
    "TERM",
    "TMPDIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "IS_SANDBOX",
)

# Variables a RunPhase request may set (PhaseOptions.env). Anything else is INVALID_ARGUMENT.
DEFAULT_REQUEST_ENV_ALLOWLIST = (
    "CLAUDE_CODE_MAX_OUTPUT_TOKENS",
    "CLAUDE_CODE_MAX_RETRIES",
    "MAX_THINKING_TOKENS",
    "BASH_DEFAULT_TIMEOUT_MS",
    "BASH_MAX_TIMEOUT_MS",
    "HELIX_*",
)

LOG_LEVELS = ("debug", "info", "warning", "error")
# How phases are contained (process/containment.py): auto picks cgroup v2, then the v1 freezer, then the shim.
CONTAINMENT_SETTINGS = ("auto", "cgroup", "cgroup-v2", "cgroup-v1", "subreaper")
# The per-phase sandbox (process/sandbox/): auto uses every layer the host allows, required refuses
# phases while one is missing, off runs phases with the server's view of everything.
SANDBOX_SETTINGS = ("auto", "required", "off")
SANDBOX_LAYERS = ("namespaces", "network", "landlock", "seccomp")
_CGROUP_PARENT = re.compile(r"^/?[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")
# An auth token file holding "sha256:<hex>" holds the token's digest (api.auth compares it).
TOKEN_DIGEST_PREFIX = "sha256:"
_SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")
_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]i?)?B?\s*$", re.IGNORECASE)
_ADVERTISE = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]{1,253}):[0-9]{1,5}$")
_REPLICA_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_PROJECT_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_MODEL_PATTERN = re.compile(r"^[A-Za-z0-9_.:@/\[\]*-]{1,200}$")
# auto: human-readable lines when stderr is a terminal, JSON otherwise (structured_logging.py).
LOG_FORMATS = ("auto", "json", "text")
TRACING_MODES = ("auto", "on", "off")


class ConfigError(ValueError):
    """A configuration value is invalid; the message is one line for a person."""


@dataclass(frozen=True)
class ServerConfig:
    """Everything the server needs to start; see README "Configuration" for each key."""

    host: str = "127.0.0.1"
    port: int = 50051
    data_dir: Path = field(default_factory=lambda: _default_data_dir())
    # The store: sqlite:///absolute/path (default: helix-runner.sqlite3 in data_dir) or
    # postgresql://host/database for replicas sharing one database (docs/scale-out.md).
    database_url: str = ""
    # With PostgreSQL: this replica's stable name (e.g. a StatefulSet pod's); a restart under the same
    # name takes over its predecessor's phases at once. Empty: a new random id per start.
    replica_id: str = ""
    # With PostgreSQL: host:port other replicas forward this one's control RPCs to (empty: the
    # address it bound, host:port).
    advertise_address: str = ""
    # With PostgreSQL: seconds a replica's lease lasts without a heartbeat (renewed every third of
    # it); other replicas sweep every third of it too, so a dead replica's phases are INTERRUPTED
    # within lease + lease / 3 of its last heartbeat (docs/scale-out.md, "Dead-replica takeover").
    replica_lease_seconds: float = DEFAULT_LEASE_SECONDS
    # N server processes on one host sharing one port (SO_REUSEPORT; the kernel spreads
    # connections over them). Each process then also listens on a port of its own, which it
    # advertises for forwarded control RPCs (docs/scale-out.md, "N processes on one host"). Off: a
    # busy port stops the start.
    reuse_port: bool = False
    workspace_roots: tuple[Path, ...] = ()
    claude_path: str | None = None
    auth_token_file: Path | None = None
    # Named tokens (as digests), client-certificate subjects and JWT rules, each with its grants
    # per project (docs/tenancy.md); the auth_token_file's token stays the admin.
    auth_principals_file: Path | None = None
    log_level: str = "info"
    log_format: str = "auto"
    # Seconds running phases get to finish after SIGTERM before they are killed and recorded
    # INTERRUPTED.
    drain_grace_seconds: float = 10.0
    # With PostgreSQL: how long a drain waits for a running phase's next tool boundary before it
    # stops the CLI anyway and hands the phase over to another replica (docs/scale-out.md "Hand-over").
    # Within drain_grace_seconds, which is the drain's whole budget.
    handover_wait_seconds: float = 30.0
    max_concurrent_phases: int = 64
    # Admission (docs/retries-and-admission.md §5): phases beyond these limits wait QUEUED; only a
    # full queue refuses (QUEUE_FULL). max_running_phases 0 = max_concurrent_phases; per-project 0 = none.
    max_running_phases: int = 0
    max_running_phases_per_project: int = 0
    max_starting_phases: int = 4
    max_queued_phases: int = 1000
    max_queued_phases_per_project: int = 0
    # Cluster admission (docs/scale-out.md "Cluster admission"; PostgreSQL only, ignored on SQLite):
    # limits that hold for all replicas on one database together, kept in it; 0 = none. With all
    # three 0 each replica admits on its own limits alone.
    cluster_max_running_phases: int = 0
    cluster_max_running_phases_per_project: int = 0
    cluster_max_queued_phases: int = 0
    # Placement by free slots (docs/scale-out.md, same section; PostgreSQL only): a RunPhase this
    # replica would queue for its own max_running_phases goes to the live replica with the most
    # room, which runs and streams it through this one. Off: a phase always waits where it landed.
    place_on_free_replica: bool = True
    # Starting phases fast and smoothly (benchmarks/README.md, P3 and P6): refuse new phases
    # (RESOURCE_EXHAUSTED QUEUE_FULL, scope event_loop) while the event loop runs more than this
    # late (ms; 0 = never); start the CLI's shim from a worker thread (false: on the event loop, the
    # old way, kept as a baseline).
    admission_max_loop_lag_ms: float = 0.0
    spawn_off_loop: bool = True
    # Warm starts (opt-in; process/warm_pool.py): {size, working_dir, options}: `size` CLI processes
    # started ahead as a RunPhase with this working_dir and these PhaseOptions (PhaseSpec field
    # names, e.g. model, allowed_tools, env) would be; a phase that matches exactly starts on one.
    warm_pool: Mapping[str, Any] = field(default_factory=dict)
    # The default retry policy of phases whose request leaves PhaseOptions.retry unset (§2);
    # retry_max_attempts 1 turns retries off. An empty continuation prompt means the built-in one.
    retry_max_attempts: int = 3
    retry_initial_backoff_seconds: float = 2.0
    retry_backoff_multiplier: float = 2.0
    retry_max_backoff_seconds: float = 60.0
    retry_continuation_prompt: str = ""
    default_phase_timeout_seconds: float = 3600.0
    default_idle_timeout_seconds: float = 600.0
    # How long a process may linger after its final result and stdout EOF before it is killed.
    exit_grace_seconds: float = 10.0
    max_line_bytes: int = 64 * 1024 * 1024
    # Job views the read model keeps for GetJob / ListJobs, each valid until its job is written
    # (phases/queries.py JobViewCache); 0 turns the cache off.
    read_cache_jobs: int = 4096
    inherit_env: tuple[str, ...] = DEFAULT_INHERIT_ENV
    request_env_allowlist: tuple[str, ...] = DEFAULT_REQUEST_ENV_ALLOWLIST
    # Prepended to the child's PATH (e.g. a project virtualenv's bin) so tools like pytest resolve.
    path_prefix: tuple[Path, ...] = ()
    # Commands that must resolve on the child's PATH before a phase starts (preflight).
    required_commands: tuple[str, ...] = ()
    allow_bypass_permissions: bool = False
    # Offline mode: a scripted Messages API script (JSON) the CLI is pointed at instead of Anthropic.
    offline_script: Path | None = None
    # The Anthropic API key, one line in a file (re-read on each use); else the server's ANTHROPIC_API_KEY.
    api_key_file: Path | None = None
    # Key-helper mode: the CLI gets the key from the server through its apiKeyHelper setting, so it
    # never enters the child's environment; off = the child inherits ANTHROPIC_API_KEY (every
    # command the model runs can read it).
    api_key_helper: bool = True
    # The model-API gateway (helix_runner/egress): the CLI's ANTHROPIC_BASE_URL on 127.0.0.1, which
    # forwards its requests with the real key; the phase holds only a per-phase capability. Off: the
    # key reaches the phase as before (key-helper mode or its environment).
    api_gateway: bool = True
    api_gateway_port: int = 0  # 0: an ephemeral port
    # Where the gateway forwards to; empty: the server's own ANTHROPIC_BASE_URL, else the Anthropic API.
    api_upstream_url: str = ""
    # A PEM CA bundle to verify the upstream's certificate with instead of the system's roots.
    api_upstream_ca_file: Path | None = None
    # Models each project may use ({"project": ["claude-sonnet-4-5*", ...], "*": [...] for the rest});
    # empty: any model. Enforced by the gateway.
    model_allowlist: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # API features that reach out (domain/api_features.py) every phase may use; a request adds its own.
    api_features_allow: tuple[str, ...] = ()
    # The egress proxy: the phases' HTTP(S)_PROXY, on 127.0.0.1, allowing only egress_allowlist
    # (plus what a request adds) on egress_allowed_ports, never a private, loopback or link-local
    # address unless egress_private_allow names that host:port.
    egress_proxy: bool = True
    egress_proxy_port: int = 0  # 0: an ephemeral port
    egress_allowlist: tuple[str, ...] = ()
    egress_allowed_ports: tuple[int, ...] = (80, 443)
    egress_private_allow: tuple[str, ...] = ()
    # TLS termination for hosts a phase has vault secrets or HTTP rules for (docs/network.md): the
    # upstream is verified against the system's roots and this CA file (internal hosts); the vault's
    # AES-GCM key (base64 of 32 bytes) comes from vault_key_file, else HELIX_RUNNER_VAULT_KEY, else a
    # key made in the data dir. Each phase may hold egress_max_connections_per_phase proxied
    # connections at once and move egress_max_bytes_per_phase bytes (both ways, 0: no cap) in all.
    egress_upstream_ca_file: Path | None = None
    vault_key_file: Path | None = None
    egress_max_connections_per_phase: int = 128
    egress_max_bytes_per_phase: int = 0
    # How long a request a network breakpoint holds waits for a decision before it is denied.
    egress_hold_timeout_seconds: float = 300.0
    # Retention (0 = keep forever): jobs whose phases all finished and that were untouched this many
    # days are deleted with their rows and recordings; the oldest finished phases' recordings are
    # deleted while all recordings exceed recordings_max_bytes. Swept every retention_interval_seconds.
    retention_days: float = 0.0
    recordings_max_bytes: int = 0
    retention_interval_seconds: float = 3600.0
    # Per-model USD prices per million tokens for models the price table does not know (or to
    # correct it): {"model-id": {"input_per_mtok": 3, "output_per_mtok": 15, ...}}.
    price_overrides: Mapping[str, ModelPrice] = field(default_factory=dict)
    # The dashboard's HTTP port (web page + RunnerService over Connect); None: off, 0: a free port.
    web_port: int | None = None
    web_host: str = "127.0.0.1"
    # Phase containment: auto | cgroup | cgroup-v2 | cgroup-v1 | subreaper (forces the fallback).
    containment: str = "auto"
    # Where phase cgroups go in each hierarchy: relative to the server's own cgroup, or absolute.
    cgroup_parent: str = "helix-runner"
    # The per-phase sandbox (README "Sandbox"): auto | required | off; the template a phase's private
    # HOME is copied from (None: empty); more read-only paths phases see (runtimes outside the
    # system directories); layers turned off (namespaces, network, landlock, seccomp).
    sandbox: str = "auto"
    sandbox_home_template: Path | None = None
    sandbox_read_paths: tuple[Path, ...] = ()
    sandbox_skip_layers: tuple[str, ...] = ()
    # Under `required`: the layers without which no phase runs (default: all four). A deployment that
    # knows its hosts refuse user namespaces (Kubernetes under RuntimeDefault) requires the others.
    sandbox_required_layers: tuple[str, ...] = SANDBOX_LAYERS
    # Limits for phases that do not set their own (0: none); need a memory / cpu cgroup.
    default_memory_limit_bytes: int = 0
    default_cpu_limit_millicores: int = 0
    # Processes and threads a phase may have at once unless it sets its own (0: none): pids.max of
    # its cgroup, else RLIMIT_NPROC inside the sandbox's user namespace (docs/sandbox.md, "Limits").
    default_pids_limit: int = 4096
    # What one phase may make the server write into its data dir and store: its recording of the
    # CLI's output, its events, its mirrored transcript (0: no cap). Past it the phase is stopped.
    phase_output_max_bytes: int = 1024 * 1024 * 1024
    # Under bubblewrap a phase's /tmp is a tmpfs of this size (its pages count toward the phase's
    # memory limit); 0: a directory on the data dir's disk, as without bubblewrap.
    phase_tmp_max_bytes: int = 1024 * 1024 * 1024
    # How much a phase may grow the disk use of what it may write (phases/workspace_cap.py; 0: no
    # cap); also the most a request's own `workspace_max_bytes` may ask for.
    workspace_max_bytes: int = 0
    # Telemetry (helix_runner.telemetry): /metrics address (no port = no endpoint), the limit of
    # distinct project labels, and tracing (auto = when the OTEL_* variables configure an exporter).
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None
    metrics_max_projects: int = 100
    tracing: str = "auto"
    # What happens to a GIT_WORKTREE phase's worktree when the request does not say: KEEP, REMOVE
    # or REMOVE_ON_SUCCESS (kept for a look when the phase did not succeed).
    worktree_retention: str = "REMOVE_ON_SUCCESS"
    # --- TLS on the gRPC port (docs/scale-out.md "Security between replicas"); PEM files, re-read
    # when they change on disk. cert + key: TLS; with a client CA: mutual TLS (clients must present
    # a certificate that CA issued). The same cert and key are the replica's client identity when
    # it forwards control to another replica, verified against the client CA (or the system roots).
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_client_ca_file: Path | None = None
    # The name forwarded calls expect in the owner's certificate (default: the host of its address);
    # for a certificate shared by every replica that names a Service, not each pod's IP.
    tls_server_name: str = ""
    # A plaintext port serving only grpc.health.v1.Health (None: off), for probes that cannot speak
    # TLS (the kubelet's gRPC probes); it answers the same liveness/readiness as the API port.
    health_port: int | None = None
    # --- Webhooks (README "Webhooks"). Subscriptions from the config file ([[webhooks]] tables: id,
    # url, events, secret_file, and optionally project, statuses, cost_threshold_usd, format,
    # description), besides those created through the API; replaced in the store at each start.
    webhooks: tuple[Mapping[str, Any], ...] = ()
    # host:port pairs a webhook may reach although their addresses are loopback, private or
    # link-local (as egress_private_allow for phases); nothing else that is not public.
    webhook_private_allow: tuple[str, ...] = ()
    # Tries of a delivery before it is dead-lettered, and the backoff between them (with jitter;
    # a receiver's Retry-After is honoured, up to 6 hours).
    webhook_max_attempts: int = 12
    webhook_initial_backoff_seconds: float = 5.0
    webhook_backoff_multiplier: float = 3.0
    webhook_max_backoff_seconds: float = 21600.0
    # One attempt's bound (connect, send, the answer's head and up to webhook_max_response_bytes of
    # its body, the rest dropped).
    webhook_timeout_seconds: float = 10.0
    webhook_max_response_bytes: int = 64 * 1024
    # A PEM CA bundle receivers' certificates are verified with instead of the system's roots.
    webhook_ca_file: Path | None = None
    # The dashboard's public base URL (e.g. https://runner.example.com): webhook bodies link to a
    # phase's page under it. Empty: no link.
    dashboard_url: str = ""
    # Checkpoints at every tool boundary (docs/fork-and-rewind.md): the phase's session position and its
    # workspace (a git tree, or a commit under a hidden ref), so ForkPhase and RewindPhase can go back.
    checkpoints: bool = True

    @property
    def tls(self) -> bool:
        """Whether the gRPC port serves TLS."""
        return self.tls_cert_file is not None

    @property
    def mutual_tls(self) -> bool:
        """Whether every client must present a certificate the client CA issued."""
        return self.tls_client_ca_file is not None

    @property
    def is_loopback(self) -> bool:
        """Whether the listen address only accepts local connections."""
        if self.host in ("localhost",):
            return True
        try:
            return ipaddress.ip_address(self.host.strip("[]")).is_loopback
        except ValueError:
            return False

    @property
    def web_is_loopback(self) -> bool:
        """Whether the dashboard's address only accepts local connections (the same rule as ``host``)."""
        return replace(self, host=self.web_host).is_loopback

    @property
    def metrics_is_loopback(self) -> bool:
        """Whether ``/metrics`` only accepts local connections (the same rule as ``host``)."""
        return replace(self, host=self.metrics_host).is_loopback

    @property
    def db_path(self) -> Path:
        return self.data_dir / "helix-runner.sqlite3"

    @property
    def database(self) -> DatabaseUrl:
        """The parsed ``database_url`` (the SQLite file in ``data_dir`` when none is set)."""
        return parse_database_url(self.database_url or default_database_url(self.data_dir))

    @property
    def recordings_dir(self) -> Path:
        return self.data_dir / "recordings"

    def read_auth_token(self) -> str | None:
        """The bearer token clients must present or its digest (``sha256:<64 hex digits>``, see
        api.auth), or None when auth is off."""
        if self.auth_token_file is None:
            return None
        try:
            token = self.auth_token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"cannot read auth token file {self.auth_token_file}: {exc.strerror}") from None
        if token.startswith(TOKEN_DIGEST_PREFIX):
            if not _SHA256_HEX.fullmatch(token[len(TOKEN_DIGEST_PREFIX) :]):
                raise ConfigError(f"auth token digest in {self.auth_token_file} is not sha256: and 64 hex digits")
            return token.lower()  # as hashlib writes it, so each call compares bytes as they are
        elif len(token) < 16:
            raise ConfigError(f"auth token in {self.auth_token_file} is shorter than 16 characters")
        return token


def webhook_specs(config: ServerConfig) -> list[WebhookSpec]:
    """The config file's webhook subscriptions, their secrets read from their files (ConfigError if one cannot be)."""
    specs = []
    for table in config.webhooks:
        path = Path(str(table["secret_file"])).expanduser()
        try:
            secret = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"webhooks: {table['id']}: cannot read secret_file {path}: {exc.strerror}") from None
        if not secret:
            raise ConfigError(f"webhooks: {table['id']}: secret_file {path} is empty")
        threshold = table.get("cost_threshold_usd")
        specs.append(WebhookSpec(
            url=table["url"], events=tuple(WebhookEvent(e) for e in table["events"]),
            project_id=str(table.get("project", "")),
            statuses=tuple(PhaseStatus[s.upper()] for s in table.get("statuses", [])),
            cost_threshold_usd=float(threshold) if threshold is not None else None,
            format=WebhookFormat(table.get("format", WebhookFormat.STANDARD.value)),
            description=str(table.get("description", "")), secret=secret, subscription_id=str(table["id"])))
    return specs


def webhook_schedule(config: ServerConfig) -> RetrySchedule:
    """The retry schedule of webhook deliveries (the ``webhook_*`` keys)."""
    return RetrySchedule(config.webhook_max_attempts, config.webhook_initial_backoff_seconds,
                         config.webhook_backoff_multiplier, config.webhook_max_backoff_seconds)


def _default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "helix-runner"


def _as_path_tuple(value: Any) -> tuple[Path, ...]:
    if isinstance(value, str):
        parts = [p for p in value.split(os.pathsep) if p]
    else:
        parts = list(value)
    return tuple(Path(p).expanduser() for p in parts)


def _as_str_tuple(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(p.strip() for p in value.split(",") if p.strip())
    return tuple(str(p) for p in value)


def _warm_pool(value: Any) -> dict[str, Any]:
    """The warm-pool declaration (a TOML table, or JSON text from the environment)."""
    table = json.loads(value) if isinstance(value, str) else value
    if not isinstance(table, Mapping) or not set(table) <= {"size", "working_dir", "options"}:
        raise ValueError("must be a table with size, working_dir and options")
    size = table.get("size", 0)
    if not isinstance(size, int) or not 0 <= size <= 32:
        raise ValueError("size must be 0 to 32")
    if size and not table.get("working_dir"):
        raise ValueError("needs a working_dir")
    if not isinstance(table.get("options", {}), Mapping):
        raise ValueError("options must be a table of phase options")
    return dict(table)


def _model_allowlist(value: Any) -> dict[str, tuple[str, ...]]:
    """{project id or "*": [model id or pattern, ...]} (a TOML table, or JSON text from the environment)."""
    table = json.loads(value) if isinstance(value, str) else value
    if not isinstance(table, Mapping):
        raise ValueError("must be a table of project id -> list of model ids or patterns")
    out = {}
    for project, models in table.items():
        if project != "*" and not _PROJECT_ID.match(str(project)):
            raise ValueError(f"{str(project)[:80]!r} is not a project id (or '*' for every other project)")
        if isinstance(models, str) or not isinstance(models, list | tuple) or not models:
            raise ValueError(f"{project}: needs a non-empty list of model ids or patterns")
        if not all(isinstance(m, str) and _MODEL_PATTERN.match(m) for m in models):
            raise ValueError(f"{project}: model ids and patterns are letters, digits and . _ : @ / [ ] - *")
        out[str(project)] = tuple(models)
    return out


_WEBHOOK_KEYS = {"id", "url", "events", "project", "statuses", "cost_threshold_usd", "format", "description",
                 "secret_file"}


def _webhooks(value: Any) -> tuple[dict[str, Any], ...]:
    """``[[webhooks]]`` tables (or JSON text from the environment), their shape checked; each becomes a
    subscription at start (``ServerConfig.webhook_specs``), where its URL and filters are checked too."""
    tables = json.loads(value) if isinstance(value, str) else value
    if isinstance(tables, Mapping) or not isinstance(tables, list | tuple):
        raise ValueError("must be a list of tables ([[webhooks]] in TOML)")
    out, seen = [], set()
    for i, table in enumerate(tables):
        if not isinstance(table, Mapping):
            raise ValueError(f"entry {i} is not a table")
        unknown = set(table) - _WEBHOOK_KEYS
        if unknown:
            raise ValueError(f"entry {i}: unknown key {sorted(unknown)[0]!r} (known: {', '.join(sorted(_WEBHOOK_KEYS))})")
        name = table.get("id")
        if not isinstance(name, str) or not _REPLICA_ID.match(name):
            raise ValueError(f"entry {i}: id must be 1-128 characters of letters, digits, '.', '_', ':' or '-'")
        if name in seen:
            raise ValueError(f"entry {i}: id {name!r} is used twice")
        seen.add(name)
        if not isinstance(table.get("url"), str) or not table["url"]:
            raise ValueError(f"{name}: url is required")
        if not isinstance(table.get("secret_file"), str) or not table["secret_file"]:
            # A secret made at start would change at every start, and no receiver could know it.
            raise ValueError(f"{name}: secret_file is required (one line: whsec_ and base64, the receiver's too)")
        events = table.get("events")
        if not isinstance(events, list) or not events or not all(isinstance(e, str) for e in events):
            raise ValueError(f"{name}: events must be a non-empty list of event types (e.g. [\"phase.finished\"])")
        try:
            [WebhookEvent(e) for e in events]
        except ValueError:
            raise ValueError(f"{name}: events are among {', '.join(e.value for e in WebhookEvent)}") from None
        statuses = table.get("statuses", [])
        if not isinstance(statuses, list) or not all(isinstance(s, str) and s.upper() in PhaseStatus.__members__
                                                     for s in statuses):
            raise ValueError(f"{name}: statuses must be a list of phase statuses (e.g. [\"FAILED\"])")
        if "format" in table and table["format"] not in [f.value for f in WebhookFormat]:
            raise ValueError(f"{name}: format is one of {', '.join(f.value for f in WebhookFormat)}")
        threshold = table.get("cost_threshold_usd")
        if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, int | float)):
            raise ValueError(f"{name}: cost_threshold_usd must be a number")
        out.append(dict(table))
    return tuple(out)


def _as_int_tuple(value: Any) -> tuple[int, ...]:
    return tuple(int(p) for p in _as_str_tuple(value) if str(p).strip()) if isinstance(value, str) \
        else tuple(int(p) for p in value)


def _price_overrides(value: Any) -> dict[str, ModelPrice]:
    """Parses the override table (a TOML table, or JSON text from the environment)."""
    table = json.loads(value) if isinstance(value, str) else value
    if not isinstance(table, Mapping):
        raise ValueError("must be a table of model id -> prices")
    allowed = {f.name for f in fields(ModelPrice)}
    out = {}
    for model, prices in table.items():
        if not isinstance(prices, Mapping) or not set(prices) <= allowed or "input_per_mtok" not in prices \
                or "output_per_mtok" not in prices:
            raise ValueError(f"{model}: needs input_per_mtok and output_per_mtok (optional: "
                             f"{', '.join(sorted(allowed - {'input_per_mtok', 'output_per_mtok'}))})")
        if any(not isinstance(v, int | float) or v < 0 for v in prices.values()):
            raise ValueError(f"{model}: prices must be non-negative numbers")
        out[str(model)] = ModelPrice(**{k: float(v) for k, v in prices.items()})
    return out


def _as_bytes(value: Any) -> int:
    """A byte count: an integer, or text such as ``512M`` / ``2GiB`` (powers of 1024)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"not a size: {value!r} (e.g. 536870912, 512M, 2GiB)")
    unit = (match.group(2) or "").upper().rstrip("I")
    return int(match.group(1)) * 1024 ** " KMGT".index(unit or " ")


def _as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean: {value!r}")


_CONVERTERS: dict[str, Any] = {
    "host": str,
    "port": int,
    "data_dir": lambda v: Path(v).expanduser(),
    "database_url": lambda v: str(v).strip(),
    "replica_id": lambda v: str(v).strip(),
    "advertise_address": lambda v: str(v).strip(),
    "replica_lease_seconds": float,
    "reuse_port": _as_bool,
    "workspace_roots": _as_path_tuple,
    "claude_path": lambda v: str(v) or None,
    "auth_token_file": lambda v: Path(v).expanduser() if v else None,
    "auth_principals_file": lambda v: Path(v).expanduser() if v else None,
    "log_level": lambda v: str(v).lower(),
    "log_format": lambda v: str(v).lower(),
    "drain_grace_seconds": float,
    "handover_wait_seconds": float,
    "max_concurrent_phases": int,
    "max_running_phases": int,
    "max_running_phases_per_project": int,
    "max_starting_phases": int,
    "max_queued_phases": int,
    "max_queued_phases_per_project": int,
    "cluster_max_running_phases": int,
    "cluster_max_running_phases_per_project": int,
    "cluster_max_queued_phases": int,
    "place_on_free_replica": _as_bool,
    "admission_max_loop_lag_ms": float,
    "spawn_off_loop": _as_bool,
    "warm_pool": lambda v: _warm_pool(v),
    "retry_max_attempts": int,
    "retry_initial_backoff_seconds": float,
    "retry_backoff_multiplier": float,
    "retry_max_backoff_seconds": float,
    "retry_continuation_prompt": str,
    "default_phase_timeout_seconds": float,
    "default_idle_timeout_seconds": float,
    "exit_grace_seconds": float,
    "max_line_bytes": int,
    "read_cache_jobs": int,
    "inherit_env": _as_str_tuple,
    "request_env_allowlist": _as_str_tuple,
    "path_prefix": _as_path_tuple,
    "required_commands": _as_str_tuple,
    "allow_bypass_permissions": _as_bool,
    "offline_script": lambda v: Path(v).expanduser() if v else None,
    "api_key_file": lambda v: Path(v).expanduser() if v else None,
    "api_key_helper": _as_bool,
    "api_gateway": _as_bool,
    "api_gateway_port": int,
    "api_upstream_url": lambda v: str(v).strip(),
    "api_upstream_ca_file": lambda v: Path(v).expanduser() if v else None,
    "model_allowlist": lambda v: _model_allowlist(v),
    "api_features_allow": lambda v: validate_names(_as_str_tuple(v), "api_features_allow"),
    "egress_proxy": _as_bool,
    "egress_proxy_port": int,
    "egress_allowlist": _as_str_tuple,
    "egress_allowed_ports": _as_int_tuple,
    "egress_private_allow": _as_str_tuple,
    "egress_upstream_ca_file": lambda v: Path(v).expanduser() if v else None,
    "vault_key_file": lambda v: Path(v).expanduser() if v else None,
    "egress_max_connections_per_phase": int,
    "egress_max_bytes_per_phase": int,
    "egress_hold_timeout_seconds": float,
    "retention_days": float,
    "recordings_max_bytes": int,
    "retention_interval_seconds": float,
    "price_overrides": lambda v: _price_overrides(v),
    "web_port": lambda v: None if v is None or str(v).strip() == "" else int(v),
    "web_host": str,
    "containment": lambda v: str(v).lower(),
    "sandbox": lambda v: str(v).lower(),
    "sandbox_home_template": lambda v: Path(v).expanduser() if v else None,
    "sandbox_read_paths": _as_path_tuple,
    "sandbox_skip_layers": lambda v: tuple(x.lower() for x in _as_str_tuple(v)),
    "sandbox_required_layers": lambda v: tuple(x.lower() for x in _as_str_tuple(v)),
    "cgroup_parent": str,
    "default_memory_limit_bytes": _as_bytes,
    "default_cpu_limit_millicores": int,
    "default_pids_limit": int,
    "phase_output_max_bytes": _as_bytes,
    "phase_tmp_max_bytes": _as_bytes,
    "workspace_max_bytes": _as_bytes,
    "metrics_host": str,
    "metrics_port": lambda v: int(v) if v not in ("", None) else None,
    "metrics_max_projects": int,
    "tracing": lambda v: str(v).lower(),
    "worktree_retention": lambda v: str(v).upper(),
    # TLS (grouped with the fields above)
    "tls_cert_file": lambda v: Path(v).expanduser() if v else None,
    "tls_key_file": lambda v: Path(v).expanduser() if v else None,
    "tls_client_ca_file": lambda v: Path(v).expanduser() if v else None,
    "tls_server_name": lambda v: str(v).strip(),
    "health_port": lambda v: None if v is None or str(v).strip() == "" else int(v),
    # Webhooks (grouped with the fields above)
    "webhooks": lambda v: _webhooks(v),
    "checkpoints": _as_bool,
    "webhook_private_allow": _as_str_tuple,
    "webhook_max_attempts": int,
    "webhook_initial_backoff_seconds": float,
    "webhook_backoff_multiplier": float,
    "webhook_max_backoff_seconds": float,
    "webhook_timeout_seconds": float,
    "webhook_max_response_bytes": _as_bytes,
    "webhook_ca_file": lambda v: Path(v).expanduser() if v else None,
    "dashboard_url": lambda v: str(v).strip(),
}
KEYS = tuple(f.name for f in fields(ServerConfig))
assert set(KEYS) == set(_CONVERTERS), "every config key needs a converter"
assert set(KEYS) == set(SECTION_OF) | set(TOP_LEVEL), "every config key needs a section (config_file.py)"


def _convert(source: str, key: str, value: Any) -> Any:
    try:
        return _CONVERTERS[key](value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: invalid value for {key}: {exc}") from None


def load_config(
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    config_file: Path | None = None,
    notices: list[str] | None = None,
) -> ServerConfig:
    """Builds and validates the config from (lowest to highest precedence) file, env, flags.

    ``flags`` holds only the flags a person actually gave (None values are ignored). A file's keys
    are read by section (config_file.py); ``notices`` gets one line per deprecated spelling used.
    """
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}

    file_path = config_file or (Path(environ[ENV_PREFIX + "CONFIG"]) if environ.get(ENV_PREFIX + "CONFIG") else None)
    if file_path is not None:
        try:
            raw = tomllib.loads(file_path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read config file {file_path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {file_path} is not valid TOML: {exc}") from None
        try:
            flat, file_notices = flatten(raw)
        except ConfigFileError as exc:
            raise ConfigError(f"config file {file_path}: {exc}") from None
        for key, value in flat.items():
            values[key] = _convert(f"config file {file_path}", key, value)
        if notices is not None:
            notices.extend(f"config file {file_path}: {notice}" for notice in file_notices)

    for key in KEYS:
        env_name = ENV_PREFIX + key.upper()
        if env_name in environ:
            values[key] = _convert(f"environment {env_name}", key, environ[env_name])

    for key, value in (flags or {}).items():
        if value is None:
            continue
        if key not in _CONVERTERS:
            raise ConfigError(f"unknown option {key!r}")
        values[key] = _convert(f"--{key.replace('_', '-')}", key, value)

    config = replace(ServerConfig(), **values)
    return validate(config)


def validate(config: ServerConfig) -> ServerConfig:
    """Checks cross-field rules and normalises paths; returns the config to use."""
    config = absolute_paths(config)
    if not 0 <= config.port <= 65535:
        raise ConfigError(f"port {config.port} is out of range 0-65535")
    if config.log_level not in LOG_LEVELS:
        raise ConfigError(f"log level {config.log_level!r} is not one of {', '.join(LOG_LEVELS)}")
    if config.log_format not in LOG_FORMATS:
        raise ConfigError(f"log format {config.log_format!r} is not one of {', '.join(LOG_FORMATS)}")
    _validate_tls(config)
    if (not config.is_loopback and config.auth_token_file is None and config.auth_principals_file is None
            and not config.mutual_tls):
        raise ConfigError(
            f"refusing to listen on non-loopback address {config.host} without --auth-token-file or mutual "
            "TLS (--tls-client-ca-file): this service runs an agent that executes commands"
        )
    if config.web_port is not None and not 0 <= config.web_port <= 65535:
        raise ConfigError(f"web port {config.web_port} is out of range 0-65535")
    if (config.web_port is not None and not config.web_is_loopback and config.auth_token_file is None
            and config.auth_principals_file is None):
        raise ConfigError(
            f"refusing to serve the dashboard on non-loopback address {config.web_host} without "
            "--auth-token-file: its API controls an agent that executes commands"
        )
    for name in ("drain_grace_seconds", "default_phase_timeout_seconds", "default_idle_timeout_seconds",
                 "exit_grace_seconds", "handover_wait_seconds"):
        if getattr(config, name) <= 0:
            raise ConfigError(f"{name} must be positive")
    if config.retention_days < 0 or config.recordings_max_bytes < 0:
        raise ConfigError("retention_days and recordings_max_bytes must not be negative (0 keeps everything)")
    if config.retention_interval_seconds <= 0:
        raise ConfigError("retention_interval_seconds must be positive")
    if config.max_concurrent_phases < 1:
        raise ConfigError("max_concurrent_phases must be at least 1")
    for name in ("max_starting_phases", "max_queued_phases"):
        if getattr(config, name) < 1:
            raise ConfigError(f"{name} must be at least 1")
    if config.admission_max_loop_lag_ms < 0:
        raise ConfigError("admission_max_loop_lag_ms must not be negative (0: no limit)")
    for name in ("max_running_phases", "max_running_phases_per_project", "max_queued_phases_per_project",
                 "cluster_max_running_phases", "cluster_max_running_phases_per_project", "cluster_max_queued_phases"):
        if getattr(config, name) < 0:
            raise ConfigError(f"{name} must not be negative (0: no separate limit)")
    try:
        retry_defaults(config)
    except RunnerError as exc:
        raise ConfigError(f"retry settings: {exc.message}") from None
    if config.metrics_port is not None and not 0 <= config.metrics_port <= 65535:
        raise ConfigError(f"metrics_port {config.metrics_port} is out of range 0-65535")
    if config.metrics_max_projects < 1:
        raise ConfigError("metrics_max_projects must be at least 1")
    if config.tracing not in TRACING_MODES:
        raise ConfigError(f"tracing {config.tracing!r} is not one of {', '.join(TRACING_MODES)}")
    if config.max_line_bytes < 1024 * 1024:
        raise ConfigError("max_line_bytes must be at least 1 MiB")
    if config.read_cache_jobs < 0:
        raise ConfigError("read_cache_jobs must not be negative (0: no cache)")
    if config.containment not in CONTAINMENT_SETTINGS:
        raise ConfigError(f"containment {config.containment!r} is not one of {', '.join(CONTAINMENT_SETTINGS)}")
    if config.sandbox not in SANDBOX_SETTINGS:
        raise ConfigError(f"sandbox {config.sandbox!r} is not one of {', '.join(SANDBOX_SETTINGS)}")
    for layer in config.sandbox_skip_layers:
        if layer not in SANDBOX_LAYERS:
            raise ConfigError(f"sandbox_skip_layers: {layer!r} is not one of {', '.join(SANDBOX_LAYERS)}")
    if config.sandbox_home_template is not None and not config.sandbox_home_template.is_dir():
        raise ConfigError(f"sandbox_home_template {config.sandbox_home_template} is not a directory")
    for layer in config.sandbox_required_layers:
        if layer not in SANDBOX_LAYERS:
            raise ConfigError(f"sandbox_required_layers: {layer!r} is not one of {', '.join(SANDBOX_LAYERS)}")
    if not _CGROUP_PARENT.match(config.cgroup_parent) or ".." in config.cgroup_parent.split("/"):
        raise ConfigError(f"cgroup_parent {config.cgroup_parent!r} must be a path of [A-Za-z0-9_.-] names "
                          "(relative to the server's own cgroup, or absolute), without '..'")
    if config.default_memory_limit_bytes and config.default_memory_limit_bytes < MIN_MEMORY_LIMIT_BYTES:
        raise ConfigError(f"default_memory_limit_bytes must be 0 (none) or at least {MIN_MEMORY_LIMIT_BYTES}")
    if not 0 <= config.default_cpu_limit_millicores <= MAX_CPU_LIMIT_MILLICORES or \
            0 < config.default_cpu_limit_millicores < MIN_CPU_LIMIT_MILLICORES:
        raise ConfigError(f"default_cpu_limit_millicores must be 0 (none) or {MIN_CPU_LIMIT_MILLICORES} to "
                          f"{MAX_CPU_LIMIT_MILLICORES}")
    if config.default_pids_limit and not MIN_PIDS_LIMIT <= config.default_pids_limit <= MAX_PIDS_LIMIT:
        raise ConfigError(f"default_pids_limit must be 0 (none) or {MIN_PIDS_LIMIT} to {MAX_PIDS_LIMIT}")
    if config.phase_output_max_bytes and config.phase_output_max_bytes < 16 * 1024 * 1024:
        raise ConfigError("phase_output_max_bytes must be 0 (no cap) or at least 16 MiB")
    if config.phase_tmp_max_bytes and config.phase_tmp_max_bytes < 16 * 1024 * 1024:
        raise ConfigError("phase_tmp_max_bytes must be 0 (a directory on disk) or at least 16 MiB")
    if config.workspace_max_bytes and config.workspace_max_bytes < MIN_WORKSPACE_MAX_BYTES:
        raise ConfigError("workspace_max_bytes must be 0 (no cap) or at least 16 MiB")
    _validate_egress(config)
    _validate_webhooks(config)
    if config.worktree_retention not in ("KEEP", "REMOVE", "REMOVE_ON_SUCCESS"):
        raise ConfigError("worktree_retention must be KEEP, REMOVE or REMOVE_ON_SUCCESS")
    roots = config.workspace_roots or (Path.cwd(),)
    resolved_roots = []
    for root in roots:
        real = root.expanduser().resolve()
        if not real.is_dir():
            raise ConfigError(f"workspace root {root} is not a directory")
        resolved_roots.append(real)
    if config.advertise_address and not _ADVERTISE.match(config.advertise_address):
        raise ConfigError("advertise_address must be host:port (e.g. runner-0.runner:50051 or [::1]:50051)")
    if not MIN_LEASE_SECONDS <= config.replica_lease_seconds <= MAX_LEASE_SECONDS:
        raise ConfigError(
            f"replica_lease_seconds must be {MIN_LEASE_SECONDS:g} to {MAX_LEASE_SECONDS:g}: shorter, a busy "
            "database can cost a live replica its phases; longer, a dead replica's phases are found "
            f"later than the documented {TAKEOVER_BOUND_SECONDS:g} s (lease + sweep interval, a third of it)"
        )
    if config.replica_id and not _REPLICA_ID.match(config.replica_id):
        raise ConfigError("replica_id must be 1-128 characters of letters, digits, '.', '_', ':' or '-'")
    database_url = ""
    if config.database_url:  # unset stays unset: the default follows data_dir (ServerConfig.database)
        try:
            database_url = parse_database_url(config.database_url).url
        except ValueError as exc:
            raise ConfigError(f"database_url: {exc}") from None
    return replace(config, workspace_roots=tuple(resolved_roots), data_dir=config.data_dir.expanduser(),
                   database_url=database_url)


# The keys that hold one path or a tuple of paths (``absolute_paths``).
PATH_KEYS = ("data_dir", "auth_token_file", "auth_principals_file", "offline_script", "api_key_file", "api_upstream_ca_file",
             "sandbox_home_template", "tls_cert_file", "tls_key_file", "tls_client_ca_file", "webhook_ca_file",
             "egress_upstream_ca_file", "vault_key_file")
PATH_TUPLE_KEYS = ("workspace_roots", "path_prefix", "sandbox_read_paths")


def absolute_paths(config: ServerConfig, cwd: Path | None = None) -> ServerConfig:
    """Every path the config names made absolute once, against the directory the server starts in.

    A relative path would otherwise mean something else to every process that runs with another
    working directory: the phase shim runs in the phase's directory, so a relative ``--data-dir``
    named a seccomp filter there that did not exist, and the sandbox's start-up probe failed.
    Symbolic links are kept (a Kubernetes Secret's file is a link that changes on rotation), only
    ``~`` and ``..`` are resolved. ``claude_path`` is made absolute only when it names a path (a
    bare name is looked up on ``PATH``); so are the webhooks' ``secret_file`` and the warm pool's
    ``working_dir``.
    """
    base = Path.cwd() if cwd is None else cwd

    def absolute(path: Path) -> Path:
        return Path(os.path.normpath(base / Path(path).expanduser()))

    changes: dict[str, Any] = {}
    for key in PATH_KEYS:
        value = getattr(config, key)
        if value is not None:
            changes[key] = absolute(value)
    for key in PATH_TUPLE_KEYS:
        changes[key] = tuple(absolute(p) for p in getattr(config, key))
    claude = config.claude_path
    if claude and (os.sep in claude or claude.startswith("~")):
        changes["claude_path"] = str(absolute(Path(claude)))
    if config.webhooks:
        changes["webhooks"] = tuple({**table, "secret_file": str(absolute(Path(str(table["secret_file"]))))}
                                    if table.get("secret_file") else table for table in config.webhooks)
    if config.warm_pool.get("working_dir"):
        changes["warm_pool"] = {**config.warm_pool, "working_dir": str(absolute(Path(config.warm_pool["working_dir"])))}
    return replace(config, **changes)


def _validate_egress(config: ServerConfig) -> None:
    """The gateway's and the egress proxy's settings (one line naming the bad key and value)."""
    for name in ("api_gateway_port", "egress_proxy_port"):
        if not 0 <= getattr(config, name) <= 65535:
            raise ConfigError(f"{name} {getattr(config, name)} is out of range 0-65535")
    if config.api_upstream_url:
        try:
            upstream = UpstreamUrl.parse(config.api_upstream_url)
        except ValueError as exc:
            raise ConfigError(f"api_upstream_url: {exc}") from None
        if upstream.scheme == "http" and not _loopback_host(upstream.host):
            raise ConfigError("api_upstream_url: http:// would send the API key unencrypted; use https:// (or a "
                              "loopback host)")
    if config.api_upstream_ca_file is not None and not config.api_upstream_ca_file.is_file():
        raise ConfigError(f"api_upstream_ca_file {config.api_upstream_ca_file} is not a file")
    ports = config.egress_allowed_ports
    if not ports or len(ports) > 32 or not all(0 < p < 65536 for p in ports):
        raise ConfigError("egress_allowed_ports must list 1 to 32 ports (1-65535)")
    for entry in config.egress_allowlist:
        try:
            parse_pattern(entry, frozenset(ports))
        except ValueError as exc:
            raise ConfigError(f"egress_allowlist: {entry[:80]!r}: {exc}") from None
    try:
        OperatorExceptions.parse(config.egress_private_allow)
    except ValueError as exc:
        raise ConfigError(f"egress_private_allow: {exc}") from None
    for name in ("egress_upstream_ca_file", "vault_key_file"):
        path = getattr(config, name)
        if path is not None and not path.is_file():
            raise ConfigError(f"{name} {path} is not a file")
    if not 1 <= config.egress_max_connections_per_phase <= 100_000:
        raise ConfigError("egress_max_connections_per_phase must be 1-100000")
    if not 0 < config.egress_hold_timeout_seconds <= 86400:
        raise ConfigError("egress_hold_timeout_seconds must be more than 0 and at most 86400 (a day)")
    if config.egress_max_bytes_per_phase < 0:
        raise ConfigError("egress_max_bytes_per_phase must be 0 (no cap) or a number of bytes")


def _validate_webhooks(config: ServerConfig) -> None:
    """The webhook settings (one line naming the bad key); each subscription's URL and filters too."""
    if not 1 <= config.webhook_max_attempts <= 100:
        raise ConfigError("webhook_max_attempts must be 1 to 100")
    if not 0 < config.webhook_initial_backoff_seconds <= config.webhook_max_backoff_seconds:
        raise ConfigError("webhook_initial_backoff_seconds must be above 0 and at most webhook_max_backoff_seconds")
    if not 1 <= config.webhook_backoff_multiplier <= 100:
        raise ConfigError("webhook_backoff_multiplier must be 1 to 100")
    if not 0.1 <= config.webhook_timeout_seconds <= 300:
        raise ConfigError("webhook_timeout_seconds must be 0.1 to 300")
    if not 1024 <= config.webhook_max_response_bytes <= 16 * 1024 * 1024:
        raise ConfigError("webhook_max_response_bytes must be 1 KiB to 16 MiB")
    if config.webhook_ca_file is not None and not config.webhook_ca_file.is_file():
        raise ConfigError(f"webhook_ca_file {config.webhook_ca_file} is not a file")
    try:
        exceptions = OperatorExceptions.parse(config.webhook_private_allow)
    except ValueError as exc:
        raise ConfigError(f"webhook_private_allow: {exc}") from None
    if config.dashboard_url:
        try:
            WebhookUrl.parse(config.dashboard_url)
        except ValueError as exc:
            raise ConfigError(f"dashboard_url: {exc}") from None
    for table in config.webhooks:
        name = table["id"]
        try:
            url = WebhookUrl.parse(table["url"])
        except ValueError as exc:
            raise ConfigError(f"webhooks: {name}: url {exc}") from None
        why = url.literal_refusal(exceptions)
        if why is not None:
            raise ConfigError(f"webhooks: {name}: url: {why}")
        problems = check_subscription(
            [WebhookEvent(e) for e in table["events"]], [PhaseStatus[s.upper()] for s in table.get("statuses", [])],
            table.get("cost_threshold_usd"), str(table.get("project", "")), str(table.get("description", "")))
        if problems:
            raise ConfigError(f"webhooks: {name}: {problems[0][0]} {problems[0][1]}")


def _loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _validate_tls(config: ServerConfig) -> None:
    """The TLS files exist, are readable and parse as PEM (the cert with its key); one line otherwise.

    Parsed with the standard ``ssl`` module, as OpenSSL-family code will read them (grpc uses
    BoringSSL); a key protected by a passphrase is refused, since grpc cannot use it.
    """
    if (config.tls_cert_file is None) != (config.tls_key_file is None):
        raise ConfigError("tls_cert_file and tls_key_file go together: give both or neither")
    if config.tls_client_ca_file is not None and config.tls_cert_file is None:
        raise ConfigError("tls_client_ca_file (mutual TLS) needs tls_cert_file and tls_key_file")
    if config.health_port is not None and not 0 <= config.health_port <= 65535:
        raise ConfigError(f"health_port {config.health_port} is out of range 0-65535")
    if config.tls_server_name and not re.fullmatch(r"[A-Za-z0-9.-]{1,253}", config.tls_server_name):
        raise ConfigError("tls_server_name must be a host name (letters, digits, '.', '-')")
    if config.tls_cert_file is None:
        return
    for name in ("tls_cert_file", "tls_key_file", "tls_client_ca_file"):
        path = getattr(config, name)
        if path is None:
            continue
        try:
            with open(path, "rb") as f:
                f.read(1)
        except OSError as exc:
            raise ConfigError(f"cannot read {name} {path}: {exc.strerror}") from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(config.tls_cert_file, config.tls_key_file, password=_no_passphrase)
    except (ssl.SSLError, ValueError, TypeError) as exc:
        raise ConfigError(
            f"tls_cert_file {config.tls_cert_file} and tls_key_file {config.tls_key_file} are not a PEM "
            f"certificate and its unencrypted private key: {_ssl_reason(exc)}"
        ) from None
    if config.tls_client_ca_file is not None:
        try:
            context.load_verify_locations(cafile=config.tls_client_ca_file)
        except ssl.SSLError as exc:
            raise ConfigError(f"tls_client_ca_file {config.tls_client_ca_file} holds no PEM CA certificate: "
                              f"{_ssl_reason(exc)}") from None


def _no_passphrase() -> bytes:
    # Without a callback OpenSSL would prompt on the terminal for an encrypted key's passphrase.
    raise ValueError("the key is encrypted (grpc needs an unencrypted key)")


def _ssl_reason(exc: Exception) -> str:
    reason = getattr(exc, "reason", None)
    return (reason or str(exc) or type(exc).__name__).lower().replace("_", " ")


def retry_defaults(config: ServerConfig) -> RetryPolicy:
    """The server's default retry policy (the ``retry_*`` keys); RunnerError naming a bad value."""
    return RetryPolicy.from_request(
        max_attempts=config.retry_max_attempts,
        initial_backoff_ns=round(config.retry_initial_backoff_seconds * 1e9),
        backoff_multiplier=config.retry_backoff_multiplier,
        max_backoff_ns=round(config.retry_max_backoff_seconds * 1e9),
        continuation_prompt=config.retry_continuation_prompt,
        field_prefix="retry",
    )
