"""Where a phase's checkpoints fall in its events (domain/checkpoints.py)."""

from __future__ import annotations

import orjson
import pytest
from support.cli_lines import SID, assistant, init, line, result

from helix_runner.domain.checkpoints import (
    Checkpoint,
    CheckpointKind,
    CheckpointNotFound,
    CheckpointTracker,
    WorkspaceKind,
    WorkspaceSnapshot,
    select_checkpoint,
    workspace_before,
)
from helix_runner.domain.phase_stream import PhaseStream


def _call(tool_use_id: str, message_id: str, uuid: str, parent: str | None = None) -> bytes:
    obj = assistant({"type": "tool_use", "id": tool_use_id, "name": "Bash", "input": {"command": "true"}},
                    message_id=message_id, uuid=uuid, parent_tool_use_id=parent)
    return line(obj)


def _result(tool_use_id: str, uuid: str, parent: str | None = None) -> bytes:
    return line({"type": "user", "uuid": uuid, "session_id": SID, "parent_tool_use_id": parent,
                 "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use_id,
                                                          "content": "ok"}]}})


def _checkpoints(*lines: bytes, tracker: CheckpointTracker | None = None):
    tracker = tracker or CheckpointTracker()
    stream = PhaseStream()
    return [c for e in stream.feed(b"".join(lines)) if (c := tracker.observe(e)) is not None]


def test_each_main_thread_call_and_turn_end_is_a_checkpoint_resuming_after_its_result() -> None:
    found = _checkpoints(
        init(),
        _call("toolu_1", "msg_1", "a-1"), _result("toolu_1", "u-1"),
        _call("toolu_2", "msg_2", "a-2"), _result("toolu_2", "u-2"),
        line(assistant({"type": "text", "text": "done"}, message_id="msg_3", uuid="a-3")),
        result(0.01),
    )
    assert [(c.number, c.kind, c.tool_use_id, c.turn, c.resume_at, c.call_at, c.before) for c in found] == [
        (1, CheckpointKind.TOOL_CALL, "toolu_1", 1, "u-1", "a-1", 0),
        (2, CheckpointKind.TOOL_CALL, "toolu_2", 2, "u-2", "a-2", 1),
        (3, CheckpointKind.TURN_END, "", 3, "a-3", "", 2),
    ]
    assert {c.session_id for c in found} == {SID}


def test_a_subagents_calls_are_no_checkpoints_and_parallel_calls_share_their_turn() -> None:
    both = assistant({"type": "tool_use", "id": "toolu_a", "name": "Bash", "input": {}},
                     {"type": "tool_use", "id": "toolu_b", "name": "Agent", "input": {}},
                     message_id="msg_1", uuid="a-1")
    found = _checkpoints(
        init(), line(both),
        _call("toolu_sub", "msg_sub", "s-1", parent="toolu_b"), _result("toolu_sub", "s-2", parent="toolu_b"),
        _result("toolu_a", "u-1"), _result("toolu_b", "u-2"),
    )
    assert [(c.tool_use_id, c.turn, c.before, c.call_at) for c in found] == [
        ("toolu_a", 1, 0, "a-1"), ("toolu_b", 1, 0, "a-1")]


def test_numbering_and_turns_go_on_where_an_earlier_run_of_the_phase_stopped() -> None:
    found = _checkpoints(init(), _call("toolu_9", "msg_9", "a-9"), _result("toolu_9", "u-9"),
                         tracker=CheckpointTracker(last_number=7, last_turn=4))
    assert [(c.number, c.turn, c.before) for c in found] == [(8, 5, 7)]


def _cp(number: int, kind=CheckpointKind.TOOL_CALL, tool_use_id="", turn=0, rewound=False, before=0):
    return Checkpoint(number, kind, number * 3, SID, WorkspaceSnapshot(WorkspaceKind.GIT_TREE, tree=f"t{number}"),
                      0, tool_use_id=tool_use_id, turn=turn, before=before, rewound=rewound)


def test_select_by_call_by_turn_and_by_number_never_a_rewound_one() -> None:
    cps = [_cp(0, CheckpointKind.START), _cp(1, tool_use_id="toolu_1", turn=1),
           _cp(2, tool_use_id="toolu_2", turn=2, before=1), _cp(3, tool_use_id="toolu_3", turn=2, before=2),
           _cp(4, tool_use_id="toolu_4", turn=3, rewound=True, before=3)]
    assert select_checkpoint(cps, tool_use_id="toolu_2").number == 2
    assert select_checkpoint(cps, turn=2).number == 3  # the end of the turn: its last call
    assert select_checkpoint(cps, number=1).number == 1
    with pytest.raises(CheckpointNotFound, match="turns with one: 1-2"):
        select_checkpoint(cps, turn=3)
    with pytest.raises(CheckpointNotFound, match="toolu_4"):
        select_checkpoint(cps, tool_use_id="toolu_4")
    with pytest.raises(CheckpointNotFound):
        select_checkpoint(cps, number=0)  # the start is no point to resume a conversation at
    assert workspace_before(cps, cps[2]).tree == "t1"
    assert workspace_before(cps, cps[1]).tree == "t0"


def test_a_result_without_a_started_call_is_no_checkpoint() -> None:
    assert _checkpoints(init(), _result("toolu_unknown", "u-1")) == []
    assert orjson.loads(_result("x", "y"))["uuid"] == "y"


def test_a_batch_observed_at_once_makes_the_checkpoints_one_by_one_does() -> None:
    # observe_all handles the main thread's text and thinking inline (the run feeds it every event):
    # it must count turns, keep the entry a turn end resumes at and find the same checkpoints as
    # observe, subagent text and a thinking block included.
    lines = b"".join([
        init(),
        line(assistant({"type": "thinking", "thinking": "hm", "signature": "s"}, message_id="msg_1", uuid="a-0")),
        _call("toolu_1", "msg_1", "a-1"), _result("toolu_1", "u-1"),
        line(assistant({"type": "text", "text": "sub"}, message_id="msg_sub", uuid="s-1",
                       parent_tool_use_id="toolu_1")),
        line(assistant({"type": "text", "text": "a"}, message_id="msg_2", uuid="a-2")),
        line(assistant({"type": "text", "text": "b"}, message_id="msg_2", uuid="a-3")),
        _call("toolu_2", "msg_3", "a-4"), _result("toolu_2", "u-2"),
        line(assistant({"type": "text", "text": "done"}, message_id="msg_4", uuid="a-5")),
        result(0.01),
    ])
    events = PhaseStream().feed(lines)
    one_by_one = CheckpointTracker()
    expected = [c for e in events if (c := one_by_one.observe(e)) is not None]
    at_once = CheckpointTracker()
    found = [c for i in range(0, len(events), 3) for c in at_once.observe_all(events[i:i + 3])]
    assert [c.kind for c in expected] == [CheckpointKind.TOOL_CALL, CheckpointKind.TOOL_CALL, CheckpointKind.TURN_END]
    assert found == expected
    assert (at_once.turn, at_once.position, at_once.last_number) == (one_by_one.turn, one_by_one.position,
                                                                      one_by_one.last_number) == (4, 3, 3)
