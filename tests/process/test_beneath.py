"""Opening a file a phase wrote without following what it put in the way (process/beneath.py, issue 30.6)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from helix_runner.process.beneath import NotBeneath, open_fd_beneath

WAYS = pytest.mark.parametrize("use_openat2", [True, False], ids=["openat2", "walk"])


@pytest.fixture
def home(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(anchor, transcript, secret): a private home with a transcript, and a file outside it."""
    anchor = tmp_path / "home"
    transcript = anchor / ".claude" / "projects" / "-w" / "s.jsonl"
    transcript.parent.mkdir(parents=True)
    transcript.write_bytes(b'{"type":"user"}\n')
    secret = tmp_path / "data" / "api-key"
    secret.parent.mkdir()
    secret.write_bytes(b"sk-ant-secret\n")
    return anchor, transcript, secret


def read(anchor: Path, path: Path, use_openat2: bool) -> bytes:
    fd = open_fd_beneath(anchor, path, use_openat2=use_openat2)
    with os.fdopen(fd, "rb") as f:
        return f.read()


@WAYS
def test_a_plain_file_below_the_anchor_is_read(home, use_openat2):
    anchor, transcript, _ = home
    assert read(anchor, transcript, use_openat2) == b'{"type":"user"}\n'


@WAYS
def test_the_file_swapped_for_a_link_is_refused(home, use_openat2):
    anchor, transcript, secret = home
    transcript.unlink()
    transcript.symlink_to(secret)
    with pytest.raises(NotBeneath):
        read(anchor, transcript, use_openat2)


@WAYS
def test_a_directory_on_the_way_swapped_for_a_link_is_refused(home, use_openat2):
    """The race of issue 30.6 (a parent renamed between a check and the read) has no window here:
    the whole path is resolved by one call, and a link anywhere on it fails that call."""
    anchor, transcript, secret = home
    projects = transcript.parent.parent
    (secret.parent / "-w").mkdir()
    (secret.parent / "-w" / "s.jsonl").write_bytes(b"the data dir's file\n")
    os.rename(projects, anchor / ".claude" / "projects-away")
    projects.symlink_to(secret.parent)
    with pytest.raises(NotBeneath):
        read(anchor, transcript, use_openat2)


@WAYS
def test_a_path_out_of_the_anchor_is_refused(home, use_openat2):
    anchor, _, secret = home
    with pytest.raises(NotBeneath):
        read(anchor, secret, use_openat2)
    with pytest.raises(NotBeneath):
        read(anchor, anchor / ".." / "data" / "api-key", use_openat2)


@WAYS
def test_a_fifo_is_refused_without_blocking(home, use_openat2):
    anchor, transcript, _ = home
    transcript.unlink()
    os.mkfifo(transcript)
    done = threading.Event()
    errors: list[BaseException] = []

    def attempt() -> None:
        try:
            read(anchor, transcript, use_openat2)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            errors.append(exc)
        done.set()

    threading.Thread(target=attempt, daemon=True).start()
    assert done.wait(10), "opening a FIFO blocked"
    assert errors and isinstance(errors[0], NotBeneath)
