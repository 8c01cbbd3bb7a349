/* worker.h - one experiment's worker process, supervised on the libuv loop.
 *
 * A worker is `nightshift train --progress-fd 3 ...` (or any program that
 * follows the same contract) started with uv_spawn through the exec shim
 * (`nightshift exec-limited`), which applies the slot's CPU set, the memory
 * limit and a parent-death signal before exec'ing the real command.
 *
 * The daemon reads three pipes: stdout and stderr are appended to the run's
 * log file (with a size cap; the last few KiB of stderr are kept for the
 * failure reason), and fd 3 carries JSON progress lines, each handed to the
 * progress callback. Garbage lines (not JSON objects, or longer than the line
 * limit) are counted and skipped, never fatal.
 *
 * Every ending is reported exactly once to the exit callback
 * (executor_exit_t): an ending the daemon caused is timeout (the hard
 * deadline passed: SIGTERM, then SIGKILL after the grace), cancelled or
 * interrupted (worker_stop); any other is classified by the worker protocol
 * (executor_classify in executor.h: succeeded, failed, diverged, oom or
 * crashed), with the kernel's OOM-kill count (oom_kill in /proc/vmstat)
 * read around a SIGKILL the daemon did not send.
 *
 * The worker is the local executor's job (executor_local_new): its
 * callbacks are the executor's. */
#ifndef NIGHTSHIFT_WORKER_H
#define NIGHTSHIFT_WORKER_H

#include <stddef.h>
#include <uv.h>

#include "daemon/exec/executor.h"

typedef struct worker worker_t;

typedef struct {
    const char *shim;      /* path of the nightshift binary providing exec-limited */
    char *const *argv;     /* the command to run, argv[0] = program path; NULL-terminated */
    const char *cwd;       /* working directory (the run directory), or NULL */
    const char *log_path;  /* stdout + stderr appended here */
    const char *cpus;      /* CPU list for sched_setaffinity, e.g. "0-1" or "2"; NULL = any */
    int threads;           /* exported as OMP_NUM_THREADS / OPENBLAS_NUM_THREADS; 0 = leave */
    int memory_mb;         /* RLIMIT_AS; 0 = unlimited */
    double deadline_s;     /* hard deadline from spawn; 0 = none */
    double kill_grace_s;   /* SIGTERM -> SIGKILL delay; default 5 */
    size_t max_log_bytes;  /* cap on the log file's growth; default 64 MiB */
    size_t max_line_bytes; /* progress line limit; default 64 KiB */
    /* The file with the kernel's "oom_kill N" line; NULL = /proc/vmstat. */
    const char *oom_counter;
} worker_opts_t;

/* Spawn. Returns 0 with *out set (the worker is owned by the loop until its
 * on_exit has run; after it returns the worker frees itself), or a negative
 * libuv error with err set (nothing to free, no callback will run).
 * cb->on_started is not called here (the local executor does). */
int worker_start(uv_loop_t *loop, const worker_opts_t *o, const executor_callbacks_t *cb,
                 worker_t **out, char *err, size_t errlen);

/* Ask a running worker to stop: SIGTERM to its process group, SIGKILL after
 * the grace. why is EXECUTOR_CANCELLED or EXECUTOR_INTERRUPTED and becomes
 * its status. Safe to call more than once (the first reason wins). */
void worker_stop(worker_t *w, executor_status why);

int worker_pid(const worker_t *w);

/* The engine's address-space floor (engine/floor.h) for the thread counts a
 * run may use: what `exe floor --threads T` maps, run as a worker is run (its
 * environment, no limit), at T = 1 and T = max_threads. It grows with each
 * thread by about the same, so floor(T) = base + per_thread * T between. */
typedef struct {
    int max_threads;
    double at_1, at_max;     /* the two measurements, bytes */
    double base, per_thread; /* bytes */
} worker_floor_t;

/* Measure it (synchronously: two short runs of the binary, before the loop
 * starts). Returns 0, or -1 with err when `floor` cannot run. */
int worker_floor_measure(const char *exe, int max_threads, worker_floor_t *f, char *err,
                         size_t errlen);

/* floor(threads) in bytes. */
double worker_floor(const worker_floor_t *f, int threads);

/* The local executor on loop: workers on this machine (executor.h); NULL
 * when out of memory. Free it with its free function. */
executor_t *executor_local_new(uv_loop_t *loop);

/* Give the local executor x the engine's floor it names (struct executor's
 * floor; copied): until then it names none. */
void executor_local_set_floor(executor_t *x, const worker_floor_t *f);

#endif
