/* store.c - the SQLite store: schema migrations, the experiment queue, results,
 * per-step metrics and the JSON queries behind the HTTP API.
 *
 * A store_t owns one connection (WAL, synchronous=NORMAL, busy_timeout,
 * foreign keys) and every statement it will ever run, prepared once at open
 * from the constant table below and finalized in store_close. Statements are
 * reset and their bindings cleared after every use, so text bound with
 * SQLITE_STATIC only has to outlive the call. Changes of more than one
 * statement run inside BEGIN IMMEDIATE ... COMMIT; a failure rolls back.
 *
 * JSON output is built generically from result columns: a query's column names
 * are its JSON keys, so the shape of each answer is visible in its SQL. */
#include "daemon/store/store.h"

#include <assert.h>
#include <math.h>
#include <openssl/evp.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* Short: the store runs on the daemon's loop, so a lock held by an outside
 * writer (a sqlite3 shell) must not stall it for long. A refused write is
 * retried by the scheduler (endings) or kept for the next batch (metrics). */
#define BUSY_TIMEOUT_MS 200
#define LIST_MAX        1000

/* ---------------------------------------------------------------- statements */

enum {
    ST_BEGIN,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_INSERT,
    ST_FIND_DUP,
    ST_CLAIM,
    ST_SET_PID,
    ST_FINISH,
    ST_INSERT_RESULT,
    ST_STATUS_OF,
    ST_INSERT_METRIC,
    ST_CANCEL,
    ST_REQUEUE_METRICS,
    ST_REQUEUE,
    ST_ABANDON,
    ST_UNSTARTED,
    ST_QUEUE_DEPTH,
    ST_STATUS_COUNTS,
    ST_TRAINED,
    ST_LIST_ID,
    ST_LIST_ID_DESC,
    ST_LIST_CREATED,
    ST_LIST_VAL_BPB,
    ST_LIST_QUEUE,
    ST_GET,
    ST_GET_RESULT,
    ST_GET_METRICS,
    ST_RECENT,
    ST_INSERT_DELIVERY,
    ST_LEADERBOARD_IN,
    ST_BEST_IN,
    ST_LAST_SCOPE,
    ST_LATEST_RESULT_SCOPE,
    ST_LATEST_SCOPE,
    ST_SCOPES,
    ST_NOISE,
    ST_PRUNE_LOSSES,
    ST_RUN_LOSS,
    ST_SET_EXECUTOR,
    ST_RUNNING,
    ST_SET_TEST,
    ST_REQUEUE_TEST,
    ST_SCOPE_RUNS,
    ST_SCOPE_CONFIGS,
    ST_TEST_OF,
    ST_EVENT_ADD,
    ST_EVENT_ENSURE_FINISHED,
    ST_EVENTS_PENDING,
    ST_EVENT_SET_BODY,
    ST_EVENT_ATTEMPTED,
    ST_EVENT_MARK,
    ST_EVENTS_LIST,
    ST_EVENTS_LAST_ID,
    ST_EXPORT,
    ST_ASHA_DUE,
    ST_ASHA_MARK,
    ST_COUNT
};

/* The list queries: ?1 status filter (NULL = any), ?2 cursor id (0 = none),
 * ?3 limit, ?4 dataset filter (NULL = any), ?5-?7 the budget and evaluation
 * of a scope filter (?5 NULL = any). val_bpb is only reported for succeeded
 * runs; in val_bpb order the others sort last (as +Inf, 9e999). For the
 * created, val_bpb and queue orders the cursor is the key and id of the row
 * with id ?2; an unknown id yields no rows. */
#define LIST_SELECT                                                                                \
    "WITH x AS (SELECT e.id AS id, e.name AS name, e.tags AS tags, e.status AS status,"            \
    " e.reason AS reason, e.source AS source, e.via AS via, e.priority AS priority,"               \
    " e.parent AS parent,"                                                                         \
    " e.seed AS seed, e.attempt AS attempt, e.created AS created, e.started AS started,"           \
    " e.finished AS finished, e.dataset AS dataset, e.budget_kind AS budget_kind,"                 \
    " e.budget AS budget, e.eval_tokens AS eval_tokens, e.rung AS rung,"                           \
    " CASE WHEN e.status = 'succeeded' THEN r.val_bpb END AS val_bpb,"                             \
    " r.params_total AS params_total, r.slowdown AS slowdown"                                      \
    " FROM experiments e LEFT JOIN results r ON r.experiment_id = e.id)"                           \
    " SELECT * FROM x WHERE (?1 IS NULL OR status = ?1) AND (?4 IS NULL OR dataset = ?4) AND"      \
    " (?5 IS NULL OR (budget_kind = ?5 AND budget = ?6 AND eval_tokens = ?7)) AND "

/* The order the queue is taken in (store_claim_next), as a sort key. */
#define QUEUE_KEY "-priority, -coalesce(rung, 0), source = 'agent', id"

/* The running experiments to requeue or give up on: ?2 one id, or 0 for
 * every one a local daemon's crash interrupted (a Slurm job runs on without
 * the daemon: a daemon with the Slurm executor re-attaches to it). ?1 is
 * max_attempts; ?3 the finished time of those given up. */
#define RUNNING_MATCH                                                                              \
    "status = 'running' AND (id = ?2 OR (?2 = 0 AND coalesce(executor, 'local') != 'slurm'))"

static const char *const stmt_sql[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_INSERT] = "INSERT INTO experiments (name, tags, spec, config_hash, seed, parent, source,"
                  " priority, created, dataset, budget_kind, budget, eval_tokens, via, rung,"
                  " rungs, eta, full_budget, full_config_hash)"
                  " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15,"
                  " ?16, ?17, ?18, ?19)",
    /* The one the user most likely wants back: a result first, then a live one. */
    [ST_FIND_DUP] = "SELECT id FROM experiments WHERE config_hash = ?1 AND seed = ?2"
                    " AND eval_tokens = ?3 AND status IN ('succeeded', 'running', 'queued',"
                    " 'timeout') ORDER BY CASE status WHEN 'succeeded' THEN 0 WHEN 'running'"
                    " THEN 1 WHEN 'queued' THEN 2 ELSE 3 END, id LIMIT 1",
    [ST_CLAIM] = "UPDATE experiments SET status = 'running', pid = 0, started = ?1,"
                 " finished = NULL, reason = NULL, exit_code = NULL, term_signal = NULL"
                 " WHERE id = (SELECT id FROM experiments WHERE status = 'queued'"
                 " ORDER BY priority DESC, coalesce(rung, 0) DESC, source = 'agent', id"
                 " LIMIT 1)"
                 " RETURNING id, name, spec, attempt, dataset, budget_kind, budget, eval_tokens",
    [ST_SET_PID] = "UPDATE experiments SET pid = ?2 WHERE id = ?1 AND status = 'running'",
    [ST_FINISH] = "UPDATE experiments SET status = ?2, reason = ?3, exit_code = ?4,"
                  " term_signal = ?5, finished = ?6 WHERE id = ?1 AND status = 'running'",
    [ST_INSERT_RESULT] = "INSERT INTO results (experiment_id" RESULT_SQL_COLUMNS
                         ") VALUES (?" RESULT_SQL_PLACEHOLDERS ")",
    [ST_STATUS_OF] = "SELECT status FROM experiments WHERE id = ?1",
    [ST_INSERT_METRIC] = "INSERT INTO metrics (experiment_id, step, time_s, loss, lr_mult, tok_s,"
                         " progress) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
                         " ON CONFLICT (experiment_id, step) DO NOTHING",
    [ST_CANCEL] = "UPDATE experiments SET status = 'cancelled', reason = 'cancelled while queued',"
                  " finished = ?2 WHERE id = ?1 AND status = 'queued'",
    /* A requeued experiment starts again from step 0: its old metrics go. */
    [ST_REQUEUE_METRICS] = "DELETE FROM metrics WHERE experiment_id IN (SELECT id FROM experiments"
                           " WHERE " RUNNING_MATCH " AND attempt < ?1)",
    [ST_REQUEUE] = "UPDATE experiments SET status = 'queued', attempt = attempt + 1, pid = NULL,"
                   " started = NULL, reason = 'the daemon stopped during attempt ' || attempt"
                   " || '; requeued' WHERE " RUNNING_MATCH " AND attempt < ?1",
    [ST_ABANDON] = "UPDATE experiments SET status = 'interrupted', finished = ?3,"
                   " reason = 'the daemon stopped during attempt ' || attempt"
                   " || '; not requeued (at most ' || ?1 || ' attempts)'"
                   " WHERE " RUNNING_MATCH,
    [ST_UNSTARTED] = "UPDATE experiments SET status = 'queued', pid = NULL, started = NULL,"
                     " reason = ?2 WHERE id = ?1 AND status = 'running'",
    [ST_QUEUE_DEPTH] = "SELECT count(*) FROM experiments WHERE status = 'queued'",
    /* store_totals: the running totals kept by triggers (schema/015_totals.sql) */
    [ST_STATUS_COUNTS] = "SELECT status, n FROM status_counts",
    [ST_TRAINED] = "SELECT tokens, seconds FROM trained_totals",
    [ST_LIST_ID] = LIST_SELECT "(?2 = 0 OR id > ?2) ORDER BY id LIMIT ?3",
    [ST_LIST_ID_DESC] = LIST_SELECT "(?2 = 0 OR id < ?2) ORDER BY id DESC LIMIT ?3",
    [ST_LIST_CREATED] = LIST_SELECT "(?2 = 0 OR (created, id) > (SELECT created, id"
                                    " FROM experiments WHERE id = ?2))"
                                    " ORDER BY created, id LIMIT ?3",
    [ST_LIST_VAL_BPB] =
        LIST_SELECT "(?2 = 0 OR (ifnull(val_bpb, 9e999), id) > (SELECT ifnull(CASE WHEN"
                    " e.status = 'succeeded' THEN r.val_bpb END, 9e999), e.id"
                    " FROM experiments e LEFT JOIN results r ON r.experiment_id = e.id"
                    " WHERE e.id = ?2)) ORDER BY ifnull(val_bpb, 9e999), id LIMIT ?3",
    [ST_LIST_QUEUE] =
        LIST_SELECT "(?2 = 0 OR (" QUEUE_KEY ") > (SELECT " QUEUE_KEY
                    " FROM experiments WHERE id = ?2)) ORDER BY " QUEUE_KEY " LIMIT ?3",
    [ST_GET] =
        "SELECT id, name, tags, status, reason, source, via, priority, parent, seed, attempt,"
        " config_hash, created, started, finished, pid, exit_code, term_signal, spec,"
        " rung, rungs, eta, full_budget, promoted_to, (SELECT json_group_array("
        "json_object('id', p.id, 'rung', p.rung + 1, 'promoted_to', p.promoted_to))"
        " FROM experiments p WHERE p.promoted_by = experiments.id) AS promotions"
        " FROM experiments WHERE id = ?1",
    [ST_GET_RESULT] = "SELECT * FROM results WHERE experiment_id = ?1",
    /* At most ?2 rows evenly spaced over the run, always ending with the last
     * step; column 5 is the total number of rows. */
    [ST_GET_METRICS] = "SELECT step, time_s, loss, lr_mult, tok_s, n FROM (SELECT *,"
                       " row_number() OVER (ORDER BY step) AS rn, count(*) OVER () AS n"
                       " FROM metrics WHERE experiment_id = ?1)"
                       " WHERE (n - rn) % ((n + ?2 - 1) / ?2) = 0 ORDER BY step",
    /* The agent hook's history: finished runs, the most recent first. */
    [ST_RECENT] = "SELECT e.id AS id, e.name AS name, e.status AS status, e.reason AS reason,"
                  " CASE WHEN e.status = 'succeeded' THEN r.val_bpb END AS val_bpb,"
                  " e.spec AS spec FROM experiments e"
                  " LEFT JOIN results r ON r.experiment_id = e.id"
                  " WHERE e.status NOT IN ('queued', 'running')"
                  " ORDER BY e.finished DESC, e.id DESC LIMIT ?1",
    [ST_INSERT_DELIVERY] = "INSERT INTO hook_deliveries (event_id, event_type, attempt,"
                           " http_status, latency_ms, error, created)"
                           " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    /* One scope: ?1 dataset, ?2 budget_kind, ?3 budget, ?4 eval_tokens. */
    [ST_LEADERBOARD_IN] = "SELECT * FROM leaderboard WHERE dataset = ?1 AND budget_kind = ?2"
                          " AND budget = ?3 AND eval_tokens = ?4 LIMIT ?5",
    [ST_BEST_IN] = "SELECT id, val_bpb, val_bpb_sd, n_seeds, seeds FROM leaderboard"
                   " WHERE dataset = ?1 AND budget_kind = ?2 AND budget = ?3"
                   " AND eval_tokens = ?4 LIMIT 1",
    /* The scope the last finished experiment ran in (the hook's best). */
    [ST_LAST_SCOPE] = "SELECT dataset, budget_kind, budget, eval_tokens FROM experiments"
                      " WHERE status NOT IN ('queued', 'running')"
                      " ORDER BY finished DESC, id DESC LIMIT 1",
    /* The default scope (store_default_scope): what ?1-?4 give (NULL = any),
     * from the latest result, else from the latest experiment. */
    [ST_LATEST_RESULT_SCOPE] = "SELECT dataset, budget_kind, budget, eval_tokens FROM scopes"
                               " WHERE (?1 IS NULL OR dataset = ?1) AND (?2 IS NULL OR"
                               " (budget_kind = ?2 AND budget = ?3)) AND (?4 IS NULL OR"
                               " eval_tokens = ?4) ORDER BY last_finished DESC LIMIT 1",
    [ST_LATEST_SCOPE] = "SELECT dataset, budget_kind, budget, eval_tokens FROM experiments"
                        " WHERE (?1 IS NULL OR dataset = ?1) AND (?2 IS NULL OR"
                        " (budget_kind = ?2 AND budget = ?3)) AND (?4 IS NULL OR"
                        " eval_tokens = ?4) ORDER BY id DESC LIMIT 1",
    /* Every scope with results and its best configuration (the first row of
     * configs_rank), the latest result first. */
    [ST_SCOPES] = "WITH b AS (SELECT s.*, (SELECT c.config_hash FROM configs c"
                  " WHERE c.dataset = s.dataset AND c.budget_kind = s.budget_kind"
                  " AND c.budget = s.budget AND c.eval_tokens = s.eval_tokens"
                  " ORDER BY c.mean, c.first_id LIMIT 1) AS h FROM scopes s WHERE s.succeeded > 0"
                  " ORDER BY s.last_finished DESC LIMIT ?1)"
                  " SELECT b.dataset, b.budget_kind, b.budget, b.eval_tokens, b.succeeded AS runs,"
                  " b.last_finished, c.first_id AS best_id, c.mean AS best_val_bpb,"
                  " CASE WHEN c.n > 1 THEN sqrt(max(0.0, (c.sumsq - c.sum * c.sum / c.n)"
                  " / (c.n - 1))) END AS best_val_bpb_sd, c.n AS best_n_seeds"
                  " FROM b JOIN configs c ON c.dataset = b.dataset AND c.budget_kind ="
                  " b.budget_kind AND c.budget = b.budget AND c.eval_tokens = b.eval_tokens"
                  " AND c.config_hash = b.h ORDER BY b.last_finished DESC",
    /* Pooled within-configuration variance over the configurations with at
     * least two succeeded seeds, kept per scope (schema 008): their count,
     * runs, degrees of freedom (sum of n - 1) and squared deviations from
     * their means. */
    [ST_NOISE] = "SELECT configs2, runs2, df, ss FROM scopes"
                 " WHERE dataset = ?1 AND budget_kind = ?2 AND budget = ?3 AND eval_tokens = ?4",
    /* For pruning: the mean training loss of each of the last ?7 succeeded
     * runs in the scope over the progress window [?5 - ?6, ?5], best first. */
    [ST_PRUNE_LOSSES] = "SELECT avg(m.loss) AS loss FROM metrics m WHERE m.experiment_id IN"
                        " (SELECT id FROM experiments WHERE dataset = ?1 AND budget_kind = ?2"
                        " AND budget = ?3 AND eval_tokens = ?4 AND status = 'succeeded'"
                        " ORDER BY id DESC LIMIT ?7)"
                        " AND m.progress BETWEEN ?5 - ?6 AND ?5 AND m.loss IS NOT NULL"
                        " GROUP BY m.experiment_id ORDER BY loss",
    /* The same window of one run: mean loss and rows. */
    [ST_RUN_LOSS] = "SELECT avg(loss), count(loss) FROM metrics WHERE experiment_id = ?1"
                    " AND progress BETWEEN ?2 - ?3 AND ?2",
    [ST_SET_EXECUTOR] = "UPDATE experiments SET executor = ?2, slurm_job_id = ?3"
                        " WHERE id = ?1 AND status = 'running'",
    [ST_RUNNING] = "SELECT id, name, spec, attempt, executor, slurm_job_id FROM experiments"
                   " WHERE status = 'running' ORDER BY id",
    /* The sealed test figure (schema 010): written for a running experiment,
     * read back only by ST_TEST_OF. */
    [ST_SET_TEST] = "INSERT OR REPLACE INTO test_results (experiment_id, test_bpb, tokens,"
                    " seconds, reason, measured) SELECT id, ?2, ?3, ?4, ?5, ?6 FROM experiments"
                    " WHERE id = ?1 AND status = 'running'",
    [ST_REQUEUE_TEST] = "DELETE FROM test_results WHERE experiment_id IN (SELECT id FROM"
                        " experiments WHERE " RUNNING_MATCH " AND attempt < ?1)",
    /* One scope: ?1 dataset, ?2 budget_kind, ?3 budget. */
    [ST_SCOPE_RUNS] = "SELECT e.id AS id, e.name AS name, e.status AS status, e.reason AS reason,"
                      " e.parent AS parent, e.seed AS seed, e.config_hash AS config_hash,"
                      " e.started AS started, e.finished AS finished,"
                      " (julianday(e.started) - 2440587.5) * 86400.0 AS started_s,"
                      " (julianday(e.finished) - 2440587.5) * 86400.0 AS finished_s,"
                      " CASE WHEN e.status = 'succeeded' THEN r.val_bpb END AS val_bpb,"
                      " r.slowdown AS slowdown, r.slowdown_cost_bpb AS slowdown_cost_bpb,"
                      " r.cpu_share AS cpu_share, r.others_cpu_share AS others_cpu_share"
                      " FROM experiments e LEFT JOIN results r ON r.experiment_id = e.id"
                      " WHERE e.dataset = ?1 AND e.budget_kind = ?2 AND e.budget = ?3"
                      " AND e.eval_tokens = ?4 ORDER BY e.id",
    [ST_SCOPE_CONFIGS] = "SELECT c.config_hash AS config_hash, c.first_id AS id, e.name AS name,"
                         " c.n AS n_seeds, c.mean AS val_bpb,"
                         " CASE WHEN c.n > 1 THEN sqrt(max(0.0, (c.sumsq - c.sum * c.sum / c.n)"
                         " / (c.n - 1))) END AS val_bpb_sd, e.spec AS spec"
                         " FROM configs c JOIN experiments e ON e.id = c.first_id"
                         " WHERE c.dataset = ?1 AND c.budget_kind = ?2 AND c.budget = ?3"
                         " AND c.eval_tokens = ?4 ORDER BY c.mean, c.first_id",
    /* ?5 config_hash. A run without a row predates test figures. */
    [ST_TEST_OF] = "SELECT avg(t.test_bpb) AS test_bpb,"
                   " CASE WHEN count(t.test_bpb) > 1 THEN sqrt(max(0.0, (sum(t.test_bpb *"
                   " t.test_bpb) - count(t.test_bpb) * avg(t.test_bpb) * avg(t.test_bpb))"
                   " / (count(t.test_bpb) - 1))) END AS test_bpb_sd,"
                   " count(t.test_bpb) AS test_n, count(*) AS runs,"
                   " CASE WHEN count(t.test_bpb) = 0 THEN ifnull(max(t.reason), 'not measured:"
                   " the runs finished before the daemon kept test figures') END AS test_reason"
                   " FROM experiments e LEFT JOIN test_results t ON t.experiment_id = e.id"
                   " WHERE e.dataset = ?1 AND e.budget_kind = ?2 AND e.budget = ?3"
                   " AND e.eval_tokens = ?4 AND e.config_hash = ?5 AND e.status = 'succeeded'",
    /* The event log (schema/006_events.sql). */
    [ST_EVENT_ADD] = "INSERT INTO events (type, experiment_id, payload)"
                     " VALUES (?1, ?2, coalesce(?3, '{}'))",
    /* The payload as the trigger writes it (schema/006_events.sql). */
    [ST_EVENT_ENSURE_FINISHED] =
        "INSERT INTO events (type, experiment_id, payload)"
        " SELECT 'experiment.finished', e.id, json_object('experiment', json_object('id', e.id,"
        " 'name', e.name, 'status', e.status, 'reason', e.reason))"
        " FROM experiments e WHERE e.id = ?1 AND NOT EXISTS (SELECT 1 FROM events"
        " WHERE experiment_id = ?1 AND type = 'experiment.finished')",
    [ST_EVENTS_PENDING] = "SELECT id, type, webhook_id, coalesce(experiment_id, 0), payload,"
                          " body, attempts FROM events WHERE state = 'pending' AND id > ?1"
                          " AND (?3 = 0 OR experiment_id = ?3) ORDER BY id LIMIT ?2",
    [ST_EVENT_SET_BODY] = "UPDATE events SET body = ?2 WHERE id = ?1",
    [ST_EVENT_ATTEMPTED] = "UPDATE events SET attempts = attempts + 1 WHERE id = ?1",
    [ST_EVENT_MARK] = "UPDATE events SET state = ?2, delivered = CASE WHEN ?2 ="
                      " 'delivered' THEN strftime('%Y-%m-%dT%H:%M:%fZ', 'now') END"
                      " WHERE id = ?1",
    [ST_EVENTS_LIST] = "SELECT v.id, v.type, v.created, v.webhook_id, v.state, v.payload,"
                       " r.val_bpb, v.experiment_id FROM events v LEFT JOIN results r"
                       " ON r.experiment_id = v.experiment_id WHERE v.id > ?1"
                       " ORDER BY v.id LIMIT ?2",
    [ST_EVENTS_LAST_ID] = "SELECT coalesce(max(id), 0) FROM events",
    /* Every experiment with its key spec fields and result, oldest first. */
    [ST_EXPORT] = "SELECT e.id, e.name, e.status, e.reason, e.source, e.parent, e.seed,"
                  " json_extract(e.spec, '$.dataset') AS dataset,"
                  " json_extract(e.spec, '$.time_budget_s') AS time_budget_s, e.eval_tokens,"
                  " json_extract(e.spec, '$.model.depth') AS depth,"
                  " json_extract(e.spec, '$.model.n_embd') AS n_embd,"
                  " json_extract(e.spec, '$.model.n_head') AS n_head,"
                  " json_extract(e.spec, '$.model.n_kv_head') AS n_kv_head,"
                  " json_extract(e.spec, '$.model.mlp') AS mlp,"
                  " json_extract(e.spec, '$.model.window_pattern') AS window_pattern,"
                  " json_extract(e.spec, '$.model.ve_layers') AS ve_layers,"
                  " json_extract(e.spec, '$.model.seq_len') AS seq_len,"
                  " e.created, e.started, e.finished, r.val_bpb, r.params_total, r.mfu_percent,"
                  " r.tokens_per_second, r.num_steps, r.training_seconds, r.peak_rss_mb"
                  " FROM experiments e LEFT JOIN results r ON r.experiment_id = e.id"
                  " ORDER BY e.finished IS NULL, e.finished, e.id",
    /* Successive halving (store_asha_due): the finished runs of each rung
     * ranked (val_bpb, the others last as +Inf), the first floor(n / eta)
     * that succeeded and are not promoted yet, below the top rung. */
    [ST_ASHA_DUE] =
        "WITH f AS (SELECT e.id, e.dataset, e.budget_kind, e.budget, e.eval_tokens, e.rung,"
        " e.rungs, e.eta, e.full_budget, e.promoted_to,"
        " CASE WHEN e.status = 'succeeded' THEN r.val_bpb END AS v"
        " FROM experiments e LEFT JOIN results r ON r.experiment_id = e.id"
        " WHERE e.rung IS NOT NULL AND e.status NOT IN ('queued', 'running', 'cancelled',"
        " 'interrupted')),"
        " k AS (SELECT *, row_number() OVER w AS pos, count(*) OVER p AS n FROM f"
        " WINDOW p AS (PARTITION BY dataset, budget_kind, budget, eval_tokens, rung,"
        " full_budget), w AS (p ORDER BY v IS NULL, v, id))"
        " SELECT e.id, e.spec, e.name, e.tags, e.source, e.priority, e.seed, e.dataset,"
        " e.budget_kind, e.budget, e.eval_tokens, e.rung, e.rungs, e.eta, e.full_budget,"
        " e.full_config_hash, e.via FROM k JOIN experiments e ON e.id = k.id"
        " WHERE k.v IS NOT NULL AND k.promoted_to IS NULL AND k.rung < k.rungs - 1"
        " AND k.pos <= k.n / k.eta ORDER BY e.id",
    [ST_ASHA_MARK] = "UPDATE experiments SET promoted_to = ?2, promoted_by = ?3 WHERE id = ?1"
                     " AND promoted_to IS NULL",
};

struct store {
    sqlite3 *db;
    int wal_lost;                  /* the WAL went from its path under the connection (wal_hook) */
    struct stat db_file, wal_file; /* what the connection opened (st_ino 0: not known) */
    char *path;                    /* the database file, for connections of their own (exports) */
    sqlite3_stmt *st[ST_COUNT];
    uint64_t finishes; /* store_finish commits on this connection */
    int readonly;      /* store_open_reader's and store_open_readonly's: SQLITE_OPEN_READONLY */
};

/* The live statuses first; from index 2 on, the final ones. */
static const char *const statuses[] = {
    STORE_QUEUED, STORE_RUNNING,  STORE_SUCCEEDED, STORE_FAILED,      STORE_CRASHED, STORE_TIMEOUT,
    STORE_OOM,    STORE_DIVERGED, STORE_CANCELLED, STORE_INTERRUPTED, STORE_PRUNED,
};
#define N_STATUSES (sizeof statuses / sizeof statuses[0])
_Static_assert(N_STATUSES == STORE_N_STATUSES, "store.h's STORE_N_STATUSES");

/* ------------------------------------------------------------------- helpers */

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Write the message into err; always returns -1. */
static int fail(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* "store: <op>: <sqlite's message>"; always returns -1. */
static int fail_db(sqlite3 *db, char *err, size_t errlen, const char *op) {
    return fail(err, errlen, "store: %s: %s", op, sqlite3_errmsg(db));
}

static void reset(sqlite3_stmt *st) {
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
}

/* Run a statement that returns no rows to completion, then reset it. A
 * statement is always reset after use: one still stepping here would be
 * another call's, cut off in the middle. */
static int run(store_t *s, int which, const char *op, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[which];
    assert(!sqlite3_stmt_busy(st));
    int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE) fail_db(s->db, err, errlen, op);
    reset(st);
    return rc == SQLITE_DONE ? 0 : -1;
}

/* Every change of more than one statement is one transaction, never nested. */
static int begin(store_t *s, char *err, size_t errlen) {
    assert(sqlite3_get_autocommit(s->db));
    return run(s, ST_BEGIN, "begin", err, errlen);
}

static int commit(store_t *s, char *err, size_t errlen) {
    return run(s, ST_COMMIT, "commit", err, errlen);
}

/* Roll back the open transaction, if any (a failed COMMIT may have ended it). */
static void rollback(store_t *s) {
    if (sqlite3_get_autocommit(s->db)) return;
    sqlite3_step(s->st[ST_ROLLBACK]);
    reset(s->st[ST_ROLLBACK]);
}

/* Bind text borrowed for the call, or NULL. */
static int bind_text(sqlite3_stmt *st, int i, const char *v) {
    return v ? sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC) : sqlite3_bind_null(st, i);
}

static char *dup_column(sqlite3_stmt *st, int i) {
    const char *t = (const char *)sqlite3_column_text(st, i);
    return t ? strdup(t) : NULL;
}

/* Columns i..i+3 of the current row (dataset, budget_kind, budget,
 * eval_tokens) into sc. */
static void column_scope(sqlite3_stmt *st, int i, store_scope_t *sc) {
    const char *ds = (const char *)sqlite3_column_text(st, i);
    const char *kind = (const char *)sqlite3_column_text(st, i + 1);
    memset(sc, 0, sizeof *sc);
    snprintf(sc->dataset, sizeof sc->dataset, "%s", ds ? ds : "");
    snprintf(sc->budget_kind, sizeof sc->budget_kind, "%s", kind ? kind : "");
    sc->budget = sqlite3_column_double(st, i + 2);
    sc->eval_tokens = sqlite3_column_int64(st, i + 3);
}

static bool is_terminal(const char *status) {
    for (size_t i = 2; i < N_STATUSES; i++)
        if (!strcmp(status, statuses[i])) return true;
    return false;
}

static bool is_status(const char *status) {
    for (size_t i = 0; i < N_STATUSES; i++)
        if (!strcmp(status, statuses[i])) return true;
    return false;
}

void store_format_time(int64_t unix_ms, char *buf, size_t len) {
    int64_t secs = unix_ms / 1000, ms = unix_ms % 1000;
    if (ms < 0) ms += 1000, secs -= 1;
    time_t t = (time_t)secs;
    struct tm tm;
    if (!gmtime_r(&t, &tm)) memset(&tm, 0, sizeof tm);
    /* The modulos only bound the widths for gcc's truncation check. */
    snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", (tm.tm_year + 1900) % 10000,
             (tm.tm_mon + 1) % 100, tm.tm_mday % 100, tm.tm_hour % 100, tm.tm_min % 100,
             tm.tm_sec % 100, (int)ms);
}

static void now_iso(char buf[STORE_TIME_LEN]) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    store_format_time((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000, buf, STORE_TIME_LEN);
}

/* ---------------------------------------------------------------- JSON rows */

/* Columns holding JSON text that is returned parsed. */
static bool is_json_column(const char *name) {
    return !strcmp(name, "tags") || !strcmp(name, "spec") || !strcmp(name, "ve_layers") ||
           !strcmp(name, "seeds") || !strcmp(name, "promotions");
}

/* How a row becomes JSON: ROW_TYPED parses the JSON text columns and makes
 * tie_embeddings (json_extract gives 0/1) a boolean; ROW_RAW keeps every
 * text as a string and every number as a number (the export's tables). */
typedef enum { ROW_TYPED, ROW_RAW } row_mode;

/* Column i of the current row as a new cJSON value (the caller owns it), or
 * NULL when out of memory. NULL is null, numbers are numbers, and text is a
 * string unless mode says otherwise. */
static cJSON *column_json(sqlite3_stmt *st, int i, row_mode mode) {
    const char *name = mode == ROW_TYPED ? sqlite3_column_name(st, i) : NULL;
    switch (sqlite3_column_type(st, i)) {
    case SQLITE_NULL:
        return cJSON_CreateNull();
    case SQLITE_INTEGER: {
        sqlite3_int64 v = sqlite3_column_int64(st, i);
        if (name && !strcmp(name, "tie_embeddings")) return cJSON_CreateBool(v != 0);
        return cJSON_CreateNumber((double)v);
    }
    case SQLITE_FLOAT:
        return cJSON_CreateNumber(sqlite3_column_double(st, i));
    default: {
        const char *t = (const char *)sqlite3_column_text(st, i);
        if (!t) return NULL;
        if (name && is_json_column(name) && (t[0] == '[' || t[0] == '{')) {
            cJSON *j = cJSON_Parse(t);
            if (j) return j;
        }
        return cJSON_CreateString(t);
    }
    }
}

/* Columns [from, to) of the current row as a new object keyed by column name
 * (the caller owns it), or NULL when out of memory. */
static cJSON *row_object(sqlite3_stmt *st, int from, int to, row_mode mode) {
    cJSON *o = cJSON_CreateObject();
    for (int i = from; o && i < to; i++) {
        cJSON *v = column_json(st, i, mode);
        if (!v || !cJSON_AddItemToObject(o, sqlite3_column_name(st, i), v)) {
            cJSON_Delete(v);
            cJSON_Delete(o);
            o = NULL;
        }
    }
    return o;
}

/* Every remaining row of st as an array of objects; st is reset either way.
 * The caller owns the array; NULL with err on failure. */
static cJSON *rows_array_as(store_t *s, sqlite3_stmt *st, row_mode mode, const char *op, char *err,
                            size_t errlen) {
    cJSON *arr = cJSON_CreateArray();
    if (!arr) goto oom;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        cJSON *o = row_object(st, 0, sqlite3_column_count(st), mode);
        if (!o || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            goto oom;
        }
    }
    if (rc != SQLITE_DONE) {
        fail_db(s->db, err, errlen, op);
        goto fail;
    }
    reset(st);
    return arr;
oom:
    fail(err, errlen, "store: %s: out of memory", op);
fail:
    reset(st);
    cJSON_Delete(arr);
    return NULL;
}

static cJSON *rows_array(store_t *s, sqlite3_stmt *st, const char *op, char *err, size_t errlen) {
    return rows_array_as(s, st, ROW_TYPED, op, err, errlen);
}

/* ---------------------------------------------------------------- migrations */

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static int user_version(sqlite3 *db, int *v, char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK ||
        sqlite3_step(st) != SQLITE_ROW) {
        fail_db(db, err, errlen, "reading user_version");
        sqlite3_finalize(st);
        return -1;
    }
    *v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return 0;
}

static int exec_sql(sqlite3 *db, const char *sql, const char *op, char *err, size_t errlen) {
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) == SQLITE_OK) return 0;
    fail(err, errlen, "store: %s: %s", op, msg ? msg : sqlite3_errmsg(db));
    sqlite3_free(msg);
    return -1;
}

/* PRAGMA foreign_key_check finds nothing: 0, else -1 with err. */
static int foreign_keys_intact(sqlite3 *db, const char *op, char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, "PRAGMA foreign_key_check", -1, &st, NULL) != SQLITE_OK)
        return fail_db(db, err, errlen, op);
    int rc = sqlite3_step(st), out = 0;
    if (rc == SQLITE_ROW)
        out = fail(err, errlen, "store: %s: a row of %s breaks a foreign key", op,
                   (const char *)sqlite3_column_text(st, 0));
    else if (rc != SQLITE_DONE)
        out = fail_db(db, err, errlen, op);
    sqlite3_finalize(st);
    return out;
}

/* Bring db up to m[n-1].version. Each pending migration runs in its own
 * IMMEDIATE transaction that re-reads user_version first, so two processes
 * opening the same new file never apply one twice. */
static int migrate(sqlite3 *db, const char *path, const store_migration_t *m, size_t n, char *err,
                   size_t errlen) {
    int known = n ? m[n - 1].version : 0, have;
    if (user_version(db, &have, err, errlen) < 0) return -1;
    for (size_t i = 0; i <= n; i++) {
        if (have > known)
            return fail(err, errlen, "store: %s has schema version %d, this build knows up to %d",
                        base_name(path), have, known);
        if (i == n) break;
        if (m[i].version <= have) continue;

        char op[128], set[64];
        snprintf(op, sizeof op, "migration %s", m[i].name);
        snprintf(set, sizeof set, "PRAGMA user_version = %d", m[i].version);
        /* Foreign keys off while a migration rebuilds a table (SQLite's
         * documented procedure; the pragma is a no-op inside a transaction),
         * and checked before the commit. */
        if (exec_sql(db, "PRAGMA foreign_keys = OFF", op, err, errlen) < 0) return -1;
        if (exec_sql(db, "BEGIN IMMEDIATE", op, err, errlen) < 0) goto fail;
        if (user_version(db, &have, err, errlen) < 0) goto fail;
        if (have < m[i].version) {
            if (exec_sql(db, m[i].sql, op, err, errlen) < 0) goto fail;
            if (foreign_keys_intact(db, op, err, errlen) < 0) goto fail;
            if (exec_sql(db, set, op, err, errlen) < 0) goto fail;
            have = m[i].version;
        }
        if (exec_sql(db, "COMMIT", op, err, errlen) < 0) goto fail;
        if (exec_sql(db, "PRAGMA foreign_keys = ON", op, err, errlen) < 0) return -1;
    }
    return 0;
fail:
    if (!sqlite3_get_autocommit(db)) sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_exec(db, "PRAGMA foreign_keys = ON", NULL, NULL, NULL);
    return -1;
}

/* nightshift_sha256(text): the hex SHA-256 of its argument (NULL for NULL).
 * Migration 004 filed the configurations of its time with it. */
static void sha256_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    (void)argc;
    const unsigned char *t = sqlite3_value_text(argv[0]);
    if (!t) {
        sqlite3_result_null(ctx);
        return;
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    char hex[2 * EVP_MAX_MD_SIZE + 1];
    if (!EVP_Digest(t, (size_t)sqlite3_value_bytes(argv[0]), md, &n, EVP_sha256(), NULL)) {
        sqlite3_result_error(ctx, "nightshift_sha256: digest failed", -1);
        return;
    }
    for (unsigned int i = 0; i < n; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    sqlite3_result_text(ctx, hex, (int)(2 * n), SQLITE_TRANSIENT);
}

/* nightshift_spec_key(spec): what the store files an experiment by, from the
 * spec parser (spec_scope, spec_config_hash), as JSON text {"dataset",
 * "budget_kind", "budget", "config_hash"}; NULL for a spec that does not
 * parse. Migration 009 files the stored rows again with it. */
static void spec_key_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    (void)argc;
    const char *text = (const char *)sqlite3_value_text(argv[0]);
    spec_t sp;
    spec_scope_t sc;
    char err[SPEC_ERR_LEN], hash[SPEC_HASH_HEX];
    if (!text || spec_parse(text, strlen(text), &sp, err, sizeof err) < 0) {
        sqlite3_result_null(ctx);
        return;
    }
    spec_scope(&sp, &sc);
    int rc = spec_config_hash(&sp, hash);
    spec_free(&sp);
    cJSON *o = rc == 0 ? cJSON_CreateObject() : NULL;
    char *json = o && cJSON_AddStringToObject(o, "dataset", sc.dataset) &&
                         cJSON_AddStringToObject(o, "budget_kind", sc.budget_kind) &&
                         cJSON_AddNumberToObject(o, "budget", sc.budget) &&
                         cJSON_AddStringToObject(o, "config_hash", hash)
                     ? cJSON_PrintUnformatted(o)
                     : NULL;
    cJSON_Delete(o);
    if (json)
        sqlite3_result_text(ctx, json, -1, SQLITE_TRANSIENT);
    else
        sqlite3_result_error_nomem(ctx);
    cJSON_free(json);
}

/* Open path and configure the connection; readonly opens it with
 * SQLITE_OPEN_READONLY and changes nothing (the journal mode is the
 * writer's). *out is set even on failure (it may hold a handle that needs
 * sqlite3_close). */
static int open_db(const char *path, int readonly, sqlite3 **out, char *err, size_t errlen) {
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_open_v2(
        path, &db, readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
        NULL);
    *out = db;
    if (rc != SQLITE_OK) {
        if (!db) return fail(err, errlen, "store: %s: out of memory", base_name(path));
        return fail(err, errlen, "store: opening %s: %s", base_name(path), sqlite3_errmsg(db));
    }
    sqlite3_busy_timeout(db, BUSY_TIMEOUT_MS);
    if (sqlite3_create_function(db, "nightshift_sha256", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC,
                                NULL, sha256_fn, NULL, NULL) != SQLITE_OK ||
        sqlite3_create_function(db, "nightshift_spec_key", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC,
                                NULL, spec_key_fn, NULL, NULL) != SQLITE_OK) {
        fail_db(db, err, errlen, "registering functions");
        goto fail;
    }
    if (readonly) return 0;

    if (sqlite3_prepare_v2(db, "PRAGMA journal_mode = WAL", -1, &st, NULL) != SQLITE_OK ||
        sqlite3_step(st) != SQLITE_ROW) {
        fail_db(db, err, errlen, "setting journal_mode");
        goto fail;
    }
    const char *mode = (const char *)sqlite3_column_text(st, 0);
    if (!mode || strcmp(mode, "wal")) {
        fail(err, errlen, "store: %s: cannot use WAL mode (journal_mode is %s)", base_name(path),
             mode ? mode : "unknown");
        goto fail;
    }
    sqlite3_finalize(st);
    st = NULL;
    if (exec_sql(db, "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON", "pragmas", err,
                 errlen) < 0)
        goto fail;
    return 0;
fail:
    sqlite3_finalize(st);
    return -1;
}

int store_migrate(const char *path, const store_migration_t *m, size_t n, char *err,
                  size_t errlen) {
    sqlite3 *db = NULL;
    int rc = open_db(path, 0, &db, err, errlen);
    if (rc == 0) rc = migrate(db, path, m, n, err, errlen);
    sqlite3_close(db);
    return rc;
}

/* ---------------------------------------------------------------- lifecycle */

/* ------------------------------------------------ the files under the store */

#define AUTOCHECKPOINT_FRAMES 1000 /* SQLite's own default, kept */

/* The database's (wal 0) or its WAL's path, and what is there now into
 * *st; 0, or -1 when nothing is. */
static int stat_file(const store_t *s, int wal, struct stat *st) {
    char path[4096];
    snprintf(path, sizeof path, "%s%s", s->path, wal ? "-wal" : "");
    return stat(path, st);
}

/* Remember the files the connection has open: the WAL exists as long as any
 * connection is open (SQLite deletes it with the last), so from here on it
 * gone from its path, or another file there, means someone took it away. */
static void note_files(store_t *s) {
    if (stat_file(s, 0, &s->db_file) < 0) s->db_file.st_ino = 0;
    if (stat_file(s, 1, &s->wal_file) < 0) s->wal_file.st_ino = 0;
}

/* Has the database (wal 0) or its WAL gone from its path under the
 * connection (deleted, or another file put in its place)? */
static int file_moved(store_t *s, int wal) {
    const struct stat *had = wal ? &s->wal_file : &s->db_file;
    struct stat now;
    if (had->st_ino == 0) return 0;
    return stat_file(s, wal, &now) < 0 || now.st_ino != had->st_ino || now.st_dev != had->st_dev;
}

/* After every commit (in place of SQLite's own auto-checkpoint, which it
 * keeps): when the WAL has been deleted under the connection, what the
 * commit wrote is only in a file nobody can open after a crash, so copy it
 * into the database at once. store_check_files then opens the connection
 * anew, which makes a new WAL. */
static int wal_hook(void *arg, sqlite3 *db, const char *name, int frames) {
    store_t *s = arg;
    if (s->wal_file.st_ino == 0) note_files(s); /* the first write made the WAL */
    if (file_moved(s, 1)) {
        s->wal_lost = 1;
        sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
    } else if (frames >= AUTOCHECKPOINT_FRAMES) {
        sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    }
    return SQLITE_OK;
}

/* Open the connection and prepare every statement (the schema is there). */
static int connect_db(store_t *s, char *err, size_t errlen) {
    if (open_db(s->path, s->readonly, &s->db, err, errlen) < 0) return -1;
    sqlite3_wal_hook(s->db, wal_hook, s);
    note_files(s);
    for (int i = 0; i < ST_COUNT; i++) {
        if (sqlite3_prepare_v3(s->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &s->st[i],
                               NULL) != SQLITE_OK)
            return fail(err, errlen, "store: preparing statement %d: %s", i, sqlite3_errmsg(s->db));
    }
    return 0;
}

static void disconnect_db(store_t *s) {
    for (int i = 0; i < ST_COUNT; i++) {
        sqlite3_finalize(s->st[i]);
        s->st[i] = NULL;
    }
    sqlite3_close(s->db);
    s->db = NULL;
}

int store_check_files(store_t *s, char *err, size_t errlen) {
    if (s->wal_file.st_ino == 0) note_files(s);
    if (file_moved(s, 0))
        return fail(err, errlen,
                    "store: %s was deleted or replaced while the daemon ran: what it writes "
                    "now would be lost",
                    base_name(s->path));
    if (!s->wal_lost && !file_moved(s, 1)) return 0;
    /* Everything committed into the database file, then a connection with a
     * WAL of its own on disk. */
    int rc = sqlite3_wal_checkpoint_v2(s->db, "main", SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
    if (rc != SQLITE_OK) { /* a reader in the way: the next call tries again */
        s->wal_lost = 1;
        snprintf(err, errlen, "store: the WAL of %s was deleted; saving it: %s; trying again",
                 base_name(s->path), sqlite3_errmsg(s->db));
        return 1;
    }
    disconnect_db(s);
    s->wal_lost = 0;
    if (connect_db(s, err, errlen) < 0) return -1;
    snprintf(err, errlen,
             "store: the WAL of %s was deleted under the daemon; everything committed was copied "
             "into the database, and a new WAL opened",
             base_name(s->path));
    return 1;
}

int store_open(const char *path, store_t **out, char *err, size_t errlen) {
    *out = NULL;
    /* No memory statistics: with them every SQLite allocation of every
     * connection takes one global mutex, and an export's connection on the
     * thread pool (store_export_page) would hold up the loop's. Only possible
     * before SQLite initialises (the process's first connection). */
    sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
    store_t *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) {
        free(s);
        return fail(err, errlen, "store: out of memory");
    }
    /* The schema first, on a connection of its own; then the store's. */
    sqlite3 *db = NULL;
    int rc = open_db(path, 0, &db, err, errlen) < 0 ||
                     migrate(db, path, store_migrations, store_n_migrations, err, errlen) < 0
                 ? -1
                 : 0;
    sqlite3_close(db);
    if (rc < 0 || connect_db(s, err, errlen) < 0) goto fail;
    *out = s;
    return 0;
fail:
    store_close(s);
    return -1;
}

int store_open_reader(const store_t *s, store_t **out, char *err, size_t errlen) {
    *out = NULL;
    store_t *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(s->path))) {
        free(r);
        return fail(err, errlen, "store: out of memory");
    }
    r->readonly = 1;
    if (connect_db(r, err, errlen) < 0) {
        store_close(r);
        return -1;
    }
    *out = r;
    return 0;
}

int store_open_readonly(const char *path, store_t **out, char *err, size_t errlen) {
    *out = NULL;
    sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
    store_t *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) {
        free(s);
        return fail(err, errlen, "store: out of memory");
    }
    s->readonly = 1;
    /* The schema must be this build's: an older one is migrated by the
     * daemon, not by a reader. */
    sqlite3 *db = NULL;
    int have = -1, want = store_migrations[store_n_migrations - 1].version;
    int rc =
        open_db(path, 1, &db, err, errlen) < 0 || user_version(db, &have, err, errlen) < 0 ? -1 : 0;
    sqlite3_close(db);
    if (rc == 0 && have != want)
        rc = fail(err, errlen, "store: %s has schema version %d, this build reads %d",
                  base_name(path), have, want);
    if (rc < 0 || connect_db(s, err, errlen) < 0) goto fail;
    *out = s;
    return 0;
fail:
    store_close(s);
    return -1;
}

void store_close(store_t *s) {
    if (!s) return;
    disconnect_db(s);
    free(s->path);
    free(s);
}

/* ---------------------------------------------------------------- the queue */

/* An experiment's rung (store_asha_t) into the five parameters from i on,
 * NULLs when a is NULL. */
static int bind_asha(sqlite3_stmt *st, int i, const store_asha_t *a) {
    if (!a) {
        int b = 0;
        for (int k = 0; k < 5; k++) b |= sqlite3_bind_null(st, i + k);
        return b;
    }
    return sqlite3_bind_int(st, i, a->rung) | sqlite3_bind_int(st, i + 1, a->rungs) |
           sqlite3_bind_int(st, i + 2, a->eta) | sqlite3_bind_double(st, i + 3, a->full_budget) |
           bind_text(st, i + 4, a->full_config_hash);
}

int store_insert(store_t *s, const store_new_experiment_t *e, int64_t *id, char *err,
                 size_t errlen) {
    if (!e->spec_json || !e->config_hash || !e->scope.dataset[0] || !e->scope.budget_kind[0])
        return fail(err, errlen, "store: insert: spec_json, config_hash and scope are required");
    if (!e->source ||
        (strcmp(e->source, "api") && strcmp(e->source, "cli") && strcmp(e->source, "agent")))
        return fail(err, errlen, "store: insert: source must be api, cli or agent");
    char now[STORE_TIME_LEN];
    now_iso(now);
    sqlite3_stmt *st = s->st[ST_INSERT];
    int b = bind_text(st, 1, e->name);
    b |= bind_text(st, 2, e->tags_json ? e->tags_json : "[]");
    b |= bind_text(st, 3, e->spec_json);
    b |= bind_text(st, 4, e->config_hash);
    b |= sqlite3_bind_int64(st, 5, e->seed);
    b |= e->parent > 0 ? sqlite3_bind_int64(st, 6, e->parent) : sqlite3_bind_null(st, 6);
    b |= bind_text(st, 7, e->source);
    b |= sqlite3_bind_int(st, 8, e->priority);
    b |= bind_text(st, 9, now);
    b |= bind_text(st, 10, e->scope.dataset);
    b |= bind_text(st, 11, e->scope.budget_kind);
    b |= sqlite3_bind_double(st, 12, e->scope.budget);
    b |= sqlite3_bind_int64(st, 13, e->scope.eval_tokens);
    b |= bind_text(st, 14, e->via);
    b |= bind_asha(st, 15, e->asha);
    if (b) {
        reset(st);
        return fail_db(s->db, err, errlen, "insert");
    }
    int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE) {
        if (sqlite3_extended_errcode(s->db) == SQLITE_CONSTRAINT_FOREIGNKEY)
            fail(err, errlen, "parent: experiment %lld does not exist", (long long)e->parent);
        else
            fail_db(s->db, err, errlen, "insert");
        reset(st);
        return -1;
    }
    reset(st);
    *id = sqlite3_last_insert_rowid(s->db);
    return 0;
}

int store_find_duplicate(store_t *s, const char *config_hash, int64_t seed, int64_t eval_tokens,
                         int64_t *id, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[ST_FIND_DUP];
    if (bind_text(st, 1, config_hash) || sqlite3_bind_int64(st, 2, seed) ||
        sqlite3_bind_int64(st, 3, eval_tokens)) {
        reset(st);
        return fail_db(s->db, err, errlen, "find duplicate");
    }
    int rc = sqlite3_step(st), found = 0;
    if (rc == SQLITE_ROW) {
        *id = sqlite3_column_int64(st, 0);
        found = 1;
    } else if (rc != SQLITE_DONE) {
        found = fail_db(s->db, err, errlen, "find duplicate");
    }
    reset(st);
    return found;
}

int store_claim_next(store_t *s, store_experiment_t *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    sqlite3_stmt *st = s->st[ST_CLAIM];
    char now[STORE_TIME_LEN];
    now_iso(now);
    if (begin(s, err, errlen) < 0) return -1;
    if (bind_text(st, 1, now)) goto db_error;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        reset(st);
        if (commit(s, err, errlen) < 0) goto fail;
        return 0;
    }
    if (rc != SQLITE_ROW) goto db_error;
    out->id = sqlite3_column_int64(st, 0);
    out->name = dup_column(st, 1);
    out->spec_json = dup_column(st, 2);
    out->attempt = sqlite3_column_int(st, 3);
    column_scope(st, 4, &out->scope);
    if ((sqlite3_column_type(st, 1) != SQLITE_NULL && !out->name) || !out->spec_json) {
        fail(err, errlen, "store: claim: out of memory");
        goto fail;
    }
    if (sqlite3_step(st) != SQLITE_DONE) goto db_error;
    reset(st);
    if (commit(s, err, errlen) < 0) goto fail;
    return 1;
db_error:
    fail_db(s->db, err, errlen, "claim");
fail:
    reset(st);
    rollback(s);
    store_experiment_clear(out);
    return -1;
}

void store_experiment_clear(store_experiment_t *e) {
    free(e->name);
    free(e->spec_json);
    memset(e, 0, sizeof *e);
}

/* After an UPDATE ... WHERE id = ? AND status = ? changed nothing: say why. */
static int explain_status(store_t *s, int64_t id, const char *want, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[ST_STATUS_OF];
    sqlite3_bind_int64(st, 1, id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        fail(err, errlen, "store: experiment %lld is not %s (it is %s)", (long long)id, want,
             (const char *)sqlite3_column_text(st, 0));
    else if (rc == SQLITE_DONE)
        fail(err, errlen, "store: experiment %lld not found", (long long)id);
    else
        fail_db(s->db, err, errlen, "status");
    reset(st);
    return -1;
}

int store_set_pid(store_t *s, int64_t id, int pid, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[ST_SET_PID];
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int(st, 2, pid);
    if (run(s, ST_SET_PID, "set pid", err, errlen) < 0) return -1;
    if (sqlite3_changes(s->db) != 1) return explain_status(s, id, STORE_RUNNING, err, errlen);
    return 0;
}

/* Binds the experiment id, then the stored fields of result_fields.h in the
 * table's order (ST_INSERT_RESULT's columns). */
static int bind_result(sqlite3_stmt *st, int64_t id, const store_result_t *r) {
    int b = sqlite3_bind_int64(st, 1, id), col = 2;
    for (int i = 0; i < RESULT_N_FIELDS; i++) {
        const result_field_t *f = &result_fields[i];
        if (!result_is_stored(f)) continue;
        const char *p = (const char *)r + f->offset;
        if (f->type == RESULT_REAL)
            b |= sqlite3_bind_double(st, col++, *(const double *)p);
        else if (f->type == RESULT_INTEGER)
            b |= sqlite3_bind_int64(st, col++, *(const int64_t *)p);
        else
            b |= bind_text(st, col++, *(const char *const *)p);
    }
    return b;
}

/* exit_code < 0 and term_signal <= 0 are stored as NULL (not applicable). */
int store_finish(store_t *s, int64_t id, const char *status, const char *reason, int exit_code,
                 int term_signal, const store_result_t *r, char *err, size_t errlen) {
    if (!status || !is_terminal(status))
        return fail(err, errlen, "store: finish: '%s' is not a final status",
                    status ? status : "(null)");
    char now[STORE_TIME_LEN];
    now_iso(now);
    if (begin(s, err, errlen) < 0) return -1;

    sqlite3_stmt *st = s->st[ST_FINISH];
    int b = sqlite3_bind_int64(st, 1, id);
    b |= bind_text(st, 2, status);
    b |= bind_text(st, 3, reason);
    b |= exit_code >= 0 ? sqlite3_bind_int(st, 4, exit_code) : sqlite3_bind_null(st, 4);
    b |= term_signal > 0 ? sqlite3_bind_int(st, 5, term_signal) : sqlite3_bind_null(st, 5);
    b |= bind_text(st, 6, now);
    if (b) {
        reset(st);
        fail_db(s->db, err, errlen, "finish");
        goto fail;
    }
    if (run(s, ST_FINISH, "finish", err, errlen) < 0) goto fail;
    if (sqlite3_changes(s->db) != 1) {
        explain_status(s, id, STORE_RUNNING, err, errlen);
        goto fail;
    }
    if (r) {
        if (bind_result(s->st[ST_INSERT_RESULT], id, r)) {
            reset(s->st[ST_INSERT_RESULT]);
            fail_db(s->db, err, errlen, "result");
            goto fail;
        }
        if (run(s, ST_INSERT_RESULT, "result", err, errlen) < 0) goto fail;
    }
    if (commit(s, err, errlen) < 0) goto fail;
    s->finishes++;
    return 0;
fail:
    rollback(s);
    return -1;
}

int store_add_metrics(store_t *s, int64_t id, const store_metric_t *m, size_t n, char *err,
                      size_t errlen) {
    if (n == 0) return 0;
    if (begin(s, err, errlen) < 0) return -1;
    sqlite3_stmt *st = s->st[ST_INSERT_METRIC];
    for (size_t i = 0; i < n; i++) {
        int b = sqlite3_bind_int64(st, 1, id);
        b |= sqlite3_bind_int64(st, 2, m[i].step);
        b |= sqlite3_bind_double(st, 3, m[i].time_s);
        b |= sqlite3_bind_double(st, 4, m[i].loss);
        b |= sqlite3_bind_double(st, 5, m[i].lr_mult);
        b |= sqlite3_bind_double(st, 6, m[i].tok_s);
        b |= m[i].progress >= 0 ? sqlite3_bind_double(st, 7, m[i].progress)
                                : sqlite3_bind_null(st, 7);
        if (b) {
            reset(st);
            fail_db(s->db, err, errlen, "metrics");
            goto fail;
        }
        if (run(s, ST_INSERT_METRIC, "metrics", err, errlen) < 0) goto fail;
    }
    if (commit(s, err, errlen) < 0) goto fail;
    return 0;
fail:
    rollback(s);
    return -1;
}

int store_set_test(store_t *s, int64_t id, const store_test_t *t, char *err, size_t errlen) {
    char now[STORE_TIME_LEN];
    now_iso(now);
    sqlite3_stmt *st = s->st[ST_SET_TEST];
    int b = sqlite3_bind_int64(st, 1, id);
    b |= isfinite(t->test_bpb) ? sqlite3_bind_double(st, 2, t->test_bpb) : sqlite3_bind_null(st, 2);
    b |= sqlite3_bind_int64(st, 3, t->tokens);
    b |= sqlite3_bind_double(st, 4, t->seconds);
    b |= bind_text(st, 5, t->reason);
    b |= bind_text(st, 6, now);
    if (b) {
        reset(st);
        return fail_db(s->db, err, errlen, "test figure");
    }
    if (run(s, ST_SET_TEST, "test figure", err, errlen) < 0) return -1;
    if (sqlite3_changes(s->db) != 1) return explain_status(s, id, STORE_RUNNING, err, errlen);
    return 0;
}

int store_cancel_queued(store_t *s, int64_t id, char *err, size_t errlen) {
    char now[STORE_TIME_LEN];
    now_iso(now);
    sqlite3_stmt *st = s->st[ST_CANCEL];
    sqlite3_bind_int64(st, 1, id);
    bind_text(st, 2, now);
    if (run(s, ST_CANCEL, "cancel", err, errlen) < 0) return -1;
    if (sqlite3_changes(s->db) == 1) return 1;

    st = s->st[ST_STATUS_OF];
    sqlite3_bind_int64(st, 1, id);
    int rc = sqlite3_step(st), out = 0;
    if (rc == SQLITE_DONE) {
        fail(err, errlen, "store: experiment %lld not found", (long long)id);
        out = NS_ERR_NOT_FOUND;
    } else if (rc != SQLITE_ROW)
        out = fail_db(s->db, err, errlen, "cancel");
    reset(st);
    return out;
}

/* Requeue (attempt < max_attempts) or give up on the running experiment id, or
 * on every running one when id is 0, in one transaction. */
static int requeue_running(store_t *s, int64_t id, int max_attempts, int *requeued, int *abandoned,
                           char *err, size_t errlen) {
    char now[STORE_TIME_LEN];
    now_iso(now);
    if (begin(s, err, errlen) < 0) return -1;
    static const int steps[] = {ST_REQUEUE_METRICS, ST_REQUEUE_TEST, ST_REQUEUE, ST_ABANDON};
    int changed[4] = {0};
    for (int i = 0; i < 4; i++) {
        sqlite3_stmt *st = s->st[steps[i]];
        sqlite3_bind_int(st, 1, max_attempts);
        sqlite3_bind_int64(st, 2, id);
        if (steps[i] == ST_ABANDON) bind_text(st, 3, now);
        if (run(s, steps[i], "requeue", err, errlen) < 0) goto fail;
        changed[i] = sqlite3_changes(s->db);
    }
    if (id && changed[2] + changed[3] == 0) {
        explain_status(s, id, STORE_RUNNING, err, errlen);
        goto fail;
    }
    if (commit(s, err, errlen) < 0) goto fail;
    if (requeued) *requeued = changed[2];
    if (abandoned) *abandoned = changed[3];
    return 0;
fail:
    rollback(s);
    return -1;
}

int store_recover(store_t *s, int max_attempts, int *requeued, int *abandoned, char *err,
                  size_t errlen) {
    return requeue_running(s, 0, max_attempts, requeued, abandoned, err, errlen);
}

int store_interrupt(store_t *s, int64_t id, int max_attempts, char *err, size_t errlen) {
    if (id <= 0) return fail(err, errlen, "store: experiment %lld not found", (long long)id);
    return requeue_running(s, id, max_attempts, NULL, NULL, err, errlen);
}

int store_requeue_unstarted(store_t *s, int64_t id, const char *reason, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[ST_UNSTARTED];
    sqlite3_bind_int64(st, 1, id);
    bind_text(st, 2, reason);
    if (run(s, ST_UNSTARTED, "requeue", err, errlen) < 0) return -1;
    if (sqlite3_changes(s->db) != 1) return explain_status(s, id, STORE_RUNNING, err, errlen);
    return 0;
}

int64_t store_queue_depth(store_t *s, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[ST_QUEUE_DEPTH];
    int64_t n = -1;
    if (sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    else
        fail_db(s->db, err, errlen, "queue depth");
    reset(st);
    return n;
}

/* ----------------------------------------------------- successive halving */

void store_asha_due_free(store_asha_due_t *d, size_t n) {
    for (size_t i = 0; d && i < n; i++) {
        free(d[i].spec_json);
        free(d[i].name);
        free(d[i].tags_json);
        free(d[i].source);
        free(d[i].via);
    }
    free(d);
}

/* The current row of ST_ASHA_DUE into d: 0, or -1 when out of memory. */
static int asha_due_row(sqlite3_stmt *st, store_asha_due_t *d) {
    memset(d, 0, sizeof *d);
    d->id = sqlite3_column_int64(st, 0);
    d->spec_json = dup_column(st, 1);
    d->name = dup_column(st, 2);
    d->tags_json = dup_column(st, 3);
    d->source = dup_column(st, 4);
    d->priority = sqlite3_column_int(st, 5);
    d->seed = sqlite3_column_int64(st, 6);
    column_scope(st, 7, &d->scope);
    d->rung = sqlite3_column_int(st, 11);
    d->rungs = sqlite3_column_int(st, 12);
    d->eta = sqlite3_column_int(st, 13);
    d->full_budget = sqlite3_column_double(st, 14);
    const char *h = (const char *)sqlite3_column_text(st, 15);
    snprintf(d->full_config_hash, sizeof d->full_config_hash, "%s", h ? h : "");
    d->via = dup_column(st, 16); /* NULL for a person's run */
    return d->spec_json && d->tags_json && d->source &&
                   (d->via || sqlite3_column_type(st, 16) == SQLITE_NULL) &&
                   (d->name || sqlite3_column_type(st, 2) == SQLITE_NULL)
               ? 0
               : -1;
}

int store_asha_due(store_t *s, store_asha_due_t **out, size_t *n, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[ST_ASHA_DUE];
    store_asha_due_t *d = NULL;
    size_t cap = 0, len = 0;
    int rc;
    *out = NULL;
    *n = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (len == cap) {
            size_t c = cap ? 2 * cap : 8;
            store_asha_due_t *grown = realloc(d, c * sizeof *d);
            if (!grown) goto oom;
            d = grown;
            cap = c;
        }
        if (asha_due_row(st, &d[len++]) < 0) goto oom;
    }
    if (rc != SQLITE_DONE) {
        fail_db(s->db, err, errlen, "asha");
        goto fail;
    }
    reset(st);
    *out = d;
    *n = len;
    return 0;
oom:
    fail(err, errlen, "store: asha: out of memory");
fail:
    reset(st);
    store_asha_due_free(d, len);
    return -1;
}

int store_asha_promote(store_t *s, int64_t from, int64_t by, const store_new_experiment_t *e,
                       int64_t *id, char *err, size_t errlen) {
    if (!e->asha) return fail(err, errlen, "store: promote: the experiment has no rung");
    if (begin(s, err, errlen) < 0) return -1;
    if (store_insert(s, e, id, err, errlen) < 0) goto fail;
    sqlite3_stmt *st = s->st[ST_ASHA_MARK];
    sqlite3_bind_int64(st, 1, from);
    sqlite3_bind_int64(st, 2, *id);
    if (by > 0)
        sqlite3_bind_int64(st, 3, by);
    else
        sqlite3_bind_null(st, 3);
    if (run(s, ST_ASHA_MARK, "promote", err, errlen) < 0) goto fail;
    if (sqlite3_changes(s->db) != 1) { /* promoted already (or gone): nothing is written */
        rollback(s);
        return 1;
    }
    if (commit(s, err, errlen) < 0) goto fail;
    return 0;
fail:
    rollback(s);
    return -1;
}

/* ---------------------------------------------------------------- queries */

cJSON *store_list(store_t *s, const char *status, const char *dataset, const store_scope_t *scope,
                  const char *order, int limit, int64_t after, char *err, size_t errlen) {
    int which;
    if (!order || !strcmp(order, "-id"))
        which = ST_LIST_ID_DESC;
    else if (!strcmp(order, "id"))
        which = ST_LIST_ID;
    else if (!strcmp(order, "created"))
        which = ST_LIST_CREATED;
    else if (!strcmp(order, "val_bpb"))
        which = ST_LIST_VAL_BPB;
    else if (!strcmp(order, "queue"))
        which = ST_LIST_QUEUE;
    else {
        fail(err, errlen, "order: must be one of id, -id, val_bpb, created, queue");
        return NULL;
    }
    if (scope) dataset = scope->dataset;
    if (status && !is_status(status)) {
        fail(err, errlen,
             "status: must be one of queued, running, succeeded, failed, crashed, timeout, "
             "oom, diverged, cancelled, interrupted, pruned");
        return NULL;
    }
    if (limit < 1 || limit > LIST_MAX) {
        fail(err, errlen, "limit: must be 1..%d", LIST_MAX);
        return NULL;
    }
    if (after < 0) {
        fail(err, errlen, "after: must be an experiment id");
        return NULL;
    }
    sqlite3_stmt *st = s->st[which];
    int b = bind_text(st, 1, status) | sqlite3_bind_int64(st, 2, after) |
            sqlite3_bind_int(st, 3, limit) | bind_text(st, 4, dataset && *dataset ? dataset : NULL);
    if (scope)
        b |= bind_text(st, 5, scope->budget_kind) | sqlite3_bind_double(st, 6, scope->budget) |
             sqlite3_bind_int64(st, 7, scope->eval_tokens);
    if (b) {
        reset(st);
        fail_db(s->db, err, errlen, "list");
        return NULL;
    }
    return rows_array(s, st, "list", err, errlen);
}

#define ASHA_GET_COLUMNS 6 /* rung, rungs, eta, full_budget, promoted_to, promotions */

/* The experiment row with its spec, its rung under asha (or null) and its
 * result (or null) into *out; the caller owns it. Returns 0 or a store_get error code with err. */
static int experiment_object(store_t *s, int64_t id, cJSON **out, char *err, size_t errlen) {
    cJSON *o = NULL, *res = NULL;
    int code = NS_ERR_IO;
    sqlite3_stmt *st = s->st[ST_GET];
    *out = NULL;
    sqlite3_bind_int64(st, 1, id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        fail(err, errlen, "experiment %lld not found", (long long)id);
        code = NS_ERR_NOT_FOUND;
        goto fail;
    }
    if (rc != SQLITE_ROW) goto db_error;
    /* ST_GET's last ASHA_GET_COLUMNS columns (from rung on) are its "asha" object. */
    int ncol = sqlite3_column_count(st), a = ncol - ASHA_GET_COLUMNS;
    if (!(o = row_object(st, 0, a, ROW_TYPED))) goto oom;
    res = sqlite3_column_type(st, a) == SQLITE_NULL ? cJSON_CreateNull()
                                                    : row_object(st, a, ncol, ROW_TYPED);
    if (!res || !cJSON_AddItemToObject(o, "asha", res)) goto oom;
    res = NULL;
    reset(st);

    st = s->st[ST_GET_RESULT];
    sqlite3_bind_int64(st, 1, id);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        res = row_object(st, 1, sqlite3_column_count(st), ROW_TYPED); /* without experiment_id */
    else if (rc == SQLITE_DONE)
        res = cJSON_CreateNull();
    else
        goto db_error;
    if (!res || !cJSON_AddItemToObject(o, "result", res)) goto oom;
    reset(st);
    *out = o;
    return 0;
oom:
    cJSON_Delete(res);
    fail(err, errlen, "store: get: out of memory");
    code = NS_ERR_NOMEM;
    goto fail;
db_error:
    fail_db(s->db, err, errlen, "get");
fail:
    reset(st);
    cJSON_Delete(o);
    return code;
}

/* metrics_total and up to max rows of metrics (max <= 0: none) into o.
 * Returns 0, NS_ERR_IO or NS_ERR_NOMEM with err. */
static int add_metrics(store_t *s, cJSON *o, int64_t id, int max, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[ST_GET_METRICS];
    cJSON *arr = cJSON_CreateArray();
    int64_t total = 0;
    int rc, code = NS_ERR_NOMEM;
    if (!arr) goto oom;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int(st, 2, max > 0 ? max : 1);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        total = sqlite3_column_int64(st, 5);
        if (max <= 0) continue;
        cJSON *m = row_object(st, 0, 5, ROW_TYPED);
        if (!m || !cJSON_AddItemToArray(arr, m)) {
            cJSON_Delete(m);
            goto oom;
        }
    }
    if (rc != SQLITE_DONE) {
        fail_db(s->db, err, errlen, "metrics");
        code = NS_ERR_IO;
        goto fail;
    }
    reset(st);
    if (!cJSON_AddNumberToObject(o, "metrics_total", (double)total)) goto oom;
    if (!cJSON_AddItemToObject(o, "metrics", arr)) goto oom;
    return 0;
oom:
    fail(err, errlen, "store: metrics: out of memory");
fail:
    reset(st);
    cJSON_Delete(arr);
    return code;
}

int store_get(store_t *s, int64_t id, int max_metrics, cJSON **out, char *err, size_t errlen) {
    int rc = experiment_object(s, id, out, err, errlen);
    if (rc == 0 && (rc = add_metrics(s, *out, id, max_metrics, err, errlen)) < 0) {
        cJSON_Delete(*out);
        *out = NULL;
    }
    return rc;
}

static int bind_scope(sqlite3_stmt *st, const store_scope_t *sc) {
    int b = bind_text(st, 1, sc->dataset);
    b |= bind_text(st, 2, sc->budget_kind);
    b |= sqlite3_bind_double(st, 3, sc->budget);
    b |= sqlite3_bind_int64(st, 4, sc->eval_tokens);
    return b;
}

int store_default_scope(store_t *s, store_scope_t *sc, char *err, size_t errlen) {
    /* what sc gives, the rest from the latest result, else the latest experiment */
    for (int k = ST_LATEST_RESULT_SCOPE; k <= ST_LATEST_SCOPE; k++) {
        sqlite3_stmt *st = s->st[k];
        int b = bind_text(st, 1, sc->dataset[0] ? sc->dataset : NULL);
        if (sc->budget_kind[0])
            b |= bind_text(st, 2, sc->budget_kind) | sqlite3_bind_double(st, 3, sc->budget);
        if (sc->eval_tokens >= 0) b |= sqlite3_bind_int64(st, 4, sc->eval_tokens);
        int rc = b ? SQLITE_ERROR : sqlite3_step(st);
        if (rc == SQLITE_ROW) column_scope(st, 0, sc);
        reset(st);
        if (rc == SQLITE_ROW) return k == ST_LATEST_RESULT_SCOPE ? 1 : 2;
        if (rc != SQLITE_DONE) return fail_db(s->db, err, errlen, "scope");
    }
    return 0;
}

cJSON *store_scopes(store_t *s, int limit, char *err, size_t errlen) {
    if (limit < 1 || limit > LIST_MAX) {
        fail(err, errlen, "limit: must be 1..%d", LIST_MAX);
        return NULL;
    }
    sqlite3_stmt *st = s->st[ST_SCOPES];
    sqlite3_bind_int(st, 1, limit);
    return rows_array(s, st, "scopes", err, errlen);
}

cJSON *store_leaderboard(store_t *s, const store_scope_t *sc, int limit, char *err, size_t errlen) {
    if (limit < 1 || limit > LIST_MAX) {
        fail(err, errlen, "limit: must be 1..%d", LIST_MAX);
        return NULL;
    }
    sqlite3_stmt *st = s->st[ST_LEADERBOARD_IN];
    if (bind_scope(st, sc) || sqlite3_bind_int(st, 5, limit)) {
        reset(st);
        fail_db(s->db, err, errlen, "leaderboard");
        return NULL;
    }
    return rows_array(s, st, "leaderboard", err, errlen);
}

/* The column names of st, in order, as a new array of strings (NULL when
 * out of memory). */
static cJSON *column_names(sqlite3_stmt *st) {
    cJSON *cols = cJSON_CreateArray();
    for (int i = 0; cols && i < sqlite3_column_count(st); i++)
        if (!cJSON_AddItemToArray(cols, cJSON_CreateString(sqlite3_column_name(st, i)))) {
            cJSON_Delete(cols);
            cols = NULL;
        }
    return cols;
}

cJSON *store_leaderboard_columns(store_t *s) {
    return column_names(s->st[ST_LEADERBOARD_IN]);
}

cJSON *store_export_columns(store_t *s) {
    return column_names(s->st[ST_EXPORT]);
}

cJSON *store_best_in(store_t *s, const store_scope_t *sc, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[ST_BEST_IN];
    cJSON *stats = NULL;
    int64_t id = 0;
    bind_scope(st, sc);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        id = sqlite3_column_int64(st, 0);
        stats = row_object(st, 1, 5, ROW_TYPED);
    } else if (rc != SQLITE_DONE) {
        fail_db(s->db, err, errlen, "best");
    }
    reset(st);
    if (rc == SQLITE_DONE) {
        cJSON *null = cJSON_CreateNull();
        if (!null) fail(err, errlen, "store: best: out of memory");
        return null;
    }
    if (rc != SQLITE_ROW) return NULL;
    if (!stats) {
        fail(err, errlen, "store: best: out of memory");
        return NULL;
    }
    cJSON *o = NULL;
    if (experiment_object(s, id, &o, err, errlen) == 0) {
        /* the leaderboard's val_bpb is the mean: here it is mean_val_bpb */
        cJSON *mean = cJSON_DetachItemFromObjectCaseSensitive(stats, "val_bpb");
        cJSON_AddItemToObject(o, "mean_val_bpb", mean ? mean : cJSON_CreateNull());
        for (cJSON *it = stats->child; it; it = stats->child)
            cJSON_AddItemToObject(o, it->string, cJSON_DetachItemViaPointer(stats, it));
    }
    cJSON_Delete(stats);
    return o;
}

uint64_t store_finishes(const store_t *s) {
    return s->finishes;
}

/* ------------------------------------------------------------ the totals */

const char *store_status_name(int i) {
    return i >= 0 && i < (int)N_STATUSES ? statuses[i] : NULL;
}

int store_totals(store_t *s, store_totals_t *t, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    sqlite3_stmt *st = s->st[ST_STATUS_COUNTS];
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *status = (const char *)sqlite3_column_text(st, 0);
        for (size_t i = 0; status && i < N_STATUSES; i++)
            if (!strcmp(status, statuses[i])) t->by_status[i] = sqlite3_column_int64(st, 1);
    }
    reset(st);
    if (rc != SQLITE_DONE) return fail_db(s->db, err, errlen, "status counts");
    st = s->st[ST_TRAINED];
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        t->tokens_trained = sqlite3_column_double(st, 0);
        t->seconds_trained = sqlite3_column_double(st, 1);
    }
    reset(st);
    if (rc != SQLITE_ROW) return fail_db(s->db, err, errlen, "trained totals");
    struct stat f;
    t->db_bytes = stat_file(s, 0, &f) == 0 ? (int64_t)f.st_size : 0;
    t->wal_bytes = stat_file(s, 1, &f) == 0 ? (int64_t)f.st_size : 0;
    return 0;
}

int store_last_scope(store_t *s, store_scope_t *sc, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[ST_LAST_SCOPE];
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) column_scope(st, 0, sc);
    reset(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return fail_db(s->db, err, errlen, "last scope");
    return rc == SQLITE_ROW;
}

cJSON *store_noise(store_t *s, const store_scope_t *sc, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[ST_NOISE];
    bind_scope(st, sc);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        fail_db(s->db, err, errlen, "noise");
        reset(st);
        return NULL;
    }
    /* no row: nothing has succeeded in the scope yet */
    int64_t configs = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    int64_t runs = rc == SQLITE_ROW ? sqlite3_column_int64(st, 1) : 0;
    int64_t df = rc == SQLITE_ROW ? sqlite3_column_int64(st, 2) : 0;
    double ss = rc == SQLITE_ROW ? sqlite3_column_double(st, 3) : 0;
    reset(st);
    cJSON *o = cJSON_CreateObject();
    int ok = o && cJSON_AddStringToObject(o, "dataset", sc->dataset) &&
             cJSON_AddStringToObject(o, "budget_kind", sc->budget_kind) &&
             cJSON_AddNumberToObject(o, "budget", sc->budget) &&
             cJSON_AddNumberToObject(o, "eval_tokens", (double)sc->eval_tokens) &&
             (df > 0 ? cJSON_AddNumberToObject(o, "sd", sqrt(ss / (double)df)) != NULL
                     : cJSON_AddNullToObject(o, "sd") != NULL) &&
             cJSON_AddNumberToObject(o, "configurations", (double)configs) &&
             cJSON_AddNumberToObject(o, "runs", (double)runs) &&
             cJSON_AddNumberToObject(o, "df", (double)df);
    if (!ok) {
        cJSON_Delete(o);
        fail(err, errlen, "store: noise: out of memory");
        return NULL;
    }
    return o;
}

cJSON *store_scope_runs(store_t *s, const store_scope_t *sc, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[ST_SCOPE_RUNS];
    bind_scope(st, sc);
    return rows_array(s, st, "scope runs", err, errlen);
}

cJSON *store_scope_configs(store_t *s, const store_scope_t *sc, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[ST_SCOPE_CONFIGS];
    bind_scope(st, sc);
    return rows_array(s, st, "scope configurations", err, errlen);
}

cJSON *store_test_of(store_t *s, const store_scope_t *sc, const char *config_hash, char *err,
                     size_t errlen) {
    sqlite3_stmt *st = s->st[ST_TEST_OF];
    bind_scope(st, sc);
    bind_text(st, 5, config_hash);
    cJSON *rows = rows_array(s, st, "test figure", err, errlen);
    cJSON *o = rows ? cJSON_DetachItemFromArray(rows, 0) : NULL; /* an aggregate: one row */
    if (rows && !o) fail(err, errlen, "store: test figure: no row");
    cJSON_Delete(rows);
    return o;
}

int store_prune_losses(store_t *s, const store_scope_t *sc, double p, double window, int max_runs,
                       double **out, size_t *n, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[ST_PRUNE_LOSSES];
    double *v = NULL;
    size_t len = 0, cap = 0;
    int rc;
    *out = NULL;
    *n = 0;
    int b = bind_scope(st, sc);
    b |= sqlite3_bind_double(st, 5, p);
    b |= sqlite3_bind_double(st, 6, window);
    b |= sqlite3_bind_int(st, 7, max_runs);
    if (b) {
        reset(st);
        return fail_db(s->db, err, errlen, "prune");
    }
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (len == cap) {
            cap = cap ? 2 * cap : 16;
            double *q = realloc(v, cap * sizeof *q);
            if (!q) {
                free(v);
                reset(st);
                return fail(err, errlen, "store: prune: out of memory");
            }
            v = q;
        }
        v[len++] = sqlite3_column_double(st, 0);
    }
    reset(st);
    if (rc != SQLITE_DONE) {
        free(v);
        return fail_db(s->db, err, errlen, "prune");
    }
    *out = v;
    *n = len;
    return 0;
}

int store_run_loss(store_t *s, int64_t id, double p, double window, double *loss, int64_t *n,
                   char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[ST_RUN_LOSS];
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_double(st, 2, p);
    sqlite3_bind_double(st, 3, window);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *loss = sqlite3_column_double(st, 0);
        *n = sqlite3_column_int64(st, 1);
    }
    reset(st);
    return rc == SQLITE_ROW ? 0 : fail_db(s->db, err, errlen, "run loss");
}

cJSON *store_recent(store_t *s, int n, char *err, size_t errlen) {
    if (n < 1 || n > LIST_MAX) {
        fail(err, errlen, "n: must be 1..%d", LIST_MAX);
        return NULL;
    }
    sqlite3_stmt *st = s->st[ST_RECENT];
    sqlite3_bind_int(st, 1, n);
    return rows_array(s, st, "recent", err, errlen);
}

int store_add_hook_delivery(store_t *s, const store_hook_delivery_t *d, char *err, size_t errlen) {
    char now[STORE_TIME_LEN];
    now_iso(now);
    sqlite3_stmt *st = s->st[ST_INSERT_DELIVERY];
    int b = bind_text(st, 1, d->event_id);
    b |= bind_text(st, 2, d->event_type);
    b |= sqlite3_bind_int(st, 3, d->attempt);
    b |= d->http_status > 0 ? sqlite3_bind_int(st, 4, d->http_status) : sqlite3_bind_null(st, 4);
    b |= sqlite3_bind_int64(st, 5, d->latency_ms);
    b |= bind_text(st, 6, d->error);
    b |= bind_text(st, 7, now);
    if (b) {
        reset(st);
        return fail_db(s->db, err, errlen, "hook delivery");
    }
    return run(s, ST_INSERT_DELIVERY, "hook delivery", err, errlen);
}

/* ------------------------------------------------------------- executors */

int store_set_executor(store_t *s, int64_t id, const char *executor, int64_t slurm_job_id,
                       char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[ST_SET_EXECUTOR];
    sqlite3_bind_int64(st, 1, id);
    bind_text(st, 2, executor);
    if (slurm_job_id > 0)
        sqlite3_bind_int64(st, 3, slurm_job_id);
    else
        sqlite3_bind_null(st, 3);
    if (run(s, ST_SET_EXECUTOR, "set executor", err, errlen) < 0) return -1;
    if (sqlite3_changes(s->db) != 1) return explain_status(s, id, STORE_RUNNING, err, errlen);
    return 0;
}

static char *column_dup(sqlite3_stmt *st, int i) {
    const char *t = (const char *)sqlite3_column_text(st, i);
    return t ? strdup(t) : NULL;
}

int store_running_jobs(store_t *s, store_job_t **out, size_t *n, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[ST_RUNNING];
    store_job_t *jobs = NULL;
    size_t count = 0, cap = 0;
    int rc;
    *out = NULL;
    *n = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (count == cap) {
            cap = cap ? 2 * cap : 8;
            store_job_t *more = realloc(jobs, cap * sizeof *jobs);
            if (!more) {
                fail(err, errlen, "store: out of memory");
                goto fail;
            }
            jobs = more;
        }
        store_job_t *j = &jobs[count++];
        memset(j, 0, sizeof *j);
        j->e.id = sqlite3_column_int64(st, 0);
        j->e.name = column_dup(st, 1);
        j->e.spec_json = column_dup(st, 2);
        j->e.attempt = sqlite3_column_int(st, 3);
        const char *x = (const char *)sqlite3_column_text(st, 4);
        snprintf(j->executor, sizeof j->executor, "%s", x ? x : "");
        j->slurm_job_id = sqlite3_column_int64(st, 5);
        if (!j->e.spec_json) {
            fail(err, errlen, "store: out of memory");
            goto fail;
        }
    }
    if (rc != SQLITE_DONE) {
        fail_db(s->db, err, errlen, "running experiments");
        goto fail;
    }
    reset(st);
    *out = jobs;
    *n = count;
    return 0;
fail:
    reset(st);
    store_jobs_free(jobs, count);
    return -1;
}

void store_jobs_free(store_job_t *jobs, size_t n) {
    for (size_t i = 0; i < n; i++) store_experiment_clear(&jobs[i].e);
    free(jobs);
}

/* ------------------------------------------------------------- the event log */

int store_event_add(store_t *s, const char *type, int64_t experiment_id, const char *payload_json,
                    int64_t *id, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[ST_EVENT_ADD];
    int b = bind_text(st, 1, type);
    b |= experiment_id > 0 ? sqlite3_bind_int64(st, 2, experiment_id) : sqlite3_bind_null(st, 2);
    b |= bind_text(st, 3, payload_json);
    if (b) {
        reset(st);
        return fail_db(s->db, err, errlen, "event");
    }
    if (run(s, ST_EVENT_ADD, "event", err, errlen) < 0) return -1;
    if (id) *id = sqlite3_last_insert_rowid(s->db);
    return 0;
}

int store_event_ensure_finished(store_t *s, int64_t experiment_id, char *err, size_t errlen) {
    sqlite3_bind_int64(s->st[ST_EVENT_ENSURE_FINISHED], 1, experiment_id);
    if (run(s, ST_EVENT_ENSURE_FINISHED, "finished event", err, errlen) < 0) return -1;
    return sqlite3_changes(s->db) > 0;
}

/* Column i (JSON object text) parsed, or an empty object; NULL when out of
 * memory. */
static cJSON *column_object(sqlite3_stmt *st, int i) {
    const char *text = (const char *)sqlite3_column_text(st, i);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        j = cJSON_CreateObject();
    }
    return j;
}

/* The outbox row of ST_EVENTS_PENDING as hook.c reads it. */
static cJSON *pending_row(sqlite3_stmt *st) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "id", (double)sqlite3_column_int64(st, 0));
    cJSON_AddStringToObject(o, "type", (const char *)sqlite3_column_text(st, 1));
    cJSON_AddStringToObject(o, "webhook_id", (const char *)sqlite3_column_text(st, 2));
    cJSON_AddNumberToObject(o, "experiment_id", (double)sqlite3_column_int64(st, 3));
    cJSON_AddItemToObject(o, "payload", column_object(st, 4));
    const char *body = (const char *)sqlite3_column_text(st, 5);
    if (body)
        cJSON_AddStringToObject(o, "body", body);
    else
        cJSON_AddNullToObject(o, "body");
    cJSON_AddNumberToObject(o, "attempts", sqlite3_column_int(st, 6));
    return o;
}

/* A feed item of ST_EVENTS_LIST: the fixed members, then the payload's (the
 * fixed ones win a clash), and the experiment's val_bpb when the payload
 * names an experiment without one. */
static cJSON *feed_row(sqlite3_stmt *st) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "id", (double)sqlite3_column_int64(st, 0));
    cJSON_AddStringToObject(o, "type", (const char *)sqlite3_column_text(st, 1));
    cJSON_AddStringToObject(o, "created", (const char *)sqlite3_column_text(st, 2));
    cJSON_AddStringToObject(o, "webhook_id", (const char *)sqlite3_column_text(st, 3));
    cJSON_AddStringToObject(o, "state", (const char *)sqlite3_column_text(st, 4));
    cJSON *payload = column_object(st, 5);
    while (payload && payload->child) {
        cJSON *item = cJSON_DetachItemViaPointer(payload, payload->child);
        if (cJSON_GetObjectItemCaseSensitive(o, item->string))
            cJSON_Delete(item);
        else
            cJSON_AddItemToObject(o, item->string, item);
    }
    cJSON_Delete(payload);
    cJSON *exp = cJSON_GetObjectItemCaseSensitive(o, "experiment");
    if (cJSON_IsObject(exp) && !cJSON_GetObjectItemCaseSensitive(exp, "val_bpb")) {
        if (sqlite3_column_type(st, 6) == SQLITE_NULL)
            cJSON_AddNullToObject(exp, "val_bpb");
        else
            cJSON_AddNumberToObject(exp, "val_bpb", sqlite3_column_double(st, 6));
    }
    return o;
}

/* Every remaining row of st through make as an array; st is reset either
 * way. The caller owns the array; NULL with err on failure. */
static cJSON *rows_made(store_t *s, sqlite3_stmt *st, cJSON *(*make)(sqlite3_stmt *),
                        const char *op, char *err, size_t errlen) {
    cJSON *arr = cJSON_CreateArray();
    int rc = SQLITE_NOMEM;
    while (arr && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        cJSON *o = make(st);
        if (!o || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            rc = SQLITE_NOMEM;
            break;
        }
    }
    if (rc != SQLITE_DONE) {
        if (rc == SQLITE_NOMEM)
            fail(err, errlen, "store: %s: out of memory", op);
        else
            fail_db(s->db, err, errlen, op);
        cJSON_Delete(arr);
        arr = NULL;
    }
    reset(st);
    return arr;
}

cJSON *store_events_pending(store_t *s, int64_t after, int64_t experiment_id, int limit, char *err,
                            size_t errlen) {
    sqlite3_stmt *st = s->st[ST_EVENTS_PENDING];
    sqlite3_bind_int64(st, 1, after);
    sqlite3_bind_int(st, 2, limit);
    sqlite3_bind_int64(st, 3, experiment_id);
    return rows_made(s, st, pending_row, "pending events", err, errlen);
}

int store_event_set_body(store_t *s, int64_t id, const char *body, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[ST_EVENT_SET_BODY];
    sqlite3_bind_int64(st, 1, id);
    bind_text(st, 2, body);
    return run(s, ST_EVENT_SET_BODY, "event body", err, errlen);
}

int store_event_attempted(store_t *s, int64_t id, char *err, size_t errlen) {
    sqlite3_bind_int64(s->st[ST_EVENT_ATTEMPTED], 1, id);
    return run(s, ST_EVENT_ATTEMPTED, "event attempt", err, errlen);
}

int store_event_mark(store_t *s, int64_t id, const char *state, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[ST_EVENT_MARK];
    sqlite3_bind_int64(st, 1, id);
    bind_text(st, 2, state);
    return run(s, ST_EVENT_MARK, "event state", err, errlen);
}

cJSON *store_events(store_t *s, int64_t after, int limit, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[ST_EVENTS_LIST];
    sqlite3_bind_int64(st, 1, after);
    sqlite3_bind_int(st, 2, limit);
    return rows_made(s, st, feed_row, "events", err, errlen);
}

int64_t store_events_last_id(store_t *s, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[ST_EVENTS_LAST_ID];
    int64_t v = -1;
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    else
        fail_db(s->db, err, errlen, "last event");
    reset(st);
    return v;
}

/* ------------------------------------------------------------------ exports */

struct store_export {
    char *path;
    sqlite3 *db;      /* opened by the first page, read-only */
    sqlite3_stmt *st; /* ST_EXPORT's text: the read transaction lasts as long */
    int done;
};

int store_export_open(store_t *s, store_export_t **out, char *err, size_t errlen) {
    store_export_t *x = calloc(1, sizeof *x);
    *out = NULL;
    if (!x || !(x->path = strdup(s->path))) {
        free(x);
        return fail(err, errlen, "store: export: out of memory");
    }
    *out = x;
    return 0;
}

cJSON *store_export_page(store_export_t *x, int n, char *err, size_t errlen) {
    if (!x->db) {
        if (sqlite3_open_v2(x->path, &x->db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
            fail(err, errlen, "store: export: %s", x->db ? sqlite3_errmsg(x->db) : "out of memory");
            return NULL;
        }
        sqlite3_busy_timeout(x->db, BUSY_TIMEOUT_MS);
        if (sqlite3_prepare_v2(x->db, stmt_sql[ST_EXPORT], -1, &x->st, NULL) != SQLITE_OK) {
            fail_db(x->db, err, errlen, "export");
            return NULL;
        }
    }
    cJSON *arr = cJSON_CreateArray();
    if (!arr) {
        fail(err, errlen, "store: export: out of memory");
        return NULL;
    }
    for (int i = 0; i < n && !x->done; i++) {
        int rc = sqlite3_step(x->st);
        if (rc == SQLITE_DONE) {
            x->done = 1;
            break;
        }
        cJSON *o =
            rc == SQLITE_ROW ? row_object(x->st, 0, sqlite3_column_count(x->st), ROW_RAW) : NULL;
        if (!o || !cJSON_AddItemToArray(arr, o)) {
            if (rc == SQLITE_ROW)
                fail(err, errlen, "store: export: out of memory");
            else
                fail_db(x->db, err, errlen, "export");
            cJSON_Delete(o);
            cJSON_Delete(arr);
            return NULL;
        }
    }
    return arr;
}

void store_export_close(store_export_t *x) {
    if (!x) return;
    sqlite3_finalize(x->st);
    sqlite3_close(x->db);
    free(x->path);
    free(x);
}
