"""At most one log line per interval for a message anyone on the host can provoke (a refused request
without a capability), with how many were left out: the log stays readable and cannot be flooded."""

from __future__ import annotations

import logging
import time


class LogThrottle:
    """Logs ``message`` at most once per ``interval_s``; the next line says how many were suppressed."""

    def __init__(self, logger: logging.Logger, message: str, interval_s: float = 1.0) -> None:
        self.logger = logger
        self.message = message
        self.interval_s = interval_s
        self._last = float("-inf")
        self._suppressed = 0

    def warning(self, **fields: object) -> None:
        now = time.monotonic()
        if now - self._last < self.interval_s:
            self._suppressed += 1
            return
        self._last = now
        suppressed, self._suppressed = self._suppressed, 0
        self.logger.warning(self.message, extra={"fields": {**fields, "suppressed_since_last": suppressed}})
