"""Opens the storage a database URL names: the embedded SQLite file or a shared PostgreSQL database.

``Storage`` pairs the store with its cluster (the ``Cluster`` port, store/cluster.py): the
composition root hands each to whoever needs it, and nothing asks which database it got.
"""

from __future__ import annotations

from dataclasses import dataclass

from helix_runner.store.cluster import SINGLE_NODE, Cluster
from helix_runner.store.database_url import DatabaseUrl, parse_database_url
from helix_runner.store.protocol import DEFAULT_LEASE_SECONDS, Store
from helix_runner.store.sqlite_store import SqliteStore


@dataclass(frozen=True)
class Storage:
    """An open store and the replicas it is shared with (``SingleNode`` when it is not)."""

    store: Store
    cluster: Cluster


def open_storage(
    url: DatabaseUrl | str,
    *,
    replica_id: str | None = None,
    replica_address: str = "",
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
) -> Storage:
    """A ``SqliteStore`` alone, or a ``PostgresStore`` registered as a replica with its
    ``PostgresCluster`` (``replica_id``: a stable name, else a new one per start;
    ``replica_address``: where control RPCs reach it; ``lease_seconds``: its lease,
    ``replica_lease_seconds`` in the config).

    Raises ``StoreError`` with a one-line message when the database cannot be opened.
    """
    if isinstance(url, str):
        url = parse_database_url(url)
    if url.kind == "sqlite":
        assert url.sqlite_path is not None
        return Storage(SqliteStore(url.sqlite_path), SINGLE_NODE)
    # Imported here: a SQLite-only server never loads the PostgreSQL driver.
    from helix_runner.store.postgres_store import PostgresStore

    store = PostgresStore(url.url, replica_id=replica_id, address=replica_address, lease_seconds=lease_seconds)
    return Storage(store, store.cluster)
