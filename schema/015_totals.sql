-- 015_totals.sql - running totals for GET /metrics (daemon/serve/metrics.c):
-- experiments per status, and the sums of the results' tokens and training
-- seconds, kept by triggers in the transaction of each change, so that a
-- scrape reads a dozen rows instead of every experiment and result (at
-- 100,000 experiments the scans took 13 ms and 25 ms more of the loop).
-- They hold for changes made with the sqlite3 shell too.
--   sqlite3 DIR/nightshift.db "select * from status_counts; select * from trained_totals"
-- A later migration that rebuilds experiments or results (CREATE ... _new,
-- rename) drops their triggers with the old table: it must create them again.

CREATE TABLE status_counts (
    status TEXT PRIMARY KEY,
    n      INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
INSERT INTO status_counts (status, n) SELECT status, count(*) FROM experiments GROUP BY status;

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

-- One row: the tokens and training seconds of every result.
CREATE TABLE trained_totals (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    tokens  REAL NOT NULL,
    seconds REAL NOT NULL
) STRICT;
INSERT INTO trained_totals (id, tokens, seconds)
SELECT 1, total(total_tokens), total(training_seconds) FROM results;

CREATE TRIGGER trained_totals_insert AFTER INSERT ON results
BEGIN
    UPDATE trained_totals SET tokens = tokens + coalesce(NEW.total_tokens, 0),
                              seconds = seconds + coalesce(NEW.training_seconds, 0);
END;

CREATE TRIGGER trained_totals_update AFTER UPDATE OF total_tokens, training_seconds ON results
BEGIN
    UPDATE trained_totals
    SET tokens = tokens - coalesce(OLD.total_tokens, 0) + coalesce(NEW.total_tokens, 0),
        seconds = seconds - coalesce(OLD.training_seconds, 0) + coalesce(NEW.training_seconds, 0);
END;

CREATE TRIGGER trained_totals_delete AFTER DELETE ON results
BEGIN
    UPDATE trained_totals SET tokens = tokens - coalesce(OLD.total_tokens, 0),
                              seconds = seconds - coalesce(OLD.training_seconds, 0);
END;
