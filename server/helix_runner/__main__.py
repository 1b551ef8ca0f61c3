"""``python -m helix_runner`` and the ``helix-runner`` command."""

import os
import sys


def main() -> int:
    """Runs the command line after the process-wide settings that must precede importing gRPC."""
    # gRPC's C core logs raw lines of its own (e.g. "add_port.cc:83] Failed to add port" before our
    # one-line "cannot listen" error); the server's structured logs say what matters. An operator's
    # own GRPC_VERBOSITY (error, info, debug) still wins.
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    from helix_runner.cli import main as cli_main

    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
