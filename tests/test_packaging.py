"""`pip install .` of a checkout: one command, and nothing is resolved by a name this project does
not own on the package index (issue 22, item 6).

The server used to depend on `helix-runner-client==0.1.0`, its own client, by name: `pip install .`
failed (the index has an unrelated 0.0.1 there), and whoever published 0.1.0 under that name would
have run code in every install. helix-runner now ships the client package in its own wheel.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The project's own distribution names; none may be a requirement of the server's wheel.
OWN_NAMES = {"helix-runner", "helix-runner-client"}


def _normalized(requirement: str) -> str:
    name = requirement.split(";")[0]
    for stop in "<>=!~[ (":
        name = name.split(stop)[0]
    return name.strip().lower().replace("_", "-")


@pytest.mark.slow  # builds a wheel (5-8 s on a loaded machine): the full suite's
def test_the_wheel_ships_the_client_and_requires_no_name_of_this_project(tmp_path):
    source = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
    for part in ("server", "clients/python/src"):
        shutil.copytree(ROOT / part, source / part, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    # Offline: no index at all, the virtualenv's own setuptools builds it.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index", "--no-build-isolation",
                    "--wheel-dir", str(tmp_path / "dist"), str(source)], check=True, timeout=120)
    (wheel,) = (tmp_path / "dist").glob("helix_runner-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (metadata_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(archive.read(metadata_name).decode())
    required = {_normalized(r) for r in metadata.get_all("Requires-Dist") or []}
    assert not required & OWN_NAMES, sorted(required & OWN_NAMES)
    assert "betterproto2" in required  # the client's runtime, in its place
    for module in ("helix_runner_client/__init__.py", "helix_runner_client/_proto/helix/runner/v1/__init__.py",
                   "helix_runner_client/py.typed", "helix_runner/cli/main.py", "helix/runner/v1/resources_pb2.py"):
        assert module in names, module
