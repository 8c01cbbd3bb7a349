-- 010_eval_scope.sql - the evaluation is part of the scope; people's runs first.
--
-- A spec's eval_tokens caps the validation tokens a run scores (0 = the whole
-- split). val_bpb over other tokens is another number, so a scope is now a
-- dataset, a budget and an evaluation: experiments.eval_tokens holds the
-- spec's cap as it applies to its dataset (0 when the cap covers the whole
-- split: engine/spec.c, spec_scope_on), written by the store at submission,
-- and configs and scopes are keyed by it too. A configuration (config_hash,
-- spec_config_hash) leaves the evaluation out, so the rows 009 filed keep
-- theirs.
--
-- Every experiment before this one scored the whole split: its column is 0,
-- and its spec says so ("eval_tokens": 0), so a run still queued scores what
-- it was submitted to score and a spec copied from one scores like it.
-- results.eval_tokens is the number of tokens a run scored (special tokens
-- excluded), which the worker has always reported.
--
-- The queue takes a person's submissions (source api or cli) before the
-- agent's proposals of the same priority: its index orders by that too.

ALTER TABLE experiments ADD COLUMN eval_tokens INTEGER NOT NULL DEFAULT 0;
UPDATE experiments SET spec = json_set(spec, '$.eval_tokens', 0)
WHERE json_extract(spec, '$.eval_tokens') IS NULL;
ALTER TABLE results ADD COLUMN eval_tokens INTEGER;

DROP INDEX experiments_scope;
CREATE INDEX experiments_scope
    ON experiments (dataset, budget_kind, budget, eval_tokens, status, config_hash);
DROP INDEX experiments_dedup;
CREATE INDEX experiments_dedup ON experiments (config_hash, seed, eval_tokens);
DROP INDEX experiments_queue;
CREATE INDEX experiments_queue ON experiments (status, priority DESC, source = 'agent', id);

-- The summaries of 008 with the evaluation in their keys, summed again from
-- scratch (every run so far is in scope eval_tokens 0).
DROP VIEW leaderboard;
DROP TRIGGER configs_add_on_result;
DROP TABLE scopes;
DROP TABLE configs;

CREATE TABLE configs (
    dataset     TEXT NOT NULL,
    budget_kind TEXT NOT NULL,
    budget      REAL NOT NULL,
    eval_tokens INTEGER NOT NULL,
    config_hash TEXT NOT NULL,
    first_id    INTEGER NOT NULL REFERENCES experiments(id),
    n           INTEGER NOT NULL,  -- succeeded seeds
    sum         REAL NOT NULL,     -- of their val_bpb
    sumsq       REAL NOT NULL,     -- of val_bpb squared
    mean        REAL NOT NULL,     -- sum / n, stored for the index
    best        REAL NOT NULL,
    seeds       TEXT NOT NULL,     -- JSON array of the succeeded seeds, in finish order
    finished    TEXT,
    PRIMARY KEY (dataset, budget_kind, budget, eval_tokens, config_hash)
) STRICT, WITHOUT ROWID;

CREATE INDEX configs_rank ON configs (dataset, budget_kind, budget, eval_tokens, mean, first_id);

INSERT INTO configs (dataset, budget_kind, budget, eval_tokens, config_hash, first_id, n, sum,
                     sumsq, mean, best, seeds, finished)
SELECT e.dataset, e.budget_kind, e.budget, e.eval_tokens, e.config_hash, min(e.id), count(*),
       sum(r.val_bpb), sum(r.val_bpb * r.val_bpb), avg(r.val_bpb), min(r.val_bpb),
       json_group_array(e.seed), max(e.finished)
FROM experiments e
JOIN results r ON r.experiment_id = e.id
WHERE e.status = 'succeeded' AND r.val_bpb IS NOT NULL AND e.dataset IS NOT NULL
  AND e.budget IS NOT NULL AND e.config_hash IS NOT NULL
GROUP BY e.dataset, e.budget_kind, e.budget, e.eval_tokens, e.config_hash;

CREATE TRIGGER configs_add_on_result AFTER INSERT ON results
WHEN NEW.val_bpb IS NOT NULL
     AND (SELECT status FROM experiments WHERE id = NEW.experiment_id) = 'succeeded'
BEGIN
    INSERT INTO configs (dataset, budget_kind, budget, eval_tokens, config_hash, first_id, n, sum,
                         sumsq, mean, best, seeds, finished)
    SELECT e.dataset, e.budget_kind, e.budget, e.eval_tokens, e.config_hash, e.id, 1,
           NEW.val_bpb, NEW.val_bpb * NEW.val_bpb, NEW.val_bpb, NEW.val_bpb, json_array(e.seed),
           e.finished
    FROM experiments e WHERE e.id = NEW.experiment_id AND e.dataset IS NOT NULL
                            AND e.budget IS NOT NULL AND e.config_hash IS NOT NULL
    ON CONFLICT (dataset, budget_kind, budget, eval_tokens, config_hash) DO UPDATE SET
        first_id = min(first_id, excluded.first_id),
        n = n + 1,
        sum = sum + excluded.sum,
        sumsq = sumsq + excluded.sumsq,
        mean = (sum + excluded.sum) / (n + 1),
        best = min(best, excluded.best),
        seeds = json_insert(seeds, '$[#]', json_extract(excluded.seeds, '$[0]')),
        finished = max(ifnull(finished, ''), ifnull(excluded.finished, ''));
END;

CREATE TABLE scopes (
    dataset      TEXT NOT NULL,
    budget_kind  TEXT NOT NULL,
    budget       REAL NOT NULL,
    eval_tokens  INTEGER NOT NULL,
    succeeded    INTEGER NOT NULL,  -- succeeded runs with a val_bpb
    configs2     INTEGER NOT NULL,  -- configurations with n >= 2
    runs2        INTEGER NOT NULL,  -- their runs
    df           INTEGER NOT NULL,  -- sum of their n - 1
    ss           REAL NOT NULL,     -- sum of their squared deviations from the mean
    last_finished TEXT,
    PRIMARY KEY (dataset, budget_kind, budget, eval_tokens)
) STRICT, WITHOUT ROWID;

-- The latest result's scope (the default of every scoped query): newest first.
CREATE INDEX scopes_latest ON scopes (last_finished);

INSERT INTO scopes
SELECT dataset, budget_kind, budget, eval_tokens, sum(n), sum(n >= 2),
       sum(CASE WHEN n >= 2 THEN n ELSE 0 END), sum(CASE WHEN n >= 2 THEN n - 1 ELSE 0 END),
       sum(CASE WHEN n >= 2 THEN max(0.0, sumsq - sum * sum / n) ELSE 0 END), max(finished)
FROM configs GROUP BY dataset, budget_kind, budget, eval_tokens;

CREATE TRIGGER scopes_on_config_insert AFTER INSERT ON configs
BEGIN
    INSERT INTO scopes VALUES (NEW.dataset, NEW.budget_kind, NEW.budget, NEW.eval_tokens, NEW.n,
                               NEW.n >= 2, CASE WHEN NEW.n >= 2 THEN NEW.n ELSE 0 END,
                               CASE WHEN NEW.n >= 2 THEN NEW.n - 1 ELSE 0 END,
                               CASE WHEN NEW.n >= 2
                                    THEN max(0.0, NEW.sumsq - NEW.sum * NEW.sum / NEW.n)
                                    ELSE 0 END,
                               NEW.finished)
    ON CONFLICT (dataset, budget_kind, budget, eval_tokens) DO UPDATE SET
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
    WHERE dataset = NEW.dataset AND budget_kind = NEW.budget_kind AND budget = NEW.budget
      AND eval_tokens = NEW.eval_tokens;
END;

-- 008's columns, and the evaluation after the budget.
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
       c.eval_tokens,
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
-- INDEXED BY: as in 008, the planner would otherwise sort the whole scope.
FROM configs c INDEXED BY configs_rank
JOIN experiments e ON e.id = c.first_id
JOIN results r ON r.experiment_id = c.first_id
ORDER BY c.dataset, c.budget_kind, c.budget, c.eval_tokens, c.mean, c.first_id;
