"""A writer's own PostgreSQL connection: each batch of phase writes is one transaction, pipelined.

The event writer (phases/event_log.EventWriter) commits a running phase's writes off the event loop
on a thread of its own (``Committer.off_loop``); this is the connection that thread uses. It is not
the pool's: one connection, used by one thread at a time, keeps psycopg's prepared statements (it
prepares a query after a few executions) and sends a batch in libpq's pipeline mode: the fence
check, then the inserts, updates, notifications and the commit behind it without waiting for each
answer. A batch costs two round trips whatever its size: BEGIN with the fence check, whose rows
decide which statements follow, then the writes with the COMMIT. The statements are
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
                # BEGIN and COMMIT are statements of the pipeline (the connection is in autocommit
                # mode): psycopg's own transaction handling waits for its BEGIN and again for its
                # COMMIT, two more round trips. The BEGIN goes out with the fence check, whose rows
                # are the first wait; the writes and the COMMIT go out when the pipeline ends.
                with conn.pipeline(), conn.cursor() as cur:
                    cur.execute("BEGIN")
                    refused = self._write_in(cur, writes, retry=retry)
                    cur.execute("COMMIT")
                return refused
            except psycopg.OperationalError as exc:
                self._discard()
                raise StoreUnavailable(f"lost the database connection while committing: {_first_line(exc)}") from exc
            except psycopg.Error as exc:  # the database refused the writes: nothing of them is kept
                self._rollback()
                raise StoreError(f"the database refused the writes: {_first_line(exc)}") from exc
            except BaseException:
                self._rollback()
                raise

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
                    self._conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S,
                    application_name="helix-runner-writer",
                )
            except psycopg.OperationalError as exc:
                raise StoreUnavailable(f"cannot connect to the database: {_first_line(exc)}") from exc
        return self._conn

    def _rollback(self) -> None:
        """Ends a transaction a failed batch left open (or in error), so the next one starts clean."""
        try:
            if self._conn is not None and not self._conn.broken and \
                    self._conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                self._conn.execute("ROLLBACK")
        except psycopg.Error:
            self._discard()

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
