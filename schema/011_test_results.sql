-- 011_test_results.sql - the sealed test split's figure of each run, kept
-- apart from its result.
--
-- `prep` sets a test split aside (test.bin); after a run has measured
-- val_bpb, the worker measures it once on the test split too and reports it
-- in a line of its own. The daemon stores that here and nowhere else: the
-- leaderboard, best's ranking, the noise, pruning, the agent hook and the
-- experiment list never read this table, so a night that compares hundreds
-- of configurations on val_bpb cannot have chosen by it. Only the answers
-- that report a night's outcome (GET /v1/best, GET /v1/report) read it, for
-- the best configuration and the baseline, so test_bpb shows whether the
-- night overfit its validation split.
--
-- test_bpb is NULL when the run could not be measured; reason says why (the
-- dataset has no test split, or one too short for a window). tokens: target
-- tokens counted; seconds: the evaluation's time. A run that is re-queued
-- loses its row with its metrics; the next attempt measures again.
--   sqlite3 DIR/nightshift.db "select * from test_results"

CREATE TABLE test_results (
    experiment_id INTEGER PRIMARY KEY REFERENCES experiments(id),
    test_bpb      REAL,
    tokens        INTEGER,
    seconds       REAL,
    reason        TEXT,
    measured      TEXT NOT NULL
) STRICT;
