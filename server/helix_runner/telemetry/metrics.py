"""The Prometheus metrics of the service, in one registry per server, with bounded label sets.

Names follow the Prometheus conventions: a ``helix_`` prefix, the base unit in the name
(``_seconds``, ``_usd``), ``_total`` on counters. The gRPC metrics keep the names every gRPC
dashboard knows (``grpc_server_handled_total`` and friends, from go-grpc-prometheus).

No label carries a job or phase id. Tool names, models and project ids come from outside, so each
goes through a ``LabelLimiter``: the first N distinct values are kept as they are, any further one
is reported as ``OVERFLOW_LABEL`` (README, "Metrics").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

# Every value beyond a label's limit is reported as this one.
OVERFLOW_LABEL = "__other__"
DEFAULT_MAX_PROJECTS = 100
MAX_MODELS = 50
MAX_TOOLS = 200

# Token kinds in the Anthropic sense: ``input`` excludes cache reads and writes.
TOKEN_KINDS = ("input", "output", "cache_read", "cache_write_5m", "cache_write_1h")

# The ``*_created`` series prometheus-client adds to every counter and histogram double the series
# count for a timestamp Prometheus does not use.
disable_created_metrics()

_PHASE_SECONDS = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400)
_TOOL_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
_HELD_SECONDS = (0.1, 0.5, 1, 5, 15, 30, 60, 300, 900, 1800, 3600, 14400)
_LOOP_LAG_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)
_STORE_SECONDS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)
_RPC_SECONDS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60, 300, 1800, 3600)

# rate_limit_event statuses the CLI writes (notes on the stream protocol); anything else is "other".
_RATE_LIMIT_STATUSES = frozenset({"allowed", "allowed_warning", "rejected"})


class LabelLimiter:
    """Keeps at most ``limit`` distinct values of a label; later newcomers become ``OVERFLOW_LABEL``."""

    __slots__ = ("limit", "_seen")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._seen: set[str] = set()

    def __call__(self, value: str) -> str:
        if value in self._seen:
            return value
        if len(self._seen) >= self.limit:
            return OVERFLOW_LABEL
        self._seen.add(value)
        return value


def status_label(status: int | None) -> str:
    """An HTTP status as a label: the number for 100-599, else ``none``."""
    return str(status) if status is not None and 100 <= status <= 599 else "none"


def rate_limit_label(status: str) -> str:
    return status if status in _RATE_LIMIT_STATUSES else "other"


class Metrics:
    """Every metric the service exports, registered in ``registry`` (its own, not the global one)."""

    def __init__(
        self, registry: CollectorRegistry | None = None, *, max_projects: int = DEFAULT_MAX_PROJECTS
    ):
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)  # process_cpu_seconds_total, process_resident_memory_bytes, open fds
        self.project = LabelLimiter(max_projects)
        self.model = LabelLimiter(MAX_MODELS)
        self.tool = LabelLimiter(MAX_TOOLS)

        # Phases.
        self.phases_started = Counter("helix_phases_started", "Phases admitted and started.", registry=r)
        self.phases_rejected = Counter(
            "helix_phases_rejected",
            "RunPhase requests refused before a phase started, by ErrorInfo reason.",
            ["reason"],
            registry=r,
        )
        self.phases_finished = Counter(
            "helix_phases_finished", "Phases that ended, by final status.", ["status"], registry=r
        )
        self.phase_duration = Histogram(
            "helix_phase_duration_seconds",
            "Wall-clock time from process start to the phase's end, by status.",
            ["status"],
            buckets=_PHASE_SECONDS,
            registry=r,
        )
        self.phases_running = Gauge("helix_phases_running", "Phases started and not yet ended.", registry=r)
        self.phases_held = Gauge(
            "helix_phases_held",
            "Running phases that are PAUSED or AWAITING_APPROVAL (a person must act).",
            registry=r,
        )

        # Tool calls.
        self.tool_calls = Counter(
            "helix_tool_calls",
            "Finished tool calls by tool and outcome (success, error, unfinished).",
            ["tool", "outcome"],
            registry=r,
        )
        self.tool_duration = Histogram(
            "helix_tool_call_duration_seconds",
            "Run time of finished tool calls: tool_use to tool_result, minus any time the call was held.",
            ["tool"],
            buckets=_TOOL_SECONDS,
            registry=r,
        )
        self.tool_held = Histogram(
            "helix_tool_call_held_seconds",
            "Time a tool call was held (paused or at a breakpoint) before it ran.",
            ["tool"],
            buckets=_HELD_SECONDS,
            registry=r,
        )

        # Tokens and cost.
        self.tokens = Counter(
            "helix_tokens",
            "Tokens by model and kind (input excludes cache reads and writes, as Anthropic counts).",
            ["model", "kind"],
            registry=r,
        )
        self.web_searches = Counter(
            "helix_web_search_requests", "Server-side web search requests by model.", ["model"], registry=r
        )
        self.cost = Counter(
            "helix_cost_usd",
            "Cost in USD by model and project; source is 'reported' (the CLI's figure) "
            "or 'computed' (ours, from tokens and prices).",
            ["model", "project", "source"],
            registry=r,
        )

        # The CLI's stream.
        self.api_retries = Counter(
            "helix_api_retries",
            "API request retries the CLI reported, by HTTP status.",
            ["error_status"],
            registry=r,
        )
        self.rate_limit_events = Counter(
            "helix_rate_limit_events",
            "rate_limit_event lines the CLI wrote, by status.",
            ["status"],
            registry=r,
        )
        self.parse_errors = Counter(
            "helix_parse_errors", "stdout lines that could not be parsed, by reason.", ["reason"], registry=r
        )
        self.events_published = Counter(
            "helix_events_published", "Events published to the store and watchers.", registry=r
        )

        # The model-API gateway and the egress proxy (helix_runner/egress), measured at the wire.
        self.gateway_requests = Counter(
            "helix_gateway_requests",
            "Messages API requests the gateway forwarded and the API answered, by model, project and the "
            "API's HTTP status.",
            ["model", "project", "status"],
            registry=r,
        )
        self.gateway_tokens = Counter(
            "helix_gateway_tokens",
            "Tokens the API reported in its answers as they passed the gateway, by model and kind "
            "(compare helix_tokens, the CLI's own report).",
            ["model", "kind"],
            registry=r,
        )
        self.gateway_events = Counter(
            "helix_gateway_events",
            "What the gateway and the egress proxy saw, by project and kind (rate_limited, overloaded, "
            "model_refused, egress_refused, upstream_failed; the egress decisions egress_connection, "
            "egress_refused, egress_held, egress_approved, egress_denied).",
            ["project", "kind"],
            registry=r,
        )
        self.egress_connections = Counter(
            "helix_egress_connections", "Connections the egress proxy opened for phases, by project.", ["project"],
            registry=r,
        )

        # The server.
        self.event_loop_lag = Histogram(
            "helix_event_loop_lag_seconds",
            "How late a periodic timer on the event loop fired.",
            buckets=_LOOP_LAG_SECONDS,
            registry=r,
        )
        self.store_write = Histogram(
            "helix_store_write_seconds",
            "Time to commit one batch of events to the store.",
            buckets=_STORE_SECONDS,
            registry=r,
        )
        self.rpc_started = Counter(
            "grpc_server_started",
            "RPCs started on the server.",
            ["grpc_service", "grpc_method", "grpc_type"],
            registry=r,
        )
        self.rpc_handled = Counter(
            "grpc_server_handled",
            "RPCs completed on the server, by status code.",
            ["grpc_service", "grpc_method", "grpc_type", "grpc_code"],
            registry=r,
        )
        self.rpc_duration = Histogram(
            "grpc_server_handling_seconds",
            "Time from the start of an RPC to its status (streams included).",
            ["grpc_service", "grpc_method", "grpc_type"],
            buckets=_RPC_SECONDS,
            registry=r,
        )

        # Labelled children by label value: ``labels()`` validates and locks on every call, which
        # would cost more than the rest of a tool result's telemetry.
        self._tool_series: dict[str, ToolSeries] = {}
        self._model_series: dict[tuple[str, str], ModelSeries] = {}

    def tool_series(self, name: str) -> ToolSeries:
        """The series of one tool (its name bounded by the tool limiter)."""
        series = self._tool_series.get(name)
        if series is None:
            label = self.tool(name or "unknown")
            series = self._tool_series[name] = ToolSeries(
                self.tool_calls.labels(label, "success"),
                self.tool_calls.labels(label, "error"),
                self.tool_calls.labels(label, "unfinished"),
                self.tool_duration.labels(label),
                self.tool_held.labels(label),
            )
        return series

    def model_series(self, model: str, project_label: str) -> ModelSeries:
        """Token and cost series of one model in one project (both bounded)."""
        series = self._model_series.get((model, project_label))
        if series is None:
            label = self.model(model)
            series = self._model_series[(model, project_label)] = ModelSeries(
                tuple(self.tokens.labels(label, kind) for kind in TOKEN_KINDS)
                + (self.web_searches.labels(label),),
                self.cost.labels(label, project_label, "reported"),
                self.cost.labels(label, project_label, "computed"),
            )
        return series

    def store_write_timer(self) -> Any:
        """A context manager timing one store commit (``EventWriter.commit_timer``)."""
        return self.store_write.time()

    def sample_names(self) -> set[str]:
        """Every sample name this registry can export (a histogram's ``_bucket``, ``_sum``, ``_count``)."""
        names: set[str] = set()
        for family in self.registry.collect():
            if family.type == "counter":
                names.add(family.name + "_total")
            elif family.type == "histogram":
                names.update(family.name + suffix for suffix in ("_bucket", "_sum", "_count"))
            else:
                names.add(family.name)
        return names

    def watch(self, logs: Callable[[], Iterable[Any]], lagged_total: Callable[[], int]) -> None:
        """Exports the watchers of the live phases' event logs, read at scrape time."""
        self.registry.register(_WatcherCollector(logs, lagged_total))


class ToolSeries(NamedTuple):
    success: Any
    error: Any
    unfinished: Any
    duration: Any
    held: Any


class ModelSeries(NamedTuple):
    counts: tuple[Any, ...]  # TOKEN_KINDS, then web searches
    reported_usd: Any
    computed_usd: Any


class _WatcherCollector(Collector):
    """``helix_watchers``, ``helix_watcher_max_backlog_events``, ``helix_watchers_lagged_total``.

    Runs on the scrape thread: it only takes list copies (atomic under the GIL) and reads ints.
    """

    def __init__(self, logs: Callable[[], Iterable[Any]], lagged_total: Callable[[], int]) -> None:
        self._logs = logs
        self._lagged_total = lagged_total
        self._lagged_base = lagged_total()

    def collect(self) -> Iterator[Any]:
        backlogs: list[int] = []
        for log in list(self._logs()):
            backlogs.extend(log.watcher_backlogs())
        yield GaugeMetricFamily(
            "helix_watchers",
            "Live watchers (RunPhase and WatchPhase streams) of running phases.",
            value=len(backlogs),
        )
        yield GaugeMetricFamily(
            "helix_watcher_max_backlog_events",
            "Events queued for the slowest live watcher, not yet sent to it.",
            value=max(backlogs, default=0),
        )
        yield CounterMetricFamily(
            "helix_watchers_lagged",
            "Times a watcher fell too far behind and was switched to catching up from the store.",
            value=self._lagged_total() - self._lagged_base,
        )

    def describe(self) -> Iterator[Any]:
        return iter(())
