-- Webhooks (issue 26; README "Webhooks"): subscriptions, their deliveries and the attempts' log.
-- webhook_deliveries is the outbox: its rows are inserted in the append_events transaction of the
-- events that cause them (or alone, for a queue.full refusal), so a crash loses none. Replicas
-- claim due rows with FOR UPDATE SKIP LOCKED and a lease (claimed_by, claimed_until_ns, in the
-- database's clock), so each delivery is sent by one replica at a time; a PENDING row holds back
-- the later rows of its subscription and phase (in-order delivery). SQLite: schema version 6.
CREATE TABLE webhook_subscriptions (
    subscription_id text PRIMARY KEY,
    project_id text NOT NULL,
    url text NOT NULL,
    secret text NOT NULL,
    events text NOT NULL,
    statuses text NOT NULL DEFAULT '',
    cost_threshold_usd double precision,
    format text NOT NULL,
    description text NOT NULL DEFAULT '',
    source text NOT NULL,
    create_time_ns bigint NOT NULL,
    disabled_reason text NOT NULL DEFAULT '',
    disabled_time_ns bigint
);

CREATE TABLE webhook_deliveries (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id text NOT NULL UNIQUE,
    subscription_id text NOT NULL,
    event_type text NOT NULL,
    job_id text NOT NULL,
    phase_id text NOT NULL,
    sequence bigint NOT NULL,
    body bytea NOT NULL,
    create_time_ns bigint NOT NULL,
    state text NOT NULL,
    attempts integer NOT NULL DEFAULT 0,
    next_attempt_ns bigint NOT NULL,
    claimed_by text NOT NULL DEFAULT '',
    claimed_until_ns bigint NOT NULL DEFAULT 0,
    last_status_code integer,
    last_error text NOT NULL DEFAULT '',
    end_time_ns bigint
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_ns) WHERE state = 'PENDING';
CREATE INDEX webhook_deliveries_in_order ON webhook_deliveries (subscription_id, job_id, phase_id, id)
    WHERE state = 'PENDING';
CREATE INDEX webhook_deliveries_by_phase ON webhook_deliveries (job_id, phase_id);
CREATE INDEX webhook_deliveries_by_subscription ON webhook_deliveries (subscription_id, id);

CREATE TABLE webhook_attempts (
    delivery_id text NOT NULL,
    attempt integer NOT NULL,
    time_ns bigint NOT NULL,
    status_code integer,
    latency_ns bigint NOT NULL,
    error text NOT NULL DEFAULT '',
    replica_id text NOT NULL DEFAULT ''
);
CREATE INDEX webhook_attempts_by_delivery ON webhook_attempts (delivery_id, time_ns);
