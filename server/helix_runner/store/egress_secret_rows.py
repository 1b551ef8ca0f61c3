"""The SQL of the credential vault's table, for both stores (a secret's value only ever sealed)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from helix_runner.store.protocol import EgressSecretRow

COLUMNS = ("project_id", "name", "hosts", "presentation", "header", "username", "key_id", "nonce", "ciphertext",
           "create_time_ns")

SQLITE_TABLES = (
    """CREATE TABLE IF NOT EXISTS egress_secrets (
    project_id TEXT NOT NULL,
    name TEXT NOT NULL,
    hosts TEXT NOT NULL,
    presentation TEXT NOT NULL,
    header TEXT NOT NULL DEFAULT '',
    username TEXT NOT NULL DEFAULT '',
    key_id TEXT NOT NULL,
    nonce BLOB NOT NULL,
    ciphertext BLOB NOT NULL,
    create_time_ns INTEGER NOT NULL,
    PRIMARY KEY (project_id, name)
)""",
)


def values(row: EgressSecretRow) -> tuple:
    return (row.project_id, row.name, ",".join(row.hosts), row.presentation, row.header, row.username, row.key_id,
            row.nonce, row.ciphertext, row.create_time_ns)


def from_row(r: Sequence[Any]) -> EgressSecretRow:
    project_id, name, hosts, presentation, header, username, key_id, nonce, ciphertext, create_time_ns = r
    return EgressSecretRow(project_id, name, tuple(h for h in hosts.split(",") if h), presentation, header, username,
                           key_id, bytes(nonce), bytes(ciphertext), create_time_ns)
