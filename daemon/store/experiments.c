/* experiments.c - the experiments as JSON: the list in its orders and filters,
 * one experiment with its result and metrics, the best of a scope, and the
 * agent hook's history of recent runs. */
#define STORE_PART STORE_PART_EXPERIMENTS
#include "daemon/store/store_db.h"

#include <string.h>

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
#define QUEUE_KEY "-priority, -coalesce(rung, 0), source IN ('agent', 'mcp'), id"

enum {
    ST_LIST_ID,
    ST_LIST_ID_DESC,
    ST_LIST_CREATED,
    ST_LIST_VAL_BPB,
    ST_LIST_QUEUE,
    ST_GET,
    ST_GET_RESULT,
    ST_GET_METRICS,
    ST_BEST_IN,
    ST_RECENT,
    ST_COUNT
};

static const char *const stmt_sql[ST_COUNT] = {
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
    [ST_BEST_IN] = "SELECT id, val_bpb, val_bpb_sd, n_seeds, seeds FROM leaderboard"
                   " WHERE dataset = ?1 AND budget_kind = ?2 AND budget = ?3"
                   " AND eval_tokens = ?4 LIMIT 1",
    /* The agent hook's history: finished runs, the most recent first. */
    [ST_RECENT] = "SELECT e.id AS id, e.name AS name, e.status AS status, e.reason AS reason,"
                  " CASE WHEN e.status = 'succeeded' THEN r.val_bpb END AS val_bpb,"
                  " e.spec AS spec FROM experiments e"
                  " LEFT JOIN results r ON r.experiment_id = e.id"
                  " WHERE e.status NOT IN ('queued', 'running')"
                  " ORDER BY e.finished DESC, e.id DESC LIMIT ?1",
};
_Static_assert(ST_COUNT <= STORE_PART_MAX, "store_db.h's STORE_PART_MAX");

const store_part_t store_experiments_part = {"experiments", stmt_sql, ST_COUNT};

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
    sqlite3_stmt *st = s->st[STORE_PART][which];
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
    return store_rows_array(s, st, "list", err, errlen);
}

#define ASHA_GET_COLUMNS 6 /* rung, rungs, eta, full_budget, promoted_to, promotions */

/* The experiment row with its spec, its rung under asha (or null) and its
 * result (or null) into *out; the caller owns it. Returns 0 or a store_get error code with err. */
static int experiment_object(store_t *s, int64_t id, cJSON **out, char *err, size_t errlen) {
    cJSON *o = NULL, *res = NULL;
    int code = NS_ERR_IO;
    sqlite3_stmt *st = s->st[STORE_PART][ST_GET];
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
    if (!(o = store_row_object(st, 0, a, ROW_TYPED))) goto oom;
    res = sqlite3_column_type(st, a) == SQLITE_NULL ? cJSON_CreateNull()
                                                    : store_row_object(st, a, ncol, ROW_TYPED);
    if (!res || !cJSON_AddItemToObject(o, "asha", res)) goto oom;
    res = NULL;
    reset(st);

    st = s->st[STORE_PART][ST_GET_RESULT];
    sqlite3_bind_int64(st, 1, id);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        res = store_row_object(st, 1, sqlite3_column_count(st),
                               ROW_TYPED); /* without experiment_id */
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
    sqlite3_stmt *st = s->st[STORE_PART][ST_GET_METRICS];
    cJSON *arr = cJSON_CreateArray();
    int64_t total = 0;
    int rc, code = NS_ERR_NOMEM;
    if (!arr) goto oom;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int(st, 2, max > 0 ? max : 1);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        total = sqlite3_column_int64(st, 5);
        if (max <= 0) continue;
        cJSON *m = store_row_object(st, 0, 5, ROW_TYPED);
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

cJSON *store_best_in(store_t *s, const store_scope_t *sc, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[STORE_PART][ST_BEST_IN];
    cJSON *stats = NULL;
    int64_t id = 0;
    bind_scope(st, sc);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        id = sqlite3_column_int64(st, 0);
        stats = store_row_object(st, 1, 5, ROW_TYPED);
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

cJSON *store_recent(store_t *s, int n, char *err, size_t errlen) {
    if (n < 1 || n > LIST_MAX) {
        fail(err, errlen, "n: must be 1..%d", LIST_MAX);
        return NULL;
    }
    sqlite3_stmt *st = s->st[STORE_PART][ST_RECENT];
    sqlite3_bind_int(st, 1, n);
    return store_rows_array(s, st, "recent", err, errlen);
}
