/* test_client.c - the CLI commands (submit, ls, show, best, cancel, watch)
 * run as the built binary against canned HTTP replies.
 *
 * Each test starts the real HTTP server (daemon/shared/http.h) on 127.0.0.1 port 0
 * with its libuv loop in a second thread. Its handler records every request
 * and answers from a table of canned replies that the test sets up; the
 * binary runs under tu_run (hard timeout), and the test checks the recorded
 * request, stdout, stderr and the exit code. Two things that server cannot
 * produce are checked with a one-shot raw socket server instead: a reply
 * without Content-Length, and the request headers exactly as sent. watch is
 * also run on a pseudo-terminal and stopped with SIGINT. Times print in the
 * local zone, so every test runs with TZ=UTC. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon/shared/http.h"
#include "tests/testutil.h"

#define RUN_TIMEOUT_S 10.0
#define MIB           ((size_t)1 << 20)

/* ------------------------------------------------------ the canned server */

typedef struct {
    const char *method, *path; /* the route */
    int status;
    const char *body; /* the reply (static), or NULL with big set */
    size_t big;       /* > 0: a JSON reply of this many bytes instead */
    const char *content_type;
} canned_t;

typedef struct {
    char method[8], path[256], query[256], auth[256], ctype[64], source[32];
    char *body; /* malloc'd */
} seen_t;

static struct {
    uv_loop_t loop;
    uv_async_t stop;
    http_server_t *srv;
    pthread_t thread;
    int port;
    char url[64];
    char *dir; /* temp directory for spec files */
    pthread_mutex_t mu;
    canned_t routes[16];
    int nroutes;
    const char *token; /* required as "Bearer token" when set */
    seen_t seen[64];
    int nseen;
} S;

static void copy_str(char *dst, size_t len, const char *s) {
    snprintf(dst, len, "%s", s ? s : "");
}

/* A JSON object of exactly n bytes: {"pad":"xxxx..."} (n >= 12). */
static char *big_json(size_t n) {
    char *b = malloc(n + 1);
    cr_assert_not_null(b);
    memcpy(b, "{\"pad\":\"", 8);
    memset(b + 8, 'x', n - 10);
    memcpy(b + n - 2, "\"}", 2);
    b[n] = '\0';
    return b;
}

static void handler(const http_request_t *req, http_response_t *res, void *user) {
    pthread_mutex_lock(&S.mu);
    if (S.nseen < (int)(sizeof S.seen / sizeof S.seen[0])) {
        seen_t *s = &S.seen[S.nseen++];
        copy_str(s->method, sizeof s->method, req->method);
        copy_str(s->path, sizeof s->path, req->path);
        copy_str(s->query, sizeof s->query, req->query);
        copy_str(s->auth, sizeof s->auth, req->authorization);
        copy_str(s->ctype, sizeof s->ctype, req->content_type);
        copy_str(s->source, sizeof s->source, req->source);
        s->body = strdup(req->body);
    }
    const canned_t *hit = NULL;
    char want[300];
    snprintf(want, sizeof want, "Bearer %s", S.token ? S.token : "");
    int denied = S.token && (!req->authorization || strcmp(req->authorization, want));
    for (int i = 0; i < S.nroutes && !denied; i++)
        if (!strcmp(S.routes[i].method, req->method) && !strcmp(S.routes[i].path, req->path))
            hit = &S.routes[i];
    pthread_mutex_unlock(&S.mu);
    if (denied) {
        http_error(res, 401, "unauthorized", "this call needs the daemon's token");
        return;
    }
    if (!hit) {
        http_error(res, 404, "not_found", "no route for %s %s", req->method, req->path);
        return;
    }
    res->status = hit->status;
    res->content_type = hit->content_type;
    if (hit->big) {
        res->body = big_json(hit->big);
        res->body_len = hit->big;
    } else {
        res->body = strdup(hit->body);
        res->body_len = strlen(hit->body);
    }
}

static void server_done_cb(void *arg) {
    uv_close((uv_handle_t *)&S.stop, NULL);
}

static void stop_cb(uv_async_t *a) {
    http_server_close(S.srv, server_done_cb, NULL);
}

static void *loop_thread(void *arg) {
    uv_run(&S.loop, UV_RUN_DEFAULT);
    return NULL;
}

static void setup(void) {
    char err[256];
    memset(&S, 0, sizeof S);
    setenv("TZ", "UTC", 1);
    tzset();
    unsetenv("NIGHTSHIFT_URL");
    unsetenv("NIGHTSHIFT_TOKEN");
    pthread_mutex_init(&S.mu, NULL);
    cr_assert_eq(uv_loop_init(&S.loop), 0);
    cr_assert_eq(uv_async_init(&S.loop, &S.stop, stop_cb), 0);
    http_limits_t lim;
    http_limits_default(&lim);
    lim.max_body_bytes = 2 * MIB;
    cr_assert_eq(http_server_start(&S.loop, "127.0.0.1", 0, &lim, handler, NULL, &S.srv, &S.port,
                                   err, sizeof err),
                 0, "start: %s", err);
    snprintf(S.url, sizeof S.url, "http://127.0.0.1:%d", S.port);
    cr_assert_eq(pthread_create(&S.thread, NULL, loop_thread, NULL), 0);
    S.dir = tu_tmpdir();
}

static void teardown(void) {
    uv_async_send(&S.stop);
    pthread_join(S.thread, NULL);
    cr_assert_eq(uv_loop_close(&S.loop), 0, "handles left open");
    for (int i = 0; i < S.nseen; i++) free(S.seen[i].body);
    tu_rmrf(S.dir);
    free(S.dir);
}

TestSuite(client, .init = setup, .fini = teardown, .timeout = 30);

static void add_route(canned_t c) {
    pthread_mutex_lock(&S.mu);
    int full = S.nroutes == (int)(sizeof S.routes / sizeof S.routes[0]);
    if (!full) S.routes[S.nroutes++] = c;
    pthread_mutex_unlock(&S.mu);
    cr_assert_not(full, "too many routes");
}

/* Answer method + path with status and body (static text). */
static void route(const char *method, const char *path, int status, const char *body) {
    add_route((canned_t){method, path, status, body, 0, NULL});
}

/* Answer method + path with 200 and a JSON object of `bytes` bytes. */
static void route_big(const char *method, const char *path, size_t bytes) {
    add_route((canned_t){method, path, 200, NULL, bytes, NULL});
}

static void clear_routes(void) {
    pthread_mutex_lock(&S.mu);
    S.nroutes = 0;
    pthread_mutex_unlock(&S.mu);
}

static int nseen(void) {
    pthread_mutex_lock(&S.mu);
    int n = S.nseen;
    pthread_mutex_unlock(&S.mu);
    return n;
}

/* The i-th request the server saw (the client has exited, so no lock). */
static const seen_t *seen(int i) {
    cr_assert_lt(i, nseen(), "only %d requests were seen", nseen());
    return &S.seen[i];
}

static char *write_file(const char *name, const char *text) {
    char *p = tu_path("%s/%s", S.dir, name);
    tu_write(p, text);
    return p;
}

#define SPEC "{\"name\": \"wide\", \"model\": {\"n_embd\": 256}}"

/* ------------------------------------------------------------------ submit */

/* An id or a number beyond what the command can hold is refused with exit
 * 2: before, `sample 99999999999999999999` looked for experiment
 * 9223372036854775807 and --tokens wrapped silently. */
Test(client, sample_refuses_numbers_out_of_range) {
    tu_run_t r;
    tu_run_bin(&r, RUN_TIMEOUT_S, "sample", "99999999999999999999", "--dir", "/nonexistent", NULL);
    cr_expect_eq(r.exit_code, 2, "%s", r.err);
    cr_expect(strstr(r.err, "expected an experiment id, got '99999999999999999999'"), "%s", r.err);
    tu_run_free(&r);
    tu_run_bin(&r, RUN_TIMEOUT_S, "sample", "1", "--dir", "/nonexistent", "--tokens", "99999999999",
               NULL);
    cr_expect_eq(r.exit_code, 2, "%s", r.err);
    cr_expect(strstr(r.err, "out of range: 99999999999"), "%s", r.err);
    tu_run_free(&r);
}

Test(client, submit_one_spec) {
    S.token = "s3cret";
    route("POST", "/v1/experiments", 201, "{\"id\":5,\"status\":\"queued\",\"duplicate\":false}");
    char *spec = write_file("spec.json", SPEC);
    tu_run_t r;
    tu_run_bin(&r, RUN_TIMEOUT_S, "submit", spec, "--url", S.url, "--token", "s3cret", NULL);
    cr_assert_eq(r.exit_code, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out, "5 queued\n");
    cr_assert_str_eq(r.err, "");
    cr_assert_eq(nseen(), 1);
    const seen_t *s = seen(0);
    cr_assert_str_eq(s->method, "POST");
    cr_assert_str_eq(s->path, "/v1/experiments");
    cr_assert_str_eq(s->query, "");
    cr_assert_str_eq(s->body, SPEC);
    cr_assert_str_eq(s->auth, "Bearer s3cret");
    cr_assert_str_eq(s->ctype, "application/json");
    cr_assert_str_eq(s->source, "cli");
    tu_run_free(&r);
    free(spec);
}

Test(client, submit_array_from_stdin_with_force) {
    route("POST", "/v1/experiments", 200,
          "{\"experiments\":[{\"id\":5,\"status\":\"queued\",\"duplicate\":false},"
          "{\"id\":3,\"status\":\"succeeded\",\"duplicate\":true}]}");
    const char *specs = "[" SPEC ", {\"seed\": 7}]";
    char *file = write_file("specs.json", specs);
    char *argv[] = {"/bin/sh",
                    "-c",
                    "exec \"$0\" submit - --force --url \"$1\" < \"$2\"",
                    (char *)tu_bin(),
                    S.url,
                    file,
                    NULL};
    tu_run_t r;
    tu_run(&r, argv, RUN_TIMEOUT_S);
    cr_assert_eq(r.exit_code, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out, "5 queued\n3 duplicate (already succeeded)\n");
    cr_assert_str_eq(seen(0)->query, "force=1");
    cr_assert_str_eq(seen(0)->body, specs);
    cr_assert_str_eq(seen(0)->auth, "", "no token was given, none may be sent");
    tu_run_free(&r);
    free(file);
}

Test(client, submit_token_from_file_env_or_missing) {
    S.token = "tok-1";
    route("POST", "/v1/experiments", 201, "{\"id\":9,\"status\":\"queued\",\"duplicate\":false}");
    char *spec = write_file("spec.json", SPEC);
    char *tokfile = write_file("token", "tok-1\n");
    tu_run_t r;

    tu_run_bin(&r, RUN_TIMEOUT_S, "submit", spec, "--url", S.url, NULL);
    cr_assert_eq(r.exit_code, 1);
    cr_assert_str_eq(r.out, "");
    cr_assert(strstr(r.err, "nightshift: unauthorized: this call needs the daemon's token"), "%s",
              r.err);
    cr_assert(strstr(r.err, "--token"), "a hint names the options: %s", r.err);
    tu_run_free(&r);

    tu_run_bin_out("9 queued\n", RUN_TIMEOUT_S, "submit", spec, "--url", S.url, "--token-file",
                   tokfile, NULL);
    cr_assert_str_eq(seen(1)->auth, "Bearer tok-1");

    setenv("NIGHTSHIFT_TOKEN", "tok-1", 1);
    tu_run_bin(&r, RUN_TIMEOUT_S, "submit", spec, "--url", S.url, NULL);
    cr_assert_eq(r.exit_code, 0, "stderr: %s", r.err);
    cr_assert_str_eq(seen(2)->auth, "Bearer tok-1");
    tu_run_free(&r);

    /* --token beats the env */
    tu_run_bin(&r, RUN_TIMEOUT_S, "submit", spec, "--url", S.url, "--token", "wrong", NULL);
    cr_assert_eq(r.exit_code, 1);
    cr_assert_str_eq(seen(3)->auth, "Bearer wrong");
    tu_run_free(&r);

    /* Usage errors never reach the server. */
    tu_run_bin(&r, RUN_TIMEOUT_S, "submit", spec, "--url", S.url, "--token", "a", "--token-file",
               tokfile, NULL);
    cr_assert_eq(r.exit_code, 2);
    cr_assert(strstr(r.err, "not both"), "%s", r.err);
    tu_run_free(&r);
    tu_run_bin_exit(2, RUN_TIMEOUT_S, "submit", spec, "--url", S.url, "--token-file",
                    "/nonexistent/token", NULL);
    tu_run_bin_exit(2, RUN_TIMEOUT_S, "submit", spec, "--url", S.url, "--token", "two words", NULL);
    cr_assert_eq(nseen(), 4);
    free(spec);
    free(tokfile);
}

Test(client, submit_checks_the_file_before_sending) {
    char *bad = write_file("bad.json", "{\"name\": \"x\",");
    char *empty = write_file("empty.json", "[]");
    char *nums = write_file("nums.json", "[1, 2]");
    char *huge_text = big_json(MIB + 1);
    char *huge = write_file("huge.json", huge_text);
    tu_run_t r;

    tu_run_bin(&r, RUN_TIMEOUT_S, "submit", bad, "--url", S.url, NULL);
    cr_assert_eq(r.exit_code, 1);
    cr_assert(strstr(r.err, "bad.json:1:13: not valid JSON"), "%s", r.err);
    tu_run_free(&r);
    tu_run_bin(&r, RUN_TIMEOUT_S, "submit", empty, "--url", S.url, NULL);
    cr_assert_eq(r.exit_code, 1);
    cr_assert(strstr(r.err, "expected a spec object or an array of specs"), "%s", r.err);
    tu_run_free(&r);
    tu_run_bin_exit(1, RUN_TIMEOUT_S, "submit", nums, "--url", S.url, NULL);
    tu_run_bin(&r, RUN_TIMEOUT_S, "submit", huge, "--url", S.url, NULL);
    cr_assert_eq(r.exit_code, 1);
    cr_assert(strstr(r.err, "larger than 1048576 bytes"), "%s", r.err);
    tu_run_free(&r);
    tu_run_bin(&r, RUN_TIMEOUT_S, "submit", "/nonexistent/spec.json", "--url", S.url, NULL);
    cr_assert_eq(r.exit_code, 1);
    cr_assert(strstr(r.err, "/nonexistent/spec.json: No such file"), "%s", r.err);
    tu_run_free(&r);

    tu_run_bin(&r, RUN_TIMEOUT_S, "submit", "--url", S.url, NULL);
    cr_assert_eq(r.exit_code, 2);
    cr_assert(strstr(r.err, "usage: nightshift submit"), "%s", r.err);
    tu_run_free(&r);
    tu_run_bin_exit(2, RUN_TIMEOUT_S, "submit", bad, empty, NULL);
    tu_run_bin(&r, RUN_TIMEOUT_S, "submit", bad, "--frobnicate", NULL);
    cr_assert_eq(r.exit_code, 2);
    cr_assert(strstr(r.err, "unknown option --frobnicate"), "%s", r.err);
    tu_run_free(&r);
    tu_run_bin_exit(2, RUN_TIMEOUT_S, "submit", bad, "--url", NULL);
    /* The file is checked before the URL. */
    tu_run_bin_exit(1, RUN_TIMEOUT_S, "submit", empty, "--url", "127.0.0.1:8080", NULL);
    cr_assert_eq(nseen(), 0);
    free(bad), free(empty), free(nums), free(huge), free(huge_text);
}

/* ------------------------------------------------- error envelopes, codes */

Test(client, api_errors_print_the_envelope_and_exit_1) {
    static const struct {
        const char *method, *path;
        int status;
        const char *body;
        const char *args[4];
        const char *err;
    } cases[] = {
        {"POST",
         "/v1/experiments",
         400,
         "{\"error\":{\"code\":\"invalid_spec\",\"message\":\"[1].model.n_head: 7 does not divide "
         "n_embd 128\"}}",
         {"submit", "SPEC"},
         "nightshift: invalid_spec: [1].model.n_head: 7 does not divide n_embd 128\n"},
        {"POST",
         "/v1/experiments",
         413,
         "{\"error\":{\"code\":\"too_large\",\"message\":\"the body is over 1048576 bytes\"}}",
         {"submit", "SPEC"},
         "nightshift: too_large: the body is over 1048576 bytes\n"},
        {"GET",
         "/v1/experiments/99",
         404,
         "{\"error\":{\"code\":\"not_found\",\"message\":\"no experiment 99\"}}",
         {"show", "99"},
         "nightshift: not_found: no experiment 99\n"},
        {"POST",
         "/v1/experiments/4/cancel",
         409,
         "{\"error\":{\"code\":\"not_cancellable\",\"message\":\"experiment 4 has already "
         "finished\"}}",
         {"cancel", "4"},
         "nightshift: not_cancellable: experiment 4 has already finished\n"},
        /* Not an envelope: the status and the first line of the body. */
        {"GET", "/v1/best", 502, "Bad Gateway\nmore", {"best"}, NULL},
        /* An envelope with a control character in it is printed defanged. */
        {"GET",
         "/v1/status",
         500,
         "{\"error\":{\"code\":\"store_error\",\"message\":\"disk \\u001b[2Jfull\"}}",
         {"watch", "--once"},
         "nightshift: store_error: disk ?[2Jfull\n"},
    };
    char *spec = write_file("spec.json", SPEC);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        clear_routes(); /* one route per case: two of them share a path */
        route(cases[i].method, cases[i].path, cases[i].status, cases[i].body);
        char *argv[12];
        int n = 0;
        argv[n++] = (char *)tu_bin();
        for (int k = 0; k < 4 && cases[i].args[k]; k++)
            argv[n++] = !strcmp(cases[i].args[k], "SPEC") ? spec : (char *)cases[i].args[k];
        argv[n++] = "--url";
        argv[n++] = S.url;
        argv[n] = NULL;
        tu_run_t r;
        tu_run(&r, argv, RUN_TIMEOUT_S);
        cr_assert_eq(r.exit_code, 1, "case %zu: exit %d, stderr %s", i, r.exit_code, r.err);
        cr_assert_str_eq(r.out, "", "case %zu", i);
        if (cases[i].err) {
            cr_assert_str_eq(r.err, cases[i].err, "case %zu: %s", i, r.err);
        } else {
            char want[256];
            snprintf(want, sizeof want, "nightshift: HTTP 502 from GET %s/v1/best: Bad Gateway\n",
                     S.url);
            cr_assert_str_eq(r.err, want);
        }
        tu_run_free(&r);
    }
    free(spec);
}

Test(client, unreachable_daemon_exits_3) {
    /* A bound socket that never listens: connections to it are refused. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    char url[64], want[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", ntohs(a.sin_port));
    snprintf(want, sizeof want, "nightshift: cannot reach the daemon at %s: ", url);
    char *spec = write_file("spec.json", SPEC);
    const char *cmds[][3] = {{"ls", NULL}, {"submit", spec}, {"watch", "--once"}, {"cancel", "3"}};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        tu_run_t r;
        /* cmds[i][1] NULL: the command without an argument */
        tu_run_bin(&r, RUN_TIMEOUT_S, cmds[i][0], "--url", url, cmds[i][1], NULL);
        cr_assert_eq(r.exit_code, 3, "%s: exit %d: %s", cmds[i][0], r.exit_code, r.err);
        cr_assert_eq(strncmp(r.err, want, strlen(want)), 0, "%s: %s", cmds[i][0], r.err);
        /* and how to start it */
        cr_assert(strstr(r.err, "\n  is it running? `make run` starts it (and the agent); alone: "
                                "nightshift serve --dir state"),
                  "%s: %s", cmds[i][0], r.err);
        tu_run_free(&r);
    }
    /* agent status speaks of the agent, not the daemon */
    tu_run_t r;
    tu_run_bin(&r, RUN_TIMEOUT_S, "agent", "status", "--url", url, NULL);
    cr_assert_eq(r.exit_code, 3, "%s", r.err);
    snprintf(want, sizeof want, "nightshift: cannot reach the agent at %s: ", url);
    cr_assert_eq(strncmp(r.err, want, strlen(want)), 0, "%s", r.err);
    cr_assert(!strstr(r.err, "daemon at"), "%s", r.err);
    tu_run_free(&r);
    close(fd);
    free(spec);
}

Test(client, url_from_the_environment) {
    route("GET", "/v1/experiments", 200, "{\"experiments\":[],\"next_after\":null}");
    char url[80];
    snprintf(url, sizeof url, "%s/", S.url); /* a trailing slash is dropped */
    setenv("NIGHTSHIFT_URL", url, 1);
    tu_run_bin_out("no experiments\n", RUN_TIMEOUT_S, "ls", NULL);
    cr_assert_str_eq(seen(0)->path, "/v1/experiments");
    tu_run_bin_exit(2, RUN_TIMEOUT_S, "ls", "--url", "ftp://127.0.0.1/", NULL);
    cr_assert_eq(nseen(), 1);
}

Test(client, reply_size_cap) {
    /* Under the cap a large reply is fine... */
    route_big("GET", "/v1/experiments", 15 * MIB);
    tu_run_t r;
    tu_run_bin(&r, RUN_TIMEOUT_S, "ls", "--url", S.url, NULL);
    cr_assert_eq(r.exit_code, 1, "no experiments array in it: %s", r.err);
    cr_assert(strstr(r.err, "unexpected reply"), "%s", r.err);
    tu_run_free(&r);
    /* ...over it, the reply is refused. */
    route_big("GET", "/v1/best", 17 * MIB);
    tu_run_bin(&r, RUN_TIMEOUT_S, "best", "--url", S.url, NULL);
    cr_assert_eq(r.exit_code, 1);
    cr_assert_str_eq(r.err, "nightshift: the reply to GET /v1/best is larger than 16 MiB\n");
    cr_assert_str_eq(r.out, "");
    tu_run_free(&r);
    route("GET", "/v1/status", 200, "ok, not JSON");
    tu_run_bin(&r, RUN_TIMEOUT_S, "watch", "--once", "--url", S.url, NULL);
    cr_assert_eq(r.exit_code, 1);
    cr_assert_str_eq(r.err, "nightshift: the reply to GET /v1/status is not JSON\n");
    tu_run_free(&r);
}

/* --------------------------------------------------- the raw socket server */

/* Accepts one connection, reads one request (headers and Content-Length
 * body), answers with the raw bytes in `reply` followed by `pad` bytes of
 * filler, and closes. */
typedef struct {
    int lfd, port;
    pthread_t thread;
    const char *reply;
    size_t pad;
    char req[64 * 1024];
    size_t req_len;
} raw_t;

static void *raw_thread(void *arg) {
    raw_t *w = arg;
    struct pollfd p = {w->lfd, POLLIN, 0};
    if (poll(&p, 1, 10000) != 1) return NULL;
    int fd = accept(w->lfd, NULL, NULL);
    if (fd < 0) return NULL;
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    for (;;) {
        ssize_t n = recv(fd, w->req + w->req_len, sizeof w->req - 1 - w->req_len, 0);
        if (n <= 0) break;
        w->req_len += (size_t)n;
        w->req[w->req_len] = '\0';
        char *end = strstr(w->req, "\r\n\r\n"), *cl = strcasestr(w->req, "\r\nContent-Length:");
        size_t body = cl ? strtoul(cl + 17, NULL, 10) : 0;
        if (end && w->req_len >= (size_t)(end + 4 - w->req) + body) break;
    }
    send(fd, w->reply, strlen(w->reply), MSG_NOSIGNAL);
    char chunk[65536];
    memset(chunk, 'x', sizeof chunk);
    for (size_t sent = 0; sent < w->pad;) {
        ssize_t n = send(fd, chunk, sizeof chunk, MSG_NOSIGNAL);
        if (n <= 0) break; /* the client gave up */
        sent += (size_t)n;
    }
    close(fd);
    return NULL;
}

static void raw_start(raw_t *w, const char *reply, size_t pad) {
    memset(w, 0, sizeof *w);
    w->reply = reply;
    w->pad = pad;
    w->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    cr_assert_eq(bind(w->lfd, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(w->lfd, 4), 0);
    cr_assert_eq(getsockname(w->lfd, (struct sockaddr *)&a, &alen), 0);
    w->port = ntohs(a.sin_port);
    cr_assert_eq(pthread_create(&w->thread, NULL, raw_thread, w), 0);
}

static void raw_join(raw_t *w) {
    pthread_join(w->thread, NULL);
    close(w->lfd);
}

Test(client, request_headers_as_sent) {
    /* A spec over 1 KiB: curl would otherwise wait for "100 Continue". */
    char *text = big_json(3000);
    char *spec = write_file("spec.json", text);
    const char *json = "{\"id\":77,\"status\":\"queued\",\"duplicate\":false}";
    char reply[512];
    snprintf(reply, sizeof reply,
             "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
             "Connection: close\r\n\r\n%s",
             strlen(json), json);
    raw_t w;
    raw_start(&w, reply, 0);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", w.port);
    tu_run_t r;
    tu_run_bin(&r, RUN_TIMEOUT_S, "submit", spec, "--url", url, "--token", "abc", NULL);
    raw_join(&w);
    cr_assert_eq(r.exit_code, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out, "77 queued\n");
    cr_assert_eq(strncmp(w.req, "POST /v1/experiments HTTP/1.1\r\n", 31), 0, "%s", w.req);
    cr_assert(strstr(w.req, "\r\nX-Nightshift-Source: cli\r\n"), "%s", w.req);
    cr_assert(strstr(w.req, "\r\nAuthorization: Bearer abc\r\n"), "%s", w.req);
    cr_assert(strstr(w.req, "\r\nContent-Type: application/json\r\n"), "%s", w.req);
    cr_assert(strstr(w.req, "\r\nContent-Length: 3000\r\n"), "%s", w.req);
    cr_assert_null(strcasestr(w.req, "\r\nExpect:"), "%s", w.req);
    cr_assert_str_eq(strstr(w.req, "\r\n\r\n") + 4, text);
    tu_run_free(&r);
    free(spec);
    free(text);
}

Test(client, reply_cap_without_content_length) {
    raw_t w;
    raw_start(&w, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n",
              17 * MIB);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", w.port);
    tu_run_t r;
    tu_run_bin(&r, RUN_TIMEOUT_S, "ls", "--url", url, NULL);
    raw_join(&w);
    cr_assert_eq(r.exit_code, 1);
    cr_assert_str_eq(r.err, "nightshift: the reply to GET /v1/experiments is larger than 16 MiB\n");
    tu_run_free(&r);
}

/* --------------------------------------------------------------------- ls */

#define LIST                                                                                       \
    "{\"experiments\":["                                                                           \
    "{\"id\":12,\"name\":\"wide\",\"tags\":[],\"status\":\"succeeded\",\"reason\":null,"           \
    "\"val_bpb\":1.2345678,\"created\":\"2026-11-29T19:37:00.123Z\"},"                             \
    "{\"id\":9,\"name\":\"\\u001b[31mred\",\"status\":\"failed\",\"reason\":\"exit 1\","           \
    "\"val_bpb\":null,\"created\":\"2026-11-28T08:05:09.000Z\"},"                                  \
    "{\"id\":1000,\"name\":null,\"status\":\"queued\",\"val_bpb\":null,"                           \
    "\"created\":\"2026-11-30T00:00:00.000Z\"}],"                                                  \
    "\"next_after\":7}"

Test(client, ls_table) {
    route("GET", "/v1/experiments", 200, LIST);
    tu_run_t r;
    tu_run_bin(&r, RUN_TIMEOUT_S, "ls", "--url", S.url, "--status", "succeeded", "--limit=3",
               "--order", "created", NULL);
    cr_assert_eq(r.exit_code, 0, "stderr: %s", r.err);
    cr_assert_str_eq(seen(0)->method, "GET");
    cr_assert_str_eq(seen(0)->query, "status=succeeded&order=created&limit=3");
    cr_assert_str_eq(r.out, "  ID  STATUS      VAL_BPB  VERDICT  DATASET  PARAMS  PARENT  NAME     "
                            " CREATED\n"
                            "  12  succeeded  1.234568  -        -             -       -  wide     "
                            " 2026-11-29 19:37:00\n"
                            "   9  failed            -  -        -             -       -  ?[31mred "
                            " 2026-11-28 08:05:09\n"
                            "1000  queued            -  -        -             -       -  -        "
                            " 2026-11-30 00:00:00\n");
    cr_assert_str_eq(r.err, "more: nightshift ls --after 7\n");
    /* The verdicts come from the leaderboard (here a 404: the column stays "-"). */
    cr_assert_str_eq(seen(1)->path, "/v1/leaderboard");
    tu_run_free(&r);

    tu_run_bin(&r, RUN_TIMEOUT_S, "ls", "--url", S.url, "--json", "--after", "7", "--status",
               "a b&c", NULL);
    cr_assert_eq(r.exit_code, 0);
    cr_assert_str_eq(r.out, LIST "\n");
    cr_assert_str_eq(seen(2)->query, "status=a%20b%26c&after=7");
    tu_run_free(&r);

    tu_run_bin_exit(2, RUN_TIMEOUT_S, "ls", "--url", S.url, "--limit", "0", NULL);
    tu_run_bin_exit(2, RUN_TIMEOUT_S, "ls", "--url", S.url, "extra", NULL);
    tu_run_bin_exit(2, RUN_TIMEOUT_S, "ls", "--url", S.url, "--budget", "time:300", NULL);
    cr_assert_eq(nseen(), 3);
}

/* The scope part of a scoped reply: book, 300 s, the default evaluation,
 * chosen as the latest result's; book's best is configuration #5 (three
 * seeds, mean 1.8), default's experiment 2 alone. */
#define SCOPED                                                                                     \
    "\"dataset\":\"book\",\"budget_kind\":\"time\",\"budget\":300,\"eval_tokens\":65536,"          \
    "\"scope_from\":\"latest_result\",\"scopes\":["                                                \
    "{\"dataset\":\"book\",\"budget_kind\":\"time\",\"budget\":300,\"eval_tokens\":65536,"         \
    "\"runs\":4,\"best_id\":5,\"best_val_bpb\":1.8,\"best_val_bpb_sd\":0.01,\"best_n_seeds\":3},"  \
    "{\"dataset\":\"default\",\"budget_kind\":\"time\",\"budget\":300,\"eval_tokens\":0,"          \
    "\"runs\":1,\"best_id\":2,\"best_val_bpb\":2.5,\"best_val_bpb_sd\":null,\"best_n_seeds\":1}]"

/* A book run of 300 s scored on the default count: BOOK_RUN(id, val_bpb). */
#define BOOK_RUN(id, bpb)                                                                          \
    "{\"id\":" #id ",\"status\":\"succeeded\",\"val_bpb\":" #bpb ",\"dataset\":\"book\","          \
    "\"budget_kind\":\"time\",\"budget\":300,\"eval_tokens\":65536,"                               \
    "\"created\":\"2026-11-29T19:37:00.000Z\"}"

Test(client, ls_by_val_bpb_ranks_one_scope_and_says_which) {
    route("GET", "/v1/experiments", 200,
          "{\"experiments\":[" BOOK_RUN(5, 1.79) "," BOOK_RUN(
              6, 1.9) "],\"next_after\":null," SCOPED "}");
    tu_run_t r;
    tu_run_bin(&r, RUN_TIMEOUT_S, "ls", "--url", S.url, "--order", "val_bpb", "--budget",
               "time:300", NULL);
    cr_assert_eq(r.exit_code, 0, "stderr: %s", r.err);
    cr_assert_str_eq(seen(0)->query, "budget=time%3A300&order=val_bpb");
    cr_assert(!strncmp(r.out,
                       "ranked within dataset book, budget time:300, eval_tokens 65536 (the scope "
                       "of the latest result)\n",
                       93),
              "%s", r.out);
    /* the verdict names what it compares with: a configuration's mean */
    cr_assert(strstr(r.out, " 1.900000  +0.1000 vs config #5 mean (3 seeds)  book "), "%s", r.out);
    cr_assert(strstr(r.out, " 1.790000  best "), "%s", r.out);
    cr_assert(strstr(r.out, "other scopes with results:\n  --dataset default --budget time:300 "
                            "--eval-tokens 0: 1 run, best 2.5000 (exp 2)\n"),
              "%s", r.out);
    cr_assert_eq(nseen(), 1, "the reply's scopes carry the bests: no second request");
    tu_run_free(&r);
}

/* --order queue lists the queue alone; unranked, the best of each of two
 * scopes says its budget. */
Test(client, ls_queue_and_the_best_of_each_scope) {
    route("GET", "/v1/experiments", 200,
          "{\"experiments\":[" BOOK_RUN(5, 1.79) "," BOOK_RUN(
              6, 1.9) ","
                      "{\"id\":2,\"status\":\"succeeded\",\"val_bpb\":2.5,\"dataset\":\"default\","
                      "\"budget_kind\":\"time\",\"budget\":300,\"eval_tokens\":0}],"
                      "\"next_after\":null}");
    route("GET", "/v1/leaderboard", 200, "{\"leaderboard\":[]," SCOPED "}");
    tu_run_t r;
    tu_run_bin(&r, RUN_TIMEOUT_S, "ls", "--url", S.url, "--order", "queue", NULL);
    cr_assert_eq(r.exit_code, 0, "stderr: %s", r.err);
    cr_expect_str_eq(seen(0)->query, "status=queued&order=queue");
    cr_expect(strstr(r.out, " 1.790000  best time:300 eval 65536 "), "%s", r.out);
    cr_expect(strstr(r.out, " 2.500000  best time:300 eval 0 "), "%s", r.out);
    cr_expect(strstr(r.out, " 1.900000  +0.1000 vs config #5 mean (3 seeds) "), "%s", r.out);
    tu_run_free(&r);
    /* a status given is kept */
    tu_run_bin(&r, RUN_TIMEOUT_S, "ls", "--url", S.url, "--order", "queue", "--status", "running",
               NULL);
    cr_assert_eq(r.exit_code, 0, "stderr: %s", r.err);
    cr_expect_str_eq(seen(2)->query, "status=running&order=queue");
    tu_run_free(&r);
}

/* ------------------------------------------------------------------- show */

#define SPEC_JSON                                                                                  \
    "{\"name\":\"wide\",\"seed\":42,\"dataset\":\"default\",\"time_budget_s\":300,"                \
    "\"model\":{\"depth\":4,\"n_embd\":256,\"n_head\":2,\"n_kv_head\":1,\"mlp\":\"swiglu\","       \
    "\"window_pattern\":\"SSSL\",\"ve_layers\":[0,2]},"                                            \
    "\"train\":{\"batch_size\":16,\"adam_betas\":[0.8,0.95]},\"tags\":[],\"resources\":{}}"

#define EXPERIMENT                                                                                 \
    "{\"id\":12,\"name\":\"wide\",\"tags\":[\"sweep\",\"gqa\"],\"status\":\"succeeded\","          \
    "\"reason\":null,\"source\":\"cli\",\"priority\":0,\"parent\":3,\"attempt\":1,"                \
    "\"created\":\"2026-11-29T19:37:00.000Z\",\"started\":\"2026-11-29T19:37:01.000Z\","           \
    "\"finished\":\"2026-11-29T19:42:05.500Z\",\"pid\":4242,\"exit_code\":0,"                      \
    "\"term_signal\":null,\"spec\":" SPEC_JSON ","                                                 \
    "\"result\":{\"val_bpb\":1.2345678,\"params_total\":3456789,\"num_steps\":456,"                \
    "\"training_seconds\":300.04,\"tokens_per_second\":12345.4,\"mfu_percent\":12.3,\"peak_"       \
    "gflops\":140.25,\"peak_source\":\"calibration\"},"                                            \
    "\"metrics\":[{\"step\":1,\"time_s\":0.5,\"loss\":9.1,\"lr_mult\":1,\"tok_s\":1000},"          \
    "{\"step\":2,\"time_s\":1,\"loss\":8.2,\"lr_mult\":1,\"tok_s\":2000},"                         \
    "{\"step\":3,\"time_s\":1.5,\"loss\":7.3,\"lr_mult\":1,\"tok_s\":3000},"                       \
    "{\"step\":4,\"time_s\":2,\"loss\":6.4,\"lr_mult\":1,\"tok_s\":4000},"                         \
    "{\"step\":5,\"time_s\":2.5,\"loss\":5.5,\"lr_mult\":0.9,\"tok_s\":5000},"                     \
    "{\"step\":6,\"time_s\":3,\"loss\":4.25,\"lr_mult\":0.5,\"tok_s\":12345}],"                    \
    "\"progress\":null}"

Test(client, show_summary_json_and_log) {
    route("GET", "/v1/experiments/12", 200, EXPERIMENT);
    route("GET", "/v1/experiments/12/log", 200, "step 1\nstep 2\n");
    tu_run_t r;
    tu_run_bin(&r, RUN_TIMEOUT_S, "show", "12", "--url", S.url, NULL);
    cr_assert_eq(r.exit_code, 0, "stderr: %s", r.err);
    cr_assert_str_eq(
        r.out, "experiment 12 \"wide\"\n"
               "  status     succeeded\n"
               "  tags       sweep, gqa\n"
               "  origin     source cli, priority 0, attempt 1, parent 3\n"
               "  created    2026-11-29 19:37:00\n"
               "  started    2026-11-29 19:37:01\n"
               "  finished   2026-11-29 19:42:05 (ran 5m05s)\n"
               "  worker     pid 4242, exit_code 0\n"
               "  spec       dataset default, time_budget_s 300, seed 42\n"
               "  model      depth 4, n_embd 256, n_head 2, n_kv_head 1, mlp swiglu, "
               "window_pattern SSSL, ve_layers [0,2], vocab_size from the dataset\n"
               "  train      batch_size 16\n"
               "  result     val_bpb 1.234568, params 3,456,789, 456 steps, 300.0 s training, "
               "12,345 tok/s, mfu 12.30% of 140.2 GFLOP/s (calibration)\n"
               "  metrics    last 5 of 6\n"
               "        step     time_s       loss    lr_mult      tok/s\n"
               "           2        1.0     8.2000      1.000      2,000\n"
               "           3        1.5     7.3000      1.000      3,000\n"
               "           4        2.0     6.4000      1.000      4,000\n"
               "           5        2.5     5.5000      0.900      5,000\n"
               "           6        3.0     4.2500      0.500     12,345\n");
    cr_assert_str_eq(seen(0)->path, "/v1/experiments/12");
    tu_run_free(&r);

    tu_run_bin(&r, RUN_TIMEOUT_S, "show", "--json", "12", "--url", S.url, NULL);
    cr_assert_eq(r.exit_code, 0);
    cr_assert_str_eq(r.out, EXPERIMENT "\n");
    tu_run_free(&r);

    tu_run_bin_out("step 1\nstep 2\n", RUN_TIMEOUT_S, "show", "12", "--log", "--tail", "100",
                   "--url", S.url, NULL);
    cr_assert_str_eq(seen(2)->path, "/v1/experiments/12/log");
    cr_assert_str_eq(seen(2)->query, "tail=100");

    /* a token-budgeted run shows its token budget, not time_budget_s 0 */
    route("GET", "/v1/experiments/13", 200,
          "{\"id\":13,\"name\":\"tokens\",\"status\":\"queued\",\"spec\":{\"dataset\":"
          "\"default\",\"time_budget_s\":0,\"token_budget\":245760,\"seed\":7}}");
    tu_run_bin(&r, RUN_TIMEOUT_S, "show", "13", "--url", S.url, NULL);
    cr_assert_eq(r.exit_code, 0, "stderr: %s", r.err);
    cr_expect(strstr(r.out, "  spec       dataset default, token_budget 245760, seed 7\n"), "%s",
              r.out);
    tu_run_free(&r);

    const char *bad[][3] = {{"abc"}, {"0"}, {"12", "13"}, {"12", "--tail", "5"}, {NULL}};
    for (int i = 0; i < 5; i++) {
        tu_run_bin_exit(2, RUN_TIMEOUT_S, "show", bad[i][0], bad[i][1], bad[i][2], NULL);
    }
    cr_assert_eq(nseen(), 4, "usage errors reach no server");
}

Test(client, show_running_with_progress) {
    route("GET", "/v1/experiments/7", 200,
          "{\"id\":7,\"name\":null,\"status\":\"running\",\"reason\":null,"
          "\"created\":\"2026-11-29T19:37:00.000Z\",\"started\":\"2026-11-29T19:37:01.000Z\","
          "\"finished\":null,\"pid\":99,\"exit_code\":null,\"term_signal\":null,"
          "\"spec\":{},\"result\":null,\"metrics\":[],"
          "\"progress\":{\"step\":130,\"percent\":45.2,\"loss\":3.2141,\"tok_s\":2810,"
          "\"eta_s\":164}}");
    route("GET", "/v1/experiments/8", 200,
          "{\"id\":8,\"status\":\"crashed\",\"reason\":\"killed by SIGSEGV\","
          "\"term_signal\":11,\"result\":null,\"progress\":null}");
    tu_run_bin_out("experiment 7\n"
                   "  status     running\n"
                   "  created    2026-11-29 19:37:00\n"
                   "  started    2026-11-29 19:37:01\n"
                   "  worker     pid 99\n"
                   "  progress   step 130, 45.2% of the budget, loss 3.214, "
                   "2,810 tok/s, ETA 2m44s\n",
                   RUN_TIMEOUT_S, "show", "7", "--url", S.url, NULL);
    tu_run_bin_out("experiment 8\n"
                   "  status     crashed (killed by SIGSEGV)\n"
                   "  worker     signal 11 (Segmentation fault)\n",
                   RUN_TIMEOUT_S, "show", "8", "--url", S.url, NULL);
}

/* ------------------------------------------------------------------- best */

Test(client, best_prints_a_spec_ready_to_resubmit) {
    route("GET", "/v1/best", 200,
          "{\"best\":{\"id\":12,\"name\":\"wide\",\"val_bpb\":1.2345678,\"spec\":" SPEC_JSON
          ",\"result\":{\"val_bpb\":1.2345678}}," SCOPED "}");
    tu_run_t r;
    tu_run_bin(&r, RUN_TIMEOUT_S, "best", "--url", S.url, NULL);
    cr_assert_eq(r.exit_code, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.err, "scope: dataset book, budget time:300, eval_tokens 65536 (the scope of "
                            "the latest result)\n"
                            "best: experiment 12 \"wide\" val_bpb 1.234568\n"
                            "other scopes with results:\n"
                            "  --dataset default --budget time:300 --eval-tokens 0: 1 run, best "
                            "2.5000 (exp 2)\n");
    cr_assert_str_eq(r.out, "{\n"
                            "  \"name\": \"wide\",\n"
                            "  \"seed\": 42,\n"
                            "  \"dataset\": \"default\",\n"
                            "  \"time_budget_s\": 300,\n"
                            "  \"model\": {\n"
                            "    \"depth\": 4,\n"
                            "    \"n_embd\": 256,\n"
                            "    \"n_head\": 2,\n"
                            "    \"n_kv_head\": 1,\n"
                            "    \"mlp\": \"swiglu\",\n"
                            "    \"window_pattern\": \"SSSL\",\n"
                            "    \"ve_layers\": [0, 2]\n"
                            "  },\n"
                            "  \"train\": {\n"
                            "    \"batch_size\": 16,\n"
                            "    \"adam_betas\": [0.8, 0.95]\n"
                            "  },\n"
                            "  \"tags\": [],\n"
                            "  \"resources\": {}\n"
                            "}\n");
    cJSON *got = cJSON_Parse(r.out), *want = cJSON_Parse(SPEC_JSON);
    cr_assert(cJSON_Compare(got, want, 1), "stdout is the spec, exactly");
    cJSON_Delete(got);
    cJSON_Delete(want);
    tu_run_free(&r);

    tu_run_bin(&r, RUN_TIMEOUT_S, "best", "--json", "--url", S.url, NULL);
    cr_assert_eq(r.exit_code, 0);
    cr_assert(strncmp(r.out, "{\"best\":{\"id\":12", 16) == 0, "%s", r.out);
    tu_run_free(&r);

    /* val_bpb only inside the result is found there. */
    clear_routes();
    route("GET", "/v1/best", 200,
          "{\"best\":{\"id\":3,\"spec\":{\"seed\":1},\"result\":{\"val_bpb\":0.9}}," SCOPED "}");
    tu_run_bin(&r, RUN_TIMEOUT_S, "best", "--url", S.url, NULL);
    cr_assert_eq(r.exit_code, 0, "stderr: %s", r.err);
    cr_assert(strstr(r.err, "\nbest: experiment 3 val_bpb 0.900000\n"), "%s", r.err);
    cr_assert_str_eq(r.out, "{\n  \"seed\": 1\n}\n");
    tu_run_free(&r);
}

Test(client, best_when_nothing_succeeded_names_the_scopes_with_results) {
    route("GET", "/v1/best", 200,
          "{\"best\":null,\"dataset\":\"default\",\"budget_kind\":\"time\",\"budget\":60,"
          "\"eval_tokens\":65536,\"scope_from\":\"latest_experiment\",\"scopes\":["
          "{\"dataset\":\"book\",\"budget_kind\":\"tokens\",\"budget\":4096000,"
          "\"eval_tokens\":65536,\"runs\":4,\"best_id\":5,\"best_val_bpb\":1.8,"
          "\"best_val_bpb_sd\":0.01,\"best_n_seeds\":3}]}");
    tu_run_t r;
    tu_run_bin(&r, RUN_TIMEOUT_S, "best", "--url", S.url, "--dataset", "default", NULL);
    cr_assert_eq(r.exit_code, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out, "");
    cr_assert_str_eq(r.err, "nothing has succeeded yet in dataset default, budget time:60, "
                            "eval_tokens 65536 (the scope of the latest experiment: nothing has a "
                            "result yet)\n"
                            "the scopes with results:\n"
                            "  --dataset book --budget tokens:4096000 --eval-tokens 65536: 4 runs, "
                            "best 1.8000 (config #5 mean of 3 seeds)\n");
    tu_run_free(&r);
    clear_routes();
    route("GET", "/v1/best", 200,
          "{\"best\":null,\"dataset\":\"default\",\"budget_kind\":\"time\",\"budget\":300,"
          "\"eval_tokens\":65536,\"scope_from\":\"defaults\",\"scopes\":[]}");
    tu_run_bin(&r, RUN_TIMEOUT_S, "best", "--url", S.url, NULL);
    cr_assert_eq(r.exit_code, 0, "stderr: %s", r.err);
    cr_assert(
        strstr(r.err, "(the spec's defaults: nothing has run yet)\nno scope has results yet\n"),
        "%s", r.err);
    tu_run_free(&r);
}

/* ----------------------------------------------------------------- cancel */

Test(client, cancel_queued_and_running) {
    S.token = "t";
    route("POST", "/v1/experiments/5/cancel", 200, "{\"id\":5,\"status\":\"cancelled\"}");
    route("POST", "/v1/experiments/6/cancel", 200, "{\"id\":6,\"status\":\"cancelling\"}");
    tu_run_bin_out("5 cancelled\n", RUN_TIMEOUT_S, "cancel", "5", "--url", S.url, "--token", "t",
                   NULL);
    cr_assert_str_eq(seen(0)->method, "POST");
    cr_assert_str_eq(seen(0)->path, "/v1/experiments/5/cancel");
    cr_assert_str_eq(seen(0)->body, "");
    tu_run_bin_exit(2, RUN_TIMEOUT_S, "cancel", "--token=t", NULL); /* no id */
    tu_run_bin_out("6 cancelling (the worker is being stopped)\n", RUN_TIMEOUT_S, "cancel", "6",
                   "--url", S.url, "--token=t", NULL);
    tu_run_bin_exit(2, RUN_TIMEOUT_S, "cancel", "-3", "--url", S.url, NULL);
    cr_assert_eq(nseen(), 2);
}

/* ------------------------------------------------------------------ watch */

#define STATUS                                                                                     \
    "{\"version\":\"0.1.0\",\"uptime_s\":12.3,\"queue_depth\":3,\"slots\":["                       \
    "{\"slot\":0,\"cpus\":\"0-1\",\"threads\":2,\"experiment\":{\"id\":12,\"name\":\"wide\"},"     \
    "\"progress\":{\"step\":130,\"percent\":45.2,\"loss\":3.2141,\"tok_s\":2810.4,"                \
    "\"eta_s\":164,\"training_seconds\":135.6,\"time_budget_s\":300}},"                            \
    "{\"slot\":1,\"cpus\":\"2-3\",\"threads\":2,\"experiment\":null,\"progress\":null},"           \
    "{\"slot\":2,\"cpus\":\"4-5\",\"threads\":2,\"experiment\":{\"id\":13,\"name\":null},"         \
    "\"progress\":null}]}"

#define STATUS_LINES                                                                               \
    "slot 0 [#########...........]  45.2% ETA 2m44s exp 12 step 130 loss 3.214 2,810 tok/s "       \
    "\"wide\"\n"                                                                                   \
    "slot 1 idle\n"                                                                                \
    "slot 2 [....................]   0.0% exp 13 starting\n"                                       \
    "queue: 3 queued\n"

Test(client, watch_once_plain) {
    route("GET", "/v1/status", 200, STATUS);
    tu_run_t r;
    tu_run_bin(&r, RUN_TIMEOUT_S, "watch", "--once", "--url", S.url, NULL);
    cr_assert_eq(r.exit_code, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out, STATUS_LINES);
    cr_assert_str_eq(r.err, "");
    cr_assert_str_eq(seen(0)->path, "/v1/status");
    tu_run_free(&r);
    tu_run_bin_exit(2, RUN_TIMEOUT_S, "watch", "--interval", "0.01", NULL);
}

/* Past the budget the worker is evaluating; below the slots, the last finished
 * experiment with its verdict and the best of each dataset. */
Test(client, watch_evaluating_last_and_best) {
    route("GET", "/v1/status", 200,
          "{\"queue_depth\":2,\"slots\":[{\"slot\":0,\"experiment\":{\"id\":7,\"name\":"
          "\"deep\"},\"progress\":{\"step\":400,\"percent\":100,\"loss\":2.9141,"
          "\"tok_s\":2810,\"eta_s\":0}}]}");
    route("GET", "/v1/experiments", 200,
          "{\"experiments\":[{\"id\":7,\"status\":\"running\"},"
          "{\"id\":6,\"name\":\"wide\",\"status\":\"succeeded\",\"val_bpb\":1.9,"
          "\"dataset\":\"book\",\"budget_kind\":\"time\",\"budget\":300,\"eval_tokens\":65536},"
          "{\"id\":5,\"status\":\"succeeded\",\"val_bpb\":1.8}]}");
    route("GET", "/v1/leaderboard", 200, "{\"leaderboard\":[]," SCOPED "}");
    tu_run_bin_out("slot 0 [####################] evaluating exp 7 step 400 loss 2.914 "
                   "\"deep\"\n"
                   "last: exp 6 \"wide\" succeeded val_bpb 1.9000, +0.1000 vs config #5 mean (3 "
                   "seeds) on book\n"
                   "best: book 300 s 1.8000 (config #5 mean of 3 seeds); default 300 s 2.5000 "
                   "(exp 2)\n"
                   "queue: 2 queued\n",
                   RUN_TIMEOUT_S, "watch", "--once", "--url", S.url, NULL);
    cr_assert_str_eq(seen(1)->query, "order=-id&limit=20");
}

static int count(const char *s, const char *what) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)); p += strlen(what)) n++;
    return n;
}

/* Run `nightshift watch --interval 0.1` against STATUS with stdout on a pipe
 * or on a pseudo-terminal (tty), wait until it has drawn `frames` snapshots,
 * send SIGINT, and collect what it printed until it exits. Returns the exit
 * status from waitpid. */
static int watch_until_sigint(int tty, int frames, char *out, size_t cap) {
    int fd = -1, p[2] = {-1, -1};
    pid_t pid;
    char *argv[] = {(char *)tu_bin(), "watch", "--interval", "0.1", "--url", S.url, NULL};
    size_t len = 0;
    if (tty) {
        struct winsize ws = {.ws_row = 24, .ws_col = 60};
        pid = forkpty(&fd, NULL, NULL, &ws);
    } else {
        cr_assert_eq(pipe(p), 0);
        pid = fork();
        fd = p[0];
    }
    cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        if (!tty) {
            dup2(p[1], 1);
            close(p[0]), close(p[1]);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    if (!tty) close(p[1]);
    double deadline = tu_now() + 10;
    int sent = 0, status = 0, done = 0, eof = 0;
    out[0] = '\0';
    while (!done && tu_now() < deadline) {
        if (!sent && count(out, "queue: 3 queued") >= frames) {
            kill(pid, SIGINT);
            sent = 1;
        }
        struct pollfd pf = {fd, POLLIN, 0};
        if (eof)
            usleep(10000);
        else if (poll(&pf, 1, 50) > 0 && !tu_read_some(fd, out, &len, cap))
            eof = 1; /* EOF, or EIO once a pty's child is gone */
        done = waitpid(pid, &status, WNOHANG) == pid;
    }
    if (!done) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        close(fd);
        cr_assert_fail("watch did not exit after SIGINT (sent: %d); output: %s", sent, out);
    }
    for (struct pollfd pf = {fd, POLLIN, 0}; !eof && poll(&pf, 1, 100) > 0;)
        eof = !tu_read_some(fd, out, &len, cap); /* what was still buffered */
    close(fd);
    cr_assert(sent, "watch drew %d frames, wanted %d", count(out, "queue: 3 queued"), frames);
    return status;
}

Test(client, watch_plain_until_sigint) {
    route("GET", "/v1/status", 200, STATUS);
    static char out[65536];
    int status = watch_until_sigint(0, 3, out, sizeof out);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
    cr_assert_geq(count(out, STATUS_LINES), 3, "%s", out);
    cr_assert_null(strchr(out, '\x1b'), "no escape sequences off a terminal");
}

Test(client, watch_redraws_on_a_terminal) {
    route("GET", "/v1/status", 200, STATUS);
    static char out[65536];
    int status = watch_until_sigint(1, 3, out, sizeof out);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
    /* Hidden cursor first; each later frame moves up over the 4 lines drawn. */
    cr_assert_eq(strncmp(out, "\x1b[?25l", 6), 0, "%s", out);
    cr_assert(strstr(out, "\x1b[4A\r\x1b[2Kslot 0 ["), "%s", out);
    /* Lines are cut to the 60-column terminal (59 characters). */
    cr_assert(strstr(out, "\r\x1b[2Kslot 0 [#########...........]  45.2% ETA 2m44s exp 12 step "
                          "\r\n"),
              "%s", out);
    cr_assert_null(strstr(out, "tok/s"), "%s", out);
    /* The cursor is shown again at the end. */
    char *show = strstr(out, "\x1b[?25h");
    cr_assert_not_null(show, "%s", out);
}

/* ------------------------------------------------------------------- help */

Test(client, help_for_every_command) {
    const char *cmds[] = {"submit", "ls", "show", "best", "cancel", "watch"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        tu_run_t r;
        tu_run_bin(&r, RUN_TIMEOUT_S, cmds[i], "--help", NULL);
        cr_assert_eq(r.exit_code, 0, "%s", cmds[i]);
        char want[64];
        snprintf(want, sizeof want, "usage: nightshift %s ", cmds[i]);
        cr_assert_eq(strncmp(r.out, want, strlen(want)), 0, "%s", r.out);
        cr_assert(strstr(r.out, "--token-file F"), "%s", r.out);
        tu_run_free(&r);
        tu_run_bin_exit(2, RUN_TIMEOUT_S, cmds[i], "--bogus", NULL);
    }
    tu_run_t r;
    tu_run_bin(&r, RUN_TIMEOUT_S, "--help", NULL);
    cr_assert_eq(r.exit_code, 0);
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char want[64];
        snprintf(want, sizeof want, "\n  %-10s ", cmds[i]);
        cr_assert(strstr(r.out, want), "%s missing from: %s", cmds[i], r.out);
    }
    tu_run_free(&r);
    cr_assert_eq(nseen(), 0);
}
