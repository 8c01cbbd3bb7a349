-- 007_executor.sql - which executor ran an experiment, and its Slurm job.
--
-- executor: 'local' (a worker process spawned by the daemon) or 'slurm' (a
-- batch job on a cluster); NULL for rows from before this migration and for
-- experiments that never started. slurm_job_id: the job that runs (or ran)
-- the latest attempt, set as soon as sbatch has answered; a restarted daemon
-- re-attaches to a running experiment's job through it instead of submitting
-- the experiment again.
--   sqlite3 DIR/nightshift.db "select id, status, executor, slurm_job_id from experiments"

ALTER TABLE experiments ADD COLUMN executor TEXT CHECK (executor IN ('local', 'slurm'));
ALTER TABLE experiments ADD COLUMN slurm_job_id INTEGER;
