"""Webhook subscriptions (create, list, delete, the config file's) and the outbox rows a phase's events cause.

``Webhooks`` keeps the store's subscriptions in memory (refreshed on every change here and, on a
shared database, by the dispatcher's poll, so one created on another replica takes effect within a
poll interval) and turns notifications into outbox rows: one per wanting subscription, its body
rendered once (``domain/webhooks.py``). ``PhaseNotifier`` is one phase's part: its run hands it
each batch of events and gets back the rows to write in the same transaction as those events
(``phases/event_log.py``). Secrets are validated here, stored, and never logged or returned except
once, to the caller that created the subscription without one.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from helix_runner.domain.addresses import OperatorExceptions
from helix_runner.domain.events import Event
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.webhooks import (
    Notification,
    NotificationMapper,
    Subscription,
    WebhookEvent,
    WebhookFormat,
    WebhookSpec,
    check_subscription,
    queue_full,
    quota_exceeded,
    render_body,
)
from helix_runner.errors import ErrorKind, RunnerError, invalid_field
from helix_runner.store.protocol import (
    AlreadyExistsError,
    OutboxRow,
    Store,
    WebhookAttemptRow,
    WebhookDeliveryRow,
    WebhookRow,
)
from helix_runner.webhook_http.signing import check_secret, new_secret
from helix_runner.webhook_http.target import WebhookUrl

log = logging.getLogger(__name__)

MAX_SUBSCRIPTIONS = 1000


def new_delivery_id() -> str:
    """A delivery's ``webhook-id`` (Standard Webhooks' ``msg_`` form), the same on every retry."""
    return "msg_" + uuid.uuid4().hex


def filters_of(row: WebhookRow) -> Subscription:
    """The domain's view of a stored subscription (what it wants; no URL, no secret)."""
    return Subscription(row.subscription_id, row.project_id, frozenset(WebhookEvent(e) for e in row.events),
                        frozenset(PhaseStatus[s] for s in row.statuses), row.cost_threshold_usd,
                        WebhookFormat(row.format))


@dataclass
class _Active:
    filters: tuple[Subscription, ...] = ()
    events: frozenset[WebhookEvent] = frozenset()
    rows: dict[str, WebhookRow] = field(default_factory=dict)


class Webhooks:
    """The server's webhook subscriptions: commands, the in-memory filters, and outbox rows."""

    def __init__(self, store: Store, *, exceptions: OperatorExceptions | None = None,
                 dashboard_url: str = "", clock: Callable[[], int] = time.time_ns):
        self.store = store
        self.exceptions = exceptions or OperatorExceptions()
        self.dashboard_url = dashboard_url
        self.clock = clock
        self._active = _Active()
        self.on_change: Callable[[], None] = lambda: None  # the dispatcher's wake-up

    # -- the in-memory view ----------------------------------------------------------------------

    def refresh(self) -> None:
        """Reads the subscriptions from the store (enabled ones filter events; all are kept for delivery)."""
        rows = {r.subscription_id: r for r in self.store.list_webhooks()}
        enabled = [filters_of(r) for r in rows.values() if r.disabled_time_ns is None]
        self._active = _Active(tuple(enabled), frozenset(e for s in enabled for e in s.events), rows)

    @property
    def any(self) -> bool:
        """Whether any subscription exists (enabled or not): without one there is nothing to deliver."""
        return bool(self._active.rows)

    def wants(self, event: WebhookEvent) -> bool:
        return event in self._active.events

    def row(self, subscription_id: str) -> WebhookRow | None:
        """A subscription with its URL and secret (for delivery), read again if this replica does not know it."""
        row = self._active.rows.get(subscription_id)
        if row is None:
            self.refresh()
            row = self._active.rows.get(subscription_id)
        return row

    def outbox(self, notifications: Sequence[Notification]) -> list[OutboxRow]:
        """One row per (notification, subscription that wants it), in notification order."""
        active = self._active.filters
        rows = []
        for n in notifications:
            for sub in active:
                if sub.wants(n):
                    rows.append(OutboxRow(new_delivery_id(), sub.subscription_id, n.event.value, n.job_id, n.phase_id,
                                          n.sequence, render_body(n, sub.format, self.dashboard_url),
                                          self.clock()))
        return rows

    def notifier(self, job_id: str, phase_id: str, project_id: str, job_done: Callable[[], bool],
                 cost_usd: float = 0.0) -> PhaseNotifier:
        """A phase's notifier; ``cost_usd``: its cost so far (a phase recovered or swept after a crash)."""
        return PhaseNotifier(self, NotificationMapper(job_id, phase_id, project_id, cost_usd), job_done)

    def queue_full(self, job_id: str, phase_id: str, project_id: str, refusal: RunnerError) -> None:
        """A RunPhase was refused by a full queue: its deliveries, in a transaction of their own."""
        if not self.wants(WebhookEvent.QUEUE_FULL):
            return
        details = {k: v for k, v in refusal.metadata.items() if k in ("scope", "limit", "retry_after_ms")}
        rows = self.outbox([queue_full(job_id, phase_id, project_id, self.clock(), refusal.message, details)])
        if rows:
            self.store.enqueue_webhooks(rows)
            self.on_change()

    def quota_exceeded(self, job_id: str, phase_id: str, project_id: str, reason: str,
                       details: dict[str, object]) -> None:
        """A project reached a spend quota (a phase refused or paused): deliveries in a transaction of their own."""
        if not self.wants(WebhookEvent.QUOTA_EXCEEDED):
            return
        rows = self.outbox([quota_exceeded(job_id, phase_id, project_id, self.clock(), reason, details)])
        if rows:
            self.store.enqueue_webhooks(rows)
            self.on_change()

    # -- commands ----------------------------------------------------------------------------------

    def create(self, spec: WebhookSpec, *, source: str = "api") -> tuple[WebhookRow, str]:
        """Validates and stores a subscription; returns it and its secret (made here when not given)."""
        row, secret = self._row(spec, source)
        if len(self.store.list_webhooks()) >= MAX_SUBSCRIPTIONS:
            raise RunnerError(ErrorKind.RESOURCE_EXHAUSTED, "TOO_MANY_WEBHOOKS",
                              f"this server has {MAX_SUBSCRIPTIONS} webhooks already; delete one first",
                              {"limit": MAX_SUBSCRIPTIONS})
        try:
            self.store.create_webhook(row)
        except AlreadyExistsError:  # a random id: not expected
            raise RunnerError(ErrorKind.ALREADY_EXISTS, "INVALID_FIELD", f"webhook_id: {row.subscription_id} exists",
                              {"field": "webhook_id", "webhook_id": row.subscription_id}) from None
        log.info("webhook created", extra={"fields": _log_fields(row)})  # never the secret
        self._changed()
        return row, secret

    def list(self, project_id: str = "") -> list[WebhookRow]:
        return self.store.list_webhooks(project_id or None)

    def delete(self, subscription_id: str) -> tuple[WebhookRow, int]:
        """Deletes an API subscription; returns it and how many pending deliveries were cancelled."""
        row = self.store.get_webhook(subscription_id)
        if row is None:
            raise _not_found(subscription_id)
        if row.source == "config":
            raise RunnerError(ErrorKind.FAILED_PRECONDITION, "WEBHOOK_FROM_CONFIG",
                              f"webhook {subscription_id} is defined in the server's config file; remove it there",
                              {"webhook_id": subscription_id})
        cancelled = self.store.delete_webhook(subscription_id, self.clock())
        if cancelled is None:
            raise _not_found(subscription_id)
        log.info("webhook deleted", extra={"fields": {**_log_fields(row), "cancelled_deliveries": cancelled}})
        self._changed()
        return row, cancelled

    def deliveries(self, webhook_id: str, job_id: str, phase_id: str, states: Sequence[str], limit: int,
                   before: int | None) -> tuple[list[tuple[WebhookDeliveryRow, list[WebhookAttemptRow]]], int | None]:
        """A page of the delivery log, newest first, each delivery with its attempts; and the next page's
        position (None: this is the last page)."""
        if phase_id and not job_id:
            raise invalid_field("phase_id", "requires job_id")
        rows = self.store.list_webhook_deliveries(webhook_id or None, job_id or None, phase_id or None, states,
                                                  limit + 1, before)
        more = len(rows) > limit
        rows = rows[:limit]
        attempts: dict[str, list[WebhookAttemptRow]] = {}
        for a in self.store.webhook_attempts([r.delivery_id for r in rows]):
            attempts.setdefault(a.delivery_id, []).append(a)
        return [(r, attempts.get(r.delivery_id, [])) for r in rows], (rows[-1].order if more else None)

    def load_config(self, specs: Sequence[WebhookSpec]) -> None:
        """Makes the stored config subscriptions the config file's (RunnerError naming a bad one)."""
        rows = [self._row(spec, "config")[0] for spec in specs]
        self.store.replace_config_webhooks(rows)
        self.refresh()

    def _row(self, spec: WebhookSpec, source: str) -> tuple[WebhookRow, str]:
        try:
            url = WebhookUrl.parse(spec.url)
        except ValueError as exc:
            raise invalid_field("url", str(exc), url=spec.url[:200]) from None
        why = url.literal_refusal(self.exceptions)
        if why is not None:
            raise RunnerError(ErrorKind.INVALID_ARGUMENT, "WEBHOOK_DESTINATION_REFUSED",
                              f"url: {why}", {"field": "url", "host": url.host, "port": url.port, "problem": why})
        problems = check_subscription(spec.events, spec.statuses, spec.cost_threshold_usd, spec.project_id,
                                      spec.description)
        if problems:
            name, problem = problems[0]
            # The request's values the message names are in the ErrorInfo too.
            values = {"statuses": ",".join(s.name for s in spec.statuses)} if name == "statuses" else {}
            raise invalid_field(name, problem, **values)
        secret = spec.secret or new_secret()
        bad = check_secret(secret)
        if bad is not None:
            raise invalid_field("secret", bad)  # never the secret itself
        return WebhookRow(
            subscription_id=spec.subscription_id or "wh_" + uuid.uuid4().hex[:20], project_id=spec.project_id,
            url=spec.url, secret=secret, events=tuple(e.value for e in _unique(spec.events)),
            statuses=tuple(s.name for s in _unique(spec.statuses)), cost_threshold_usd=spec.cost_threshold_usd,
            format=spec.format.value, description=spec.description, source=source, create_time_ns=self.clock(),
        ), secret

    def _changed(self) -> None:
        self.refresh()
        self.on_change()


class PhaseNotifier:
    """One phase's events → the outbox rows they cause (written in the same transaction as the events)."""

    __slots__ = ("webhooks", "mapper", "job_done")

    def __init__(self, webhooks: Webhooks, mapper: NotificationMapper, job_done: Callable[[], bool]):
        self.webhooks = webhooks
        self.mapper = mapper
        self.job_done = job_done

    def outbox(self, events: Sequence[Event]) -> list[OutboxRow]:
        notes = self.mapper.map(events, self._job_done)  # always: it keeps the phase's cost
        return self.webhooks.outbox(notes) if notes else []

    def _job_done(self) -> bool:
        # A store read only when someone listens for job.finished.
        return self.webhooks.wants(WebhookEvent.JOB_FINISHED) and self.job_done()


def _unique(values: Sequence[Any]) -> list[Any]:
    return list(dict.fromkeys(values))


def _not_found(subscription_id: str) -> RunnerError:
    return RunnerError(ErrorKind.NOT_FOUND, "WEBHOOK_NOT_FOUND", f"webhook {subscription_id} does not exist",
                       {"webhook_id": subscription_id})


def _log_fields(row: WebhookRow) -> Mapping[str, object]:
    # Only the URL's origin: a path may itself be a credential (a Slack incoming-webhook URL is one).
    url = WebhookUrl.parse(row.url)
    return {"webhook_id": row.subscription_id, "project_id": row.project_id,
            "destination": f"{url.scheme}://{url.host}:{url.port}", "events": list(row.events), "source": row.source}
