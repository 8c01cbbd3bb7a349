-- 001_init.sql - the experiment queue, results, per-step metrics and the leaderboard.
--
-- Applied by the store inside one transaction, after which PRAGMA user_version
-- is set to 1. A migration file must not contain BEGIN/COMMIT itself.
--
-- Times are TEXT, ISO-8601 UTC with milliseconds ("2026-11-29T19:37:00.123Z"),
-- so they sort as strings and read well in the sqlite3 shell.

CREATE TABLE experiments (
    id          INTEGER PRIMARY KEY,
    name        TEXT,
    tags        TEXT NOT NULL DEFAULT '[]' CHECK (json_type(tags) = 'array'),
    -- The canonical spec (defaults filled, keys sorted), as submitted.
    spec        TEXT NOT NULL CHECK (json_type(spec) = 'object'),
    -- Hex SHA-256 of the canonical spec without name, tags, priority, parent:
    -- with seed, the identity used to answer duplicate submissions.
    spec_hash   TEXT NOT NULL,
    seed        INTEGER NOT NULL,
    parent      INTEGER REFERENCES experiments(id),
    source      TEXT NOT NULL CHECK (source IN ('api', 'cli', 'agent')),
    priority    INTEGER NOT NULL DEFAULT 0,
    status      TEXT NOT NULL DEFAULT 'queued'
                CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'crashed',
                                  'timeout', 'oom', 'diverged', 'cancelled', 'interrupted')),
    reason      TEXT,
    created     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    started     TEXT,
    finished    TEXT,
    pid         INTEGER,
    exit_code   INTEGER,
    term_signal INTEGER,
    -- 1 for the first run; each requeue after an interruption adds one.
    attempt     INTEGER NOT NULL DEFAULT 1
) STRICT;

-- The scheduler's pick: WHERE status = 'queued' ORDER BY priority DESC, id.
CREATE INDEX experiments_queue ON experiments (status, priority DESC, id);
-- Duplicate detection: same spec_hash and seed.
CREATE INDEX experiments_dedup ON experiments (spec_hash, seed);

-- The final numbers of a succeeded run, one row per experiment.
CREATE TABLE results (
    experiment_id       INTEGER PRIMARY KEY REFERENCES experiments(id),
    val_bpb             REAL,
    params_total        INTEGER,
    params_wte          INTEGER,
    params_wpe          INTEGER,
    params_value_embeds INTEGER,
    params_lm_head      INTEGER,
    params_blocks       INTEGER,
    params_scalars      INTEGER,
    flops_per_token     REAL,
    mfu_percent         REAL,
    peak_gflops         REAL,  -- the MFU denominator used
    peak_source         TEXT,  -- where it came from: flag, spec, calibration, measured
    tokens_per_second   REAL,
    total_tokens        REAL,
    num_steps           INTEGER,
    training_seconds    REAL,
    total_seconds       REAL,
    startup_seconds     REAL,
    eval_seconds        REAL,
    peak_rss_mb         REAL
) STRICT;

CREATE INDEX results_val_bpb ON results (val_bpb);

-- Progress, one row per reported step. The key makes a replayed batch a no-op
-- (the store inserts with OR IGNORE).
CREATE TABLE metrics (
    experiment_id INTEGER NOT NULL REFERENCES experiments(id),
    step          INTEGER NOT NULL,
    time_s        REAL,  -- training seconds at this step
    loss          REAL,
    lr_mult       REAL,
    tok_s         REAL,
    PRIMARY KEY (experiment_id, step)
) STRICT, WITHOUT ROWID;

-- "What is the best config": succeeded experiments, best val_bpb first, with the
-- spec fields that tell configurations apart as columns.
--   sqlite3 DIR/nightshift.db "select * from leaderboard limit 5"
-- ve_layers is a name ("alternate") or a JSON array of layer indices ("[0,2]").
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
       json_extract(e.spec, '$.model.vocab_size')       AS vocab_size,
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
