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
 * An executor is a table of functions with types of its own; each job is
 * opaque to the scheduler. Everything runs on the loop thread, and no
 * function blocks it. executor.c holds what every executor shares: the
 * statuses' names, the reading of a progress line, and the one
 * classification of an ending by the worker protocol (engine/protocol.h). */
#ifndef NIGHTSHIFT_EXECUTOR_H
#define NIGHTSHIFT_EXECUTOR_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct executor executor_t;
typedef struct executor_job executor_job_t;

/* How a run ended, as the store records it. */
typedef enum {
    EXECUTOR_SUCCEEDED,
    EXECUTOR_FAILED,
    EXECUTOR_CRASHED,
    EXECUTOR_TIMEOUT,
    EXECUTOR_OOM,
    EXECUTOR_DIVERGED,
    EXECUTOR_CANCELLED,
    EXECUTOR_INTERRUPTED,
} executor_status;

/* The store's spelling: "succeeded", "failed", ... (STORE_* in store.h). */
const char *executor_status_name(executor_status s);

/* A run's ending, reported once through on_exit. */
typedef struct {
    executor_status status;
    char reason[1024];   /* human-readable; "" for succeeded */
    int exit_code;       /* -1 when killed by a signal or unknown */
    int term_signal;     /* 0 when it exited */
    const cJSON *result; /* the last result line, or NULL; borrowed for the callback */
    double wall_seconds; /* start (or attach) to the end */
    uint64_t garbage_lines;
    int detached; /* the run goes on without the daemon; nothing is to be recorded */
    /* The run never started (a Slurm submission was refused): the experiment
     * goes back to the queue without spending an attempt, and the scheduler
     * waits before it starts anything again. */
    int not_started;
} executor_exit_t;

typedef struct {
    /* A progress line (a JSON object), borrowed for the call. */
    void (*on_progress)(const cJSON *line, void *user);
    /* The run ended (exactly once); after it returns the job is gone.
     * ex->detached: the run goes on without the daemon (stop with
     * EXECUTOR_INTERRUPTED on an executor that re-attaches). */
    void (*on_exit)(const executor_exit_t *ex, void *user);
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
    /* Stop a run: EXECUTOR_CANCELLED, or EXECUTOR_INTERRUPTED for a daemon
     * shutdown (an executor that re-attaches detaches instead). Idempotent. */
    void (*stop)(executor_job_t *job, executor_status why);
    /* Add the job's handle to a status object ("pid", or "slurm_job_id" and
     * "slurm_state"). */
    void (*describe)(const executor_job_t *job, cJSON *o);
    /* Free the executor once no job is left; its handles close on the loop. */
    void (*free)(executor_t *x);
    /* The address space a run of `threads` threads maps before it allocates
     * anything, which a memory limit on address space must leave room for
     * (bytes; engine/cost.h's cost_admit adds its margin), 0 when there is
     * none to count. NULL = none (a Slurm job's --mem limits resident
     * memory). */
    double (*floor)(const executor_t *x, int threads);
};

/* x's floor for a run of `threads` threads (struct executor's floor); 0 for
 * a NULL x or one without. */
double executor_floor(const executor_t *x, int threads);

/* ------------------------------------------------- shared by executors */

/* One line of a run's progress stream (without its newline). A line that is
 * one JSON object goes to cb->on_progress; a result line is also kept in
 * *result (the previous one freed; the caller owns it). Returns 0, or -1 for
 * a garbage line (not one JSON object), which is skipped. */
int executor_progress_line(const char *p, size_t n, const executor_callbacks_t *cb, cJSON **result);

/* What an executor saw of an ending the daemon did not cause. */
typedef struct {
    int exit_code;       /* the command's exit code; -1 when it was killed */
    int term_signal;     /* the signal that killed it; 0 when it exited */
    const cJSON *result; /* its last result line, or NULL */
    int oom_killed;      /* SIGKILLed while the kernel's OOM-kill count rose */
    int memory_mb;       /* its memory limit, for the reason; 0 = none */
    const char *tail;    /* the end of its error output as one line; "" = none */
} executor_facts_t;

/* The worker protocol's verdict (engine/protocol.h), the one rule both
 * executors follow: ex->status and ex->reason from f.
 *   succeeded   PROTO_EXIT_OK after a succeeded result line
 *   failed      PROTO_EXIT_OK without one, or an exit code the protocol
 *               does not name otherwise (PROTO_EXIT_FAILED, 127, ...): the
 *               tail (or the result's reason) in the reason
 *   diverged    PROTO_EXIT_DIVERGED
 *   oom         PROTO_EXIT_OOM; or killed by a signal after a result line
 *               whose status is oom; or oom_killed. What the tail says never
 *               decides a status.
 *   crashed     killed by any other signal ("killed by SIGSEGV: tail") */
void executor_classify(const executor_facts_t *f, executor_exit_t *ex);

/* "SIGSEGV", or "signal N" in buf for one this build does not name. */
const char *executor_signal_name(int sig, char *buf, size_t len);

/* Whether an environment entry ("KEY=value") is one of the daemon's secrets,
 * which no run gets, whatever the executor: the API token
 * (NIGHTSHIFT_TOKEN), the agent hook's key (NIGHTSHIFT_AGENT_SECRET) and
 * slurmrestd's JWT (SLURM_JWT; the Slurm commands get it, jobs do not). serve
 * also takes the first two out of its own environment once it has read
 * them. */
int executor_env_is_secret(const char *entry);

#endif
