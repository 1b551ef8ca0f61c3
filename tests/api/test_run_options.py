"""The later run options through the real CLI (--session-id, --effort, --tools), and their validation."""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import uuid

import grpc
import pytest
from support.streams import PhaseCall

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.api.errors import error_info
from helix_runner.offline import Reply

pytestmark = pytest.mark.real_cli


async def test_session_id_effort_and_tools_reach_the_cli_and_a_breakpoint_holds(claude_binary, scripted_api, runner_factory):
    api = scripted_api([Reply.tool_use("Bash", {"command": "echo ran > out.txt"}), Reply.text("done")])
    session = str(uuid.uuid4())
    async with runner_factory(api) as runner:
        phase = PhaseCall(runner.stub, "bare", "p", runner.workdir, session_id=session, effort="low",
                          tools="Bash,Read", allowed_tools=["Bash"], breakpoints=[res.Breakpoint(tool_name="Bash")])
        hit = await phase.control(ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT, 60)
        assert not (runner.workdir / "out.txt").exists()  # held before it ran
        inspection = (await runner.stub.InspectPhase(pb.InspectPhaseRequest(**phase.ids()), timeout=10)).inspection
        assert [c.call.name for c in inspection.pending_calls] == ["Bash"]
        live = (await runner.stub.GetJob(pb.GetJobRequest(job_id="bare"), timeout=10)).job.phases[0]
        # From the running phase's init line: the gateway's capability, in the CLI's ANTHROPIC_API_KEY.
        assert live.auth_source == "ANTHROPIC_API_KEY"
        await runner.stub.ResolveToolCall(pb.ResolveToolCallRequest(
            **phase.ids(), tool_use_id=hit.control.tool_use_id, approve=pb.ApproveDecision()), timeout=10)
        result = await phase.finish(90)
    events = phase.events
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    assert any(e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT for e in events)
    assert (runner.workdir / "out.txt").read_text() == "ran\n"
    assert result.session_id == session
    init = next(e.session_init for e in events if e.HasField("session_init"))
    assert set(init.tools) == {"Bash", "Read"}  # --tools restricted the built-in set
    argv = list(result.diagnostics.argv)
    assert argv[argv.index("--effort") + 1] == "low" and "--tools=Bash,Read" in argv


@pytest.mark.parametrize(("options", "field"), [
    ({"effort": "extreme"}, "options.effort"),
    ({"bare": True}, "options.bare"),  # only with bypassPermissions (see phase_spec, test_bare_mode)
    ({"session_id": "not-a-uuid"}, "options.session_id"),
    ({"fork_session": True}, "options.fork_session"),
    ({"tools": "Bash,--rm"}, "options.tools"),
    ({"system_prompt": "x" * (64 * 1024 + 1)}, "options.system_prompt"),
    ({"mcp_config": "{not json"}, "options.mcp_config"),
    ({"mcp_config": '["a"]'}, "options.mcp_config"),
    ({"mcp_config": '{"servers": {}}'}, "options.mcp_config"),
    ({"mcp_config": '{"mcpServers": {"db": "stdio"}}'}, "options.mcp_config"),
    ({"mcp_config": '{"mcpServers": {"a": {"env": "' + "x" * (100 * 1024) + '"}}}'}, "options.mcp_config"),
    ({"strict_mcp_config": True}, "options.strict_mcp_config"),
    ({"agents": '{"r": {"description": "d"}}'}, "options.agents"),
    ({"agents": '{"a b": {"description": "d", "prompt": "p"}}'}, "options.agents"),
    ({"settings": "[]"}, "options.settings"),
    ({"setting_sources": "user,global"}, "options.setting_sources"),
    ({"egress_allowlist": ["169.254.169.254"]}, "options.egress_allowlist"),
    ({"egress_allowlist": ["example.com:22"]}, "options.egress_allowlist"),
    ({"egress_allowlist": [f"h{i}.example.com" for i in range(33)]}, "options.egress_allowlist"),
])
async def test_bad_run_options_are_refused_before_spawning(runner_factory, options, field):
    async with runner_factory(None, claude_path="/nonexistent/claude") as runner:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await runner.run_phase("hi", **options)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(caught.value).metadata["field"] == field
    assert "secret" not in caught.value.details()


async def test_a_bad_mcp_config_is_refused_without_echoing_its_content(runner_factory):
    async with runner_factory(None, claude_path="/nonexistent/claude") as runner:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await runner.run_phase("hi", mcp_config='{"mcpServers": {"db": {"env": {"K": "hunter2"}}}')  # unclosed
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(caught.value).metadata["field"] == "options.mcp_config"
    assert "hunter2" not in caught.value.details() and "hunter2" not in str(error_info(caught.value))


async def test_mcp_config_agents_and_settings_reach_the_cli_and_their_secrets_stay_out_of_the_record(
        claude_binary, scripted_api, runner_factory, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    secret = "mcp-secret-" + secrets.token_hex(12)
    settings_secret = "settings-secret-" + secrets.token_hex(12)
    key = "sk-ant-helper-" + secrets.token_hex(16)
    (tmp_path / "api-key").write_text(key + "\n")
    # A stdio server whose command does not exist: the CLI lists it as failed, and its env (the secret)
    # went nowhere but the CLI's argv.
    mcp = {"mcpServers": {"db": {"type": "stdio", "command": str(tmp_path / "no-such-mcp-server"),
                                 "env": {"DB_PASSWORD": secret}}}}
    agents = {"reviewer": {"description": "Reviews code", "prompt": "You review code."}}
    # The caller's own apiKeyHelper must lose to the server's (else the CLI would send this key).
    settings = {"apiKeyHelper": f"echo {settings_secret}", "env": {"SOME_TOKEN": settings_secret}}
    api = scripted_api([Reply.text("done")])
    async with runner_factory(api, api_key_file=str(tmp_path / "api-key"), api_gateway=False) as runner:
        assert runner.server.key_broker is not None
        events, result = await runner.run_phase(
            "go", deadline=90, mcp_config=json.dumps(mcp), strict_mcp_config=True, agents=json.dumps(agents),
            settings=json.dumps(settings), setting_sources="")
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        init = next(e.session_init for e in events if e.HasField("session_init"))
        recordings = [p.read_bytes() for p in runner.data_dir.rglob("*") if p.is_file()]
    assert [s.split(":")[0] for s in init.mcp_servers] == ["db"], init.mcp_servers
    requests = api.message_requests()
    assert requests and all(r.api_key_sha256 == hashlib.sha256(key.encode()).hexdigest() for r in requests)
    argv = list(result.diagnostics.argv)
    assert '--mcp-config={"mcpServers":{"db":"***"}}' in argv and "--strict-mcp-config" in argv
    assert '--agents={"reviewer":"***"}' in argv and "--setting-sources=" in argv
    assert '--settings={"apiKeyHelper":"***","env":"***"}' in argv
    assert any(r.name.startswith("helix_runner") for r in caplog.records)  # the server's log was captured
    for needle in (secret, settings_secret):
        assert needle not in " ".join(argv)
        assert needle not in caplog.text
        assert not any(needle.encode() in blob for blob in recordings)  # the sqlite file and the recordings
    assert any(p.suffix in (".db", ".sqlite", ".sqlite3") for p in runner.data_dir.rglob("*")), \
        "the store's file must be among what was searched"


@pytest.mark.parametrize(("config", "source"), [
    ({}, "ANTHROPIC_API_KEY"),  # the gateway's capability
    ({"api_gateway": False}, "apiKeyHelper"),
    ({"api_gateway": False, "api_key_helper": False}, "ANTHROPIC_API_KEY"),  # the key itself
], ids=["gateway", "key-helper", "environment"])
async def test_the_phase_records_how_the_cli_authenticated(claude_binary, scripted_api, runner_factory, config,
                                                           source):
    # The scripted API's environment holds ANTHROPIC_API_KEY; the server keeps it and hands the CLI a
    # capability for its gateway, or (gateway off) hands the key out through its key helper unless told not to.
    api = scripted_api([Reply.text("done")])
    async with runner_factory(api, **config) as runner:
        events, result = await runner.run_phase("go")
        job = (await runner.stub.GetJob(pb.GetJobRequest(job_id="job-1"), timeout=10)).job
        assert (runner.server.key_broker is not None) == (source == "apiKeyHelper")
        egress = runner.server.egress  # the proxy stays on; the gateway only where it is not turned off
        assert (egress is not None and egress.gateway is not None) == ("api_gateway" not in config)
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    init = next(e.session_init for e in events if e.HasField("session_init"))
    assert result.auth_source == init.api_key_source == source
    assert job.phases[0].auth_source == result.auth_source  # the stored phase, after its end
