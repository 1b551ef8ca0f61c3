"""Legitimate work in every sandbox mode, with the server as root and as nobody, the phase's directory
a workspace root itself and a directory inside one (support/phase_box.py): listing and writing its
directory, git, Python, pipelines, its TMPDIR, and a package install through the egress proxy.

Before the fix, in the Landlock-only mode (Kubernetes under RuntimeDefault, ``pip install`` without
bubblewrap) a phase whose directory was a workspace root could neither list, read nor write it: the
root is hidden around the phase's own directory, and Landlock cannot allow a path it hides.
"""

from __future__ import annotations

import pytest
from support.phase_box import MODES

from helix.runner.v1 import resources_pb2 as res

pytestmark = [pytest.mark.real_cli, pytest.mark.slow, pytest.mark.timeout(1800)]

WORK = ("list", "write", "mkdir", "git", "branch", "python", "pipeline", "tmpdir", "pip")


def test_the_server_runs_in_the_mode_asked_for(boxed):
    skipped = MODES[boxed.mode]
    want = {name: skipped is not None and name not in skipped for name in ("namespaces", "network", "landlock",
                                                                          "seccomp")}
    if boxed.mode == "landlock-only":
        want["network"] = True  # Landlock's TCP rules and seccomp instead of a network namespace
    assert boxed.effects["layers"] == want, boxed.effects["layers"]


@pytest.mark.parametrize("where", ["legit-root", "legit-inside"], ids=["in-the-root", "inside-a-root"])
def test_legitimate_work_succeeds(boxed, where):
    run = boxed.phase(where)
    assert run.result is not None and run.result.status == res.PHASE_STATUS_SUCCEEDED, (boxed.who, run.ended)
    missing = [name for name in WORK if name not in run.reports]
    assert not missing, (boxed.who, where, "steps that did not report", missing, run.reports)
    failed = {name: run.reports[name]["note"] for name in WORK if not run.reports[name]["ok"]}
    assert not failed, (boxed.who, where, failed)


def test_the_package_came_through_the_egress_proxy(boxed):
    requests = boxed.effects["registry_requests"]
    assert "/simple/helixdemo/" in requests and any(path.endswith(".whl") for path in requests), requests
