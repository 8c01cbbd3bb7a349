/* export.c - tables of experiments (see export.h). */
#include "daemon/serve/export.h"

#include <math.h>
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

char *export_table(const cJSON *rows, char sep) {
    bytebuf_t t = text_new();
    const cJSON *first = cJSON_GetArrayItem(rows, 0);
    for (const cJSON *k = first ? first->child : NULL; k; k = k->next) {
        put_field(&t, k->string, sep);
        bytebuf_putc(&t, k->next ? sep : '\n');
    }
    for (const cJSON *row = rows ? rows->child : NULL; row; row = row->next) {
        for (const cJSON *k = first->child; k; k = k->next) {
            char *f = field_text(cJSON_GetObjectItemCaseSensitive(row, k->string));
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
