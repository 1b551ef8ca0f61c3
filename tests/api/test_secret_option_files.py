"""MCP config and settings reach the CLI as private files, never in its command line (/proc/<pid>/cmdline).

``/proc/<pid>/cmdline`` is readable by every user of the host; the server writes the secret-bearing
JSON options to 0600 files in a 0700 directory under its data dir and passes their paths
(process/secret_files.py).
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import sys
from pathlib import Path

import pytest
from support.streams import PhaseCall

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.offline import Reply
from helix_runner.process.secret_files import SecretArgFiles, sweep

# A minimal stdio MCP server (newline-delimited JSON-RPC): it answers the handshake with no tools and
# writes the DB_PASSWORD it was started with to the file named by its first argument.
MCP_SERVER = r'''
import json, os, sys
with open(sys.argv[1], "w") as f:
    f.write(os.environ.get("DB_PASSWORD", ""))
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    if msg.get("method") == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "db", "version": "1"}}
    elif msg.get("method") == "tools/list":
        result = {"tools": []}
    else:
        result = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n")
    sys.stdout.flush()
'''


def cmdlines() -> dict[int, bytes]:
    """Every process's command line that this user can read."""
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                out[int(entry.name)] = (entry / "cmdline").read_bytes()
            except OSError:
                continue
    return out


@pytest.mark.real_cli
async def test_mcp_config_and_settings_secrets_are_absent_from_the_cli_s_cmdline_while_it_runs(
        claude_binary, scripted_api, runner_factory, tmp_path):
    secret = "mcp-secret-" + secrets.token_hex(12)
    settings_secret = "settings-secret-" + secrets.token_hex(12)
    settings = {"env": {"SOME_TOKEN": settings_secret}}
    api = scripted_api([Reply.tool_use("Bash", {"command": "echo ran > out.txt"}), Reply.text("done")])
    async with runner_factory(api) as runner:
        # In the workspace: the MCP server runs in the phase's sandbox, which sees no more of tmp_path.
        server = runner.workdir / "mcp_server.py"
        server.write_text(MCP_SERVER)
        seen = runner.workdir / "mcp-saw-password"
        mcp = {"mcpServers": {"db": {"type": "stdio", "command": sys.executable, "args": [str(server), str(seen)],
                                     "env": {"DB_PASSWORD": secret}}}}
        secrets_root = runner.data_dir / "phase-secrets"
        phase = PhaseCall(runner.stub, "j", "p", runner.workdir, mcp_config=json.dumps(mcp), strict_mcp_config=True,
                          settings=json.dumps(settings), allowed_tools=["Bash"],
                          breakpoints=[res.Breakpoint(tool_name="Bash")])
        hit = await phase.control(ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT, 60)
        # The CLI is running, held at the breakpoint: look at every command line on the host.
        lines = cmdlines()
        # The CLI and the phase shim that started it (same argv), found by this test's data dir.
        ours = [c for c in lines.values() if b"--mcp-config=" + bytes(secrets_root) in c]
        assert ours, "the running CLI must be found by its command line"
        argv = ours[-1].split(b"\0")
        paths = {a.split(b"=", 1)[0].decode(): Path(a.split(b"=", 1)[1].decode())
                 for a in argv if a.startswith((b"--mcp-config=", b"--settings="))}
        assert set(paths) == {"--mcp-config", "--settings"}
        for needle in (secret, settings_secret):
            assert not any(needle.encode() in c for c in lines.values())
        # The values are in private files outside the workspace, under the data dir.
        for path in paths.values():
            assert path.parent.parent == secrets_root
            assert not path.is_relative_to(runner.workdir)
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
            assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert json.loads(paths["--mcp-config"].read_text()) == mcp
        assert json.loads(paths["--settings"].read_text())["env"] == settings["env"]
        await runner.stub.ResolveToolCall(pb.ResolveToolCallRequest(
            **phase.ids(), tool_use_id=hit.control.tool_use_id, approve=pb.ApproveDecision()), timeout=10)
        result = await phase.finish(90)
        events = phase.events
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        # The phase ended: its files are gone.
        assert secrets_root.is_dir() and list(secrets_root.iterdir()) == []
    init = next(e.session_init for e in events if e.HasField("session_init"))
    assert list(init.mcp_servers) == ["db:connected"], init.mcp_servers  # the CLI read the file and started it
    assert seen.read_text() == secret  # the MCP server got its env from the file
    # The record still names what was passed, never the values or the file paths' contents.
    argv = list(result.diagnostics.argv)
    assert '--mcp-config={"mcpServers":{"db":"***"}}' in argv
    assert any(a.startswith("--settings={") and settings_secret not in a for a in argv)


def test_files_are_private_reused_across_attempts_and_removed(tmp_path):
    files = SecretArgFiles(tmp_path, "run-1")
    argv = ["claude", "--settings={\"a\": 1}", "--mcp-config={\"mcpServers\": {}}", "--model", "x",
            "--agents={\"r\": {}}", "--json-schema={\"type\": \"object\"}"]
    first = files.externalize(argv)
    assert first[3:5] == ["--model", "x"] and first[6] == argv[6]  # other flags untouched
    written = [Path(a.split("=", 1)[1]) for a in first[1:3] + [first[5]]]
    assert [p.read_text() for p in written] == ['{"a": 1}', '{"mcpServers": {}}', '{"r": {}}']
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in written)
    assert stat.S_IMODE((tmp_path / "phase-secrets").stat().st_mode) == 0o700
    assert files.externalize(argv) == first  # a later attempt with the same values reuses the files
    files.remove()
    assert not (tmp_path / "phase-secrets" / "run-1").exists()


def test_nothing_is_written_without_secret_options(tmp_path):
    files = SecretArgFiles(tmp_path, "run-1")
    assert files.externalize(["claude", "-p", "--settings", "/etc/x.json"]) == ["claude", "-p", "--settings",
                                                                               "/etc/x.json"]
    assert not (tmp_path / "phase-secrets").exists()


async def test_a_restarted_server_removes_what_a_crashed_one_left(runner_factory, tmp_path):
    left = tmp_path / "data" / "phase-secrets" / "dead-run"
    left.mkdir(parents=True)
    (left / "mcp-config-1.json").write_text('{"mcpServers": {"db": {"env": {"K": "v"}}}}')
    async with runner_factory(None, claude_path="/nonexistent/claude"):
        assert not left.exists()
    assert sweep(tmp_path / "nowhere") == 0
    os.makedirs(tmp_path / "d" / "phase-secrets" / "x")
    assert sweep(tmp_path / "d") == 1 and list((tmp_path / "d" / "phase-secrets").iterdir()) == []


def test_system_prompts_are_passed_as_files(tmp_path):
    """A phase's system prompts are its caller's instructions: ``/proc/<pid>/cmdline`` would show them
    to every process of the host that sees the CLI (every user's, and other phases' where no PID
    namespace hides it: the Landlock-only sandbox). CLI 2.1.332 reads ``--system-prompt-file`` and
    ``--append-system-prompt-file`` into the same system blocks as the inline flags (checked with
    the scripted API)."""
    files = SecretArgFiles(tmp_path, "run-1")
    argv = ["claude", "--append-system-prompt", "be brief\n-- and kind", "--model", "x", "--system-prompt",
            "--system-prompt", "--tools="]
    out = files.externalize(argv)
    assert out[0] == "claude" and out[2:4] == ["--model", "x"] and out[5] == "--tools="
    flags = {a.split("=", 1)[0]: Path(a.split("=", 1)[1]) for a in (out[1], out[4])}
    assert set(flags) == {"--append-system-prompt-file", "--system-prompt-file"}
    # A value that looks like a flag is still the value (the pairs are the server's own).
    assert flags["--append-system-prompt-file"].read_text() == "be brief\n-- and kind"
    assert flags["--system-prompt-file"].read_text() == "--system-prompt"
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in flags.values())
    assert files.externalize(argv) == out


@pytest.mark.real_cli
async def test_system_prompts_reach_the_api_but_not_the_cli_s_cmdline(
        claude_binary, scripted_api, runner_factory):
    system = "system-secret-" + secrets.token_hex(12)
    appended = "appended-secret-" + secrets.token_hex(12)
    api = scripted_api([Reply.tool_use("Bash", {"command": "true"}), Reply.text("done")])
    async with runner_factory(api) as runner:
        phase = PhaseCall(runner.stub, "j", "p", runner.workdir, system_prompt=system,
                          append_system_prompt=appended, allowed_tools=["Bash"],
                          breakpoints=[res.Breakpoint(tool_name="Bash")])
        hit = await phase.control(ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT, 60)
        lines = cmdlines()  # the CLI is running, held at the breakpoint
        await runner.stub.ResolveToolCall(pb.ResolveToolCallRequest(
            **phase.ids(), tool_use_id=hit.control.tool_use_id, approve=pb.ApproveDecision()), timeout=10)
        result = await phase.finish(90)
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    assert any(b"--system-prompt-file=" + bytes(runner.data_dir) in c for c in lines.values())
    for needle in (system, appended):
        assert not any(needle.encode() in c for c in lines.values())
        assert all(needle in request.system_text for request in api.message_requests())
