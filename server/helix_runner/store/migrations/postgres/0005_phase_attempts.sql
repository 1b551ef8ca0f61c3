-- Version 4 of the SQLite store's schema (store/sqlite_store.py, _MIGRATIONS), for PostgreSQL:
-- phases.attempts_pb holds the phase's ended attempts (an encoded helix.runner.v1.Phase with only
-- `attempts`), written when each attempt ends, so a phase recovered after a crash or swept after
-- its replica died (phases/takeover.py) still lists them (store/protocol.py PhaseRow).
ALTER TABLE phases ADD COLUMN attempts_pb bytea;
