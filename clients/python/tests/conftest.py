"""Makes the client importable from the source tree when it is not installed (scripts/test-clients
installs it into the repository's virtualenv with ``pip install -e clients/python``)."""

import sys
from pathlib import Path

try:
    import helix_runner_client  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
