"""process/disk_usage.py: what a phase wrote, measured without following what it put in the way."""

from __future__ import annotations

import os
from pathlib import Path

from helix_runner.process import disk_usage as du


def _file(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    return path


def _blocks(path: Path) -> int:
    return os.lstat(path).st_blocks * 512


def test_counts_the_blocks_of_every_file_and_directory_below_the_roots(tmp_path):
    a = _file(tmp_path / "ws" / "a.bin", 300_000)
    b = _file(tmp_path / "ws" / "deep" / "er" / "b.bin", 70_000)
    usage = du.disk_usage([tmp_path / "ws"])
    dirs = sum(_blocks(d) for d in (tmp_path / "ws" / "deep", tmp_path / "ws" / "deep" / "er"))
    assert usage == du.DiskUsage(_blocks(a) + _blocks(b) + dirs, 4, True)
    assert usage.bytes >= 370_000


def test_a_root_inside_another_and_a_hard_link_count_once(tmp_path):
    big = _file(tmp_path / "ws" / "sub" / "big.bin", 1 << 20)
    for i in range(5):
        os.link(big, tmp_path / "ws" / f"link{i}")
    once = du.disk_usage([tmp_path / "ws"]).bytes
    assert du.disk_usage([tmp_path / "ws", tmp_path / "ws" / "sub", tmp_path / "ws"]).bytes == once
    assert once < 2 * _blocks(big)


def test_a_link_to_elsewhere_is_counted_as_itself_and_never_followed(tmp_path):
    _file(tmp_path / "elsewhere" / "huge.bin", 4 << 20)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "to-elsewhere").symlink_to(tmp_path / "elsewhere")
    (ws / "to-root").symlink_to("/")
    assert du.disk_usage([ws]).bytes < 1 << 20
    # A root that is itself a link is not followed either.
    assert du.disk_usage([ws / "to-elsewhere"]) == du.DiskUsage(0, 0, True)


def test_a_missing_root_counts_nothing(tmp_path):
    assert du.disk_usage([tmp_path / "gone"]) == du.DiskUsage(0, 0, True)


def test_the_walk_stops_at_max_entries_and_says_so(tmp_path):
    for i in range(50):
        _file(tmp_path / "ws" / f"f{i}", 10)
    usage = du.disk_usage([tmp_path / "ws"], max_entries=20)
    assert (usage.entries, usage.complete) == (20, False)
    assert du.disk_usage([tmp_path / "ws"]).complete


def test_a_directory_swapped_for_a_link_mid_walk_is_not_followed(tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    _file(ws / "d" / "small", 10)
    _file(tmp_path / "outside" / "huge.bin", 8 << 20)
    real_open = os.open

    def swap_then_open(path, flags, *args, **kwargs):
        if path == "d" and kwargs.get("dir_fd") is not None:  # after the listing saw a directory
            os.rename(ws / "d", tmp_path / "d-moved")
            os.symlink(tmp_path / "outside", ws / "d")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(du.os, "open", swap_then_open)
    assert du.disk_usage([ws]).bytes < 1 << 20
