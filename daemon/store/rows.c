/* rows.c - what every concern of the store shares: statuses, times, and
 * result rows as JSON. JSON output is built generically from result columns:
 * a query's column names are its JSON keys, so the shape of each answer is
 * visible in its SQL. */
#include "daemon/store/store_db.h"

#include <string.h>
#include <time.h>

/* The live statuses first; from index 2 on, the final ones. */
static const char *const statuses[] = {
    STORE_QUEUED, STORE_RUNNING,  STORE_SUCCEEDED, STORE_FAILED,      STORE_CRASHED, STORE_TIMEOUT,
    STORE_OOM,    STORE_DIVERGED, STORE_CANCELLED, STORE_INTERRUPTED, STORE_PRUNED,
};
#define N_STATUSES (sizeof statuses / sizeof statuses[0])
_Static_assert(N_STATUSES == STORE_N_STATUSES, "store.h's STORE_N_STATUSES");

const char *store_status_name(int i) {
    return i >= 0 && i < (int)N_STATUSES ? statuses[i] : NULL;
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

/* ---------------------------------------------------------------- JSON rows */

/* Columns holding JSON text that is returned parsed. */
static bool is_json_column(const char *name) {
    return !strcmp(name, "tags") || !strcmp(name, "spec") || !strcmp(name, "ve_layers") ||
           !strcmp(name, "seeds") || !strcmp(name, "promotions");
}

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
cJSON *store_row_object(sqlite3_stmt *st, int from, int to, row_mode mode) {
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
cJSON *store_rows_array_as(store_t *s, sqlite3_stmt *st, row_mode mode, const char *op, char *err,
                           size_t errlen) {
    cJSON *arr = cJSON_CreateArray();
    if (!arr) goto oom;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        cJSON *o = store_row_object(st, 0, sqlite3_column_count(st), mode);
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

cJSON *store_rows_array(store_t *s, sqlite3_stmt *st, const char *op, char *err, size_t errlen) {
    return store_rows_array_as(s, st, ROW_TYPED, op, err, errlen);
}

/* The column names of st, in order, as a new array of strings (NULL when
 * out of memory). */
cJSON *store_column_names(sqlite3_stmt *st) {
    cJSON *cols = cJSON_CreateArray();
    for (int i = 0; cols && i < sqlite3_column_count(st); i++)
        if (!cJSON_AddItemToArray(cols, cJSON_CreateString(sqlite3_column_name(st, i)))) {
            cJSON_Delete(cols);
            cols = NULL;
        }
    return cols;
}
