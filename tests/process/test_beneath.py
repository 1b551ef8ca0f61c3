"""Opening a file a phase wrote without following what it put in the way (process/beneath.py)."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import threading
from pathlib import Path

import pytest

from helix_runner.process.beneath import (
    NotBeneath,
    TooLarge,
    entries,
    open_dir_beneath,
    open_fd_beneath,
    read_beneath,
    remove_tree,
    write_beneath,
)

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


# -- a parent renamed between the check and the read: the walk (where openat2 is refused) ----------


def test_a_directory_swapped_for_a_link_during_the_walk_is_refused(home, monkeypatch):
    """The walk has opened ``.claude``; the phase then renames ``projects`` away and puts a link to
    the data dir in its place, before the walk takes its next step (injected at that step)."""
    anchor, transcript, secret = home
    (secret.parent / "-w").mkdir()
    (secret.parent / "-w" / "s.jsonl").write_bytes(b"the data dir's file\n")
    projects = anchor / ".claude" / "projects"
    real_open = os.open

    def open_after_the_swap(path, flags, mode=0o777, *, dir_fd=None):
        if path == "projects" and not projects.is_symlink():
            os.rename(projects, anchor / ".claude" / "projects-away")
            projects.symlink_to(secret.parent)
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", open_after_the_swap)
    with pytest.raises(NotBeneath):
        read(anchor, transcript, use_openat2=False)


def test_a_directory_renamed_after_the_walk_passed_it_still_leads_to_the_phases_own_file(home, monkeypatch):
    """The walk holds a descriptor of each directory it passed: renaming one of them (and putting a
    link to the data dir in its place) cannot redirect the rest of the walk."""
    anchor, transcript, secret = home
    (secret.parent / "projects" / "-w").mkdir(parents=True)
    (secret.parent / "projects" / "-w" / "s.jsonl").write_bytes(b"the data dir's file\n")
    claude = anchor / ".claude"
    real_open = os.open

    def open_after_the_swap(path, flags, mode=0o777, *, dir_fd=None):
        if path == "projects" and not claude.is_symlink():
            os.rename(claude, anchor / ".claude-away")
            claude.symlink_to(secret.parent)
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", open_after_the_swap)
    assert read(anchor, transcript, use_openat2=False) == b'{"type":"user"}\n'


def test_the_walk_is_used_where_openat2_is_refused(home, monkeypatch):
    """A seccomp profile that does not know openat2 answers EPERM or ENOSYS: the walk takes over,
    and still refuses a link."""
    from helix_runner.process import beneath

    def refused(dirfd, rel, flags):
        raise OSError(errno.ENOSYS, "openat2 refused")

    monkeypatch.setattr(beneath, "_openat2", refused)
    monkeypatch.setattr(beneath, "_openat2_works", None)
    anchor, transcript, secret = home
    assert read(anchor, transcript, use_openat2=None) == b'{"type":"user"}\n'
    assert beneath._openat2_works is False
    transcript.unlink()
    transcript.symlink_to(secret)
    with pytest.raises(NotBeneath):
        read(anchor, transcript, use_openat2=None)


# -- directories, capped reads, writes, removal ----------------------------------------------------


@WAYS
def test_a_directory_is_opened_only_below_without_links(home, use_openat2):
    anchor, transcript, secret = home
    fd = open_dir_beneath(anchor, transcript.parent, use_openat2=use_openat2)
    try:
        assert [name for name, _ in entries(fd)] == ["s.jsonl"]
    finally:
        os.close(fd)
    os.symlink(secret.parent, anchor / ".claude" / "data")
    with pytest.raises(NotBeneath):
        open_dir_beneath(anchor, anchor / ".claude" / "data", use_openat2=use_openat2)


def test_a_read_over_its_cap_reads_nothing(home):
    anchor, transcript, _ = home
    assert read_beneath(anchor, transcript, 1 << 20) == b'{"type":"user"}\n'
    with pytest.raises(TooLarge):
        read_beneath(anchor, transcript, 4)


def test_a_write_makes_its_directories_and_follows_no_link(home):
    anchor, _, secret = home
    target = anchor / ".claude" / "projects" / "-new" / "t.jsonl"
    write_beneath(anchor, target, b"x\n")
    assert target.read_bytes() == b"x\n"
    (anchor / ".claude" / "projects" / "-link").symlink_to(secret.parent)
    with pytest.raises(NotBeneath):
        write_beneath(anchor, anchor / ".claude" / "projects" / "-link" / "api-key", b"planted\n")
    (anchor / "file-link").symlink_to(secret)
    with pytest.raises(NotBeneath):
        write_beneath(anchor, anchor / "file-link", b"planted\n")
    assert secret.read_bytes() == b"sk-ant-secret\n"


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """(a tree the phase wrote, full of links to ``outside``; outside, with a file)."""
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "file").write_bytes(b"keep me\n")
    tree = tmp_path / "data" / "worktree"
    (tree / "sub" / "subsub").mkdir(parents=True)
    (tree / "sub" / "subsub" / "f").write_bytes(b"work\n")
    (tree / "dirlink").symlink_to(outside)
    (tree / "sub" / "filelink").symlink_to(outside / "deep" / "file")
    (tree / "sub" / "subsub" / "deeplink").symlink_to(outside / "deep")
    return tree, outside


def test_removing_a_tree_removes_its_links_not_what_they_point_at(tree):
    assert shutil.rmtree.avoids_symlink_attacks  # what remove_tree relies on (Linux)
    path, outside = tree
    remove_tree(path)
    assert not os.path.lexists(path)
    assert (outside / "deep" / "file").read_bytes() == b"keep me\n"
    remove_tree(path)  # gone already: nothing to do


def test_removing_a_tree_that_is_a_link_removes_the_link_only(tree):
    path, outside = tree
    link = path.parent / "link"
    link.symlink_to(outside)
    remove_tree(link)
    assert not os.path.lexists(link)
    assert (outside / "deep" / "file").read_bytes() == b"keep me\n"


def test_a_directory_swapped_for_a_link_while_the_tree_is_removed_is_not_followed(tree, monkeypatch):
    """The phase (or what it left running) swaps a directory not yet removed for a link to the
    outside directory, right when the removal starts (injected at its first unlink)."""
    path, outside = tree
    real_unlink = os.unlink
    swapped = []

    def unlink_after_the_swap(*args, **kwargs):
        if not swapped:
            swapped.append(True)
            os.rename(path / "sub", path / "sub-away")
            (path / "sub").symlink_to(outside)
        return real_unlink(*args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink_after_the_swap)
    with contextlib.suppress(OSError):
        remove_tree(path)
    monkeypatch.undo()
    assert swapped
    assert (outside / "deep" / "file").read_bytes() == b"keep me\n"
