/* slurm.h - the Slurm executor: every run is a batch job on a cluster.
 *
 * The daemon runs where Slurm's commands work (a login node) and its state
 * directory is on a file system the compute nodes share. A run becomes
 * DIR/runs/<id>/job.sh, submitted with sbatch as job PREFIX-<id>:
 *
 *   cpus-per-task   the run's thread count
 *   mem             the run's memory limit (MiB), when it has one
 *   time            ceil((budget + slack) / 60) minutes, at least 1: a backstop;
 *                   the trainer itself stops at the budget
 *   output          DIR/runs/<id>/train.log (appended, like a local worker's)
 *
 * The job runs the same worker command as a local slot, its progress fd 3
 * appended to DIR/runs/<id>/progress.jsonl, and writes the command's exit
 * code to DIR/runs/<id>/exit_code when it ends. The daemon tails the progress
 * file (progress lines reach the scheduler as from a local worker's pipe) and
 * asks squeue for the state of its jobs. Files on the shared directory, not a
 * callback to the daemon's API: compute nodes often cannot reach a login
 * node's ports, the files survive a daemon restart (a re-attached run replays
 * them; metrics already stored are skipped), and no credential goes to the
 * nodes.
 *
 * Slurm's end states map one to one (slurm_state_map): COMPLETED succeeded
 * (when the result line is there), FAILED failed (the worker protocol's exit
 * codes still tell diverged and oom), TIMEOUT timeout, OUT_OF_MEMORY oom,
 * NODE_FAIL failed, CANCELLED cancelled; PENDING and RUNNING keep the
 * experiment running from the daemon's view (the slot is taken) and show in
 * the slot's status. A daemon shutdown leaves the jobs running: the next
 * daemon re-attaches to them (sched_reattach) by the job id in the store, or,
 * when the daemon died before sbatch answered, by the job name.
 *
 * Two ways to talk to Slurm, both asynchronous on the loop: slurmrestd
 * (rest_url; POST job/submit, GET jobs, DELETE job/<id> of openapi/v0.0.38,
 * JSON through libcurl multi driven by the loop as in hook.c), or else the
 * commands sbatch, squeue and scancel (from PATH; SLURM_CONF from the
 * environment) under uv_spawn with a timeout. One listing per poll interval
 * covers every job. */
#ifndef NIGHTSHIFT_SLURM_H
#define NIGHTSHIFT_SLURM_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <uv.h>

#include "daemon/exec/executor.h"

#define SLURM_DEFAULT_PREFIX "nightshift"
#define SLURM_DEFAULT_POLL_S 10.0

typedef struct {
    const char *partition;    /* NULL = the cluster's default */
    const char *account;      /* NULL = the user's default */
    char *const *sbatch_args; /* extra sbatch options, NULL-terminated; NULL = none */
    const char *job_prefix;   /* job names are PREFIX-<id>; default "nightshift" */
    double poll_s;            /* squeue interval; default 10 */
    double tail_s;            /* progress file read interval; default 1 */
    double command_timeout_s; /* a Slurm command or request taking longer fails; default 60 */
    /* slurmrestd instead of the commands (openapi/v0.0.38, JSON over libcurl):
     * "http://host:port" or "unix:/path/to/socket"; NULL = the commands. */
    const char *rest_url;
    const char *rest_user;  /* the jobs' user; default the daemon's (getpwuid) */
    const char *rest_token; /* a JWT (X-SLURM-USER-TOKEN); NULL = none (local auth) */
} slurm_opts_t;

/* The executor (strings are copied). NULL with err when out of memory. */
executor_t *slurm_executor_new(uv_loop_t *loop, const slurm_opts_t *o, char *err, size_t errlen);

/* ------------------------------------------------------ the pure parts */

typedef enum {
    SLURM_QUEUED,  /* waiting for resources (PENDING, ...) */
    SLURM_RUNNING, /* RUNNING, COMPLETING, SUSPENDED, ... */
    SLURM_ENDED,   /* a final state; *status says which */
    SLURM_UNKNOWN, /* a state this build does not know: keep waiting */
} slurm_phase;

/* Map a Slurm job state (squeue %T) to a phase and, for a final state, the
 * experiment's status: COMPLETED -> succeeded, FAILED/NODE_FAIL/BOOT_FAIL ->
 * failed, TIMEOUT/DEADLINE -> timeout, OUT_OF_MEMORY -> oom, CANCELLED ->
 * cancelled, PREEMPTED -> interrupted (re-queued). */
slurm_phase slurm_state_map(const char *state, executor_status *status);

/* The --time backstop in whole minutes: ceil((budget_s + slack_s) / 60), at
 * least 1. */
int slurm_time_minutes(double budget_s, double slack_s);

/* The batch script for run r (see above): a new string the caller frees, or
 * NULL when out of memory. */
char *slurm_job_script(const executor_run_t *r);

/* The sbatch command line for run r (argv[0] = "sbatch", NULL-terminated) in
 * argv (room for max entries); the strings live in buf (len bytes) or are
 * borrowed from o and r. The script path is the last argument. Returns the
 * number of entries, or -1 when argv or buf is too small. */
int slurm_sbatch_argv(const slurm_opts_t *o, const executor_run_t *r, const char *script,
                      char **argv, int max, char *buf, size_t len);

/* slurmrestd's job/submit body for run r: {"script": script, "job": {name,
 * current_working_directory, standard_output, standard_error, tasks,
 * cpus_per_task, memory_per_node, time_limit, partition, account,
 * environment}} with the resources of slurm_sbatch_argv and env (KEY=VALUE
 * strings, NULL-terminated; NIGHTSHIFT_TOKEN and SLURM_JWT left out) as the
 * job's environment. A new tree, or NULL when out of memory. */
cJSON *slurm_rest_job(const slurm_opts_t *o, const executor_run_t *r, const char *script,
                      char *const *env);

#endif
