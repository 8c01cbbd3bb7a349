/* export.c - tables of experiments (see export.h). */
#include "daemon/serve/export.h"

#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/shared/bytebuf.h"

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

/* Append s as one field. A failure stays in t->err. */
static void put_field(bytebuf_t *t, const char *s, char sep) {
    if (sep == ',') {
        if (!strpbrk(s, ",\"\r\n")) {
            bytebuf_puts(t, s);
            return;
        }
        bytebuf_putc(t, '"');
        for (const char *p = s; *p; p++) {
            if (*p == '"') bytebuf_putc(t, '"'); /* doubled */
            bytebuf_putc(t, *p);
        }
        bytebuf_putc(t, '"');
        return;
    }
    for (const char *p = s; *p; p++) bytebuf_putc(t, strchr("\t\r\n", *p) ? ' ' : *p);
}

/* An empty text without a cap, for the tables below. */
static bytebuf_t text_new(void) {
    bytebuf_t t;
    bytebuf_init(&t, BYTEBUF_UNLIMITED);
    return t;
}

char *export_table(const cJSON *rows, const cJSON *columns, char sep) {
    bytebuf_t t = text_new();
    for (const cJSON *k = columns ? columns->child : NULL; k; k = k->next) {
        put_field(&t, cJSON_GetStringValue(k) ? k->valuestring : "", sep);
        bytebuf_putc(&t, k->next ? sep : '\n');
    }
    for (const cJSON *row = rows ? rows->child : NULL; row; row = row->next) {
        for (const cJSON *k = columns ? columns->child : NULL; k; k = k->next) {
            const char *key = cJSON_GetStringValue(k);
            char *f = field_text(key ? cJSON_GetObjectItemCaseSensitive(row, key) : NULL);
            if (!f) {
                bytebuf_free(&t);
                return NULL;
            }
            put_field(&t, f, sep);
            free(f);
            bytebuf_putc(&t, k->next ? sep : '\n');
        }
    }
    return bytebuf_take(&t, NULL);
}

char *export_jsonl(const cJSON *rows) {
    bytebuf_t t = text_new();
    for (const cJSON *row = rows ? rows->child : NULL; row; row = row->next) {
        char *j = cJSON_PrintUnformatted(row);
        if (!j) {
            bytebuf_free(&t);
            return NULL;
        }
        bytebuf_printf(&t, "%s\n", j);
        cJSON_free(j);
    }
    return bytebuf_take(&t, NULL);
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
    bytebuf_t t = text_new();
    double best = 0;
    int have_best = 0;
    bytebuf_puts(&t, "commit\tval_bpb\tmemory_gb\tstatus\tdescription\n");
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
        bytebuf_printf(&t, "%lld\t%.6f\t%.1f\t%s\t", (long long)num(row, "id", 0), bpb,
                       ok ? num(row, "peak_rss_mb", 0) / 1024.0 : 0.0, verdict);
        const char *name = str(row, "name");
        put_field(&t, *name ? name : "(unnamed)", '\t');
        if (!ok) {
            bytebuf_puts(&t, " (");
            put_field(&t, status, '\t');
            if (*str(row, "reason")) {
                bytebuf_puts(&t, ": ");
                put_field(&t, str(row, "reason"), '\t');
            }
            bytebuf_puts(&t, ")");
        }
        bytebuf_puts(&t, "\n");
    }
    return bytebuf_take(&t, NULL);
}

cJSON *export_rows(store_t *s, cJSON **columns, char *err, size_t errlen) {
    static const char *sql =
        "SELECT e.id, e.name, e.status, e.reason, e.source, e.parent, e.seed,"
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
        " ORDER BY e.finished IS NULL, e.finished, e.id";
    sqlite3 *db = store_db(s);
    sqlite3_stmt *st = NULL;
    cJSON *arr = NULL;
    int rc = SQLITE_NOMEM;
    *columns = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) goto fail;
    /* the header of a table, of no rows too */
    if (!(*columns = cJSON_CreateArray()) || !(arr = cJSON_CreateArray())) goto fail;
    for (int i = 0; i < sqlite3_column_count(st); i++)
        if (!cJSON_AddItemToArray(*columns, cJSON_CreateString(sqlite3_column_name(st, i))))
            goto fail;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
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
    if (rc != SQLITE_DONE) goto fail;
    sqlite3_finalize(st);
    return arr;
fail:
    snprintf(err, errlen, "export: %s",
             st && rc == SQLITE_NOMEM ? "out of memory" : sqlite3_errmsg(db));
    cJSON_Delete(*columns);
    *columns = NULL;
    cJSON_Delete(arr);
    sqlite3_finalize(st);
    return NULL;
}
