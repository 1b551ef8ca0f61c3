"""The attacker's tools work, so that a refusal in the attack suite is the sandbox's and not a broken
probe's: the evidence extraction, the hand-rolled gRPC client and the memory scanner (fast tier)."""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import sys

from support import attack_battery as battery

from helix.runner.v1 import runner_service_pb2 as pb


def test_evidence_names_markers_and_keys_by_digest():
    key = b"sk-ant-api03-" + b"A" * 40
    data = b"noise hxm-vprompt-0123456789abcdef more " + key + b" hxm-short-12 end"
    assert battery.evidence(data) == ["key:" + hashlib.sha256(key).hexdigest()[:16], "hxm-vprompt-0123456789abcdef"]


async def test_grpc_call_speaks_enough_http2_for_the_service(runner_factory):
    async with runner_factory() as runner:
        data = await asyncio.to_thread(battery.grpc_call, "127.0.0.1", runner.server.port,
                                       "/helix.runner.v1.RunnerService/ListJobs",
                                       pb.ListJobsRequest().SerializeToString())
    assert data[:1] == b"\x00" and int.from_bytes(data[1:5], "big") == len(data) - 5  # one gRPC message
    pb.ListJobsResponse.FromString(data[5:])


def test_scan_memory_finds_a_marker_in_another_process():
    marker = "hxm-scan-" + "5a" * 8
    code = f"import sys, time; held = ''.join(['{marker[:8]}', '{marker[8:]}']); print('ready', flush=True); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"ready\n"
        found, note = battery.scan_memory(child.pid)
    finally:
        child.kill()
        child.wait(10)
    assert marker in found, note
