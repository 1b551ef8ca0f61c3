"""A running phase's rows: what its events change in the store besides the event log itself.

``PhaseRecorder`` is one step of the run's fan-out (``on_events``): it writes the session and the
model to the phase row when they change, upserts the tool calls a batch started or finished, and
rewrites the phase's cost columns and per-model cost rows after a cost update or a turn result.
It is handed the ids, the store and the phase's ``PhaseStream`` (whose figures it writes), never
the run: ``phases/run.py`` imports it, and a recorder that knew the run would close an import circle.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from helix_runner.domain.events import (
    CostUpdate,
    Event,
    SessionInit,
    ToolCallFinished,
    ToolCallStarted,
    TurnResult,
)
from helix_runner.domain.phase_stream import PhaseStream
from helix_runner.domain.tool_tracker import ToolCall
from helix_runner.phases.ports import RecordEncoder, RunStore
from helix_runner.store.protocol import ModelCostRow, ToolCallRow

# The payloads that change what the recorder writes (payload classes have no subclasses).
_RECORDED = frozenset({SessionInit, ToolCallStarted, ToolCallFinished, CostUpdate, TurnResult})


class PhaseRecorder:
    """Writes one phase's tool-call rows, cost columns and rows, session and model as its events come."""

    def __init__(self, store: RunStore, encoder: RecordEncoder, job_id: str, phase_id: str, project: str,
                 stream: PhaseStream):
        self.store = store
        self.encoder = encoder
        self.job_id = job_id
        self.phase_id = phase_id
        # The project as every other record names it ("default" for none), so its totals find these rows.
        self.project = project
        self.stream = stream
        self._session_id = ""
        self._model = ""
        self._cost_dirty = False

    def on_events(self, events: list[Event]) -> None:
        """The run's fan-out step: the session and model, the tool calls and the cost the batch changed."""
        touched: dict[str, None] = {}
        # By class, not isinstance: this runs for every event, and the payload classes are final.
        for e in events:
            p = e.payload
            cls = p.__class__
            if cls not in _RECORDED:
                continue
            if cls is SessionInit:
                self._session(e.session_id, p.model)  # type: ignore[union-attr]
            elif cls is ToolCallStarted or cls is ToolCallFinished:
                touched[p.tool_use_id] = None  # type: ignore[union-attr]
            else:  # CostUpdate, TurnResult
                self._cost_dirty = True
        if touched:
            self.write_tools([c for c in (self.stream.tools.get(t) for t in touched) if c is not None])
        if self._cost_dirty:
            self.write_cost()

    def model_switched(self, model: str) -> None:
        """A SetPhaseModel took effect: the phase row shows the new model ("" = the session's default, unnamed)."""
        if model:
            self._session(self._session_id, model)

    def _session(self, session_id: str, model: str) -> None:
        if session_id != self._session_id or model != self._model:
            self._session_id, self._model = session_id, model
            self.store.update_phase(self.job_id, self.phase_id, time.time_ns(), session_id=session_id, model=model)

    def write_tools(self, calls: Iterable[ToolCall]) -> None:
        """Upserts these tool calls' rows."""
        encoder, job, phase = self.encoder, self.job_id, self.phase_id
        self.store.upsert_tool_calls(job, phase, [
            ToolCallRow(c.tool_use_id, c.name, c.status, c.start_sequence, encoder.encode_tool_call(job, phase, c),
                        duration_ns=None if c.end_time_ns is None else max(c.end_time_ns - c.start_time_ns, 0))
            for c in calls
        ])

    def write_cost(self, *, force: bool = False) -> None:
        """Rewrites the cost columns and the per-model rows if they changed since (``force``: anyway)."""
        if not (self._cost_dirty or force):
            return
        self._cost_dirty = False
        cost = self.stream.cost
        self.store.update_phase(
            self.job_id, self.phase_id, time.time_ns(), cost_pb=self.encoder.encode_cost(cost),
            reported_usd=cost.reported_usd, computed_usd=cost.computed_usd, computed_only=int(cost.computed_only),
        )
        self.store.replace_model_costs(self.job_id, self.phase_id, self.project, [
            ModelCostRow(m.model, m.tokens.input_tokens, m.tokens.output_tokens, m.tokens.cache_read_input_tokens,
                         m.tokens.cache_write_5m_input_tokens, m.tokens.cache_write_1h_input_tokens,
                         m.tokens.web_search_requests, m.reported_usd, m.computed_usd, m.pricing_source)
            for m in cost.models
        ])
