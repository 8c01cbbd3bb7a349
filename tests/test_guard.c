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
