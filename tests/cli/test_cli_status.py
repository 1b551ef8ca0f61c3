"""`helix-runner status`: the sandbox the running server found and probed at start (GetServerStatus).

Against an in-process server with no scripted API, so the phases would have to reach the model
API directly: every layer but the network one is on here, and the network one says why it is off.
"""

from __future__ import annotations

import json

from support.cli_verbs import helix

from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb


async def test_status_prints_each_layer_with_what_it_does_or_why_it_is_off(runner_factory):
    async with runner_factory(None) as runner:
        at = f"127.0.0.1:{runner.server.port}"
        text = await helix(at, "status")
        as_json = await helix(at, "status", "--json")
        status = (await runner.stub.GetServerStatus(pb.GetServerStatusRequest(), timeout=10)).status
    assert text.code == 0 and as_json.code == 0, text.err + as_json.err
    layers = {layer.name: layer for layer in status.sandbox.layers}
    assert status.sandbox.setting == "auto" and list(layers) == ["namespaces", "network", "landlock", "seccomp"]
    assert not layers["network"].active and "directly" in layers["network"].detail
    assert status.containment_mode != res.CONTAINMENT_MODE_UNSPECIFIED and status.refusal == ""
    assert status.version
    lines = text.lines
    assert lines[1] == "sandbox: auto"
    for layer in layers.values():  # one row per layer, its state and its detail
        row = next(line for line in lines if line.split()[0] == layer.name)
        assert row.split()[1] == ("on" if layer.active else "OFF")
        assert layer.detail[:40] in row
    assert any(line.startswith("containment: ") for line in lines)
    assert not any("refused" in line for line in lines)
    data = json.loads(as_json.out)
    assert [x["name"] for x in data["sandbox"]["layers"]] == list(layers)
    assert data["sandbox"]["layers"][1] == {"name": "network", "active": False, "detail": layers["network"].detail}


async def test_status_says_when_every_phase_is_refused(runner_factory):
    async with runner_factory(None, sandbox="required", sandbox_skip_layers=["seccomp"]) as runner:
        text = await helix(f"127.0.0.1:{runner.server.port}", "status")
    assert text.code == 0, text.err
    refused = [line for line in text.lines if line.startswith("every phase is refused: ")]
    # No model gateway here either: the network layer is missing too, and both are named.
    assert refused and "its network and seccomp layers are unavailable" in refused[0]
    assert "sandbox: required" in text.lines
    seccomp = next(line for line in text.lines if line.split()[0] == "seccomp")
    assert "OFF" in seccomp and "sandbox_skip_layers" in seccomp


async def test_status_of_a_server_without_a_sandbox(runner_factory):
    async with runner_factory(None, sandbox="off") as runner:
        status = (await runner.stub.GetServerStatus(pb.GetServerStatusRequest(), timeout=10)).status
        text = await helix(f"127.0.0.1:{runner.server.port}", "status")
    assert status.sandbox.setting == "off"
    assert [(x.active, x.detail) for x in status.sandbox.layers] == [(False, "the sandbox is off (sandbox = off)")] * 4
    assert "sandbox: off" in text.lines
