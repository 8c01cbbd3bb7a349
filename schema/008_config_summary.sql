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
-- The leaderboard and best read it through an index on (scope, mean); the
-- default budget and the noise read the per-scope sums in scopes (below).

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
    seeds       TEXT NOT NULL,     -- JSON array of the succeeded seeds, in finish order
    finished    TEXT,
    PRIMARY KEY (dataset, budget_kind, budget, config_hash)
) STRICT, WITHOUT ROWID;

CREATE INDEX configs_rank ON configs (dataset, budget_kind, budget, mean, first_id);

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

-- Add a succeeded run's val_bpb to its configuration (rows without a scope or
-- configuration, written by hand, are left out as the backfill leaves them).
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

CREATE TRIGGER configs_add_on_status AFTER UPDATE OF status ON experiments
WHEN NEW.status = 'succeeded' AND OLD.status IS NOT 'succeeded' AND NEW.dataset IS NOT NULL
     AND NEW.budget IS NOT NULL AND NEW.config_hash IS NOT NULL
     AND (SELECT val_bpb FROM results WHERE experiment_id = NEW.id) IS NOT NULL
BEGIN
    INSERT INTO configs (dataset, budget_kind, budget, config_hash, first_id, n, sum, sumsq,
                         mean, best, seeds, finished)
    SELECT NEW.dataset, NEW.budget_kind, NEW.budget, NEW.config_hash, NEW.id, 1, r.val_bpb,
           r.val_bpb * r.val_bpb, r.val_bpb, r.val_bpb, json_array(NEW.seed), NEW.finished
    FROM results r WHERE r.experiment_id = NEW.id
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

-- scopes sums configs per (dataset, budget): succeeded runs, and over the
-- configurations with two or more seeds their count, runs, degrees of freedom
-- (n - 1 each) and squared deviations from their means, so the daemon's
-- default budget and the pooled seed noise are one row, not a scan. It is
-- kept by triggers on configs that add the change of each configs row.
CREATE TABLE scopes (
    dataset      TEXT NOT NULL,
    budget_kind  TEXT NOT NULL,
    budget       REAL NOT NULL,
    succeeded    INTEGER NOT NULL,  -- succeeded runs with a val_bpb
    configs2     INTEGER NOT NULL,  -- configurations with n >= 2
    runs2        INTEGER NOT NULL,  -- their runs
    df           INTEGER NOT NULL,  -- sum of their n - 1
    ss           REAL NOT NULL,     -- sum of their squared deviations from the mean
    last_finished TEXT,
    PRIMARY KEY (dataset, budget_kind, budget)
) STRICT, WITHOUT ROWID;

INSERT INTO scopes
SELECT dataset, budget_kind, budget, sum(n), sum(n >= 2), sum(CASE WHEN n >= 2 THEN n ELSE 0 END),
       sum(CASE WHEN n >= 2 THEN n - 1 ELSE 0 END),
       sum(CASE WHEN n >= 2 THEN max(0.0, sumsq - sum * sum / n) ELSE 0 END), max(finished)
FROM configs GROUP BY dataset, budget_kind, budget;

CREATE TRIGGER scopes_on_config_insert AFTER INSERT ON configs
BEGIN
    INSERT INTO scopes VALUES (NEW.dataset, NEW.budget_kind, NEW.budget, NEW.n, NEW.n >= 2,
                               CASE WHEN NEW.n >= 2 THEN NEW.n ELSE 0 END,
                               CASE WHEN NEW.n >= 2 THEN NEW.n - 1 ELSE 0 END,
                               CASE WHEN NEW.n >= 2
                                    THEN max(0.0, NEW.sumsq - NEW.sum * NEW.sum / NEW.n)
                                    ELSE 0 END,
                               NEW.finished)
    ON CONFLICT (dataset, budget_kind, budget) DO UPDATE SET
        succeeded = succeeded + excluded.succeeded,
        configs2 = configs2 + excluded.configs2,
        runs2 = runs2 + excluded.runs2,
        df = df + excluded.df,
        ss = ss + excluded.ss,
        last_finished = max(ifnull(last_finished, ''), ifnull(excluded.last_finished, ''));
END;

CREATE TRIGGER scopes_on_config_update AFTER UPDATE ON configs
BEGIN
    UPDATE scopes SET
        succeeded = succeeded + NEW.n - OLD.n,
        configs2 = configs2 + (NEW.n >= 2) - (OLD.n >= 2),
        runs2 = runs2 + CASE WHEN NEW.n >= 2 THEN NEW.n ELSE 0 END
                      - CASE WHEN OLD.n >= 2 THEN OLD.n ELSE 0 END,
        df = df + CASE WHEN NEW.n >= 2 THEN NEW.n - 1 ELSE 0 END
                - CASE WHEN OLD.n >= 2 THEN OLD.n - 1 ELSE 0 END,
        ss = max(0.0, ss + CASE WHEN NEW.n >= 2
                                THEN max(0.0, NEW.sumsq - NEW.sum * NEW.sum / NEW.n) ELSE 0 END
                         - CASE WHEN OLD.n >= 2
                                THEN max(0.0, OLD.sumsq - OLD.sum * OLD.sum / OLD.n) ELSE 0 END),
        last_finished = max(ifnull(last_finished, ''), ifnull(NEW.finished, ''))
    WHERE dataset = NEW.dataset AND budget_kind = NEW.budget_kind AND budget = NEW.budget;
END;

-- The last finished experiment's scope (the hook's best): newest first.
CREATE INDEX experiments_finished ON experiments (finished);

-- The same columns as 004's view, read from configs.
DROP VIEW leaderboard;
CREATE VIEW leaderboard AS
SELECT e.id,
       e.name,
       c.mean                                           AS val_bpb,
       CASE WHEN c.n > 1
            THEN sqrt(max(0.0, (c.sumsq - c.sum * c.sum / c.n) / (c.n - 1)))
       END                                              AS val_bpb_sd,
       c.n                                              AS n_seeds,
       c.seeds,
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
