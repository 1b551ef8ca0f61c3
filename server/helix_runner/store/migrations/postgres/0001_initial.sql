-- The tables of the SQLite store (store/sqlite_store.py), plus what replicas need: a registry
-- with heartbeat leases and, per phase, its owner and fencing number (docs/scale-out.md).
-- Times of domain rows are nanoseconds since the epoch as the application gives them; lease
-- times are the database's own clock (now()), so no replica's clock is trusted.

CREATE TABLE jobs (
    job_id text PRIMARY KEY,
    project_id text NOT NULL,
    status text NOT NULL,
    create_time_ns bigint NOT NULL,
    update_time_ns bigint NOT NULL
);
CREATE INDEX jobs_by_project ON jobs (project_id, create_time_ns DESC, job_id DESC);
CREATE INDEX jobs_by_time ON jobs (create_time_ns DESC, job_id DESC);
CREATE INDEX jobs_by_update ON jobs (update_time_ns);

CREATE TABLE replicas (
    replica_id text PRIMARY KEY,
    -- Where other replicas forward control RPCs for the phases this one owns (host:port).
    address text NOT NULL DEFAULT '',
    started_at timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    lease_expires_at timestamptz NOT NULL
);

-- Fencing numbers: strictly increasing and never reused, so a stale owner's number never
-- matches again after a takeover.
CREATE SEQUENCE phase_fence;

CREATE TABLE phases (
    job_id text NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
    phase_id text NOT NULL,
    ordinal integer NOT NULL,
    project_id text NOT NULL,
    status text NOT NULL,
    status_reason text NOT NULL DEFAULT '',
    create_time_ns bigint NOT NULL,
    start_time_ns bigint,
    end_time_ns bigint,
    session_id text NOT NULL DEFAULT '',
    model text NOT NULL DEFAULT '',
    working_dir text NOT NULL DEFAULT '',
    prompt text NOT NULL DEFAULT '',
    options_json bytea,
    on_disconnect text NOT NULL DEFAULT 'CANCEL',
    -- Protobuf bytes of PhaseResult, PhaseCost and Phase.tool_stats (docs/decisions/store-is-wire.md).
    result_pb bytea,
    cost_pb bytea,
    tool_stats_pb bytea,
    recording_dir text NOT NULL DEFAULT '',
    reported_usd double precision,
    computed_usd double precision NOT NULL DEFAULT 0,
    computed_only integer NOT NULL DEFAULT 0,
    pid integer,
    pid_start_ticks bigint,
    -- The replica that runs the phase's process (NULL once the phase is swept) and the fence its
    -- writes must carry.
    owner_id text,
    fence bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, phase_id),
    UNIQUE (job_id, ordinal)
);
CREATE INDEX phases_by_status ON phases (status);
CREATE INDEX phases_by_owner ON phases (owner_id) WHERE owner_id IS NOT NULL;
CREATE INDEX phases_finished_recordings ON phases ((COALESCE(end_time_ns, create_time_ns)))
    WHERE recording_dir <> '';

CREATE TABLE events (
    job_id text NOT NULL,
    phase_id text NOT NULL,
    sequence bigint NOT NULL,
    receive_time_ns bigint NOT NULL,
    kind text NOT NULL,
    body bytea NOT NULL,
    PRIMARY KEY (job_id, phase_id, sequence),
    FOREIGN KEY (job_id, phase_id) REFERENCES phases (job_id, phase_id) ON DELETE CASCADE
);

CREATE TABLE tool_calls (
    job_id text NOT NULL,
    phase_id text NOT NULL,
    tool_use_id text NOT NULL,
    name text NOT NULL,
    status text NOT NULL,
    start_sequence bigint NOT NULL,
    body bytea NOT NULL,
    PRIMARY KEY (job_id, phase_id, tool_use_id),
    FOREIGN KEY (job_id, phase_id) REFERENCES phases (job_id, phase_id) ON DELETE CASCADE
);
CREATE INDEX tool_calls_by_order ON tool_calls (job_id, phase_id, start_sequence);

CREATE TABLE model_costs (
    job_id text NOT NULL,
    phase_id text NOT NULL,
    project_id text NOT NULL,
    model text NOT NULL,
    input_tokens bigint NOT NULL,
    output_tokens bigint NOT NULL,
    cache_read_input_tokens bigint NOT NULL,
    cache_write_5m_input_tokens bigint NOT NULL,
    cache_write_1h_input_tokens bigint NOT NULL,
    web_search_requests bigint NOT NULL,
    reported_usd double precision,
    computed_usd double precision NOT NULL,
    pricing_source text NOT NULL,
    PRIMARY KEY (job_id, phase_id, model),
    FOREIGN KEY (job_id, phase_id) REFERENCES phases (job_id, phase_id) ON DELETE CASCADE
);
CREATE INDEX model_costs_by_project ON model_costs (project_id);
