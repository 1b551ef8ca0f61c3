"""The credential vault and TLS termination from inside real phases: git clone and push over HTTPS,
and pip from a private index, each with a token stored through the API that the phase cannot find
(not in its environment, files, /proc or the proxy's answers); a host the token is not bound to
gets neither the token nor an intercepted handshake; a POST on a host whose rules allow GET only
is refused with the rule named."""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import secrets
import ssl
import subprocess
import sys

import grpc
import pytest
from support.certs import CertificateAuthority as InternalCA
from support.git_https import GitHttpsServer
from support.registry import MESSAGE, Registry

from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.egress import proxy as proxy_module
from helix_runner.offline import Reply

pytestmark = pytest.mark.real_cli

# What the phase searches for: the token's shape, as a regex that does not match its own text.
SHAPE = "helixtok[0-9a-f]{32}"
CANARY = "helixtok" + "f" * 32  # planted by the test: the search must find it, so it searched


def tls_context(issued) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(issued.cert_file, issued.key_file)
    return context


async def put_secret(runner, project: str, name: str, value: str, hosts: list[str], **kw) -> None:
    await runner.stub.PutEgressSecret(pb.PutEgressSecretRequest(project_id=project, name=name, value=value.encode(),
                                                                hosts=hosts, **kw), timeout=10)


def tool_output(events) -> str:
    (finished,) = [e.tool_call_finished for e in events if e.HasField("tool_call_finished")]
    return finished.content_preview


async def test_git_clone_and_push_over_https_with_a_token_the_phase_cannot_find(
    claude_binary, scripted_api, runner_factory, tmp_path
):
    """Before the vault the phase had no way to authenticate: the clone failed with 401 (or the token
    had to be in its environment). An unbound host sees the phase's own TLS, untouched."""
    token = "helixtok" + secrets.token_hex(16)
    internal = InternalCA(tmp_path / "internal", "internal CA")
    git_cert = internal.issue("git", ips=("127.0.0.2",), client=False)
    other_cert = internal.issue("other", ips=("127.0.0.3",), client=False)
    (tmp_path / "repos").mkdir()
    with GitHttpsServer("127.0.0.2", tmp_path / "repos", cert_file=git_cert.cert_file, key_file=git_cert.key_file,
                        username="x-access-token", token=token) as git, \
            Registry("127.0.0.3", tls=tls_context(other_cert)) as other:
        bare = git.make_repository("demo")
        url = f"https://{git.address}/demo.git"
        command = (
            f"git clone -q {url} demo > clone.log 2>&1; echo clone-exit=$?; cat demo/README.md; "
            "cd demo && git -c user.name=p -c user.email=p@example.com commit -q --allow-empty -m from-phase && "
            "git push -q origin HEAD:refs/heads/from-phase > ../push.log 2>&1; echo push-exit=$?; cd ..; "
            f"curl -sv '{url}/info/refs?service=git-upload-pack' -o answer.bin 2> curl.log; echo curl-exit=$?; "
            # The host the token is not bound to: its own certificate (internal CA only) must verify.
            f"curl -s --cacert internal.pem https://{other.address}/simple/ -o other.html; echo other-exit=$?; "
            f"env > env.txt; grep -rEl '{SHAPE}' env.txt /proc/[0-9]*/environ /proc/[0-9]*/cmdline "
            f"\"$HOME\" \"$TMPDIR\" /tmp . 2>/dev/null | sort -u > found.txt; echo found:; cat found.txt; echo :found"
        )
        api = scripted_api([Reply.tool_use("Bash", {"command": command, "timeout": 120000}), Reply.text("done")])
        async with runner_factory(api, egress_private_allow=[git.address, other.address],
                                  egress_upstream_ca_file=str(internal.ca_file)) as runner:
            (runner.workdir / "canary.txt").write_text(CANARY)
            (runner.workdir / "internal.pem").write_bytes(internal.ca)
            await put_secret(runner, "default", "GIT_TOKEN", token, [git.address],
                             presentation=pb.EGRESS_SECRET_PRESENTATION_BASIC, username="x-access-token")
            listed = await runner.stub.ListEgressSecrets(pb.ListEgressSecretsRequest(project_id="default"), timeout=10)
            events, result = await runner.run_phase("git", allowed_tools=["Bash"], deadline=180)
            logs = {n: (runner.workdir / n).read_text(errors="replace") for n in ("clone.log", "curl.log")}
            seen = (runner.workdir / "answer.bin").read_bytes() + (runner.workdir / "curl.log").read_bytes()
        git_requests = list(git.requests)
        other_requests = list(other.requests)
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    output = tool_output(events)
    assert "clone-exit=0" in output and "hello from the git server" in output, (output, logs)
    assert "push-exit=0" in output and "curl-exit=0" in output and "other-exit=0" in output, (output, logs)
    # The search ran (it found the canary) and found the token nowhere else.
    found = output.split("found:", 1)[1].split(":found", 1)[0].split()
    assert found and all(path.endswith("canary.txt") for path in found), output
    assert token.encode() not in seen  # the proxy's answers (and the server's, relayed) carry no token
    # The server got the token on every request, and the push landed on the host.
    expected = "Basic " + base64.b64encode(f"x-access-token:{token}".encode()).decode()
    assert git_requests and all(auth == expected for _, _, auth in git_requests), git_requests
    assert any(m == "POST" and p.endswith("/git-receive-pack") for m, p, _ in git_requests)
    pushed = (await asyncio.to_thread(subprocess.run, ["git", "-C", str(bare), "log", "-1", "--format=%s", "from-phase"],
                                      capture_output=True, text=True, check=True)).stdout.strip()
    assert pushed == "from-phase"
    # The unbound host: reached, without the token or any authorization.
    assert other_requests and all("authorization" not in h and token not in str(h) for _, h in other_requests)
    # Listing shows the name and hosts, never the value.
    (secret,) = listed.secrets
    assert (secret.name, list(secret.hosts), secret.env_name) == ("GIT_TOKEN", [git.address], "HELIX_SECRET_GIT_TOKEN")
    assert secret.openable and token not in str(listed)


async def test_pip_installs_from_a_private_index_and_a_post_its_rules_do_not_allow_is_refused(
    claude_binary, scripted_api, runner_factory, tmp_path, monkeypatch
):
    """Before TLS termination a host's rules could not be checked inside HTTPS: the POST went through."""
    token = "helixtok" + secrets.token_hex(16)
    internal = InternalCA(tmp_path / "internal", "internal CA")
    index_cert = internal.issue("index", dns=("index.helix.test",), client=False)
    authorization = "Basic " + base64.b64encode(f"__token__:{token}".encode()).decode()
    with Registry("127.0.0.2", tls=tls_context(index_cert), authorization=authorization) as index:
        port = index.address.rsplit(":", 1)[1]
        host = f"index.helix.test:{port}"

        async def resolve(name: str, p: int):  # DNS for the test's name (the proxy resolves it itself)
            if name == "index.helix.test":
                return [ipaddress.ip_address("127.0.0.2")]
            raise OSError(-2, "Name or service not known")

        monkeypatch.setattr(proxy_module, "system_resolver", resolve)
        pip = f"{sys.executable} -m pip --disable-pip-version-check --no-cache-dir"
        command = (
            f"{pip} install --retries 0 --timeout 15 --no-deps --index-url https://{host}/simple/ --target site "
            f"helixdemo > install.log 2>&1; echo install-exit=$?; "
            f"{sys.executable} -c 'import sys; sys.path.insert(0, \"site\"); import helixdemo; print(helixdemo.MESSAGE)'; "
            f"curl -s -X POST --data x https://{host}/simple/upload; echo; echo post-exit=$?"
        )
        api = scripted_api([Reply.tool_use("Bash", {"command": command, "timeout": 120000}), Reply.text("done")])
        async with runner_factory(api, egress_private_allow=[host], egress_upstream_ca_file=str(internal.ca_file),
                                  egress_allowlist=["GET index.helix.test/simple/*",
                                                    "GET index.helix.test/packages/*"]) as runner:
            await put_secret(runner, "default", "PIP_TOKEN", token, [host],
                             presentation=pb.EGRESS_SECRET_PRESENTATION_BASIC, username="__token__")
            events, result = await runner.run_phase("pip", allowed_tools=["Bash"], deadline=180)
            log = (runner.workdir / "install.log").read_text(errors="replace")
        served = list(index.requests)
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    output = tool_output(events)
    assert "install-exit=0" in output and MESSAGE in output, (output, log)
    assert served and all(h.get("authorization") == authorization for _, h in served)
    assert not any(path.startswith("/simple/upload") for path, _ in served)  # the POST never reached it
    assert "POST index.helix.test/simple/upload matches no HTTP rule" in output, output
    assert "GET index.helix.test/simple/*" in output  # the rule is named
    refusals = [e.gateway for e in events if e.HasField("gateway")]
    assert any("matches no HTTP rule" in r.message for r in refusals)


async def test_the_vault_api_validates_every_field_with_error_info(runner_factory):
    async with runner_factory(None) as runner:
        from support.egress_errors import error_info

        cases = [
            (dict(project_id="p", name="lower", value=b"v", hosts=["h.example.com"],
                  presentation=pb.EGRESS_SECRET_PRESENTATION_BEARER), "name"),
            (dict(project_id="p", name="OK", value=b"v", hosts=["*.example.com"],
                  presentation=pb.EGRESS_SECRET_PRESENTATION_BEARER), "hosts"),
            (dict(project_id="p", name="OK", value=b"v\n", hosts=["h.example.com"],
                  presentation=pb.EGRESS_SECRET_PRESENTATION_BEARER), "value"),
            (dict(project_id="p", name="OK", value=b"v", hosts=["h.example.com"],
                  presentation=pb.EGRESS_SECRET_PRESENTATION_HEADER, header="Host"), "header"),
            (dict(project_id="p", name="OK", value=b"v", hosts=["h.example.com"],
                  presentation=pb.EGRESS_SECRET_PRESENTATION_BASIC), "username"),
            (dict(project_id="p", name="OK", value=b"v", hosts=["h.example.com"]), "presentation"),
            (dict(project_id="", name="OK", value=b"v", hosts=["h.example.com"],
                  presentation=pb.EGRESS_SECRET_PRESENTATION_BEARER), "project"),
        ]
        for fields, field in cases:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await runner.stub.PutEgressSecret(pb.PutEgressSecretRequest(**fields), timeout=10)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, fields
            info = error_info(caught.value)
            assert info.reason == "INVALID_FIELD" and info.metadata["field"] == field, (fields, info)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await runner.stub.DeleteEgressSecret(pb.DeleteEgressSecretRequest(project_id="p", name="NOPE"), timeout=10)
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND
        assert error_info(caught.value).reason == "SECRET_NOT_FOUND"
