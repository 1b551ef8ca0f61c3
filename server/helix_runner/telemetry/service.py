"""The server's telemetry: one object owning the metrics registry, the tracer, ``/metrics`` and probes.

The application reaches it through a narrow surface: ``phase()`` for a phase's observer,
``admission()`` around admitting a phase, ``interceptor()`` for the gRPC server, ``attach()`` to
read the phase service's event writer and watchers, and ``start()`` / ``stop()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry, start_http_server

from helix_runner.errors import RunnerError
from helix_runner.telemetry.audit_logs import (
    attach_audit_handler,
    detach_audit_handler,
    log_provider_from_env,
)
from helix_runner.telemetry.grpc_interceptor import TelemetryInterceptor
from helix_runner.telemetry.loop_lag import LoopLagMonitor
from helix_runner.telemetry.metrics import DEFAULT_MAX_PROJECTS, Metrics
from helix_runner.telemetry.phase import PhaseTelemetry
from helix_runner.telemetry.tracing import INSTRUMENTATION_NAME, provider_from_env, tracing_wanted

log = logging.getLogger(__name__)



def _version() -> str:
    try:
        return metadata.version("helix-runner")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0"


@dataclass(frozen=True)
class TelemetrySettings:
    """What the configuration decides (README, "Observability"); ``metrics_port`` None = no endpoint."""

    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None
    max_project_labels: int = DEFAULT_MAX_PROJECTS
    tracing: str = "auto"

    @classmethod
    def from_config(cls, config: Any) -> TelemetrySettings:
        """From a ``ServerConfig`` (read by attribute so the config module stays independent)."""
        return cls(
            metrics_host=config.metrics_host,
            metrics_port=config.metrics_port,
            max_project_labels=config.metrics_max_projects,
            tracing=config.tracing,
        )


class Telemetry:
    """Metrics always (cheap counters); tracing only with a tracer provider."""

    def __init__(
        self,
        settings: TelemetrySettings | None = None,
        *,
        tracer_provider: TracerProvider | None = None,
        registry: CollectorRegistry | None = None,
        logger_provider: LoggerProvider | None = None,
    ) -> None:
        self.settings = settings or TelemetrySettings()
        self.metrics = Metrics(registry, max_projects=self.settings.max_project_labels)
        self.tracer_provider = tracer_provider
        self.tracer = (
            tracer_provider.get_tracer(INSTRUMENTATION_NAME, _version()) if tracer_provider else None
        )
        self._http: Any = None
        # The event-loop lag probe: the histogram's samples, and the recent lag admission reads.
        self.loop_lag = LoopLagMonitor(observe=self.metrics.event_loop_lag.observe)
        self._owns_provider = False
        # The audit trail as OTel log records (telemetry/audit_logs.py), with the traces' exporter.
        self.logger_provider = logger_provider
        self._audit_handler: Any = None

    @classmethod
    def from_config(cls, config: Any, environ: Mapping[str, str] | None = None) -> Telemetry:
        """Tracing per ``config.tracing`` and the standard ``OTEL_*`` variables of ``environ``."""
        environ = os.environ if environ is None else environ
        settings = TelemetrySettings.from_config(config)
        provider = (
            provider_from_env(environ, _version()) if tracing_wanted(settings.tracing, environ) else None
        )
        logs = log_provider_from_env(environ, _version()) if provider is not None else None
        telemetry = cls(settings, tracer_provider=provider, logger_provider=logs)
        telemetry._owns_provider = provider is not None
        return telemetry

    # -- for the application ------------------------------------------------------------------------

    def phase(self, job_id: str, phase_id: str, project_id: str, model: str = "") -> PhaseTelemetry:
        """The observer of a new phase; its spans' parent is the current context (the RPC's span)."""
        parent = otel_context.get_current()
        observer = PhaseTelemetry(
            self.metrics,
            self.tracer,
            job_id=job_id,
            phase_id=phase_id,
            project_id=project_id,
            model=model,
            parent=parent,
        )
        rpc_span = trace.get_current_span(parent)
        if rpc_span.is_recording():
            rpc_span.set_attributes(observer.ids)
        return observer

    @contextlib.contextmanager
    def admission(self) -> Iterator[None]:
        """Counts a refused phase by its ErrorInfo reason (a bounded set of constants)."""
        try:
            yield
        except RunnerError as exc:
            self.metrics.phases_rejected.labels(exc.reason).inc()
            raise

    def interceptor(self) -> TelemetryInterceptor:
        return TelemetryInterceptor(self.metrics, self.tracer)

    def attach(self, service: Any, *, lagged_total: Callable[[], int]) -> None:
        """Times the service's event commits and exports the watchers of its live phases.

        ``lagged_total`` reads the event log's count of watchers dropped for lagging; the caller hands
        it in because telemetry sits below the application layer (the ``layers`` import contract).
        """
        service.writer.commit_timer = self.metrics.store_write_timer
        self.metrics.watch(lambda: [lp.events for lp in list(service.live.values())], lagged_total)

    # -- lifecycle ----------------------------------------------------------------------------------

    @property
    def metrics_port(self) -> int | None:
        """The bound ``/metrics`` port (useful with port 0), or None when there is no endpoint."""
        return self._http.server_port if self._http is not None else None

    async def start(self) -> None:
        """Serves ``/metrics`` (if configured) and starts the event-loop lag probe.

        Raises OSError when the metrics address cannot be bound.
        """
        if self.settings.metrics_port is not None:
            self._http, _ = start_http_server(
                self.settings.metrics_port, self.settings.metrics_host, registry=self.metrics.registry
            )
            log.info(
                "serving metrics",
                extra={
                    "fields": {
                        "address": f"{self.settings.metrics_host}:{self.metrics_port}",
                        "path": "/metrics",
                    }
                },
            )
        self.loop_lag.start()
        if self.logger_provider is not None:
            self._audit_handler = attach_audit_handler(self.logger_provider)

    async def stop(self) -> None:
        """Stops the probe and the endpoint, and flushes spans still queued for export."""
        await self.loop_lag.stop()
        if self._http is not None:
            http, self._http = self._http, None
            await asyncio.get_running_loop().run_in_executor(None, _shutdown_http, http)
        if self.tracer_provider is not None:
            flush = self.tracer_provider.shutdown if self._owns_provider else self.tracer_provider.force_flush
            await asyncio.get_running_loop().run_in_executor(None, flush)
        if self._audit_handler is not None:
            detach_audit_handler(self._audit_handler)
            self._audit_handler = None
        if self.logger_provider is not None:
            flush_logs = self.logger_provider.shutdown if self._owns_provider else self.logger_provider.force_flush
            await asyncio.get_running_loop().run_in_executor(None, flush_logs)


def _shutdown_http(http: Any) -> None:
    http.shutdown()
    http.server_close()
