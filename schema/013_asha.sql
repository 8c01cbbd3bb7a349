-- 013_asha.sql - multi-fidelity search: the rungs of asynchronous successive
-- halving (serve --prune asha, daemon/exec/sched.h).
--
-- Under --prune asha a spec submitted at its full budget B is queued at the
-- lowest rung's budget, B / eta^(rungs - 1); a run that finishes in the top
-- 1/eta of its rung is promoted: a new experiment at the next rung's budget
-- (parent = the promoted run, the same configuration and seed), trained from
-- scratch. Each run is stored with the budget it trained at, so a lower rung
-- is another scope and is never ranked against full-budget runs.
--
-- rung: 0 .. rungs - 1 (NULL: not run under asha); rungs and eta: the ladder
-- it was filed under (a rung's budget is full_budget / eta^(rungs - 1 - rung));
-- full_budget: the budget the spec was submitted at (seconds or tokens, as
-- budget_kind says); full_config_hash: the configuration at that budget
-- (spec_config_hash), one identity across the rungs; promoted_to: the
-- experiment it was promoted to, written in the same transaction that queues
-- that experiment, so a promotion is never lost or made twice; promoted_by:
-- the run whose end the promotion was decided at (NULL: at a daemon's start),
-- so that run's experiment.finished event can say what its end promoted.
--   sqlite3 DIR/nightshift.db "select id, rung, budget, full_budget, promoted_to from experiments where rung is not null"

ALTER TABLE experiments ADD COLUMN rung INTEGER CHECK (rung >= 0);
ALTER TABLE experiments ADD COLUMN rungs INTEGER CHECK (rungs >= 1);
ALTER TABLE experiments ADD COLUMN eta INTEGER CHECK (eta >= 2);
ALTER TABLE experiments ADD COLUMN full_budget REAL;
ALTER TABLE experiments ADD COLUMN full_config_hash TEXT;
ALTER TABLE experiments ADD COLUMN promoted_to INTEGER REFERENCES experiments(id);
ALTER TABLE experiments ADD COLUMN promoted_by INTEGER REFERENCES experiments(id);

CREATE INDEX experiments_rung ON experiments (full_config_hash, rung) WHERE rung IS NOT NULL;
CREATE INDEX experiments_promoted_by ON experiments (promoted_by) WHERE promoted_by IS NOT NULL;

-- The queue: among equal priorities a higher rung first (a promotion goes
-- ahead of new rung-0 work), then a person's before the agent's, the oldest
-- first.
DROP INDEX experiments_queue;
CREATE INDEX experiments_queue
    ON experiments (status, priority DESC, coalesce(rung, 0) DESC, source = 'agent', id);

-- 010's view with one more column: rung, the highest rung any run of the
-- row's configuration was queued at under asha (NULL when it never was).
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
       c.finished,
       (SELECT max(x.rung) FROM experiments x
        WHERE x.full_config_hash = coalesce(e.full_config_hash, c.config_hash)
          AND x.rung IS NOT NULL AND x.eval_tokens = c.eval_tokens) AS rung
-- INDEXED BY: as in 008, the planner would otherwise sort the whole scope.
FROM configs c INDEXED BY configs_rank
JOIN experiments e ON e.id = c.first_id
JOIN results r ON r.experiment_id = c.first_id
ORDER BY c.dataset, c.budget_kind, c.budget, c.eval_tokens, c.mean, c.first_id;
