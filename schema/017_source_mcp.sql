-- 017_source_mcp.sql - a submission through MCP (the submit tool over stdio or
-- /mcp) is filed as source "mcp", no longer as "agent" with via "mcp": the
-- source says who proposed a run, and an MCP client is not the daemon's
-- agent hook. The queue still takes a person's submissions (api, cli) before
-- a program's (agent, mcp) at equal priority and rung. SQLite cannot change
-- a CHECK in place, so experiments is rebuilt (SQLite's documented
-- procedure), with what refers to it dropped first and made again after: the
-- leaderboard view, the results trigger that reads experiments, and the
-- triggers and indexes of experiments itself (015's note).

DROP VIEW leaderboard;
DROP TRIGGER configs_add_on_result;

CREATE TABLE experiments_new (
    id          INTEGER PRIMARY KEY,
    name        TEXT,
    tags        TEXT NOT NULL DEFAULT '[]' CHECK (json_type(tags) = 'array'),
    spec        TEXT NOT NULL CHECK (json_type(spec) = 'object'),
    seed        INTEGER NOT NULL,
    parent      INTEGER REFERENCES experiments(id),
    source      TEXT NOT NULL CHECK (source IN ('api', 'cli', 'agent', 'mcp')),
    priority    INTEGER NOT NULL DEFAULT 0,
    status      TEXT NOT NULL DEFAULT 'queued'
                CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'crashed',
                                  'timeout', 'oom', 'diverged', 'cancelled', 'interrupted',
                                  'pruned')),
    reason      TEXT,
    created     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    started     TEXT,
    finished    TEXT,
    pid         INTEGER,
    exit_code   INTEGER,
    term_signal INTEGER,
    attempt     INTEGER NOT NULL DEFAULT 1,
    config_hash TEXT,
    executor    TEXT CHECK (executor IN ('local', 'slurm')),
    slurm_job_id INTEGER,
    dataset     TEXT,
    budget_kind TEXT,
    budget      REAL,
    eval_tokens INTEGER NOT NULL DEFAULT 0,
    rung        INTEGER CHECK (rung >= 0),
    rungs       INTEGER CHECK (rungs >= 1),
    eta         INTEGER CHECK (eta >= 2),
    full_budget REAL,
    full_config_hash TEXT,
    promoted_to INTEGER REFERENCES experiments(id),
    promoted_by INTEGER REFERENCES experiments(id),
    via         TEXT CHECK (via IN ('webhook', 'mcp'))
) STRICT;

INSERT INTO experiments_new (id, name, tags, spec, seed, parent, source, priority, status, reason,
                             created, started, finished, pid, exit_code, term_signal, attempt,
                             config_hash, executor, slurm_job_id, dataset, budget_kind, budget,
                             eval_tokens, rung, rungs, eta, full_budget, full_config_hash,
                             promoted_to, promoted_by, via)
SELECT id, name, tags, spec, seed, parent,
       CASE WHEN source = 'agent' AND via = 'mcp' THEN 'mcp' ELSE source END,
       priority, status, reason, created, started, finished, pid, exit_code, term_signal, attempt,
       config_hash, executor, slurm_job_id, dataset, budget_kind, budget, eval_tokens, rung, rungs,
       eta, full_budget, full_config_hash, promoted_to, promoted_by, via
FROM experiments;

DROP TABLE experiments;
ALTER TABLE experiments_new RENAME TO experiments;

CREATE INDEX experiments_finished ON experiments (finished);
CREATE INDEX experiments_scope
    ON experiments (dataset, budget_kind, budget, eval_tokens, status, config_hash);
CREATE INDEX experiments_dedup ON experiments (config_hash, seed, eval_tokens);
CREATE INDEX experiments_rung ON experiments (full_config_hash, rung) WHERE rung IS NOT NULL;
CREATE INDEX experiments_promoted_by ON experiments (promoted_by) WHERE promoted_by IS NOT NULL;
CREATE INDEX experiments_queue
    ON experiments (status, priority DESC, coalesce(rung, 0) DESC, source IN ('agent', 'mcp'), id);

CREATE TRIGGER events_experiment_finished
AFTER UPDATE OF status ON experiments
WHEN old.status = 'running' AND new.status NOT IN ('queued', 'running')
BEGIN
    INSERT INTO events (type, experiment_id, payload)
    VALUES ('experiment.finished', new.id,
            json_object('experiment',
                        json_object('id', new.id, 'name', new.name,
                                    'status', new.status, 'reason', new.reason)));
END;

CREATE TRIGGER status_counts_insert AFTER INSERT ON experiments
BEGIN
    INSERT INTO status_counts (status, n) VALUES (NEW.status, 1)
        ON CONFLICT (status) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER status_counts_update AFTER UPDATE OF status ON experiments
WHEN OLD.status IS NOT NEW.status
BEGIN
    UPDATE status_counts SET n = n - 1 WHERE status = OLD.status;
    INSERT INTO status_counts (status, n) VALUES (NEW.status, 1)
        ON CONFLICT (status) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER status_counts_delete AFTER DELETE ON experiments
BEGIN
    UPDATE status_counts SET n = n - 1 WHERE status = OLD.status;
END;

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
