/* metrics.c - GET /metrics in Prometheus' text format 0.0.4 (see metrics.h). */
#include "daemon/serve/metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/serve/api_routes.h"
#include "daemon/shared/log.h"

#define CODE_MIN 100 /* the status codes counted: 100 .. 599 */
#define CODE_MAX 599
#define N_CODES  (CODE_MAX - CODE_MIN + 1)

struct metrics {
    store_t *store;
    sched_t *sched;
    double started;                           /* unix seconds */
    uint64_t hook_attempts, hook_failures;    /* since start */
    uint64_t requests[API_N_ROUTES][N_CODES]; /* since start, by route and status */
};

metrics_t *metrics_new(store_t *store, sched_t *sched) {
    metrics_t *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    m->store = store;
    m->sched = sched;
    m->started = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
    return m;
}

void metrics_free(metrics_t *m) {
    free(m);
}

void metrics_count_request(metrics_t *m, const char *path, int status) {
    if (!m || status < CODE_MIN || status > CODE_MAX) return;
    m->requests[api_route(path, NULL)][status - CODE_MIN]++;
}

void metrics_count_hook_attempt(metrics_t *m, int ok) {
    if (!m) return;
    m->hook_attempts++;
    if (!ok) m->hook_failures++;
}

/* ------------------------------------------------------------ the writer */

/* text with each of the characters in `special` as a backslash and its
 * escape letter (a newline as \n). */
static void put_escaped(bytebuf_t *b, const char *text, const char *special) {
    for (const char *p = text ? text : ""; *p; p++) {
        if (*p == '\n' && strchr(special, '\n')) {
            bytebuf_puts(b, "\\n");
        } else {
            if (strchr(special, *p)) bytebuf_putc(b, '\\');
            bytebuf_putc(b, *p);
        }
    }
}

void metrics_write_label_value(bytebuf_t *b, const char *v) {
    put_escaped(b, v, "\\\"\n");
}

void metrics_write_family(bytebuf_t *b, const char *name, const char *type, const char *help) {
    bytebuf_printf(b, "# HELP %s ", name);
    put_escaped(b, help, "\\\n");
    bytebuf_printf(b, "\n# TYPE %s %s\n", name, type);
}

void metrics_write_sample(bytebuf_t *b, const char *name, const char *const *labels, int n,
                          double value) {
    bytebuf_puts(b, name);
    for (int i = 0; i < n; i++) {
        bytebuf_printf(b, "%s%s=\"", i ? "," : "{", labels[2 * i]);
        metrics_write_label_value(b, labels[2 * i + 1]);
        bytebuf_putc(b, '"');
    }
    if (n > 0) bytebuf_putc(b, '}');
    if (isnan(value))
        bytebuf_puts(b, " NaN\n");
    else if (isinf(value))
        bytebuf_puts(b, value > 0 ? " +Inf\n" : " -Inf\n");
    else
        bytebuf_printf(b, " %.17g\n", value);
}

/* A family of one sample without labels. */
static void write_one(bytebuf_t *b, const char *name, const char *type, const char *help,
                      double value) {
    metrics_write_family(b, name, type, help);
    metrics_write_sample(b, name, NULL, 0, value);
}

/* ----------------------------------------------------------- the families */

int metrics_render(metrics_t *m, bytebuf_t *b, char *err, size_t errlen) {
    store_totals_t t;
    if (store_totals(m->store, &t, err, errlen) < 0) return -1;

    metrics_write_family(b, "nightshift_experiments_total", "counter",
                         "Experiments that ended, by final status (from the store).");
    for (int i = 0; i < STORE_N_STATUSES; i++) {
        const char *status = store_status_name(i);
        if (!strcmp(status, STORE_QUEUED) || !strcmp(status, STORE_RUNNING)) continue;
        const char *labels[] = {"status", status};
        metrics_write_sample(b, "nightshift_experiments_total", labels, 1, (double)t.by_status[i]);
    }
    for (int i = 0; i < STORE_N_STATUSES; i++) {
        const char *status = store_status_name(i);
        if (!strcmp(status, STORE_QUEUED))
            write_one(b, "nightshift_queue_depth", "gauge", "Experiments queued (the store's).",
                      (double)t.by_status[i]);
        else if (!strcmp(status, STORE_RUNNING))
            write_one(b, "nightshift_experiments_running", "gauge",
                      "Experiments the store has as running.", (double)t.by_status[i]);
    }
    write_one(b, "nightshift_slots_in_use", "gauge", "Slots with a run in them.",
              m->sched ? sched_running(m->sched) : 0);
    write_one(b, "nightshift_slots", "gauge", "Slots configured (runs at once).",
              m->sched ? sched_slots(m->sched) : 0);
    write_one(b, "nightshift_tokens_trained_total", "counter",
              "Tokens trained by the runs that reported a result (from the store).",
              t.tokens_trained);
    write_one(b, "nightshift_training_seconds_total", "counter",
              "Seconds of training of the runs that reported a result (from the store).",
              t.seconds_trained);
    write_one(b, "nightshift_hook_deliveries_total", "counter",
              "Attempts to deliver an event to the agent hook since this daemon started.",
              (double)m->hook_attempts);
    write_one(b, "nightshift_hook_delivery_failures_total", "counter",
              "Agent hook delivery attempts without a 2xx reply since this daemon started.",
              (double)m->hook_failures);

    metrics_write_family(b, "nightshift_http_requests_total", "counter",
                         "HTTP responses by route template and status code since this daemon "
                         "started (route \"other\": any path the daemon does not serve).");
    for (int r = 0; r < API_N_ROUTES; r++) {
        for (int c = 0; c < N_CODES; c++) {
            if (!m->requests[r][c]) continue;
            char code[8];
            snprintf(code, sizeof code, "%d", c + CODE_MIN);
            const char *labels[] = {"route", api_route_template((api_route_t)r), "code", code};
            metrics_write_sample(b, "nightshift_http_requests_total", labels, 2,
                                 (double)m->requests[r][c]);
        }
    }

    metrics_write_family(b, "nightshift_store_size_bytes", "gauge",
                         "Bytes of the store on disk: the database file and its write-ahead log.");
    const char *db[] = {"file", "db"}, *wal[] = {"file", "wal"};
    metrics_write_sample(b, "nightshift_store_size_bytes", db, 1, (double)t.db_bytes);
    metrics_write_sample(b, "nightshift_store_size_bytes", wal, 1, (double)t.wal_bytes);

    write_one(b, "nightshift_start_time_seconds", "gauge",
              "Unix time this daemon started (its in-memory counters count from then).",
              m->started);
    if (b->err) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

void metrics_reply(metrics_t *m, http_response_t *res) {
    bytebuf_t b;
    char err[256];
    bytebuf_init(&b, BYTEBUF_UNLIMITED);
    if (metrics_render(m, &b, err, sizeof err) < 0) {
        bytebuf_free(&b);
        log_error("metrics: %s", err);
        http_error(res, 500, "store_error", "%s", err);
        return;
    }
    size_t len = 0;
    char *body = bytebuf_take(&b, &len);
    if (!body) {
        http_error(res, 500, "internal", "out of memory");
        return;
    }
    res->status = 200;
    res->content_type = METRICS_CONTENT_TYPE;
    res->body = body;
    res->body_len = len;
}
