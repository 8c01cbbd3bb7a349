/* export.c - tables of experiments and the streaming export (see export.h).
 *
 * Life of an export: export_stream opens the store's snapshot and a chunked
 * stream, and queues the first page on the thread pool (page_work: read
 * EXPORT_PAGE_ROWS rows, format them into job->text). page_done, on the loop,
 * writes the text; when the client has taken all of it (page_drained) the
 * next page is queued. After the last page the stream is finished (the last
 * chunk). The job is freed once the stream has closed and no page is in
 * flight, from its timer's close callback. */
#include "daemon/serve/export.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "daemon/shared/log.h"
#include "engine/util.h"

#define EXPORT_NICE 10 /* the nice value of an export's pool thread */

/* ------------------------------------------------------------------ fields */

int export_format_parse(const char *name, export_format_t *fmt) {
    static const struct {
        const char *name;
        export_format_t fmt;
    } formats[] = {{"csv", EXPORT_CSV},
                   {"tsv", EXPORT_TSV},
                   {"jsonl", EXPORT_JSONL},
                   {"results-tsv", EXPORT_RESULTS_TSV}};
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        if (!strcmp(name, formats[i].name)) {
            *fmt = formats[i].fmt;
            return 0;
        }
    return -1;
}

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

/* Append s as one field; text (a string value, not a number) that a
 * spreadsheet would read as a formula (= + - @ first, after any spaces,
 * tabs, CR or LF: a sheet may trim them) gets a leading quote. Control characters become '?'
 * (TSV's tab, CR and LF a space), CR and LF in CSV too, so no field holds a
 * line break. A failure stays in t->err. */
static void put_field(bytebuf_t *t, const char *s, char sep, int text) {
    int quote = sep == ',' && strpbrk(s, ",\"");
    const char *first = s + strspn(s, " \t\r\n"); /* what a sheet may trim */
    if (quote) bytebuf_putc(t, '"');
    if (text && *first && strchr("=+-@", *first)) bytebuf_putc(t, '\'');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        /* a C1 control is c2 80..c2 9f in UTF-8 */
        size_t n = p[0] == 0xc2 && (p[1] & 0xc0) == 0x80 ? 2 : 1;
        if (*p == '"' && quote) bytebuf_putc(t, '"'); /* doubled */
        if (sep == '\t' && strchr("\t\r\n", *p))
            bytebuf_putc(t, ' ');
        else if (util_is_control(p, n, UTIL_CTRL_C1))
            bytebuf_putc(t, '?');
        else
            bytebuf_append(t, p, n);
        p += n - 1;
    }
    if (quote) bytebuf_putc(t, '"');
}

/* ------------------------------------------------------------------ tables */

/* The header line of columns (an array of strings). */
static void put_header(bytebuf_t *t, const cJSON *columns, char sep) {
    for (const cJSON *k = columns ? columns->child : NULL; k; k = k->next) {
        put_field(t, cJSON_GetStringValue(k) ? k->valuestring : "", sep, 0);
        bytebuf_putc(t, k->next ? sep : '\n');
    }
}

/* One line per row, the fields in the order of columns. */
static int put_rows(bytebuf_t *t, const cJSON *rows, const cJSON *columns, char sep) {
    for (const cJSON *row = rows ? rows->child : NULL; row; row = row->next) {
        for (const cJSON *k = columns ? columns->child : NULL; k; k = k->next) {
            const char *key = cJSON_GetStringValue(k);
            const cJSON *v = key ? cJSON_GetObjectItemCaseSensitive(row, key) : NULL;
            char *f = field_text(v);
            if (!f) return -1;
            put_field(t, f, sep, cJSON_IsString(v));
            free(f);
            bytebuf_putc(t, k->next ? sep : '\n');
        }
    }
    return t->err ? -1 : 0;
}

char *export_table(const cJSON *rows, const cJSON *columns, char sep) {
    bytebuf_t t;
    bytebuf_init(&t, BYTEBUF_UNLIMITED);
    put_header(&t, columns, sep);
    if (put_rows(&t, rows, columns, sep) < 0) {
        bytebuf_free(&t);
        return NULL;
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

/* autoresearch's results.tsv lines for rows (export.h). */
static void put_results(export_state_t *st, bytebuf_t *t, const cJSON *rows) {
    for (const cJSON *row = rows ? rows->child : NULL; row; row = row->next) {
        const char *status = str(row, "status");
        if (!strcmp(status, "queued") || !strcmp(status, "running") || !strcmp(status, "cancelled"))
            continue;
        int ok = !strcmp(status, "succeeded") &&
                 cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(row, "val_bpb"));
        double bpb = ok ? num(row, "val_bpb", 0) : 0;
        int better = ok && (!st->have_best || bpb < st->best);
        if (better) {
            st->best = bpb;
            st->have_best = 1;
        }
        bytebuf_printf(t, "%lld\t%.6f\t%.1f\t%s\t", (long long)num(row, "id", 0), bpb,
                       ok ? num(row, "peak_rss_mb", 0) / 1024.0 : 0.0,
                       !ok      ? "crash"
                       : better ? "keep"
                                : "discard");
        const char *name = str(row, "name");
        put_field(t, *name ? name : "(unnamed)", '\t', 1);
        if (!ok) {
            bytebuf_puts(t, " (");
            put_field(t, status, '\t', 0);
            if (*str(row, "reason")) {
                bytebuf_puts(t, ": ");
                put_field(t, str(row, "reason"), '\t', 0);
            }
            bytebuf_puts(t, ")");
        }
        bytebuf_puts(t, "\n");
    }
}

int export_page(export_state_t *st, const cJSON *rows, const cJSON *columns, bytebuf_t *out) {
    int first = !st->header_done;
    st->header_done = 1;
    switch (st->fmt) {
    case EXPORT_CSV:
    case EXPORT_TSV: {
        char sep = st->fmt == EXPORT_CSV ? ',' : '\t';
        if (first) put_header(out, columns, sep);
        return put_rows(out, rows, columns, sep);
    }
    case EXPORT_JSONL:
        for (const cJSON *row = rows ? rows->child : NULL; row; row = row->next) {
            char *j = util_json_print(row, 0);
            if (!j) return -1;
            bytebuf_puts(out, j);
            bytebuf_putc(out, '\n');
            free(j);
        }
        break;
    case EXPORT_RESULTS_TSV:
        if (first) bytebuf_puts(out, "commit\tval_bpb\tmemory_gb\tstatus\tdescription\n");
        put_results(st, out, rows);
        break;
    }
    return out->err ? -1 : 0;
}

/* ------------------------------------------------------------- the stream */

typedef struct export_job {
    uv_loop_t *loop;
    uv_work_t work;
    uv_timer_t stall;  /* drops a client that takes nothing for EXPORT_STALL_S */
    http_stream_t *st; /* NULL once the client is gone */
    store_export_t *x;
    cJSON *columns; /* the table's columns (store_export_columns), read by the pool */
    export_lane_t *lane;
    struct export_job *next_waiting; /* in lane's queue */
    export_state_t state;
    bytebuf_t text; /* the page being formatted or written */
    uint64_t rows;  /* experiments sent so far */
    int in_flight;  /* a page is waiting for the lane or on the thread pool */
    int waiting;    /* ... waiting for the lane */
    int last;       /* the page in text is the last one */
    int failed;
    char err[256];
} export_job_t;

static void job_free_cb(uv_handle_t *h) {
    export_job_t *j = h->data;
    bytebuf_free(&j->text);
    cJSON_Delete(j->columns);
    free(j);
}

/* Once the stream is gone and no page is in flight: release everything. */
static void job_release(export_job_t *j) {
    if (j->st || j->in_flight) return;
    store_export_close(j->x);
    j->x = NULL;
    j->lane->active--;
    uv_close((uv_handle_t *)&j->stall, job_free_cb);
}

/* On the thread pool: read and format the next page into j->text. One page
 * at a time for all exports (the lane), so exports take at most one core
 * whatever their number, and that thread runs at a lower priority
 * (EXPORT_NICE; a pool thread keeps it, and the daemon gives the pool no
 * other work): on a busy machine the loop gets the CPU before an export. */
static void page_work(uv_work_t *w) {
    export_job_t *j = w->data;
    setpriority(PRIO_PROCESS, (id_t)gettid(), EXPORT_NICE); /* Linux: per thread */
    bytebuf_reset(&j->text);
    cJSON *rows = store_export_page(j->x, EXPORT_PAGE_ROWS, j->err, sizeof j->err);
    if (!rows) {
        j->failed = 1;
        return;
    }
    if (export_page(&j->state, rows, j->columns, &j->text) < 0) {
        snprintf(j->err, sizeof j->err, "out of memory formatting a page");
        j->failed = 1;
    }
    j->last = cJSON_GetArraySize(rows) < EXPORT_PAGE_ROWS;
    j->rows += (uint64_t)cJSON_GetArraySize(rows);
    cJSON_Delete(rows);
}

static void page_done(uv_work_t *w, int status);

/* Give the lane to the next job waiting for it, if the lane is free. */
static void lane_next(export_lane_t *lane) {
    while (!lane->busy && lane->first) {
        export_job_t *j = lane->first;
        lane->first = j->next_waiting;
        if (!lane->first) lane->last = NULL;
        j->waiting = 0;
        if (uv_queue_work(j->loop, &j->work, page_work, page_done) == 0) {
            lane->busy = 1;
            return;
        }
        j->in_flight = 0;
        log_error("export: cannot queue work on the thread pool");
        http_stream_end(j->st);
    }
}

/* Read and format j's next page when the lane is free. */
static void queue_page(export_job_t *j) {
    export_lane_t *lane = j->lane;
    j->in_flight = j->waiting = 1;
    j->next_waiting = NULL;
    if (lane->last)
        lane->last->next_waiting = j;
    else
        lane->first = j;
    lane->last = j;
    lane_next(lane);
}

/* A job whose client went away leaves the lane's queue. */
static void lane_leave(export_job_t *j) {
    export_lane_t *lane = j->lane;
    if (!j->waiting) return;
    export_job_t **p = &lane->first, *prev = NULL;
    while (*p && *p != j) prev = *p, p = &(*p)->next_waiting;
    if (*p) *p = j->next_waiting;
    if (lane->last == j) lane->last = prev;
    j->waiting = j->in_flight = 0;
}

static void page_done(uv_work_t *w, int status) {
    export_job_t *j = w->data;
    j->in_flight = 0;
    j->lane->busy = 0;
    lane_next(j->lane);
    if (!j->st) { /* the client went away meanwhile */
        job_release(j);
        return;
    }
    if (status < 0 || j->failed) {
        log_error("export: %s; the body is cut short after %llu experiments",
                  status < 0 ? uv_strerror(status) : j->err, (unsigned long long)j->rows);
        http_stream_end(j->st); /* no last chunk: the client sees the export failed */
        return;
    }
    if (j->text.len && http_stream_write(j->st, j->text.data, j->text.len) < 0) {
        log_error("export: cannot queue %zu bytes for the client; ended", j->text.len);
        http_stream_end(j->st);
        return;
    }
    uv_timer_again(&j->stall);
    if (j->last)
        http_stream_finish(j->st);
    else if (!j->text.len)
        queue_page(j);
    /* else page_drained queues the next page once the client has this one */
}

static void page_drained(http_stream_t *st, void *arg) {
    export_job_t *j = arg;
    (void)st;
    uv_timer_again(&j->stall);
    if (!j->in_flight && !j->last) queue_page(j);
}

static void stream_closed(http_stream_t *st, void *arg) {
    export_job_t *j = arg;
    (void)st;
    if (!j->last || j->in_flight)
        log_warn("export: the client went away after %llu experiments; stopped",
                 (unsigned long long)j->rows);
    j->st = NULL;
    uv_timer_stop(&j->stall);
    lane_leave(j);
    job_release(j);
}

static void stall_cb(uv_timer_t *t) {
    export_job_t *j = t->data;
    log_warn("export: the client took nothing for %d s; dropped after %llu experiments",
             EXPORT_STALL_S, (unsigned long long)j->rows);
    if (j->st) http_stream_end(j->st);
}

void export_stream(uv_loop_t *loop, store_t *store, export_lane_t *lane, export_format_t fmt,
                   const http_request_t *req, http_response_t *res) {
    static const char *const types[] = {
        [EXPORT_CSV] = "text/csv; charset=utf-8",
        [EXPORT_TSV] = "text/tab-separated-values; charset=utf-8",
        [EXPORT_JSONL] = "application/x-ndjson",
        [EXPORT_RESULTS_TSV] = "text/tab-separated-values; charset=utf-8",
    };
    char err[256];
    if (lane->active >= EXPORT_MAX_STREAMS) {
        http_error(res, 503, "too_many_exports", "at most %d exports at once; try again shortly",
                   EXPORT_MAX_STREAMS);
        return;
    }
    export_job_t *j = calloc(1, sizeof *j);
    if (!j) {
        http_error(res, 503, "unavailable", "out of memory");
        return;
    }
    if (!(j->columns = store_export_columns(store)) ||
        store_export_open(store, &j->x, err, sizeof err) < 0) {
        if (!j->columns) snprintf(err, sizeof err, "export: out of memory");
        cJSON_Delete(j->columns);
        free(j);
        http_error(res, 500, "store_error", "%s", err);
        return;
    }
    j->loop = loop;
    j->state.fmt = fmt;
    j->lane = lane;
    j->work.data = j;
    bytebuf_init(&j->text, BYTEBUF_UNLIMITED);
    if (!(j->st = http_stream_open(req, res, types[fmt], NULL, 0, stream_closed, j))) {
        store_export_close(j->x);
        cJSON_Delete(j->columns);
        free(j);
        return;
    }
    http_stream_chunked(j->st);
    http_stream_on_drain(j->st, page_drained);
    lane->active++;
    uv_timer_init(loop, &j->stall);
    j->stall.data = j;
    uv_timer_start(&j->stall, stall_cb, EXPORT_STALL_S * 1000, EXPORT_STALL_S * 1000);
    queue_page(j);
}
