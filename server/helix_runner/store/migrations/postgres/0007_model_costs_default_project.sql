-- Per-model costs of phases without a project_id were written under project '' instead of the
-- 'default' every other record names (phases.project_id, jobs.project_id), so the default project's
-- totals (GetCostTotals, `helix-runner costs --project default`) had no per-model breakdown
-- (issue 22, item 14; SQLite: schema version 5). New rows carry 'default'; this mends the old ones.
UPDATE model_costs SET project_id = 'default' WHERE project_id = '';
