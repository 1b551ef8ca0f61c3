"""The ``helix-runner`` command: ``serve`` runs the service; the other verbs are its clients."""

from helix_runner.cli.main import main

__all__ = ["main"]
