"""Rows as both stores keep them: statuses and pricing sources by their enum names.

SQLite and PostgreSQL differ in SQL (placeholders, ``IN`` vs ``ANY``) but store the same columns in
the same order, so reading a row back and turning a row into column values is one piece of code.
"""

from __future__ import annotations

from collections.abc import Sequence

from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.pricing import PricingSource
from helix_runner.domain.tool_tracker import ToolCallStatus
from helix_runner.store.protocol import JobRow, ModelCostRow, PhaseRow, ToolCallRow


def phase_row(r: Sequence) -> PhaseRow:
    """A phase read back (columns in ``PhaseRow`` field order)."""
    row = PhaseRow(*r)
    row.status = PhaseStatus[row.status]
    return row


def job_row(r: Sequence) -> JobRow:
    """A job read back: job_id, project_id, status, create_time_ns, update_time_ns, view_version[, sequence_sum]."""
    return JobRow(r[0], r[1], PhaseStatus[r[2]], r[3], r[4], r[5], r[6] if len(r) > 6 else 0)


def tool_call_row(r: Sequence) -> ToolCallRow:
    """A tool call read back (columns in ``ToolCallRow`` field order)."""
    return ToolCallRow(r[0], r[1], ToolCallStatus[r[2]], r[3], r[4], r[5], r[6], r[7])


def model_cost_row(r: Sequence) -> ModelCostRow:
    """Per-model figures read back: the model, its eight figures, then the pricing source by name."""
    return ModelCostRow(*r[:9], PricingSource[r[9]])


def phase_value(column: str, value: object) -> object:
    """A PhaseRow field as stored: the status by its enum name (a bare string is a caller's bug)."""
    if column == "status":
        if not isinstance(value, PhaseStatus):
            raise TypeError(f"status must be a PhaseStatus, not {value!r}")
        return value.name
    return value


def model_cost_values(job_id: str, phase_id: str, project_id: str, r: ModelCostRow) -> tuple:
    """The columns of one ``model_costs`` row, in table order."""
    return (
        job_id,
        phase_id,
        project_id,
        r.model,
        r.input_tokens,
        r.output_tokens,
        r.cache_read_input_tokens,
        r.cache_write_5m_input_tokens,
        r.cache_write_1h_input_tokens,
        r.web_search_requests,
        r.reported_usd,
        r.computed_usd,
        r.pricing_source.name,
    )
