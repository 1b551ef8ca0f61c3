"""The store's own tests run against each store: ``store`` here is SQLite, then PostgreSQL.

(Elsewhere ``store`` is a SQLite store in the test's directory: tests/conftest.py.)
"""

from __future__ import annotations

import pytest

from helix_runner.store.factory import open_storage
from helix_runner.store.postgres_store import PostgresStore


@pytest.fixture
def opener(database_url):
    """``opener()`` opens another handle on the test's database (a restarted server, another replica)."""
    opened = []

    def open_handle():
        store = open_storage(database_url).store
        opened.append(store)
        return store

    yield open_handle
    for store in opened:
        store.close()


@pytest.fixture
def store(opener):
    """A store of each kind (``database_url``: SQLite, then PostgreSQL), opened as the server opens it."""
    return opener()


@pytest.fixture
def replicas(postgres_url):
    """``replicas(n, **options)``: n PostgreSQL store handles (replicas) on one fresh database,
    without heartbeat threads; closed at the test's end."""
    opened = []

    def make(n: int = 2, **kwargs):
        for _ in range(n):
            opened.append(PostgresStore(postgres_url, heartbeat=False, **kwargs))
        return opened[-n:]

    yield make
    for store in opened:
        store.close()
