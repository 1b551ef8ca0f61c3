"""The delivery loop: claims due outbox rows, signs and posts them, records each attempt, schedules retries.

At least once: a row leaves PENDING only after the receiver answered 2xx (DELIVERED), the last try
failed (DEAD, the dead letter), its subscription was disabled (a 410 Gone from the receiver) or
deleted (CANCELLED). A claim is a lease in the store (``Store.claim_webhook_deliveries``): on a
shared database replicas claim with ``FOR UPDATE SKIP LOCKED``, so each delivery is sent by one of
them; if the claimer dies mid-attempt, the lease runs out and another replica (or the restarted
one, which releases its own claims at start) sends it again. A delivery whose receiver already got
it may so arrive twice; receivers deduplicate by ``webhook-id``.

In order: a PENDING delivery holds back the later ones of its subscription and phase (the claim
query skips them), so one phase's notifications reach each subscription in the order their events
happened, a retry included. Every body also carries the phase's event ``sequence``.

Woken at once when rows are written here (the run's group commit, a new subscription); otherwise it
sleeps until the earliest retry is due or the poll interval passed (what finds rows another replica
left, and subscriptions created there).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from helix_runner.domain.webhooks import AttemptOutcome, RetrySchedule, outcome_of, parse_retry_after
from helix_runner.phases.webhooks import Webhooks
from helix_runner.store.protocol import Store, WebhookAttemptRow, WebhookDeliveryRow
from helix_runner.webhook_http.signing import signed_headers
from helix_runner.webhook_http.target import WebhookUrl

log = logging.getLogger(__name__)


class Sender(Protocol):
    """What posts a body (``webhook_http.sender.WebhookSender``; a test double in unit tests)."""

    async def post(self, url: str, headers: Mapping[str, str], body: bytes): ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class DispatchSettings:
    schedule: RetrySchedule = RetrySchedule()
    # A claim outlives the longest attempt (the sender's timeout) by this margin.
    lease_s: float = 30.0
    poll_s: float = 1.0
    max_in_flight: int = 16
    owner: str = "local"


class WebhookDispatcher:
    """Delivers the outbox; one per server process."""

    def __init__(self, store: Store, webhooks: Webhooks, sender: Sender, settings: DispatchSettings = DispatchSettings(),
                 *, shared: bool = False, rand: Callable[[], float] = random.random):
        self.store = store
        self.webhooks = webhooks
        self.sender = sender
        self.settings = settings
        self.shared = shared
        # Attempts name the replica that made them on a shared database (alone: nobody else could have).
        self.replica = settings.owner if shared else ""
        self.rand = rand
        self._wakeup = asyncio.Event()
        self._in_flight: set[asyncio.Task] = set()
        self._task: asyncio.Task | None = None
        self._closing = False
        self._refreshed = 0.0  # when the subscriptions were last read (monotonic)
        # After each attempt (the telemetry and benchmark hook): the delivery and what the attempt got.
        self.on_attempt: Callable[[WebhookDeliveryRow, WebhookAttemptRow, str], None] = lambda d, a, state: None
        webhooks.on_change = self.wake

    def wake(self) -> None:
        self._wakeup.set()

    def start(self) -> WebhookDispatcher:
        self.store.release_webhook_claims(self.settings.owner)  # a previous process under this name
        self.webhooks.refresh()
        self._task = asyncio.create_task(self._loop(), name="webhook-dispatcher")
        return self

    async def stop(self, grace: float = 2.0) -> None:
        """Stops claiming; attempts in flight get ``grace`` seconds, then are cut and their claims released."""
        self._closing = True
        self.wake()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._in_flight:
            _, pending = await asyncio.wait(set(self._in_flight), timeout=grace)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        with contextlib.suppress(Exception):  # the next start (or another replica) retries them at once
            self.store.release_webhook_claims(self.settings.owner)
        await self.sender.close()

    async def _loop(self) -> None:
        while not self._closing:
            self._wakeup.clear()
            timeout = self.settings.poll_s  # the safety net, and what finds other replicas' rows
            try:
                if self.shared and time.monotonic() - self._refreshed >= self.settings.poll_s:
                    self.webhooks.refresh()  # subscriptions created or deleted on other replicas
                    self._refreshed = time.monotonic()
                if self.webhooks.any:
                    timeout = self._claim_and_start()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("webhook dispatcher: a store call failed; trying again shortly")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout)

    def _claim_and_start(self) -> float:
        """Starts the due deliveries there is room for; returns how long to sleep at most."""
        free = self.settings.max_in_flight - len(self._in_flight)
        claimed = self.store.claim_webhook_deliveries(self.settings.owner, free, self.settings.lease_s) \
            if free > 0 else []
        for delivery in claimed:
            task = asyncio.create_task(self._deliver(delivery), name=f"webhook:{delivery.delivery_id}")
            self._in_flight.add(task)
            task.add_done_callback(self._in_flight.discard)
        if len(self._in_flight) >= self.settings.max_in_flight:
            return self.settings.poll_s  # full: a finished attempt wakes us
        due = self.store.next_webhook_due_s()
        if due is None:
            return self.settings.poll_s
        # Due already but not claimed: claimed by another replica this instant, or just now written.
        return min(self.settings.poll_s, max(due, 0.0 if claimed else 0.05))

    async def _deliver(self, d: WebhookDeliveryRow) -> None:
        try:
            await self._attempt(d)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("webhook delivery failed unexpectedly", extra={"fields": {"delivery_id": d.delivery_id}})
        finally:
            self.wake()  # the next delivery of this phase may be due now, and a slot is free

    async def _attempt(self, d: WebhookDeliveryRow) -> None:
        row = self.webhooks.row(d.subscription_id)
        number = d.attempts + 1
        now = time.time()
        if row is None or row.disabled_time_ns is not None:
            why = "the webhook was deleted" if row is None else f"the webhook is disabled: {row.disabled_reason}"
            self._finish(d, WebhookAttemptRow(d.delivery_id, number, time.time_ns(), None, 0, why, self.replica),
                         "CANCELLED" if row is None else "DEAD", None)
            return
        refused = WebhookUrl.parse(row.url).literal_refusal(self.webhooks.exceptions)
        if refused is not None:  # the operator's allowance was withdrawn since it was created
            result_status, latency, retry_after, error = None, 0, None, f"destination refused: {refused}"
        else:
            result = await self.sender.post(row.url, signed_headers(row.secret, d.delivery_id, d.body, now), d.body)
            result_status, latency, retry_after, error = (result.status_code, result.latency_ns, result.retry_after,
                                                          result.error)
        attempt = WebhookAttemptRow(d.delivery_id, number, int(now * 1e9), result_status, latency,
                                    error or _status_text(result_status), self.replica)
        outcome = outcome_of(result_status)
        if outcome is AttemptOutcome.DELIVERED:
            self._finish(d, attempt, "DELIVERED", None)
        elif outcome is AttemptOutcome.GONE:
            self._finish(d, attempt, "DEAD", None, disable="the receiver answered 410 Gone")
            log.warning("webhook disabled: its receiver answered 410 Gone",
                        extra={"fields": {"webhook_id": row.subscription_id, "delivery_id": d.delivery_id}})
        else:
            delay = self.settings.schedule.delay_s(number, parse_retry_after(retry_after, time.time()), self.rand)
            self._finish(d, attempt, "PENDING" if delay is not None else "DEAD", delay)
            if delay is None:
                log.warning("webhook delivery dead-lettered after its last attempt", extra={"fields": {
                    "webhook_id": row.subscription_id, "delivery_id": d.delivery_id, "attempts": number,
                    "last_error": attempt.error}})

    def _finish(self, d: WebhookDeliveryRow, attempt: WebhookAttemptRow, state: str, retry_in_s: float | None,
                disable: str = "") -> None:
        kept = self.store.finish_webhook_attempt(self.settings.owner, attempt, state, retry_in_s, disable)
        if disable:
            self.webhooks.refresh()
        if not kept:
            log.warning("webhook delivery: the claim ran out during the attempt; another one may repeat it",
                        extra={"fields": {"delivery_id": d.delivery_id}})
        self.on_attempt(d, attempt, state)


def _status_text(status: int | None) -> str:
    return "" if status is None or 200 <= status < 300 else f"the receiver answered {status}"
