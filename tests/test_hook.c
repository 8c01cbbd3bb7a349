/* test_hook.c - the outbound agent hook against real receivers on loopback.
 *
 * Each test builds the daemon's pieces for real (a store in a temporary
 * directory, a scheduler whose worker is the stand-in $NIGHTSHIFT_BAD_WORKER,
 * a core_t) and runs the libuv loop with hard deadlines. The receiver is a
 * separate process (forked from the test) that accepts one connection at a
 * time, saves each raw request as RX/req-NNN.http and answers from a script,
 * so the tests see exactly the bytes and headers that went over the wire.
 * Signatures are checked by an independent implementation (Python's hmac,
 * run with /usr/bin/python3), and every attempt is read back from the
 * hook_deliveries table with a second SQLite connection. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "daemon/core/core.h"
#include "daemon/hook/hook.h"
#include "daemon/shared/log.h"
#include "daemon/exec/sched.h"
#include "daemon/store/store.h"
#include "tests/testutil.h"

TestSuite(hook, .timeout = 30);

#define SECRET "whsec test/key+=\xc3\xa9" /* bytes beyond ASCII: the key is used as given */

/* ------------------------------------------------------------ the receiver */

/* One scripted answer; status 0 closes the connection without answering. */
typedef struct {
    int status;
    const char *body;
} reply_t;

typedef struct {
    pid_t pid;
    int port;
    char *dir; /* requests land here as req-NNN.http */
} receiver_t;

/* A listening socket on 127.0.0.1 with a free port. */
static int listen_loopback(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0, "socket: %s", strerror(errno));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0, "bind: %s", strerror(errno));
    cr_assert_eq(listen(fd, 64), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

static void write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return;
        p += k;
        n -= (size_t)k;
    }
}

/* The child: accept, read one whole request, save it, answer, close; forever.
 * It dies with the test process (a failed assertion never leaves it behind)
 * and keeps none of the test runner's descriptors open. */
static void receiver_main(int lfd, pid_t parent, const char *dir, const reply_t *script, int n) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(0);
    signal(SIGPIPE, SIG_IGN);
    if (dup2(lfd, 3) < 0) _exit(1);
    lfd = 3;
    closefrom(4);
    for (int k = 0;; k++) {
        int c = accept(lfd, NULL, NULL);
        if (c < 0) {
            if (errno == EINTR) {
                k--;
                continue;
            }
            _exit(1);
        }
        size_t cap = 1 << 16, len = 0, want = (size_t)-1;
        char *buf = malloc(cap);
        for (;;) {
            if (len + 1 >= cap) buf = realloc(buf, cap *= 2);
            ssize_t r = read(c, buf + len, cap - len - 1);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            len += (size_t)r;
            buf[len] = '\0';
            char *end = strstr(buf, "\r\n\r\n");
            if (end && want == (size_t)-1) {
                char *cl = strcasestr(buf, "\r\ncontent-length:");
                want = (size_t)(end + 4 - buf) + (cl && cl < end ? strtoul(cl + 17, NULL, 10) : 0);
            }
            if (len >= want) break;
        }
        char tmp[600], path[600];
        snprintf(tmp, sizeof tmp, "%s/.req-%03d", dir, k);
        snprintf(path, sizeof path, "%s/req-%03d.http", dir, k);
        FILE *f = fopen(tmp, "wb");
        if (f) {
            fwrite(buf, 1, len, f);
            fclose(f);
            rename(tmp, path);
        }
        free(buf);
        const reply_t *r = &script[k < n ? k : n - 1];
        if (r->status) {
            size_t blen = strlen(r->body);
            char head[256];
            int hl = snprintf(head, sizeof head,
                              "HTTP/1.1 %d Scripted\r\nContent-Type: application/json\r\n"
                              "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                              r->status, blen);
            write_all(c, head, (size_t)hl);
            write_all(c, r->body, blen);
        }
        close(c);
    }
}

static void receiver_start(receiver_t *rx, const char *dir, const reply_t *script, int n) {
    rx->dir = tu_path("%s", dir);
    cr_assert_eq(mkdir(dir, 0755), 0);
    int lfd = listen_loopback(&rx->port);
    fflush(NULL);
    pid_t parent = getpid();
    rx->pid = fork();
    cr_assert_geq(rx->pid, 0, "fork: %s", strerror(errno));
    if (rx->pid == 0) receiver_main(lfd, parent, dir, script, n);
    close(lfd);
}

static void receiver_stop(receiver_t *rx) {
    if (rx->pid > 0) {
        kill(rx->pid, SIGKILL);
        waitpid(rx->pid, NULL, 0);
        rx->pid = 0;
    }
    free(rx->dir);
    rx->dir = NULL;
}

static int count_requests(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, "req-", 4)) n++;
    closedir(d);
    return n;
}

/* One saved request, split up. Release with req_free. */
typedef struct {
    char *raw;        /* the whole request; headers end at body */
    const char *body; /* into raw */
    char line[256];   /* the request line */
    char id[128], ts[64], sig[256], ctype[128];
    cJSON *json; /* the parsed body */
} req_t;

/* The value of header name (case-insensitive) in the header block of raw. */
static void header(const char *raw, const char *body, const char *name, char *out, size_t len) {
    out[0] = '\0';
    size_t nl = strlen(name);
    for (const char *p = strstr(raw, "\r\n"); p && p + 2 < body; p = strstr(p + 2, "\r\n")) {
        const char *h = p + 2;
        if (!strncasecmp(h, name, nl) && h[nl] == ':') {
            h += nl + 1;
            while (*h == ' ') h++;
            const char *e = strstr(h, "\r\n");
            snprintf(out, len, "%.*s", (int)(e - h), h);
            return;
        }
    }
}

static void req_load(req_t *r, const char *dir, int k) {
    char *path = tu_path("%s/req-%03d.http", dir, k);
    memset(r, 0, sizeof *r);
    r->raw = tu_read(path);
    cr_assert_not_null(r->raw, "%s is missing", path);
    free(path);
    char *end = strstr(r->raw, "\r\n\r\n");
    cr_assert_not_null(end, "request %d has no header end", k);
    r->body = end + 4;
    snprintf(r->line, sizeof r->line, "%.*s", (int)(strstr(r->raw, "\r\n") - r->raw), r->raw);
    header(r->raw, r->body, "webhook-id", r->id, sizeof r->id);
    header(r->raw, r->body, "webhook-timestamp", r->ts, sizeof r->ts);
    header(r->raw, r->body, "webhook-signature", r->sig, sizeof r->sig);
    header(r->raw, r->body, "content-type", r->ctype, sizeof r->ctype);
    r->json = cJSON_Parse(r->body);
    cr_assert_not_null(r->json, "request %d: the body is not JSON: %.200s", k, r->body);
}

static void req_free(req_t *r) {
    free(r->raw);
    cJSON_Delete(r->json);
    memset(r, 0, sizeof *r);
}

static const cJSON *jget(const cJSON *o, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

/* ------------------------------------------------------------ the harness */

typedef struct {
    char *dir;
    uv_loop_t loop;
    store_t *store;
    sched_t *sched;
    core_t core;
    sqlite3 *raw; /* a second, read-only connection, as the sqlite3 shell would see it */
    receiver_t rx;
    hook_t *hook; /* the hook that receives the scheduler's events, if any */
} fx_t;

static char *worker_cmd[3];

static void finished_cb(void *user, int64_t id, const char *status, double seconds) {
    fx_t *f = user;
    (void)status, (void)seconds;
    hook_experiment_finished(f->hook, id);
}

/* The store, the scheduler (slots 1, the stand-in worker in mode "ok") and the
 * API in a new temporary directory, and a receiver answering with script. */
static void fx_init(fx_t *f, const reply_t *script, int n) {
    memset(f, 0, sizeof *f);
    log_threshold = LOG_ERROR;
    f->dir = tu_tmpdir();
    if (script) {
        char *rxdir = tu_path("%s/rx", f->dir);
        receiver_start(&f->rx, rxdir, script, n);
        free(rxdir);
    }
    char err[512];
    char *p = tu_path("%s/datasets", f->dir);
    cr_assert_eq(mkdir(p, 0755), 0);
    free(p);
    p = tu_path("%s/datasets/default", f->dir);
    cr_assert_eq(mkdir(p, 0755), 0);
    free(p);
    p = tu_path("%s/datasets/default/manifest.json", f->dir);
    tu_write(p, "{}\n"); /* the API only checks that the dataset exists */
    free(p);
    p = tu_path("%s/nightshift.db", f->dir);
    cr_assert_eq(store_open(p, &f->store, err, sizeof err), 0, "%s", err);
    cr_assert_eq(sqlite3_open_v2(p, &f->raw, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_busy_timeout(f->raw, 2000);
    free(p);
    cr_assert_eq(uv_loop_init(&f->loop), 0);
    worker_cmd[0] = (char *)tu_bad_worker();
    worker_cmd[1] = "ok";
    sched_opts_t so = {.state_dir = f->dir,
                       .exe = tu_bin(),
                       .worker_cmd = worker_cmd,
                       .slots = 1,
                       .max_attempts = 1,
                       .on_finished = finished_cb,
                       .user = f};
    f->sched = sched_new(&f->loop, f->store, &so, err, sizeof err);
    cr_assert_not_null(f->sched, "%s", err);
    f->core = (core_t){.store = f->store, .sched = f->sched, .state_dir = f->dir};
}

static hook_t *fx_hook(fx_t *f, int port, hook_opts_t o) {
    char err[512], url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/hook", port);
    o.url = url;
    if (!o.secret) o.secret = SECRET;
    o.core = &f->core;
    if (o.backoff_base_s == 0) o.backoff_base_s = 0.02;
    hook_t *h = hook_new(&f->loop, &o, err, sizeof err);
    cr_assert_not_null(h, "hook_new: %s", err);
    return h;
}

typedef int (*pred_fn)(fx_t *f, long arg);

typedef struct {
    fx_t *f;
    pred_fn pred;
    long arg;
    uint64_t deadline;
    int met;
} waiter_t;

static void wait_tick_cb(uv_timer_t *t) {
    waiter_t *w = t->data;
    if (w->pred && w->pred(w->f, w->arg)) {
        w->met = 1;
        uv_stop(t->loop);
    } else if (uv_now(t->loop) >= w->deadline) {
        uv_stop(t->loop);
    }
}

static void nothing_cb(uv_handle_t *h) {
    (void)h;
}

/* Run the loop until pred holds (checked every 5 ms) or timeout_s passes.
 * Returns whether pred held. pred NULL: just run for timeout_s. */
static int run_until(fx_t *f, pred_fn pred, long arg, double timeout_s) {
    waiter_t w = {.f = f, .pred = pred, .arg = arg};
    uv_timer_t t;
    uv_update_time(&f->loop);
    w.deadline = uv_now(&f->loop) + (uint64_t)(timeout_s * 1000);
    if (pred && pred(f, arg)) return 1;
    uv_timer_init(&f->loop, &t);
    t.data = &w;
    uv_timer_start(&t, wait_tick_cb, 5, 5);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    uv_close((uv_handle_t *)&t, nothing_cb);
    uv_run(&f->loop, UV_RUN_NOWAIT); /* the close callback */
    return w.met;
}

static int64_t raw_int(fx_t *f, const char *sql) {
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(f->raw, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(f->raw));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s: %s", sql, sqlite3_errmsg(f->raw));
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

static int has_requests(fx_t *f, long n) {
    return count_requests(f->rx.dir) >= n;
}

static int has_deliveries(fx_t *f, long n) {
    return raw_int(f, "SELECT count(*) FROM hook_deliveries") >= n;
}

static int has_agent_experiments(fx_t *f, long n) {
    return raw_int(f, "SELECT count(*) FROM experiments WHERE source = 'agent'") >= n;
}

/* The index of the first saved request of event type, or -1. */
static int find_request(fx_t *f, const char *type) {
    int n = count_requests(f->rx.dir);
    for (int k = 0; k < n; k++) {
        req_t r;
        req_load(&r, f->rx.dir, k);
        int match = !strcmp(tu_jstr(r.json, "type"), type);
        req_free(&r);
        if (match) return k;
    }
    return -1;
}

static int has_finished_event(fx_t *f, long unused) {
    (void)unused;
    return find_request(f, "experiment.finished") >= 0;
}

static int fx_closed_count, sched_stopped; /* set by the callbacks below */

static void count_closed_cb(void *arg) {
    (*(int *)arg)++;
}

static void stopped_cb(void *arg) {
    *(int *)arg = 1;
}

static int counter_at_least(fx_t *f, long n) {
    (void)f;
    return fx_closed_count >= n;
}

static int flag_set(fx_t *f, long unused) {
    (void)f, (void)unused;
    return sched_stopped;
}

/* Close the hooks, stop the scheduler, check that every handle closed, and
 * remove everything. */
static void fx_close(fx_t *f, hook_t **hooks, int n) {
    fx_closed_count = 0;
    f->hook = NULL;
    for (int i = 0; i < n; i++) hook_close(hooks[i], count_closed_cb, &fx_closed_count);
    cr_assert(run_until(f, counter_at_least, n, 5), "hook_close never finished");
    sched_stopped = 0;
    sched_shutdown(f->sched, stopped_cb, &sched_stopped);
    cr_assert(run_until(f, flag_set, 0, 10), "the scheduler never stopped");
    sched_free(f->sched);
    for (int i = 0; i < 100 && uv_loop_alive(&f->loop); i++) uv_run(&f->loop, UV_RUN_NOWAIT);
    cr_assert_eq(uv_loop_close(&f->loop), 0, "handles left open on the loop");
    sqlite3_close(f->raw);
    store_close(f->store);
    receiver_stop(&f->rx);
    tu_rmrf(f->dir);
    free(f->dir);
}

/* Attempts of one event: "attempt:status:error|..." (status/error "-" when NULL). */
static char *attempts_of(fx_t *f, const char *event_id) {
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(f->raw,
                                    "SELECT attempt, http_status, error, latency_ms, created"
                                    " FROM hook_deliveries WHERE event_id = ?1 ORDER BY id",
                                    -1, &st, NULL),
                 SQLITE_OK);
    sqlite3_bind_text(st, 1, event_id, -1, SQLITE_STATIC);
    char out[4096] = "";
    size_t len = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *status = (const char *)sqlite3_column_text(st, 1);
        const char *error = (const char *)sqlite3_column_text(st, 2);
        const char *created = (const char *)sqlite3_column_text(st, 4);
        cr_expect_geq(sqlite3_column_int64(st, 3), 0);
        cr_expect(created && strlen(created) == 24 && created[23] == 'Z', "created: %s", created);
        len +=
            (size_t)snprintf(out + len, sizeof out - len, "%s%d:%s:%s", len ? "|" : "",
                             sqlite3_column_int(st, 0), status ? status : "-", error ? error : "-");
    }
    sqlite3_finalize(st);
    return strdup(out);
}

/* Python's hmac over the bytes of file path, base64 (an independent check). */
static void python_signature(const char *secret, const char *path, char *out, size_t len) {
    char *cmd = tu_path("/usr/bin/python3 -c 'import base64, hashlib, hmac, os, sys;"
                        " m = open(sys.argv[2], \"rb\").read();"
                        " d = hmac.new(os.fsencode(sys.argv[1]), m, hashlib.sha256).digest();"
                        " print(base64.b64encode(d).decode())' '%s' '%s'",
                        secret, path);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    out[0] = '\0';
    if (!fgets(out, (int)len, p)) out[0] = '\0';
    cr_assert_eq(pclose(p), 0, "python3 failed: %s", cmd);
    free(cmd);
    out[strcspn(out, "\n")] = '\0';
}

/* ------------------------------------------------------------------ tests */

Test(hook, signs_events_the_standard_webhooks_way) {
    fx_t f;
    reply_t script[] = {{200, ""}};
    fx_init(&f, script, 1);
    hook_t *h = fx_hook(&f, f.rx.port, (hook_opts_t){0});
    hook_queue_empty(h);
    hook_queue_empty(h); /* while one is pending a second adds nothing */
    cr_assert(run_until(&f, has_deliveries, 1, 5), "nothing was delivered");
    run_until(&f, NULL, 0, 0.1);
    cr_assert_eq(count_requests(f.rx.dir), 1);

    req_t r;
    req_load(&r, f.rx.dir, 0);
    cr_expect_str_eq(r.line, "POST /hook HTTP/1.1");
    cr_expect_str_eq(r.ctype, "application/json");
    cr_expect_eq(strlen(r.id), 36, "webhook-id: %s", r.id);
    cr_expect_eq(strncmp(r.id, "evt_", 4), 0);
    cr_expect_eq(strspn(r.id + 4, "0123456789abcdef"), 32, "webhook-id: %s", r.id);
    long ts = strtol(r.ts, NULL, 10);
    cr_expect_lt(labs(ts - (long)time(NULL)), 10, "webhook-timestamp: %s", r.ts);
    cr_assert_eq(strncmp(r.sig, "v1,", 3), 0, "webhook-signature: %s", r.sig);

    /* id.timestamp.body, signed with the secret's bytes, checked by Python */
    char *msg = tu_path("%s/signed.txt", f.dir), expect[128], other[128];
    char *signed_text = tu_path("%s.%s.%s", r.id, r.ts, r.body);
    tu_write(msg, signed_text);
    python_signature(SECRET, msg, expect, sizeof expect);
    cr_expect_str_eq(r.sig + 3, expect, "our signature differs from Python's");
    python_signature("another secret", msg, other, sizeof other);
    cr_expect_str_neq(r.sig + 3, other, "the check cannot tell secrets apart");
    free(signed_text);
    free(msg);

    /* the payload */
    cr_expect_str_eq(tu_jstr(r.json, "id"), r.id);
    cr_expect_str_eq(tu_jstr(r.json, "type"), "queue.empty");
    const char *created = tu_jstr(r.json, "created");
    cr_expect(created && strlen(created) == 24, "created: %s", created);
    cr_expect(cJSON_IsNull(jget(r.json, "experiment")));
    cr_expect(cJSON_IsNull(jget(r.json, "rejected")));
    cr_expect(cJSON_IsNull(jget(r.json, "best")));
    cr_expect(cJSON_IsArray(jget(r.json, "recent")) && !jget(r.json, "recent")->child);
    cr_expect_eq(cJSON_GetNumberValue(jget(r.json, "queue_depth")), 0);
    cr_expect_eq(cJSON_GetNumberValue(jget(r.json, "running")), 0);
    const cJSON *model = jget(jget(r.json, "defaults"), "model");
    cr_expect(cJSON_IsNumber(jget(model, "n_embd")), "defaults.model.n_embd is missing");
    cr_expect_str_eq(tu_jstr(model, "ve_layers"), "alternate");

    char *a = attempts_of(&f, r.id);
    cr_expect_str_eq(a, "1:200:-");
    free(a);
    req_free(&r);
    fx_close(&f, &h, 1);
}

Test(hook, retries_server_errors_with_one_event_id) {
    fx_t f;
    reply_t script[] = {{503, "{\"error\":\"busy\"}"}, {503, ""}, {200, ""}};
    fx_init(&f, script, 3);
    hook_t *h = fx_hook(&f, f.rx.port, (hook_opts_t){0});
    hook_queue_empty(h);
    cr_assert(run_until(&f, has_deliveries, 3, 10), "three attempts were not made");
    run_until(&f, NULL, 0, 0.1); /* nothing more may come */
    cr_assert_eq(count_requests(f.rx.dir), 3);

    req_t r[3];
    for (int k = 0; k < 3; k++) req_load(&r[k], f.rx.dir, k);
    for (int k = 1; k < 3; k++) {
        cr_expect_str_eq(r[k].id, r[0].id, "a retry changed the event id");
        cr_expect_str_eq(r[k].body, r[0].body, "a retry changed the payload");
    }
    char *a = attempts_of(&f, r[0].id);
    cr_expect_str_eq(a, "1:503:HTTP 503: {\"error\":\"busy\"}|2:503:HTTP 503|3:200:-");
    free(a);
    cr_expect_eq(raw_int(&f, "SELECT count(*) FROM hook_deliveries"), 3);
    for (int k = 0; k < 3; k++) req_free(&r[k]);
    fx_close(&f, &h, 1);
}

Test(hook, client_errors_are_not_retried_and_attempts_are_bounded) {
    fx_t f;
    reply_t script[] = {{404, "no such hook"}, {500, ""}};
    fx_init(&f, script, 2);
    hook_t *h = fx_hook(&f, f.rx.port, (hook_opts_t){.max_attempts = 3});
    tu_stderr_begin(); /* the daemon's log of the failed deliveries, checked below */
    hook_queue_empty(h);
    cr_assert(run_until(&f, has_deliveries, 1, 5));
    run_until(&f, NULL, 0, 0.1);
    cr_assert_eq(count_requests(f.rx.dir), 1, "a 404 was retried");
    hook_queue_empty(h); /* a new event; the receiver now answers 500 */
    cr_assert(run_until(&f, has_deliveries, 4, 10));
    run_until(&f, NULL, 0, 0.2);
    char *logged = tu_stderr_end();
    cr_expect(strstr(logged, "not delivered: HTTP 404: no such hook (attempt 1, not retried)"),
              "%s", logged);
    cr_expect(strstr(logged, "not delivered: HTTP 500 (attempt 3, the last allowed)"), "%s",
              logged);
    free(logged);
    cr_assert_eq(count_requests(f.rx.dir), 4, "more than max_attempts attempts");

    req_t r0, r1;
    req_load(&r0, f.rx.dir, 0);
    req_load(&r1, f.rx.dir, 1);
    cr_expect_str_neq(r0.id, r1.id);
    char *a = attempts_of(&f, r0.id);
    cr_expect_str_eq(a, "1:404:HTTP 404: no such hook");
    free(a);
    a = attempts_of(&f, r1.id);
    cr_expect_str_eq(a, "1:500:HTTP 500|2:500:HTTP 500|3:500:HTTP 500");
    free(a);
    req_free(&r0);
    req_free(&r1);
    fx_close(&f, &h, 1);
}

typedef struct {
    uint64_t started, fired;
} tick_t;

static void tick_cb(uv_timer_t *t) {
    tick_t *k = t->data;
    k->fired = uv_hrtime();
}

static int good_delivered(fx_t *f, long unused) {
    (void)unused;
    return count_requests(f->rx.dir) >= 1 &&
           raw_int(f, "SELECT count(*) FROM hook_deliveries WHERE http_status = 200") >= 1;
}

Test(hook, a_dead_agent_delays_nothing_else) {
    fx_t f;
    reply_t script[] = {{200, ""}};
    fx_init(&f, script, 1);
    /* refused: a port nobody listens on; black hole: accepts into the backlog, never answers */
    int refused_port, hole_port;
    close(listen_loopback(&refused_port));
    int hole = listen_loopback(&hole_port);
    hook_t *hooks[3];
    hooks[0] = fx_hook(&f, refused_port, (hook_opts_t){.max_attempts = 1000});
    hooks[1] = fx_hook(&f, hole_port, (hook_opts_t){.timeout_s = 20});
    hook_queue_empty(hooks[0]);
    hook_queue_empty(hooks[1]);
    run_until(&f, NULL, 0, 0.2); /* both are failing or waiting now */

    tick_t k = {.started = uv_hrtime()};
    uv_timer_t t;
    uv_timer_init(&f.loop, &t);
    t.data = &k;
    uv_timer_start(&t, tick_cb, 100, 0);
    uint64_t t0 = uv_hrtime();
    hooks[2] = fx_hook(&f, f.rx.port, (hook_opts_t){0});
    hook_queue_empty(hooks[2]);
    cr_assert(run_until(&f, good_delivered, 0, 5), "the good agent got nothing");
    double good_s = (uv_hrtime() - t0) / 1e9;
    cr_expect_lt(good_s, 2.0, "the good agent waited %.2f s", good_s);
    run_until(&f, NULL, 0, 0.15);
    cr_assert_neq(k.fired, 0, "a 100 ms timer never fired");
    double late_s = (k.fired - k.started) / 1e9 - 0.1;
    cr_expect_lt(late_s, 0.5, "a 100 ms timer fired %.2f s late", late_s);
    uv_close((uv_handle_t *)&t, nothing_cb);

    /* the refused agent was retried meanwhile, without a status */
    cr_expect_geq(raw_int(&f, "SELECT count(*) FROM hook_deliveries WHERE http_status IS NULL"
                              " AND error LIKE '%onnect%'"),
                  2, "the refused agent was not retried");
    fx_close(&f, hooks, 3);
    close(hole);
}

Test(hook, shutdown_records_the_attempts_in_flight) {
    fx_t f;
    reply_t script[] = {{200, ""}};
    fx_init(&f, script, 1);
    int hole_port, hole = listen_loopback(&hole_port);
    hook_t *h = fx_hook(&f, hole_port, (hook_opts_t){.timeout_s = 20});
    hook_queue_empty(h);
    run_until(&f, NULL, 0, 0.2);
    cr_expect_eq(raw_int(&f, "SELECT count(*) FROM hook_deliveries"), 0);
    fx_closed_count = 0;
    hook_close(h, count_closed_cb, &fx_closed_count);
    cr_assert(run_until(&f, counter_at_least, 1, 5));
    cr_expect_eq(raw_int(&f, "SELECT count(*) FROM hook_deliveries WHERE attempt = 1 AND"
                             " http_status IS NULL AND error = 'daemon shutting down'"),
                 1);
    fx_close(&f, NULL, 0);
    close(hole);
}

Test(hook, at_most_four_transfers_run_at_once) {
    fx_t f;
    fx_init(&f, NULL, 0);
    int hole_port, hole = listen_loopback(&hole_port);
    char err[256];
    int64_t id[7];
    store_new_experiment_t e = {
        .spec_json = "{}", .config_hash = "x", .scope = {"default", "time", 300}, .source = "api"};
    for (int i = 0; i < 7; i++)
        cr_assert_eq(store_insert(f.store, &e, &id[i], err, sizeof err), 0, "%s", err);
    hook_t *h = fx_hook(&f, hole_port, (hook_opts_t){.timeout_s = 20});
    for (int i = 0; i < 7; i++) hook_experiment_finished(h, id[i]);
    run_until(&f, NULL, 0, 0.3);
    fx_closed_count = 0;
    hook_close(h, count_closed_cb, &fx_closed_count);
    cr_assert(run_until(&f, counter_at_least, 1, 5));
    /* the attempts in flight are recorded at shutdown; the waiting ones never started */
    cr_expect_eq(raw_int(&f, "SELECT count(*) FROM hook_deliveries"
                             " WHERE error = 'daemon shutting down'"),
                 4);
    cr_expect_eq(raw_int(&f, "SELECT count(DISTINCT event_id) FROM hook_deliveries"), 4);
    fx_close(&f, NULL, 0);
    close(hole);
}

Test(hook, a_reply_with_two_specs_queues_two) {
    fx_t f;
    reply_t script[] = {{200, "[{\"name\":\"p1\",\"seed\":1},{\"name\":\"p2\",\"seed\":2}]"},
                        {201, "{\"name\":\"p1 again\",\"seed\":1}"}};
    fx_init(&f, script, 2);
    hook_t *h = fx_hook(&f, f.rx.port, (hook_opts_t){0});
    hook_queue_empty(h);
    cr_assert(run_until(&f, has_agent_experiments, 2, 5), "the proposals were not queued");
    cr_expect_eq(raw_int(&f, "SELECT count(*) FROM experiments WHERE source = 'agent'"
                             " AND name IN ('p1', 'p2')"),
                 2);
    /* the same spec again (only the name differs) is a duplicate */
    run_until(&f, NULL, 0, 0.05);
    hook_queue_empty(h);
    cr_assert(run_until(&f, has_deliveries, 2, 5));
    run_until(&f, NULL, 0, 0.1);
    cr_expect_eq(raw_int(&f, "SELECT count(*) FROM experiments"), 2, "a duplicate was queued");
    cr_expect_eq(count_requests(f.rx.dir), 2, "a valid reply was answered with an event");
    fx_close(&f, &h, 1);
}

/* The rejected events among the saved requests whose error contains what;
 * returns how many. */
static int count_rejected(fx_t *f, const char *what) {
    int n = count_requests(f->rx.dir), found = 0;
    for (int k = 0; k < n; k++) {
        req_t r;
        req_load(&r, f->rx.dir, k);
        const char *error = tu_jstr(jget(r.json, "rejected"), "error");
        if (!strcmp(tu_jstr(r.json, "type"), "experiment.rejected") && error && strstr(error, what))
            found++;
        req_free(&r);
    }
    return found;
}

static int has_rate_limited(fx_t *f, long n) {
    return count_rejected(f, "rate limited") >= n;
}

/* An agent that answers with more proposals than the bucket holds gets the
 * rest back as experiment.rejected, and they are not queued. */
Test(hook, accepted_proposals_are_rate_limited) {
    fx_t f;
    reply_t script[] = {{200, "[{\"name\":\"r1\",\"seed\":1},{\"name\":\"r2\",\"seed\":2},"
                              "{\"name\":\"r3\",\"seed\":3},{\"name\":\"r4\",\"seed\":4},"
                              "{\"name\":\"r5\",\"seed\":5}]"},
                        {200, ""}};
    fx_init(&f, script, 2);
    hook_t *h = fx_hook(&f, f.rx.port, (hook_opts_t){.proposals_per_min = 3});
    hook_queue_empty(h);
    cr_assert(run_until(&f, has_rate_limited, 2, 5), "no rate-limited experiment.rejected came");
    run_until(&f, NULL, 0, 0.1);
    cr_expect_eq(raw_int(&f, "SELECT count(*) FROM experiments WHERE source = 'agent'"), 3,
                 "the rate limit of 3 was not applied");
    cr_expect_eq(raw_int(&f, "SELECT count(*) FROM experiments WHERE name IN ('r4', 'r5')"), 0);
    cr_expect_eq(count_rejected(&f, "rate limited"), 2);
    fx_close(&f, &h, 1);
}

static int has_two_rejected(fx_t *f, long unused) {
    (void)unused;
    return count_rejected(f, "invalid JSON") >= 2;
}

/* A NUL (escaped) or a raw control byte inside a string makes the reply
 * malformed rather than silently truncated or accepted. */
Test(hook, a_reply_with_a_nul_or_control_byte_is_malformed) {
    fx_t f;
    reply_t script[] = {{200, "{\"name\":\"a\\u0000b\",\"seed\":5}"},
                        {200, "{\"name\":\"a\x01z\",\"seed\":6}"},
                        {200, ""}};
    fx_init(&f, script, 3);
    hook_t *h = fx_hook(&f, f.rx.port, (hook_opts_t){0});
    hook_queue_empty(h);
    cr_assert(run_until(&f, has_two_rejected, 0, 5), "the malformed replies were not rejected");
    cr_expect_eq(count_rejected(&f, "\\u0000 is not allowed"), 1);
    cr_expect_eq(count_rejected(&f, "control character"), 1);
    cr_expect_eq(raw_int(&f, "SELECT count(*) FROM experiments"), 0);
    fx_close(&f, &h, 1);
}

Test(hook, an_invalid_reply_yields_experiment_rejected) {
    fx_t f;
    /* the rejected event's own reply is handled like any other: JSON with
     * trailing garbage is malformed too */
    reply_t script[] = {{200, "this is not json"}, {200, "{\"name\":\"x\"} trailing"}, {200, ""}};
    fx_init(&f, script, 3);
    hook_t *h = fx_hook(&f, f.rx.port, (hook_opts_t){0});
    hook_queue_empty(h);
    cr_assert(run_until(&f, has_requests, 3, 5), "no experiment.rejected came");
    run_until(&f, NULL, 0, 0.1);
    cr_expect_eq(count_requests(f.rx.dir), 3, "the last rejected event was answered again");

    req_t r0, r1;
    req_load(&r0, f.rx.dir, 0);
    req_load(&r1, f.rx.dir, 1);
    cr_expect_str_eq(tu_jstr(r1.json, "type"), "experiment.rejected");
    cr_expect_str_neq(r1.id, r0.id);
    const cJSON *rej = jget(r1.json, "rejected");
    cr_expect_str_eq(tu_jstr(rej, "proposal"), "this is not json");
    cr_expect_str_eq(tu_jstr(rej, "error"), "reply is not a spec or an array of specs: "
                                            "invalid JSON at line 1, column 1: not valid JSON");
    cr_expect(cJSON_IsNull(jget(r1.json, "experiment")));
    req_t r2;
    req_load(&r2, f.rx.dir, 2);
    cr_expect_str_eq(tu_jstr(r2.json, "type"), "experiment.rejected");
    cr_expect_str_eq(tu_jstr(jget(r2.json, "rejected"), "proposal"), "{\"name\":\"x\"} trailing");
    req_free(&r2);
    /* the malformed reply was a delivery all the same */
    char *a = attempts_of(&f, r0.id);
    cr_expect_str_eq(a, "1:200:-");
    free(a);
    cr_expect_eq(raw_int(&f, "SELECT count(*) FROM experiments"), 0);
    req_free(&r0);
    req_free(&r1);
    fx_close(&f, &h, 1);
}

Test(hook, each_invalid_proposal_is_rejected_and_the_valid_ones_queue) {
    fx_t f;
    reply_t script[] = {{200, "[{\"name\":\"good\",\"seed\":3},{\"model\":{\"n_head\":7}},"
                              "{\"nope\":1}, 42]"},
                        {200, "null"},
                        {200, "{}"},
                        {200, " [] "}};
    fx_init(&f, script, 4);
    hook_t *h = fx_hook(&f, f.rx.port, (hook_opts_t){0});
    hook_queue_empty(h);
    cr_assert(run_until(&f, has_requests, 4, 5), "three experiment.rejected events expected");
    run_until(&f, NULL, 0, 0.1);
    cr_expect_eq(count_requests(f.rx.dir), 4);
    cr_expect_eq(raw_int(&f, "SELECT count(*) FROM experiments WHERE name = 'good'"), 1);
    int seen = 0;
    for (int k = 1; k < 4; k++) {
        req_t r;
        req_load(&r, f.rx.dir, k);
        cr_expect_str_eq(tu_jstr(r.json, "type"), "experiment.rejected");
        const cJSON *rej = jget(r.json, "rejected"), *prop = jget(rej, "proposal");
        const char *error = tu_jstr(rej, "error");
        cr_assert_not_null(error);
        if (cJSON_IsNumber(prop)) {
            seen |= 1;
            cr_expect(strstr(error, "object"), "error: %s", error);
        } else if (jget(prop, "nope")) {
            seen |= 2;
            cr_expect(strstr(error, "nope"), "error: %s", error);
        } else if (jget(prop, "model")) {
            seen |= 4;
            cr_expect(strstr(error, "model.n_head"), "error: %s", error);
        }
        req_free(&r);
    }
    cr_expect_eq(seen, 7, "not every bad proposal was rejected (%d)", seen);
    cr_expect_eq(raw_int(&f, "SELECT count(*) FROM hook_deliveries WHERE http_status = 200"), 4);
    fx_close(&f, &h, 1);
}

static int count_type(fx_t *f, const char *type) {
    int n = count_requests(f->rx.dir), found = 0;
    for (int k = 0; k < n; k++) {
        req_t r;
        req_load(&r, f->rx.dir, k);
        found += !strcmp(tu_jstr(r.json, "type"), type);
        req_free(&r);
    }
    return found;
}

static int has_rejected(fx_t *f, long n) {
    return count_type(f, "experiment.rejected") >= n;
}

/* Every experiment.rejected says why in a code an agent can decide on; the
 * message stays for people. */
Test(hook, every_rejection_carries_its_code) {
    static char too_many[1024];
    size_t n = (size_t)snprintf(too_many, sizeof too_many, "[");
    for (int i = 0; i < 65; i++)
        n += (size_t)snprintf(too_many + n, sizeof too_many - n, "%s{}", i ? "," : "");
    snprintf(too_many + n, sizeof too_many - n, "]");
    /* With one proposal a minute, "ok" takes the token and "later" finds none. */
    reply_t script[] = {{200, "[{\"model\":{\"n_head\":7}},"
                              "{\"name\":\"orphan\",\"seed\":2,\"parent\":999},"
                              "{\"name\":\"huge\",\"seed\":3,\"dataset\":\"sized\","
                              "\"resources\":{\"memory_mb\":1}},"
                              "{\"name\":\"ok\",\"seed\":4},{\"name\":\"later\",\"seed\":5}]"},
                        {200, "not json"},
                        {200, too_many},
                        {200, ""}};
    fx_t f;
    fx_init(&f, script, 4);
    char *dir = tu_path("%s/datasets/sized", f.dir);
    cr_assert_eq(mkdir(dir, 0755), 0);
    char *manifest = tu_path("%s/manifest.json", dir);
    tu_write(manifest, "{\"vocab_size\":4096,\"train_tokens\":1000000,\"val_tokens\":1000}\n");
    free(manifest);
    free(dir);
    hook_t *h = fx_hook(&f, f.rx.port, (hook_opts_t){.proposals_per_min = 1});
    hook_queue_empty(h);
    cr_assert(run_until(&f, has_rejected, 6, 10), "six experiment.rejected events expected");
    run_until(&f, NULL, 0, 0.1);
    cr_expect_eq(count_type(&f, "experiment.rejected"), 6);

    static const char *const codes[] = {"invalid_spec", "unknown_parent",  "does_not_fit",
                                        "rate_limited", "malformed_reply", "too_many_proposals"};
    int seen[6] = {0};
    for (int k = 0; k < count_requests(f.rx.dir); k++) {
        req_t r;
        req_load(&r, f.rx.dir, k);
        if (strcmp(tu_jstr(r.json, "type"), "experiment.rejected")) {
            req_free(&r);
            continue;
        }
        const cJSON *rej = jget(r.json, "rejected"), *prop = jget(rej, "proposal");
        const char *code = tu_jstr(rej, "code"), *error = tu_jstr(rej, "error");
        const char *name = tu_jstr(prop, "name");
        cr_assert_not_null(code, "no code: %s", r.body);
        cr_assert_not_null(error);
        int i = 0;
        while (i < 6 && strcmp(code, codes[i])) i++;
        cr_assert_lt(i, 6, "unknown code %s", code);
        seen[i]++;
        if (i == 0) {
            cr_expect_not_null(jget(prop, "model"));
            cr_expect(strstr(error, "model.n_head"), "error: %s", error);
        } else if (i == 1) {
            cr_expect_str_eq(name, "orphan");
            cr_expect_str_eq(error, "parent: experiment 999 does not exist");
        } else if (i == 2) {
            cr_expect_str_eq(name, "huge");
            cr_expect(!strncmp(error, "needs ~", 7), "error: %s", error);
        } else if (i == 3) {
            cr_expect_str_eq(name, "later");
            cr_expect(!strncmp(error, "rate limited", 12), "error: %s", error);
        } else if (i == 4) {
            cr_expect_str_eq(cJSON_GetStringValue(prop), "not json");
        } else {
            cr_expect_eq(cJSON_GetArraySize(prop), 65);
        }
        req_free(&r);
    }
    for (int i = 0; i < 6; i++) cr_expect_eq(seen[i], 1, "%s seen %d times", codes[i], seen[i]);
    cr_expect_eq(raw_int(&f, "SELECT count(*) FROM experiments WHERE source = 'agent'"), 1);
    fx_close(&f, &h, 1);
}

Test(hook, rejected_events_are_capped_per_minute) {
    fx_t f;
    static char reply[2048];
    size_t n = (size_t)snprintf(reply, sizeof reply, "[");
    for (int i = 0; i < 20; i++)
        n += (size_t)snprintf(reply + n, sizeof reply - n, "%s{\"bogus\":%d}", i ? "," : "", i);
    snprintf(reply + n, sizeof reply - n, "]");
    reply_t script[] = {{200, reply}, {200, ""}};
    fx_init(&f, script, 2);
    hook_t *h = fx_hook(&f, f.rx.port, (hook_opts_t){0});
    hook_queue_empty(h);
    cr_assert(run_until(&f, has_requests, 17, 10), "expected 16 experiment.rejected events");
    run_until(&f, NULL, 0, 0.2);
    cr_expect_eq(count_requests(f.rx.dir), 17, "the cap of 16 a minute was not applied");
    fx_close(&f, &h, 1);
}

Test(hook, an_oversized_reply_is_malformed) {
    fx_t f;
    size_t big = (1 << 20) + (1 << 18);
    char *reply = malloc(big + 1);
    memset(reply, ' ', big);
    reply[0] = '[';
    reply[big - 1] = ']';
    reply[big] = '\0';
    reply_t script[] = {{200, reply}, {200, ""}};
    fx_init(&f, script, 2);
    hook_t *h = fx_hook(&f, f.rx.port, (hook_opts_t){0});
    hook_queue_empty(h);
    cr_assert(run_until(&f, has_requests, 2, 5), "no experiment.rejected came");
    req_t r;
    req_load(&r, f.rx.dir, 1);
    const cJSON *rej = jget(r.json, "rejected");
    cr_expect_str_eq(tu_jstr(r.json, "type"), "experiment.rejected");
    cr_expect(strstr(tu_jstr(rej, "error"), "larger than 1048576"), "error: %s",
              tu_jstr(rej, "error"));
    cr_expect_leq(strlen(tu_jstr(rej, "proposal")), 4096);
    req_free(&r);
    fx_close(&f, &h, 1);
    free(reply);
}

Test(hook, queue_empty_is_resent_while_idle_and_stops_when_work_appears) {
    fx_t f;
    reply_t script[] = {{200, ""}};
    fx_init(&f, script, 1);
    hook_t *h = fx_hook(&f, f.rx.port, (hook_opts_t){.idle_resend_s = 0.1});
    hook_queue_empty(h);
    hook_queue_empty(h); /* a second call while the first is pending adds nothing */
    cr_assert(run_until(&f, has_requests, 3, 5), "queue.empty was not re-sent");
    req_t r0, r1;
    req_load(&r0, f.rx.dir, 0);
    req_load(&r1, f.rx.dir, 1);
    cr_expect_str_eq(tu_jstr(r1.json, "type"), "queue.empty");
    cr_expect_str_neq(r0.id, r1.id);
    req_free(&r0);
    req_free(&r1);

    /* work appears: one queued experiment (not started: no kick) */
    char err[256];
    int64_t id;
    store_new_experiment_t e = {
        .spec_json = "{}", .config_hash = "x", .scope = {"default", "time", 300}, .source = "api"};
    cr_assert_eq(store_insert(f.store, &e, &id, err, sizeof err), 0, "%s", err);
    run_until(&f, NULL, 0, 0.15);
    int n = count_requests(f.rx.dir);
    run_until(&f, NULL, 0, 0.35);
    cr_expect_eq(count_requests(f.rx.dir), n, "queue.empty was sent with work queued");
    fx_close(&f, &h, 1);
}

Test(hook, a_finished_experiment_is_reported_with_its_result_and_history) {
    fx_t f;
    reply_t script[] = {{200, "{\"name\":\"first\",\"seed\":5,\"tags\":[\"agent\"]}"}, {200, ""}};
    fx_init(&f, script, 2);
    f.hook = fx_hook(&f, f.rx.port, (hook_opts_t){0});
    hook_queue_empty(f.hook);
    cr_assert(run_until(&f, has_finished_event, 0, 10), "no experiment.finished came");
    int64_t id = raw_int(&f, "SELECT id FROM experiments WHERE name = 'first'");
    req_t r;
    req_load(&r, f.rx.dir, find_request(&f, "experiment.finished"));
    const cJSON *e = jget(r.json, "experiment");
    cr_expect_eq(cJSON_GetNumberValue(jget(e, "id")), (double)id);
    cr_expect_str_eq(tu_jstr(e, "status"), "succeeded");
    cr_expect(cJSON_IsNull(jget(e, "reason")));
    cr_expect_str_eq(tu_jstr(jget(e, "spec"), "name"), "first");
    cr_expect(fabs(cJSON_GetNumberValue(jget(jget(e, "result"), "val_bpb")) - 1.2345) < 1e-9);
    const cJSON *best = jget(r.json, "best");
    cr_expect_eq(cJSON_GetNumberValue(jget(best, "id")), (double)id);
    cr_expect(fabs(cJSON_GetNumberValue(jget(best, "val_bpb")) - 1.2345) < 1e-9);
    cr_expect(cJSON_IsObject(jget(best, "spec")) && cJSON_IsObject(jget(best, "result")));
    const cJSON *recent = jget(r.json, "recent");
    cr_expect_eq(cJSON_GetArraySize(recent), 1);
    const cJSON *r0 = cJSON_GetArrayItem(recent, 0);
    cr_expect_eq(cJSON_GetNumberValue(jget(r0, "id")), (double)id);
    cr_expect_str_eq(tu_jstr(r0, "status"), "succeeded");
    cr_expect(fabs(cJSON_GetNumberValue(jget(r0, "val_bpb")) - 1.2345) < 1e-9);
    cr_expect(cJSON_IsObject(jget(r0, "spec")));
    cr_expect_eq(cJSON_GetNumberValue(jget(r.json, "queue_depth")), 0);
    req_free(&r);
    cr_expect_eq(raw_int(&f, "SELECT source = 'agent' FROM experiments WHERE name = 'first'"), 1);
    hook_t *h = f.hook;
    fx_close(&f, &h, 1);
}

static int has_finished_events(fx_t *f, long n) {
    return count_type(f, "experiment.finished") >= n;
}

/* The payload's best is a configuration's: its mean, sd and number of seeds
 * beside its first run; and the scope's measured noise (what GET /v1/noise
 * answers) rides along, for an agent that can read nothing else. */
Test(hook, the_best_carries_its_mean_sd_and_seeds_and_the_noise_rides_along) {
    fx_t f;
    reply_t script[] = {{200, "[{\"name\":\"a\",\"seed\":5},{\"name\":\"a\",\"seed\":6}]"},
                        {200, ""},
                        {200, ""},
                        {200, ""}};
    fx_init(&f, script, 4);
    f.hook = fx_hook(&f, f.rx.port, (hook_opts_t){0});
    hook_queue_empty(f.hook);
    cr_assert(run_until(&f, has_finished_events, 2, 15), "no second experiment.finished came");
    int n = count_requests(f.rx.dir), last = -1;
    for (int k = 0; k < n; k++) {
        req_t r;
        req_load(&r, f.rx.dir, k);
        if (!strcmp(tu_jstr(r.json, "type"), "experiment.finished")) last = k;
        req_free(&r);
    }
    req_t r;
    req_load(&r, f.rx.dir, last);
    const cJSON *best = jget(r.json, "best");
    cr_assert(cJSON_IsObject(best), "no best");
    cr_expect(fabs(cJSON_GetNumberValue(jget(best, "mean_val_bpb")) - 1.2345) < 1e-9);
    cr_expect(cJSON_IsNumber(jget(best, "val_bpb_sd")), "two seeds have an sd");
    cr_expect_eq(cJSON_GetNumberValue(jget(best, "n_seeds")), 2);
    cr_expect_eq(cJSON_GetArraySize(jget(best, "seeds")), 2);
    const cJSON *noise = jget(r.json, "noise");
    cr_assert(cJSON_IsObject(noise), "no noise in the payload");
    cr_expect_str_eq(tu_jstr(noise, "dataset"), "default");
    cr_expect(cJSON_IsNumber(jget(noise, "sd")), "the pooled sd of the two seeds");
    cr_expect_eq(cJSON_GetNumberValue(jget(noise, "configurations")), 1);
    cr_expect_eq(cJSON_GetNumberValue(jget(noise, "runs")), 2);
    cr_expect_eq(cJSON_GetNumberValue(jget(noise, "df")), 1);
    req_free(&r);
    hook_t *h = f.hook;
    fx_close(&f, &h, 1);
}

Test(hook, refuses_a_bad_configuration) {
    fx_t f;
    fx_init(&f, NULL, 0);
    char err[512];
    static const struct {
        const char *url, *secret, *want;
    } cases[] = {
        {"ftp://127.0.0.1/x", SECRET, "only http and https"},
        {"not a url", SECRET, "agent URL"},
        {"", SECRET, "no agent URL"},
        {"http://127.0.0.1:9/", NULL, "secret"},
        {"http://127.0.0.1:9/", "", "secret"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hook_opts_t o = {.url = cases[i].url, .secret = cases[i].secret, .core = &f.core};
        err[0] = '\0';
        hook_t *h = hook_new(&f.loop, &o, err, sizeof err);
        cr_expect_null(h, "%s was accepted", cases[i].url);
        cr_expect(strstr(err, cases[i].want), "%s: err: %s", cases[i].url, err);
    }
    fx_close(&f, NULL, 0);
}
