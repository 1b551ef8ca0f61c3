"""Webhook messages ↔ the application's values: CreateWebhook's request, subscriptions and the delivery log.

The proto enums of events and formats are mapped by name to the domain's (``domain/webhooks.py``);
PhaseStatus has the proto's numbers. A subscription's secret never goes into a message here.
"""

from __future__ import annotations

from typing import Any

from helix.runner.v1 import resources_pb2, runner_service_pb2
from helix_runner.api.request_mapping import statuses_from_request
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.webhooks import WebhookEvent, WebhookFormat, WebhookSpec
from helix_runner.errors import invalid_field

_NS = 1_000_000_000
_PREFIX = "WEBHOOK_EVENT_TYPE_"
EVENT_TO_PROTO = {e: resources_pb2.WebhookEventType.Value(_PREFIX + e.name) for e in WebhookEvent}
EVENT_FROM_PROTO = {v: e for e, v in EVENT_TO_PROTO.items()}
EVENT_BY_VALUE = {e.value: v for e, v in EVENT_TO_PROTO.items()}
FORMAT_TO_PROTO = {f: resources_pb2.WebhookFormat.Value("WEBHOOK_FORMAT_" + f.name) for f in WebhookFormat}
FORMAT_FROM_PROTO = {v: f for f, v in FORMAT_TO_PROTO.items()}
STATE_TO_PROTO = {s: resources_pb2.WebhookDeliveryState.Value("WEBHOOK_DELIVERY_STATE_" + s)
                  for s in ("PENDING", "DELIVERED", "DEAD", "CANCELLED")}
STATE_FROM_PROTO = {v: s for s, v in STATE_TO_PROTO.items()}


def _time(field: Any, ns: int) -> None:
    field.seconds, field.nanos = divmod(ns, _NS)


def webhook_spec_from_request(request: runner_service_pb2.CreateWebhookRequest) -> WebhookSpec:
    """The subscription a CreateWebhook asks for (its filters checked by the application)."""
    events = []
    for i, value in enumerate(request.events):
        if value not in EVENT_FROM_PROTO:
            raise invalid_field(f"events[{i}]", "is UNSPECIFIED: name an event type")
        events.append(EVENT_FROM_PROTO[value])
    return WebhookSpec(
        url=request.url, events=tuple(events), project_id=request.project_id,
        statuses=tuple(statuses_from_request(request.statuses)),
        cost_threshold_usd=request.cost_threshold_usd if request.HasField("cost_threshold_usd") else None,
        format=FORMAT_FROM_PROTO.get(request.format, WebhookFormat.STANDARD),
        description=request.description, secret=request.secret)


def states_from_request(values: Any) -> list[str]:
    """A delivery-state filter (UNSPECIFIED is refused: it matches nothing)."""
    out = []
    for i, value in enumerate(values):
        if value not in STATE_FROM_PROTO:
            raise invalid_field(f"states[{i}]", "is UNSPECIFIED: name a delivery state")
        out.append(STATE_FROM_PROTO[value])
    return sorted(set(out))


def webhook_to_proto(row: Any) -> resources_pb2.Webhook:
    """A stored subscription (``store`` WebhookRow) as a message, without its secret."""
    msg = resources_pb2.Webhook(
        webhook_id=row.subscription_id, project_id=row.project_id, url=row.url,
        events=[EVENT_BY_VALUE[e] for e in row.events if e in EVENT_BY_VALUE],
        statuses=[PhaseStatus[s].value for s in row.statuses], format=FORMAT_TO_PROTO[WebhookFormat(row.format)],
        description=row.description, from_config=row.source == "config", disabled_reason=row.disabled_reason)
    if row.cost_threshold_usd is not None:
        msg.cost_threshold_usd = row.cost_threshold_usd
    _time(msg.create_time, row.create_time_ns)
    if row.disabled_time_ns is not None:
        _time(msg.disabled_time, row.disabled_time_ns)
    return msg


def delivery_to_proto(row: Any, attempts: list[Any]) -> resources_pb2.WebhookDelivery:
    """A delivery with its attempts (``store`` WebhookDeliveryRow and WebhookAttemptRows) as a message."""
    msg = resources_pb2.WebhookDelivery(
        delivery_id=row.delivery_id, webhook_id=row.subscription_id,
        event=EVENT_BY_VALUE.get(row.event_type, 0), job_id=row.job_id, phase_id=row.phase_id,
        sequence=row.sequence, state=STATE_TO_PROTO.get(row.state, 0), attempt_count=row.attempts,
        body=row.body.decode("utf-8", "replace"), last_status_code=row.last_status_code or 0,
        last_error=row.last_error)
    _time(msg.create_time, row.create_time_ns)
    if row.state == "PENDING":
        _time(msg.next_attempt_time, row.next_attempt_ns)
    if row.end_time_ns is not None:
        _time(msg.end_time, row.end_time_ns)
    for a in attempts:
        item = msg.attempts.add(attempt=a.attempt, status_code=a.status_code or 0, error=a.error,
                                replica_id=a.replica_id)
        _time(item.time, a.time_ns)
        item.latency.seconds, item.latency.nanos = divmod(a.latency_ns, _NS)
    return msg
