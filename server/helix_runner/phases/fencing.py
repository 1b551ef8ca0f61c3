"""A phase run's view of the store that turns "another replica took this phase over" into a stop.

On a shared database every write of a phase's history is fenced (docs/scale-out.md): once another
replica has swept the phase, this replica's writes for it raise ``FencedError``. The run must not
crash half-way (its process would be left to the supervisor's cleanup path only) and must not
retry: the write is dropped, the phase's owner-side handling (``on_fenced``) stops the process and
ends its watchers, and the run finishes without touching the store again.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from helix_runner.store.protocol import FencedError

log = logging.getLogger(__name__)


class FencedPhaseStore:
    """Delegates to the store; a ``FencedError`` from any call becomes ``on_fenced()`` and a ``None`` result."""

    def __init__(self, store: Any, on_fenced: Callable[[], None]):
        self._store = store
        self._on_fenced = on_fenced

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr):
            return attr

        @functools.wraps(attr)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return attr(*args, **kwargs)
            except FencedError:
                self._on_fenced()
                return None

        return call
