"""Opens the store a database URL names: the embedded SQLite file or a shared PostgreSQL database."""

from __future__ import annotations

from helix_runner.store.database_url import DatabaseUrl, parse_database_url
from helix_runner.store.protocol import DEFAULT_LEASE_SECONDS
from helix_runner.store.sqlite_store import SqliteStore


def open_store(
    url: DatabaseUrl | str,
    *,
    replica_id: str | None = None,
    replica_address: str = "",
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
):
    """A ``SqliteStore`` or a ``PostgresStore`` registered as a replica (``replica_id``: a stable
    name, else a new one per start; ``replica_address``: where control RPCs reach it;
    ``lease_seconds``: its lease, ``replica_lease_seconds`` in the config).

    Raises ``StoreError`` with a one-line message when the database cannot be opened.
    """
    if isinstance(url, str):
        url = parse_database_url(url)
    if url.kind == "sqlite":
        assert url.sqlite_path is not None
        return SqliteStore(url.sqlite_path)
    # Imported here: a SQLite-only server never loads the PostgreSQL driver.
    from helix_runner.store.postgres_store import PostgresStore

    return PostgresStore(url.url, replica_id=replica_id, address=replica_address, lease_seconds=lease_seconds)
