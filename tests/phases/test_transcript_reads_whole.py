"""The server's whole reads of a running phase's transcript never follow a link the phase put in the way.

Besides the running copies (tests/phases/test_transcript_reads.py), the server reads the whole
transcript of a live phase three times: for a fork of it (``PhaseService._transcript_of``), for a
rewind (the transcript to cut), and for the true cost of an attempt it stopped
(``RunRewind.stopped_attempt_cost``). The locator skips a transcript that is a link when it looks;
the phase runs on, and can swap the file, or a directory on the way, for a link between that look
and the read. Before, each of these read through the link: the fork started from a file only the
server may read, handed to the fork's model; the attempt was charged with what that file said.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from helix_runner.domain.pricing import PriceTable
from helix_runner.phases.handover import TRANSCRIPT_READ_MAX_BYTES, read_transcript
from helix_runner.phases.run_rewind import RunRewind
from helix_runner.phases.service import PhaseService
from helix_runner.process.beneath import TooLarge

OWN = b'{"type":"user","sessionId":"s"}\n'
SECRET = (b'{"type":"cost-state","modelUsage":{"claude-sonnet-4-5":{"inputTokens":1000000,'
          b'"outputTokens":1000000,"costUSD":9999}},"secret":"sk-ant-from-the-data-dir"}\n')


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, Path]:
    """A home whose transcript is swapped for a link, one whose projects directory is, and a plain one."""
    home = tmp_path / "homes" / "run" / "home"
    own = home / ".claude" / "projects" / "-w"
    own.mkdir(parents=True)
    (own / "s.jsonl").write_bytes(OWN)
    data = tmp_path / "data"
    (data / "-w").mkdir(parents=True)
    (data / "-w" / "s.jsonl").write_bytes(SECRET)
    (data / "api-key.jsonl").write_bytes(SECRET)
    other = tmp_path / "homes" / "other" / "home" / ".claude" / "projects"
    (other / "-w").mkdir(parents=True)
    (other / "-w" / "s.jsonl").symlink_to(data / "api-key.jsonl")
    third = tmp_path / "homes" / "third" / "home" / ".claude"
    third.mkdir(parents=True)
    (third / "projects").symlink_to(data)
    return {"plain": own / "s.jsonl", "file link": other / "-w" / "s.jsonl", "dir link": third / "projects" / "-w" / "s.jsonl"}


def fork_read(path: Path) -> bytes:
    async def stored(job_id, phase_id, session_id) -> bytes:
        return b"the store's copy\n"

    service = SimpleNamespace(stored_transcript=stored)
    live = SimpleNamespace(run=SimpleNamespace(transcript_path=lambda session_id: path))
    row = SimpleNamespace(job_id="j", phase_id="p")
    return asyncio.run(PhaseService._transcript_of(service, live, row, "s"))


@pytest.mark.parametrize("which", ["file link", "dir link"])
def test_a_fork_of_a_live_phase_reads_no_link(paths, which):
    assert fork_read(paths["plain"]) == OWN
    assert fork_read(paths[which]) == b"the store's copy\n"


def stopped_cost(path: Path):
    run = SimpleNamespace(stream=SimpleNamespace(session_id="s", prices=PriceTable()), attempts=[],
                          transcript_path=lambda session_id: path)
    return asyncio.run(RunRewind.stopped_attempt_cost(run))


@pytest.mark.parametrize("which", ["file link", "dir link"])
def test_a_stopped_attempts_cost_is_not_read_through_a_link(paths, which):
    assert stopped_cost(paths[which]) is None


def test_a_whole_read_is_capped(paths, monkeypatch):
    """The phase writes its transcript itself: one larger than the cap is not read into memory."""
    assert TRANSCRIPT_READ_MAX_BYTES >= 64 * 1024 * 1024
    monkeypatch.setattr("helix_runner.phases.handover.TRANSCRIPT_READ_MAX_BYTES", len(OWN) - 1)
    with pytest.raises(TooLarge):
        read_transcript(paths["plain"])
    assert os.path.getsize(paths["plain"]) == len(OWN)
