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
    p.add_argument("--database-url", help="sqlite:///absolute/path (default: in --data-dir) or postgresql://host/db")
    p.add_argument("--replica-id", help="with PostgreSQL: this replica's stable name (default: a new id per start)")
    p.add_argument("--workspace-root", action="append", dest="workspace_roots",
                   help="directory phases may run in (repeatable; default: the current directory)")
    p.add_argument("--claude-path", help="the claude binary (default: $PATH, then the claude-agent-sdk bundle)")
    p.add_argument("--auth-token-file", help="file with the bearer token clients must send (required off loopback)")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    p.add_argument("--log-format", choices=("json", "text"))
    p.add_argument("--offline-script", help="point the CLI at a scripted loopback Messages API (JSON script)")
    p.add_argument("--api-key-file", help="file with the Anthropic API key (default: the server's ANTHROPIC_API_KEY)")
    p.add_argument("--web-port", type=int, help="serve the web dashboard on this HTTP port (default: off; 0 picks one)")
    p.add_argument("--web-host", help="the dashboard's listen address (default 127.0.0.1)")


def _add_run(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run one phase through the service and show live progress")
    p.add_argument("--prompt", required=True)
    p.add_argument("--workdir", required=True, help="absolute path inside one of the server's workspace roots")
    p.add_argument("--server", default="127.0.0.1:50051", help="host:port of the service")
    p.add_argument("--job-id")
    p.add_argument("--phase-id")
    p.add_argument("--project-id", default="")
    p.add_argument("--model", default="")
    p.add_argument("--allowed-tool", action="append", default=[], dest="allowed_tools")
    p.add_argument("--max-turns", type=int, default=0)
    p.add_argument("--timeout", type=float, default=0.0, help="seconds (0: the server's default)")
    p.add_argument("--token-file", help="bearer token file, when the server requires one")


def _add_mock_api(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("mock-api", help="serve a scripted stand-in for the Anthropic Messages API")
    p.add_argument("--script", required=True, help="JSON script (see README, offline mode)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="helix-runner", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_serve(sub)
    _add_run(sub)
    _add_mock_api(sub)
    args = parser.parse_args(argv)

    if args.command == "serve":
        return _serve(args)
    if args.command == "run":
        return _run(args)
    if args.command == "mock-api":
        from helix_runner import scripted_api

        forwarded = ["--script", args.script, "--host", args.host, "--port", str(args.port)]
        return scripted_api.main(forwarded) or 0
    parser.error(f"unknown command {args.command}")
    return 2


def _run(args: argparse.Namespace) -> int:
    from helix_runner import run_client

    workdir = str(Path(args.workdir).expanduser().absolute())
    token = Path(args.token_file).read_text().strip() if args.token_file else None
    request = run_client.build_request(
        prompt=args.prompt, workdir=workdir, job_id=args.job_id, phase_id=args.phase_id,
        project_id=args.project_id, model=args.model, allowed_tools=args.allowed_tools, max_turns=args.max_turns,
        timeout=args.timeout,
    )
    return run_client.run(args.server, request, token=token)


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
