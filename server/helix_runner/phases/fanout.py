"""The fixed, ordered fan-out of one phase's event batches to its observers.

Each batch goes to every observer in list order before the next batch starts. A batch published
while another is being fanned out (the controller emits a control event while it observes one)
is queued and fanned out after the current batch, never in the middle of it: every observer sees
batches whole and in sequence order, and the first observer (persist, then offer to subscribers,
``phases.event_log``) receives sequences without a gap.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

from helix_runner.domain.events import Event

# One step of the fan-out: receives every batch of the phase, in order, on the event loop.
EventObserver = Callable[[list[Event]], None]


class Fanout:
    """Hands each batch of events to ``observers`` in order, one batch at a time."""

    def __init__(self, observers: Sequence[EventObserver]):
        self.observers = tuple(observers)
        self._queue: deque[list[Event]] = deque()
        self._busy = False

    def publish(self, events: list[Event]) -> None:
        """Fans the batch out now, or after the batch in progress if called from an observer."""
        if not events:
            return
        self._queue.append(events)
        if self._busy:
            return
        self._busy = True
        try:
            while self._queue:
                batch = self._queue.popleft()
                for observer in self.observers:
                    observer(batch)
        finally:
            # If an observer raised, batches still queued go out (first, in order) with the next publish.
            self._busy = False
