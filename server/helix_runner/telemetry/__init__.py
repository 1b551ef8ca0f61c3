"""Observability for operators: OpenTelemetry traces and Prometheus metrics of phases, tools and cost.

Self-contained: the application calls a narrow surface (``Telemetry`` for the server,
``PhaseTelemetry`` per phase, driven by domain events) and nothing here imports the gRPC
servicer or the phase runner. See README "Observability" for configuration and the metric list.
"""

from helix_runner.telemetry.phase import PhaseTelemetry
from helix_runner.telemetry.service import Telemetry, TelemetrySettings

__all__ = ["PhaseTelemetry", "Telemetry", "TelemetrySettings"]
