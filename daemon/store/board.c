/* board.c - the scopes and what compares within one: the leaderboard, the
 * default and last scope, the seed noise, a scope's runs and configurations
 * and a configuration's sealed test figure. */
#define STORE_PART STORE_PART_BOARD
#include "daemon/store/store_db.h"

#include <math.h>
#include <string.h>

enum {
    ST_LEADERBOARD_IN,
    ST_LAST_SCOPE,
    ST_LATEST_RESULT_SCOPE,
    ST_LATEST_SCOPE,
    ST_SCOPES,
    ST_NOISE,
    ST_SCOPE_RUNS,
    ST_SCOPE_CONFIGS,
    ST_TEST_OF,
    ST_COUNT
};

static const char *const stmt_sql[ST_COUNT] = {
    /* One scope: ?1 dataset, ?2 budget_kind, ?3 budget, ?4 eval_tokens. */
    [ST_LEADERBOARD_IN] = "SELECT * FROM leaderboard WHERE dataset = ?1 AND budget_kind = ?2"
                          " AND budget = ?3 AND eval_tokens = ?4 LIMIT ?5",
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
};
_Static_assert(ST_COUNT <= STORE_PART_MAX, "store_db.h's STORE_PART_MAX");

const store_part_t store_board_part = {"board", stmt_sql, ST_COUNT};

int store_default_scope(store_t *s, store_scope_t *sc, char *err, size_t errlen) {
    /* what sc gives, the rest from the latest result, else the latest experiment */
    for (int k = ST_LATEST_RESULT_SCOPE; k <= ST_LATEST_SCOPE; k++) {
        sqlite3_stmt *st = s->st[STORE_PART][k];
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
    sqlite3_stmt *st = s->st[STORE_PART][ST_SCOPES];
    sqlite3_bind_int(st, 1, limit);
    return store_rows_array(s, st, "scopes", err, errlen);
}

cJSON *store_leaderboard(store_t *s, const store_scope_t *sc, int limit, char *err, size_t errlen) {
    if (limit < 1 || limit > LIST_MAX) {
        fail(err, errlen, "limit: must be 1..%d", LIST_MAX);
        return NULL;
    }
    sqlite3_stmt *st = s->st[STORE_PART][ST_LEADERBOARD_IN];
    if (bind_scope(st, sc) || sqlite3_bind_int(st, 5, limit)) {
        reset(st);
        fail_db(s->db, err, errlen, "leaderboard");
        return NULL;
    }
    return store_rows_array(s, st, "leaderboard", err, errlen);
}

cJSON *store_leaderboard_columns(store_t *s) {
    return store_column_names(s->st[STORE_PART][ST_LEADERBOARD_IN]);
}

int store_last_scope(store_t *s, store_scope_t *sc, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[STORE_PART][ST_LAST_SCOPE];
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) column_scope(st, 0, sc);
    reset(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return fail_db(s->db, err, errlen, "last scope");
    return rc == SQLITE_ROW;
}

cJSON *store_noise(store_t *s, const store_scope_t *sc, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[STORE_PART][ST_NOISE];
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
    sqlite3_stmt *st = s->st[STORE_PART][ST_SCOPE_RUNS];
    bind_scope(st, sc);
    return store_rows_array(s, st, "scope runs", err, errlen);
}

cJSON *store_scope_configs(store_t *s, const store_scope_t *sc, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[STORE_PART][ST_SCOPE_CONFIGS];
    bind_scope(st, sc);
    return store_rows_array(s, st, "scope configurations", err, errlen);
}

cJSON *store_test_of(store_t *s, const store_scope_t *sc, const char *config_hash, char *err,
                     size_t errlen) {
    sqlite3_stmt *st = s->st[STORE_PART][ST_TEST_OF];
    bind_scope(st, sc);
    bind_text(st, 5, config_hash);
    cJSON *rows = store_rows_array(s, st, "test figure", err, errlen);
    cJSON *o = rows ? cJSON_DetachItemFromArray(rows, 0) : NULL; /* an aggregate: one row */
    if (rows && !o) fail(err, errlen, "store: test figure: no row");
    cJSON_Delete(rows);
    return o;
}
