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

#include <cjson/cJSON.h>

#include "engine/result_fields.h"
#include "engine/spec.h"
#include "engine/util.h"

typedef struct store store_t;

/* Experiment statuses as stored (TEXT). Terminal: all but queued, running. */
#define STORE_QUEUED      "queued"
#define STORE_RUNNING     "running"
#define STORE_SUCCEEDED   "succeeded"
#define STORE_FAILED      "failed"
#define STORE_CRASHED     "crashed"
#define STORE_TIMEOUT     "timeout"
#define STORE_OOM         "oom"
#define STORE_DIVERGED    "diverged"
#define STORE_CANCELLED   "cancelled"
#define STORE_INTERRUPTED "interrupted"
#define STORE_PRUNED      "pruned" /* stopped: its loss lagged the median (sched.h) */

/* Where val_bpb values compare: one dataset, one budget and one evaluation,
 * as the spec defines it (spec_scope_on in engine/spec.h); stored as the
 * columns dataset, budget_kind, budget and eval_tokens of experiments,
 * configs and scopes. */
typedef spec_scope_t store_scope_t;

/* A new experiment, filed as the spec parser says. Strings are borrowed for
 * the call. */
typedef struct {
    const char *name;        /* may be NULL */
    const char *tags_json;   /* JSON array text, e.g. ["a","b"]; NULL = [] */
    const char *spec_json;   /* canonical spec (spec_canonical_json) */
    const char *config_hash; /* spec_config_hash: its configuration */
    store_scope_t scope;     /* spec_scope_on: its dataset, budget and evaluation */
    int64_t seed;
    int64_t parent;     /* 0 = none */
    const char *source; /* "api", "cli", "agent" or "mcp" */
    const char *via;    /* an agent's: "webhook" or "mcp" (the protocol it came by); NULL */
    int priority;       /* higher runs first; ties: a higher rung, a person's before the agent's,
                           then oldest */
    const struct store_asha *asha; /* its rung under serve --prune asha; NULL = none */
} store_new_experiment_t;

/* A run's place on the ladder of asynchronous successive halving
 * (schema/013_asha.sql, sched.h). Strings are borrowed for the call. */
typedef struct store_asha {
    int rung;                     /* 0 .. rungs - 1 */
    int rungs, eta;               /* the ladder it was filed under */
    double full_budget;           /* the budget the spec was submitted at (its budget_kind) */
    const char *full_config_hash; /* spec_config_hash of the spec at full_budget */
} store_asha_t;

/* What the scheduler needs to start one. Strings are owned by the struct;
 * release with store_experiment_clear. */
typedef struct {
    int64_t id;
    char *name;
    char *spec_json;
    int attempt;         /* 1 for the first run; incremented on each requeue */
    store_scope_t scope; /* its scope as stored (store_claim_next fills it) */
} store_experiment_t;

/* The final numbers of a succeeded run (from the worker's result line): the
 * fields of engine/result_fields.h; the store keeps the STORED and PARAMS ones. */
typedef result_values_t store_result_t;

typedef struct {
    int64_t step;
    double time_s; /* training seconds at this step */
    double loss, lr_mult, tok_s;
    double progress; /* fraction of the budget, 0..1; < 0 = not reported (NULL) */
} store_metric_t;

/* The schema: one entry per schema/NNN_name.sql in version order, generated
 * into the build as schema_sql.c by scripts/embed-schema.awk (static data). */
typedef struct {
    int version;      /* NNN, the PRAGMA user_version after it is applied */
    const char *name; /* the file name */
    const char *sql;  /* the file's text; no BEGIN/COMMIT of its own */
} store_migration_t;

extern const store_migration_t store_migrations[];
extern const size_t store_n_migrations;

/* Apply to the database at path (created if needed) every migration of
 * m[0..n) newer than its user_version, each in one transaction that also sets
 * user_version. A database newer than m[n-1] is refused ("store: nightshift.db
 * has schema version 7, this build knows up to 1"). store_open does this with
 * store_migrations; tests pass their own lists. */
int store_migrate(const char *path, const store_migration_t *m, size_t n, char *err, size_t errlen);

/* Times are stored and returned as ISO-8601 UTC with milliseconds,
 * "2026-11-29T19:37:00.123Z" (24 characters). */
#define STORE_TIME_LEN 32
void store_format_time(int64_t unix_ms, char *buf, size_t len);

/* Open (creating if needed) the database at path, apply pending migrations,
 * set WAL, busy_timeout and foreign keys. *out is owned by the caller and
 * closed with store_close. */
int store_open(const char *path, store_t **out, char *err, size_t errlen);

/* Open the database at path read-only (SQLITE_OPEN_READONLY): nothing is
 * created or migrated, and a schema other than this build's is refused. For
 * the client's answers while no daemon runs; writing through it fails. *out
 * is owned by the caller and closed with store_close. */
int store_open_readonly(const char *path, store_t **out, char *err, size_t errlen);
void store_close(store_t *s);

/* A read-only connection of its own to s's database (already migrated by
 * s), for the store's queries off the loop (a report on the thread pool):
 * it never touches s's connection, so it may be used on another thread, one
 * call at a time, while the loop goes on. *out is owned by the caller and
 * closed with store_close; every write through it fails. */
int store_open_reader(const store_t *s, store_t **out, char *err, size_t errlen);

/* Are the store's files still where the connection has them? Someone may
 * delete the WAL (nightshift.db-wal) under the running daemon: what was
 * committed since the last checkpoint is then only in a file a crash would
 * lose. After every commit the store copies the commit into the database
 * file when its WAL has gone (so nothing acknowledged waits in it); called
 * every second or so, this also saves what earlier commits left in it and
 * opens the connection anew with a new WAL. Returns 0 when all is well, 1
 * when it repaired that or will try again at the next call (err says which:
 * log it), -1 with err when nothing can be done: the database file itself was
 * deleted or replaced (the caller should stop). Loop thread only, between
 * calls. */
int store_check_files(store_t *s, char *err, size_t errlen);

/* Insert a queued experiment; *id gets its id. A parent that does not exist
 * is an error ("parent: experiment 17 does not exist"). */
int store_insert(store_t *s, const store_new_experiment_t *e, int64_t *id, char *err,
                 size_t errlen);

/* An experiment with the same configuration (config_hash), seed and
 * evaluation (its scope's eval_tokens) that is queued, running, succeeded or timed out: returns 1
 * and sets *id, 0 when there is none, -1 on error. With several, a succeeded one wins over a
 * running one over a queued one over a timed-out one. A timeout is an answer about the spec under
 * the daemon's limits (it did not finish within budget * 1.25 + slack, or a token budget within its
 * run limit): the same seed under the same limits times out again, after the longest time a slot
 * gives any run. A failure, a crash, an interruption or a cancellation says nothing about the spec
 * and is run again. */
int store_find_duplicate(store_t *s, const char *config_hash, int64_t seed, int64_t eval_tokens,
                         int64_t *id, char *err, size_t errlen);

/* Claim the next queued experiment and mark it running with pid 0 and
 * started = now: the highest priority first; among equal priorities a
 * person's submission (source api or cli) before the agent's proposals, then
 * the oldest. Returns 1 with *out filled, 0 when the queue is empty, -1 on
 * error. */
int store_claim_next(store_t *s, store_experiment_t *out, char *err, size_t errlen);
void store_experiment_clear(store_experiment_t *e);

/* Record the worker's pid once spawned. */
int store_set_pid(store_t *s, int64_t id, int pid, char *err, size_t errlen);

/* Record which executor runs a running experiment ("local" or "slurm") and
 * its Slurm job id (0 = none yet; stored as NULL). */
int store_set_executor(store_t *s, int64_t id, const char *executor, int64_t slurm_job_id,
                       char *err, size_t errlen);

/* A running experiment with the executor that runs it (store_running_jobs). */
typedef struct {
    store_experiment_t e;
    char executor[8];     /* "local", "slurm", or "" when not recorded */
    int64_t slurm_job_id; /* 0 = none recorded */
} store_job_t;

/* Every running experiment, by id, into a new array *out of *n entries (the
 * caller frees it with store_jobs_free). At startup these are the runs the
 * previous daemon left behind: a Slurm executor re-attaches to their jobs. */
int store_running_jobs(store_t *s, store_job_t **out, size_t *n, char *err, size_t errlen);
void store_jobs_free(store_job_t *jobs, size_t n);

/* Finish a running experiment in one transaction: status (a terminal STORE_*),
 * reason (may be NULL), exit code or signal (-1 when not applicable; stored as
 * NULL, as is a term_signal of 0), and the result row when r is not NULL (only
 * succeeded runs rank on the leaderboard). Finishing an experiment that is not
 * running is an error (nothing is recorded twice). */
int store_finish(store_t *s, int64_t id, const char *status, const char *reason, int exit_code,
                 int term_signal, const store_result_t *r, char *err, size_t errlen);

/* The sealed test split's figure of one run (the worker's "test" line,
 * engine/train.c). Kept apart from the result: no ranking, pruning or hook
 * query reads it (schema/011_test_results.sql). */
typedef struct {
    double test_bpb;    /* NAN: not measured; reason says why */
    int64_t tokens;     /* target tokens counted */
    double seconds;     /* the evaluation's time */
    const char *reason; /* borrowed; NULL when measured */
} store_test_t;

/* Record the test figure of a running experiment, replacing one an earlier
 * line of the same attempt wrote. An experiment that is not running is an
 * error. A re-queued experiment loses it (store_recover, store_interrupt). */
int store_set_test(store_t *s, int64_t id, const store_test_t *t, char *err, size_t errlen);

/* Append metrics rows for one experiment in one transaction. A step already
 * stored is skipped, so a replayed batch adds nothing. */
int store_add_metrics(store_t *s, int64_t id, const store_metric_t *m, size_t n, char *err,
                      size_t errlen);

/* Cancel a queued experiment: returns 1 if it was queued (now cancelled), 0
 * if it is not queued (the caller cancels a running one through its worker),
 * NS_ERR_NOT_FOUND for an unknown id, -1 on a database error (err says
 * which). */
int store_cancel_queued(store_t *s, int64_t id, char *err, size_t errlen);

/* At startup: every experiment still `running` on this machine (its
 * executor local, or none recorded) was interrupted by a daemon crash. If its
 * attempt < max_attempts it is re-queued with attempt + 1 (its reason says
 * which attempt was interrupted; its metrics are cleared, the next attempt
 * starts at step 0); otherwise it ends as `interrupted`. One running as a
 * Slurm job is left running: the job goes on without a daemon, and one with
 * the Slurm executor re-attaches to it (sched_reattach). Reports how many
 * were requeued / given up (either pointer may be NULL). */
int store_recover(store_t *s, int max_attempts, int *requeued, int *abandoned, char *err,
                  size_t errlen);

/* Mark a running experiment interrupted by a clean daemon shutdown and queue
 * it again (attempt + 1) when attempt < max_attempts, as store_recover does.
 * An experiment that is not running is an error. */
int store_interrupt(store_t *s, int64_t id, int max_attempts, char *err, size_t errlen);

/* Put a running experiment whose worker never started (its run directory
 * could not be written: a full disk; the process could not be made; Slurm
 * refused its submission) back in
 * the queue with its attempt unchanged and reason saying why: no part of it
 * ran, so nothing is charged to it. An experiment that is not running is an
 * error. */
int store_requeue_unstarted(store_t *s, int64_t id, const char *reason, char *err, size_t errlen);

/* Number of queued experiments, or -1 on error. */
int64_t store_queue_depth(store_t *s, char *err, size_t errlen);

/* --- asynchronous successive halving (serve --prune asha, sched.h) --- */

/* A finished run that is due for promotion: the spec it ran, its seed, and
 * its place (full_config_hash points into the struct); release the array
 * with store_asha_due_free. */
typedef struct {
    int64_t id;
    char *spec_json, *name, *tags_json, *source, *via;
    int priority;
    int64_t seed;
    store_scope_t scope; /* the rung it finished at */
    int rung, rungs, eta;
    double full_budget;
    char full_config_hash[SPEC_HASH_HEX];
} store_asha_due_t;

/* Every run that the rule of successive halving promotes and that is not
 * promoted yet: among the finished runs of a rung (same dataset, budget,
 * evaluation, rung and full budget; every final status but cancelled and
 * interrupted, which say nothing about the configuration), ranked by val_bpb
 * with every run that did not succeed last, the first floor(n / eta) that
 * succeeded, are below the top rung and have no promoted_to. Oldest first,
 * into a new array *out of *n (NULL when 0). */
int store_asha_due(store_t *s, store_asha_due_t **out, size_t *n, char *err, size_t errlen);
void store_asha_due_free(store_asha_due_t *d, size_t n);

/* Promote run from: queue e (the next rung's experiment; e->asha set) and
 * record it as from's promoted_to, with by (the experiment whose end the
 * promotion was decided at; 0 = none, at a start) as its promoted_by, in one
 * transaction. Returns 0 with *id the
 * new experiment, 1 when from was promoted already (nothing written), -1 with
 * err. */
int store_asha_promote(store_t *s, int64_t from, int64_t by, const store_new_experiment_t *e,
                       int64_t *id, char *err, size_t errlen);

/* --- queries for the API (each returns a new cJSON tree, or NULL with err) --- */

/* List: status filter (NULL = any), dataset filter (NULL or "" = any), scope filter (NULL =
 * any; else only that scope's experiments, and the dataset filter is its dataset), order "id" |
 * "-id" | "val_bpb" | "created" | "queue" (NULL = "-id"), limit 1..1000, after = id cursor (0 =
 * none): the id of the last item of the previous page, in any order (for val_bpb, created and
 * queue an unknown id gives an empty page). val_bpb order is best first, runs without a result
 * last; queue order is the order store_claim_next takes them in. Each item: id, name, tags,
 * status, reason, source, priority, parent, seed, attempt, created/started/finished (ISO-8601
 * UTC), dataset, budget_kind, budget, eval_tokens, rung (under asha, else null), val_bpb (null
 * unless succeeded), params_total.
 * A bad argument is an error whose message names it ("order: must be one of id, -id, val_bpb,
 * created, queue"). */
cJSON *store_list(store_t *s, const char *status, const char *dataset, const store_scope_t *scope,
                  const char *order, int limit, int64_t after, char *err, size_t errlen);

/* One experiment with its spec (parsed JSON), its rung under serve --prune asha
 * ("asha": {rung, rungs, eta, full_budget, promoted_to (null until promoted),
 * promotions: [{id, rung, promoted_to}], the promotions decided when this run
 * ended: of id to rung as experiment promoted_to}, or null), result object (or null) and, up
 * to max_metrics rows, its metrics ("metrics": [{step, time_s, loss, lr_mult,
 * tok_s}], evenly spaced over the run and always ending with the last step;
 * "metrics_total": how many are stored) into *out, which the caller owns.
 * Returns 0, or with *out NULL and err set: NS_ERR_NOT_FOUND for an unknown
 * id, NS_ERR_NOMEM, or NS_ERR_IO for a database error. */
int store_get(store_t *s, int64_t id, int max_metrics, cJSON **out, char *err, size_t errlen);

/* The default scope, the one rule of every query that names no scope or
 * part of one: what sc gives (dataset "" = any, budget_kind "" = any budget,
 * eval_tokens < 0 = any evaluation) completed from the scope of the run that
 * succeeded most recently among those matching it, else of the experiment
 * submitted most recently among them. Returns 1 (from a result), 2 (from an
 * experiment without one), 0 when no experiment matches (sc unchanged), or
 * -1 with err. */
int store_default_scope(store_t *s, store_scope_t *sc, char *err, size_t errlen);

/* Every scope that has results, the most recent result first, at most limit
 * (1..1000): [{dataset, budget_kind, budget, eval_tokens, runs (succeeded),
 * last_finished, best_id, best_val_bpb (its configuration's mean),
 * best_val_bpb_sd (null with one seed), best_n_seeds}]. A new tree the caller
 * owns, or NULL with err. */
cJSON *store_scopes(store_t *s, int limit, char *err, size_t errlen);

/* The leaderboard view within one scope: one row per configuration (the
 * repeats of a spec with different seeds are one row), best mean val_bpb
 * first, limit 1..1000; each object is keyed by the view's columns: id (the
 * configuration's first run), val_bpb (the mean), val_bpb_sd (sample standard
 * deviation, null with one seed), n_seeds, seeds, best_val_bpb, dataset,
 * budget_kind, budget, the spec columns (ve_layers a name or an array,
 * tie_embeddings a boolean), config_hash, ..., rung (the highest rung any run of
 * the configuration was queued at under asha; null when none was). */
cJSON *store_leaderboard(store_t *s, const store_scope_t *sc, int limit, char *err, size_t errlen);

/* The leaderboard's columns, in order, as an array of strings (a table's
 * header, of no rows too): a new tree the caller owns, NULL when out of memory. */
cJSON *store_leaderboard_columns(store_t *s);

/* The best configuration of a scope: store_get's object (without metrics) of
 * its first run, with its full spec and result, plus mean_val_bpb,
 * val_bpb_sd, n_seeds and seeds; a JSON null when nothing in the scope has
 * succeeded yet. */
cJSON *store_best_in(store_t *s, const store_scope_t *sc, char *err, size_t errlen);

/* The scope of the most recently finished experiment (the one an agent is
 * working in) into sc: returns 1, 0 when nothing has finished, -1 with err. */
int store_last_scope(store_t *s, store_scope_t *sc, char *err, size_t errlen);

/* How many experiments this store has finished (store_finish commits) since it
 * was opened: results, the leaderboard, best and noise change only when it
 * moves, so a reader may cache their answers against it. */
uint64_t store_finishes(const store_t *s);

/* --- the totals of GET /metrics (daemon/serve/metrics.c) --- */

#define STORE_N_STATUSES 11 /* the statuses above */

/* The status of index i (0 .. STORE_N_STATUSES - 1: queued, running, then
 * the final ones in the order above), or NULL; static. */
const char *store_status_name(int i);

typedef struct {
    int64_t by_status[STORE_N_STATUSES]; /* experiments per status (store_status_name) */
    double tokens_trained;       /* sum of the results' total_tokens (runs that reported one) */
    double seconds_trained;      /* sum of the results' training_seconds */
    int64_t db_bytes, wal_bytes; /* the database file and its WAL (0 when absent) */
} store_totals_t;

/* The store's totals into t: a dozen rows of running totals that triggers
 * keep (schema/015_totals.sql), and two stat(2) calls. Returns 0, or -1
 * with err. */
int store_totals(store_t *s, store_totals_t *t, char *err, size_t errlen);

/* --- what a night did (daemon/serve/report.c) --- */

/* Every experiment of a scope, by id: [{id, name, status, reason, parent,
 * seed, config_hash, started, finished, started_s, finished_s (the same
 * times in seconds since the epoch; null when not yet), val_bpb (null unless
 * succeeded)}].
 * A new tree the caller owns, or NULL with err. */
cJSON *store_scope_runs(store_t *s, const store_scope_t *sc, char *err, size_t errlen);

/* Every configuration of a scope with a succeeded run, best mean first:
 * [{config_hash, id (its first run), name, n_seeds, val_bpb (the mean),
 * val_bpb_sd (null with one seed), spec (its first run's, parsed)}]. A new
 * tree the caller owns, or NULL with err. */
cJSON *store_scope_configs(store_t *s, const store_scope_t *sc, char *err, size_t errlen);

/* The sealed test figure of one configuration (config_hash) of a scope, over
 * its succeeded runs: {test_bpb (their mean, null when none was measured),
 * test_bpb_sd (null under two), test_n (runs measured), runs (succeeded),
 * test_reason (why test_bpb is null, else null)}. Read only for answers
 * that report a night's outcome (best, the report), never to rank. A new
 * object the caller owns, or NULL with err. */
cJSON *store_test_of(store_t *s, const store_scope_t *sc, const char *config_hash, char *err,
                     size_t errlen);

/* The measured seed-to-seed noise of a scope: the pooled within-configuration
 * sample standard deviation of val_bpb over the configurations with at least
 * two succeeded seeds, s = sqrt(sum_c sum_i (v_ci - mean_c)^2 / sum_c (n_c - 1)).
 * A new object {dataset, budget_kind, budget, eval_tokens, sd (null when no
 * configuration has two seeds), configurations, runs, df}. */
cJSON *store_noise(store_t *s, const store_scope_t *sc, char *err, size_t errlen);

/* Pruning. The loss of a run at progress p is the mean of its recorded
 * training losses with progress in [p - window, p]. store_prune_losses gives
 * that loss for each of the last max_runs succeeded runs of the scope that
 * have rows in the window, ascending, as a malloc'd array (*out, caller frees;
 * NULL when *n is 0). store_run_loss gives it for one run (*n rows; *loss is
 * meaningful only when *n > 0). */
int store_prune_losses(store_t *s, const store_scope_t *sc, double p, double window, int max_runs,
                       double **out, size_t *n, char *err, size_t errlen);
int store_run_loss(store_t *s, int64_t id, double p, double window, double *loss, int64_t *n,
                   char *err, size_t errlen);

/* --- the agent hook (daemon/hook/hook.c) --- */

/* The last n (1..1000) finished experiments (any final status), the most
 * recently finished first: [{id, name, status, reason, val_bpb (null unless
 * succeeded), spec}]. A new tree the caller owns, or NULL with err. */
cJSON *store_recent(store_t *s, int n, char *err, size_t errlen);

/* One attempt to deliver a hook event. Strings are borrowed for the call. */
typedef struct {
    const char *event_id;   /* "evt_<32 hex>", the same on every retry */
    const char *event_type; /* "experiment.finished", "queue.empty", "experiment.rejected" */
    int attempt;            /* 1, 2, ... */
    int http_status;        /* 0 = no response (stored as NULL) */
    int64_t latency_ms;
    const char *error; /* NULL when the agent answered 2xx */
} store_hook_delivery_t;

/* Record one attempt as a hook_deliveries row (created = now). */
int store_add_hook_delivery(store_t *s, const store_hook_delivery_t *d, char *err, size_t errlen);

/* --- the event log (schema/006_events.sql; the feed is described in
 * daemon/serve/events.h, the webhook in daemon/hook/hook.h) --- */

/* The event types the daemon writes (the first by the store's trigger). */
#define STORE_EVENT_FINISHED "experiment.finished"
#define STORE_EVENT_EMPTY    "queue.empty"
#define STORE_EVENT_REJECTED "experiment.rejected"

/* Append an event; payload_json is a JSON object's text (NULL = {}),
 * experiment_id 0 for none. *id (may be NULL) gets the new id. */
int store_event_add(store_t *s, const char *type, int64_t experiment_id, const char *payload_json,
                    int64_t *id, char *err, size_t errlen);

/* Make sure experiment id has its experiment.finished event (the trigger
 * writes it when the status changes; this covers a caller that announces an
 * experiment some other way). Returns 1 if it was added, 0 if it existed. */
int store_event_ensure_finished(store_t *s, int64_t experiment_id, char *err, size_t errlen);

/* The hook's outbox: pending events with id > after (and, when
 * experiment_id > 0, about that experiment), oldest first, at most limit:
 * [{"id", "type", "webhook_id", "experiment_id" (0 = none), "payload"
 * (object), "body" (the stored webhook body text, or null), "attempts"}]. */
cJSON *store_events_pending(store_t *s, int64_t after, int64_t experiment_id, int limit, char *err,
                            size_t errlen);

/* Store the webhook body built for event id (kept for every later attempt). */
int store_event_set_body(store_t *s, int64_t id, const char *body, char *err, size_t errlen);

/* One more delivery attempt of event id has started. */
int store_event_attempted(store_t *s, int64_t id, char *err, size_t errlen);

/* Event id is "delivered" (delivered = now) or "failed". */
int store_event_mark(store_t *s, int64_t id, const char *state, char *err, size_t errlen);

/* The feed: events with id > after, oldest first, at most limit (1..1000):
 * [{"id", "type", "created", "webhook_id", "state", ...payload}], an
 * experiment in the payload completed with its val_bpb. */
cJSON *store_events(store_t *s, int64_t after, int limit, char *err, size_t errlen);

/* The newest event's id (0 when there is none), or -1 on error. */
int64_t store_events_last_id(store_t *s, char *err, size_t errlen);

/* --- exports (daemon/serve/export.h writes them as tables) --- */

/* Every experiment, read page by page on a read-only connection of the
 * export's own, inside one read transaction: the pages are one snapshot
 * (WAL), whatever the daemon writes meanwhile, and never touch the store's
 * connection, so store_export_page may run on another thread (one call at a
 * time per export) while the loop goes on. Open it on the loop; close it
 * when done (store_export_close; it may outlive nothing but the file). */
typedef struct store_export store_export_t;
int store_export_open(store_t *s, store_export_t **out, char *err, size_t errlen);

/* The next at most n experiments, in the order they finished (unfinished
 * ones last, by id), as a new array of objects: {id, name, status, reason,
 * source, parent, seed, dataset, time_budget_s, eval_tokens, depth, n_embd,
 * n_head, n_kv_head, mlp, window_pattern, ve_layers, seq_len, created,
 * started, finished, val_bpb, params_total, mfu_percent, tokens_per_second,
 * num_steps, training_seconds, peak_rss_mb}, every value as stored
 * (ve_layers a list's JSON text, not an array); empty at the end. NULL with
 * err on failure. */
cJSON *store_export_page(store_export_t *x, int n, char *err, size_t errlen);
void store_export_close(store_export_t *x);

/* The export's keys in order (an array of strings, as
 * store_leaderboard_columns), from the store's own connection. */
cJSON *store_export_columns(store_t *s);

/* The schema after every migration as text (schema/current.sql, daemon/store/
 * schema.c): store_migrations applied to a new database at path, then its
 * CREATE statements, tables, indexes, views and triggers, each kind by name.
 * *out is malloc'd, owned by the caller. */
int store_schema_text(const char *path, char **out, char *err, size_t errlen);

/* `nightshift schema`: that text on stdout, from a database in a temporary
 * directory removed after. */
int store_schema_main(int argc, char **argv);

#endif
