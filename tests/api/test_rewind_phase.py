"""RewindPhase end to end: a held phase goes back to an earlier checkpoint in place, with the real CLI
against the scripted Messages API (docs/fork-and-rewind.md)."""

from __future__ import annotations

import grpc
import pytest
from support.git_repos import make_repo, sh
from support.phase_box import MODES, sandbox_config
from support.streams import start_phase

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.api.errors import error_info
from helix_runner.offline import Reply
from helix_runner.offline.script import RequestMatcher, Usage
from helix_runner.phases.fork import FORK_CONTINUATION

pytestmark = [pytest.mark.real_cli, pytest.mark.slow]

CALLS = [f"toolu_call{i}" for i in range(1, 4)]
USAGE = Usage(input_tokens=100, output_tokens=20)


def script() -> list[Reply]:
    turns = [Reply.tool_use("Bash", {"command": f"echo {i} > f{i}.txt", "description": f"write f{i}"},
                            tool_use_id=CALLS[i - 1], usage=USAGE,
                            match=RequestMatcher(tool_use_ids=tuple(CALLS[:i - 1]), not_contains=FORK_CONTINUATION))
             for i in range(1, 4)]
    # After the rewind to call 1: the session carries call 1 only, then the continuation.
    turns.append(Reply.text("Rewound and done.", usage=USAGE,
                            match=RequestMatcher(tool_use_ids=(CALLS[0],), contains=FORK_CONTINUATION)))
    return turns


# Every sandbox mode: a rewind's git calls run in the server (its git runner, boxed where bubblewrap
# runs) and write the working tree back, while the phase's repository stays read-only to it there.
@pytest.mark.parametrize("mode", list(MODES))
async def test_a_held_phase_rewinds_in_place_its_files_and_session_back_at_call_1(
        claude_binary, scripted_api, runner_factory, mode):
    api = scripted_api(script())
    async with runner_factory(api, **sandbox_config(mode)) as runner:
        repo = make_repo(runner.workdir)
        head = sh(repo, "rev-parse", "HEAD").strip()
        git_config = (repo / ".git" / "config").read_bytes()
        bp = res.Breakpoint(breakpoint_id="third", input_pattern=res.InputPatternCondition(regex="f3"))
        phase = start_phase(runner, "rw", allowed_tools=["Bash"], breakpoints=[bp])
        await phase.control(ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT)
        assert {p.name for p in repo.iterdir() if p.suffix == ".txt"} == {"f1.txt", "f2.txt", "shared.txt"}

        # A running phase that is not paused or held cannot be rewound; this one holds call 3.
        answer = await runner.stub.RewindPhase(pb.RewindPhaseRequest(
            **phase.ids(), point=pb.ForkPoint(tool_use_id=CALLS[0])), timeout=60)
        assert answer.checkpoint.tool_use_id == CALLS[0]
        result = await phase.finish(90)
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        assert api.fallback_requests() == []  # the resumed session carried call 1 only
        # The workspace went back in place: call 2's file is gone, call 1's stays; HEAD unchanged.
        assert {p.name for p in repo.iterdir() if p.suffix == ".txt"} == {"f1.txt", "shared.txt"}
        assert sh(repo, "rev-parse", "HEAD").strip() == head
        # A rewind restores the working tree only: the repository's config is not written back.
        assert (repo / ".git" / "config").read_bytes() == git_config
        events = phase.events
        (rewound,) = [e for e in events if e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_REWOUND]
        assert rewound.sequence == answer.sequence and rewound.control.checkpoint == answer.checkpoint.number
        assert rewound.control.rewound_after_sequence == answer.checkpoint.sequence
        assert rewound.control.rewound_to_sequence == rewound.sequence - 1
        # The rewound part stays in the history: call 2 and the hold of call 3 are still there.
        superseded = [e for e in events if answer.checkpoint.sequence < e.sequence <= rewound.control.rewound_to_sequence]
        assert any(e.HasField("tool_call_finished") and e.tool_call_finished.tool_use_id == CALLS[1] for e in superseded)
        assert [a.end_kind for a in result.attempts] == [res.ATTEMPT_END_KIND_REWOUND, res.ATTEMPT_END_KIND_COMPLETED]
        inspection = (await runner.stub.InspectPhase(pb.InspectPhaseRequest(**phase.ids()), timeout=10)).inspection
        marked = {(c.tool_use_id, c.rewound) for c in inspection.checkpoints if c.tool_use_id}
        assert (CALLS[0], False) in marked and (CALLS[1], True) in marked
        # Cost stays exact: the rewound attempt's three requests were spent, then the resumed one's.
        assert sum(m.tokens.input_tokens for m in result.cost.models) == 400
        assert sum(m.tokens.output_tokens for m in result.cost.models) == 80


async def test_a_running_phase_is_rewound_only_when_paused_or_held(claude_binary, scripted_api, runner_factory):
    api = scripted_api([Reply.text("done")])
    async with runner_factory(api) as runner:
        make_repo(runner.workdir)
        phase = start_phase(runner, "rw2", allowed_tools=["Bash"])
        await phase.finish(60)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await runner.stub.RewindPhase(pb.RewindPhaseRequest(**phase.ids(), point=pb.ForkPoint(turn=1)),
                                          timeout=10)
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert error_info(caught.value).reason == "ILLEGAL_TRANSITION"
