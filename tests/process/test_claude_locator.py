"""Unit tests for the claude binary locator: each search step, its precedence, and the failure message."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from helix_runner.process.claude_locator import (
    ENV_VAR,
    ClaudeNotFoundError,
    ClaudeVersionError,
    FoundVia,
    bundled_claude_path,
    locate_claude,
)


def make_executable(path: Path, version_output: str = "9.8.7 (Claude Code)", exit_code: int = 0) -> Path:
    """A fake claude: a shell script answering --version."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho '{version_output}'\nexit {exit_code}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def no_bundled() -> Path | None:
    return None


@pytest.fixture
def clean_env(tmp_path: Path) -> dict[str, str]:
    """An environment whose PATH holds only an empty directory, so nothing leaks in from the host."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    return {"PATH": str(empty)}


def test_explicit_path_wins_over_everything(tmp_path: Path, clean_env: dict[str, str]) -> None:
    explicit = make_executable(tmp_path / "explicit" / "claude")
    env_bin = make_executable(tmp_path / "env" / "claude")
    path_bin = make_executable(tmp_path / "path" / "claude")
    env = {ENV_VAR: str(env_bin), "PATH": str(path_bin.parent)}

    found = locate_claude(explicit, env=env, bundled=lambda: path_bin)

    assert found.path == explicit
    assert found.found_via is FoundVia.EXPLICIT


def test_explicit_bare_name_is_looked_up_on_path(tmp_path: Path) -> None:
    binary = make_executable(tmp_path / "bin" / "claude-nightly")

    found = locate_claude("claude-nightly", env={"PATH": str(binary.parent)}, bundled=no_bundled)

    assert found.path == binary
    assert found.found_via is FoundVia.EXPLICIT


def test_explicit_path_that_is_not_executable_fails_without_falling_back(tmp_path: Path) -> None:
    not_exec = tmp_path / "claude"
    not_exec.write_text("#!/bin/sh\n")
    fallback = make_executable(tmp_path / "bin" / "claude")

    with pytest.raises(ClaudeNotFoundError) as info:
        locate_claude(not_exec, env={"PATH": str(fallback.parent)}, bundled=lambda: fallback)

    assert str(not_exec) in str(info.value)
    assert "not executable" in str(info.value)


def test_explicit_missing_path_fails(tmp_path: Path, clean_env: dict[str, str]) -> None:
    with pytest.raises(ClaudeNotFoundError, match="does not exist"):
        locate_claude(tmp_path / "nope" / "claude", env=clean_env, bundled=no_bundled)


def test_env_var_used_when_no_explicit_path(tmp_path: Path) -> None:
    env_bin = make_executable(tmp_path / "env" / "claude")
    path_bin = make_executable(tmp_path / "path" / "claude")

    found = locate_claude(env={ENV_VAR: str(env_bin), "PATH": str(path_bin.parent)}, bundled=no_bundled)

    assert found.path == env_bin
    assert found.found_via is FoundVia.ENV


def test_env_var_pointing_at_a_directory_fails(tmp_path: Path, clean_env: dict[str, str]) -> None:
    with pytest.raises(ClaudeNotFoundError, match=f"\\${ENV_VAR}.*is not a file"):
        locate_claude(env={**clean_env, ENV_VAR: str(tmp_path)}, bundled=no_bundled)


def test_empty_explicit_and_env_values_count_as_not_given(tmp_path: Path) -> None:
    path_bin = make_executable(tmp_path / "path" / "claude")

    found = locate_claude("", env={ENV_VAR: "", "PATH": str(path_bin.parent)}, bundled=no_bundled)

    assert found.found_via is FoundVia.PATH


def test_claude_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = make_executable(tmp_path / "a" / "claude")
    make_executable(tmp_path / "b" / "claude")
    monkeypatch.setenv(
        "PATH", os.pathsep.join([str(tmp_path / "empty"), str(first.parent), str(tmp_path / "b")])
    )
    monkeypatch.delenv(ENV_VAR, raising=False)

    found = locate_claude(bundled=no_bundled)  # env defaults to os.environ

    assert found.path == first
    assert found.found_via is FoundVia.PATH


def test_non_executable_claude_on_path_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "claude").write_text("not executable")
    bundled = make_executable(tmp_path / "sdk" / "_bundled" / "claude")

    found = locate_claude(env={"PATH": str(tmp_path / "bin")}, bundled=lambda: bundled)

    assert found.path == bundled
    assert found.found_via is FoundVia.BUNDLED


def test_nothing_found_names_every_place(tmp_path: Path, clean_env: dict[str, str]) -> None:
    missing_bundle = tmp_path / "sdk" / "_bundled" / "claude"

    with pytest.raises(ClaudeNotFoundError) as info:
        locate_claude(env=clean_env, bundled=lambda: missing_bundle)

    message = str(info.value)
    assert "--claude-path" in message
    assert ENV_VAR in message
    assert clean_env["PATH"] in message
    assert str(missing_bundle) in message
    assert len(info.value.attempts) == 4


def test_nothing_found_without_sdk(clean_env: dict[str, str]) -> None:
    with pytest.raises(ClaudeNotFoundError, match="package not installed"):
        locate_claude(env=clean_env, bundled=no_bundled)


def test_version_is_parsed_and_cached(tmp_path: Path, clean_env: dict[str, str]) -> None:
    binary = make_executable(tmp_path / "claude", "2.1.330 (Claude Code)")
    found = locate_claude(binary, env=clean_env, bundled=no_bundled)

    assert found.version() == "2.1.330"
    binary.unlink()  # a second call must not run the binary again
    assert found.version() == "2.1.330"


def test_version_failure_raises(tmp_path: Path, clean_env: dict[str, str]) -> None:
    binary = make_executable(tmp_path / "claude", "boom", exit_code=3)
    found = locate_claude(binary, env=clean_env, bundled=no_bundled)

    with pytest.raises(ClaudeVersionError, match="exited 3"):
        found.version()


def test_bundled_path_points_into_the_installed_sdk() -> None:
    path = bundled_claude_path()

    assert path is not None
    assert path.parts[-3:] == ("claude_agent_sdk", "_bundled", "claude")
