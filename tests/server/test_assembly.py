"""Server wiring: what credentials a phase's child gets (``child_credentials``), background retention, one
server per data directory."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal

import grpc
import pytest
from support.processes import serving_port, start_serve
from support.streams import Stream, breakpoint_hit

from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix.runner.v1 import runner_service_pb2_grpc as pb_grpc
from helix_runner.config import load_config
from helix_runner.process.child_env import CREDENTIAL_ENV
from helix_runner.server import StartupError, child_credentials, start_server
from helix_runner.store.database_url import SQLITE_FILE_NAME
from helix_runner.store.sqlite_store import SqliteStore
from helix_runner.structured_logging import TextFormatter


def config(tmp_path, **flags):
    return load_config(
        flags={"data_dir": str(tmp_path / "data"), "workspace_roots": [str(tmp_path)], **flags}, environ={}
    )


def without_gateway(tmp_path, **flags):
    """The modes from before the gateway: key helper, the key in the environment, offline direct."""
    return config(tmp_path, api_gateway="false", egress_proxy="false", **flags)


async def close(creds) -> None:
    if creds.offline_api is not None:
        creds.offline_api.stop()
    if creds.egress is not None:
        await creds.egress.stop()
    if creds.key_broker is not None:
        await creds.key_broker.stop()


async def test_by_default_the_key_stays_in_the_server_and_the_phase_reaches_the_gateway_and_the_proxy(tmp_path):
    env = {"ANTHROPIC_API_KEY": "sk-ant-env", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9/api"}
    creds = await child_credentials(config(tmp_path), env)
    try:
        assert creds.key_broker is None and creds.egress is not None
        gateway, proxy = creds.egress.gateway, creds.egress.proxy
        assert gateway is not None and proxy is not None
        assert creds.overrides["ANTHROPIC_BASE_URL"] == gateway.base_url
        assert creds.overrides["NO_PROXY"] == creds.overrides["no_proxy"] == "127.0.0.1,localhost,::1"
        assert "ANTHROPIC_API_KEY" not in creds.overrides  # each phase's capability comes with the phase
        assert set(CREDENTIAL_ENV) <= set(creds.withhold) and {"HTTPS_PROXY", "http_proxy"} <= set(creds.withhold)
        # The server's own ANTHROPIC_BASE_URL is where the gateway forwards, with the server's key.
        assert str(gateway.settings.upstream) == "http://127.0.0.1:9/api"
        assert gateway.settings.api_key() == "sk-ant-env"
        assert creds.egress.ports == (gateway.port, proxy.port)
    finally:
        await close(creds)


async def test_the_gateway_forwards_to_api_upstream_url_and_re_reads_a_key_file(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("sk-ant-one\n")
    cfg = config(tmp_path, api_key_file=str(key_file), api_upstream_url="https://api.example.com/anthropic",
                 egress_proxy="false")
    creds = await child_credentials(cfg, {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"})
    try:
        settings = creds.egress.gateway.settings
        assert str(settings.upstream) == "https://api.example.com/anthropic" and creds.egress.proxy is None
        key_file.write_text("sk-ant-two\n")  # rotated: the next request uses the new key
        assert settings.api_key() == "sk-ant-two"
        assert "NO_PROXY" not in creds.overrides
    finally:
        await close(creds)


async def test_without_a_key_the_gateway_is_not_used_but_the_proxy_is(tmp_path):
    creds = await child_credentials(config(tmp_path), {"CLAUDE_CODE_OAUTH_TOKEN": "o"})
    try:
        assert creds.egress is not None and creds.egress.gateway is None and creds.egress.proxy is not None
        assert "ANTHROPIC_BASE_URL" not in creds.overrides and "CLAUDE_CODE_OAUTH_TOKEN" not in creds.withhold
    finally:
        await close(creds)


async def test_offline_mode_goes_through_the_gateway(tmp_path):
    script = tmp_path / "script.json"
    script.write_text('{"turns": []}')
    cfg = config(tmp_path, offline_script=str(script))
    creds = await child_credentials(cfg, {"ANTHROPIC_API_KEY": "sk-ant-real"})
    try:
        gateway = creds.egress.gateway
        assert str(gateway.settings.upstream) == creds.offline_api.base_url
        assert gateway.settings.api_key() == "offline-mode"
        assert creds.overrides["ANTHROPIC_BASE_URL"] == gateway.base_url
        assert "ANTHROPIC_API_KEY" not in creds.overrides
        # Each phase's CLI config is its private home's (process/sandbox/private_home.py), not shared.
        assert "CLAUDE_CONFIG_DIR" not in creds.overrides
    finally:
        await close(creds)


async def test_an_api_key_in_the_server_env_is_served_by_the_helper_not_inherited(tmp_path):
    creds = await child_credentials(without_gateway(tmp_path), {"ANTHROPIC_API_KEY": "sk-ant-env"})
    try:
        assert creds.key_broker is not None and creds.key_broker.source.read() == "sk-ant-env"
        assert creds.withhold == ("ANTHROPIC_API_KEY",) and creds.overrides == {}
    finally:
        await creds.key_broker.stop()


async def test_no_api_key_means_no_helper(tmp_path):
    creds = await child_credentials(without_gateway(tmp_path), {"CLAUDE_CODE_OAUTH_TOKEN": "o"})
    assert creds.key_broker is None and creds.withhold == () and creds.overrides == {}
    # A key the operator does not let the child inherit is not served either.
    creds = await child_credentials(without_gateway(tmp_path, inherit_env="HOME"), {"ANTHROPIC_API_KEY": "sk"})
    assert creds.key_broker is None


async def test_helper_off_puts_the_key_file_in_the_environment(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("sk-ant-file\n")
    creds = await child_credentials(without_gateway(tmp_path, api_key_file=str(key_file), api_key_helper="false"),
                                    {})
    assert creds.key_broker is None and creds.overrides == {"ANTHROPIC_API_KEY": "sk-ant-file"}


@pytest.mark.parametrize("content", [None, "", "two\nlines\n"])
async def test_an_unusable_key_file_stops_the_start(tmp_path, content):
    key_file = tmp_path / "key"
    if content is not None:
        key_file.write_text(content)
    with pytest.raises(StartupError, match="cannot read the API key from file"):
        await child_credentials(config(tmp_path, api_key_file=str(key_file)), {})


async def test_offline_mode_withholds_every_credential_and_leaves_the_config_dir_to_the_phase(tmp_path):
    script = tmp_path / "script.json"
    script.write_text('{"turns": []}')
    cfg = without_gateway(tmp_path, offline_script=str(script), api_key_file=str(tmp_path / "unused"))
    creds = await child_credentials(cfg, {"ANTHROPIC_API_KEY": "sk-ant-real"})
    try:
        assert creds.key_broker is None and creds.withhold == CREDENTIAL_ENV
        assert creds.overrides["ANTHROPIC_API_KEY"] == "offline-mode"
        # Each phase's private home holds its config dir (process/sandbox/private_home.py).
        assert "CLAUDE_CONFIG_DIR" not in creds.overrides
    finally:
        creds.offline_api.stop()


async def test_a_server_with_retention_prunes_old_jobs_in_the_background(tmp_path):
    cfg = config(tmp_path, port=0, retention_days=1, retention_interval_seconds=0.05)
    store = SqliteStore(cfg.db_path)
    store.get_or_create_job("ancient", "p", 1)  # created in 1970, no phase: nothing keeps it
    store.close()
    running = await start_server(cfg, server_env={"PATH": "/usr/bin:/bin"})
    try:
        async with asyncio.timeout(30):
            for _ in iter(lambda: running.store.get_job("ancient") is None, True):
                await asyncio.sleep(0.02)
    finally:
        await running.drain(1.0)
    assert running.sweeps is not None and running.sweeps.tasks["retention"].done()


@pytest.mark.real_cli
async def test_a_second_server_on_the_same_data_dir_refuses_and_leaves_the_first_ones_phase_alone(
        claude_binary, tmp_path):
    """Issue 22 item 1: a user moves a second `serve` to other ports but keeps the shared data dir while
    the first holds a phase at a breakpoint. It used to run recovery on the first's phase (SIGKILL,
    a retry that ran the held call undecided) and then die in recover(); now it refuses in one line."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [
        {"content": [{"type": "tool_use", "name": "Bash", "input": {"command": "touch decided.txt"}}]},
        {"content": [{"type": "text", "text": "done"}]}]}))
    work = tmp_path / "work"
    work.mkdir()
    log1, log2 = tmp_path / "serve1.log", tmp_path / "serve2.log"
    first = start_serve(tmp_path, log1, "--offline-script", str(script))
    second = None
    try:
        port = await asyncio.to_thread(serving_port, log1, first, 30)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.RunnerServiceStub(channel)
            request = pb.RunPhaseRequest(job_id="held", phase_id="p", prompt="go", working_dir=str(work),
                                         options=pb.PhaseOptions(allowed_tools=["Bash"],
                                                                 breakpoints=[res.Breakpoint(tool_name="Bash")]))
            phase = Stream(stub.RunPhase(request, timeout=120), wait_limit=60)
            await phase.wait_for(breakpoint_hit)

            second = start_serve(tmp_path, log2, "--offline-script", str(script))  # port 0: other ports
            code = await asyncio.to_thread(second.wait, 30)
            assert code == 1, log2.read_text()
            lines = log2.read_text().splitlines()
            assert lines == [f"helix-runner: error: the data directory {tmp_path / 'data'} is in use by another "
                             f"helix-runner server (pid {first.pid}); give this one its own --data-dir"], lines

            # The first server's phase is still held, the call undecided; approving it runs it once.
            await asyncio.sleep(1.0)
            job = (await stub.GetJob(pb.GetJobRequest(job_id="held"), timeout=10)).job
            assert job.phases[0].status == res.PHASE_STATUS_AWAITING_APPROVAL, job.phases[0].status_reason
            assert len(job.phases[0].attempts) <= 1 and not (work / "decided.txt").exists()
            hit = next(e for e in phase.events if breakpoint_hit(e))
            await stub.ResolveToolCall(pb.ResolveToolCallRequest(
                job_id="held", phase_id="p", tool_use_id=hit.control.tool_use_id, approve=pb.ApproveDecision()),
                timeout=10)
            _, result = await phase.finish(60)
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        assert len(result.attempts) == 1 and (work / "decided.txt").exists()
    finally:
        for proc in (second, first):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)


async def test_one_server_per_data_dir_and_the_lock_is_freed_at_drain(tmp_path):
    cfg = config(tmp_path, port=0)
    running = await start_server(cfg, server_env={})
    try:
        with pytest.raises(StartupError, match=rf"in use by another helix-runner server \(pid {os.getpid()}\)"):
            await start_server(config(tmp_path, port=0), server_env={})
    finally:
        await running.drain(0)
    again = await start_server(cfg, server_env={})
    await again.drain(0)


async def test_the_containment_line_is_short_and_its_paths_are_detail(tmp_path, caplog):
    """Issue 22 item 15: a long JSON "containment" line with every cgroup path came before every error."""
    with caplog.at_level(logging.INFO, logger="helix_runner.server"):
        running = await start_server(config(tmp_path, port=0), server_env={})
        await running.drain(0)
    (record,) = [r for r in caplog.records if r.getMessage() == "containment"]
    line = TextFormatter().format(record)
    assert "/sys/fs/cgroup" not in line and "detail" not in record.fields and len(line) < 80, line
    assert set(record.fields) == {"mode", "limits"}


def test_the_ports_a_sandboxed_phase_may_reach_are_the_model_apis_a_proxys_and_the_clis_collectors(tmp_path):
    from helix_runner.server import ChildCredentials, egress_ports

    cfg = config(tmp_path, inherit_env=["ANTHROPIC_*", "HTTPS_PROXY", "OTEL_*"])
    env = {"ANTHROPIC_BASE_URL": "http://127.0.0.1:8080", "HTTPS_PROXY": "http://localhost:3128",
           "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
           "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector.example:4318"}  # off this host: not reachable
    assert egress_ports(cfg, env, ChildCredentials({})) == ((8080, 3128, 4318), "")
    # Not inherited (inherit_env), so not the phase's: no port for it.
    assert egress_ports(config(tmp_path, inherit_env=["ANTHROPIC_*"]), env, ChildCredentials({}))[0] == (8080,)
    # The model API off this host and no gateway: no network layer can confine the phase.
    ports, why = egress_ports(cfg, {"ANTHROPIC_BASE_URL": "https://api.example"}, ChildCredentials({}))
    assert ports is None and "not on this host's loopback" in why


async def test_the_start_says_which_data_dir_it_uses_and_how_many_jobs_it_holds(tmp_path, capsys):
    """The default data dir is one per user: a fresh checkout listed another checkout's jobs unannounced."""
    cfg = config(tmp_path, port=0)
    running = await start_server(cfg, server_env={})
    await running.drain(0)
    assert f"Data: {cfg.data_dir} (no jobs yet)" in capsys.readouterr().out
    store = SqliteStore(cfg.data_dir / SQLITE_FILE_NAME)
    for job in ("a", "b"):
        store.get_or_create_job(job, "", 1)
    store.close()
    running = await start_server(cfg, server_env={})
    await running.drain(0)
    assert f"Data: {cfg.data_dir} (2 jobs from earlier runs)" in capsys.readouterr().out
