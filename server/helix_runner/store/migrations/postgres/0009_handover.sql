-- Phases that outlive their replica (issue 24; docs/scale-out.md "Hand-over"). What another
-- replica needs to continue a phase, kept beside its row while it is active:
-- * phase_handover: the request (the phase's spec and retry policy, encoded by the phases layer;
--   a LaunchPlan is local to one replica and is planned again by the adopter), the job control
--   state (breakpoints with hit counts, pause, step credits, held calls), the CLI session id, the
--   workspace (mode, branch, shared volume), whether the phase can move at all and why not, and
--   who released it (a draining replica) and why;
-- * phase_transcripts: the CLI's session transcript, mirrored as append-only chunks at turn
--   boundaries and at the hand-over (start_offset = the chunk's byte offset in the file);
-- * phase_decisions: approvals, denials and edits of held calls sent while the phase had no live
--   owner; the adopter takes each once (DELETE ... RETURNING).
-- Every write but a decision is fenced like the phase's history (postgres_cluster.lock_for_write).
CREATE TABLE phase_handover (
    job_id text NOT NULL,
    phase_id text NOT NULL,
    request bytea NOT NULL,
    control bytea NOT NULL DEFAULT ''::bytea,
    session_id text NOT NULL DEFAULT '',
    workspace bytea NOT NULL DEFAULT ''::bytea,
    movable boolean NOT NULL DEFAULT true,
    not_movable_reason text NOT NULL DEFAULT '',
    released_by text,
    released_reason text NOT NULL DEFAULT '',
    released_at timestamptz,
    moves integer NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, phase_id),
    FOREIGN KEY (job_id, phase_id) REFERENCES phases (job_id, phase_id) ON DELETE CASCADE
);

CREATE TABLE phase_transcripts (
    job_id text NOT NULL,
    phase_id text NOT NULL,
    session_id text NOT NULL,
    start_offset bigint NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (job_id, phase_id, session_id, start_offset),
    FOREIGN KEY (job_id, phase_id) REFERENCES phases (job_id, phase_id) ON DELETE CASCADE
);

CREATE TABLE phase_decisions (
    job_id text NOT NULL,
    phase_id text NOT NULL,
    tool_use_id text NOT NULL,
    decision bytea NOT NULL,
    PRIMARY KEY (job_id, phase_id, tool_use_id),
    FOREIGN KEY (job_id, phase_id) REFERENCES phases (job_id, phase_id) ON DELETE CASCADE
);
