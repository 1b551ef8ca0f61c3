"""A phase's grant at the gateway and the proxy: one capability for all its attempts, a warm CLI's
adopted, revoked at the end; reports to its ledger, stream (bounded) and metrics."""

from __future__ import annotations

import pytest

from helix_runner.config import load_config
from helix_runner.domain.events import GatewayEvent, GatewayEventKind
from helix_runner.domain.usage import TokenUsage
from helix_runner.egress.gateway import GatewaySettings
from helix_runner.egress.proxy import ProxySettings
from helix_runner.egress.service import Egress, EgressSettings
from helix_runner.egress.upstream import UpstreamUrl
from helix_runner.errors import RunnerError
from helix_runner.phases.egress_grant import (
    MAX_STREAM_EVENTS,
    PhaseEgress,
    allowed_models,
    prestart_env,
    release_prestart_env,
)


@pytest.fixture
async def egress():
    settings = EgressSettings(GatewaySettings(UpstreamUrl.parse("http://127.0.0.1:9"), lambda: "k"), ProxySettings())
    started = await Egress(settings).start()
    yield started
    await started.stop()


class Telemetry:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def on_gateway_response(self, *args) -> None:
        self.calls.append(("response", *args))

    def on_gateway_event(self, kind) -> None:
        self.calls.append(("event", kind))

    def on_egress_connection(self) -> None:
        self.calls.append(("connection",))


def phase(egress, **kwargs) -> PhaseEgress:
    return PhaseEgress(egress, job_id="j", phase_id="p", project="proj", models=None, **kwargs)


async def test_one_capability_for_every_attempt_revoked_at_the_end(egress) -> None:
    grant = phase(egress)
    first, second = grant.child_env(), grant.child_env()
    assert first == second  # each attempt keeps it
    capability = first["ANTHROPIC_API_KEY"]
    assert first["HTTPS_PROXY"] == f"http://phase:{capability}@127.0.0.1:{egress.proxy.port}"
    assert egress.capabilities.grant(capability) is grant.grant
    grant.revoke()
    grant.revoke()
    assert egress.capabilities.grant(capability) is None


async def test_a_warm_cli_s_capability_becomes_the_phase_s_and_a_discarded_one_goes(egress) -> None:
    warm_env = prestart_env(egress)
    capability = egress.capability_in(warm_env)
    assert capability is not None and egress.capabilities.grant(capability) is None  # unbound
    grant = phase(egress)
    assert grant.adopt(warm_env)
    assert egress.capabilities.grant(capability) is grant.grant
    assert grant.child_env()["ANTHROPIC_API_KEY"] == capability  # a later attempt keeps it
    assert not phase(egress).adopt(warm_env)  # never a second phase's
    discarded = prestart_env(egress)
    release_prestart_env(egress, discarded)
    assert egress.capabilities.grant(egress.capability_in(discarded)) is None
    assert len(egress.capabilities) == 1


async def test_reports_reach_the_ledger_the_metrics_and_a_bounded_stream(egress) -> None:
    grant = phase(egress, request_entries=("pypi.org",))
    emitted, telemetry = [], Telemetry()
    grant.attach(emitted.append, telemetry)
    grant.on_response("claude-x", 200, TokenUsage(input_tokens=5, output_tokens=2))
    grant.on_egress_connection("pypi.org:443")
    for _ in range(MAX_STREAM_EVENTS + 5):
        grant.on_event(GatewayEvent(GatewayEventKind.OVERLOADED, 529))
    report = grant.report()
    assert report.requests == 1 and report.models[0].tokens.input_tokens == 5
    assert report.overloaded == MAX_STREAM_EVENTS + 5 and report.egress_connections == 1
    assert report.egress_allowlist == ("pypi.org",)
    assert len(emitted) == MAX_STREAM_EVENTS  # the rest counted, not streamed
    assert telemetry.calls[0] == ("response", "claude-x", 200, TokenUsage(input_tokens=5, output_tokens=2))
    assert len([c for c in telemetry.calls if c[0] == "event"]) == MAX_STREAM_EVENTS + 5


async def test_a_bad_request_entry_is_refused_before_anything_runs(egress) -> None:
    with pytest.raises(RunnerError) as caught:
        phase(egress, request_entries=("169.254.169.254",))
    assert caught.value.metadata["field"] == "options.egress_allowlist"


def test_the_project_s_allowlist_or_the_catch_all(tmp_path) -> None:
    config = load_config(flags={"workspace_roots": [str(tmp_path)],
                                "model_allowlist": '{"a": ["claude-a*"], "*": ["claude-haiku-*"]}'}, environ={})
    assert allowed_models(config, "a") == ("claude-a*",)
    assert allowed_models(config, "b") == ("claude-haiku-*",)
    plain = load_config(flags={"workspace_roots": [str(tmp_path)]}, environ={})
    assert allowed_models(plain, "a") is None
