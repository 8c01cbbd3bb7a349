/* test_events.c - the event log and the exports: the events table as a feed
 * (ids increase, `after` resumes exactly, nothing is skipped across a daemon
 * restart), the hook's persistent outbox (events pending when the daemon
 * stops are delivered after the restart with the same webhook-id), the SSE
 * stream (a new event arrives; a reconnect resumes from Last-Event-ID; the
 * number of streams is bounded), and the exports (CSV read back with
 * Python's csv module, autoresearch's results.tsv columns).
 *
 * The daemon runs as a child process with the stand-in worker
 * (tests/bad_worker.c), so experiments end in milliseconds. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/serve/export.h"
#include "tests/testutil.h"

#define START_TIMEOUT_S 20
#define STOP_TIMEOUT_S  20

static char *state, *worker_cmd; /* state: tu_dir()/state, with datasets/tiny */

static void setup(void) {
    unsetenv("NIGHTSHIFT_TOKEN");
    cr_assert_eq(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK);
    tu_dir_init();
    state = tu_path("%s/state", tu_dir());
    worker_cmd = tu_path("%s from-spec", tu_bad_worker());
    tu_prep_tiny(tu_dir_path("corpus.jsonl"), state, "tiny");
}

static void teardown(void) {
    free(state);
    free(worker_cmd);
    tu_dir_fini();
    curl_global_cleanup();
}

TestSuite(events, .init = setup, .fini = teardown, .timeout = 90);

/* ------------------------------------------------------------- helpers */

/* `nightshift serve` on the state directory with the stand-in worker; extra
 * arguments (NULL-terminated, may be NULL) follow. */
static void daemon_start(tu_server_t *d, const char *const *extra) {
    static int n;
    char *argv[24];
    int k = 0;
    argv[k++] = (char *)tu_bin();
    argv[k++] = "serve";
    argv[k++] = "--dir";
    argv[k++] = state;
    argv[k++] = "--listen";
    argv[k++] = "127.0.0.1:0";
    argv[k++] = "--memory-mb";
    argv[k++] = "0";
    argv[k++] = "--worker-cmd";
    argv[k++] = worker_cmd;
    for (int i = 0; extra && extra[i]; i++) argv[k++] = (char *)extra[i];
    argv[k] = NULL;
    char *errlog = tu_path("%s/daemon-%d.err", tu_dir(), n++);
    tu_server_start(d, "daemon", argv, errlog, START_TIMEOUT_S);
    free(errlog);
}

/* Submit a stand-in spec (mode = name) and return its id. */
static long submit(const tu_server_t *d, const char *mode, int seed) {
    char *spec = tu_path("{\"name\":\"%s\",\"dataset\":\"tiny\",\"seed\":%d,\"time_budget_s\":5,"
                         "\"model\":{\"depth\":1,\"n_embd\":32,\"n_head\":2,\"seq_len\":32},"
                         "\"train\":{\"batch_size\":4,\"total_batch_tokens\":128}}",
                         mode, seed);
    cJSON *o = tu_http_json(d, "POST", "/v1/experiments", spec, 201);
    long id = (long)tu_jnum(o, "id");
    cJSON_Delete(o);
    free(spec);
    return id;
}

/* Wait (at most 20 s) until experiment id has a final status. */
static void wait_final(const tu_server_t *d, long id) {
    char path[64];
    snprintf(path, sizeof path, "/v1/experiments/%ld", id);
    double deadline = tu_now() + 20;
    for (;;) {
        cJSON *e = tu_get_json(d, path);
        const char *st = tu_jstr(e, "status");
        int done = st && strcmp(st, "queued") && strcmp(st, "running");
        cJSON_Delete(e);
        if (done) return;
        if (tu_now() > deadline) tu_server_fail(d, "experiment %ld never finished", id);
        tu_sleep_ms(30);
    }
}

/* GET /v1/events?QUERY -> the events array (owned by *root; caller deletes root). */
static cJSON *feed(const tu_server_t *d, const char *query, cJSON **root) {
    char path[128];
    snprintf(path, sizeof path, "/v1/events%s%s", *query ? "?" : "", query);
    *root = tu_get_json(d, path);
    cJSON *arr = cJSON_GetObjectItemCaseSensitive(*root, "events");
    cr_assert(cJSON_IsArray(arr));
    return arr;
}

static long item_id(const cJSON *arr, int i) {
    return (long)tu_jnum(cJSON_GetArrayItem(arr, i), "id");
}

static char *db_path(void) {
    return tu_path("%s/nightshift.db", state);
}

/* A port with nothing listening on it (bound once, then closed). */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    cr_assert(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    cr_assert(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* A connected socket to the daemon, with a request written. */
static int open_request(const tu_server_t *d, const char *request) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)d->port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    size_t n = strlen(request);
    cr_assert_eq(write(fd, request, n), (ssize_t)n);
    return fd;
}

/* Read from fd into buf (appending at *len) until needle appears or
 * timeout_s passes; returns whether it appeared. */
static int read_until(int fd, char *buf, size_t cap, size_t *len, const char *needle,
                      double timeout_s) {
    double deadline = tu_now() + timeout_s;
    while (!strstr(buf, needle)) {
        double left = deadline - tu_now();
        if (left <= 0 || *len + 1 >= cap) return 0;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)(left * 1000) + 1) <= 0) continue;
        ssize_t n = read(fd, buf + *len, cap - 1 - *len);
        if (n <= 0) return 0;
        *len += (size_t)n;
        buf[*len] = '\0';
    }
    return 1;
}

/* ---------------------------------------------------- a webhook receiver */

/* Accepts webhook POSTs on a loopback port in its own thread, answers 200
 * with no body and records each request's webhook-id header. */
typedef struct {
    int fd, port;
    pthread_t thread;
    pthread_mutex_t mu;
    char ids[64][48];
    int n;
    volatile int stop;
} receiver_t;

static void *receiver_main(void *arg) {
    receiver_t *r = arg;
    while (!r->stop) {
        struct pollfd p = {.fd = r->fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0) continue;
        int c = accept(r->fd, NULL, NULL);
        if (c < 0) continue;
        char buf[65536];
        size_t len = 0;
        buf[0] = '\0';
        /* the head, then Content-Length bytes of body */
        double deadline = tu_now() + 5;
        char *end = NULL;
        while (!(end = strstr(buf, "\r\n\r\n")) && tu_now() < deadline && len + 1 < sizeof buf) {
            ssize_t n = read(c, buf + len, sizeof buf - 1 - len);
            if (n <= 0) break;
            len += (size_t)n;
            buf[len] = '\0';
        }
        if (end) {
            const char *cl = strcasestr(buf, "\r\ncontent-length:");
            size_t want = (size_t)(end + 4 - buf) + (cl ? strtoul(cl + 17, NULL, 10) : 0);
            while (len < want && len + 1 < sizeof buf && tu_now() < deadline) {
                ssize_t n = read(c, buf + len, sizeof buf - 1 - len);
                if (n <= 0) break;
                len += (size_t)n;
                buf[len] = '\0';
            }
            const char *h = strcasestr(buf, "\r\nwebhook-id: ");
            pthread_mutex_lock(&r->mu);
            if (h && r->n < 64) sscanf(h + 14, "%47[^\r\n]", r->ids[r->n++]);
            pthread_mutex_unlock(&r->mu);
            const char *reply = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
            if (write(c, reply, strlen(reply)) < 0) { /* the daemon retries */
            }
        }
        close(c);
    }
    return NULL;
}

static void receiver_start(receiver_t *r, int port) {
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    r->fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(r->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert(bind(r->fd, (struct sockaddr *)&a, sizeof a) == 0, "port %d is taken", port);
    cr_assert(listen(r->fd, 16) == 0);
    r->port = port;
    cr_assert(pthread_create(&r->thread, NULL, receiver_main, r) == 0);
}

static int receiver_got(receiver_t *r, const char *id) {
    pthread_mutex_lock(&r->mu);
    int got = 0;
    for (int i = 0; i < r->n; i++) got |= !strcmp(r->ids[i], id);
    pthread_mutex_unlock(&r->mu);
    return got;
}

static void receiver_stop(receiver_t *r) {
    r->stop = 1;
    pthread_join(r->thread, NULL);
    close(r->fd);
    pthread_mutex_destroy(&r->mu);
}

/* ---------------------------------------------------------------- the feed */

Test(events, the_feed_resumes_exactly_and_skips_nothing_across_a_restart) {
    tu_server_t d = {0};
    daemon_start(&d, NULL);
    long ids[3];
    for (int i = 0; i < 3; i++) ids[i] = submit(&d, i == 1 ? "fail" : "ok", i + 1);
    for (int i = 0; i < 3; i++) wait_final(&d, ids[i]);

    cJSON *root, *arr = feed(&d, "", &root);
    cr_assert_eq(cJSON_GetArraySize(arr), 3);
    for (int i = 0; i < 3; i++) {
        const cJSON *e = cJSON_GetArrayItem(arr, i);
        cr_expect_str_eq(tu_jstr(e, "type"), "experiment.finished");
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(e, "experiment");
        cr_expect_eq((long)tu_jnum(x, "id"), ids[i]);
        cr_expect_str_eq(tu_jstr(x, "status"), i == 1 ? "failed" : "succeeded");
        if (i != 1) cr_expect_gt(tu_jnum(x, "val_bpb"), 0);
        if (i) cr_expect_gt(item_id(arr, i), item_id(arr, i - 1), "ids must increase");
    }
    long first = item_id(arr, 0), last = item_id(arr, 2);
    cr_expect_eq((long)tu_jnum(root, "last_id"), last);
    cJSON_Delete(root);

    /* after=N gives exactly what follows N; limit pages through it */
    char q[64];
    snprintf(q, sizeof q, "after=%ld", first);
    arr = feed(&d, q, &root);
    cr_assert_eq(cJSON_GetArraySize(arr), 2);
    cr_expect_gt(item_id(arr, 0), first);
    cr_expect_eq(item_id(arr, 1), last);
    cJSON_Delete(root);
    snprintf(q, sizeof q, "after=%ld&limit=1", first);
    arr = feed(&d, q, &root);
    cr_assert_eq(cJSON_GetArraySize(arr), 1);
    cJSON_Delete(root);
    snprintf(q, sizeof q, "after=%ld", last);
    arr = feed(&d, q, &root);
    cr_expect_eq(cJSON_GetArraySize(arr), 0);
    cJSON_Delete(root);
    tu_server_stop(&d, STOP_TIMEOUT_S);

    /* across a restart: the next events follow the last one, none is lost */
    daemon_start(&d, NULL);
    long more[2] = {submit(&d, "ok", 10), submit(&d, "ok", 11)};
    wait_final(&d, more[0]);
    wait_final(&d, more[1]);
    snprintf(q, sizeof q, "after=%ld", last);
    arr = feed(&d, q, &root);
    cr_assert_eq(cJSON_GetArraySize(arr), 2);
    cr_expect_gt(item_id(arr, 0), last);
    for (int i = 0; i < 2; i++)
        cr_expect_eq(
            (long)tu_jnum(cJSON_GetObjectItem(cJSON_GetArrayItem(arr, i), "experiment"), "id"),
            more[i]);
    cJSON_Delete(root);
    arr = feed(&d, "", &root);
    cr_expect_eq(cJSON_GetArraySize(arr), 5);
    cJSON_Delete(root);

    cJSON *bad = tu_http_json(&d, "GET", "/v1/events?after=-1", NULL, 400);
    cJSON_Delete(bad);
    tu_server_stop(&d, STOP_TIMEOUT_S);
    tu_server_release(&d);
}

/* ------------------------------------------------------------- the outbox */

Test(events, events_pending_at_shutdown_are_delivered_after_a_restart_with_their_webhook_id) {
    int port = free_port(); /* the agent is down: nothing listens there */
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/hook", port);
    const char *extra[] = {"--agent-url", url, "--agent-secret", "s3cret", NULL};
    tu_server_t d = {0};
    daemon_start(&d, extra);
    long id = submit(&d, "ok", 1);
    wait_final(&d, id);
    tu_sleep_ms(300); /* a first attempt fails (connection refused) */
    tu_server_stop(&d, STOP_TIMEOUT_S);

    char *path = db_path();
    sqlite3 *db = tu_db_open(path);
    cr_expect_geq(tu_sql_int(db, "SELECT count(*) FROM hook_deliveries", 0), 1,
                  "the hook never tried");
    cr_assert_eq(tu_sql_int(db,
                            "SELECT count(*) FROM events WHERE experiment_id = ?1 AND"
                            " type = 'experiment.finished' AND state = 'pending'",
                            id),
                 1, "the finished event is not pending after the shutdown");
    sqlite3_stmt *st = NULL;
    char wid[64] = "";
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT webhook_id FROM events WHERE experiment_id = ?1",
                                    -1, &st, NULL),
                 SQLITE_OK);
    sqlite3_bind_int64(st, 1, id);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    snprintf(wid, sizeof wid, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(db);

    /* the agent is back; the daemon restarts and sends what it still owes */
    receiver_t r;
    receiver_start(&r, port);
    daemon_start(&d, extra);
    double deadline = tu_now() + 15;
    while (!receiver_got(&r, wid) && tu_now() < deadline) tu_sleep_ms(50);
    cr_expect(receiver_got(&r, wid), "event %s was not redelivered after the restart", wid);
    /* ... and marks it delivered */
    db = tu_db_open(path);
    deadline = tu_now() + 5;
    while (tu_sql_int(db,
                      "SELECT count(*) FROM events WHERE experiment_id = ?1 AND"
                      " state = 'delivered'",
                      id) != 1 &&
           tu_now() < deadline)
        tu_sleep_ms(50);
    cr_expect_eq(tu_sql_int(db,
                            "SELECT count(*) FROM events WHERE experiment_id = ?1 AND"
                            " state = 'delivered'",
                            id),
                 1);
    /* every attempt, before and after the restart, under the one id */
    cr_expect_geq(tu_sql_int(db,
                             "SELECT count(*) FROM hook_deliveries h JOIN events e ON"
                             " e.webhook_id = h.event_id WHERE e.experiment_id = ?1",
                             id),
                  2);
    sqlite3_close(db);
    tu_server_stop(&d, STOP_TIMEOUT_S);
    tu_server_release(&d);
    receiver_stop(&r);
    free(path);
}

/* -------------------------------------------------------------- the stream */

Test(events, the_stream_delivers_new_events_and_resumes_from_last_event_id) {
    tu_server_t d = {0};
    daemon_start(&d, NULL);
    char buf[65536] = "";
    size_t len = 0;
    int fd = open_request(&d, "GET /v1/events/stream HTTP/1.1\r\nHost: localhost\r\n\r\n");
    cr_assert(read_until(fd, buf, sizeof buf, &len, "retry: 2000\n\n", 5), "no stream head: %s",
              buf);
    cr_expect(strstr(buf, "Content-Type: text/event-stream"), "%s", buf);
    long id = submit(&d, "ok", 1);
    cr_assert(read_until(fd, buf, sizeof buf, &len, "event: experiment.finished\ndata: ", 10),
              "no event on the stream: %s", buf);
    long ev1 = 0;
    const char *p = strstr(buf, "id: ");
    cr_assert_not_null(p);
    ev1 = strtol(p + 4, NULL, 10);
    cr_expect_gt(ev1, 0);
    char want[64];
    snprintf(want, sizeof want, "\"id\":%ld", id);
    cr_assert(read_until(fd, buf, sizeof buf, &len, "\n\n", 2));
    cr_expect(strstr(strstr(buf, "data: "), want), "the event is not about experiment %ld: %s", id,
              buf);
    close(fd);

    /* while nobody listens, another experiment ends; a reconnect with
     * Last-Event-ID gets it at once, and not the one it had */
    long id2 = submit(&d, "ok", 2);
    wait_final(&d, id2);
    char req[256];
    snprintf(req, sizeof req,
             "GET /v1/events/stream HTTP/1.1\r\nHost: localhost\r\nLast-Event-ID: %ld\r\n\r\n",
             ev1);
    fd = open_request(&d, req);
    len = 0;
    buf[0] = '\0';
    cr_assert(read_until(fd, buf, sizeof buf, &len, "event: experiment.finished", 2),
              "the missed event did not come with the head: %s", buf);
    char not_again[32];
    snprintf(not_again, sizeof not_again, "id: %ld\n", ev1);
    cr_expect_null(strstr(buf, not_again), "event %ld was sent again", ev1);
    snprintf(want, sizeof want, "\"id\":%ld", id2);
    cr_assert(read_until(fd, buf, sizeof buf, &len, want, 2), "%s", buf);
    close(fd);

    /* ?status=1 adds the slots snapshot every second */
    fd = open_request(&d, "GET /v1/events/stream?status=1 HTTP/1.1\r\nHost: localhost\r\n\r\n");
    len = 0;
    buf[0] = '\0';
    cr_expect(read_until(fd, buf, sizeof buf, &len, "event: status\ndata: {\"queue_depth\"", 3),
              "%s", buf);
    close(fd);
    tu_server_stop(&d, STOP_TIMEOUT_S);
    tu_server_release(&d);
}

Test(events, streams_are_bounded_and_closed_at_shutdown) {
    tu_server_t d = {0};
    daemon_start(&d, NULL);
    int fds[32];
    char buf[4096];
    for (int i = 0; i < 32; i++) {
        fds[i] = open_request(&d, "GET /v1/events/stream HTTP/1.1\r\nHost: localhost\r\n\r\n");
        size_t len = 0;
        buf[0] = '\0';
        cr_assert(read_until(fds[i], buf, sizeof buf, &len, "retry:", 5), "stream %d: %s", i, buf);
    }
    /* a 33rd takes the place of the oldest (all are as far behind) */
    int extra = open_request(&d, "GET /v1/events/stream HTTP/1.1\r\nHost: localhost\r\n\r\n");
    size_t len = 0;
    buf[0] = '\0';
    cr_expect(read_until(extra, buf, sizeof buf, &len, "retry:", 5), "%s", buf);
    int ended = 0;
    for (double t0 = tu_now(); !ended && tu_now() - t0 < 3;) {
        struct pollfd first = {.fd = fds[0], .events = POLLIN};
        char c0[4096];
        if (poll(&first, 1, 100) == 1) ended = read(fds[0], c0, sizeof c0) <= 0;
    }
    cr_expect(ended, "the oldest stream was not ended");
    close(fds[0]);
    fds[0] = extra;
    /* the daemon stops promptly with 32 streams open, and ends each */
    double t0 = tu_now();
    tu_server_stop(&d, STOP_TIMEOUT_S);
    cr_expect_lt(tu_now() - t0, 5);
    for (int i = 0; i < 32; i++) {
        struct pollfd p = {.fd = fds[i], .events = POLLIN};
        cr_expect_eq(poll(&p, 1, 2000), 1);
        char c[4096];
        while (read(fds[i], c, sizeof c) > 0) {
        }
        close(fds[i]);
    }
    tu_server_release(&d);
}

/* -------------------------------------------------------------- exports */

/* Parse text (a file) with Python's csv module and print "rows cols" plus
 * the given cell (row, column name) on one line. */
static char *python_csv(const char *file, const char *dialect, int row, const char *col) {
    char *script =
        tu_path("import csv,sys\n"
                "rows=list(csv.DictReader(open(sys.argv[1],newline=''),%s))\n"
                "print(len(rows), len(rows[0]) if rows else 0, rows[%d]['%s'] if rows else '')\n",
                dialect, row, col);
    char *const argv[] = {"/usr/bin/python3", "-c", script, (char *)file, NULL};
    tu_run_t r;
    tu_run(&r, argv, 20);
    cr_assert_eq(r.exit_code, 0, "python3 csv: %s", r.err);
    char *out = strdup(r.out);
    tu_run_free(&r);
    free(script);
    return out;
}

Test(events, csv_fields_survive_a_real_csv_parser) {
    cJSON *rows = cJSON_Parse("[{\"id\":1,\"name\":\"a, \\\"quoted\\\"\\nname\",\"val_bpb\":1.25,"
                              "\"ve_layers\":[0,2],\"tie\":true,\"x\":null},"
                              "{\"id\":2,\"name\":\"plain\",\"val_bpb\":0.1,\"ve_layers\":\"all\","
                              "\"tie\":false,\"x\":null}]");
    cJSON *cols = cJSON_Parse("[\"id\",\"name\",\"val_bpb\",\"ve_layers\",\"tie\",\"x\"]");
    char *csv = export_table(rows, cols, ',');
    char *file = tu_path("%s/t.csv", tu_dir());
    tu_write(file, csv);
    char *out = python_csv(file, "", 0, "name");
    cr_expect_str_eq(out, "2 6 a, \"quoted\"?name\n");
    free(out);
    out = python_csv(file, "", 0, "ve_layers");
    cr_expect_str_eq(out, "2 6 [0,2]\n");
    free(out);
    out = python_csv(file, "", 1, "val_bpb");
    cr_expect_str_eq(out, "2 6 0.1\n");
    free(out);
    char *tsv = export_table(rows, cols, '\t');
    cr_expect(strstr(tsv, "1\ta, \"quoted\" name\t1.25\t[0,2]\ttrue\t\n"), "%s", tsv);
    free(tsv);
    free(csv);
    free(file);
    cJSON_Delete(rows);
    cJSON_Delete(cols);
}

/* CR and LF are control characters in CSV too ('?': no field holds a line
 * break, a leading CR hides nothing), and a formula after leading spaces is
 * quoted like one without: before, CR and LF were kept (quoted) and " =1+1"
 * went out as it was. */
Test(events, csv_has_no_line_breaks_and_spaced_formulas_are_quoted) {
    cJSON *rows = cJSON_Parse("[{\"name\":\"\\r=1+1\"},{\"name\":\"  =2+2\"},"
                              "{\"name\":\"two\\r\\nlines\"},{\"name\":\" @x\"}]");
    cJSON *cols = cJSON_Parse("[\"name\"]");
    char *csv = export_table(rows, cols, ',');
    cr_expect_str_eq(csv, "name\n'?=1+1\n'  =2+2\ntwo??lines\n' @x\n");
    char *tsv = export_table(rows, cols, '\t');
    cr_expect_str_eq(tsv, "name\n' =1+1\n'  =2+2\ntwo  lines\n' @x\n");
    free(csv);
    free(tsv);
    cJSON_Delete(rows);
    cJSON_Delete(cols);
}

Test(events, the_leaderboard_as_csv_and_results_tsv_as_autoresearch_writes_it) {
    tu_server_t d = {0};
    daemon_start(&d, NULL);
    long ids[3] = {submit(&d, "ok", 1), submit(&d, "fail", 2), submit(&d, "ok", 3)};
    for (int i = 0; i < 3; i++) wait_final(&d, ids[i]);

    tu_reply_t r;
    /* both "ok" runs are one configuration (seeds 1 and 3) in dataset tiny, 5 s */
    tu_http(&d, "GET", "/v1/leaderboard?format=csv&dataset=tiny&budget=time:5", NULL, 0, NULL, &r);
    cr_assert_eq(r.status, 200);
    cr_expect(strstr(r.content_type, "text/csv"), "%s", r.content_type);
    char *file = tu_path("%s/lb.csv", tu_dir());
    tu_write(file, r.body);
    tu_reply_free(&r);
    char *out = python_csv(file, "", 0, "val_bpb");
    int nrows = 0, ncols = 0;
    double bpb = 0;
    cr_assert_eq(sscanf(out, "%d %d %lf", &nrows, &ncols, &bpb), 3, "%s", out);
    cr_expect_eq(nrows, 1, "one configuration of two seeds: %s", out);
    cr_expect_gt(ncols, 10);
    cr_expect_gt(bpb, 0);
    free(out);

    /* results.tsv: autoresearch's five columns, one line per finished run */
    tu_http(&d, "GET", "/v1/export?format=results-tsv", NULL, 0, NULL, &r);
    cr_assert_eq(r.status, 200);
    cr_expect(!strncmp(r.body, "commit\tval_bpb\tmemory_gb\tstatus\tdescription\n", 43), "%s",
              r.body);
    tu_write(file, r.body);
    tu_reply_free(&r);
    char *script = "import csv,sys\n"
                   "rows=list(csv.reader(open(sys.argv[1],newline=''),delimiter='\\t'))\n"
                   "assert all(len(x)==5 for x in rows), rows\n"
                   "print(' '.join(x[0]+':'+x[3]+':'+x[1] for x in rows[1:]))\n";
    char *const argv[] = {"/usr/bin/python3", "-c", script, file, NULL};
    tu_run_t pr;
    tu_run(&pr, argv, 20);
    cr_assert_eq(pr.exit_code, 0, "%s", pr.err);
    long a, b, c;
    char sa[16], sb[16], sc[16];
    double va, vb, vc;
    cr_assert_eq(sscanf(pr.out, "%ld:%15[a-z]:%lf %ld:%15[a-z]:%lf %ld:%15[a-z]:%lf", &a, sa, &va,
                        &b, sb, &vb, &c, sc, &vc),
                 9, "%s", pr.out);
    cr_expect_eq(a, ids[0]);
    cr_expect_str_eq(sa, "keep");
    cr_expect_str_eq(sb, "crash");
    cr_expect_eq(vb, 0.0);
    cr_expect(!strcmp(sc, "keep") || !strcmp(sc, "discard"), "%s", sc);
    cr_expect_str_eq(sc, vc < va ? "keep" : "discard");
    tu_run_free(&pr);

    /* the CLI writes the same exports */
    tu_run_t cr;
    tu_run_bin(&cr, 20, "export", "--url", d.url, "--format", "jsonl", NULL);
    cr_assert_eq(cr.exit_code, 0, "%s", cr.err);
    int lines = 0;
    for (const char *q = cr.out; *q; q++) lines += *q == '\n';
    cr_expect_eq(lines, 3, "%s", cr.out);
    tu_run_free(&cr);
    tu_run_bin(&cr, 20, "export", "--url", d.url, "--format", "results-tsv", NULL);
    cr_assert_eq(cr.exit_code, 0, "%s", cr.err);
    cr_expect(!strncmp(cr.out, "commit\tval_bpb\tmemory_gb\tstatus\tdescription\n", 43));
    tu_run_free(&cr);
    tu_run_bin(&cr, 20, "export", "--url", d.url, "--format", "xml", NULL);
    cr_expect_eq(cr.exit_code, 2, "%s", cr.err);
    tu_run_free(&cr);

    /* diff: the spec differences and both summaries */
    char i0[16], i2[16];
    snprintf(i0, sizeof i0, "%ld", ids[0]);
    snprintf(i2, sizeof i2, "%ld", ids[2]);
    tu_run_bin(&cr, 20, "diff", "--url", d.url, i0, i2, NULL);
    cr_assert_eq(cr.exit_code, 0, "%s", cr.err);
    cr_expect(strstr(cr.out, "seed: 1 -> 3"), "%s", cr.out);
    cr_expect(strstr(cr.out, "val_bpb"), "%s", cr.out);
    tu_run_free(&cr);
    free(file);
    tu_server_stop(&d, STOP_TIMEOUT_S);
    tu_server_release(&d);
}
