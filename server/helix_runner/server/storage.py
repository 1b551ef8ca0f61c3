"""Where the server keeps what it knows ([storage], [cluster]): its data directory, held by one
server at a time, and the store with its replicas' news feed.
"""

from __future__ import annotations

import asyncio
import logging

from helix_runner.api.proto_records import tool_call_duration_ns
from helix_runner.config import ServerConfig
from helix_runner.process.data_dir_lock import DataDirInUse, DataDirLock
from helix_runner.server.lifecycle import StartupError
from helix_runner.store.cluster import SINGLE_NODE, Cluster, ReplicaFeed
from helix_runner.store.factory import open_storage
from helix_runner.store.protocol import Store, StoreError

log = logging.getLogger(__name__)


class DataDir:
    """The data directory, writable and locked for this server's life (process/data_dir_lock.py):
    a second server on it would take the first one's running phases for a crash's leftovers. It is
    the first part started and the last stopped, so nothing of this server touches the directory
    once another may hold it."""

    name = "data dir"

    def __init__(self, config: ServerConfig):
        self.path = config.data_dir
        self.lock: DataDirLock | None = None

    async def start(self) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            probe = self.path / ".write-test"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise StartupError(f"data directory {self.path} is not writable: {exc.strerror}") from None
        try:
            self.lock = DataDirLock.acquire(self.path)
        except DataDirInUse as exc:
            raise StartupError(str(exc)) from None
        except OSError as exc:
            raise StartupError(f"cannot lock the data directory {self.path}: {exc.strerror}") from None

    async def stop(self) -> None:
        if self.lock is not None:
            self.lock.release()


class Storage:
    """The store and the cluster it belongs to (SQLite alone, or replicas on PostgreSQL), migrated
    on open; with replicas, the LISTEN feed of the others' events."""

    name = "storage"

    def __init__(self, config: ServerConfig):
        self.config = config
        self.store: Store | None = None
        self.cluster: Cluster = SINGLE_NODE
        self.feed: ReplicaFeed | None = None

    async def start(self) -> None:
        config = self.config
        try:
            storage = open_storage(config.database, replica_id=config.replica_id or None,
                                   lease_seconds=config.replica_lease_seconds)
        except StoreError as exc:  # carries a one-line message
            raise StartupError(str(exc)) from None
        self.store, self.cluster = storage.store, storage.cluster
        if self.store.migrated_from:
            log.info("database schema migrated",
                     extra={"fields": {"from": self.store.migrated_from, "path": str(config.db_path)}})
        filled = self.store.backfill_tool_call_durations(tool_call_duration_ns)  # once, after the migration to 2
        if filled:
            log.info("tool-call durations filled in for the statistics", extra={"fields": {"count": filled}})
        # Watchers here of phases other replicas run follow them by LISTEN/NOTIFY (docs/scale-out.md).
        feed = self.cluster.feed()
        if feed is None:
            return
        try:  # a database that does not answer within 10 s stops the start
            self.feed = await asyncio.wait_for(feed.start(), 10.0)
        except TimeoutError:
            await feed.stop()
            self.store.close()
            raise StartupError("cannot LISTEN for events on the PostgreSQL database (no connection within 10 s)") from None

    async def stop(self) -> None:
        if self.feed is not None:
            await self.feed.stop()
        if self.store is not None:
            self.store.close()
