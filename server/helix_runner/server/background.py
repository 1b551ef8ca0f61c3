"""What the server does beside serving calls ([storage] retention, [cluster] takeover and hand-over,
[webhook_delivery]): webhook deliveries and the periodic sweeps, each a task stopped at the drain.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from helix_runner.config import ConfigError, ServerConfig, webhook_schedule, webhook_specs
from helix_runner.domain.addresses import OperatorExceptions
from helix_runner.errors import RunnerError
from helix_runner.phases.webhook_dispatcher import DispatchSettings, WebhookDispatcher
from helix_runner.phases.webhooks import Webhooks
from helix_runner.server.lifecycle import StartupError
from helix_runner.store.cluster import Cluster
from helix_runner.store.protocol import Store
from helix_runner.webhook_http.sender import SenderSettings, WebhookSender


def load_webhooks(config: ServerConfig, store: Store) -> Webhooks:
    """The subscriptions, with the config file's loaded into the store (StartupError naming a bad one)."""
    webhooks = Webhooks(store, exceptions=OperatorExceptions.parse(config.webhook_private_allow),
                        dashboard_url=config.dashboard_url)
    try:
        webhooks.load_config(webhook_specs(config))
    except ConfigError as exc:
        raise StartupError(str(exc)) from None
    except RunnerError as exc:
        raise StartupError(f"webhooks: {exc.message}") from None
    return webhooks


def _webhook_dispatcher(config: ServerConfig, store: Store, webhooks: Webhooks, cluster: Cluster) -> WebhookDispatcher:
    """The delivery loop and its HTTP client (webhook_http/sender.py), as configured."""
    sender = WebhookSender(SenderSettings(
        timeout_s=config.webhook_timeout_seconds, connect_timeout_s=min(5.0, config.webhook_timeout_seconds),
        max_response_bytes=config.webhook_max_response_bytes, exceptions=webhooks.exceptions,
        ca_file=config.webhook_ca_file))
    settings = DispatchSettings(schedule=webhook_schedule(config), lease_s=config.webhook_timeout_seconds + 20,
                                owner=cluster.replica_id or "local")
    return WebhookDispatcher(store, webhooks, sender, settings, shared=cluster.shared)


class WebhookDelivery:
    """Delivers the webhook outbox, woken by every group commit that wrote outbox rows
    (phases/webhook_dispatcher.py); at the drain, attempts in flight get a moment and the rest stay
    PENDING for the next start (or another replica)."""

    name = "webhook delivery"

    def __init__(self, config: ServerConfig, store: Store, webhooks: Webhooks, cluster: Cluster):
        self.dispatcher = _webhook_dispatcher(config, store, webhooks, cluster)

    async def start(self) -> None:
        self.dispatcher.start()

    async def stop(self) -> None:
        await self.dispatcher.stop(2.0)


class Sweeps:
    """The periodic tasks: retention, the takeover of dead replicas' phases, the adopter of phases
    handed over; cancelled first at the drain."""

    name = "sweeps"

    def __init__(self, tasks: dict[str, Callable[[], Coroutine[Any, Any, None]] | None]):
        self._factories = {name: factory for name, factory in tasks.items() if factory is not None}
        self.tasks: dict[str, asyncio.Task] = {}

    async def start(self) -> None:
        for name, factory in self._factories.items():
            self.tasks[name] = asyncio.create_task(factory(), name=name)

    async def stop(self) -> None:
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
