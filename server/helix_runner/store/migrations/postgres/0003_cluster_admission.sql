-- Cluster admission (docs/scale-out.md, "Cluster admission"; store/postgres_admission.py): one row
-- per phase attempt waiting for, or holding, a slot under the cluster-wide limits. Rows live only
-- while their replica does: a row whose replica's lease ran out counts for nothing and is deleted
-- by the next admission transaction or the dead-replica sweep. No foreign key to replicas: the
-- sweep prunes expired registry rows on its own schedule.
CREATE TABLE admission_ledger (
    job_id text NOT NULL,
    phase_id text NOT NULL,
    -- The replica whose RunPhase stream the phase belongs to; only it starts the phase.
    replica_id text NOT NULL,
    project_id text NOT NULL,
    -- Opaque, non-secret name of the API credential (as in phases/admission.py).
    credential text NOT NULL DEFAULT '',
    -- 'queued' (waiting) or 'running' (holds a cluster slot until released).
    state text NOT NULL CHECK (state IN ('queued', 'running')),
    -- A later attempt of an admitted phase: ahead of its project's new phases, never refused.
    retry boolean NOT NULL DEFAULT false,
    -- Arrival order (first come, first served within a project).
    seq bigserial NOT NULL,
    enqueued_at timestamptz NOT NULL DEFAULT now(),
    admitted_at timestamptz,
    -- Set while its replica could start it now but for the cluster's limits (refreshed on every
    -- admission pass of that replica); only such entries compete for a freed cluster slot.
    ready_until timestamptz,
    PRIMARY KEY (job_id, phase_id)
);
CREATE INDEX admission_ledger_by_replica ON admission_ledger (replica_id, state);
CREATE INDEX admission_ledger_by_state ON admission_ledger (state, project_id);
-- Whose turn it is: the project served least recently (cluster-wide) goes next.
CREATE TABLE admission_turns (
    project_id text PRIMARY KEY,
    last_served bigint NOT NULL
);
CREATE SEQUENCE admission_turn;
-- Rate-limit holds per API credential (phases/admission.py ``hold``), shared: a credential one
-- replica saw rate limited holds new starts on it on every replica until ``until``.
CREATE TABLE admission_holds (
    credential text PRIMARY KEY,
    until timestamptz NOT NULL,
    why text NOT NULL
);
