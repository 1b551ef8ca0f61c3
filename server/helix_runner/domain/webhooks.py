"""Webhook notifications (issue 26): which phase events tell whom, in what body, and when to retry (pure).

A phase's domain events map to notifications deterministically (``NotificationMapper``, one per
phase, which remembers only the cost it saw last): a phase reaching a final status
(``phase.finished``, and ``job.finished`` when no other phase of its job is still active), a tool
call held at a breakpoint (``phase.awaiting_approval``), a scheduled retry
(``phase.retry_scheduled``) and every cost update (``phase.cost``, a candidate that a subscription
takes only when it carries the phase across the subscription's threshold). A refusal by a full
queue (``queue.full``) is no phase event; the service builds it (``queue_full``), and so a
project's spend quota reached (``quota.exceeded``, ``quota_exceeded``). A
``Subscription`` says which notifications it wants (``Subscription.wants``); each wanted one
becomes an outbox row in the same transaction as the event it comes from (``store``), so the
mapping must be the same every time it runs over the same events.

The body is the Standard Webhooks payload shape (``{"type", "timestamp", "data"}``) or, for a
Slack incoming-webhook URL, ``{"text": ...}``; its ``data.sequence`` is the phase's event
sequence of the cause, so a receiver can order and deduplicate by it. Retries back off
exponentially with jitter and never come sooner than a ``Retry-After`` asked for.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from urllib.parse import quote

import orjson

from helix_runner.domain.events import ControlEvent, ControlEventKind, CostUpdate, Event, PhaseStatusChanged
from helix_runner.domain.phase_status import FINAL_STATUSES, PhaseStatus


class WebhookEvent(enum.Enum):
    """A kind of notification; the value is the body's ``type``."""

    PHASE_FINISHED = "phase.finished"
    PHASE_AWAITING_APPROVAL = "phase.awaiting_approval"
    PHASE_COST_THRESHOLD = "phase.cost_threshold"
    PHASE_RETRY_SCHEDULED = "phase.retry_scheduled"
    QUEUE_FULL = "queue.full"
    JOB_FINISHED = "job.finished"
    QUOTA_EXCEEDED = "quota.exceeded"


class WebhookFormat(enum.Enum):
    """How a subscription's bodies look: Standard Webhooks JSON, or a Slack incoming-webhook message."""

    STANDARD = "standard"
    SLACK = "slack"


# Bounds of a subscription (checked when one is created, from the API or the config file).
MAX_URL_LENGTH = 2048
MAX_DESCRIPTION_LENGTH = 256
MAX_COST_THRESHOLD_USD = 1_000_000.0
# Held-call input carried in a body (the event's own bound is 64 KiB; a notification stays small).
MAX_INPUT_CHARS = 1024
_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


@dataclass(frozen=True)
class Subscription:
    """What one webhook subscription wants to hear about (its URL and secret stay with the store).

    ``project_id`` "" is server-wide. ``statuses`` narrows ``phase.finished`` and ``job.finished``
    to those final statuses (empty: any). ``cost_threshold_usd`` is the threshold
    ``phase.cost_threshold`` fires at, once per phase, when a cost update carries the phase's cost
    from below it to at or above it.
    """

    subscription_id: str
    project_id: str = ""
    events: frozenset[WebhookEvent] = frozenset()
    statuses: frozenset[PhaseStatus] = frozenset()
    cost_threshold_usd: float | None = None
    format: WebhookFormat = WebhookFormat.STANDARD

    def wants(self, n: Notification) -> bool:
        if n.event not in self.events or (self.project_id and self.project_id != n.project_id):
            return False
        if n.event in (WebhookEvent.PHASE_FINISHED, WebhookEvent.JOB_FINISHED):
            return not self.statuses or n.status in self.statuses
        if n.event is WebhookEvent.PHASE_COST_THRESHOLD:
            threshold = self.cost_threshold_usd
            return threshold is not None and n.previous_cost_usd < threshold <= n.cost_usd
        return True


@dataclass(frozen=True)
class WebhookSpec:
    """A subscription as asked for (the API's CreateWebhook, or a ``[[webhooks]]`` table of the config file)."""

    url: str
    events: tuple[WebhookEvent, ...]
    project_id: str = ""
    statuses: tuple[PhaseStatus, ...] = ()
    cost_threshold_usd: float | None = None
    format: WebhookFormat = WebhookFormat.STANDARD
    description: str = ""
    secret: str = ""  # empty: the server makes one (returned once)
    subscription_id: str = ""  # the config file's names; the API's are made here


def check_subscription(events: Iterable[WebhookEvent], statuses: Iterable[PhaseStatus],
                       cost_threshold_usd: float | None, project_id: str, description: str) -> list[tuple[str, str]]:
    """What is wrong with a subscription's filters, as (field, problem) pairs; empty when nothing is."""
    events, statuses = set(events), set(statuses)
    problems = []
    if not events:
        problems.append(("events", "name at least one event type"))
    bad = sorted(s.name for s in statuses if s not in FINAL_STATUSES)
    if bad:
        problems.append(("statuses", f"{', '.join(bad)} is not a final status (the filter of phase.finished and "
                                     "job.finished)"))
    if statuses and not events & {WebhookEvent.PHASE_FINISHED, WebhookEvent.JOB_FINISHED}:
        problems.append(("statuses", "filters phase.finished and job.finished, and neither is subscribed"))
    if WebhookEvent.PHASE_COST_THRESHOLD in events:
        if cost_threshold_usd is None:
            problems.append(("cost_threshold_usd", "phase.cost_threshold needs a threshold"))
        elif not (math.isfinite(cost_threshold_usd) and 0 < cost_threshold_usd <= MAX_COST_THRESHOLD_USD):
            problems.append(("cost_threshold_usd", f"must be above 0 and at most {MAX_COST_THRESHOLD_USD:g}"))
    elif cost_threshold_usd is not None:
        problems.append(("cost_threshold_usd", "is the threshold of phase.cost_threshold, which is not subscribed"))
    if project_id and not _ID.match(project_id):
        problems.append(("project_id", "must be 1-128 characters of letters, digits, '.', '_', ':' or '-'"))
    if len(description) > MAX_DESCRIPTION_LENGTH:
        problems.append(("description", f"must be at most {MAX_DESCRIPTION_LENGTH} characters"))
    return problems


@dataclass(frozen=True)
class Notification:
    """One thing that happened that subscriptions may want to hear about.

    ``sequence``: the phase's event sequence of the cause (0 for ``queue.full``: no event). Cost
    figures are the phase's cost in USD after the cause (reported when the CLI reported one, else
    computed); ``previous_cost_usd`` is the cost before it (``phase.cost_threshold``).
    """

    event: WebhookEvent
    job_id: str
    phase_id: str
    project_id: str
    sequence: int
    time_ns: int
    status: PhaseStatus | None = None
    reason: str = ""
    cost_usd: float = 0.0
    previous_cost_usd: float = 0.0
    details: dict[str, object] = field(default_factory=dict)


class NotificationMapper:
    """Maps one phase's events, batch by batch, to the notifications they cause.

    Deterministic: the same events in the same order give the same notifications. ``job_done`` is
    asked only when the phase reaches a final status: whether no other phase of the job is active,
    which makes it ``job.finished`` too.
    """

    __slots__ = ("job_id", "phase_id", "project_id", "cost_usd", "status")

    def __init__(self, job_id: str, phase_id: str, project_id: str, cost_usd: float = 0.0):
        self.job_id, self.phase_id, self.project_id = job_id, phase_id, project_id
        self.cost_usd = cost_usd
        self.status: PhaseStatus | None = None

    def map(self, events: Sequence[Event], job_done: Callable[[], bool] = lambda: False) -> list[Notification]:
        out: list[Notification] = []
        for e in events:
            p = e.payload
            kind = type(p)  # on every event of every phase: exact type checks, the cheapest test
            if kind is not CostUpdate and kind is not PhaseStatusChanged and kind is not ControlEvent:
                continue
            if kind is CostUpdate:
                cost = _cost(p)
                if cost > self.cost_usd:
                    out.append(self._note(WebhookEvent.PHASE_COST_THRESHOLD, e, previous_cost_usd=self.cost_usd,
                                          cost_usd=cost))
                self.cost_usd = max(self.cost_usd, cost)
            elif kind is PhaseStatusChanged:
                self.status = p.to_status
                if p.to_status in FINAL_STATUSES and p.from_status not in FINAL_STATUSES:
                    out.append(self._note(WebhookEvent.PHASE_FINISHED, e, reason=p.reason))
                    if job_done():
                        out.append(self._note(WebhookEvent.JOB_FINISHED, e, reason=p.reason))
            else:  # a ControlEvent
                if p.kind is ControlEventKind.BREAKPOINT_HIT:
                    out.append(self._note(WebhookEvent.PHASE_AWAITING_APPROVAL, e, status=PhaseStatus.AWAITING_APPROVAL,
                                          reason=f"tool call {p.tool_name} ({p.tool_use_id}) held: breakpoint "
                                                 f"{p.breakpoint_id}",
                                          details={"tool_name": p.tool_name, "tool_use_id": p.tool_use_id,
                                                   "breakpoint_id": p.breakpoint_id,
                                                   "input_json": p.input_json[:MAX_INPUT_CHARS]}))
                elif p.kind is ControlEventKind.RETRY_SCHEDULED:
                    out.append(self._note(WebhookEvent.PHASE_RETRY_SCHEDULED, e, status=PhaseStatus.QUEUED,
                                          reason=p.message,
                                          details={"attempt": p.attempt, "max_attempts": p.max_attempts,
                                                   "end_kind": p.end_kind.name,
                                                   "retry_delay_ms": (p.retry_delay_ns or 0) // 1_000_000}))
        return out

    def _note(self, event: WebhookEvent, e: Event, **values: object) -> Notification:
        values.setdefault("status", self.status)
        values.setdefault("cost_usd", self.cost_usd)
        return Notification(event, self.job_id, self.phase_id, self.project_id, e.sequence, e.receive_time_ns,
                            **values)  # type: ignore[arg-type]


def _cost(update: CostUpdate) -> float:
    c = update.cost
    return c.reported_usd if c.reported_usd is not None else c.computed_usd


def queue_full(job_id: str, phase_id: str, project_id: str, now_ns: int, reason: str,
               details: dict[str, object]) -> Notification:
    """A RunPhase refused because the admission queue was full (no phase was recorded)."""
    return Notification(WebhookEvent.QUEUE_FULL, job_id, phase_id, project_id, 0, now_ns, reason=reason,
                        details=details)


def quota_exceeded(job_id: str, phase_id: str, project_id: str, now_ns: int, reason: str,
                   details: dict[str, object]) -> Notification:
    """A project reached a spend quota: a new phase was refused, or a running one paused."""
    return Notification(WebhookEvent.QUOTA_EXCEEDED, job_id, phase_id, project_id, 0, now_ns, reason=reason,
                        details=details)


# -- bodies ------------------------------------------------------------------------------------------


def phase_link(dashboard_url: str, job_id: str, phase_id: str) -> str:
    """The dashboard's page of the phase (its hash route, ``web/src/main.tsx``); "" without a base URL."""
    if not dashboard_url:
        return ""
    base = dashboard_url.rstrip("/")
    job = quote(job_id, safe="")
    return f"{base}/#/jobs/{job}/phases/{quote(phase_id, safe='')}" if phase_id else f"{base}/#/jobs/{job}"


def render_body(n: Notification, fmt: WebhookFormat, dashboard_url: str) -> bytes:
    """The body every delivery attempt of ``n`` sends (compact JSON, UTF-8)."""
    link = phase_link(dashboard_url, n.job_id, n.phase_id)
    if fmt is WebhookFormat.SLACK:
        return orjson.dumps({"text": slack_text(n, link)})
    data: dict[str, object] = {
        "job_id": n.job_id,
        "phase_id": n.phase_id,
        "project_id": n.project_id,
        "sequence": n.sequence,
        "status": n.status.name if n.status is not None else "",
        "reason": n.reason,
        "cost_usd": round(n.cost_usd, 6),
        "url": link,
    }
    if n.event is WebhookEvent.PHASE_COST_THRESHOLD:
        data["previous_cost_usd"] = round(n.previous_cost_usd, 6)
    data.update(n.details)
    return orjson.dumps({"type": n.event.value, "timestamp": _rfc3339(n.time_ns), "data": data})


def slack_text(n: Notification, link: str) -> str:
    """One line a person reads in a channel (Slack's mrkdwn: ``<url|label>`` links)."""
    name = f"{n.job_id}/{n.phase_id}" if n.phase_id else n.job_id
    where = f"<{link}|{_slack_escape(name)}>" if link else _slack_escape(name)
    cost = f" (${n.cost_usd:.4f})" if n.cost_usd else ""
    what = {
        WebhookEvent.PHASE_FINISHED: f"phase {where} ended {n.status.name if n.status else ''}{cost}",
        WebhookEvent.JOB_FINISHED: f"job {where} finished: its last phase ended "
                                   f"{n.status.name if n.status else ''}{cost}",
        WebhookEvent.PHASE_AWAITING_APPROVAL: f"phase {where} needs approval: {n.details.get('tool_name', 'a tool')} "
                                              "call held at a breakpoint",
        WebhookEvent.PHASE_COST_THRESHOLD: f"phase {where} crossed its cost threshold: now ${n.cost_usd:.4f}",
        WebhookEvent.PHASE_RETRY_SCHEDULED: f"phase {where} will retry: attempt {n.details.get('attempt', '?')} of "
                                            f"{n.details.get('max_attempts', '?')} ended",
        WebhookEvent.QUEUE_FULL: f"phase {where} was refused: the admission queue is full",
        WebhookEvent.QUOTA_EXCEEDED: f"project {_slack_escape(n.project_id)} reached a spend quota "
                                     f"({n.details.get('action', 'refused')}: {where})",
    }[n.event]
    reason = f" — {_slack_escape(n.reason[:300])}" if n.reason else ""
    return f"Helix Runner: {what}{reason}"


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _rfc3339(ns: int) -> str:
    """UTC with microseconds (as Standard Webhooks' examples), from integer nanoseconds (no float rounding)."""
    when = datetime.fromtimestamp(ns // 1_000_000_000, UTC).replace(microsecond=ns // 1000 % 1_000_000)
    return when.isoformat(timespec="microseconds").replace("+00:00", "Z")


# -- retries -----------------------------------------------------------------------------------------

# A Retry-After beyond this is capped (a receiver cannot park a delivery for days).
MAX_RETRY_AFTER_S = 6 * 3600.0


@dataclass(frozen=True)
class RetrySchedule:
    """When a failed delivery is tried again, and after how many tries it is given up (dead letter)."""

    max_attempts: int = 12
    initial_backoff_s: float = 5.0
    multiplier: float = 3.0
    max_backoff_s: float = 6 * 3600.0

    def delay_s(self, attempts: int, retry_after_s: float | None, rand: Callable[[], float]) -> float | None:
        """Seconds until the next try after ``attempts`` tries failed; None: give up.

        Exponential backoff with "equal jitter" (half fixed, half random), so receivers coming back
        from an outage are not hit by every sender at once; never sooner than ``retry_after_s``.
        """
        if attempts >= self.max_attempts:
            return None
        backoff = min(self.max_backoff_s, self.initial_backoff_s * self.multiplier ** (attempts - 1))
        delay = backoff / 2 + rand() * backoff / 2
        if retry_after_s is not None:
            delay = max(delay, min(retry_after_s, MAX_RETRY_AFTER_S))
        return delay


def parse_retry_after(value: str | None, now_s: float) -> float | None:
    """A ``Retry-After`` header as seconds from now: delta-seconds or an HTTP date; None when absent or bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now_s)


class AttemptOutcome(enum.Enum):
    """What one delivery attempt's answer means for the delivery and its subscription."""

    DELIVERED = "delivered"  # 2xx
    GONE = "gone"  # 410: the receiver says the endpoint is gone; the subscription is disabled
    FAILED = "failed"  # anything else: tried again later, or dead after the last try


def outcome_of(status_code: int | None) -> AttemptOutcome:
    """``status_code`` None: no answer (refused destination, connection, TLS or timeout)."""
    if status_code is not None and 200 <= status_code < 300:
        return AttemptOutcome.DELIVERED
    if status_code == 410:
        return AttemptOutcome.GONE
    return AttemptOutcome.FAILED
