"""Starting scripted Messages API stand-ins from a test and stopping all of them at teardown."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from helix_runner.offline import Script, ScriptedApi, Turn

__all__ = ["ScriptedApiFactory"]


class ScriptedApiFactory:
    """Callable behind the ``scripted_api`` fixture: ``scripted_api(script)`` returns a running stand-in."""

    def __init__(self) -> None:
        self._started: list[ScriptedApi] = []

    def __call__(
        self, script: Script | Mapping[str, Any] | Sequence[Turn] | None = None, **kwargs: Any
    ) -> ScriptedApi:
        """Start a :class:`ScriptedApi` (kwargs: ``host``, ``port``) serving ``script``."""
        api = ScriptedApi(script, **kwargs).start()
        self._started.append(api)
        return api

    def stop_all(self) -> None:
        """Stop every stand-in this factory started; each stop is bounded, so teardown cannot hang."""
        while self._started:
            self._started.pop().stop()
