"""Server-side verbs: ``serve`` runs the service; ``mock-api`` serves the scripted Messages API."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from helix_runner.config import CONTAINMENT_SETTINGS, SANDBOX_SETTINGS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the gRPC service")
    p.add_argument("--config", type=Path, help="TOML config file (env HELIX_RUNNER_CONFIG)")
    p.add_argument("--host", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (default 50051; 0 picks a free one)")
    p.add_argument("--data-dir", help="SQLite database and phase recordings")
    p.add_argument(
        "--workspace-root",
        action="append",
        dest="workspace_roots",
        help="directory phases may run in (repeatable; default: the current directory)",
    )
    p.add_argument(
        "--claude-path", help="the claude binary (default: $PATH, then the claude-agent-sdk bundle)"
    )
    p.add_argument(
        "--auth-token-file", help="file with the bearer token clients must send (required off loopback)"
    )
    p.add_argument(
        "--auth-principals-file",
        help="TOML file of named tokens (digests), certificate subjects and JWT rules, each with its grants "
             "per project (docs/tenancy.md)",
    )
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    p.add_argument("--log-format", choices=("auto", "json", "text"),
                   help="log lines on stderr (default auto: human-readable on a terminal, JSON otherwise)")
    p.add_argument("--offline-script", help="point the CLI at a scripted loopback Messages API (JSON script)")
    p.add_argument(
        "--api-key-file", help="file with the Anthropic API key (default: the server's ANTHROPIC_API_KEY)"
    )
    p.add_argument(
        "--web-port", type=int, help="serve the web dashboard on this HTTP port (default: off; 0 picks one)"
    )
    p.add_argument("--web-host", help="the dashboard's listen address (default 127.0.0.1)")
    p.add_argument(
        "--containment",
        choices=CONTAINMENT_SETTINGS,
        help="how phases are contained (default auto: cgroup v2, then v1, then a subreaper shim)",
    )
    p.add_argument(
        "--sandbox", choices=SANDBOX_SETTINGS,
        help="the per-phase sandbox (default auto: every layer the host allows; required: refuse phases "
        "while a layer is missing; off)",
    )
    p.add_argument(
        "--sandbox-skip-layers",
        help="comma-separated sandbox layers to leave off: namespaces, network, landlock, seccomp",
    )
    p.add_argument(
        "--sandbox-required-layers",
        help="with --sandbox required: the layers without which no phase runs (default: all four)",
    )
    p.add_argument("--cgroup-parent", help="where phase cgroups go (relative to the server's cgroup, or absolute)")
    p.add_argument(
        "--database-url", help="sqlite:///absolute/path (default: in --data-dir) or postgresql://host/db"
    )
    p.add_argument("--replica-id", help="with PostgreSQL: this replica's stable name (default: a new id per start)")
    p.add_argument(
        "--replica-lease-seconds", type=float,
        help="with PostgreSQL: this replica's lease (default 15; 1 to 22.5); a dead replica's phases are "
        "INTERRUPTED within 4/3 of it",
    )
    p.add_argument(
        "--handover-wait-seconds", type=float,
        help="with PostgreSQL: on drain, how long to wait for a phase's next tool boundary before stopping "
        "its CLI and handing it over to another replica (default 30; the drain's whole budget is drain_grace_seconds)",
    )
    p.add_argument(
        "--advertise-address", help="with PostgreSQL: host:port other replicas forward control RPCs to (default: the bound one)"
    )
    # TLS on the gRPC port (docs/scale-out.md "Security between replicas"); files re-read on change
    p.add_argument("--tls-cert-file", help="PEM certificate (chain) of the gRPC port: serve TLS (with --tls-key-file)")
    p.add_argument("--tls-key-file", help="PEM private key of --tls-cert-file (unencrypted)")
    p.add_argument(
        "--tls-client-ca-file",
        help="PEM CA: mutual TLS, every client must present a certificate it issued (allows a non-loopback "
        "listen without --auth-token-file)",
    )
    p.add_argument(
        "--tls-server-name", help="name forwarded calls expect in another replica's certificate (default: its host)"
    )
    p.add_argument(
        "--health-port", type=int, help="plaintext port serving only grpc.health.v1 (for probes without TLS)"
    )
    p.add_argument(
        "--reuse-port", action="store_true", default=None,
        help="share --port with other server processes on this host (SO_REUSEPORT; see docs/scale-out.md)",
    )
    # telemetry (README "Observability")
    p.add_argument("--metrics-host", help="address of the Prometheus /metrics endpoint (default 127.0.0.1)")
    p.add_argument("--metrics-port", type=int, help="port of /metrics (default: no endpoint; 0 picks a free one)")
    p.add_argument("--tracing", choices=("auto", "on", "off"), help="OpenTelemetry traces (default auto: OTEL_*)")
    p.set_defaults(handler=cmd_serve)

    p = sub.add_parser("mock-api", help="serve a scripted stand-in for the Anthropic Messages API")
    p.add_argument("--script", required=True, help="JSON script (see README, offline mode)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--log-format", choices=("auto", "json", "text"), default="auto",
                   help="log lines on stderr, as `serve` (default auto: human-readable on a terminal, JSON otherwise)")
    p.set_defaults(handler=cmd_mock_api)


def cmd_serve(args: argparse.Namespace) -> int:
    from helix_runner.config import ConfigError, load_config
    from helix_runner.server import StartupError, serve
    from helix_runner.structured_logging import configure_logging

    flags = {k: v for k, v in vars(args).items() if k not in ("command", "config", "handler")}
    notices: list[str] = []
    try:
        config = load_config(flags=flags, config_file=args.config, notices=notices)
    except ConfigError as exc:
        print(f"helix-runner: error: {exc}", file=sys.stderr)
        return 2
    configure_logging(config.log_level, config.log_format)
    for notice in notices:  # an old file's flat keys still work; say how to write them now
        logging.getLogger("helix_runner.config").warning(notice)
    try:
        asyncio.run(serve(config))
    except StartupError as exc:
        print(f"helix-runner: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


def cmd_mock_api(args: argparse.Namespace) -> int:
    from helix_runner.offline import main
    from helix_runner.structured_logging import configure_logging

    configure_logging("info", args.log_format)  # the stand-in's own setup then keeps it (basicConfig)
    forwarded = ["--script", args.script, "--host", args.host, "--port", str(args.port)]
    return main(forwarded) or 0
