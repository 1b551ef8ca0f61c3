"""Rows as both stores keep them: statuses and pricing sources by their enum names.

SQLite and PostgreSQL differ in SQL (placeholders, ``IN`` vs ``ANY``) but store the same columns in
the same order, so reading a row back and turning a row into column values is one piece of code.
"""

from __future__ import annotations

from collections.abc import Sequence

from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.pricing import PricingSource
from helix_runner.domain.tool_tracker import ToolCallStatus
from helix_runner.store.protocol import (
    JobRow,
    ModelCostRow,
    PhaseRow,
    ToolCallRow,
    WebhookAttemptRow,
    WebhookDeliveryRow,
    WebhookRow,
)

WEBHOOK_COLUMNS = ("subscription_id, project_id, url, secret, events, statuses, cost_threshold_usd, format, "
                   "description, source, create_time_ns, disabled_reason, disabled_time_ns")


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


def webhook_values(r: WebhookRow) -> tuple:
    """The columns of one ``webhook_subscriptions`` row (``WEBHOOK_COLUMNS``): lists as comma-separated names."""
    return (r.subscription_id, r.project_id, r.url, r.secret, ",".join(r.events), ",".join(r.statuses),
            r.cost_threshold_usd, r.format, r.description, r.source, r.create_time_ns, r.disabled_reason,
            r.disabled_time_ns)


def webhook_row(r: Sequence) -> WebhookRow:
    """A subscription read back (``WEBHOOK_COLUMNS``)."""
    return WebhookRow(r[0], r[1], r[2], r[3], tuple(filter(None, r[4].split(","))),
                      tuple(filter(None, r[5].split(","))), r[6], r[7], r[8], r[9], r[10], r[11], r[12])


def webhook_delivery_row(r: Sequence) -> WebhookDeliveryRow:
    """A delivery read back (``sql_store.DELIVERY_COLUMNS``)."""
    return WebhookDeliveryRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], bytes(r[7]), *r[8:])


def webhook_attempt_row(r: Sequence) -> WebhookAttemptRow:
    return WebhookAttemptRow(*r)
