"""The parts a server is made of, each started and stopped by itself, and the stack that holds them.

A part starts in ``start_server`` once what it needs is there; the stack stops the started ones
newest first, both when a later part fails to start (nothing is left half-started) and at the end
of the drain (so a part always stops before what it was built on: the gRPC port before the service,
the service before the store, the store before the data dir's lock).
"""

from __future__ import annotations

import logging
from typing import Protocol, TypeVar

log = logging.getLogger(__name__)


class StartupError(Exception):
    """The server cannot start; the message is one line for a person."""


class Component(Protocol):
    """A part of the server with a life of its own."""

    name: str

    async def start(self) -> None:
        """Makes the part ready; raises StartupError (one line) when it cannot be."""

    async def stop(self) -> None:
        """Releases what ``start`` took; called once, only after ``start`` returned."""


class ReadyPart:
    """A part built ready by its constructor: on the stack only for its ``stop``."""

    async def start(self) -> None:
        pass


C = TypeVar("C", bound=Component)


class Components:
    """The started parts, in start order."""

    def __init__(self) -> None:
        self._started: list[Component] = []

    @property
    def names(self) -> list[str]:
        return [part.name for part in self._started]

    async def start(self, part: C) -> C:
        """Starts ``part``; on failure stops every part started before it (newest first) and re-raises."""
        try:
            await part.start()
        except BaseException:
            await self.stop()
            raise
        self._started.append(part)
        return part

    async def stop(self) -> None:
        """Stops the started parts newest first; one part's failure is logged, the others still stop."""
        while self._started:
            part = self._started.pop()
            try:
                await part.stop()
            except Exception:  # the rest must still stop (the lock, the store)
                log.exception("stopping a part of the server failed", extra={"fields": {"part": part.name}})
