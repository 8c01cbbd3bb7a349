/* metrics.c - GET /metrics in Prometheus' text format 0.0.4 (see metrics.h). */
#include "daemon/serve/metrics.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "daemon/serve/api_routes.h"
#include "daemon/shared/log.h"
#include "daemon/shared/version.h"

#define CODE_MIN   100 /* the status codes counted: 100 .. 599 */
#define CODE_MAX   599
#define N_CODES    (CODE_MAX - CODE_MIN + 1)
#define MAX_SCOPES 200 /* scopes with a best val_bpb gauge (the latest first) */

/* The buckets' upper bounds (+Inf is implied). A run's duration: from a
 * few seconds (a tiny or failed run) to the hours of a long budget. A
 * request's: the time its handler took on the event loop, from tens of
 * microseconds (a cached read) to the seconds a loop must never take. */
static const double run_bounds[] = {1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400};
static const double req_bounds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                    0.01,   0.025,   0.05,   0.1,   0.25,   1};
#define N_RUN_BOUNDS (sizeof run_bounds / sizeof *run_bounds)
#define N_REQ_BOUNDS (sizeof req_bounds / sizeof *req_bounds)

/* A histogram: the count in each bucket (not cumulative; +Inf last), the
 * sum of the observations. */
typedef struct {
    uint64_t n[N_RUN_BOUNDS > N_REQ_BOUNDS ? N_RUN_BOUNDS + 1 : N_REQ_BOUNDS + 1];
    double sum;
} histogram_t;

struct metrics {
    store_t *store;
    sched_t *sched;
    double started;                           /* unix seconds */
    uint64_t hook_attempts, hook_failures;    /* since start */
    uint64_t requests[API_N_ROUTES][N_CODES]; /* since start, by route and status */
    histogram_t runs[STORE_N_STATUSES];       /* since start, by final status */
    histogram_t request_seconds[API_N_ROUTES];
};

static void observe(histogram_t *h, const double *bounds, size_t n, double v) {
    size_t i = 0;
    while (i < n && v > bounds[i]) i++;
    h->n[i]++;
    h->sum += v;
}

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

void metrics_observe_request(metrics_t *m, const char *path, double seconds) {
    if (!m || !(seconds >= 0)) return;
    observe(&m->request_seconds[api_route(path, NULL)], req_bounds, N_REQ_BOUNDS, seconds);
}

void metrics_observe_run(metrics_t *m, const char *status, double seconds) {
    if (!m || !status || !(seconds >= 0)) return;
    for (int i = 0; i < STORE_N_STATUSES; i++)
        if (!strcmp(status, store_status_name(i)))
            observe(&m->runs[i], run_bounds, N_RUN_BOUNDS, seconds);
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

/* The samples of one histogram: cumulative buckets, the sum and the count,
 * under one label (key=value). */
static void write_histogram(bytebuf_t *b, const char *name, const char *key, const char *value,
                            const histogram_t *h, const double *bounds, size_t n) {
    char bucket[128], sum[128], count[128], le[32];
    snprintf(bucket, sizeof bucket, "%s_bucket", name);
    snprintf(sum, sizeof sum, "%s_sum", name);
    snprintf(count, sizeof count, "%s_count", name);
    uint64_t total = 0;
    for (size_t i = 0; i <= n; i++) {
        total += h->n[i];
        if (i < n)
            snprintf(le, sizeof le, "%g", bounds[i]);
        else
            snprintf(le, sizeof le, "+Inf");
        const char *labels[] = {key, value, "le", le};
        metrics_write_sample(b, bucket, labels, 2, (double)total);
    }
    const char *labels[] = {key, value};
    metrics_write_sample(b, sum, labels, 1, h->sum);
    metrics_write_sample(b, count, labels, 1, (double)total);
}

/* This process's resident and virtual memory, CPU seconds and open file
 * descriptors, as Prometheus' client libraries name them (process_*): from
 * /proc/self (statm: one line; fd: one entry per descriptor, at most the
 * descriptor limit) and getrusage. Nothing on a system without /proc. */
static void write_process(bytebuf_t *b, double started) {
    long page = sysconf(_SC_PAGESIZE);
    unsigned long vm = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    int have_mem = f && fscanf(f, "%lu %lu", &vm, &rss) == 2;
    if (f) fclose(f);
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        write_one(b, "process_cpu_seconds_total", "counter",
                  "User and system CPU time of the daemon's process in seconds.",
                  (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
                      (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6);
    if (have_mem) {
        write_one(b, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
                  (double)rss * (double)page);
        write_one(b, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.",
                  (double)vm * (double)page);
    }
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        int n = 0;
        for (struct dirent *e; (e = readdir(d));)
            if (e->d_name[0] != '.') n++;
        closedir(d);
        write_one(b, "process_open_fds", "gauge", "Open file descriptors.", n - 1); /* not d's */
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        write_one(b, "process_max_fds", "gauge", "The limit of open file descriptors.",
                  (double)rl.rlim_cur);
    write_one(b, "process_start_time_seconds", "gauge",
              "Start time of the process since the unix epoch in seconds.", started);
}

/* nightshift_best_val_bpb{dataset,budget,eval_tokens}: the best
 * configuration's mean val_bpb in each scope with results (store_scopes: one
 * row a scope from the table its triggers keep, the MAX_SCOPES latest). */
static int write_best(metrics_t *m, bytebuf_t *b, char *err, size_t errlen) {
    cJSON *scopes = store_scopes(m->store, MAX_SCOPES, err, errlen);
    if (!scopes) return -1;
    metrics_write_family(b, "nightshift_best_val_bpb", "gauge",
                         "The best configuration's mean val_bpb (lower is better) in each scope "
                         "with results: a dataset, a budget (time:SECONDS or tokens:N) and an "
                         "evaluation's token count (0: the whole validation split).");
    for (const cJSON *s = scopes->child; s; s = s->next) {
        const cJSON *v = cJSON_GetObjectItem(s, "best_val_bpb");
        const char *dataset = cJSON_GetStringValue(cJSON_GetObjectItem(s, "dataset"));
        const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(s, "budget_kind"));
        if (!cJSON_IsNumber(v) || !dataset || !kind) continue;
        char budget[64], eval[32];
        snprintf(budget, sizeof budget, "%s:%.17g", kind,
                 cJSON_GetNumberValue(cJSON_GetObjectItem(s, "budget")));
        snprintf(eval, sizeof eval, "%.0f",
                 cJSON_GetNumberValue(cJSON_GetObjectItem(s, "eval_tokens")));
        const char *labels[] = {"dataset", dataset, "budget", budget, "eval_tokens", eval};
        metrics_write_sample(b, "nightshift_best_val_bpb", labels, 3, v->valuedouble);
    }
    cJSON_Delete(scopes);
    return 0;
}

/* ----------------------------------------------------------- the families */

int metrics_render(metrics_t *m, bytebuf_t *b, char *err, size_t errlen) {
    store_totals_t t;
    if (store_totals(m->store, &t, err, errlen) < 0) return -1;

    metrics_write_family(b, "nightshift_experiments_ended_total", "counter",
                         "Experiments that ended, by final status (from the store).");
    for (int i = 0; i < STORE_N_STATUSES; i++) {
        const char *status = store_status_name(i);
        if (!strcmp(status, STORE_QUEUED) || !strcmp(status, STORE_RUNNING)) continue;
        const char *labels[] = {"status", status};
        metrics_write_sample(b, "nightshift_experiments_ended_total", labels, 1,
                             (double)t.by_status[i]);
    }
    metrics_write_family(b, "nightshift_run_duration_seconds", "histogram",
                         "Wall seconds of the runs that ended since this daemon started, from "
                         "the worker's start to its end, by final status.");
    for (int i = 0; i < STORE_N_STATUSES; i++) {
        const char *status = store_status_name(i);
        if (!strcmp(status, STORE_QUEUED) || !strcmp(status, STORE_RUNNING)) continue;
        write_histogram(b, "nightshift_run_duration_seconds", "status", status, &m->runs[i],
                        run_bounds, N_RUN_BOUNDS);
    }
    if (write_best(m, b, err, errlen) < 0) return -1;
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

    metrics_write_family(b, "nightshift_http_request_duration_seconds", "histogram",
                         "Seconds the daemon's handler took for a request, on its event loop, "
                         "by route template, since this daemon started (streams: until the "
                         "stream opened).");
    for (int r = 0; r < API_N_ROUTES; r++) {
        const histogram_t *h = &m->request_seconds[r];
        uint64_t n = 0;
        for (size_t i = 0; i <= N_REQ_BOUNDS; i++) n += h->n[i];
        if (n)
            write_histogram(b, "nightshift_http_request_duration_seconds", "route",
                            api_route_template((api_route_t)r), h, req_bounds, N_REQ_BOUNDS);
    }

    metrics_write_family(b, "nightshift_build_info", "gauge",
                         "Always 1: the daemon's version, and the compiler it was built with.");
    const char *build[] = {"version", NIGHTSHIFT_VERSION, "compiler", __VERSION__};
    metrics_write_sample(b, "nightshift_build_info", build, 2, 1);
    write_process(b, m->started);

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
