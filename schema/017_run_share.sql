-- 017_run_share.sql - each run's share of the machine (engine/share.h,
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
