-- 018_run_share.sql - each run's share of the machine (engine/share.h,
-- engine/result_fields.h), measured by the worker over its training loop:
--   cpu_share                on-CPU time of its threads / the time they were
--                            runnable (schedstat: run / (run + run-queue wait))
--   steal_share              steal time on its CPUs / their time (/proc/stat)
--   others_cpu_share         other processes' CPU time on its CPUs / their time
--   quiet_tokens_per_second  what its shape trains on this machine when quiet
--                            (its quiet steps' tokens over their time, else the
--                            cached one)
--   slowdown                 quiet_tokens_per_second / tokens_per_second
--                            (1 / cpu_share without a quiet reference; 0 unknown)
--   slowdown_cost_bpb        the val_bpb the slowdown cost a time-budget run,
--                            from its loss curve (0 for token and FLOPs budgets)
-- NULL for results stored before.
ALTER TABLE results ADD COLUMN cpu_share REAL;
ALTER TABLE results ADD COLUMN steal_share REAL;
ALTER TABLE results ADD COLUMN others_cpu_share REAL;
ALTER TABLE results ADD COLUMN quiet_tokens_per_second REAL;
ALTER TABLE results ADD COLUMN slowdown REAL;
ALTER TABLE results ADD COLUMN slowdown_cost_bpb REAL;

-- 013's view with one more column: slowdown, the largest of the row's
-- configuration's runs (a mean over seeds one of which was slowed is suspect).
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
       -- the largest slowdown among the configuration's succeeded runs (017)
       (SELECT max(xr.slowdown) FROM experiments x
        JOIN results xr ON xr.experiment_id = x.id
        WHERE x.dataset = c.dataset AND x.budget_kind = c.budget_kind AND x.budget = c.budget
          AND x.eval_tokens = c.eval_tokens AND x.status = 'succeeded'
          AND x.config_hash = c.config_hash) AS slowdown,
       (SELECT max(x.rung) FROM experiments x
        WHERE x.full_config_hash = coalesce(e.full_config_hash, c.config_hash)
          AND x.rung IS NOT NULL AND x.eval_tokens = c.eval_tokens) AS rung
-- INDEXED BY: as in 008, the planner would otherwise sort the whole scope.
FROM configs c INDEXED BY configs_rank
JOIN experiments e ON e.id = c.first_id
JOIN results r ON r.experiment_id = c.first_id
ORDER BY c.dataset, c.budget_kind, c.budget, c.eval_tokens, c.mean, c.first_id;
