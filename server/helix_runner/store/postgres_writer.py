"""A writer's own PostgreSQL connection: each batch of phase writes is one transaction, pipelined.

The event writer (phases/event_log.EventWriter) commits a running phase's writes off the event loop
on a thread of its own (``Committer.off_loop``); this is the connection that thread uses. It is not
the pool's: one connection, used by one thread at a time, keeps psycopg's prepared statements (it
prepares a query after a few executions) and sends a batch in libpq's pipeline mode: the fence
check, then the inserts, updates, notifications and the commit behind it without waiting for each
answer. A batch costs two round trips whatever its size: the fence check's rows (which phases may be
written decides which statements follow), and the rest with the commit. The statements are
``SqlStore._write_phases_in``'s, the same as every other write of a phase's history.

A lost connection (the server restarted, the network dropped) is ``StoreUnavailable``: whether the
commit happened is unknown, so the writer sends the same batch again with ``retry=True`` once it
can, and the insert of events skips rows that are already there (only this replica writes its
phases' events: the fence check says so).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import psycopg

from helix_runner.store.protocol import PhaseWrite, StoreError, StoreUnavailable

CONNECT_TIMEOUT_S = 10
# ``SqlStore._write_phases_in`` of the store that made the committer: (cursor, writes, retry) -> refused.
WriteIn = Callable[..., set[tuple[str, str]]]


class PostgresCommitter:
    """Commits a writer's batches on a dedicated connection in pipeline mode (see the module docstring)."""

    off_loop = True

    def __init__(self, conninfo: str, write_in: WriteIn):
        self._conninfo = conninfo
        self._write_in = write_in
        self._conn: psycopg.Connection | None = None
        self._lock = threading.Lock()  # the writer's thread commits; the store's close comes from another
        self._closed = False

    def commit(self, writes: Sequence[PhaseWrite], *, retry: bool = False) -> set[tuple[str, str]]:
        if not writes:
            return set()
        with self._lock:
            conn = self._connection()
            try:
                # The transaction's COMMIT is queued in the pipeline; leaving it sends everything queued.
                with conn.pipeline(), conn.transaction(), conn.cursor() as cur:
                    refused = self._write_in(cur, writes, retry=retry)
                return refused
            except psycopg.OperationalError as exc:
                self._discard()
                raise StoreUnavailable(f"lost the database connection while committing: {_first_line(exc)}") from exc
            except psycopg.Error as exc:  # the database refused the writes (rolled back)
                raise StoreError(f"the database refused the writes: {_first_line(exc)}") from exc

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._discard()

    def _connection(self) -> psycopg.Connection:
        if self._closed:
            raise StoreUnavailable("the store is closed")
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._discard()
            try:
                self._conn = psycopg.connect(
                    self._conninfo, autocommit=False, connect_timeout=CONNECT_TIMEOUT_S,
                    application_name="helix-runner-writer",
                )
            except psycopg.OperationalError as exc:
                raise StoreUnavailable(f"cannot connect to the database: {_first_line(exc)}") from exc
        return self._conn

    def _discard(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg.Error:
                pass
            self._conn = None


def _first_line(exc: BaseException) -> str:
    """A one-line reason without the connection string (it may hold a password)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
