-- The credential vault (docs/network.md): a project's secrets, each value sealed with AES-256-GCM
-- under the servers' vault key (the binding is the associated data). SQLite: schema version 8.
CREATE TABLE egress_secrets (
    project_id text NOT NULL,
    name text NOT NULL,
    hosts text NOT NULL,
    presentation text NOT NULL,
    header text NOT NULL DEFAULT '',
    username text NOT NULL DEFAULT '',
    key_id text NOT NULL,
    nonce bytea NOT NULL,
    ciphertext bytea NOT NULL,
    create_time_ns bigint NOT NULL,
    PRIMARY KEY (project_id, name)
);
