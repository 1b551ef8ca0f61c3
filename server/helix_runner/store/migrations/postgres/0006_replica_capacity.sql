-- Placement by free slots (docs/scale-out.md, "Cluster admission" → "Placement by free slots";
-- store/postgres_cluster.py ``replica_capacity``): a replica that would have to queue a new phase
-- for its own limit forwards the RunPhase to the live replica with the most room. Each replica
-- publishes how many phases it runs at most (its local ``max_running_phases``; 0 = it takes no
-- placed phases: not advertised yet, an older server, or draining). What it holds is counted from
-- the active phases it owns (phases_by_status), so nothing is written on every start and end.
-- Numbered 0006: 0005 is another branch's (the migration runner applies gaps in order).
ALTER TABLE replicas ADD COLUMN max_running_phases integer NOT NULL DEFAULT 0;
