"""Keeps every phase inside the configured workspace roots, checked after resolving symlinks."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from helix_runner.errors import ErrorKind, RunnerError


def resolve_working_dir(requested: str, roots: Sequence[Path], field: str = "working_dir") -> Path:
    """The real directory to run in; INVALID_ARGUMENT unless it is an existing dir inside a root.

    ``field`` names the request field in errors (``options.add_dirs`` is checked the same way).
    """
    path = Path(requested)
    if not path.is_absolute():
        raise RunnerError(ErrorKind.INVALID_ARGUMENT, "INVALID_FIELD", f"{field} must be an absolute path",
                          {"field": field, "path": requested})
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise RunnerError(ErrorKind.INVALID_ARGUMENT, "INVALID_FIELD", f"{field} {requested} does not exist",
                          {"field": field, "path": requested}) from None
    if not real.is_dir():
        raise RunnerError(ErrorKind.INVALID_ARGUMENT, "INVALID_FIELD", f"{field} {requested} is not a directory",
                          {"field": field, "path": requested})
    for root in roots:
        if real == root or root in real.parents:
            return real
    listed = ", ".join(str(r) for r in roots) or "none configured"
    raise RunnerError(
        ErrorKind.INVALID_ARGUMENT,
        "WORKING_DIR_OUTSIDE_ROOTS",
        f"{field} {requested} (resolved to {real}) is outside the workspace roots ({listed}); "
        "the server's --workspace-root (or workspace_roots) says where phases may run",
        {"field": field, "path": requested, "resolved": real, "roots": ":".join(str(r) for r in roots)},
    )
