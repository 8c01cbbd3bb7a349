-- 019_quiet_source.sql - where a run's quiet_tokens_per_second came from
-- (engine/quiet.h): 'cached bench' (an earlier quiet bench of its shape on
-- this machine), 'bench' (its own bench before training, on a quiet machine,
-- then cached), 'own quiet steps' (no quiet bench: the throughput of its steps
-- whose threads did not wait), 'cpu share' (none of those: the slowdown is
-- 1 / cpu_share). NULL for results stored before and where nothing was known.
ALTER TABLE results ADD COLUMN quiet_source TEXT;
