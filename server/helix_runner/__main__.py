"""``python -m helix_runner`` is the ``helix-runner`` command."""

import sys

from helix_runner.cli import main

sys.exit(main())
