"""Cutting a session's transcript at a checkpoint (domain/session_cut.py): what a fork's CLI resumes."""

from __future__ import annotations

import orjson
import pytest

from helix_runner.domain.session_cut import (
    SessionCutError,
    call_result_line,
    cut_after,
    cut_at_call,
    cut_before_result,
)


def _entry(uuid: str, parent: str | None, role: str, content) -> dict:
    return {"parentUuid": parent, "type": role, "uuid": uuid, "sessionId": "s1", "cwd": "/w",
            "message": {"role": role, "content": content}}


CALL = {"type": "tool_use", "id": "toolu_2", "name": "Bash", "input": {"command": "echo 2 > f2.txt"}}
ENTRIES = [
    _entry("u1", None, "user", "Write files"),
    _entry("a1", "u1", "assistant", [CALL]),
    _entry("r1", "a1", "user", [{"type": "tool_result", "tool_use_id": "toolu_2", "content": ""}]),
    _entry("a2", "r1", "assistant", [{"type": "text", "text": "done"}]),
]
TRANSCRIPT = b"\n".join(orjson.dumps(e) for e in ENTRIES) + b"\n"


def _lines(data: bytes) -> list[dict]:
    return [orjson.loads(line) for line in data.splitlines() if line.strip()]


def test_a_denied_call_is_cut_at_its_entry_and_answered_by_the_first_line():
    cut = cut_at_call(TRANSCRIPT, "a1", "toolu_2")
    assert [e["uuid"] for e in _lines(cut.transcript)] == ["u1", "a1"]  # its original result is gone
    assert cut.resume_at == "a1"
    line = orjson.loads(call_result_line("toolu_2", "not that file"))
    assert line["type"] == "user" and line["message"]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True, "content": "not that file"}]


def test_an_edited_call_carries_its_new_input_in_the_copy_and_in_the_deferred_entry():
    cut = cut_before_result(TRANSCRIPT, "a1", "toolu_2", {"command": "ls"}, entry_id="d1")
    entries = _lines(cut.transcript)
    assert [e["uuid"] for e in entries] == ["u1", "a1", "d1"]
    assert entries[1]["message"]["content"][0]["input"] == {"command": "ls"}  # runs edited, asked or not
    assert entries[2]["attachment"]["toolInput"] == {"command": "ls"}
    assert entries[2]["parentUuid"] == "a1" and cut.resume_at == "d1"
    assert orjson.loads(TRANSCRIPT.splitlines()[1])["message"]["content"][0]["input"]["command"].startswith("echo")


@pytest.mark.parametrize("cut", [lambda: cut_at_call(TRANSCRIPT, "nope", "toolu_2"),
                                 lambda: cut_at_call(TRANSCRIPT, "u1", "toolu_2"),
                                 lambda: cut_before_result(TRANSCRIPT, "a1", "toolu_9", {}),
                                 lambda: cut_after(TRANSCRIPT, "nope")])
def test_an_entry_or_call_the_transcript_lacks_is_an_error(cut):
    with pytest.raises(SessionCutError):
        cut()
