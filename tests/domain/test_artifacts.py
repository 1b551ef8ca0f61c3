"""Parsing git's -z listings into changed files, and the inline diff bound."""

from __future__ import annotations

import pytest

from helix_runner.domain.artifacts import (
    ChangedFile,
    bounded_diff,
    changed_files,
    parse_name_status,
    parse_numstat,
)


def test_name_status_with_renames_and_odd_paths():
    out = b"M\0src/a.py\0A\0new file.txt\0R087\0old/name.md\0docs/name.md\0D\0gone\0"
    assert parse_name_status(out) == [("M", "src/a.py", ""), ("A", "new file.txt", ""),
                                      ("R", "docs/name.md", "old/name.md"), ("D", "gone", "")]


def test_numstat_with_binary_and_rename():
    out = b"3\t1\tsrc/a.py\0-\t-\timg.png\0" + b"2\t0\t\0old/name.md\0docs/name.md\0"
    assert parse_numstat(out) == {"src/a.py": (3, 1, False), "img.png": (0, 0, True), "docs/name.md": (2, 0, False)}


def test_changed_files_join_by_path_sorted():
    files = changed_files(b"M\0z.txt\0A\0img.png\0", b"1\t1\tz.txt\0-\t-\timg.png\0")
    assert files == (ChangedFile("img.png", "A", binary=True), ChangedFile("z.txt", "M", lines_added=1,
                                                                          lines_deleted=1))


def test_truncated_record_is_an_error_not_a_guess():
    with pytest.raises(ValueError):
        parse_name_status(b"R100\0only-old\0")


def test_bounded_diff_cuts_at_a_line_boundary():
    diff = b"".join(b"+line %05d\n" % i for i in range(10_000))
    text, cut = bounded_diff(diff, limit=1000)
    assert cut and len(text.encode()) <= 1000 and text.endswith("\n")
    assert diff.startswith(text.encode())
    assert bounded_diff(b"+x\n", limit=1000) == ("+x\n", False)
