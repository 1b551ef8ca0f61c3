"""The proxy's byte cap from inside a real phase: a phase that downloads past egress_max_bytes_per_phase
is stopped FAILED with RESOURCE_FAULT_EGRESS_LIMIT and a reason naming the limit; before the cap the
download went through whole."""

from __future__ import annotations

import pytest
from support.http_service import loopback_service

from helix.runner.v1 import resources_pb2 as res
from helix_runner.offline import Reply

pytestmark = pytest.mark.real_cli

BODY = b"x" * (4 * 1024 * 1024)


async def test_a_phase_past_its_egress_byte_cap_fails_naming_the_limit(claude_binary, scripted_api, runner_factory):
    with loopback_service(BODY) as address:
        # Each download alone is under the cap; together they pass it.
        command = "; ".join(f"curl -s -o big{i}.bin http://{address}/big; echo exit{i}=$?" for i in range(4))
        api = scripted_api([Reply.tool_use("Bash", {"command": command, "timeout": 120000}), Reply.text("done")])
        async with runner_factory(api, egress_private_allow=[address],
                                  egress_max_bytes_per_phase=10 * 1024 * 1024) as runner:
            events, result = await runner.run_phase("download", allowed_tools=["Bash"], deadline=120)
    assert result.status == res.PHASE_STATUS_FAILED, result
    assert result.resource_fault == res.RESOURCE_FAULT_EGRESS_LIMIT
    assert "egress_max_bytes_per_phase" in result.reason and str(10 * 1024 * 1024) in result.reason
    refusals = [e.gateway.message for e in events if e.HasField("gateway")]
    assert any("egress_max_bytes_per_phase" in m for m in refusals)
