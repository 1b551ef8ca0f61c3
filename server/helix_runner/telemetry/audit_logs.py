"""The audit trail as OpenTelemetry log records (issue 32 item 4; docs/tenancy.md).

Each audit entry is a log line of the ``helix_runner.audit`` logger (``api/authorization.py``);
with a logger provider, a handler on that logger also emits it as an OTel log record whose
attributes are the entry's fields (``helix.audit.principal``, ``helix.audit.action``, ...), so
the trail reaches the same collector as the traces. The provider comes from the standard
variables: ``OTEL_LOGS_EXPORTER`` (``otlp``, ``console`` or ``none``; default ``otlp`` when tracing
is on), the OTLP protocol and endpoint variables as for traces.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from opentelemetry._logs import SeverityNumber
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, ConsoleLogRecordExporter

from helix_runner.telemetry.tracing import TracingConfigError, otlp_protocol, resource_from_env

AUDIT_LOGGER = "helix_runner.audit"


class AuditLogHandler(logging.Handler):
    """Emits audit log lines as OTel log records (event ``helix.audit``), their ``fields`` as attributes.

    Written against the OTel logs API (``Logger.emit``) rather than the SDK's ``LoggingHandler``,
    which the SDK deprecates in favour of an instrumentation package this server does not need.
    """

    def __init__(self, provider: LoggerProvider):
        super().__init__(logging.INFO)
        self._logger = provider.get_logger(AUDIT_LOGGER)

    def emit(self, record: logging.LogRecord) -> None:
        attributes: dict[str, Any] = {}
        for key, value in (getattr(record, "fields", None) or {}).items():
            if isinstance(value, str | bool | int | float):
                attributes[f"helix.audit.{key}"] = value
        self._logger.emit(timestamp=int(record.created * 1e9), severity_number=SeverityNumber.INFO,
                          severity_text="INFO", body=record.getMessage(), attributes=attributes,
                          event_name="helix.audit")


def log_provider_from_env(environ: Mapping[str, str], version: str) -> LoggerProvider | None:
    """A logger provider for the audit records, or None when ``OTEL_LOGS_EXPORTER`` is ``none``."""
    names = [n.strip().lower() for n in environ.get("OTEL_LOGS_EXPORTER", "otlp").split(",") if n.strip()]
    exporters: list[Any] = []
    for name in names:
        if name == "none":
            continue
        if name == "console":
            exporters.append(ConsoleLogRecordExporter())
        elif name == "otlp":
            if otlp_protocol(environ, "LOGS") == "grpc":
                from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
            else:
                from opentelemetry.exporter.otlp.proto.http._log_exporter import (  # type: ignore[assignment]
                    OTLPLogExporter,
                )
            exporters.append(OTLPLogExporter())
        else:
            raise TracingConfigError(f"OTEL_LOGS_EXPORTER {name!r} is not supported (use otlp, console or none)")
    if not exporters:
        return None
    provider = LoggerProvider(resource=resource_from_env(environ, version))
    for exporter in exporters:
        provider.add_log_record_processor(BatchLogRecordProcessor(exporter))
    return provider


def attach_audit_handler(provider: LoggerProvider) -> AuditLogHandler:
    """Adds the handler to the audit logger (removed with ``detach_audit_handler``)."""
    handler = AuditLogHandler(provider)
    logger = logging.getLogger(AUDIT_LOGGER)
    logger.addHandler(handler)
    if logger.level == logging.NOTSET or logger.level > logging.INFO:
        logger.setLevel(logging.INFO)
    return handler


def detach_audit_handler(handler: AuditLogHandler) -> None:
    logging.getLogger(AUDIT_LOGGER).removeHandler(handler)
