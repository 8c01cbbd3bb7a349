/* export.c - every experiment with its key spec fields and result, paged from
 * a read-only connection of the export's own (store_export_page runs on the
 * thread pool, off the loop's connection). */
#define STORE_PART STORE_PART_EXPORT
#include "daemon/store/store_db.h"

#include <stdlib.h>
#include <string.h>

enum { ST_EXPORT, ST_COUNT };

static const char *const stmt_sql[ST_COUNT] = {
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
};
_Static_assert(ST_COUNT <= STORE_PART_MAX, "store_db.h's STORE_PART_MAX");

const store_part_t store_export_part = {"export", stmt_sql, ST_COUNT};

cJSON *store_export_columns(store_t *s) {
    return store_column_names(s->st[STORE_PART][ST_EXPORT]);
}

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
        cJSON *o = rc == SQLITE_ROW
                       ? store_row_object(x->st, 0, sqlite3_column_count(x->st), ROW_RAW)
                       : NULL;
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
