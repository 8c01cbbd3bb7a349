-- 004_scopes_repeats_pruning.sql - like with like, repeats, pruning.
--
-- val_bpb is only comparable within one dataset and one budget, so every
-- experiment carries its scope as real, indexed columns: dataset, budget_kind
-- ('time' or 'tokens') and budget (seconds or training tokens), derived from
-- the canonical spec (a spec with "token_budget" > 0 is a token budget, any
-- other a time budget of time_budget_s). They are STORED generated columns:
-- filled at insert and, by the table rebuild below, for every old row.
--
-- config_hash groups the repeats of one configuration: the SHA-256 of the
-- canonical spec without seed, name, tags, priority, parent and prune
-- (nightshift_sha256 is a function the store registers on its connection;
-- the store sets it at insert, this migration for the old rows).
--
-- A new status, 'pruned': a run stopped because its training loss lagged the
-- median of finished runs at the same progress. SQLite cannot change a CHECK
-- constraint in place, so experiments is rebuilt (the store runs migrations
-- with foreign keys off and checks them before committing). metrics gains the
-- progress (fraction of the budget) of each row.
--
-- The leaderboard shows each configuration once: the mean, sample standard
-- deviation and number of its succeeded seeds, best mean first, within its
-- (dataset, budget_kind, budget); query it with a WHERE on those columns.
--   sqlite3 DIR/nightshift.db "select * from leaderboard where dataset = 'default'
--                              and budget_kind = 'time' and budget = 300 limit 5"

DROP VIEW leaderboard;

CREATE TABLE experiments_new (
    id          INTEGER PRIMARY KEY,
    name        TEXT,
    tags        TEXT NOT NULL DEFAULT '[]' CHECK (json_type(tags) = 'array'),
    spec        TEXT NOT NULL CHECK (json_type(spec) = 'object'),
    spec_hash   TEXT NOT NULL,
    seed        INTEGER NOT NULL,
    parent      INTEGER REFERENCES experiments(id),
    source      TEXT NOT NULL CHECK (source IN ('api', 'cli', 'agent')),
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
    dataset     TEXT GENERATED ALWAYS AS (json_extract(spec, '$.dataset')) STORED,
    budget_kind TEXT GENERATED ALWAYS AS
                (CASE WHEN ifnull(json_extract(spec, '$.token_budget'), 0) > 0
                      THEN 'tokens' ELSE 'time' END) STORED,
    budget      REAL GENERATED ALWAYS AS
                (CASE WHEN ifnull(json_extract(spec, '$.token_budget'), 0) > 0
                      THEN json_extract(spec, '$.token_budget')
                      ELSE json_extract(spec, '$.time_budget_s') END) STORED
) STRICT;

INSERT INTO experiments_new (id, name, tags, spec, spec_hash, seed, parent, source, priority,
                             status, reason, created, started, finished, pid, exit_code,
                             term_signal, attempt, config_hash)
SELECT id, name, tags, spec, spec_hash, seed, parent, source, priority, status, reason, created,
       started, finished, pid, exit_code, term_signal, attempt,
       nightshift_sha256(json_remove(spec, '$.seed', '$.name', '$.tags', '$.priority',
                                     '$.parent', '$.prune'))
FROM experiments;

DROP TABLE experiments;
ALTER TABLE experiments_new RENAME TO experiments;

CREATE INDEX experiments_queue ON experiments (status, priority DESC, id);
CREATE INDEX experiments_dedup ON experiments (spec_hash, seed);
-- The leaderboard, best, noise and pruning queries: one scope, one status.
CREATE INDEX experiments_scope ON experiments (dataset, budget_kind, budget, status, config_hash);

ALTER TABLE metrics ADD COLUMN progress REAL; -- fraction of the budget at this step, 0..1

-- One row per configuration (config_hash) and scope: id and the spec columns
-- are those of its first run; val_bpb is the mean over its succeeded seeds,
-- val_bpb_sd their sample standard deviation (NULL with one seed).
CREATE VIEW leaderboard AS
SELECT e.id,
       e.name,
       g.val_bpb,
       g.val_bpb_sd,
       g.n_seeds,
       g.seeds,
       g.best_val_bpb,
       g.dataset,
       g.budget_kind,
       g.budget,
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
       g.config_hash,
       r.params_total,
       r.mfu_percent,
       r.tokens_per_second,
       r.num_steps,
       r.training_seconds,
       g.finished
FROM (SELECT x.dataset, x.budget_kind, x.budget, x.config_hash,
             min(x.id)                   AS id,
             count(*)                    AS n_seeds,
             json_group_array(x.seed)    AS seeds,
             avg(y.val_bpb)              AS val_bpb,
             CASE WHEN count(*) > 1
                  THEN sqrt(max(0.0, (sum(y.val_bpb * y.val_bpb)
                                      - count(*) * avg(y.val_bpb) * avg(y.val_bpb))
                                     / (count(*) - 1)))
             END                         AS val_bpb_sd,
             min(y.val_bpb)              AS best_val_bpb,
             max(x.finished)             AS finished
      FROM experiments x
      JOIN results y ON y.experiment_id = x.id
      WHERE x.status = 'succeeded' AND y.val_bpb IS NOT NULL
      GROUP BY x.dataset, x.budget_kind, x.budget, x.config_hash) g
JOIN experiments e ON e.id = g.id
JOIN results r ON r.experiment_id = g.id
ORDER BY g.val_bpb, g.id;
