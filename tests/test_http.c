/* test_http.c - the HTTP server driven over real loopback sockets.
 *
 * Each test starts a server on 127.0.0.1 port 0 with an echo handler, runs
 * its libuv loop in a second thread, and talks to it from the test thread
 * with plain blocking sockets (receive timeouts bound every wait). Stopping
 * the server goes through a uv_async_t to the loop thread; the test then
 * checks that uv_loop_close succeeds, i.e. every handle was closed (ASan
 * checks the memory). The query and loopback helpers are tested directly. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/shared/http.h"
#include "tests/testutil.h"

/* ----------------------------------------------------------- the server */

typedef struct {
    uv_loop_t loop;
    uv_async_t stop;
    http_server_t *srv[2];
    int port[2];
    int nsrv;
    int closed; /* servers whose done callback ran */
    pthread_t thread;
    int running;
} fixture_t;

static fixture_t F;

static void server_done_cb(void *arg) {
    fixture_t *f = arg;
    if (++f->closed == f->nsrv) uv_close((uv_handle_t *)&f->stop, NULL);
}

static void stop_cb(uv_async_t *a) {
    fixture_t *f = a->data;
    for (int i = 0; i < f->nsrv; i++) http_server_close(f->srv[i], server_done_cb, f);
}

/* The handler answers JSON describing the request; a few paths do more. */
static void echo_handler(const http_request_t *req, http_response_t *res, void *user) {
    fixture_t *f = user;
    if (!strcmp(req->path, "/shutdown")) { /* closes the server from inside a handler */
        for (int i = 0; i < f->nsrv; i++) http_server_close(f->srv[i], server_done_cb, f);
        http_error(res, 200, "bye", "closing");
        return;
    }
    if (!strcmp(req->path, "/nostatus")) return;
    if (!strcmp(req->path, "/big")) { /* 300 000 bytes of text */
        res->status = 200;
        res->content_type = "text/plain";
        res->body_len = 300000;
        res->body = malloc(res->body_len);
        cr_assert_not_null(res->body);
        for (size_t i = 0; i < res->body_len; i++) res->body[i] = (char)('a' + i % 26);
        return;
    }
    char x[64];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "method", req->method);
    cJSON_AddStringToObject(o, "path", req->path);
    cJSON_AddStringToObject(o, "query", req->query);
    cJSON_AddStringToObject(o, "body", req->body);
    cJSON_AddNumberToObject(o, "body_len", (double)req->body_len);
    cJSON_AddStringToObject(o, "peer", req->peer);
    if (req->authorization) cJSON_AddStringToObject(o, "auth", req->authorization);
    if (req->content_type) cJSON_AddStringToObject(o, "ctype", req->content_type);
    if (req->source) cJSON_AddStringToObject(o, "source", req->source);
    if (http_query_get(req->query, "x", x, sizeof x) == 1) cJSON_AddStringToObject(o, "x", x);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    res->status = !strcmp(req->method, "POST") ? 201 : 200;
    res->body_len = strlen(text);
    res->body = malloc(res->body_len + 1);
    memcpy(res->body, text, res->body_len + 1);
    cJSON_free(text);
}

static void *loop_thread(void *arg) {
    uv_run(arg, UV_RUN_DEFAULT);
    return NULL;
}

/* Start n servers (1 or 2) on one loop with lim (NULL = defaults) and run the
 * loop in a thread. */
static void srv_start_n(const http_limits_t *lim, int n) {
    char err[256];
    memset(&F, 0, sizeof F);
    cr_assert_eq(uv_loop_init(&F.loop), 0);
    cr_assert_eq(uv_async_init(&F.loop, &F.stop, stop_cb), 0);
    F.stop.data = &F;
    F.nsrv = n;
    for (int i = 0; i < n; i++) {
        int r = http_server_start(&F.loop, "127.0.0.1", 0, lim, echo_handler, &F, &F.srv[i],
                                  &F.port[i], err, sizeof err);
        cr_assert_eq(r, 0, "start: %s", err);
        cr_assert_gt(F.port[i], 0);
    }
    cr_assert_eq(pthread_create(&F.thread, NULL, loop_thread, &F.loop), 0);
    F.running = 1;
}

static void srv_start(const http_limits_t *lim) {
    srv_start_n(lim, 1);
}

/* Wait for the loop thread (the servers are closed or closing) and check that
 * every handle is gone. */
static void srv_join(void) {
    cr_assert_eq(pthread_join(F.thread, NULL), 0);
    F.running = 0;
    cr_assert_eq(F.closed, F.nsrv);
    cr_assert_eq(uv_loop_close(&F.loop), 0, "handles left open");
}

static void srv_stop(void) {
    uv_async_send(&F.stop);
    srv_join();
}

/* The server's default limits, for a test to change one or two. */
static http_limits_t default_limits(void) {
    http_limits_t lim;
    http_limits_default(&lim);
    return lim;
}

/* ----------------------------------------------------------- the client */

typedef struct {
    int fd;
    char buf[(1 << 19) + 1]; /* + 1 for a NUL after the data */
    size_t len;
} client_t;

typedef struct {
    int status;
    char head[8192]; /* status line and headers */
    char *body;      /* malloc'd, NUL-terminated */
    size_t body_len;
} resp_t;

static double now_ms(void) {
    return tu_now() * 1e3;
}

/* Connect to 127.0.0.1:port; every read gives up after timeout_ms. */
static client_t *cli_open_to(int port, int timeout_ms) {
    client_t *c = calloc(1, sizeof *c);
    cr_assert_not_null(c);
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(c->fd, 0);
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(c->fd, (struct sockaddr *)&a, sizeof a), 0, "connect: %s",
                 strerror(errno));
    return c;
}

static client_t *cli_open(int port) {
    return cli_open_to(port, 5000);
}

static void cli_close(client_t *c) {
    close(c->fd);
    free(c);
}

/* The usual pair: one server with lim (NULL = defaults) and one client of
 * it; srv_client_stop closes the client and stops the server. */
static client_t *srv_client(const http_limits_t *lim) {
    srv_start(lim);
    return cli_open(F.port[0]);
}

static void srv_client_stop(client_t *c) {
    cli_close(c);
    srv_stop();
}

/* Send everything; returns 0, or -1 if the server closed (no SIGPIPE). */
static int cli_send_n(client_t *c, const char *data, size_t n) {
    while (n > 0) {
        ssize_t w = send(c->fd, data, n, MSG_NOSIGNAL);
        if (w <= 0) return -1;
        data += w;
        n -= (size_t)w;
    }
    return 0;
}

static void cli_send(client_t *c, const char *s) {
    cr_assert_eq(cli_send_n(c, s, strlen(s)), 0, "send failed");
}

/* More bytes into c->buf; returns the count, 0 at EOF, -1 on timeout/error. */
static ssize_t cli_fill(client_t *c) {
    cr_assert_lt(c->len, sizeof c->buf - 1, "response larger than the client buffer");
    ssize_t r = recv(c->fd, c->buf + c->len, sizeof c->buf - 1 - c->len, 0);
    if (r > 0) c->len += (size_t)r;
    return r < 0 ? -1 : r;
}

/* The value of header name in a response head, copied into out; NULL if absent. */
static const char *resp_header(const resp_t *r, const char *name, char *out, size_t outlen) {
    const char *p = strstr(r->head, "\r\n");
    size_t n = strlen(name);
    while (p && p[2]) {
        p += 2;
        if (!strncasecmp(p, name, n) && p[n] == ':') {
            const char *v = p + n + 1;
            while (*v == ' ') v++;
            const char *e = strstr(v, "\r\n");
            size_t len = e ? (size_t)(e - v) : strlen(v);
            if (len >= outlen) len = outlen - 1;
            memcpy(out, v, len);
            out[len] = '\0';
            return out;
        }
        p = strstr(p, "\r\n");
    }
    return NULL;
}

/* Read one response (Content-Length framing only, which is all the server
 * sends). Returns 0, or -1 on EOF or timeout before a whole response. */
static int cli_read(client_t *c, resp_t *r) {
    memset(r, 0, sizeof *r);
    char *end;
    for (;;) {
        c->buf[c->len] = '\0';
        if ((end = memmem(c->buf, c->len, "\r\n\r\n", 4))) break;
        if (cli_fill(c) <= 0) return -1;
    }
    size_t hlen = (size_t)(end - c->buf) + 4;
    cr_assert_lt(hlen, sizeof r->head);
    memcpy(r->head, c->buf, hlen);
    r->head[hlen] = '\0';
    cr_assert_eq(sscanf(r->head, "HTTP/1.1 %d", &r->status), 1, "bad status line: %s", r->head);
    char cl[32];
    r->body_len = resp_header(r, "Content-Length", cl, sizeof cl) ? strtoul(cl, NULL, 10) : 0;
    while (c->len < hlen + r->body_len)
        if (cli_fill(c) <= 0) return -1;
    r->body = malloc(r->body_len + 1);
    cr_assert_not_null(r->body);
    memcpy(r->body, c->buf + hlen, r->body_len);
    r->body[r->body_len] = '\0';
    memmove(c->buf, c->buf + hlen + r->body_len, c->len - hlen - r->body_len);
    c->len -= hlen + r->body_len;
    return 0;
}

/* A request that must be answered: read and check the status. */
static void cli_expect(client_t *c, resp_t *r, int status) {
    cr_assert_eq(cli_read(c, r), 0, "no response");
    cr_assert_eq(r->status, status, "status %d, expected %d: %s%s", r->status, status, r->head,
                 r->body);
}

static void resp_free(resp_t *r) {
    free(r->body);
    r->body = NULL;
}

/* A request whose answer matters only for its status. */
static void cli_expect_status(client_t *c, int status) {
    resp_t r;
    cli_expect(c, &r, status);
    resp_free(&r);
}

/* Did the server close the connection (EOF or reset) with nothing more sent? */
static int cli_closed(client_t *c) {
    char b[256];
    if (c->len) return 0;
    ssize_t n = recv(c->fd, b, sizeof b, 0);
    return n == 0 || (n < 0 && errno == ECONNRESET);
}

/* The string field key of a JSON body (static copy; "" if absent). */
static const char *json_str(const char *body, const char *key) {
    static char out[4096];
    out[0] = '\0';
    cJSON *o = cJSON_Parse(body);
    cr_assert_not_null(o, "not JSON: %s", body);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsString(v)) snprintf(out, sizeof out, "%s", v->valuestring);
    cJSON_Delete(o);
    return out;
}

/* The error envelope's code, checking the envelope's shape. */
static const char *error_code(const char *body) {
    static char out[64];
    cJSON *o = cJSON_Parse(body);
    cr_assert_not_null(o, "not JSON: %s", body);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "error");
    cr_assert(cJSON_IsObject(e), "no error object: %s", body);
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(e, "code");
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(e, "message");
    cr_assert(cJSON_IsString(code) && cJSON_IsString(msg), "bad envelope: %s", body);
    cr_assert_gt(strlen(msg->valuestring), 0);
    snprintf(out, sizeof out, "%s", code->valuestring);
    cJSON_Delete(o);
    return out;
}

TestSuite(http, .timeout = 10);

/* ------------------------------------------------------ basic requests */

Test(http, get_with_query) {
    client_t *c = srv_client(NULL);
    cli_send(c, "GET /v1/items?x=hello+w%6Frld&limit=5 HTTP/1.1\r\nHost: t\r\n"
                "Authorization: Bearer s3cret\r\nx-NightShift-source: cli\r\n\r\n");
    resp_t r;
    cli_expect(c, &r, 200);
    char h[128];
    cr_assert(strncmp(r.head, "HTTP/1.1 200 OK\r\n", 17) == 0, "%s", r.head);
    cr_assert_str_eq(resp_header(&r, "Content-Type", h, sizeof h), "application/json");
    cr_assert_str_eq(resp_header(&r, "Connection", h, sizeof h), "keep-alive");
    cr_assert_str_eq(resp_header(&r, "Cache-Control", h, sizeof h), "no-store");
    cr_assert_str_eq(json_str(r.body, "method"), "GET");
    cr_assert_str_eq(json_str(r.body, "path"), "/v1/items");
    cr_assert_str_eq(json_str(r.body, "query"), "x=hello+w%6Frld&limit=5");
    cr_assert_str_eq(json_str(r.body, "x"), "hello world");
    cr_assert_str_eq(json_str(r.body, "auth"), "Bearer s3cret");
    cr_assert_str_eq(json_str(r.body, "source"), "cli");
    cr_assert_str_eq(json_str(r.body, "body"), "");
    cr_assert_eq(strncmp(json_str(r.body, "peer"), "127.0.0.1:", 10), 0);
    cr_assert_str_eq(json_str(r.body, "ctype"), "");
    resp_free(&r);
    srv_client_stop(c);
}

Test(http, post_with_body) {
    client_t *c = srv_client(NULL);
    cli_send(c, "POST /v1/experiments HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                "Content-Length: 13\r\n\r\n{\"seed\": 42}\n");
    resp_t r;
    cli_expect(c, &r, 201);
    cr_assert(strncmp(r.head, "HTTP/1.1 201 Created\r\n", 22) == 0, "%s", r.head);
    cr_assert_str_eq(json_str(r.body, "method"), "POST");
    cr_assert_str_eq(json_str(r.body, "body"), "{\"seed\": 42}\n");
    cr_assert_str_eq(json_str(r.body, "ctype"), "application/json");
    cr_assert_str_eq(json_str(r.body, "query"), "");
    cr_assert_str_eq(json_str(r.body, "source"), ""); /* absent: NULL, not echoed */
    cr_assert_str_eq(json_str(r.body, "auth"), "");
    resp_free(&r);
    srv_client_stop(c);
}

Test(http, body_exactly_at_cap_passes_one_more_is_413) {
    http_limits_t lim = default_limits();
    lim.max_body_bytes = 100;
    srv_start(&lim);
    char req[512], body[102];
    memset(body, 'b', 101);
    body[101] = '\0';
    client_t *c = cli_open(F.port[0]);
    snprintf(req, sizeof req, "POST / HTTP/1.1\r\nContent-Length: 100\r\n\r\n%.100s", body);
    cli_send(c, req);
    resp_t r;
    cli_expect(c, &r, 201);
    cr_assert_str_eq(json_str(r.body, "body"), req + strlen(req) - 100);
    resp_free(&r);
    snprintf(req, sizeof req, "POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n%s", body);
    cli_send(c, req);
    cli_expect_status(c, 413);
    srv_client_stop(c);
}

Test(http, head_has_length_but_no_body) {
    client_t *c = srv_client(NULL);
    cli_send(c, "HEAD /x HTTP/1.1\r\n\r\nGET /y HTTP/1.1\r\n\r\n");
    resp_t r;
    /* The reader would take the GET's bytes as the HEAD's body; read by hand. */
    for (int i = 0; i < 100 && !memmem(c->buf, c->len, "\r\n\r\n", 4); i++)
        cr_assert_gt(cli_fill(c), 0);
    char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
    cr_assert_not_null(end);
    size_t hlen = (size_t)(end - c->buf) + 4;
    memcpy(r.head, c->buf, hlen);
    r.head[hlen] = '\0';
    char h[32];
    cr_assert_gt(strtoul(resp_header(&r, "Content-Length", h, sizeof h), NULL, 10), 0);
    memmove(c->buf, c->buf + hlen, c->len - hlen);
    c->len -= hlen;
    cli_expect(c, &r, 200); /* the next bytes are the GET's response */
    cr_assert_str_eq(json_str(r.body, "path"), "/y");
    resp_free(&r);
    srv_client_stop(c);
}

Test(http, handler_without_status_is_500) {
    client_t *c = srv_client(NULL);
    cli_send(c, "GET /nostatus HTTP/1.1\r\n\r\n");
    resp_t r;
    cli_expect(c, &r, 500);
    cr_assert_str_eq(error_code(r.body), "internal");
    resp_free(&r);
    srv_client_stop(c);
}

/* ------------------------------------------------- keep-alive, pipelining */

Test(http, keep_alive_two_requests) {
    client_t *c = srv_client(NULL);
    resp_t r;
    cli_send(c, "GET /one HTTP/1.1\r\n\r\n");
    cli_expect(c, &r, 200);
    cr_assert_str_eq(json_str(r.body, "path"), "/one");
    const char *peer1 = strdup(json_str(r.body, "peer"));
    resp_free(&r);
    cli_send(c, "GET /two HTTP/1.1\r\n\r\n");
    cli_expect(c, &r, 200);
    cr_assert_str_eq(json_str(r.body, "path"), "/two");
    cr_assert_str_eq(json_str(r.body, "peer"), peer1, "not the same connection");
    free((void *)peer1);
    resp_free(&r);
    srv_client_stop(c);
}

Test(http, pipelined_requests_answered_in_order) {
    client_t *c = srv_client(NULL);
    cli_send(c, "GET /p?x=1 HTTP/1.1\r\n\r\n"
                "POST /p?x=2 HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
                "GET /big HTTP/1.1\r\n\r\n"
                "GET /p?x=4 HTTP/1.1\r\nConnection: close\r\n\r\n"
                "GET /p?x=5 HTTP/1.1\r\n\r\n");
    resp_t r;
    cli_expect(c, &r, 200);
    cr_assert_str_eq(json_str(r.body, "x"), "1");
    resp_free(&r);
    cli_expect(c, &r, 201);
    cr_assert_str_eq(json_str(r.body, "x"), "2");
    cr_assert_str_eq(json_str(r.body, "body"), "hello");
    resp_free(&r);
    cli_expect(c, &r, 200);
    cr_assert_eq(r.body_len, 300000);
    cr_assert_eq(r.body[299999], (char)('a' + 299999 % 26));
    resp_free(&r);
    cli_expect(c, &r, 200);
    cr_assert_str_eq(json_str(r.body, "x"), "4");
    char h[32];
    cr_assert_str_eq(resp_header(&r, "Connection", h, sizeof h), "close");
    resp_free(&r);
    cr_assert(cli_closed(c), "the request after Connection: close was answered");
    srv_client_stop(c);
}

Test(http, pipelined_bytes_split_across_reads) {
    client_t *c = srv_client(NULL);
    const char *req =
        "POST /s?x=1 HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET /s?x=2 HTTP/1.1\r\n\r\n";
    for (const char *p = req; *p; p++) { /* one byte per send, with pauses */
        cr_assert_eq(cli_send_n(c, p, 1), 0);
        if ((p - req) % 16 == 0) usleep(2000);
    }
    resp_t r;
    cli_expect(c, &r, 201);
    cr_assert_str_eq(json_str(r.body, "body"), "abc");
    resp_free(&r);
    cli_expect(c, &r, 200);
    cr_assert_str_eq(json_str(r.body, "x"), "2");
    resp_free(&r);
    srv_client_stop(c);
}

Test(http, connection_close_closes) {
    client_t *c = srv_client(NULL);
    cli_send(c, "GET / HTTP/1.1\r\nConnection: close\r\n\r\n");
    resp_t r;
    cli_expect(c, &r, 200);
    char h[32];
    cr_assert_str_eq(resp_header(&r, "Connection", h, sizeof h), "close");
    resp_free(&r);
    cr_assert(cli_closed(c));
    srv_client_stop(c);
}

Test(http, http10_closes_unless_keep_alive) {
    client_t *c = srv_client(NULL);
    resp_t r;
    char h[32];
    cli_send(c, "GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    cli_expect(c, &r, 200);
    cr_assert_str_eq(resp_header(&r, "Connection", h, sizeof h), "keep-alive");
    resp_free(&r);
    cli_send(c, "GET /b HTTP/1.0\r\n\r\n");
    cli_expect(c, &r, 200);
    cr_assert_str_eq(resp_header(&r, "Connection", h, sizeof h), "close");
    resp_free(&r);
    cr_assert(cli_closed(c));
    srv_client_stop(c);
}

Test(http, expect_100_continue) {
    client_t *c = srv_client(NULL);
    cli_send(c, "POST /e HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n");
    resp_t r;
    cli_expect_status(c, 100);
    cli_send(c, "data");
    cli_expect(c, &r, 201);
    cr_assert_str_eq(json_str(r.body, "body"), "data");
    resp_free(&r);
    srv_client_stop(c);
}

/* ------------------------------------------------------------- limits */

Test(http, content_length_over_cap_is_413_at_once) {
    http_limits_t lim = default_limits();
    lim.max_body_bytes = 1024;
    client_t *c = srv_client(&lim);
    /* The body is never sent: the answer must come from the headers alone. */
    cli_send(c, "POST / HTTP/1.1\r\nContent-Length: 5000\r\n\r\n");
    resp_t r;
    cli_expect(c, &r, 413);
    cr_assert_str_eq(error_code(r.body), "body_too_large");
    char h[32];
    cr_assert_str_eq(resp_header(&r, "Connection", h, sizeof h), "close");
    resp_free(&r);
    cr_assert(cli_closed(c));
    srv_client_stop(c);
}

/* The client keeps sending the oversized body it announced; the 413 must still
 * reach it (the server discards input before closing instead of resetting). */
Test(http, client_still_sending_gets_413) {
    http_limits_t lim = default_limits();
    lim.max_body_bytes = 1024;
    srv_start(&lim);
    for (int round = 0; round < 3; round++) {
        client_t *c = cli_open(F.port[0]);
        static char chunk[65536];
        memset(chunk, 'x', sizeof chunk);
        cli_send(c, "POST / HTTP/1.1\r\nContent-Length: 4194304\r\n\r\n");
        for (int i = 0; i < 64; i++)
            if (cli_send_n(c, chunk, sizeof chunk)) break;
        resp_t r;
        cli_expect(c, &r, 413);
        resp_free(&r);
        cli_close(c);
    }
    srv_stop();
}

Test(http, chunked_body) {
    http_limits_t lim = default_limits();
    lim.max_body_bytes = 1024;
    client_t *c = srv_client(&lim);
    cli_send(c, "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
    resp_t r;
    cli_expect(c, &r, 201);
    cr_assert_str_eq(json_str(r.body, "body"), "hello world");
    resp_free(&r);
    /* Then chunks that together exceed the cap on the same connection. */
    char chunk[700];
    memset(chunk, 'z', sizeof chunk);
    cli_send(c, "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 3; i++) {
        if (cli_send_n(c, "2bc\r\n", 5) || cli_send_n(c, chunk, sizeof chunk) ||
            cli_send_n(c, "\r\n", 2))
            break; /* the server may already have answered and shut down */
    }
    cli_expect(c, &r, 413);
    cr_assert_str_eq(error_code(r.body), "body_too_large");
    resp_free(&r);
    cr_assert(cli_closed(c));
    srv_client_stop(c);
}

Test(http, huge_headers_are_431) {
    http_limits_t lim = default_limits();
    lim.max_header_bytes = 1024;
    client_t *c = srv_client(&lim);
    char big[3000];
    memset(big, 'h', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    cli_send(c, "GET / HTTP/1.1\r\nX-Big: ");
    cli_send_n(c, big, strlen(big));
    cli_send_n(c, "\r\n\r\n", 4);
    resp_t r;
    cli_expect(c, &r, 431);
    cr_assert_str_eq(error_code(r.body), "headers_too_large");
    resp_free(&r);
    cr_assert(cli_closed(c));
    cli_close(c);
    /* Many small headers count together. */
    c = cli_open(F.port[0]);
    cli_send(c, "GET / HTTP/1.1\r\n");
    for (int i = 0; i < 100; i++)
        if (cli_send_n(c, "X-Small: 0123456789\r\n", 21)) break;
    cli_send_n(c, "\r\n", 2);
    cli_expect_status(c, 431);
    srv_client_stop(c);
}

Test(http, slow_request_is_408) {
    http_limits_t lim = default_limits();
    lim.request_timeout_ms = 200;
    client_t *c = srv_client(&lim);
    double t0 = now_ms();
    cli_send(c, "GET / HTTP/1.1\r\nHost: slow\r\n"); /* never finished */
    resp_t r;
    cli_expect(c, &r, 408);
    double dt = now_ms() - t0;
    cr_assert_str_eq(error_code(r.body), "request_timeout");
    cr_assert(dt > 150 && dt < 3000, "408 after %.0f ms", dt);
    resp_free(&r);
    cr_assert(cli_closed(c));
    srv_client_stop(c);
}

Test(http, request_timer_does_not_cut_idle_keep_alive) {
    http_limits_t lim = default_limits();
    lim.request_timeout_ms = 150;
    lim.idle_timeout_ms = 5000;
    client_t *c = srv_client(&lim);
    resp_t r;
    cli_send(c, "GET /a HTTP/1.1\r\n\r\n");
    cli_expect_status(c, 200);
    usleep(400 * 1000); /* idle longer than the request timeout: still open */
    cli_send(c, "GET /b HTTP/1.1\r\n\r\n");
    cli_expect(c, &r, 200);
    cr_assert_str_eq(json_str(r.body, "path"), "/b");
    resp_free(&r);
    srv_client_stop(c);
}

Test(http, idle_connection_closed_silently) {
    http_limits_t lim = default_limits();
    lim.idle_timeout_ms = 200;
    srv_start(&lim);
    /* Never sends anything. */
    client_t *c = cli_open(F.port[0]);
    double t0 = now_ms();
    cr_assert(cli_closed(c), "idle connection got data or was not closed");
    double dt = now_ms() - t0;
    cr_assert(dt > 150 && dt < 3000, "closed after %.0f ms", dt);
    cli_close(c);
    /* Idle after one request. */
    c = cli_open(F.port[0]);
    cli_send(c, "GET / HTTP/1.1\r\n\r\n");
    cli_expect_status(c, 200);
    cr_assert(cli_closed(c));
    srv_client_stop(c);
}

/* Blank lines are skipped by the parser and start no request: a client that
 * trickles them must not keep an idle connection open. */
Test(http, blank_lines_do_not_extend_idle) {
    http_limits_t lim = default_limits();
    lim.idle_timeout_ms = 300;
    client_t *c = srv_client(&lim);
    double t0 = now_ms();
    int closed = 0;
    for (int i = 0; i < 30 && !closed; i++) {
        if (cli_send_n(c, "\r\n", 2)) break;
        usleep(100 * 1000);
        char b[16];
        ssize_t n = recv(c->fd, b, sizeof b, MSG_DONTWAIT);
        closed = n == 0 || (n < 0 && errno != EAGAIN);
    }
    double dt = now_ms() - t0;
    cr_assert(closed || cli_closed(c), "still open after %.0f ms of blank lines", dt);
    cr_assert_lt(dt, 2000);
    srv_client_stop(c);
}

Test(http, too_many_connections_503) {
    http_limits_t lim = default_limits();
    lim.max_connections = 2;
    srv_start(&lim);
    client_t *a = cli_open(F.port[0]), *b = cli_open(F.port[0]);
    resp_t r;
    /* A request on each proves both were accepted before the third; the
     * next one each has begun keeps them busy (an idle one would make room). */
    cli_send(a, "GET / HTTP/1.1\r\n\r\n");
    cli_expect_status(a, 200);
    cli_send(b, "GET / HTTP/1.1\r\n\r\n");
    cli_expect_status(b, 200);
    cli_send(a, "GET /next HTTP/1.1\r\n");
    cli_send(b, "GET /next HTTP/1.1\r\n");
    usleep(50 * 1000);
    client_t *c = cli_open(F.port[0]);
    cli_expect(c, &r, 503);
    cr_assert_str_eq(error_code(r.body), "too_many_connections");
    resp_free(&r);
    cr_assert(cli_closed(c));
    cli_close(c);
    /* Once one closes, a new connection is served again (the server notices
     * the close asynchronously, so retry a bounded number of times). */
    cli_close(a);
    int ok = 0;
    for (int i = 0; i < 100 && !ok; i++) {
        c = cli_open(F.port[0]);
        cli_send_n(c, "GET / HTTP/1.1\r\n\r\n", 18);
        if (cli_read(c, &r) == 0) ok = r.status == 200;
        resp_free(&r);
        cli_close(c);
        if (!ok) usleep(20000);
    }
    cr_assert(ok, "no connection served after one closed");
    cli_close(b);
    srv_stop();
}

/* Silent sockets at the cap: the oldest idle one is closed to make room, so
 * a client with a request is served (finding: 260 idle sockets answered every
 * other client, /healthz included, 503 for 30 s). */
Test(http, idle_connections_are_evicted_at_the_cap) {
    http_limits_t lim = default_limits();
    lim.max_connections = 4;
    lim.max_per_client = 0;
    srv_start(&lim);
    client_t *idle[4];
    for (int i = 0; i < 4; i++) {
        idle[i] = cli_open(F.port[0]);
        usleep(20 * 1000); /* distinct idle times: idle[0] is the oldest */
    }
    client_t *c = cli_open(F.port[0]);
    cli_send(c, "GET /healthz HTTP/1.1\r\n\r\n");
    resp_t r;
    cli_expect_status(c, 200);
    cr_assert(cli_closed(idle[0]), "the oldest idle connection was not the one closed");
    cli_send(idle[1], "GET /still HTTP/1.1\r\n\r\n");
    cli_expect(idle[1], &r, 200);
    resp_free(&r);
    for (int i = 0; i < 4; i++) cli_close(idle[i]);
    srv_client_stop(c);
}

/* One address may hold at most max_per_client connections; when none of its
 * own is idle the next gets 503, while other limits are far away. */
Test(http, per_client_connection_cap) {
    http_limits_t lim = default_limits();
    lim.max_loopback = 3; /* the test's client is on loopback */
    srv_start(&lim);
    client_t *busy[3];
    for (int i = 0; i < 3; i++) {
        busy[i] = cli_open(F.port[0]);
        cli_send(busy[i], "GET /busy HTTP/1.1\r\n"); /* a request begun, never finished */
    }
    usleep(50 * 1000);
    client_t *c = cli_open(F.port[0]);
    resp_t r;
    cli_expect(c, &r, 503);
    cr_assert_str_eq(error_code(r.body), "too_many_connections");
    resp_free(&r);
    cli_close(c);
    /* An idle connection of the same client is replaced rather than refused. */
    cli_send(busy[0], "\r\n");
    resp_t done;
    cli_expect(busy[0], &done, 200);
    resp_free(&done);
    usleep(50 * 1000);
    c = cli_open(F.port[0]);
    cli_send(c, "GET / HTTP/1.1\r\n\r\n");
    cli_expect_status(c, 200);
    cr_assert(cli_closed(busy[0]), "the client's idle connection was kept");
    for (int i = 0; i < 3; i++) cli_close(busy[i]);
    srv_client_stop(c);
}

/* Headers sent a byte at a time (slowloris) get 408 once the header
 * deadline passes, long before the whole request's; a request whose
 * headers came in time has the rest of the request time for its body. */
Test(http, header_timeout) {
    http_limits_t lim = default_limits();
    lim.header_timeout_ms = 300;
    lim.request_timeout_ms = 20000;
    client_t *c = srv_client(&lim);
    double t0 = now_ms();
    cli_send(c, "GET / HTTP/1.1\r\nX-Slow: a");
    resp_t r;
    cli_expect(c, &r, 408);
    resp_free(&r);
    double dt = now_ms() - t0;
    cr_assert(dt > 250 && dt < 5000, "408 after %.0f ms", dt);
    cli_close(c);
    c = cli_open(F.port[0]);
    cli_send(c, "POST /echo HTTP/1.1\r\nContent-Length: 2\r\n\r\na"); /* headers in time */
    usleep(600 * 1000);
    cli_send(c, "b");
    cli_expect_status(c, 201);
    srv_client_stop(c);
}

/* A connection that starts no request is closed after the first-byte
 * timeout, long before the keep-alive idle time. */
Test(http, first_byte_timeout) {
    http_limits_t lim = default_limits();
    lim.first_byte_timeout_ms = 200;
    lim.idle_timeout_ms = 30000;
    client_t *c = srv_client(&lim);
    double t0 = now_ms();
    cr_assert(cli_closed(c), "a silent connection got data or was not closed");
    double dt = now_ms() - t0;
    cr_assert(dt > 150 && dt < 3000, "closed after %.0f ms", dt);
    cli_close(c);
    /* After a request, the idle timeout applies instead. */
    c = cli_open(F.port[0]);
    cli_send(c, "GET / HTTP/1.1\r\n\r\n");
    cli_expect_status(c, 200);
    usleep(400 * 1000);
    cli_send(c, "GET /b HTTP/1.1\r\n\r\n");
    cli_expect_status(c, 200);
    srv_client_stop(c);
}

static int deny_posts(const http_request_t *req, http_response_t *res, void *user) {
    (void)user, (void)res; /* no refusal of its own: the server's 401 */
    return !strcmp(req->method, "POST") &&
           (!req->authorization || strcmp(req->authorization, "Bearer ok") != 0);
}

/* The authorize callback answers 401 once the headers are in: a client that
 * announces a body is refused before sending it. */
Test(http, authorize_runs_before_the_body) {
    srv_start(NULL);
    http_server_set_authorize(F.srv[0], deny_posts);
    client_t *c = cli_open(F.port[0]);
    cli_send(c, "POST /x HTTP/1.1\r\nContent-Length: 500000\r\n\r\n");
    resp_t r;
    cli_expect(c, &r, 401);
    cr_assert_str_eq(error_code(r.body), "unauthorized");
    resp_free(&r);
    cli_close(c);
    c = cli_open(F.port[0]);
    cli_send(c, "POST /x HTTP/1.1\r\nAuthorization: Bearer ok\r\nContent-Length: 2\r\n\r\nhi");
    cli_expect(c, &r, 201);
    cr_assert_str_eq(json_str(r.body, "body"), "hi");
    resp_free(&r);
    cli_send(c, "GET /y HTTP/1.1\r\n\r\n");
    cli_expect_status(c, 200);
    srv_client_stop(c);
}

/* ----------------------------------------------------- malformed input */

Test(http, garbage_is_400) {
    client_t *c = srv_client(NULL);
    cli_send(c, "garbage that is not http\r\n\r\n");
    resp_t r;
    cli_expect(c, &r, 400);
    cr_assert_str_eq(error_code(r.body), "bad_request");
    char h[64];
    cr_assert_str_eq(resp_header(&r, "Content-Type", h, sizeof h), "application/json");
    cr_assert_str_eq(resp_header(&r, "Connection", h, sizeof h), "close");
    resp_free(&r);
    cr_assert(cli_closed(c));
    cli_close(c);
    /* A bad chunk size, after a good request on the same connection. */
    c = cli_open(F.port[0]);
    cli_send(c,
             "GET / HTTP/1.1\r\n\r\nPOST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nxyz\r\n");
    cli_expect_status(c, 200);
    cli_expect_status(c, 400);
    srv_client_stop(c);
}

Test(http, repeated_authorization_is_400) {
    client_t *c = srv_client(NULL);
    cli_send(c, "GET / HTTP/1.1\r\nAuthorization: a\r\nauthorization: b\r\n\r\n");
    cli_expect_status(c, 400);
    srv_client_stop(c);
}

Test(http, path_percent_decoding) {
    srv_start(NULL);
    const struct {
        const char *target;
        int status;
        const char *path;
    } cases[] = {
        {"/a%20b/c%2Fd?q=%20", 200, "/a b/c/d"},
        {"/plus+stays", 200, "/plus+stays"},
        {"/%C3%A9t%c3%a9", 200, "/\xc3\xa9t\xc3\xa9"},
        {"/bad%zz", 400, NULL},
        {"/nul%00byte", 400, NULL},
        {"/short%4", 400, NULL},
        {"/end%", 400, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        client_t *c = cli_open(F.port[0]);
        char req[256];
        snprintf(req, sizeof req, "GET %s HTTP/1.1\r\n\r\n", cases[i].target);
        cli_send(c, req);
        resp_t r;
        cli_expect(c, &r, cases[i].status);
        if (cases[i].path)
            cr_assert_str_eq(json_str(r.body, "path"), cases[i].path, "%s", cases[i].target);
        else
            cr_assert_str_eq(error_code(r.body), "bad_request");
        resp_free(&r);
        cli_close(c);
    }
    srv_stop();
}

/* ---------------------------------------------------- lifetime, servers */

Test(http, close_with_open_connections) {
    srv_start(NULL);
    client_t *idle = cli_open(F.port[0]);
    client_t *partial = cli_open(F.port[0]);
    client_t *kept = cli_open(F.port[0]);
    client_t *unread = cli_open(F.port[0]);
    cli_send(partial, "POST / HTTP/1.1\r\nContent-Length: 100\r\n\r\nonly part");
    cli_send(kept, "GET / HTTP/1.1\r\n\r\n");
    cli_expect_status(kept, 200);
    /* Many large responses the client does not read: writes stay queued. */
    for (int i = 0; i < 20; i++)
        if (cli_send_n(unread, "GET /big HTTP/1.1\r\n\r\n", 21)) break;
    usleep(100 * 1000); /* let the loop accept and read all of them */
    srv_stop();         /* joins the loop thread; uv_loop_close checks the handles */
    cr_assert(cli_closed(idle));
    cr_assert(cli_closed(partial));
    cr_assert(cli_closed(kept));
    cli_close(idle);
    cli_close(partial);
    cli_close(kept);
    cli_close(unread);
}

Test(http, handler_may_close_the_server) {
    srv_start(NULL);
    client_t *other = cli_open(F.port[0]);
    client_t *c = cli_open(F.port[0]);
    cli_send(c, "GET /shutdown HTTP/1.1\r\n\r\n");
    srv_join(); /* the loop ends by itself once everything is closed */
    cr_assert(cli_closed(c));
    cr_assert(cli_closed(other));
    cli_close(c);
    cli_close(other);
}

Test(http, two_servers_one_loop) {
    srv_start_n(NULL, 2);
    cr_assert_neq(F.port[0], F.port[1]);
    for (int i = 0; i < 2; i++) {
        client_t *c = cli_open(F.port[i]);
        cli_send(c, "GET /both HTTP/1.1\r\n\r\n");
        resp_t r;
        cli_expect(c, &r, 200);
        resp_free(&r);
        cli_close(c);
    }
    srv_stop();
}

Test(http, start_errors) {
    uv_loop_t loop;
    http_server_t *a, *b;
    int port, port2;
    char err[256];
    cr_assert_eq(uv_loop_init(&loop), 0);
    int r = http_server_start(&loop, "example.com", 0, NULL, echo_handler, NULL, &b, &port2, err,
                              sizeof err);
    cr_assert_lt(r, 0);
    cr_assert_null(b);
    cr_assert(strstr(err, "example.com"), "%s", err);
    cr_assert_lt(http_server_start(&loop, "127.0.0.1", 70000, NULL, echo_handler, NULL, &b, NULL,
                                   err, sizeof err),
                 0);
    r = http_server_start(&loop, "localhost", 0, NULL, echo_handler, NULL, &a, &port, err,
                          sizeof err);
    cr_assert_eq(r, 0, "%s", err);
    r = http_server_start(&loop, "127.0.0.1", port, NULL, echo_handler, NULL, &b, &port2, err,
                          sizeof err);
    cr_assert_eq(r, UV_EADDRINUSE, "%d %s", r, err);
    cr_assert_null(b);
    http_server_close(a, NULL, NULL);
    http_server_close(NULL, NULL, NULL);
    cr_assert_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    cr_assert_eq(uv_loop_close(&loop), 0, "handles left open");
}

static void count_done_cb(void *arg) {
    ++*(int *)arg;
}

Test(http, close_calls_done_once) {
    uv_loop_t loop;
    http_server_t *a;
    int port, done = 0;
    char err[256];
    cr_assert_eq(uv_loop_init(&loop), 0);
    cr_assert_eq(http_server_start(&loop, "127.0.0.1", 0, NULL, echo_handler, NULL, &a, &port, err,
                                   sizeof err),
                 0);
    http_server_close(a, count_done_cb, &done);
    http_server_close(a, count_done_cb, &done); /* ignored: still closing */
    cr_assert_eq(done, 0, "done before the handles closed");
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(done, 1);
    http_server_close(NULL, count_done_cb, &done);
    cr_assert_eq(done, 2);
    cr_assert_eq(uv_loop_close(&loop), 0);
}

Test(http, ipv6_loopback) {
    uv_loop_t loop;
    http_server_t *s = NULL;
    int port;
    char err[256];
    cr_assert_eq(uv_loop_init(&loop), 0);
    int r =
        http_server_start(&loop, "[::1]", 0, NULL, echo_handler, NULL, &s, &port, err, sizeof err);
    if (r == UV_EADDRNOTAVAIL || r == UV_EAFNOSUPPORT) {
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
        cr_skip_test("no IPv6 loopback here: %s", err);
    }
    cr_assert_eq(r, 0, "%s", err);
    /* One thread: the client socket is non-blocking and the loop is stepped. */
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};
    a.sin6_addr = in6addr_loopback;
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    const char *req = "GET /six HTTP/1.1\r\nConnection: close\r\n\r\n";
    cr_assert_eq(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
    /* Run the loop until the server has answered and the client saw EOF. */
    char buf[4096];
    size_t len = 0;
    for (int i = 0; i < 1000; i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        ssize_t n = recv(fd, buf + len, sizeof buf - 1 - len, MSG_DONTWAIT);
        if (n == 0) break;
        if (n > 0) len += (size_t)n;
        usleep(1000);
    }
    buf[len] = '\0';
    cr_assert(strstr(buf, "HTTP/1.1 200 OK"), "%s", buf);
    cr_assert(strstr(buf, "\"peer\":\"[::1]:"), "%s", buf);
    close(fd);
    http_server_close(s, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&loop), 0);
}

/* A real client library: libcurl's easy interface. */
static size_t curl_sink(char *p, size_t size, size_t n, void *user) {
    char *dst = user;
    size_t have = strlen(dst), add = size * n;
    if (have + add < 4096) {
        memcpy(dst + have, p, add);
        dst[have + add] = '\0';
    }
    return size * n;
}

Test(http, libcurl_client) {
    srv_start(NULL);
    cr_assert_eq(curl_global_init(CURL_GLOBAL_DEFAULT), 0);
    CURL *h = curl_easy_init();
    cr_assert_not_null(h);
    char url[128], got[4096] = "";
    char body[2000];
    memset(body, 'q', sizeof body);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/curl?x=%%E2%%9C%%93", F.port[0]);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, curl_sink);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, got);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
    cr_assert_eq(curl_easy_perform(h), CURLE_OK);
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    cr_assert_eq(code, 200);
    cr_assert_str_eq(json_str(got, "x"), "\xe2\x9c\x93");
    /* A POST large enough that curl may ask for 100-continue, on the same handle
     * (and so the same kept-alive connection). */
    got[0] = '\0';
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)sizeof body);
    cr_assert_eq(curl_easy_perform(h), CURLE_OK);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    cr_assert_eq(code, 201);
    cr_assert_eq(strlen(json_str(got, "body")), sizeof body);
    long conns = -1;
    curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &conns);
    cr_assert_eq(conns, 0, "the second request opened a new connection");
    /* An oversized body sent without waiting for 100-continue: curl is still
     * sending when the 413 comes and must get it, not a reset. */
    size_t big_len = 4 << 20;
    char *big = malloc(big_len);
    cr_assert_not_null(big);
    memset(big, 'B', big_len);
    struct curl_slist *hdrs = curl_slist_append(NULL, "Expect:");
    got[0] = '\0';
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, big);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)big_len);
    CURLcode rc = curl_easy_perform(h);
    cr_assert_eq(rc, CURLE_OK, "%s", curl_easy_strerror(rc));
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    cr_assert_eq(code, 413);
    cr_assert_str_eq(error_code(got), "body_too_large");
    curl_slist_free_all(hdrs);
    free(big);
    curl_easy_cleanup(h);
    curl_global_cleanup();
    srv_stop();
}

/* ------------------------------------------------------------ helpers */

Test(http, error_envelope_escapes) {
    http_response_t res = {0};
    res.body = malloc(8); /* replaced, not leaked */
    http_error(&res, 400, "invalid_spec", "model.n_head: %d does not divide \"%s\"\n\t\\", 7,
               "n_embd");
    cr_assert_eq(res.status, 400);
    cr_assert_str_eq(res.content_type, "application/json");
    cr_assert_eq(strlen(res.body), res.body_len);
    cJSON *o = cJSON_Parse(res.body);
    cr_assert_not_null(o, "%s", res.body);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "error");
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(e, "code")->valuestring, "invalid_spec");
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(e, "message")->valuestring,
                     "model.n_head: 7 does not divide \"n_embd\"\n\t\\");
    cJSON_Delete(o);
    /* A message longer than any fixed buffer. */
    char long_msg[5000];
    memset(long_msg, 'm', sizeof long_msg - 1);
    long_msg[sizeof long_msg - 1] = '\0';
    http_error(&res, 413, "too_large", "%s!", long_msg);
    o = cJSON_Parse(res.body);
    cr_assert_not_null(o);
    e = cJSON_GetObjectItemCaseSensitive(o, "error");
    cr_assert_eq(strlen(cJSON_GetObjectItemCaseSensitive(e, "message")->valuestring),
                 sizeof long_msg);
    cJSON_Delete(o);
    free(res.body);
}

Test(http, query_get_cases) {
    char buf[16];
    const char *q = "a=1&b=two+words&c=%41%42&flag&my%20key=v&a=2&e=&&z=%2B";
    cr_assert_eq(http_query_get(q, "a", buf, sizeof buf), 1);
    cr_assert_str_eq(buf, "1"); /* the first one wins */
    cr_assert_eq(http_query_get(q, "b", buf, sizeof buf), 1);
    cr_assert_str_eq(buf, "two words");
    cr_assert_eq(http_query_get(q, "c", buf, sizeof buf), 1);
    cr_assert_str_eq(buf, "AB");
    cr_assert_eq(http_query_get(q, "flag", buf, sizeof buf), 1);
    cr_assert_str_eq(buf, "");
    cr_assert_eq(http_query_get(q, "my key", buf, sizeof buf), 1);
    cr_assert_str_eq(buf, "v");
    cr_assert_eq(http_query_get(q, "e", buf, sizeof buf), 1);
    cr_assert_str_eq(buf, "");
    cr_assert_eq(http_query_get(q, "z", buf, sizeof buf), 1);
    cr_assert_str_eq(buf, "+");
    strcpy(buf, "stale");
    cr_assert_eq(http_query_get(q, "missing", buf, sizeof buf), 0);
    cr_assert_str_eq(buf, "");
    cr_assert_eq(http_query_get(q, "fla", buf, sizeof buf), 0); /* no prefix match */
    cr_assert_eq(http_query_get(q, "", buf, sizeof buf), 0);
    cr_assert_eq(http_query_get("", "a", buf, sizeof buf), 0);
    cr_assert_eq(http_query_get(NULL, "a", buf, sizeof buf), 0);
    cr_assert_eq(http_query_get("a=%zz", "a", buf, sizeof buf), -1);
    cr_assert_eq(http_query_get("a=%00", "a", buf, sizeof buf), -1);
    cr_assert_eq(http_query_get("a=%4", "a", buf, sizeof buf), -1);
    cr_assert_eq(http_query_get("a=0123456789abcdef", "a", buf, sizeof buf), -1); /* too long */
    cr_assert_str_eq(buf, "");
    cr_assert_eq(http_query_get("a=0123456789abcde", "a", buf, sizeof buf), 1); /* 15 fits */
    cr_assert_eq(http_query_get("k%zz=1&k=2", "k", buf, sizeof buf), 1); /* bad key skipped */
    cr_assert_str_eq(buf, "2");
}

Test(http, loopback_cases) {
    const char *yes[] = {
        "127.0.0.1",        "127.1.2.3",      "::1", "[::1]", "localhost", "LocalHost",
        "::ffff:127.0.0.1", "0:0:0:0:0:0:0:1"};
    const char *no[] = {"0.0.0.0",        "::",      "10.0.0.1",   "128.0.0.1",   "192.168.1.1",
                        "example.com",    "",        "[::1",       "127.0.0.1.5", "localhost.evil",
                        "::ffff:8.8.8.8", "fe80::1", "[127.0.0.1]"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        cr_assert(http_host_is_loopback(yes[i]), "%s", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        cr_assert(!http_host_is_loopback(no[i]), "%s", no[i]);
    cr_assert(!http_host_is_loopback(NULL));
}

/* --------------------------------------------------------- strict JSON */

static void expect_json_error(const char *text, size_t len, const char *want) {
    char err[256];
    cJSON *v = http_json_parse(text, len, err, sizeof err);
    cr_expect_null(v, "accepted: %.*s", (int)len, text);
    cJSON_Delete(v);
    if (!v) cr_expect_str_eq(err, want, "for %.*s", (int)len, text);
}

/* Findings: {A}{B} queued A and dropped B; raw control bytes were accepted
 * inside strings; "a\u0000b" was stored as "a". */
Test(http, json_parse_is_strict) {
    expect_json_error("{\"a\":1}{\"b\":2}", 14,
                      "invalid JSON at line 1, column 8: unexpected text after the JSON value");
    expect_json_error("{\"a\":1}\n x", 10,
                      "invalid JSON at line 2, column 2: unexpected text after the JSON value");
    expect_json_error("{\"a\":\"x\ty\"}", 11,
                      "invalid JSON at line 1, column 8: a control character inside a string "
                      "must be escaped");
    expect_json_error("{\"a\":\"x\0y\"}", 11,
                      "invalid JSON at line 1, column 8: a control character inside a string "
                      "must be escaped");
    expect_json_error("{\"a\":\"a\\u0000b\"}", 16,
                      "invalid JSON at line 1, column 8: \\u0000 is not allowed in a string");
    expect_json_error("{\"a\":1}\0", 8,
                      "invalid JSON at line 1, column 8: unexpected text after the JSON value");
    expect_json_error("{\n  \"a\": ,\n}", 13, "invalid JSON at line 2, column 8: not valid JSON");
    expect_json_error("", 0, "invalid JSON at line 1, column 1: not valid JSON");

    char err[256];
    const char *ok = " {\"a\":\"tab\\there \\u00e9 \\\\u0000\", \"b\":[1,2]}\r\n";
    cJSON *v = http_json_parse(ok, strlen(ok), err, sizeof err);
    cr_assert_not_null(v, "%s", err);
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(v, "a")),
                     "tab\there \xc3\xa9 \\u0000");
    cJSON_Delete(v);
}

static void raw_handler(const http_request_t *req, http_response_t *res, void *user) {
    (void)user;
    res->status = 200;
    res->body = strdup(req->path);
    res->body_len = strlen(req->path);
    res->content_type = "text/plain";
}

/* http_feed_raw (the fuzz targets' entry) answers pipelined requests in
 * order and the server's own errors as a socket would see them. */
Test(http, feed_raw_matches_the_socket_path) {
    char *out;
    size_t len;
    const char two[] = "GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\nConnection: close\r\n\r\n";
    http_feed_raw(two, sizeof two - 1, raw_handler, NULL, NULL, &out, &len);
    cr_assert_not_null(out);
    char *a = strstr(out, "\r\n\r\n/a"), *b = strstr(out, "\r\n\r\n/b");
    cr_expect(a && b && a < b, "%s", out);
    cr_expect(strstr(out, "Connection: close"));
    free(out);
    http_feed_raw("garbage\r\n\r\n", 11, raw_handler, NULL, NULL, &out, &len);
    cr_assert_not_null(out);
    cr_expect(!strncmp(out, "HTTP/1.1 400", 12), "%s", out);
    free(out);
    const char post[] = "POST /p HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc";
    http_feed_raw(post, sizeof post - 1, raw_handler, deny_posts, NULL, &out, &len);
    cr_assert_not_null(out);
    cr_expect(!strncmp(out, "HTTP/1.1 401", 12), "%s", out);
    free(out);
}
