"""`python -m helix_runner.offline`: serve a script on its own (same as `helix-runner mock-api`)."""

import sys

from helix_runner.offline.server import main

sys.exit(main())
