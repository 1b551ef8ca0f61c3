"""The sandbox with the server as an unprivileged user (nobody, through ``setpriv``), as a non-root
deployment runs it: the attacks of tests/api/test_sandbox.py are refused and legitimate work
passes, with every layer and in the Landlock-only mode (no user namespaces).

Everything here is nobody's, so without the sandbox each attack would succeed: same user, same
files, same loopback. The model's Bash writes its findings into the workspace, where the test reads
them (the server runs as a separate process, with its offline scripted API inside it).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import grpc
import pytest
from support.git_repos import make_repo
from support.processes import NOBODY, as_nobody, nobody_python, serving_port, start_serve_as_nobody
from support.runner_server import collect

from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix.runner.v1 import runner_service_pb2_grpc as pb_grpc
from helix_runner.offline import Reply, Script
from helix_runner.offline.script import RequestMatcher

pytestmark = pytest.mark.real_cli

OK, DENIED = "HELIX-OK", "HELIX-DENIED"


def probe(name: str, command: str) -> str:
    return f"if {command}; then echo {name}={OK}; else echo {name}={DENIED}; fi >> results.txt"


@pytest.fixture
def nobody_root():
    python = nobody_python()
    if python is None:
        pytest.skip("needs root, setpriv and a Python that nobody can run")
    # tmp_path is root's and closed to others: the server's directories live in one nobody owns.
    root = Path(tempfile.mkdtemp(prefix="helix-nobody-sandbox-"))
    try:
        yield python, root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("skip", [(), ("namespaces", "network")], ids=["all-layers", "landlock-only"])
async def test_attacks_are_refused_and_work_is_done_as_an_unprivileged_user(nobody_root, claude_binary, tmp_path,
                                                                            skip):
    python, root = nobody_root
    for d in ("data", "home", "work", "other"):
        (root / d).mkdir()
    (root / "other" / "secret.txt").write_text("another job's file\n")
    (root / "server-token").write_text("t" * 32)
    make_repo(root / "work")
    with socket_listener() as port:
        outside = subprocess.Popen(as_nobody("/usr/bin/python3", "-c", "import time; time.sleep(120)"))  # noqa: ASYNC220
        marker = f"helix-nobody-tmp-{os.getpid()}"
        try:
            attack = "; ".join([
                "rm -f results.txt",
                probe("db", f"head -c 16 {root}/data/helix-runner.sqlite3 >/dev/null 2>&1"),
                probe("other", f"cat {root}/other/secret.txt >/dev/null 2>&1"),
                probe("token", f"cat {root}/server-token >/dev/null 2>&1"),
                probe("signal", f"kill -0 {outside.pid} 2>/dev/null"),
                probe("environ", f"cat /proc/{outside.pid}/environ >/dev/null 2>&1"),
                probe("tcp", f"timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' 2>/dev/null"),
                # /tmp: the phase's own under bubblewrap; without it the host's, out of Landlock's reach.
                probe("tmp", f"echo x > /tmp/{marker}"),
                probe("tmpdir", "echo x > $TMPDIR/t && cat $TMPDIR/t >/dev/null"),
                # Legitimate work.
                probe("write", "echo mine > own.txt"),
                probe("python", "test \"$(python3 -c 'print(6 * 7)')\" = 42"),
                probe("pipeline", "test \"$(seq 1 5 | sort -r | head -1)\" = 5"),
                probe("git", "git -c user.name=m -c user.email=m@example.invalid commit -q --allow-empty -m x"),
            ])
            # Each phase's first request (its prompt is the last user message) gets its command;
            # the request after the tool's result gets the fallback, a text reply that ends it.
            script = Script([
                Reply.tool_use("Bash", {"command": attack}, match=RequestMatcher(last_user_contains="ATTACK")),
                Reply.tool_use("Bash", {"command": probe("tmp2", f"test -e /tmp/{marker}")},
                               match=RequestMatcher(last_user_contains="CHECK")),
            ])
            script.save(root / "script.json")
            for path in [root, *root.rglob("*")]:
                os.chown(path, NOBODY, NOBODY)
            args = ["--claude-path", str(claude_binary.path), "--offline-script", str(root / "script.json")]
            if skip:
                args += ["--sandbox-skip-layers", ",".join(skip)]
            log = tmp_path / "serve.log"
            proc = start_serve_as_nobody(root, log, python, *args)
            try:
                served = await asyncio.to_thread(serving_port, log, proc, 30.0)
                async with grpc.aio.insecure_channel(f"127.0.0.1:{served}") as channel:
                    stub = pb_grpc.RunnerServiceStub(channel)
                    results = []
                    for phase, prompt in (("p1", "ATTACK"), ("p2", "CHECK")):
                        request = pb.RunPhaseRequest(job_id="nobody", phase_id=phase, prompt=prompt,
                                                     working_dir=str(root / "work"),
                                                     options=pb.PhaseOptions(allowed_tools=["Bash"]))
                        _, result = await collect(stub.RunPhase(request, timeout=120))
                        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
                        results.append(result)
            finally:
                os.killpg(proc.pid, signal.SIGTERM)
                await asyncio.to_thread(proc.wait, 30)
            assert outside.poll() is None
        finally:
            outside.kill()
            outside.wait()
    found = dict(line.split("=", 1) for line in (root / "work" / "results.txt").read_text().split())
    assert found == {"db": DENIED, "other": DENIED, "token": DENIED, "signal": DENIED, "environ": DENIED,
                     "tcp": DENIED, "tmp": DENIED if skip else OK, "tmpdir": OK, "write": OK, "python": OK,
                     "pipeline": OK, "git": OK, "tmp2": DENIED}, found
    assert not Path("/tmp", marker).exists()  # its /tmp was its own, and gone with it
    layers = {layer.name: layer.active for layer in results[0].diagnostics.sandbox.layers}
    assert layers == {"namespaces": not skip, "network": True, "landlock": True, "seccomp": True}, layers


class socket_listener:
    """A loopback TCP listener the phase must not reach; its port."""

    def __enter__(self) -> int:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        return self.sock.getsockname()[1]

    def __exit__(self, *exc) -> None:
        self.sock.close()
