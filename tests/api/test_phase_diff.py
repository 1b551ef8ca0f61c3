"""GetPhaseDiff's file reads (api/phase_diff.py), without a server."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from helix.runner.v1 import runner_service_pb2
from helix_runner.api.phase_diff import DIFF_FILE, read_diff_page
from helix_runner.errors import RunnerError


def _row(recording_dir: Path) -> SimpleNamespace:
    return SimpleNamespace(job_id="j", phase_id="p", recording_dir=str(recording_dir), end_time_ns=1)


def test_a_diff_file_is_read_in_pages(tmp_path):
    (tmp_path / DIFF_FILE).write_bytes(b"x" * 10)
    page = read_diff_page(_row(tmp_path), runner_service_pb2.GetPhaseDiffRequest(page_size=4))
    assert page.chunk == b"xxxx" and page.total_bytes == 10 and page.next_page_token


def test_a_symlink_in_place_of_the_diff_is_not_followed(tmp_path):
    """A link planted in a recording directory must not turn GetPhaseDiff into a file reader."""
    secret = tmp_path / "secret.txt"
    secret.write_text("server secret\n")
    recording = tmp_path / "rec"
    recording.mkdir()
    (recording / DIFF_FILE).symlink_to(secret)
    with pytest.raises(RunnerError) as caught:
        read_diff_page(_row(recording), runner_service_pb2.GetPhaseDiffRequest())
    assert caught.value.reason == "DIFF_NOT_AVAILABLE"
