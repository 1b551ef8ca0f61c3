"""The audit trail exported as OTel log records: one per action, its fields as attributes."""

from __future__ import annotations

import grpc
import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.telemetry.audit_logs import log_provider_from_env
from helix_runner.telemetry.service import Telemetry, TelemetrySettings
from helix_runner.telemetry.tracing import TracingConfigError


async def test_each_action_is_an_otel_log_record_with_its_fields(runner_factory):
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    telemetry = Telemetry(TelemetrySettings(), logger_provider=provider)
    async with runner_factory(None, telemetry=telemetry) as runner:
        await runner.stub.SetProjectQuota(pb.SetProjectQuotaRequest(project_id="team-a", spend_usd_per_day=5),
                                          timeout=10)
        with pytest.raises(grpc.aio.AioRpcError):
            await runner.stub.CancelPhase(pb.CancelPhaseRequest(job_id="nope", phase_id="p"), timeout=10)
    records = [r.log_record if hasattr(r, "log_record") else r for r in exporter.get_finished_logs()]
    seen = [(r.attributes["helix.audit.action"], r.attributes["helix.audit.principal"],
             r.attributes["helix.audit.outcome"]) for r in records if "helix.audit.action" in (r.attributes or {})]
    assert seen == [("SetProjectQuota", "admin", "OK"), ("CancelPhase", "admin", "NOT_FOUND PHASE_NOT_FOUND")]
    assert all(r.body == "audit" for r in records if "helix.audit.action" in (r.attributes or {}))


def test_the_logs_exporter_follows_the_standard_variables():
    assert log_provider_from_env({"OTEL_LOGS_EXPORTER": "none"}, "1") is None
    assert log_provider_from_env({"OTEL_LOGS_EXPORTER": "console"}, "1") is not None
    with pytest.raises(TracingConfigError, match="OTEL_LOGS_EXPORTER 'syslog'"):
        log_provider_from_env({"OTEL_LOGS_EXPORTER": "syslog"}, "1")
