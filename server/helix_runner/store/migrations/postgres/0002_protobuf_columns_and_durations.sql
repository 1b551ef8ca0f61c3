-- Version 2 of the SQLite store's schema (store/sqlite_store.py, _MIGRATIONS), for PostgreSQL:
-- options_json was never written; a tool call's duration is a column so that tool_call_stats
-- computes count, mean and p95 in SQL, seeking tool_calls_by_duration (finished durations of one
-- tool in order) instead of reading calls out.
ALTER TABLE phases DROP COLUMN options_json;
ALTER TABLE tool_calls ADD COLUMN duration_ns bigint;
CREATE INDEX tool_calls_by_duration ON tool_calls (job_id, name, duration_ns, status, phase_id);
-- Finished calls recorded before this migration have their duration only inside the encoded body;
-- PostgresStore.backfill_tool_call_durations fills them in and drops this index when done.
CREATE INDEX tool_calls_duration_backfill ON tool_calls (job_id)
    WHERE duration_ns IS NULL AND status IN ('SUCCEEDED', 'FAILED');
