"""The per-phase sandbox against the real CLI: each layer refuses what a hostile model tries from
its Bash tool, legitimate work still succeeds, degraded modes are reported, `required` refuses.

Each attack runs a shell command inside a real phase (offline scripted model, real tools) and
reads what the tool printed from the request the CLI sent the scripted API next.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from support.git_repos import make_repo

from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.api.errors import error_info
from helix_runner.offline.script import Reply

pytestmark = pytest.mark.real_cli

OK = "HELIX-OK"
DENIED = "HELIX-DENIED"


async def bash(runner, api, command: str, *, phase_id: str = "p1", **options):
    """Runs ``command`` in a phase's Bash tool; (what it printed, the PhaseResult)."""
    api.set_script([Reply.tool_use("Bash", {"command": command}), Reply.text("done")])
    before = len(api.message_requests())
    _, result = await runner.run_phase("run it", phase_id=phase_id, allowed_tools=["Bash"], deadline=90, **options)
    requests = api.message_requests()[before:]
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    return requests[1].tool_result_text(), result


def probe(command: str) -> str:
    """A shell line printing OK if ``command`` succeeds, DENIED if it fails."""
    return f"if {command}; then echo {OK}; else echo {DENIED}; fi"


def layers(result) -> dict[str, bool]:
    return {layer.name: layer.active for layer in result.diagnostics.sandbox.layers}


# -- the default configuration: every layer ----------------------------------------------------




async def test_reading_the_data_dir_another_workspace_and_server_files_is_refused(claude_binary, scripted_api,
                                                                                  runner_factory, tmp_path):
    other = tmp_path / "other-workspace"
    other.mkdir()
    (other / "secret.txt").write_text("another job's file\n")
    token = tmp_path / "token"
    token.write_text("t" * 32)
    api = scripted_api([])
    async with runner_factory(api) as runner:
        db = runner.data_dir / "helix-runner.sqlite3"
        assert db.exists()
        out, result = await bash(runner, api, "; ".join([
            probe(f"head -c 16 {db} >/dev/null 2>&1"),
            probe(f"ls {runner.data_dir}/recordings >/dev/null 2>&1"),
            probe(f"cat {other}/secret.txt >/dev/null 2>&1"),
            probe(f"cat {token} >/dev/null 2>&1"),
            probe("head -c1 /etc/shadow >/dev/null 2>&1"),
            probe("unshare -U true 2>/dev/null"),  # no user namespace of its own
            probe("echo mine > own.txt"),  # the workspace itself is writable
        ]))
    assert out.split() == [DENIED] * 6 + [OK], out
    assert (runner.workdir / "own.txt").read_text() == "mine\n"
    assert all(layers(result).values()), result.diagnostics.sandbox


async def test_a_phase_can_neither_see_nor_signal_processes_outside_it(claude_binary, scripted_api, runner_factory):
    outside = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # noqa: ASYNC220
    try:
        api = scripted_api([])
        async with runner_factory(api) as runner:
            out, _ = await bash(runner, api, "; ".join([
                probe(f"kill -0 {outside.pid} 2>/dev/null"),
                probe(f"cat /proc/{outside.pid}/environ >/dev/null 2>&1"),
                probe(f"kill -STOP {os.getpid()} 2>/dev/null"),
                probe("test $(ls /proc | grep -c '^[0-9]') -lt 30"),  # its own PID namespace
            ]))
        assert out.split() == [DENIED, DENIED, DENIED, OK], out
        assert outside.poll() is None
    finally:
        outside.kill()
        outside.wait()


async def test_tcp_reaches_the_gateway_and_the_proxy_only(claude_binary, scripted_api, runner_factory):
    """The network layer lets a phase connect to the model-API gateway and the egress proxy, nothing
    else on the host: not a local service, not even the model API behind the gateway."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        api = scripted_api([])
        api_port = int(api.base_url.rsplit(":", 1)[1])
        async with runner_factory(api) as runner:
            gateway, proxy = runner.server.egress_ports
            out, result = await bash(runner, api, "; ".join(
                probe(f"timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{p}' 2>/dev/null")
                for p in (port, api_port, gateway, proxy)))
        assert out.split() == [DENIED, DENIED, OK, OK], out
        assert sorted(result.diagnostics.sandbox.egress_ports) == sorted([gateway, proxy])


async def test_tmp_is_private_to_the_phase(claude_binary, scripted_api, runner_factory):
    marker = f"helix-sandbox-marker-{os.getpid()}-{time.monotonic_ns()}"
    api = scripted_api([])
    async with runner_factory(api) as runner:
        first, _ = await bash(runner, api, f"echo secret > /tmp/{marker} && ls /tmp/{marker} && echo $TMPDIR")
        second, _ = await bash(runner, api, probe(f"test -e /tmp/{marker}"), phase_id="p2")
    assert marker in first and "/tmp" in first
    assert not Path("/tmp", marker).exists()
    assert second.split() == [DENIED], second


async def test_a_phase_cannot_plant_hooks_for_the_next_one(claude_binary, scripted_api, runner_factory):
    hook = {"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": "touch $HOME/../../HOOK-RAN"}]}],
                      "PreToolUse": [{"matcher": "*", "hooks": [{"type": "command",
                                                                 "command": "touch /tmp/../HOOK-RAN-2"}]}]}}

    settings = json.dumps(hook)
    api = scripted_api([])
    async with runner_factory(api) as runner:
        marker = runner.workdir / "hook-ran"
        hook_line = settings.replace("$HOME/../../HOOK-RAN", str(marker)).replace("/tmp/../HOOK-RAN-2", str(marker))
        planted = runner.workdir / "planted.json"
        planted.write_text(hook_line)
        plant = ("python3 -c \"import os, shutil; [os.makedirs(d, exist_ok=True) or "
                 "shutil.copy('planted.json', d + '/settings.json') for d in "
                 "('.claude', os.path.expanduser('~/.claude'))]\" && echo planted")
        out, result = await bash(runner, api, plant)
        assert "planted" in out, out
        # The workspace's Claude Code settings are protected: what the phase wrote there is undone.
        assert not (runner.workdir / ".claude" / "settings.json").exists()
        assert str(runner.workdir / ".claude" / "settings.json") in result.diagnostics.sandbox.restored
        # A phase that asks may leave them (allow_repository_config_writes).
        out, _ = await bash(runner, api, plant, phase_id="p1b", allow_repository_config_writes=True)
        assert (runner.workdir / ".claude" / "settings.json").exists()
        await bash(runner, api, "echo next phase", phase_id="p2")
        assert not marker.exists(), "a hook planted by an earlier phase ran"
        # A request that asks for the workspace's settings gets them (and so the hook).
        await bash(runner, api, "echo asked", phase_id="p3", setting_sources="user,project")
        assert marker.exists()


async def test_a_timed_out_phase_gets_the_graceful_sigterm_inside_the_sandbox(claude_binary, scripted_api,
                                                                              runner_factory):
    """The supervisor ends a phase with SIGTERM to the CLI's process group before it kills the
    scope. Under bubblewrap that group is the sandbox's new session (led by its PID 1), not the
    CLI's pid: signalled by pid, the CLI never got the SIGTERM and was SIGKILLed after the grace."""
    api = scripted_api([Reply.tool_use("Bash", {"command": "python3 -c 'import time; time.sleep(60)'"}),
                        Reply.text("never")])
    async with runner_factory(api) as runner:
        _, result = await runner.run_phase("sleep", allowed_tools=["Bash"], timeout=datetime.timedelta(seconds=3))
    assert result.status == res.PHASE_STATUS_TIMED_OUT
    assert layers(result)["namespaces"]
    assert result.exit_signal != "SIGKILL"  # it ended on the SIGTERM (by it, or with a code of its own)


# -- legitimate work --------------------------------------------------------------------------


async def test_git_python_pipelines_and_add_dirs_work(claude_binary, scripted_api, runner_factory, tmp_path):
    extra = tmp_path / "extra"
    extra.mkdir()
    api = scripted_api([])
    async with runner_factory(api) as runner:
        make_repo(runner.workdir)
        out, _ = await bash(runner, api, " && ".join([
            "git -c user.name=m -c user.email=m@example.invalid commit -q --allow-empty -m sandboxed",
            "git log --oneline | wc -l | tr -d ' '",
            "python3 -c 'print(6 * 7)'",
            "seq 1 5 | sort -r | head -1",
            f"echo added > {extra}/from-phase.txt",
            "echo " + OK,
        ]), add_dirs=[str(extra)])
    assert out.split()[-4:] == ["2", "42", "5", OK], out
    assert (extra / "from-phase.txt").read_text() == "added\n"


# A stdio MCP server with one tool: for each path, whether it can read it.
MCP_PROBE = r'''
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method = msg.get("method")
    if method == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "probe", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "read", "description": "Reads files",
                             "inputSchema": {"type": "object", "properties": {"paths": {"type": "array"}}}}]}
    elif method == "tools/call":
        said = []
        for path in msg["params"]["arguments"]["paths"]:
            try:
                open(path, "rb").read(1)
                said.append("HELIX-OK")
            except OSError:
                said.append("HELIX-DENIED")
        result = {"content": [{"type": "text", "text": " ".join(said)}]}
    else:
        result = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n")
    sys.stdout.flush()
'''


async def test_a_stdio_mcp_server_of_the_request_works_inside_the_sandbox(claude_binary, scripted_api,
                                                                          runner_factory):
    """The CLI starts the request's MCP server inside the phase's sandbox: it works, and it is as
    confined as the model's own tools (it cannot read the data dir)."""
    api = scripted_api([])
    async with runner_factory(api) as runner:
        (runner.workdir / "mcp_probe.py").write_text(MCP_PROBE)
        (runner.workdir / "mine.txt").write_text("x")
        mcp = {"mcpServers": {"probe": {"type": "stdio", "command": sys.executable,
                                        "args": [str(runner.workdir / "mcp_probe.py")]}}}
        paths = [str(runner.data_dir / "helix-runner.sqlite3"), str(runner.workdir / "mine.txt")]
        api.set_script([Reply.tool_use("mcp__probe__read", {"paths": paths}), Reply.text("done")])
        events, result = await runner.run_phase("probe", mcp_config=json.dumps(mcp), strict_mcp_config=True,
                                                allowed_tools=["mcp__probe__read"], deadline=90)
        requests = api.message_requests()
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    init = next(e.session_init for e in events if e.HasField("session_init"))
    assert list(init.mcp_servers) == ["probe:connected"], init.mcp_servers
    assert requests[1].tool_result_text().split() == [DENIED, OK], requests[1].tool_result_text()
    assert all(layers(result).values())


async def test_a_git_worktree_phase_commits(claude_binary, scripted_api, runner_factory):
    api = scripted_api([])
    async with runner_factory(api) as runner:
        make_repo(runner.workdir)
        out, result = await bash(runner, api, "echo changed > wt.txt && git add wt.txt && "
                                 "git -c user.name=m -c user.email=m@example.invalid commit -q -m in-worktree && "
                                 "git log --oneline -1", workspace=pb.WORKSPACE_MODE_GIT_WORKTREE,
                                 worktree_retention=pb.WORKTREE_RETENTION_KEEP)
    assert "in-worktree" in out, out


async def test_a_later_phase_of_the_project_resumes_a_session_another_project_may_not(claude_binary, scripted_api,
                                                                                       runner_factory):
    api = scripted_api([])
    async with runner_factory(api) as runner:
        _, first = await bash(runner, api, "echo first")
        session = first.session_id
        assert session
        out, resumed = await bash(runner, api, "echo second", phase_id="p2", resume_session_id=session)
        assert resumed.session_id == session
        api.set_script([Reply.text("never")])
        request = pb.RunPhaseRequest(job_id="job-other", phase_id="p1", prompt="x", working_dir=str(runner.workdir),
                                     project_id="other-project", options=pb.PhaseOptions(resume_session_id=session))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            async for _ in runner.stub.RunPhase(request, timeout=30):
                pass
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(refused.value).reason == "SESSION_OF_OTHER_PROJECT"
    assert "another project" in refused.value.details()


# -- degraded modes and `required` ------------------------------------------------------------


# io_uring_setup(1, NULL): the seccomp filter answers ENOSYS (38); the kernel itself EFAULT (14).
IO_URING = "python3 -c 'import ctypes; c = ctypes.CDLL(None, use_errno=True); c.syscall(425, 1, None); " \
           "print(\"io_uring-errno\", ctypes.get_errno())'"


@pytest.mark.parametrize(("skip", "off"), [
    (["namespaces"], "namespaces"),  # no bubblewrap: a private network, Landlock files and scopes
    (["landlock"], "landlock"),  # bubblewrap's namespaces alone keep files and processes apart
    (["seccomp"], "seccomp"),
], ids=["no-bubblewrap", "no-landlock", "no-seccomp"])
async def test_each_degraded_mode_still_refuses_the_attacks_the_other_layers_cover(
        skip, off, claude_binary, scripted_api, runner_factory, tmp_path):
    other = tmp_path / "other-workspace"
    other.mkdir()
    (other / "secret.txt").write_text("another job's file\n")
    outside = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # noqa: ASYNC220
    try:
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(8)
            port = listener.getsockname()[1]
            api = scripted_api([])
            async with runner_factory(api, sandbox_skip_layers=skip) as runner:
                out, result = await bash(runner, api, "; ".join([
                    probe(f"head -c 16 {runner.data_dir}/helix-runner.sqlite3 >/dev/null 2>&1"),
                    probe(f"cat {other}/secret.txt >/dev/null 2>&1"),
                    probe(f"kill -0 {outside.pid} 2>/dev/null"),
                    probe(f"cat /proc/{outside.pid}/environ >/dev/null 2>&1"),
                    probe(f"timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' 2>/dev/null"),
                    # A user namespace of its own (to gain capabilities, undo mounts): bubblewrap's
                    # --disable-userns or the seccomp filter refuses it.
                    probe("unshare -U true 2>/dev/null"),
                    probe("echo mine > own.txt && echo t > $TMPDIR/t"),
                    IO_URING,
                ]))
        assert outside.poll() is None
    finally:
        outside.kill()
        outside.wait()
    words = out.split()
    assert words[:7] == [DENIED] * 6 + [OK], out
    # The seccomp filter refuses io_uring (ENOSYS); without it the kernel gets to say EFAULT.
    assert words[7:] == ["io_uring-errno", "14" if off == "seccomp" else "38"], out
    state = layers(result)
    assert state == {name: name != off for name in ("namespaces", "network", "landlock", "seccomp")}, state
    detail = {layer.name: layer.detail for layer in result.diagnostics.sandbox.layers}[off]
    assert detail == "turned off by configuration (sandbox_skip_layers)"


async def test_off_runs_phases_with_the_servers_view_and_says_so(claude_binary, scripted_api, runner_factory):
    api = scripted_api([])
    async with runner_factory(api, sandbox="off") as runner:
        out, result = await bash(runner, api, "; ".join([
            probe(f"head -c 16 {runner.data_dir}/helix-runner.sqlite3 >/dev/null 2>&1"), IO_URING]))
        status = (await runner.stub.GetServerStatus(pb.GetServerStatusRequest(), timeout=10)).status
    assert out.split() == [OK, "io_uring-errno", "14"], out  # nothing in the way
    assert not result.diagnostics.HasField("sandbox")  # unset: run without a sandbox (the proto says so)
    assert status.sandbox.setting == "off" and not any(x.active for x in status.sandbox.layers)


async def test_without_namespaces_landlock_is_the_boundary(claude_binary, scripted_api, runner_factory):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        api = scripted_api([])
        async with runner_factory(api, sandbox_skip_layers=["namespaces", "network"]) as runner:
            out, result = await bash(runner, api, "; ".join([
                probe(f"head -c 16 {runner.data_dir}/helix-runner.sqlite3 >/dev/null 2>&1"),
                probe(f"timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' 2>/dev/null"),
                probe("echo mine > own.txt"),
                probe("echo t > $TMPDIR/t && cat $TMPDIR/t >/dev/null"),
            ]))
    assert out.split() == [DENIED, DENIED, OK, OK], out
    state = layers(result)
    assert state["namespaces"] is False and state["landlock"] and state["seccomp"], result.diagnostics.sandbox
    assert state["network"]  # Landlock TCP rules instead of a network namespace


async def test_required_refuses_phases_while_a_layer_is_missing(claude_binary, scripted_api, runner_factory):
    api = scripted_api([Reply.text("never")])
    async with runner_factory(api, sandbox="required", sandbox_skip_layers=["seccomp"]) as runner:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await runner.run_phase("x")
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    info = error_info(refused.value)
    assert info.reason == "SANDBOX_UNAVAILABLE" and info.metadata["layer"] == "seccomp"
    assert api.message_requests() == []
