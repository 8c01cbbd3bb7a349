-- 009_scope_and_config_from_spec.sql - an experiment's scope and configuration
-- are what the spec parser says they are (engine/spec.c), written by the
-- store as plain columns, no longer worked out again in SQL.
--
-- dataset, budget_kind and budget were generated columns (004) with their own
-- copy of the budget rule; config_hash was the SHA-256 of the canonical spec
-- with json_remove's list of labels, and spec_hash (what submissions were
-- deduplicated on) a second identity that kept the seed. Now one identity:
-- config_hash is spec_config_hash (the configuration without its labels and
-- seed, equivalent spellings written one way: spec.h lists them), and a
-- duplicate is the same config_hash and seed. spec_hash goes.
--
-- Every stored row is filed again by nightshift_spec_key(spec), a function
-- the store registers on its connection: {"dataset", "budget_kind", "budget",
-- "config_hash"} from spec.c, or NULL for a spec this build cannot parse
-- (that row keeps what it had). configs and scopes (008) are summed again
-- from the results, so configurations the new identity joins are one row.
--   sqlite3 DIR/nightshift.db "select id, dataset, budget_kind, budget, config_hash from experiments"

CREATE TEMP TABLE filed AS
SELECT id, dataset, budget_kind, budget, config_hash, nightshift_spec_key(spec) AS k
FROM experiments;

-- The columns go (a trigger and indexes that name them first), and come back plain.
DROP TRIGGER configs_add_on_result;
DROP INDEX experiments_scope;
DROP INDEX experiments_dedup;
ALTER TABLE experiments DROP COLUMN dataset;
ALTER TABLE experiments DROP COLUMN budget_kind;
ALTER TABLE experiments DROP COLUMN budget;
ALTER TABLE experiments DROP COLUMN spec_hash;
ALTER TABLE experiments ADD COLUMN dataset TEXT;
ALTER TABLE experiments ADD COLUMN budget_kind TEXT;
ALTER TABLE experiments ADD COLUMN budget REAL;

UPDATE experiments
SET dataset = coalesce(json_extract(f.k, '$.dataset'), f.dataset),
    budget_kind = coalesce(json_extract(f.k, '$.budget_kind'), f.budget_kind),
    budget = coalesce(json_extract(f.k, '$.budget'), f.budget),
    config_hash = coalesce(json_extract(f.k, '$.config_hash'), f.config_hash)
FROM filed f
WHERE f.id = experiments.id;
DROP TABLE filed;

CREATE INDEX experiments_dedup ON experiments (config_hash, seed);
CREATE INDEX experiments_scope ON experiments (dataset, budget_kind, budget, status, config_hash);

-- The summaries again: configs from the results, scopes through configs'
-- insert trigger (008), which adds each configuration to its scope.
DELETE FROM scopes;
DELETE FROM configs;
INSERT INTO configs (dataset, budget_kind, budget, config_hash, first_id, n, sum, sumsq, mean,
                     best, seeds, finished)
SELECT e.dataset, e.budget_kind, e.budget, e.config_hash, min(e.id), count(*), sum(r.val_bpb),
       sum(r.val_bpb * r.val_bpb), avg(r.val_bpb), min(r.val_bpb), json_group_array(e.seed),
       max(e.finished)
FROM experiments e
JOIN results r ON r.experiment_id = e.id
WHERE e.status = 'succeeded' AND r.val_bpb IS NOT NULL AND e.dataset IS NOT NULL
  AND e.budget IS NOT NULL AND e.config_hash IS NOT NULL
GROUP BY e.dataset, e.budget_kind, e.budget, e.config_hash;

-- 008's trigger as it was: it names the columns dropped above.
CREATE TRIGGER configs_add_on_result AFTER INSERT ON results
WHEN NEW.val_bpb IS NOT NULL
     AND (SELECT status FROM experiments WHERE id = NEW.experiment_id) = 'succeeded'
BEGIN
    INSERT INTO configs (dataset, budget_kind, budget, config_hash, first_id, n, sum, sumsq,
                         mean, best, seeds, finished)
    SELECT e.dataset, e.budget_kind, e.budget, e.config_hash, e.id, 1, NEW.val_bpb,
           NEW.val_bpb * NEW.val_bpb, NEW.val_bpb, NEW.val_bpb, json_array(e.seed), e.finished
    FROM experiments e WHERE e.id = NEW.experiment_id AND e.dataset IS NOT NULL
                            AND e.budget IS NOT NULL AND e.config_hash IS NOT NULL
    ON CONFLICT (dataset, budget_kind, budget, config_hash) DO UPDATE SET
        first_id = min(first_id, excluded.first_id),
        n = n + 1,
        sum = sum + excluded.sum,
        sumsq = sumsq + excluded.sumsq,
        mean = (sum + excluded.sum) / (n + 1),
        best = min(best, excluded.best),
        seeds = json_insert(seeds, '$[#]', json_extract(excluded.seeds, '$[0]')),
        finished = max(ifnull(finished, ''), ifnull(excluded.finished, ''));
END;
