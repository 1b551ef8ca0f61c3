"""The child's environment: allowlisted inheritance, PATH prefix, request allowlist, overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from helix_runner.config import DEFAULT_INHERIT_ENV, DEFAULT_REQUEST_ENV_ALLOWLIST
from helix_runner.errors import RunnerError
from helix_runner.process.child_env import CREDENTIAL_ENV, compose_child_env, missing_commands

SERVER_ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/home/u",
    "ANTHROPIC_API_KEY": "sk-test",
    "CLAUDE_CODE_MAX_RETRIES": "2",
    "AWS_SECRET_ACCESS_KEY": "aws",
    "DATABASE_PASSWORD": "hunter2",
    "HELIX_RUNNER_AUTH_TOKEN_FILE": "/secret",
    "CLAUDECODE": "1",
}


def compose(request_env=None, overrides=None, prefix=()):
    return compose_child_env(
        SERVER_ENV, inherit=DEFAULT_INHERIT_ENV, path_prefix=[Path(p) for p in prefix],
        request_env=request_env or {}, request_allowlist=DEFAULT_REQUEST_ENV_ALLOWLIST, overrides=overrides,
    )


def test_only_allowlisted_server_variables_are_inherited():
    env = compose()
    assert env["ANTHROPIC_API_KEY"] == "sk-test"
    assert env["CLAUDE_CODE_MAX_RETRIES"] == "2"
    assert env["HOME"] == "/home/u"
    assert "DATABASE_PASSWORD" not in env
    assert "HELIX_RUNNER_AUTH_TOKEN_FILE" not in env
    assert "CLAUDECODE" not in env  # would make the nested CLI think it runs inside Claude Code


def test_path_prefix_comes_first():
    env = compose(prefix=["/venv/bin"])
    assert env["PATH"] == "/venv/bin:/usr/bin:/bin"


def test_request_variables_must_be_allowlisted():
    assert compose({"CLAUDE_CODE_MAX_RETRIES": "0"})["CLAUDE_CODE_MAX_RETRIES"] == "0"
    for name in ("PATH", "LD_PRELOAD", "ANTHROPIC_BASE_URL", "HOME"):
        with pytest.raises(RunnerError) as caught:
            compose({name: "x"})
        assert caught.value.reason == "ENV_NOT_ALLOWED"
        assert caught.value.metadata["name"] == name


def test_server_overrides_win():
    env = compose({"HELIX_TRACE": "1"}, overrides={"ANTHROPIC_BASE_URL": "http://127.0.0.1:1"})
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:1" and env["HELIX_TRACE"] == "1"


def test_preflight_names_missing_commands(tmp_path):
    tool = tmp_path / "mytool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    env = compose(prefix=[str(tmp_path)])
    assert missing_commands(["mytool", "sh", "definitely-not-here-xyz"], env) == ["definitely-not-here-xyz"]


def test_withheld_variables_are_not_inherited_whatever_the_allowlist_says():
    server_env = {**SERVER_ENV, "ANTHROPIC_AUTH_TOKEN": "t", "CLAUDE_CODE_OAUTH_TOKEN": "o",
                  "CLAUDE_CODE_USE_BEDROCK": "1", "GOOGLE_APPLICATION_CREDENTIALS": "/g.json",
                  "CLAUDE_CONFIG_DIR": "/home/u/.claude"}
    env = compose_child_env(server_env, inherit=DEFAULT_INHERIT_ENV, path_prefix=[], request_env={},
                            request_allowlist=DEFAULT_REQUEST_ENV_ALLOWLIST, withhold=CREDENTIAL_ENV,
                            overrides={"ANTHROPIC_API_KEY": "offline-mode"})
    assert env["ANTHROPIC_API_KEY"] == "offline-mode"  # an override is not inherited, so never withheld
    for name in ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "CLAUDE_CODE_USE_BEDROCK",
                 "GOOGLE_APPLICATION_CREDENTIALS", "CLAUDE_CONFIG_DIR", "AWS_SECRET_ACCESS_KEY"):
        assert name not in env
    assert env["CLAUDE_CODE_MAX_RETRIES"] == "2" and env["HOME"] == "/home/u"
