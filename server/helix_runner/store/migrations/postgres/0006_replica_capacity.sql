-- Placement by free slots (docs/scale-out.md, "Cluster admission"; store/postgres_cluster.py
-- ``replica_capacity``): a replica that would have to queue a new phase because of its own
-- limit forwards the RunPhase to the live replica with the most room. Each replica publishes how
-- many phases it runs at most (its local ``max_running_phases``; 0 = it takes no placed phases:
-- not advertised yet, an older server, or draining); what it holds is counted from the phases it
-- owns that are not final, so nothing has to be kept current on every start and end.
-- Numbered 0006: 0005 is another branch's (the migration runner applies gaps in order).
ALTER TABLE replicas ADD COLUMN max_running_phases integer NOT NULL DEFAULT 0;
-- The count per owner reads only active phases (a replica's finished phases keep their owner_id).
-- The predicate lists ACTIVE_STATUSES (store/protocol.py); the query spells the same list, so the
-- planner can use this index.
CREATE INDEX phases_active_by_owner ON phases (owner_id)
    WHERE status IN ('PENDING', 'RUNNING', 'PAUSING', 'PAUSED', 'AWAITING_APPROVAL', 'QUEUED');
