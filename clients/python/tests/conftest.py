"""Makes the client importable from the source tree when it is not installed (the repository's
virtualenv has it: the helix-runner distribution ships it, installed editable by scripts/bootstrap)."""

import sys
from pathlib import Path

try:
    import helix_runner_client  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
