/* store.h - the SQLite store: experiments queue, results, metrics, leaderboard.
 *
 * One store_t per daemon, used from the loop thread only. Every call is a short
 * transaction over prepared statements (no SQL text is ever built from input).
 * The schema lives in schema/NNN_*.sql, compiled into the binary, applied in
 * order inside a transaction and tracked by PRAGMA user_version. WAL mode and a
 * busy timeout let people read the database with the sqlite3 shell while the
 * daemon runs.
 *
 * Errors: functions return 0 (or a documented positive value) on success and
 * -1 on failure with the detail in err. JSON results are cJSON trees the
 * caller owns and frees with cJSON_Delete. */
#ifndef NIGHTSHIFT_STORE_H
#define NIGHTSHIFT_STORE_H

#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

typedef struct store store_t;

/* Experiment statuses as stored (TEXT). Terminal: all but queued, running. */
#define STORE_QUEUED "queued"
#define STORE_RUNNING "running"
#define STORE_SUCCEEDED "succeeded"
#define STORE_FAILED "failed"
#define STORE_CRASHED "crashed"
#define STORE_TIMEOUT "timeout"
#define STORE_OOM "oom"
#define STORE_DIVERGED "diverged"
#define STORE_CANCELLED "cancelled"
#define STORE_INTERRUPTED "interrupted"

/* A new experiment. Strings are borrowed for the call. */
typedef struct {
    const char *name;      /* may be NULL */
    const char *tags_json; /* JSON array text, e.g. ["a","b"]; NULL = [] */
    const char *spec_json; /* canonical spec (spec_canonical_json) */
    const char *spec_hash; /* hex SHA-256 of the canonical spec without name/tags/priority/parent */
    int64_t seed;
    int64_t parent;     /* 0 = none */
    const char *source; /* "api", "cli" or "agent" */
    int priority;       /* higher runs first; ties: oldest first */
} store_new_experiment_t;

/* What the scheduler needs to start one. Strings are owned by the struct;
 * release with store_experiment_clear. */
typedef struct {
    int64_t id;
    char *name;
    char *spec_json;
    int attempt; /* 1 for the first run; incremented on each requeue */
} store_experiment_t;

/* The final numbers of a succeeded run (from the worker's result line). */
typedef struct {
    double val_bpb;
    int64_t params_total, params_wte, params_wpe, params_value_embeds, params_lm_head,
        params_blocks, params_scalars;
    double flops_per_token, mfu_percent, peak_gflops;
    const char *peak_source;
    double tokens_per_second, total_tokens;
    int64_t num_steps;
    double training_seconds, total_seconds, startup_seconds, eval_seconds, peak_rss_mb;
} store_result_t;

typedef struct {
    int64_t step;
    double time_s; /* training seconds at this step */
    double loss, lr_mult, tok_s;
} store_metric_t;

/* Open (creating if needed) the database at path, apply pending migrations,
 * set WAL, busy_timeout and foreign keys. *out is owned by the caller and
 * closed with store_close. */
int store_open(const char *path, store_t **out, char *err, size_t errlen);
void store_close(store_t *s);

/* Insert a queued experiment; *id gets its id. */
int store_insert(store_t *s, const store_new_experiment_t *e, int64_t *id, char *err,
                 size_t errlen);

/* An experiment with the same spec_hash and seed that is queued, running or
 * succeeded: returns 1 and sets *id, 0 when there is none, -1 on error. */
int store_find_duplicate(store_t *s, const char *spec_hash, int64_t seed, int64_t *id, char *err,
                         size_t errlen);

/* Claim the next queued experiment (priority desc, id asc) and mark it
 * running with pid 0 and started = now. Returns 1 with *out filled, 0 when the
 * queue is empty, -1 on error. */
int store_claim_next(store_t *s, store_experiment_t *out, char *err, size_t errlen);
void store_experiment_clear(store_experiment_t *e);

/* Record the worker's pid once spawned. */
int store_set_pid(store_t *s, int64_t id, int pid, char *err, size_t errlen);

/* Finish a running experiment in one transaction: status (a terminal STORE_*),
 * reason (may be NULL), exit code or signal (-1 when not applicable), and the
 * result row when r is not NULL. Finishing an experiment that is not running
 * is an error (nothing is recorded twice). */
int store_finish(store_t *s, int64_t id, const char *status, const char *reason, int exit_code,
                 int term_signal, const store_result_t *r, char *err, size_t errlen);

/* Append metrics rows for one experiment in one transaction. */
int store_add_metrics(store_t *s, int64_t id, const store_metric_t *m, size_t n, char *err,
                      size_t errlen);

/* Cancel a queued experiment: returns 1 if it was queued (now cancelled), 0
 * if it is not queued (the caller cancels a running one through its worker),
 * -1 on error or unknown id (err says which). */
int store_cancel_queued(store_t *s, int64_t id, char *err, size_t errlen);

/* At startup: every experiment still `running` was interrupted by a daemon
 * crash. Each is marked interrupted and, if its attempt < max_attempts,
 * re-queued with attempt + 1. Reports how many were requeued / given up. */
int store_recover(store_t *s, int max_attempts, int *requeued, int *abandoned, char *err,
                  size_t errlen);

/* Mark a running experiment interrupted by a clean daemon shutdown and queue
 * it again (attempt + 1) when attempt < max_attempts. */
int store_interrupt(store_t *s, int64_t id, int max_attempts, char *err, size_t errlen);

/* Number of queued experiments, or -1 on error. */
int64_t store_queue_depth(store_t *s, char *err, size_t errlen);

/* --- queries for the API (each returns a new cJSON tree, or NULL with err) --- */

/* List: status filter (NULL = any), order "id" | "-id" | "val_bpb" |
 * "created" (NULL = "-id"), limit 1..1000, after = id cursor (0 = none). Each
 * item: id, name, tags, status, reason, source, priority, parent, attempt,
 * created/started/finished (ISO-8601 UTC), val_bpb (null unless succeeded). */
cJSON *store_list(store_t *s, const char *status, const char *order, int limit, int64_t after,
                  char *err, size_t errlen);

/* One experiment with its spec (parsed JSON), result object (or null) and, up
 * to max_metrics rows, its metrics. NULL with err "not found" for an unknown id
 * (*not_found set to 1). */
cJSON *store_get(store_t *s, int64_t id, int max_metrics, int *not_found, char *err,
                 size_t errlen);

/* The leaderboard view: succeeded experiments by val_bpb ascending. */
cJSON *store_leaderboard(store_t *s, int limit, char *err, size_t errlen);

/* The best succeeded experiment with its full spec and result; a JSON null
 * when nothing has succeeded yet. */
cJSON *store_best(store_t *s, char *err, size_t errlen);

#endif
