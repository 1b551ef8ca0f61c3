"""Offline mode: a scripted stand-in for the Anthropic Messages API that the real CLI talks to."""

from helix_runner.offline.scripted_api import *  # noqa: F403
from helix_runner.offline.scripted_api import __all__  # noqa: F401
