-- 008_config_summary.sql - the leaderboard from a summary kept up to date.
--
-- The leaderboard of 004 grouped every succeeded run of a scope on each
-- request: 50-80 ms at 100,000 experiments, with the daemon's loop waiting.
-- configs keeps one row per configuration and scope instead: the number of
-- succeeded seeds, the sum and sum of squares of their val_bpb (so the mean
-- and the sample standard deviation need no scan), the best, the first run's
-- id (the row the leaderboard shows) and the last finish time. Triggers add a
-- run when it has both its 'succeeded' status and its result, whichever is
-- written second (the store writes the status first), so a run counts once.
-- The leaderboard, best and noise read it through an index on (scope, mean).

CREATE TABLE configs (
    dataset     TEXT NOT NULL,
    budget_kind TEXT NOT NULL,
    budget      REAL NOT NULL,
    config_hash TEXT NOT NULL,
    first_id    INTEGER NOT NULL REFERENCES experiments(id),
    n           INTEGER NOT NULL,  -- succeeded seeds
    sum         REAL NOT NULL,     -- of their val_bpb
    sumsq       REAL NOT NULL,     -- of val_bpb squared
    mean        REAL NOT NULL,     -- sum / n, stored for the index
    best        REAL NOT NULL,
    finished    TEXT,
    PRIMARY KEY (dataset, budget_kind, budget, config_hash)
) STRICT, WITHOUT ROWID;

CREATE INDEX configs_rank ON configs (dataset, budget_kind, budget, mean, first_id);

INSERT INTO configs (dataset, budget_kind, budget, config_hash, first_id, n, sum, sumsq, mean,
                     best, finished)
SELECT e.dataset, e.budget_kind, e.budget, e.config_hash, min(e.id), count(*), sum(r.val_bpb),
       sum(r.val_bpb * r.val_bpb), avg(r.val_bpb), min(r.val_bpb), max(e.finished)
FROM experiments e
JOIN results r ON r.experiment_id = e.id
WHERE e.status = 'succeeded' AND r.val_bpb IS NOT NULL AND e.dataset IS NOT NULL
  AND e.budget IS NOT NULL AND e.config_hash IS NOT NULL
GROUP BY e.dataset, e.budget_kind, e.budget, e.config_hash;

-- Add experiment NEW_ID's val_bpb V to its configuration.
CREATE TRIGGER configs_add_on_result AFTER INSERT ON results
WHEN NEW.val_bpb IS NOT NULL
     AND (SELECT status FROM experiments WHERE id = NEW.experiment_id) = 'succeeded'
BEGIN
    INSERT INTO configs (dataset, budget_kind, budget, config_hash, first_id, n, sum, sumsq,
                         mean, best, finished)
    SELECT e.dataset, e.budget_kind, e.budget, e.config_hash, e.id, 1, NEW.val_bpb,
           NEW.val_bpb * NEW.val_bpb, NEW.val_bpb, NEW.val_bpb, e.finished
    FROM experiments e WHERE e.id = NEW.experiment_id
    ON CONFLICT (dataset, budget_kind, budget, config_hash) DO UPDATE SET
        first_id = min(first_id, excluded.first_id),
        n = n + 1,
        sum = sum + excluded.sum,
        sumsq = sumsq + excluded.sumsq,
        mean = (sum + excluded.sum) / (n + 1),
        best = min(best, excluded.best),
        finished = max(ifnull(finished, ''), ifnull(excluded.finished, ''));
END;

CREATE TRIGGER configs_add_on_status AFTER UPDATE OF status ON experiments
WHEN NEW.status = 'succeeded' AND OLD.status IS NOT 'succeeded'
     AND (SELECT val_bpb FROM results WHERE experiment_id = NEW.id) IS NOT NULL
BEGIN
    INSERT INTO configs (dataset, budget_kind, budget, config_hash, first_id, n, sum, sumsq,
                         mean, best, finished)
    SELECT NEW.dataset, NEW.budget_kind, NEW.budget, NEW.config_hash, NEW.id, 1, r.val_bpb,
           r.val_bpb * r.val_bpb, r.val_bpb, r.val_bpb, NEW.finished
    FROM results r WHERE r.experiment_id = NEW.id
    ON CONFLICT (dataset, budget_kind, budget, config_hash) DO UPDATE SET
        first_id = min(first_id, excluded.first_id),
        n = n + 1,
        sum = sum + excluded.sum,
        sumsq = sumsq + excluded.sumsq,
        mean = (sum + excluded.sum) / (n + 1),
        best = min(best, excluded.best),
        finished = max(ifnull(finished, ''), ifnull(excluded.finished, ''));
END;

-- The same columns as 004's view, read from configs. seeds is computed only
-- for the rows a query returns.
DROP VIEW leaderboard;
CREATE VIEW leaderboard AS
SELECT e.id,
       e.name,
       c.mean                                           AS val_bpb,
       CASE WHEN c.n > 1
            THEN sqrt(max(0.0, (c.sumsq - c.sum * c.sum / c.n) / (c.n - 1)))
       END                                              AS val_bpb_sd,
       c.n                                              AS n_seeds,
       (SELECT json_group_array(x.seed) FROM experiments x
        WHERE x.dataset = c.dataset AND x.budget_kind = c.budget_kind AND x.budget = c.budget
          AND x.status = 'succeeded' AND x.config_hash = c.config_hash
          AND EXISTS (SELECT 1 FROM results y WHERE y.experiment_id = x.id
                      AND y.val_bpb IS NOT NULL)) AS seeds,
       c.best                                           AS best_val_bpb,
       c.dataset,
       c.budget_kind,
       c.budget,
       json_extract(e.spec, '$.model.depth')            AS depth,
       json_extract(e.spec, '$.model.n_embd')           AS n_embd,
       json_extract(e.spec, '$.model.n_head')           AS n_head,
       json_extract(e.spec, '$.model.n_kv_head')        AS n_kv_head,
       json_extract(e.spec, '$.model.mlp')              AS mlp,
       json_extract(e.spec, '$.model.mlp_ratio')        AS mlp_ratio,
       json_extract(e.spec, '$.model.window_pattern')   AS window_pattern,
       json_extract(e.spec, '$.model.ve_layers')        AS ve_layers,
       json_extract(e.spec, '$.model.ve_gate_channels') AS ve_gate_channels,
       json_extract(e.spec, '$.model.seq_len')          AS seq_len,
       json_extract(e.spec, '$.model.pos')              AS pos,
       json_extract(e.spec, '$.model.tie_embeddings')   AS tie_embeddings,
       -- the vocabulary the run used: a spec's 0 means the dataset's (params_wte / n_embd)
       coalesce(nullif(json_extract(e.spec, '$.model.vocab_size'), 0),
                r.params_wte / json_extract(e.spec, '$.model.n_embd')) AS vocab_size,
       json_extract(e.spec, '$.time_budget_s')          AS time_budget_s,
       c.config_hash,
       r.params_total,
       r.mfu_percent,
       r.tokens_per_second,
       r.num_steps,
       r.training_seconds,
       c.finished
-- INDEXED BY: with ANALYZE's statistics the planner would read the primary key
-- and sort the whole scope for LIMIT 1 (about 10 ms at 20,000 runs, not 0.2).
FROM configs c INDEXED BY configs_rank
JOIN experiments e ON e.id = c.first_id
JOIN results r ON r.experiment_id = c.first_id
ORDER BY c.dataset, c.budget_kind, c.budget, c.mean, c.first_id;
