/* results.c - what a run leaves: its final status and result, its per-step
 * metrics, its sealed test figure, the losses pruning compares, and the
 * running totals of GET /metrics. */
#define STORE_PART STORE_PART_RESULTS
#include "daemon/store/store_db.h"

#include <math.h>
#include <string.h>
#include <stdlib.h>
#include <sys/stat.h>

enum {
    ST_FINISH,
    ST_INSERT_RESULT,
    ST_INSERT_METRIC,
    ST_SET_TEST,
    ST_PRUNE_LOSSES,
    ST_RUN_LOSS,
    ST_STATUS_COUNTS,
    ST_TRAINED,
    ST_COUNT
};

static const char *const stmt_sql[ST_COUNT] = {
    [ST_FINISH] = "UPDATE experiments SET status = ?2, reason = ?3, exit_code = ?4,"
                  " term_signal = ?5, finished = ?6 WHERE id = ?1 AND status = 'running'",
    [ST_INSERT_RESULT] = "INSERT INTO results (experiment_id" RESULT_SQL_COLUMNS
                         ") VALUES (?" RESULT_SQL_PLACEHOLDERS ")",
    [ST_INSERT_METRIC] = "INSERT INTO metrics (experiment_id, step, time_s, loss, lr_mult, tok_s,"
                         " progress) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
                         " ON CONFLICT (experiment_id, step) DO NOTHING",
    /* The sealed test figure (schema 010): written for a running experiment,
     * read back only by ST_TEST_OF. */
    [ST_SET_TEST] = "INSERT OR REPLACE INTO test_results (experiment_id, test_bpb, tokens,"
                    " seconds, reason, measured) SELECT id, ?2, ?3, ?4, ?5, ?6 FROM experiments"
                    " WHERE id = ?1 AND status = 'running'",
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
    /* store_totals: the running totals kept by triggers (schema/015_totals.sql) */
    [ST_STATUS_COUNTS] = "SELECT status, n FROM status_counts",
    [ST_TRAINED] = "SELECT tokens, seconds FROM trained_totals",
};
_Static_assert(ST_COUNT <= STORE_PART_MAX, "store_db.h's STORE_PART_MAX");

const store_part_t store_results_part = {"results", stmt_sql, ST_COUNT};

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

    sqlite3_stmt *st = s->st[STORE_PART][ST_FINISH];
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
        store_explain_status(s, id, STORE_RUNNING, err, errlen);
        goto fail;
    }
    if (r) {
        if (bind_result(s->st[STORE_PART][ST_INSERT_RESULT], id, r)) {
            reset(s->st[STORE_PART][ST_INSERT_RESULT]);
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
    sqlite3_stmt *st = s->st[STORE_PART][ST_INSERT_METRIC];
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
    sqlite3_stmt *st = s->st[STORE_PART][ST_SET_TEST];
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
    if (sqlite3_changes(s->db) != 1) return store_explain_status(s, id, STORE_RUNNING, err, errlen);
    return 0;
}

int store_prune_losses(store_t *s, const store_scope_t *sc, double p, double window, int max_runs,
                       double **out, size_t *n, char *err, size_t errlen) {
    sqlite3_stmt *st = s->st[STORE_PART][ST_PRUNE_LOSSES];
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
    sqlite3_stmt *st = s->st[STORE_PART][ST_RUN_LOSS];
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

uint64_t store_finishes(const store_t *s) {
    return s->finishes;
}

/* --------------------------------------------------------------- the totals */

int store_totals(store_t *s, store_totals_t *t, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    sqlite3_stmt *st = s->st[STORE_PART][ST_STATUS_COUNTS];
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *status = (const char *)sqlite3_column_text(st, 0);
        for (size_t i = 0; status && i < STORE_N_STATUSES; i++)
            if (!strcmp(status, store_status_name((int)i)))
                t->by_status[i] = sqlite3_column_int64(st, 1);
    }
    reset(st);
    if (rc != SQLITE_DONE) return fail_db(s->db, err, errlen, "status counts");
    st = s->st[STORE_PART][ST_TRAINED];
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        t->tokens_trained = sqlite3_column_double(st, 0);
        t->seconds_trained = sqlite3_column_double(st, 1);
    }
    reset(st);
    if (rc != SQLITE_ROW) return fail_db(s->db, err, errlen, "trained totals");
    struct stat f;
    t->db_bytes = store_stat_file(s, 0, &f) == 0 ? (int64_t)f.st_size : 0;
    t->wal_bytes = store_stat_file(s, 1, &f) == 0 ? (int64_t)f.st_size : 0;
    return 0;
}
