"""The ``helix-runner`` command: ``serve`` runs the service; ``run`` runs one phase through it."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from helix_runner.config import ConfigError, load_config
from helix_runner.structured_logging import configure_logging


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag as one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"helix-runner: error: {message}\n")


def _add_serve(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the gRPC service")
    p.add_argument("--config", type=Path, help="TOML config file (env HELIX_RUNNER_CONFIG)")
    p.add_argument("--host", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (default 50051; 0 picks a free one)")
    p.add_argument("--data-dir", help="SQLite database and phase recordings")
    p.add_argument("--workspace-root", action="append", dest="workspace_roots",
                   help="directory phases may run in (repeatable; default: the current directory)")
    p.add_argument("--claude-path", help="the claude binary (default: $PATH, then the claude-agent-sdk bundle)")
    p.add_argument("--auth-token-file", help="file with the bearer token clients must send (required off loopback)")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    p.add_argument("--log-format", choices=("json", "text"))
    p.add_argument("--offline-script", help="point the CLI at a scripted loopback Messages API (JSON script)")


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="helix-runner", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_serve(sub)
    args = parser.parse_args(argv)

    if args.command == "serve":
        return _serve(args)
    parser.error(f"unknown command {args.command}")
    return 2


def _serve(args: argparse.Namespace) -> int:
    from helix_runner.server import StartupError, serve

    flags = {k: v for k, v in vars(args).items() if k not in ("command", "config")}
    try:
        config = load_config(flags=flags, config_file=args.config)
    except ConfigError as exc:
        print(f"helix-runner: error: {exc}", file=sys.stderr)
        return 2
    configure_logging(config.log_level, config.log_format)
    try:
        asyncio.run(serve(config))
    except StartupError as exc:
        print(f"helix-runner: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
