"""Driving `helix-runner` client verbs from async tests against an in-process server.

``helix(address, verb, ...)`` runs the real entry point (``helix_runner.cli.main``) in a worker
thread, so the verb has its own event loop and gRPC channel while the server keeps serving on the
test's loop; stdout and stderr are captured. ``BackgroundPhase`` reads a RunPhase stream in the
background and waits (bounded) for events, so a test can act on a phase while it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import threading
from dataclasses import dataclass
from typing import Any

import rich.console
import rich.table  # noqa: F401

# Everything a verb imports lazily is imported here, on the main thread: CPython 3.11 can fail to
# compile a module ("AST constructor recursion depth mismatch") when two threads compile at once.
from helix.runner.v1 import runner_service_pb2 as pb
from support.streams import Stream

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


class BackgroundPhase(Stream):
    """A RunPhase call read in the background (``Stream``), started from its ids and options."""

    def __init__(self, stub, job_id: str, phase_id: str, workdir: str, prompt: str = "go", **options: Any):
        from helix.runner.v1 import runner_service_pb2 as pb_

        self.job_id, self.phase_id = job_id, phase_id
        request = pb_.RunPhaseRequest(
            job_id=job_id,
            phase_id=phase_id,
            prompt=prompt,
            working_dir=workdir,
            options=pb_.PhaseOptions(**options),
        )
        super().__init__(stub.RunPhase(request, timeout=120))

    async def finish(self, limit: float = 60.0):
        """The result, once the call ended."""
        return (await super().finish(limit))[1]


__all__ = ["BackgroundPhase", "VerbResult", "helix", "pb", "run_verb"]
