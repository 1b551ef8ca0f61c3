"""The server's git sandbox at start (server/isolation.py): the layers the config says the host
lacks (``sandbox_skip_layers``) are left out of it too, and what it runs without is logged."""

from __future__ import annotations

import logging

import pytest

from helix_runner.config import ServerConfig
from helix_runner.process.host_git import HOST_GIT
from helix_runner.process.sandbox import landlock
from helix_runner.server.isolation import box_host_git


@pytest.fixture
def restored():
    box, note = HOST_GIT.box, HOST_GIT.box_note
    yield
    if HOST_GIT.box is not box and hasattr(HOST_GIT.box, "close"):
        HOST_GIT.box.close()
    HOST_GIT.box, HOST_GIT.box_note = box, note


@pytest.mark.skipif(landlock.abi() < 4, reason="no Landlock with TCP rules here")
def test_without_namespaces_the_servers_git_runs_in_landlock_and_says_what_that_leaves(tmp_path, restored, caplog):
    config = ServerConfig(data_dir=tmp_path / "data", workspace_roots=(tmp_path / "ws",),
                          sandbox_skip_layers=("namespaces",))
    with caplog.at_level(logging.INFO, logger="helix_runner.server.isolation"):
        box_host_git(config)
    assert HOST_GIT.kind == "landlock"
    assert any("Landlock domain" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


def test_without_namespaces_and_landlock_only_the_overrides_hold_and_the_log_says_so(tmp_path, restored, caplog):
    config = ServerConfig(data_dir=tmp_path / "data", workspace_roots=(tmp_path / "ws",),
                          sandbox_skip_layers=("namespaces", "landlock"))
    with caplog.at_level(logging.INFO, logger="helix_runner.server.isolation"):
        box_host_git(config)
    assert HOST_GIT.kind == "" and "Landlock is not used" in HOST_GIT.box_note
    assert any("without their helper sandbox" in r.getMessage() and r.levelno == logging.WARNING
               for r in caplog.records)
