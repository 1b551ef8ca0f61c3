"""The ``helix-runner`` entry point: argument parsing, dispatch, and errors as one line.

Verbs live one group per module (``serve``, ``run``, ``read``, ``control``, ``watch``, ``attach``,
``webhooks``);
each registers its parser and a handler that returns the exit status. Heavy imports (grpc, the
client, rich, textual) happen inside handlers, so ``serve`` and ``--help`` start quickly.
"""

from __future__ import annotations

import argparse
import sys

from helix_runner.cli import access, attach, control, fork, read, run, serve, watch, webhooks
from helix_runner.cli.common import (
    ENV_HELP,
    EXIT_CODES_HELP,
    EXIT_INTERRUPTED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    CliError,
    Connection,
)

DESCRIPTION = """\
helix-runner: `serve` runs the service; every other verb is a client of its public gRPC API
(local by default, or remote with --server, a token and TLS).

debugging a phase:
  helix-runner sessions                       what is running now
  helix-runner attach JOB PHASE               live dashboard with keys for pause/step/approve/deny/edit
  helix-runner watch JOB PHASE --filter tools live event lines
  helix-runner break add JOB PHASE --tool Bash; approve / deny -m MSG / edit --input JSON
  helix-runner replay JOB PHASE --speed 10    the recording again, at ten times its pace
  helix-runner fork JOB PHASE --at TOOL_USE_ID [--deny REASON]  what if that call had gone otherwise
  helix-runner rewind JOB PHASE --turn N      a paused phase back to the end of turn N, in place"""


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag as one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"helix-runner: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="helix-runner",
        description=DESCRIPTION,
        epilog=EXIT_CODES_HELP + "\n\n" + ENV_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="VERB")
    serve.register(sub)
    run.register(sub)
    read.register(sub)
    access.register(sub)
    watch.register(sub)
    attach.register(sub)
    control.register(sub)
    webhooks.register(sub)
    fork.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except CliError as exc:
        _error(exc.message, interrupted=exc.code == EXIT_INTERRUPTED)
        return exc.code
    except KeyboardInterrupt:
        _error("interrupted", interrupted=True)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `helix-runner watch ... | head`: the reader left; not an error
        _quiet_stdout()
        return 0
    except Exception as exc:
        from helix_runner_client import RunnerError

        if not isinstance(exc, RunnerError):
            raise
        from helix_runner.cli.common import describe_error

        target = _target(args)
        line, code = describe_error(exc, target)
        _error(line)
        return code


def _target(args: argparse.Namespace) -> str:
    try:
        return Connection.from_args(args).target
    except (CliError, AttributeError):
        return "the server"


def _error(message: str, *, interrupted: bool = False) -> None:
    sys.stdout.flush()
    # On a terminal Ctrl-C leaves the cursor after the echoed ^C (or a redrawn progress line):
    # the message starts on a line of its own.
    start = "\n" if interrupted and sys.stderr.isatty() else ""
    print(f"{start}helix-runner: {message}" if interrupted else f"helix-runner: error: {message}", file=sys.stderr)


def _quiet_stdout() -> None:
    import os

    # Python would report the broken pipe again when it flushes stdout at exit.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


__all__ = ["EXIT_UNREACHABLE", "build_parser", "main"]

if __name__ == "__main__":
    sys.exit(main())
