"""The phases of the real-CLI tests run the CLI the tests were given: the bundled one, or the one
``HELIX_TEST_CLAUDE`` names (docs/testing.md, "Another CLI"). Without this, a tier meant for the
newest CLI could run the bundled one and pass for the wrong reason."""

from __future__ import annotations

import pytest

from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.offline import Reply

pytestmark = pytest.mark.real_cli


async def test_a_phase_runs_the_cli_the_tests_were_given(claude_binary, scripted_api, runner_factory):
    api = scripted_api([Reply.text("ok")])
    async with runner_factory(api) as runner:
        request = pb.RunPhaseRequest(job_id="v", phase_id="p", prompt="hi", working_dir=str(runner.workdir))
        inits = [e.session_init async for r in runner.stub.RunPhase(request, timeout=60)
                 for e in r.events if e.HasField("session_init")]
    assert inits and inits[0].cli_version == claude_binary.version()
