/* executor.h - where a run executes: the scheduler's one door to workers.
 *
 * The scheduler claims an experiment, writes its run directory and hands the
 * run to an executor; progress lines and the ending come back through the
 * same callbacks whatever the executor, so the scheduler, the store, the API
 * and the hook do not change with it. Two implementations:
 *
 *   local  worker.c: `nightshift train` spawned on this machine under the
 *          slot's CPU set and memory limit, progress over a pipe (the default)
 *   slurm  slurm.c: the same command as a Slurm batch job on a compute node,
 *          progress through a file in the shared run directory
 *
 * An executor is a table of functions; each job is opaque to the scheduler
 * (the local executor's job is its worker_t). Everything runs on the loop
 * thread, and no function blocks it. */
#ifndef NIGHTSHIFT_EXECUTOR_H
#define NIGHTSHIFT_EXECUTOR_H

#include <cjson/cJSON.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/exec/worker.h"

typedef struct executor executor_t;
typedef struct executor_job executor_job_t;

typedef struct {
    /* A progress line (a JSON object), borrowed for the call; w is the local
     * worker, NULL for other executors. */
    void (*on_progress)(worker_t *w, const cJSON *line, void *user);
    /* The run ended (exactly once), classified as worker.h describes; after it
     * returns the job is gone. ex->detached: the run goes on without the
     * daemon (stop with WORKER_INTERRUPTED on an executor that re-attaches)
     * and nothing is to be recorded. */
    void (*on_exit)(worker_t *w, const worker_exit_t *ex, void *user);
    /* The run has a handle outside the daemon: the local worker's pid, or the
     * Slurm job id (the other one 0). May run inside start. */
    void (*on_started)(int pid, int64_t slurm_job_id, void *user);
    void *user;
} executor_callbacks_t;

/* One run. Strings are borrowed for the call to start or attach. */
typedef struct {
    int64_t id;           /* the experiment */
    const char *shim;     /* the nightshift binary (exec-limited) */
    char *const *argv;    /* worker command, NULL-terminated; writes progress to fd 3 */
    const char *run_dir;  /* DIR/runs/<id>: the working directory, spec.json */
    const char *log_path; /* stdout + stderr */
    const char *cpus;     /* local: the slot's CPU list */
    int threads;          /* local: thread count; slurm: cpus-per-task */
    int memory_mb;        /* 0 = no limit */
    double budget_s;      /* the spec's time budget */
    double slack_s;       /* startup + evaluation allowance on top of the budget */
    double deadline_s;    /* local: hard kill this long after spawn */
    double kill_grace_s;  /* local: SIGTERM -> SIGKILL */
} executor_run_t;

struct executor {
    const char *name; /* the store's executor column: "local", "slurm" */
    /* Start a run. 0 with *job set (owned by the executor until on_exit has
     * run), or negative with err set (no callback runs). An asynchronous
     * executor may report a failed submission later through on_exit. */
    int (*start)(executor_t *x, const executor_run_t *r, const executor_callbacks_t *cb,
                 executor_job_t **job, char *err, size_t errlen);
    /* Take over a run a previous daemon started (slurm_job_id; 0 = find it by
     * its job name). NULL when the executor cannot re-attach. */
    int (*attach)(executor_t *x, const executor_run_t *r, int64_t slurm_job_id,
                  const executor_callbacks_t *cb, executor_job_t **job, char *err, size_t errlen);
    /* Stop a run: WORKER_CANCELLED, or WORKER_INTERRUPTED for a daemon
     * shutdown (an executor that re-attaches detaches instead). Idempotent. */
    void (*stop)(executor_job_t *job, worker_status why);
    /* Add the job's handle to a status object ("pid", or "slurm_job_id" and
     * "slurm_state"). */
    void (*describe)(const executor_job_t *job, cJSON *o);
    /* Free the executor once no job is left; its handles close on the loop. */
    void (*free)(executor_t *x);
};

/* The local executor on loop (worker.c); NULL when out of memory. Free it
 * with its free function. */
executor_t *executor_local_new(uv_loop_t *loop);

#endif
