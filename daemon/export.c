/* export.c - tables of experiments (see export.h). */
#include "export.h"

#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ a text buffer */

typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} text_t;

static void put(text_t *t, const char *s, size_t n) {
    if (t->oom) return;
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 1024;
        while (cap < t->len + n + 1) cap *= 2;
        char *p = realloc(t->p, cap);
        if (!p) {
            t->oom = 1;
            return;
        }
        t->p = p;
        t->cap = cap;
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = '\0';
}

static void puts_(text_t *t, const char *s) {
    put(t, s, strlen(s));
}

/* The text, or NULL (freed) when out of memory. */
static char *take(text_t *t) {
    if (t->oom || !t->p) {
        free(t->p);
        if (t->oom) return NULL;
        return strdup("");
    }
    return t->p;
}

/* ------------------------------------------------------------------ tables */

/* One value as field text (malloc'd), or NULL when out of memory. */
static char *field_text(const cJSON *v) {
    char num[64];
    if (!v || cJSON_IsNull(v)) return strdup("");
    if (cJSON_IsString(v)) return strdup(v->valuestring);
    if (cJSON_IsBool(v)) return strdup(cJSON_IsTrue(v) ? "true" : "false");
    if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (d == (double)(long long)d && fabs(d) < 1e15) {
            snprintf(num, sizeof num, "%lld", (long long)d);
        } else {
            /* the shortest form that reads back exactly */
            for (int prec = 6; prec <= 17; prec++) {
                snprintf(num, sizeof num, "%.*g", prec, d);
                if (strtod(num, NULL) == d) break;
            }
        }
        return strdup(num);
    }
    char *j = cJSON_PrintUnformatted(v);
    char *out = j ? strdup(j) : NULL;
    cJSON_free(j);
    return out;
}

static void put_field(text_t *t, const char *s, char sep) {
    if (sep == ',') {
        if (!strpbrk(s, ",\"\r\n")) {
            puts_(t, s);
            return;
        }
        puts_(t, "\"");
        for (const char *p = s; *p; p++) put(t, *p == '"' ? "\"\"" : p, *p == '"' ? 2 : 1);
        puts_(t, "\"");
        return;
    }
    for (const char *p = s; *p; p++) put(t, strchr("\t\r\n", *p) ? " " : p, 1);
}

char *export_table(const cJSON *rows, char sep) {
    text_t t = {0};
    const cJSON *first = cJSON_GetArrayItem(rows, 0);
    char sepstr[2] = {sep, '\0'};
    for (const cJSON *k = first ? first->child : NULL; k; k = k->next) {
        put_field(&t, k->string, sep);
        puts_(&t, k->next ? sepstr : "\n");
    }
    for (const cJSON *row = rows ? rows->child : NULL; row; row = row->next) {
        for (const cJSON *k = first->child; k; k = k->next) {
            char *f = field_text(cJSON_GetObjectItemCaseSensitive(row, k->string));
            if (!f) t.oom = 1;
            put_field(&t, f ? f : "", sep);
            free(f);
            puts_(&t, k->next ? sepstr : "\n");
        }
    }
    return take(&t);
}

char *export_jsonl(const cJSON *rows) {
    text_t t = {0};
    for (const cJSON *row = rows ? rows->child : NULL; row; row = row->next) {
        char *j = cJSON_PrintUnformatted(row);
        if (!j) t.oom = 1;
        puts_(&t, j ? j : "");
        puts_(&t, "\n");
        cJSON_free(j);
    }
    return take(&t);
}

static double num(const cJSON *row, const char *key, double def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, key);
    return cJSON_IsNumber(v) ? v->valuedouble : def;
}

static const char *str(const cJSON *row, const char *key) {
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(row, key));
    return s ? s : "";
}

char *export_results_tsv(const cJSON *rows) {
    text_t t = {0};
    char line[128];
    double best = 0;
    int have_best = 0;
    puts_(&t, "commit\tval_bpb\tmemory_gb\tstatus\tdescription\n");
    for (const cJSON *row = rows ? rows->child : NULL; row; row = row->next) {
        const char *status = str(row, "status");
        if (!strcmp(status, "queued") || !strcmp(status, "running") || !strcmp(status, "cancelled"))
            continue;
        int ok = !strcmp(status, "succeeded") &&
                 cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(row, "val_bpb"));
        double bpb = ok ? num(row, "val_bpb", 0) : 0;
        const char *verdict = !ok ? "crash" : (!have_best || bpb < best) ? "keep" : "discard";
        if (ok && (!have_best || bpb < best)) {
            best = bpb;
            have_best = 1;
        }
        snprintf(line, sizeof line, "%lld\t%.6f\t%.1f\t%s\t", (long long)num(row, "id", 0), bpb,
                 ok ? num(row, "peak_rss_mb", 0) / 1024.0 : 0.0, verdict);
        puts_(&t, line);
        const char *name = str(row, "name");
        put_field(&t, *name ? name : "(unnamed)", '\t');
        if (!ok) {
            puts_(&t, " (");
            put_field(&t, status, '\t');
            if (*str(row, "reason")) {
                puts_(&t, ": ");
                put_field(&t, str(row, "reason"), '\t');
            }
            puts_(&t, ")");
        }
        puts_(&t, "\n");
    }
    return take(&t);
}

cJSON *export_rows(store_t *s, char *err, size_t errlen) {
    static const char *sql =
        "SELECT e.id, e.name, e.status, e.reason, e.source, e.parent, e.seed,"
        " json_extract(e.spec, '$.dataset') AS dataset,"
        " json_extract(e.spec, '$.time_budget_s') AS time_budget_s,"
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
        " ORDER BY e.finished IS NULL, e.finished, e.id";
    sqlite3 *db = store_db(s);
    sqlite3_stmt *st = NULL;
    cJSON *arr = NULL;
    int rc;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) goto fail;
    arr = cJSON_CreateArray();
    while (arr && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(arr, o);
        for (int i = 0; i < sqlite3_column_count(st); i++) {
            const char *name = sqlite3_column_name(st, i);
            switch (sqlite3_column_type(st, i)) {
            case SQLITE_INTEGER:
                cJSON_AddNumberToObject(o, name, (double)sqlite3_column_int64(st, i));
                break;
            case SQLITE_FLOAT:
                cJSON_AddNumberToObject(o, name, sqlite3_column_double(st, i));
                break;
            case SQLITE_NULL:
                cJSON_AddNullToObject(o, name);
                break;
            default:
                cJSON_AddStringToObject(o, name, (const char *)sqlite3_column_text(st, i));
            }
        }
    }
    if (!arr || rc != SQLITE_DONE) goto fail;
    sqlite3_finalize(st);
    return arr;
fail:
    snprintf(err, errlen, "export: %s", arr || !st ? sqlite3_errmsg(db) : "out of memory");
    cJSON_Delete(arr);
    sqlite3_finalize(st);
    return NULL;
}
