-- Checkpoints, fork and rewind (docs/fork-and-rewind.md):
-- * phase_checkpoints: a phase's checkpoints, one row each (where its CLI session resumes, the
--   workspace kept then: a tree or a commit under a hidden ref, or none), marked when a rewind in
--   place went back past them;
-- * phase_requests: the accepted RunPhaseRequest of a phase (encoded), which a fork starts from;
-- * phases.fork_pb: the phase and checkpoint a forked phase started from (encoded ForkOrigin).
-- phase_transcripts (0009) keeps the phase's transcript after it ended now: retention deletes it
-- with the phase, and a fork reads it on any replica.
CREATE TABLE phase_checkpoints (
    job_id text NOT NULL,
    phase_id text NOT NULL,
    number integer NOT NULL,
    kind text NOT NULL,
    sequence bigint NOT NULL,
    session_id text NOT NULL DEFAULT '',
    tool_use_id text NOT NULL DEFAULT '',
    tool_name text NOT NULL DEFAULT '',
    turn integer NOT NULL DEFAULT 0,
    resume_at text NOT NULL DEFAULT '',
    call_at text NOT NULL DEFAULT '',
    before_number integer NOT NULL DEFAULT 0,
    attempt integer NOT NULL DEFAULT 0,
    time_ns bigint NOT NULL,
    rewound integer NOT NULL DEFAULT 0,
    ws_kind text NOT NULL,
    ws_tree text NOT NULL DEFAULT '',
    ws_head text NOT NULL DEFAULT '',
    ws_commit text NOT NULL DEFAULT '',
    ws_ref text NOT NULL DEFAULT '',
    ws_repository text NOT NULL DEFAULT '',
    ws_reason text NOT NULL DEFAULT '',
    ws_same_as integer,
    PRIMARY KEY (job_id, phase_id, number),
    FOREIGN KEY (job_id, phase_id) REFERENCES phases (job_id, phase_id) ON DELETE CASCADE
);

CREATE TABLE phase_requests (
    job_id text NOT NULL,
    phase_id text NOT NULL,
    request_pb bytea NOT NULL,
    PRIMARY KEY (job_id, phase_id),
    FOREIGN KEY (job_id, phase_id) REFERENCES phases (job_id, phase_id) ON DELETE CASCADE
);

ALTER TABLE phases ADD COLUMN fork_pb bytea;
