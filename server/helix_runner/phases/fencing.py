"""A phase run's view of the store that turns "another replica took this phase over" into a stop.

On a shared database every write of a phase's history is fenced (docs/scale-out.md): once another
replica has swept the phase, this replica's writes for it raise ``FencedError``. The run must not
crash half-way (its process would be left to the supervisor's cleanup path only) and must not
retry: the write is dropped, the phase's owner-side handling (``on_fenced``) stops the process and
ends its watchers, and the run finishes without touching the store again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence

from helix_runner.store.protocol import FencedError, ModelCostRow, Store, ToolCallRow

log = logging.getLogger(__name__)


class FencedPhaseStore:
    """The store calls a ``PhaseRun`` makes; a ``FencedError`` from one becomes ``on_fenced()`` and
    nothing written (the run's events go through ``PhaseEventLog``, fenced in ``EventWriter``)."""

    def __init__(self, store: Store, on_fenced: Callable[[], None]):
        self._store = store
        self._on_fenced = on_fenced

    def update_phase(self, job_id: str, phase_id: str, now_ns: int, **values: object) -> None:
        try:
            self._store.update_phase(job_id, phase_id, now_ns, **values)
        except FencedError:
            self._on_fenced()

    def upsert_tool_calls(self, job_id: str, phase_id: str, calls: Iterable[ToolCallRow]) -> None:
        try:
            self._store.upsert_tool_calls(job_id, phase_id, calls)
        except FencedError:
            self._on_fenced()

    def replace_model_costs(self, job_id: str, phase_id: str, project_id: str, rows: Sequence[ModelCostRow]) -> None:
        try:
            self._store.replace_model_costs(job_id, phase_id, project_id, rows)
        except FencedError:
            self._on_fenced()

