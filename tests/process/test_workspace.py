"""Working directories must resolve inside a workspace root, symlinks included."""

from __future__ import annotations

import pytest

from helix_runner.errors import RunnerError
from helix_runner.process.workspace import resolve_working_dir


@pytest.fixture
def layout(tmp_path):
    root = tmp_path / "root"
    (root / "proj").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "escape").symlink_to(outside)
    (root / "file.txt").write_text("x")
    return root.resolve(), outside.resolve()


def test_inside_root_is_accepted(layout):
    root, _ = layout
    assert resolve_working_dir(str(root / "proj"), [root]) == root / "proj"
    assert resolve_working_dir(str(root), [root]) == root


@pytest.mark.parametrize("suffix", ["escape", "proj/../../outside", "escape/."])
def test_escapes_are_refused_after_resolving(layout, suffix):
    root, _ = layout
    with pytest.raises(RunnerError) as caught:
        resolve_working_dir(str(root / suffix), [root])
    assert caught.value.reason == "WORKING_DIR_OUTSIDE_ROOTS"
    assert caught.value.kind.name == "INVALID_ARGUMENT"


@pytest.mark.parametrize(("path", "problem"), [("relative/dir", "absolute"), ("/no/such/dir", "does not exist")])
def test_bad_paths(layout, path, problem):
    root, _ = layout
    with pytest.raises(RunnerError, match=problem):
        resolve_working_dir(path, [root])


def test_file_is_not_a_directory(layout):
    root, _ = layout
    with pytest.raises(RunnerError, match="not a directory"):
        resolve_working_dir(str(root / "file.txt"), [root])


def test_sibling_with_common_prefix_is_outside(tmp_path):
    (tmp_path / "work").mkdir()
    (tmp_path / "work-evil").mkdir()
    with pytest.raises(RunnerError):
        resolve_working_dir(str(tmp_path / "work-evil"), [(tmp_path / "work").resolve()])


def test_the_refusal_names_the_roots_and_how_to_change_them(layout, tmp_path):
    root, outside = layout
    other = (tmp_path / "other").resolve()
    other.mkdir()
    with pytest.raises(RunnerError) as caught:
        resolve_working_dir(str(outside), [root, other])
    message = str(caught.value)
    assert f"outside the workspace roots ({root}, {other})" in message
    assert "--workspace-root" in message
