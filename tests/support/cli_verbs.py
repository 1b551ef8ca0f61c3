"""Driving `helix-runner` client verbs from async tests against an in-process server.

``helix(address, verb, ...)`` runs the real entry point (``helix_runner.cli.main``) in a worker
thread, so the verb has its own event loop and gRPC channel while the server keeps serving on the
test's loop; stdout and stderr are captured. A phase to act on while it runs is started with
``support.streams.PhaseCall``.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import threading
from dataclasses import dataclass

import rich.console
import rich.table  # noqa: F401

# Everything a verb imports lazily is imported here, on the main thread: CPython 3.11 can fail to
# compile a module ("AST constructor recursion depth mismatch") when two threads compile at once.
from helix.runner.v1 import runner_service_pb2 as pb

_CAPTURE_LOCK = threading.Lock()  # redirect_stdout is process-wide: one verb at a time captures


@dataclass(frozen=True)
class VerbResult:
    """Exit status and output of one verb."""

    code: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return [line.rstrip() for line in self.out.splitlines() if line.strip()]


def run_verb(*argv: str) -> VerbResult:
    """`helix-runner *argv` in this thread, output captured (argparse exits become the status)."""
    from helix_runner.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with _CAPTURE_LOCK, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse usage errors and --help
            code = exc.code if isinstance(exc.code, int) else 2
    return VerbResult(code, out.getvalue(), err.getvalue())


async def helix(address: str, *argv: str, limit: float = 60.0) -> VerbResult:
    """`helix-runner *argv --server address` in a worker thread, bounded by ``limit`` seconds."""
    return await asyncio.wait_for(asyncio.to_thread(run_verb, *argv, "--server", address), limit)


__all__ = ["VerbResult", "helix", "pb", "run_verb"]
