"""A package install through the egress proxy, from inside a real phase: pip, as the model's Bash
runs it, installs from a stand-in registry the operator allowed, and is refused a registry on an
address nobody allowed and a domain outside the allowlist, each refusal shown in the phase's stream."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest
from support.registry import MESSAGE, Registry

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix_runner.offline import Reply

pytestmark = pytest.mark.real_cli

PIP = f"{sys.executable} -m pip --disable-pip-version-check --no-cache-dir"
PIP_FLAGS = "--retries 0 --timeout 15 --no-deps"


async def test_pip_installs_from_an_allowed_registry_and_is_refused_elsewhere(
    claude_binary, scripted_api, runner_factory
):
    """Before the proxy pip reached the second registry directly and downloaded from it."""
    with Registry("127.0.0.2") as allowed, Registry("127.0.0.3") as other:
        command = (
            f"{PIP} install {PIP_FLAGS} --index-url http://{allowed.address}/simple/ --target site helixdemo"
            f" > install.log 2>&1; echo install-exit=$?; "
            f"{sys.executable} -c 'import sys; sys.path.insert(0, \"site\"); import helixdemo; "
            f"print(helixdemo.MESSAGE)'; "
            f"{PIP} download {PIP_FLAGS} --index-url http://{other.address}/simple/ -d dl helixdemo"
            f" > other.log 2>&1; echo other-exit=$?; "
            f"{PIP} download {PIP_FLAGS} --index-url https://pypi.refused.example/simple/ -d dl helixdemo"
            f" > refused.log 2>&1; echo refused-exit=$?"
        )
        api = scripted_api([Reply.tool_use("Bash", {"command": command, "timeout": 120000}), Reply.text("done")])
        # The operator allows the stand-in registry's exact host:port; nothing else on loopback.
        async with runner_factory(api, egress_private_allow=[allowed.address]) as runner:
            events, result = await runner.run_phase("install", allowed_tools=["Bash"], deadline=180)
            logs = {name: (runner.workdir / f"{name}.log").read_text() for name in ("install", "other", "refused")}
            # `helix-runner egress` lists what the phase reached, and what it was refused.
            listing = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "helix_runner", "egress", "job-1", "p1", "--server",
                f"127.0.0.1:{runner.server.port}", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                env={**os.environ, "COLUMNS": "250"})
            listed, _ = await asyncio.wait_for(listing.communicate(), 60)
            refused_only = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "helix_runner", "egress", "job-1", "p1", "--refused", "--server",
                f"127.0.0.1:{runner.server.port}", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                env={**os.environ, "COLUMNS": "250"})
            only, _ = await asyncio.wait_for(refused_only.communicate(), 60)
        listed_lines = listed.decode().splitlines()
        assert any(allowed.address in line and "allowed" in line and "/simple/helixdemo/" in line
                   for line in listed_lines), listed_lines
        assert any("pypi.refused.example:443" in line and "refused (403)" in line for line in listed_lines)
        only_lines = only.decode().splitlines()
        assert any("pypi.refused.example:443" in line for line in only_lines)
        assert not any(line.split()[1:2] == ["allowed"] for line in only_lines if line.strip()), only_lines
        assert other.requests == [], "the registry nobody allowed was reached"
        served = list(allowed.requests)
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    (finished,) = [e.tool_call_finished for e in events if e.HasField("tool_call_finished")]
    output = finished.content_preview
    assert "install-exit=0" in output and MESSAGE in output, (output, logs["install"])
    assert "other-exit=0" not in output and "refused-exit=0" not in output, output
    # pip went through the proxy: it added `connection: close` and took the credentials off.
    paths = [path for path, _ in served]
    assert "/simple/helixdemo/" in paths and any(p.endswith(".whl") for p in paths), paths
    assert all(h.get("connection") == "close" and "proxy-authorization" not in h for _, h in served)
    refusals = [e.gateway for e in events
                if e.HasField("gateway") and e.gateway.kind == ev.GATEWAY_EVENT_KIND_EGRESS_REFUSED]
    assert {r.destination for r in refusals} == {other.address, "pypi.refused.example:443"}, logs
    assert all(r.kind == ev.GATEWAY_EVENT_KIND_EGRESS_REFUSED and r.http_status == 403 for r in refusals)
    report = result.diagnostics.gateway
    assert report.egress_connections >= 2 and report.egress_refusals >= 2
    # Every request pip made to the allowed registry is a connection in the phase's stream: method,
    # path, and the bytes it received (its wheel among them).
    reached = [e.gateway for e in events
               if e.HasField("gateway") and e.gateway.kind == ev.GATEWAY_EVENT_KIND_EGRESS_CONNECTION]
    assert {g.destination for g in reached} == {allowed.address}
    assert sorted((g.method, g.path) for g in reached) == sorted(("GET", p) for p in paths)
    assert all(g.bytes_sent > 0 and g.bytes_received > 0 and g.duration.ToNanoseconds() > 0 for g in reached)
    # What decided each: the operator's exception let the registry through; the allowlist refused the other name.
    assert {g.rule for g in reached} == {"operator exception (egress_private_allow)"}
    (by_name,) = [r for r in refusals if r.destination == "pypi.refused.example:443"]
    assert "not in the phase's egress allowlist" in by_name.rule


async def test_the_cli_s_own_webfetch_goes_through_the_proxy(claude_binary, scripted_api, runner_factory):
    """WebFetch (the CLI itself, not a tool it runs) honours the proxy variables: a domain outside the
    allowlist is refused at the proxy and shown in the stream. Its domain preflight (a request to
    api.anthropic.com) is turned off by the phase's settings, as an operator with an allowlist would."""
    url = "https://docs.refused.example/page"
    api = scripted_api([Reply.tool_use("WebFetch", {"url": url, "prompt": "Summarize."}), Reply.text("done")])
    async with runner_factory(api) as runner:
        events, result = await runner.run_phase("fetch", allowed_tools=["WebFetch"], deadline=120,
                                                settings='{"skipWebFetchPreflight": true}')
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    (refusal,) = [e.gateway for e in events
                  if e.HasField("gateway") and e.gateway.kind == ev.GATEWAY_EVENT_KIND_EGRESS_REFUSED]
    assert refusal.kind == ev.GATEWAY_EVENT_KIND_EGRESS_REFUSED and refusal.destination == "docs.refused.example:443"
    (finished,) = [e.tool_call_finished for e in events if e.HasField("tool_call_finished")]
    assert finished.name == "WebFetch" and finished.is_error
