"""What a phase's child can see of the server's credentials, checked from inside a real phase.

The model's Bash tool prints its environment; these tests assert what is, and is not, there, and
which key the CLI sent to the (scripted) Messages API.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import shutil
import signal
import tempfile
from pathlib import Path

import grpc
import pytest
from support.processes import NOBODY, nobody_python, serving_port, start_serve_as_nobody
from support.runner_server import collect

from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix.runner.v1 import runner_service_pb2_grpc as pb_grpc
from helix_runner.offline import Reply, Script

pytestmark = pytest.mark.real_cli

# Real-looking values for every kind of credential the server's environment may hold.
SERVER_CREDENTIALS = {
    "ANTHROPIC_AUTH_TOKEN": "auth-token-secret-1",
    "CLAUDE_CODE_OAUTH_TOKEN": "oauth-secret-2",
    "AWS_ACCESS_KEY_ID": "AKIASECRET3",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-4",
    "GOOGLE_APPLICATION_CREDENTIALS": "/etc/gcp/secret-5.json",
    "CLAUDE_CODE_USE_BEDROCK": "1",
    "CLAUDE_CODE_USE_VERTEX": "1",
}


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def env_lines(text: str) -> dict[str, str]:
    return dict(
        line.split("=", 1) for line in text.splitlines() if "=" in line and line.split("=", 1)[0].isupper()
    )


async def test_key_helper_mode_keeps_the_key_out_of_the_model_s_reach(
    claude_binary, scripted_api, runner_factory, tmp_path
):
    key = "sk-ant-helper-" + secrets.token_hex(16)
    key_file = tmp_path / "api-key"
    key_file.write_text(key + "\n")
    api = scripted_api()
    async with runner_factory(api, api_key_file=str(key_file), api_gateway=False) as runner:
        broker = runner.server.key_broker
        assert broker is not None, "an API key without the gateway must mean key-helper mode"
        # The model runs env, then tries the very command the CLI runs for its key.
        command = f"env; {broker.helper_command()}; echo helper-exit=$?"
        api.set_script([Reply.tool_use("Bash", {"command": command}), Reply.text("Looked.")])
        _, result = await runner.run_phase("look around", allowed_tools=["Bash"])

        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        requests = api.message_requests()
        # The key arrived: the CLI got it from the helper (the server env's key is a different one).
        assert [r.api_key_sha256 for r in requests] == [sha256(key)] * len(requests)
        output = requests[1].tool_result_text()
        env = env_lines(output)
        assert "PATH" in env, output  # it is the env listing
        assert key not in output
        assert not {"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"} & set(env), output
        assert "helper-exit=1" in output and "refused" in output, output
        assert broker.served >= 1 and broker.refused >= 1
        assert key not in " ".join(result.diagnostics.argv)


async def test_without_key_helper_the_key_is_in_the_child_environment(
    claude_binary, scripted_api, runner_factory, tmp_path
):
    """The opt-out does what the README says (and shows what the default protects against)."""
    key_file = tmp_path / "api-key"
    key_file.write_text("sk-ant-env-" + secrets.token_hex(8))
    api = scripted_api([Reply.tool_use("Bash", {"command": "env"}), Reply.text("Looked.")])
    async with runner_factory(api, api_key_file=str(key_file), api_key_helper=False, api_gateway=False) as runner:
        assert runner.server.key_broker is None
        _, result = await runner.run_phase("look around", allowed_tools=["Bash"])
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    assert (
        env_lines(api.message_requests()[1].tool_result_text())["ANTHROPIC_API_KEY"] == key_file.read_text()
    )


async def test_offline_mode_passes_no_credential_and_keeps_out_of_home(
    claude_binary, runner_factory, tmp_path
):
    script = tmp_path / "script.json"
    Script([Reply.tool_use("Bash", {"command": "env"}), Reply.text("Looked.")]).save(script)
    extra = {
        **SERVER_CREDENTIALS,
        "ANTHROPIC_API_KEY": "sk-ant-real-server-key",
        "CLAUDE_CONFIG_DIR": str(tmp_path / "real-config"),
    }
    async with runner_factory(None, offline_script=str(script), server_env_extra=extra) as runner:
        _, result = await runner.run_phase("look around", allowed_tools=["Bash"])
        requests = runner.server.offline_api.message_requests()
        gateway_url = runner.server.egress.gateway.base_url
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    output = requests[1].tool_result_text()
    env = env_lines(output)
    assert "PATH" in env, output
    assert not set(SERVER_CREDENTIALS) & set(env), output
    # The scripted API sits behind the gateway: the CLI holds only its phase's capability.
    assert env["ANTHROPIC_API_KEY"].startswith("helix-cap-") and env["ANTHROPIC_BASE_URL"] == gateway_url
    # The phase's private config dir (process/sandbox/private_home.py), not the server's.
    assert env["CLAUDE_CONFIG_DIR"] == str(Path(env["HOME"]) / ".claude")
    assert env["HOME"].startswith(str(runner.data_dir / "sandbox" / "homes") + "/")
    for value in extra.values():
        if len(value) > 1:
            assert value not in output
    assert [r.api_key_sha256 for r in requests] == [sha256("offline-mode")] * len(requests)
    # Session files go to the phase's private home, not into the real ~/.claude; the home is gone
    # after the phase, its transcript kept for resume in the project's session store.
    home = tmp_path / "home"
    assert not (home / ".claude").exists() and not (home / ".claude.json").exists()
    assert not Path(env["HOME"]).exists()
    assert any((runner.data_dir / "sandbox" / "sessions").rglob(f"{result.session_id}.jsonl"))


async def test_a_phase_cannot_read_the_server_environment_through_proc(claude_binary, tmp_path):
    """The server's own environment holds the key in the recommended deployment (a Secret as
    ``ANTHROPIC_API_KEY``); its phases run as its user. The server runs as nobody here, as a
    non-root deployment does, and the model's Bash searches every readable /proc/*/environ."""
    python = nobody_python()
    if python is None:
        pytest.skip("needs root, setpriv and a Python that nobody can run")
    key = "sk-ant-proc-" + secrets.token_hex(16)
    # tmp_path is root's and closed to others: the server's directories live in one nobody owns.
    root = Path(tempfile.mkdtemp(prefix="helix-nobody-"))
    try:
        for d in ("data", "home", "work"):
            (root / d).mkdir()
        Script([Reply.tool_use("Bash", {"command": f"grep -l -a -F {key} /proc/[0-9]*/environ 2>/dev/null; "
                                                   "echo scanned"}),
                Reply.text("Looked.")]).save(root / "script.json")
        for path in [root, *root.rglob("*")]:
            os.chown(path, NOBODY, NOBODY)
        log = tmp_path / "serve.log"
        proc = start_serve_as_nobody(root, log, python, "--claude-path", str(claude_binary.path),
                                     "--offline-script", str(root / "script.json"), ANTHROPIC_API_KEY=key)
        try:
            port = await asyncio.to_thread(serving_port, log, proc, 30.0)
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                request = pb.RunPhaseRequest(job_id="proc", phase_id="p", prompt="look", working_dir=str(root / "work"),
                                             options=pb.PhaseOptions(allowed_tools=["Bash"]))  # fmt: skip
                events, result = await collect(pb_grpc.RunnerServiceStub(channel).RunPhase(request, timeout=90))
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            await asyncio.to_thread(proc.wait, 30)
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        (finished,) = [e.tool_call_finished for e in events if e.HasField("tool_call_finished")]
        # Without the server's non-dumpable flag the list names /proc/<server pid>/environ.
        assert finished.content_preview.strip() == "scanned", finished.content_preview
    finally:
        shutil.rmtree(root, ignore_errors=True)
