-- Per-project spend quotas (docs/tenancy.md); the spend is summed from phases by project and
-- creation time. SQLite: schema version 10.
CREATE TABLE project_quotas (
    project_id text PRIMARY KEY,
    spend_usd_per_day double precision NOT NULL DEFAULT 0,
    spend_usd_per_month double precision NOT NULL DEFAULT 0,
    update_time_ns bigint NOT NULL,
    updated_by text NOT NULL DEFAULT ''
);
CREATE INDEX phases_by_project_time ON phases (project_id, create_time_ns);
