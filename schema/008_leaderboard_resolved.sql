-- 008_leaderboard_resolved.sql - the leaderboard shows what a run trained with.
--
-- A spec's model.vocab_size is 0 when it takes the dataset's vocabulary. The
-- view keeps its columns and their order; vocab_size is now the vocabulary
-- the run used (the token table's rows: params_wte / n_embd).
DROP VIEW leaderboard;
CREATE VIEW leaderboard AS
SELECT e.id,
       e.name,
       r.val_bpb,
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
       coalesce(nullif(json_extract(e.spec, '$.model.vocab_size'), 0),
                r.params_wte / json_extract(e.spec, '$.model.n_embd')) AS vocab_size,
       json_extract(e.spec, '$.dataset')                AS dataset,
       json_extract(e.spec, '$.time_budget_s')          AS time_budget_s,
       e.seed,
       r.params_total,
       r.mfu_percent,
       r.tokens_per_second,
       r.num_steps,
       r.training_seconds,
       e.finished
FROM experiments e
JOIN results r ON r.experiment_id = e.id
WHERE e.status = 'succeeded' AND r.val_bpb IS NOT NULL
ORDER BY r.val_bpb, e.id;
