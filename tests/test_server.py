"""Server wiring: what credentials a phase's child gets (``child_credentials``), background retention."""

from __future__ import annotations

import asyncio

import pytest

from helix_runner.config import load_config
from helix_runner.process.child_env import CREDENTIAL_ENV
from helix_runner.server import StartupError, child_credentials, start_server
from helix_runner.store.sqlite_store import SqliteStore


def config(tmp_path, **flags):
    return load_config(
        flags={"data_dir": str(tmp_path / "data"), "workspace_roots": [str(tmp_path)], **flags}, environ={}
    )


async def test_an_api_key_in_the_server_env_is_served_by_the_helper_not_inherited(tmp_path):
    creds = await child_credentials(config(tmp_path), {"ANTHROPIC_API_KEY": "sk-ant-env"})
    try:
        assert creds.key_broker is not None and creds.key_broker.source.read() == "sk-ant-env"
        assert creds.withhold == ("ANTHROPIC_API_KEY",) and creds.overrides == {}
    finally:
        await creds.key_broker.stop()


async def test_no_api_key_means_no_helper(tmp_path):
    creds = await child_credentials(config(tmp_path), {"CLAUDE_CODE_OAUTH_TOKEN": "o"})
    assert creds.key_broker is None and creds.withhold == () and creds.overrides == {}
    # A key the operator does not let the child inherit is not served either.
    creds = await child_credentials(config(tmp_path, inherit_env="HOME"), {"ANTHROPIC_API_KEY": "sk"})
    assert creds.key_broker is None


async def test_helper_off_puts_the_key_file_in_the_environment(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("sk-ant-file\n")
    creds = await child_credentials(config(tmp_path, api_key_file=str(key_file), api_key_helper="false"), {})
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
    cfg = config(tmp_path, offline_script=str(script), api_key_file=str(tmp_path / "unused"))
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
    assert running.retention_task is not None and running.retention_task.done()


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
