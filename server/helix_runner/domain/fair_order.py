"""The fair order of admission: which waiting phase starts next, written once.

Projects take turns: the project served least recently goes next (one never served first, the one
waiting longest first among those), and it starts the first entry of its lane (the caller orders a
lane: retries first, then by arrival). Once served, a project goes to the back of the turns. Both
deciders follow it: one replica's queue (phases/admission.py) and the cluster's ledger on
PostgreSQL (store/postgres_admission.py); tests/store/test_admission_differential.py runs random
workloads through both and checks they start the same phases in the same order.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Generic, TypeVar

T = TypeVar("T")

NEVER_SERVED = -1


class Turns(Generic[T]):
    """The turns over some projects' lanes of entries; ``take`` serves a project's first entry."""

    def __init__(self, lanes: Mapping[str, Iterable[T]], last_served: Mapping[str, int],
                 waiting_since: Mapping[str, Hashable]):
        """``last_served``: project → a number that grows with each admission (absent: never served);
        ``waiting_since``: project → when its waiting began, for projects never served."""
        self.lanes: dict[str, list[T]] = {p: list(entries) for p, entries in lanes.items()}
        self.lanes = {p: entries for p, entries in self.lanes.items() if entries}
        self._served = {p: last_served.get(p, NEVER_SERVED) for p in self.lanes}
        self._since = waiting_since
        self._clock = max(last_served.values(), default=NEVER_SERVED)

    def __bool__(self) -> bool:
        return bool(self.lanes)

    def next(self, may: Callable[[str], bool] | None = None) -> str | None:
        """The project whose turn it is, among those ``may`` lets start one (all by default)."""
        candidates = self.lanes if may is None else [p for p in self.lanes if may(p)]
        return min(candidates, key=lambda p: (self._served[p], self._since[p]), default=None)

    def head(self, project: str) -> T:
        return self.lanes[project][0]

    def take(self, project: str, served: int | None = None) -> T:
        """Serves the project's first entry: the project goes to the back of the turns (``served``:
        the number its admission got, when the caller keeps one; else one above every other)."""
        lane = self.lanes[project]
        entry = lane.pop(0)
        if not lane:
            del self.lanes[project]
        self._clock = max(self._clock + 1, served if served is not None else NEVER_SERVED)
        self._served[project] = self._clock
        return entry

    def drop(self, keep: Callable[[T], bool], project: str | None = None) -> list[T]:
        """Removes the entries ``keep`` refuses (of one project, or of all); returns them."""
        dropped: list[T] = []
        for p in [project] if project is not None else list(self.lanes):
            if p not in self.lanes:
                continue
            dropped.extend(e for e in self.lanes[p] if not keep(e))
            self.lanes[p] = [e for e in self.lanes[p] if keep(e)]
            if not self.lanes[p]:
                del self.lanes[p]
        return dropped

    def order(self) -> list[T]:
        """Every entry in the order they would start with nothing else in the way."""
        out = []
        while (project := self.next()) is not None:
            out.append(self.take(project))
        return out
