"""The server's copies of a phase's transcript never follow a link the phase put in the way (issue 30.6).

``transcript_locator`` skips a transcript that is a link when it looks, but the phase runs on: it can
swap the file, or a directory on the way, for a link between that look and the read. These tests
stand for that race by handing the readers the swapped path itself: before, the copy for forks
(``TranscriptCopy``) and the hand-over's mirror (``TranscriptMirror``) read through the link, and
the file's content was kept as the phase's transcript, for a fork or a resume to hand back later."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helix_runner.phases.checkpoints import TranscriptCopy
from helix_runner.phases.handover import TranscriptMirror

SECRET = b'{"secret": "sk-ant-from-the-data-dir"}\n'


@pytest.fixture
def swapped(tmp_path: Path) -> dict[str, Path]:
    """A private home whose transcript and whose projects directory are each swapped for a link."""
    home = tmp_path / "homes" / "run" / "home"
    own = home / ".claude" / "projects" / "-w"
    own.mkdir(parents=True)
    (own / "s.jsonl").write_bytes(b'{"type":"user"}\n')
    data = tmp_path / "data"
    (data / "-w").mkdir(parents=True)
    (data / "-w" / "s.jsonl").write_bytes(SECRET)
    (data / "api-key.jsonl").write_bytes(SECRET)
    file_link = home / ".claude" / "projects" / "-x" / "s.jsonl"
    file_link.parent.mkdir()
    file_link.symlink_to(data / "api-key.jsonl")
    dir_link = home / ".claude" / "other"
    os.symlink(data, dir_link)
    return {"plain": own / "s.jsonl", "file link": file_link, "dir link": dir_link / "-w" / "s.jsonl"}


def test_the_copy_for_forks_reads_its_own_file_and_no_link(swapped):
    assert TranscriptCopy("j", "p").read(swapped["plain"], "s").data == b'{"type":"user"}\n'
    assert TranscriptCopy("j", "p").read(swapped["file link"], "s") is None
    assert TranscriptCopy("j", "p").read(swapped["dir link"], "s") is None


class FakeHandover:
    def __init__(self) -> None:
        self.mirrored: list[bytes] = []

    def mirror_transcript(self, job_id, phase_id, session_id, offset, data) -> None:
        self.mirrored.append(data)

    def drop_transcript(self, job_id, phase_id, session_id) -> None:
        pass


def test_the_hand_over_mirror_reads_its_own_file_and_no_link(swapped):
    handover = FakeHandover()
    assert TranscriptMirror(handover, "j", "p").mirror(swapped["plain"], "s") > 0
    assert TranscriptMirror(handover, "j", "p").mirror(swapped["file link"], "s") == 0
    assert TranscriptMirror(handover, "j", "p").mirror(swapped["dir link"], "s") == 0
    assert handover.mirrored == [b'{"type":"user"}\n']
