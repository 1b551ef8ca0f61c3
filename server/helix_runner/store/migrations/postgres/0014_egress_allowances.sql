-- Hosts a project's phases may reach because a held request was approved for the project
-- (docs/network.md, "Network breakpoints"). SQLite: schema version 11.
CREATE TABLE egress_allowances (
    project_id text NOT NULL,
    host text NOT NULL,
    created_by text NOT NULL DEFAULT '',
    create_time_ns bigint NOT NULL,
    PRIMARY KEY (project_id, host)
);
