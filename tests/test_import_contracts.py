"""The layer contracts in pyproject.toml ([tool.importlinter]) hold, and they catch an upward import.

scripts/test runs ``lint-imports`` before pytest in both tiers; these tests keep the check honest
when pytest is run alone, and prove the contracts are not vacuous: the same configuration, applied
to a copy of the package with one illegal import added, fails and names the broken contract.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"

pytestmark = pytest.mark.skipif(not LINT_IMPORTS.is_file(), reason="import-linter is not installed (.[dev])")


def _lint(cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache", "--no-logo"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_package_keeps_every_contract():
    run = _lint(ROOT, ROOT / "server")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout


@pytest.mark.parametrize(
    ("module", "illegal_import", "contract"),
    [
        # The domain reaching up into the application layer.
        ("domain/phase_status.py", "import helix_runner.phases.event_log", "Layers:"),
        # Generated protobuf code outside helix_runner.api.
        ("phases/ports.py", "import helix.runner.v1.events_pb2", "Only the API imports generated"),
        # The domain importing a transport.
        ("domain/phase_status.py", "import grpc", "The domain is plain Python"),
        # A cycle inside one package (process/procfs.py is imported by process/cgroups.py).
        ("process/procfs.py", "import helix_runner.process.cgroups", "No import cycles"),
        # The replica rooms reaching past the Cluster port to a driver, directly or through a store.
        ("phases/replicas.py", "import helix_runner.store.postgres_cluster", "see the store through its ports"),
        ("api/routing.py", "import psycopg", "see the store through its ports"),
        # The admission queue reaching for the cluster's ledger instead of asking its grant.
        ("phases/admission.py", "import helix_runner.phases.cluster_admission", "knows its grant by the Grant"),
        # Webhook delivery is an adapter beside the egress proxy: it shares the address rules (domain),
        # nothing of egress (issue 34.4: it sat a floor above the other adapters for them).
        ("webhook_http/sender.py", "import helix_runner.egress.proxy", "Layers:"),
        # The composition root holding a store by its class instead of by its ports.
        ("server/storage.py", "import helix_runner.store.sqlite_store", "opens storage through store.factory"),
        # A handler reaching a phase's controller instead of the command surface.
        ("api/servicer.py", "import helix_runner.phases.control", "acts on a phase through phases.commands"),
        # A phase's part that knows the run (the import circle the review warned of, here one-way).
        ("phases/recorder.py", "import helix_runner.phases.run", "the commands over the service over the run"),
    ],
)
def test_an_illegal_import_breaks_the_contract(tmp_path, module, illegal_import, contract):
    copy = tmp_path / "server"
    for package in ("helix_runner", "helix"):
        shutil.copytree(
            ROOT / "server" / package, copy / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = copy / "helix_runner" / module
    target.write_text(target.read_text() + f"\n{illegal_import}  # added by the test\n")

    run = _lint(tmp_path, copy)

    assert run.returncode == 1, run.stdout + run.stderr
    broken = run.stdout[run.stdout.index("Broken contracts") :]
    offending = illegal_import.split()[-1].rsplit(".", 1)[-1]  # acyclic_siblings names modules relatively
    assert contract in broken and offending in broken
