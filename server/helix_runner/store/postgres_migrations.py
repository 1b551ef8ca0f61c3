"""Versioned schema migrations for the PostgreSQL store, applied when a replica opens the store.

Each migration is one SQL file ``migrations/postgres/NNNN_name.sql``; the applied versions are
rows of ``schema_migrations``. Replicas starting together take a transaction-scoped advisory lock
first, so exactly one of them applies a pending migration and the others see it applied. A
database migrated by a newer server (a version this code does not know) is refused rather than
used with a schema this code does not understand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import psycopg

from helix_runner.store.protocol import StoreError

MIGRATIONS_DIR = Path(__file__).parent / "migrations" / "postgres"
# An arbitrary constant naming "helix-runner schema migration" among advisory locks.
_ADVISORY_LOCK_KEY = 0x48454C4958  # "HELIX"
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def known_migrations(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """The migrations shipped with this code, in version order: exactly 1, 2, 3, ... with no gap, so a
    missing file (a bad merge, a partial copy) stops the server instead of skipping a schema step."""
    found = []
    for path in sorted(directory.glob("*.sql")):
        match = _NAME.match(path.name)
        if match is None:
            raise StoreError(f"migration file {path.name} is not named NNNN_name.sql")
        found.append(Migration(int(match.group(1)), match.group(2), path.read_text(encoding="utf-8")))
    versions = [m.version for m in found]
    if versions != list(range(1, len(versions) + 1)):
        raise StoreError(f"migrations in {directory} are not numbered 1, 2, ... (each once, no gap): {versions}")
    return found


def migrate(conn: psycopg.Connection, migrations: list[Migration] | None = None) -> int:
    """Applies every pending migration in one transaction; returns the schema version now in force."""
    return migrate_from(conn, migrations)[0]


def migrate_from(
    conn: psycopg.Connection, migrations: list[Migration] | None = None
) -> tuple[int, int | None]:
    """Like ``migrate``; also returns the version an existing database had if this call migrated it
    (None for a new database or one already current), as ``SqliteStore.migrated_from`` does."""
    migrations = known_migrations() if migrations is None else migrations
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_ADVISORY_LOCK_KEY,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, name text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        applied = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
        newest_known = migrations[-1].version if migrations else 0
        if applied and max(applied) > newest_known:
            raise StoreError(
                f"the database schema is at version {max(applied)}, newer than this server knows "
                f"({newest_known}): run a newer helix-runner"
            )
        pending = [m for m in migrations if m.version not in applied]
        migrated_from = max(applied) if applied and pending else None
        for migration in pending:
            # No parameters: psycopg sends the file as one simple query, several statements allowed.
            conn.execute(migration.sql)  # type: ignore[arg-type]
            conn.execute(
                "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                (migration.version, migration.name),
            )
        return newest_known, migrated_from
