/* mcp_http.c - /mcp, the Streamable HTTP transport (see mcp_http.h). */
#include "daemon/serve/mcp_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/shared/log.h"
#include "daemon/shared/mcp.h"
#include "daemon/shared/origin.h"
#include "engine/util.h"

#define MAX_CRED 1024 /* bytes of a copied header */

/* The credentials of the /mcp request, which the in-process API calls carry. */
typedef struct {
    api_t *api;
    char authorization[MAX_CRED], host[MAX_CRED], origin[MAX_CRED], peer[64];
    int has_auth, has_host, has_origin;
} inproc_t;

struct mcp_http {
    uv_loop_t *loop;
    api_t *api;
    mcp_server_t *server;
    struct sse_wait *waits; /* every wait whose stream is open */
};

/* A wait answered as an event stream. It is stepped (its experiments read)
 * only when something can have changed for it: at once, when an experiment
 * ends or is cancelled (mcp_http_wake), when another message may have
 * cancelled it or an experiment, at its deadline, and every MCP_WAIT_POLL_MS while its client asked
 * for progress. Before, every wait read all its experiments every second, and sixty waits on 64 ids
 * took a fifth of a core. */
typedef struct sse_wait {
    mcp_http_t *m;
    mcp_wait_t *wait;      /* NULL once ended */
    http_stream_t *stream; /* NULL once closed */
    uv_timer_t timer;      /* the next step */
    inproc_t cred;
    struct sse_wait *prev, *next; /* in m->waits while the stream is open */
} sse_wait_t;

static void copy_cred(inproc_t *c, api_t *api, const http_request_t *req) {
    memset(c, 0, sizeof *c);
    c->api = api;
    c->has_auth = req->authorization != NULL;
    c->has_host = req->host != NULL;
    c->has_origin = req->origin != NULL;
    snprintf(c->authorization, sizeof c->authorization, "%s",
             c->has_auth ? req->authorization : "");
    snprintf(c->host, sizeof c->host, "%s", c->has_host ? req->host : "");
    snprintf(c->origin, sizeof c->origin, "%s", c->has_origin ? req->origin : "");
    snprintf(c->peer, sizeof c->peer, "%s", req->peer ? req->peer : "");
}

/* The backend: one API request run through api_handle on this thread. */
static int inproc_call(void *user, const char *method, const char *path, const char *body,
                       char **out) {
    inproc_t *c = user;
    char p[512];
    snprintf(p, sizeof p, "%s", path);
    char *q = strchr(p, '?');
    if (q) *q++ = '\0';
    http_request_t r = {.method = method,
                        .path = p,
                        .query = q ? q : "",
                        .body = body ? body : "",
                        .body_len = body ? strlen(body) : 0,
                        .authorization = c->has_auth ? c->authorization : NULL,
                        .content_type = "application/json",
                        .source = "mcp",
                        .peer = c->peer,
                        .host = c->has_host ? c->host : NULL,
                        .origin = c->has_origin ? c->origin : NULL};
    http_response_t res = {0};
    api_handle(&r, &res, c->api);
    *out = malloc(res.body_len + 1);
    if (*out) {
        if (res.body_len) memcpy(*out, res.body, res.body_len);
        (*out)[res.body_len] = '\0';
    }
    free(res.body);
    return *out ? res.status : -1;
}

mcp_http_t *mcp_http_new(uv_loop_t *loop, api_t *api) {
    mcp_http_t *m = calloc(1, sizeof *m);
    if (!m || !(m->server = mcp_server_new())) {
        free(m);
        return NULL;
    }
    m->loop = loop;
    m->api = api;
    return m;
}

void mcp_http_free(mcp_http_t *m) {
    if (!m) return;
    mcp_server_free(m->server);
    free(m);
}

static void timer_closed_cb(uv_handle_t *h) {
    free(h->data);
}

/* The stream is gone (finished, or the client left): stop. */
static void stream_closed_cb(http_stream_t *st, void *arg) {
    sse_wait_t *w = arg;
    w->stream = NULL;
    if (w->prev)
        w->prev->next = w->next;
    else
        w->m->waits = w->next;
    if (w->next) w->next->prev = w->prev;
    w->prev = w->next = NULL;
    if (w->wait) mcp_wait_drop(w->m->server, w->wait);
    w->wait = NULL;
    uv_close((uv_handle_t *)&w->timer, timer_closed_cb);
}

static void send_event(sse_wait_t *w, const char *msg) {
    size_t n = strlen(msg) + 32;
    char *ev = malloc(n);
    if (!ev) return;
    int len = snprintf(ev, n, "event: message\ndata: %s\n\n", msg);
    if (http_stream_write(w->stream, ev, (size_t)len) < 0) log_warn("mcp: a wait's client lags");
    free(ev);
}

static void step_cb(uv_timer_t *t);

/* The next step without an event: the next progress note, or the deadline. */
static void arm_timer(sse_wait_t *w) {
    uint64_t ms = MCP_WAIT_POLL_MS;
    if (!mcp_wait_wants_progress(w->wait)) {
        double left = mcp_wait_deadline(w->wait) - util_now();
        ms = left > 0 ? (uint64_t)(left * 1000) + 1 : 0;
    }
    uv_timer_start(&w->timer, step_cb, ms, 0);
}

static void step_cb(uv_timer_t *t) {
    sse_wait_t *w = t->data;
    char *msg = NULL;
    if (!w->wait || !w->stream) return;
    mcp_backend_t b = {.call = inproc_call, .user = &w->cred};
    int done = mcp_wait_step(w->m->server, w->wait, &b, &msg);
    if (msg) send_event(w, msg);
    free(msg);
    if (done) {
        w->wait = NULL;
        uv_timer_stop(&w->timer);
        http_stream_finish(w->stream);
        return;
    }
    arm_timer(w);
}

void mcp_http_wake(mcp_http_t *m) {
    for (sse_wait_t *w = m ? m->waits : NULL; w; w = w->next)
        if (w->wait) uv_timer_start(&w->timer, step_cb, 0, 0); /* from the loop, not here */
}

/* Answer a started wait with an event stream. */
static void open_wait(mcp_http_t *m, const http_request_t *req, http_response_t *res,
                      mcp_wait_t *wait) {
    sse_wait_t *w = calloc(1, sizeof *w);
    if (!w) {
        mcp_wait_drop(m->server, wait);
        http_error(res, 503, "unavailable", "out of memory");
        return;
    }
    w->m = m;
    w->wait = wait;
    copy_cred(&w->cred, m->api, req);
    uv_timer_init(m->loop, &w->timer);
    w->timer.data = w;
    w->stream = http_stream_open(req, res, "text/event-stream", NULL, 0, stream_closed_cb, w);
    if (!w->stream) {
        mcp_wait_drop(m->server, wait);
        w->wait = NULL;
        uv_close((uv_handle_t *)&w->timer, timer_closed_cb);
        return;
    }
    w->next = m->waits;
    if (m->waits) m->waits->prev = w;
    m->waits = w;
    uv_timer_start(&w->timer, step_cb, 0, 0); /* the first step at once */
}

static void reply(http_response_t *res, int status, char *body) {
    res->status = status;
    res->content_type = "application/json";
    res->body = body;
    res->body_len = body ? strlen(body) : 0;
}

/* /mcp's gate: the Origin and Host as on every route; then the token, but
 * where reads are open (a loopback listener) a client without one gets in:
 * the tools that only read answer, and a write is refused by the API as a
 * tool error. A refusal is a JSON-RPC error with WWW-Authenticate, which is
 * what an MCP client's HTTP transport recognises. */
int mcp_http_guard(const api_t *api, const http_request_t *req, http_response_t *res) {
    int rc = origin_check(api->origin, req, res);
    if (rc || !strcmp(req->method, "OPTIONS") || api_authorized(api, req)) return rc;
    if (!api->guard_reads && !req->authorization) return 0;
    reply(res, 401,
          strdup("{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32001,\"message\":"
                 "\"unauthorized: /mcp needs the daemon's token (Authorization: Bearer TOKEN; "
                 "`nightshift mcp` reads it with --token-file)\",\"data\":{\"code\":"
                 "\"unauthorized\"}}}"));
    snprintf(res->headers, sizeof res->headers,
             "WWW-Authenticate: Bearer realm=\"nightshift\", error=\"invalid_token\"\r\n");
    return 401;
}

void mcp_http_handle(mcp_http_t *m, const http_request_t *req, http_response_t *res) {
    if (mcp_http_guard(m->api, req, res) || origin_cors(m->api->origin, req, res)) return;
    if (strcmp(req->method, "POST") != 0) {
        http_error(res, 405, "method_not_allowed",
                   "/mcp takes POST only: the server is stateless (no sessions, no stream to "
                   "GET)");
        snprintf(res->headers, sizeof res->headers, "Allow: POST\r\n");
        return;
    }
    if (req->mcp_protocol_version && !mcp_version_supported(req->mcp_protocol_version)) {
        http_error(res, 400, "unsupported_protocol_version",
                   "MCP-Protocol-Version: this server speaks %s (and 2025-06-18, 2025-03-26, "
                   "2024-11-05)",
                   MCP_PROTOCOL_VERSION);
        return;
    }
    inproc_t cred;
    copy_cred(&cred, m->api, req);
    mcp_backend_t b = {.call = inproc_call, .user = &cred};
    char *out = NULL;
    mcp_wait_t *wait = NULL;
    switch (mcp_handle(m->server, &b, req->body, req->body_len, &out, &wait)) {
    case MCP_OUT_NONE:
        reply(res, 202, NULL);
        mcp_http_wake(m); /* a notification may have cancelled a wait */
        break;
    case MCP_OUT_INVALID:
        reply(res, 400, out);
        break;
    case MCP_OUT_REPLY:
        reply(res, 200, out);
        mcp_http_wake(m); /* a tool may have cancelled an experiment */
        break;
    case MCP_OUT_PENDING:
        open_wait(m, req, res, wait);
        break;
    }
}
