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
 * Every ending is classified exactly once and reported to the exit callback:
 *   succeeded   exit 0 and a {"event":"result","status":"succeeded"} line seen
 *   failed      other non-zero exit (1, 2, or 0 without a result line), with the stderr tail
 *   diverged    exit 3 (the engine's contract)
 *   oom         exit 4; or killed by a signal after a result line with
 *               "status":"oom"; or killed by a SIGKILL the daemon did not send
 *               while the kernel's OOM-kill count (oom_kill in /proc/vmstat)
 *               rose. What stderr says never decides a status.
 *   crashed     killed by a signal (reason names it: "killed by SIGSEGV")
 *   timeout     the hard deadline passed: SIGTERM, then SIGKILL after the grace
 *   cancelled   worker_stop(..., WORKER_CANCELLED)
 *   interrupted worker_stop(..., WORKER_INTERRUPTED) (daemon shutdown)
 *
 * Exit codes of the engine: 0 ok, 1 failed, 2 usage, 3 diverged, 4 out of memory. */
#ifndef NIGHTSHIFT_WORKER_H
#define NIGHTSHIFT_WORKER_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef enum {
    WORKER_SUCCEEDED,
    WORKER_FAILED,
    WORKER_CRASHED,
    WORKER_TIMEOUT,
    WORKER_OOM,
    WORKER_DIVERGED,
    WORKER_CANCELLED,
    WORKER_INTERRUPTED,
} worker_status;

/* The store's spelling: "succeeded", "failed", ... */
const char *worker_status_name(worker_status s);

typedef struct worker worker_t;

typedef struct {
    worker_status status;
    char reason[1024];   /* human-readable; "" for succeeded */
    int exit_code;       /* -1 when killed by a signal */
    int term_signal;     /* 0 when it exited */
    cJSON *result;       /* the last "result" event line, or NULL; borrowed for the callback */
    double wall_seconds; /* spawn to exit */
    uint64_t garbage_lines;
    int detached; /* an executor left the run going (executor.h); always 0 here */
} worker_exit_t;

typedef struct {
    /* A progress line (a JSON object) arrived. line is borrowed for the call. */
    void (*on_progress)(worker_t *w, const cJSON *line, void *user);
    /* The worker ended (exactly once). After it returns the worker frees itself. */
    void (*on_exit)(worker_t *w, const worker_exit_t *ex, void *user);
    void *user;
} worker_callbacks_t;

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
 * on_exit has run), or a negative libuv error with err set (nothing to free,
 * no callback will run). */
int worker_start(uv_loop_t *loop, const worker_opts_t *o, const worker_callbacks_t *cb,
                 worker_t **out, char *err, size_t errlen);

/* Ask a running worker to stop: SIGTERM to its process group, SIGKILL after
 * the grace. why is WORKER_CANCELLED or WORKER_INTERRUPTED and becomes its
 * status. Safe to call more than once (the first reason wins). */
void worker_stop(worker_t *w, worker_status why);

int worker_pid(const worker_t *w);

#endif
