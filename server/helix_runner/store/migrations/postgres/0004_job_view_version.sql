-- Version 3 of the SQLite store's schema (store/sqlite_store.py, _MIGRATIONS), for PostgreSQL:
-- jobs.view_version is bumped in the same transaction as every write that changes what the job's
-- view shows (its row, its phases, their per-model costs; appended events are followed by the sum
-- of the phases' last sequences instead, read with the row), so the read model caches job views
-- under both and no replica serves a view older than a committed write (store/protocol.py JobRow,
-- phases/queries.py). Numbered 0004: 0003 is the admission ledger's.
ALTER TABLE jobs ADD COLUMN view_version bigint NOT NULL DEFAULT 0;
