/* asha.c - successive halving in the store: the runs due for promotion to
 * the next rung, and their promotion (schema/013_asha.sql). */
#define STORE_PART STORE_PART_ASHA
#include "daemon/store/store_db.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ST_ASHA_DUE, ST_ASHA_MARK, ST_COUNT };

static const char *const stmt_sql[ST_COUNT] = {
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
_Static_assert(ST_COUNT <= STORE_PART_MAX, "store_db.h's STORE_PART_MAX");

const store_part_t store_asha_part = {"asha", stmt_sql, ST_COUNT};

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
    sqlite3_stmt *st = s->st[STORE_PART][ST_ASHA_DUE];
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
    sqlite3_stmt *st = s->st[STORE_PART][ST_ASHA_MARK];
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
