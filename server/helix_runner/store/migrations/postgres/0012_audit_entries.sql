-- The audit trail (docs/tenancy.md): every action taken through the API. Append-only: a trigger
-- refuses UPDATE and DELETE. SQLite: schema version 9.
CREATE TABLE audit_entries (
    entry_id bigserial PRIMARY KEY,
    time_ns bigint NOT NULL,
    principal text NOT NULL,
    principal_source text NOT NULL,
    action text NOT NULL,
    project_id text NOT NULL,
    job_id text NOT NULL DEFAULT '',
    phase_id text NOT NULL DEFAULT '',
    target text NOT NULL DEFAULT '',
    detail text NOT NULL DEFAULT '',
    peer text NOT NULL DEFAULT '',
    outcome text NOT NULL
);
CREATE INDEX audit_entries_project ON audit_entries (project_id, entry_id);

CREATE FUNCTION audit_entries_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit entries are append-only';
END;
$$;
CREATE TRIGGER audit_entries_no_change BEFORE UPDATE OR DELETE ON audit_entries
    FOR EACH STATEMENT EXECUTE FUNCTION audit_entries_append_only();
