"""RunRewind on its own: a rewind whose session cannot be cut at the checkpoint tells the caller why and
resumes the phase where it was, instead of ending it or leaving the caller waiting."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from support.cli_lines import SID, init

from helix_runner.domain.checkpoints import Checkpoint, CheckpointKind, WorkspaceKind, WorkspaceSnapshot
from helix_runner.domain.phase_result import Attempt
from helix_runner.domain.phase_spec import PhaseSpec
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.phase_stream import PhaseStream, PhaseStreamOptions
from helix_runner.errors import RunnerError
from helix_runner.phases.attempts import AttemptPlan, Retries
from helix_runner.phases.fork import ForkPoint
from helix_runner.phases.run_rewind import RunRewind
from helix_runner.process.claude_command import prompt_line

WAIT_S = 5.0
FIRST_LINE = b'{"the":"prompt"}\n'


class Checkpoints:
    def __init__(self, checkpoint: Checkpoint) -> None:
        self.checkpoints = [checkpoint]

    async def settled(self) -> None:
        pass


def make(tmp_path, stored: bytes):
    workspace = WorkspaceSnapshot(WorkspaceKind.NONE)
    checkpoint = Checkpoint(3, CheckpointKind.TOOL_CALL, 12, SID, workspace, 1, tool_use_id="t1", tool_name="Bash",
                            turn=1, resume_at="u9")
    spec = PhaseSpec.create(job_id="j", phase_id="p", project_id="proj", prompt="hi", working_dir=str(tmp_path))
    stream = PhaseStream(PhaseStreamOptions())
    stream.feed(init())
    stops: list[str] = []
    stopped = asyncio.Event()
    requeued = []
    control = SimpleNamespace(hard_paused=True, pause_requested=False, pending={}, answered_at_start=[])
    retries = Retries()
    rewind = RunRewind("j", "p", Checkpoints(checkpoint), control=control, stream=stream,
                       attempts=[Attempt(1, PhaseStatus.INTERRUPTED, "rewound", session_id=SID)], retries=retries,
                       spec=spec, first_line=FIRST_LINE, emit=lambda payload: None,
                       stop_cli=lambda cause, reason: (stops.append(reason), stopped.set()),
                       requeue=lambda plan, why: requeued.append((plan, why)) or plan,
                       transcript_path=lambda session_id: None, session_file=lambda name: tmp_path / f"{name}.jsonl",
                       ended=lambda: False, status=lambda: PhaseStatus.PAUSED)

    async def read_stored(session_id: str) -> bytes:
        return stored

    return rewind, control, stops, stopped, requeued, read_stored


async def test_a_rewind_that_cannot_be_cut_resumes_the_phase_where_it_was_and_says_why(tmp_path):
    rewind, control, stops, stopped, requeued, read_stored = make(tmp_path, stored=b"")  # no transcript kept
    asked = asyncio.ensure_future(rewind.request(ForkPoint(number=3, conversation_only=True), read_stored))
    await asyncio.wait_for(stopped.wait(), WAIT_S)  # the CLI is asked to stop (it writes its transcript out)
    assert stops == ["rewound to checkpoint 3"] and rewind.pending
    plan = await rewind.rewound(AttemptPlan(1, rewind.spec, FIRST_LINE, SID))
    with pytest.raises(RunnerError, match="was not kept") as caught:
        await asyncio.wait_for(asked, WAIT_S)
    assert caught.value.reason == "TRANSCRIPT_UNAVAILABLE"
    # The next attempt continues the session as it was, with the continuation prompt; no attempt is used up.
    assert (plan.number, plan.spec.resume_session_id, plan.spec.fork_session) == (2, SID, False)
    assert plan.prompt_line == prompt_line(rewind.retries.policy.continuation_prompt)
    assert rewind.retries.policy.max_attempts == 2
    assert [why for _, why in requeued] == ["the rewind to checkpoint 3 failed: " + caught.value.message]
    assert not rewind.pending
    # The hard pause taken while the CLI ran goes on as a pause asked for (its processes are gone).
    assert (control.hard_paused, control.pause_requested) == (False, True)
