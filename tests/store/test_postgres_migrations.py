"""The shipped PostgreSQL migrations are found and numbered strictly (no database needed)."""

from __future__ import annotations

import pytest

from helix_runner.store.postgres_migrations import MIGRATIONS_DIR, known_migrations
from helix_runner.store.protocol import StoreError


def test_the_shipped_migrations_are_numbered_one_to_n():
    versions = [m.version for m in known_migrations()]
    assert versions == list(range(1, len(versions) + 1)) and len(versions) >= 6
    assert {p.name for p in MIGRATIONS_DIR.glob("*.sql")} == {
        f"{m.version:04d}_{m.name}.sql" for m in known_migrations()
    }


@pytest.mark.parametrize(
    "names",
    [
        ["0001_a.sql", "0003_c.sql"],  # a gap: 0002 went missing
        ["0002_b.sql"],  # does not start at 1
        ["0001_a.sql", "0001_again.sql"],  # twice
    ],
)
def test_a_gap_or_a_duplicate_stops_the_server(tmp_path, names):
    for name in names:
        (tmp_path / name).write_text("SELECT 1;")
    with pytest.raises(StoreError, match="not numbered 1, 2"):
        known_migrations(tmp_path)


def test_a_badly_named_file_stops_the_server(tmp_path):
    (tmp_path / "0001_a.sql").write_text("SELECT 1;")
    (tmp_path / "2_b.sql").write_text("SELECT 1;")
    with pytest.raises(StoreError, match="is not named NNNN_name.sql"):
        known_migrations(tmp_path)
