/* http.c - the HTTP/1.1 server: a libuv TCP listener, one http-parser per
 * connection, limits, keep-alive, pipelining, and the JSON error envelope.
 *
 * Life of a connection. Accepted connections wait for their first byte under
 * the first-byte timer, and for each later request under the idle timer. The first byte of a
 * request (http-parser's message_begin) starts the request timer; URL, the few headers a handler
 * sees and the body accumulate in per-connection buffers under the header and body caps. When a
 * request is complete the handler answers synchronously, the response is
 * queued with uv_write, the parser is paused and reading stops until the write
 * finishes, so pipelined requests are answered one at a time, in order, and a
 * client that never reads cannot make the server buffer without bound. Then
 * the connection either parses what is already buffered or waits again.
 *
 * Connection caps. At most max_connections are served (4096 by default, and
 * never more than the process may open), at most max_per_client from one
 * remote client (a peer address; an IPv6 /64 is one), and at most
 * max_loopback from this machine (every loopback address together; no cap
 * of its own by default: a cap per address lumps every local program into
 * one bucket, and one of them flooding locked out the rest, while a
 * connection costs the server a few kilobytes and each is served in turn,
 * one request at a time). A request's headers must arrive within
 * header_timeout_ms of its first byte, the whole request within
 * request_timeout_ms (408 otherwise). At either cap the oldest idle connection (waiting for a
 * request, nothing half-received) within that cap is closed silently to make
 * room, as its idle timer would have; when none is idle, the one that has
 * been sending its request for longest, past SLOW_SENDER_MS (headers sent a
 * byte at a time); when there is neither the newcomer gets 503. So sockets
 * that are opened and left silent or slow, from however many addresses, hold
 * the server only for a second, and never lock out a client that has a
 * request to make.
 *
 * A connection that must end after its response (Connection: close, HTTP/1.0,
 * an error answered by the server itself) shuts its write side down and
 * discards input for a short while before closing ("lingering close"), so an
 * unread request body left in the socket does not turn the close into a reset
 * that destroys the response before the client reads it.
 *
 * Handles: every connection owns a uv_tcp_t and a uv_timer_t; its memory is
 * freed in the close callback of the last of the two. The server owns the
 * listener and the list of connections and is freed once every one of its
 * handles has closed. No state is global, so several servers can share a
 * loop. Everything runs on the loop thread. */
#include "daemon/shared/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <cjson/cJSON.h>
#include <http_parser.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "daemon/shared/bytebuf.h"
#include "engine/util.h"

#define READ_CHUNK     16384 /* bytes of free space offered to each read */
#define LINGER_MS      2000  /* longest lingering close */
#define SLOW_SENDER_MS 1000  /* at a cap, one sending a request for longer may be closed */

/* ------------------------------------------------------ percent-decoding */

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* Decode n bytes of s into out (capacity outcap including the NUL). With
 * plus_space, '+' becomes ' ' (query strings). Returns the decoded length, or
 * -1 for an invalid escape, an encoded NUL, or too small an output. */
static long pct_decode(const char *s, size_t n, int plus_space, char *out, size_t outcap) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (ch == '%') {
            int hi = i + 2 < n ? hexval(s[i + 1]) : -1;
            int lo = i + 2 < n ? hexval(s[i + 2]) : -1;
            if (hi < 0 || lo < 0) return -1;
            ch = (char)(hi * 16 + lo);
            if (ch == '\0') return -1;
            i += 2;
        } else if (ch == '+' && plus_space) {
            ch = ' ';
        } else if (ch == '\0') {
            return -1;
        }
        if (o + 1 >= outcap) return -1;
        out[o++] = ch;
    }
    if (outcap == 0) return -1;
    out[o] = '\0';
    return (long)o;
}

/* ------------------------------------------------------------ the types */

struct http_server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    http_limits_t lim;
    http_handler_fn handler;
    void *user;
    struct conn *conns; /* every connection not yet closing, newest first */
    int nconns;         /* connections being served (the max_connections count) */
    int nrejecting;     /* connections being answered 503 */
    int pending;        /* listener + connections whose memory is not yet freed */
    int closing;
    void (*done)(void *arg);
    void *done_arg;
    http_authorize_fn authorize; /* or NULL */
    http_observe_fn observe;     /* or NULL */
};

/* The request headers a handler sees (each kept in its own buffer, and
 * refused when repeated); HDR_OTHER for every other header. */
enum {
    HDR_OTHER = -1,
    HDR_AUTH,
    HDR_CTYPE,
    HDR_EXPECT,
    HDR_SOURCE,
    HDR_WH_ID,
    HDR_WH_TS,
    HDR_WH_SIG,
    HDR_LAST_ID,
    HDR_HOST,
    HDR_ORIGIN,
    HDR_MCP_VERSION,
    HDR_FETCH_SITE,
    HDR_FETCH_MODE,
    HDR_FETCH_DEST,
    N_HDRS
};
static const char *const header_names[N_HDRS] = {
    [HDR_AUTH] = "authorization",
    [HDR_CTYPE] = "content-type",
    [HDR_EXPECT] = "expect",
    [HDR_SOURCE] = "x-nightshift-source",
    [HDR_WH_ID] = "webhook-id",
    [HDR_WH_TS] = "webhook-timestamp",
    [HDR_WH_SIG] = "webhook-signature",
    [HDR_LAST_ID] = "last-event-id",
    [HDR_HOST] = "host",
    [HDR_ORIGIN] = "origin",
    [HDR_MCP_VERSION] = "mcp-protocol-version",
    [HDR_FETCH_SITE] = "sec-fetch-site",
    [HDR_FETCH_MODE] = "sec-fetch-mode",
    [HDR_FETCH_DEST] = "sec-fetch-dest",
};

typedef struct conn {
    uv_tcp_t tcp;
    uv_timer_t timer; /* idle, request, write or linger deadline, by state */
    uv_shutdown_t shutdown;
    http_server_t *srv;
    struct conn *prev, *next;
    int open_handles;       /* handles whose close callback has not run yet */
    char peer[64];          /* "127.0.0.1:54321" or "[::1]:54321" */
    char addr[48];          /* the peer's address alone: what max_per_client counts */
    uint64_t idle_since;    /* uv_now (ms) when it last started waiting for a request */
    uint64_t request_since; /* uv_now (ms) when the request being received began */
    bytebuf_t *raw_out;     /* http_feed_raw: responses go here, no socket, no timers */

    http_parser parser;
    bytebuf_t in; /* received bytes; [in_off, in.len) not yet parsed */
    size_t in_off;

    /* The request being received. */
    bytebuf_t url, hdrs[N_HDRS];
    bytebuf_t body; /* capped at max_body_bytes, the others only by memory */
    char field[24]; /* lower-case prefix of the current header name */
    size_t field_len;
    int in_value;        /* last header callback was a value */
    int hdr;             /* HDR_* of the current header */
    unsigned hdr_seen;   /* 1 << HDR_* for each header seen */
    size_t header_bytes; /* URL + header names and values so far */
    char *path;          /* decoded path (malloc'd at headers_complete) */
    const char *query;   /* points into url */
    int reject;          /* status the server answers instead of the handler */
    const char *reject_msg;
    http_response_t refusal; /* authorize's answer, when it refused the request */

    /* Connection state. */
    unsigned counted : 1;    /* counts toward max_connections */
    unsigned reading : 1;    /* uv_read_start is in effect */
    unsigned in_request : 1; /* between message_begin and message_complete */
    unsigned writing : 1;    /* a final response is being written */
    unsigned last : 1;       /* close after the response being written */
    unsigned lingering : 1;  /* write side shut down, discarding input */
    unsigned closing : 1;

    /* A streaming response (see "streaming responses" below). */
    struct http_stream *stream; /* set by http_stream_open; freed with the connection */
    unsigned streaming : 1;     /* the head is sent: no more requests, no idle deadline */
} srv_conn_t;

/* A queued write: the formatted head, and the body taken from the response. */
typedef struct {
    uv_write_t req;
    srv_conn_t *conn;
    int final; /* 0 for an interim "100 Continue" */
    char *body;
    char head[];
} wreq_t;

static void srv_conn_close(srv_conn_t *c);
static void srv_conn_process(srv_conn_t *c);
static void stream_begin(srv_conn_t *c, const char *headers);
static void stream_closed(srv_conn_t *c);
static int stream_put(srv_conn_t *c, const char *data, size_t len);

/* ------------------------------------------------------- small helpers */

void http_limits_default(http_limits_t *lim) {
    lim->max_header_bytes = 16 * 1024;
    lim->max_body_bytes = 1024 * 1024;
    lim->idle_timeout_ms = 30000;
    lim->request_timeout_ms = 10000;
    lim->header_timeout_ms = 5000;
    lim->max_connections = 4096;
    lim->max_per_client = 64;
    lim->max_loopback = 0;
    lim->first_byte_timeout_ms = 5000;
}

static const char *reason_phrase(int status) {
    const char *r = http_status_str((enum http_status)status);
    return strcmp(r, "<unknown>") ? r : "Unknown";
}

static void srv_conn_timer_cb(uv_timer_t *t);

/* Arm the connection's single timer; 0 ms means no deadline. */
static void srv_conn_timer(srv_conn_t *c, uint64_t ms) {
    if (c->raw_out) return;   /* fed without a loop (http_feed_raw): no timers */
    if (c->streaming) ms = 0; /* streams (SSE) are exempt from every deadline */
    if (ms == 0)
        uv_timer_stop(&c->timer);
    else
        uv_timer_start(&c->timer, srv_conn_timer_cb, ms, 0);
}

static void srv_conn_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *out);
static void srv_conn_read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *b);

static void srv_conn_read_start(srv_conn_t *c) {
    if (c->reading || c->closing || c->raw_out) return;
    if (uv_read_start((uv_stream_t *)&c->tcp, srv_conn_alloc_cb, srv_conn_read_cb) < 0) {
        srv_conn_close(c);
        return;
    }
    c->reading = 1;
}

static void srv_conn_read_stop(srv_conn_t *c) {
    if (!c->reading) return;
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = 0;
}

/* ------------------------------------------------------------ responses */

static void srv_conn_shutdown_cb(uv_shutdown_t *req, int status) {
    srv_conn_t *c = req->data;
    if (status < 0) srv_conn_close(c);
}

/* After the last response: half-close, then discard input until the peer
 * closes or the linger deadline passes. */
static void srv_conn_linger(srv_conn_t *c) {
    uint64_t ms = c->srv->lim.idle_timeout_ms;
    if (ms == 0 || ms > LINGER_MS) ms = LINGER_MS;
    c->lingering = 1;
    if (c->raw_out) return;
    c->shutdown.data = c;
    if (uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, srv_conn_shutdown_cb) < 0) {
        srv_conn_close(c);
        return;
    }
    srv_conn_timer(c, ms);
    srv_conn_read_start(c);
}

/* Has the peer closed its side? Reading stops while a response is written,
 * so its end of stream may be waiting in the socket behind requests already
 * read; a look (without taking it) tells. A client that shuts down only its
 * sending side counts as gone too, as for nginx: it is rare for HTTP, and the
 * work a gone client asked for is better not done. */
static int peer_gone(srv_conn_t *c) {
    uv_os_fd_t fd;
    char b;
    if (c->raw_out || uv_fileno((uv_handle_t *)&c->tcp, &fd) < 0) return 0;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static void srv_conn_write_cb(uv_write_t *req, int status) {
    wreq_t *w = (wreq_t *)req;
    srv_conn_t *c = w->conn;
    int final = w->final;
    free(w->body);
    free(w);
    if (c->closing) return;
    if (status < 0) {
        srv_conn_close(c);
        return;
    }
    if (!final) return;
    c->writing = 0;
    if (c->last) {
        srv_conn_linger(c);
        return;
    }
    if (c->in_off < c->in.len && peer_gone(c)) {
        srv_conn_close(c); /* pipelined requests of a client that has gone are not served */
        return;
    }
    srv_conn_timer(c, c->srv->lim.idle_timeout_ms); /* idle from here, unless a request follows */
    c->idle_since = uv_now(c->srv->loop);
    srv_conn_process(c);
}

/* The header lines every response carries: nosniff, so that no browser
 * reads a JSON or text answer as a script or a page, and on HTML (the
 * dashboard, the report page) a refusal to be framed by any page, so that no
 * other site can show the daemon's buttons under its own. */
static const char *safety_headers(const char *ctype) {
    if (ctype && !strncasecmp(ctype, "text/html", 9))
        return "X-Content-Type-Options: nosniff\r\n"
               "X-Frame-Options: DENY\r\n"
               "Content-Security-Policy: frame-ancestors 'none'\r\n";
    return "X-Content-Type-Options: nosniff\r\n";
}

/* Queue one response. Takes body (malloc'd, may be NULL) in every case;
 * extra holds header lines to add ("" for none). With head_only the body is
 * counted in Content-Length but not sent (HEAD). final = 0 writes an interim
 * response that does not change the connection state. On failure the
 * connection is closed. */
static void srv_conn_send(srv_conn_t *c, int status, const char *ctype, char *body, size_t body_len,
                          const char *extra, int head_only, int final) {
    const char *srv_conn_hdr = c->last ? "close" : "keep-alive";
    const char *fmt = "HTTP/1.1 %d %s\r\n"
                      "Content-Type: %s\r\n"
                      "Content-Length: %zu\r\n"
                      "Connection: %s\r\n"
                      "%s%s"
                      "Cache-Control: no-store\r\n\r\n";
    const char *reason = reason_phrase(status);
    wreq_t *w = NULL;
    int n;
    if (final && c->srv->observe) c->srv->observe(c->path, status, c->srv->user);
    if (final)
        n = snprintf(NULL, 0, fmt, status, reason, ctype, body_len, srv_conn_hdr, extra,
                     safety_headers(ctype));
    else
        n = snprintf(NULL, 0, "HTTP/1.1 %d %s\r\n\r\n", status, reason);
    if (n < 0 || c->closing) goto fail;
    w = malloc(sizeof *w + (size_t)n + 1);
    if (!w) goto fail;
    if (final)
        snprintf(w->head, (size_t)n + 1, fmt, status, reason, ctype, body_len, srv_conn_hdr, extra,
                 safety_headers(ctype));
    else
        snprintf(w->head, (size_t)n + 1, "HTTP/1.1 %d %s\r\n\r\n", status, reason);
    if (c->raw_out) { /* http_feed_raw: the bytes are the result, and "written" at once */
        bytebuf_append(c->raw_out, w->head, (size_t)n);
        if (body && !head_only) bytebuf_append(c->raw_out, body, body_len);
        free(w);
        free(body);
        if (final && c->last) srv_conn_linger(c);
        return;
    }
    w->conn = c;
    w->final = final;
    w->body = body;
    uv_buf_t bufs[2] = {uv_buf_init(w->head, (unsigned)n), uv_buf_init(body, (unsigned)body_len)};
    unsigned nbufs = body && body_len && !head_only ? 2 : 1;
    if (uv_write(&w->req, (uv_stream_t *)&c->tcp, bufs, nbufs, srv_conn_write_cb) < 0) goto fail;
    if (final) {
        /* A client that does not read its response is dropped after the idle time. */
        c->writing = 1;
        srv_conn_read_stop(c);
        srv_conn_timer(c, c->srv->lim.idle_timeout_ms);
    }
    return;
fail:
    free(w);
    free(body);
    srv_conn_close(c);
}

/* The server's own answer: the error envelope, then close. */
static void srv_conn_send_error(srv_conn_t *c, int status, const char *code, const char *msg) {
    http_response_t res = {0};
    http_error(&res, status, code, "%s", msg);
    c->last = 1;
    c->in_request = 0;
    srv_conn_send(c, status, res.content_type, res.body, res.body_len, "", 0, 1);
}

/* authorize's refusal, then close. */
static void srv_conn_send_refusal(srv_conn_t *c) {
    http_response_t *no = &c->refusal;
    char *body = no->body;
    no->body = NULL;
    c->last = 1;
    c->in_request = 0;
    srv_conn_send(c, no->status, no->content_type ? no->content_type : "application/json", body,
                  no->body_len, no->headers, 0, 1);
}

/* ---------------------------------------------------- parser callbacks */

/* Fail the request with status (answered by the server); returns the
 * parser's error value. */
static int srv_conn_reject(srv_conn_t *c, int status, const char *msg) {
    c->reject = status;
    c->reject_msg = msg;
    return -1;
}

static int count_header_bytes(srv_conn_t *c, size_t n) {
    c->header_bytes += n;
    if (c->header_bytes > c->srv->lim.max_header_bytes)
        return srv_conn_reject(c, 431, "request headers are too large");
    return 0;
}

/* The buffers of the request being received, into bufs. Returns their
 * count, REQUEST_BUFS. */
#define REQUEST_BUFS (N_HDRS + 2)
static int request_bufs(srv_conn_t *c, bytebuf_t **bufs) {
    int n = 0;
    bufs[n++] = &c->url;
    for (int i = 0; i < N_HDRS; i++) bufs[n++] = &c->hdrs[i];
    bufs[n++] = &c->body;
    return n;
}

static int on_message_begin(http_parser *p) {
    srv_conn_t *c = p->data;
    bytebuf_t *bufs[REQUEST_BUFS];
    for (int i = 0, n = request_bufs(c, bufs); i < n; i++) bytebuf_reset(bufs[i]);
    if (c->body.cap > 65536) bytebuf_free(&c->body); /* a large body is not kept for the next */
    c->field_len = 0;
    c->in_value = 0;
    c->hdr = HDR_OTHER;
    c->hdr_seen = 0;
    c->header_bytes = 0;
    c->reject = 0;
    free(c->path);
    c->path = NULL;
    c->query = "";
    c->in_request = 1;
    c->request_since = c->raw_out ? 0 : uv_now(c->srv->loop);
    const http_limits_t *lim = &c->srv->lim;
    uint64_t ms = lim->request_timeout_ms, h = lim->header_timeout_ms;
    srv_conn_timer(c, h && (!ms || h < ms) ? h : ms); /* the headers first */
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t n) {
    srv_conn_t *c = p->data;
    if (count_header_bytes(c, n)) return -1;
    if (bytebuf_append(&c->url, at, n)) return srv_conn_reject(c, 503, "out of memory");
    return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t n) {
    srv_conn_t *c = p->data;
    if (count_header_bytes(c, n)) return -1;
    if (c->in_value) { /* a new header starts */
        c->in_value = 0;
        c->field_len = 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (c->field_len < sizeof c->field) {
            char ch = at[i];
            c->field[c->field_len] = (ch >= 'A' && ch <= 'Z') ? (char)(ch + 32) : ch;
        }
        c->field_len++;
    }
    return 0;
}

/* Which header (HDR_*) the completed name is. */
static int header_kind(const srv_conn_t *c) {
    for (int i = 0; i < N_HDRS; i++)
        if (c->field_len == strlen(header_names[i]) &&
            !memcmp(c->field, header_names[i], c->field_len))
            return i;
    return HDR_OTHER;
}

static int on_header_value(http_parser *p, const char *at, size_t n) {
    srv_conn_t *c = p->data;
    if (count_header_bytes(c, n)) return -1;
    if (!c->in_value) { /* the name is complete */
        c->in_value = 1;
        c->hdr = header_kind(c);
        if (c->hdr != HDR_OTHER) {
            if (c->hdr_seen & (1u << c->hdr))
                return srv_conn_reject(c, 400, "a header that must appear once is repeated");
            c->hdr_seen |= 1u << c->hdr;
        }
    }
    if (c->hdr != HDR_OTHER && bytebuf_append(&c->hdrs[c->hdr], at, n))
        return srv_conn_reject(c, 503, "out of memory");
    return 0;
}

/* Split the URL into the decoded path and the raw query. */
static int parse_target(srv_conn_t *c) {
    struct http_parser_url u;
    http_parser_url_init(&u);
    if (c->url.len == 0 ||
        http_parser_parse_url(c->url.data, c->url.len, c->parser.method == HTTP_CONNECT, &u))
        return srv_conn_reject(c, 400, "invalid request target");
    const char *raw = "/";
    size_t raw_len = 1;
    if (u.field_set & (1 << UF_PATH)) {
        raw = c->url.data + u.field_data[UF_PATH].off;
        raw_len = u.field_data[UF_PATH].len;
    }
    c->path = malloc(raw_len + 1);
    if (!c->path) return srv_conn_reject(c, 503, "out of memory");
    if (pct_decode(raw, raw_len, 0, c->path, raw_len + 1) < 0)
        return srv_conn_reject(c, 400, "invalid percent-encoding in the path");
    if (u.field_set & (1 << UF_QUERY)) {
        char *q = c->url.data + u.field_data[UF_QUERY].off;
        q[u.field_data[UF_QUERY].len] = '\0'; /* cuts a fragment; url has room for the NUL */
        c->query = q;
    }
    return 0;
}

/* Header h of the request being received, or NULL when it was not sent. */
static const char *header(const srv_conn_t *c, int h) {
    return c->hdr_seen & (1u << h) ? bytebuf_str(&c->hdrs[h]) : NULL;
}

/* The request as the handler sees it; the body is whatever arrived so far. */
static http_request_t srv_conn_request(const srv_conn_t *c) {
    const http_parser *p = &c->parser;
    return (http_request_t){
        .method = http_method_str((enum http_method)p->method),
        .path = c->path ? c->path : "/",
        .query = c->query,
        .body = bytebuf_str(&c->body),
        .body_len = c->body.len,
        .authorization = header(c, HDR_AUTH),
        .content_type = header(c, HDR_CTYPE),
        .source = header(c, HDR_SOURCE),
        .webhook_id = header(c, HDR_WH_ID),
        .webhook_timestamp = header(c, HDR_WH_TS),
        .webhook_signature = header(c, HDR_WH_SIG),
        .peer = c->peer,
        .last_event_id = header(c, HDR_LAST_ID),
        .host = header(c, HDR_HOST),
        .origin = header(c, HDR_ORIGIN),
        .mcp_protocol_version = header(c, HDR_MCP_VERSION),
        .fetch_site = header(c, HDR_FETCH_SITE),
        .fetch_mode = header(c, HDR_FETCH_MODE),
        .fetch_dest = header(c, HDR_FETCH_DEST),
        .conn = (void *)c,
    };
}

static int on_headers_complete(http_parser *p) {
    srv_conn_t *c = p->data;
    const http_limits_t *lim = &c->srv->lim;
    if (parse_target(c)) return -1;
    if (lim->header_timeout_ms && !c->raw_out) { /* the rest of the request time for the body */
        uint64_t spent = uv_now(c->srv->loop) - c->request_since, ms = lim->request_timeout_ms;
        srv_conn_timer(c, ms ? (spent < ms ? ms - spent : 1) : 0);
    }
    if (c->srv->authorize) { /* before a byte of the body is read or buffered */
        http_request_t req = srv_conn_request(c);
        http_response_t *no = &c->refusal;
        free(no->body);
        *no = (http_response_t){0};
        if (c->srv->authorize(&req, no, c->srv->user)) {
            if (no->status < 400 || no->status > 599 || !no->body)
                http_error(no, 401, "unauthorized",
                           "this call needs the daemon's token (Authorization: Bearer TOKEN)");
            return srv_conn_reject(c, no->status, NULL);
        }
    }
    if ((p->flags & F_CONTENTLENGTH) && p->content_length > lim->max_body_bytes)
        return srv_conn_reject(c, 413, "request body is larger than the limit");
    if ((p->flags & F_CONTENTLENGTH) && p->content_length > 0 &&
        bytebuf_reserve(&c->body, (size_t)p->content_length))
        return srv_conn_reject(c, 503, "out of memory");
    /* A client that waits for "100 Continue" gets it only when a body fits. */
    /* Without a Content-Length, http-parser leaves content_length at ULLONG_MAX. */
    int has_body =
        (p->flags & F_CHUNKED) || ((p->flags & F_CONTENTLENGTH) && p->content_length > 0);
    const char *expect = header(c, HDR_EXPECT);
    if (has_body && expect && !strcasecmp(expect, "100-continue") &&
        (p->http_major > 1 || (p->http_major == 1 && p->http_minor >= 1)))
        srv_conn_send(c, 100, NULL, NULL, 0, "", 0, 0);
    return c->closing ? -1 : 0;
}

static int on_body(http_parser *p, const char *at, size_t n) {
    srv_conn_t *c = p->data;
    if (bytebuf_append(&c->body, at, n))
        return srv_conn_reject(c, 413, "request body is larger than the limit");
    return 0;
}

/* A complete request: call the handler and queue its response. */
static int on_message_complete(http_parser *p) {
    srv_conn_t *c = p->data;
    http_server_t *s = c->srv;
    c->in_request = 0;
    srv_conn_timer(c, 0);
    http_request_t req = srv_conn_request(c);
    http_response_t res = {0};
    s->handler(&req, &res, s->user);
    /* The handler may have closed the server (and with it this connection). */
    if (c->closing) {
        free(res.body);
        http_parser_pause(p, 1);
        return 0;
    }
    if (c->stream) {
        free(res.body);
        stream_begin(c, res.headers);
        http_parser_pause(p, 1);
        return 0;
    }
    if (res.status < 100 || res.status > 599) {
        http_error(&res, 500, "internal", "the handler produced no valid status (%d)", res.status);
    }
    if (!res.body) res.body_len = 0;
    c->last = !http_should_keep_alive(p) || p->upgrade;
    srv_conn_send(c, res.status, res.content_type ? res.content_type : "application/json", res.body,
                  res.body_len, res.headers, p->method == HTTP_HEAD, 1);
    http_parser_pause(p, 1); /* the next pipelined request waits for this write */
    return 0;
}

static const http_parser_settings parser_settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* ------------------------------------------------------- connection I/O */

/* Parse what is buffered until a response is in flight, the input runs out
 * or the connection ends; then wait for more input. */
static void srv_conn_process(srv_conn_t *c) {
    while (!c->closing && !c->writing && !c->lingering && c->in_off < c->in.len) {
        size_t avail = c->in.len - c->in_off;
        size_t n = http_parser_execute(&c->parser, &parser_settings, c->in.data + c->in_off, avail);
        c->in_off += n;
        enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
        if (c->closing) return;
        if (e == HPE_PAUSED) {
            http_parser_pause(&c->parser, 0);
            continue;
        }
        if (e != HPE_OK) {
            if (c->refusal.body)
                srv_conn_send_refusal(c);
            else if (c->reject == 413)
                srv_conn_send_error(c, 413, "body_too_large", c->reject_msg);
            else if (c->reject == 431 || e == HPE_HEADER_OVERFLOW)
                srv_conn_send_error(c, 431, "headers_too_large", "request headers are too large");
            else if (c->reject == 503)
                srv_conn_send_error(c, 503, "unavailable", c->reject_msg);
            else if (c->reject)
                srv_conn_send_error(c, c->reject, "bad_request", c->reject_msg);
            else
                srv_conn_send_error(c, 400, "bad_request",
                                    http_errno_description(e)); /* static text */
            return;
        }
        if (c->parser.upgrade && !c->writing) { /* protocol switch: not supported */
            srv_conn_send_error(c, 400, "bad_request", "protocol upgrades are not supported");
            return;
        }
    }
    if (c->closing || c->lingering) return;
    bytebuf_drop(&c->in, c->in_off); /* what was parsed */
    c->in_off = 0;
    /* The idle timer was armed on accept or when the last response was written;
     * bytes that start no request (blank lines) do not extend it. */
    if (c->writing) return;
    srv_conn_read_start(c);
}

/* Reads land directly in the free tail of the input buffer. */
static void srv_conn_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *out) {
    srv_conn_t *c = h->data;
    *out = uv_buf_init(NULL, 0);
    if (bytebuf_reserve(&c->in, READ_CHUNK)) return; /* read_cb gets UV_ENOBUFS */
    *out = uv_buf_init(c->in.data + c->in.len, (unsigned)(c->in.cap - c->in.len - 1));
}

static void srv_conn_read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *b) {
    srv_conn_t *c = st->data;
    if (c->closing) return;
    if (nread < 0) { /* EOF or error; reading is stopped while a response is queued */
        srv_conn_close(c);
        return;
    }
    if (c->lingering || c->streaming || nread == 0) return; /* discard */
    bytebuf_commit(&c->in, (size_t)nread);
    srv_conn_process(c);
}

static void srv_conn_timer_cb(uv_timer_t *t) {
    srv_conn_t *c = t->data;
    if (c->closing) return;
    if (c->in_request && !c->writing && !c->lingering) {
        srv_conn_read_stop(c);
        srv_conn_send_error(c, 408, "request_timeout", "the request was not received in time");
        return;
    }
    srv_conn_close(c); /* idle, a write the peer does not read, or the linger time */
}

/* One handle-owning object (the listener or a connection) of s is gone; the
 * last one frees s and reports done. */
static void server_release(http_server_t *s) {
    s->pending--;
    if (!s->closing || s->pending > 0) return;
    void (*done)(void *) = s->done;
    void *arg = s->done_arg;
    free(s);
    if (done) done(arg);
}

/* The empty buffers of a new connection: the body capped by the server's
 * limit, the others only by memory (the header bytes are counted apart). */
static void srv_conn_init_bufs(srv_conn_t *c) {
    bytebuf_t *bufs[REQUEST_BUFS];
    for (int i = 0, n = request_bufs(c, bufs); i < n; i++) bytebuf_init(bufs[i], BYTEBUF_UNLIMITED);
    bytebuf_init(&c->body, c->srv->lim.max_body_bytes);
    bytebuf_init(&c->in, BYTEBUF_UNLIMITED);
}

/* Free a connection and everything it owns (its handles are closed). */
static void srv_conn_free(srv_conn_t *c) {
    bytebuf_t *bufs[REQUEST_BUFS];
    for (int i = 0, n = request_bufs(c, bufs); i < n; i++) bytebuf_free(bufs[i]);
    bytebuf_free(&c->in);
    free(c->stream);
    free(c->path);
    free(c->refusal.body);
    free(c);
}

static void srv_conn_close_cb(uv_handle_t *h) {
    srv_conn_t *c = h->data;
    if (--c->open_handles > 0) return;
    http_server_t *s = c->srv;
    srv_conn_free(c);
    server_release(s);
}

/* Start closing (idempotent). Memory goes in the close callbacks. */
static void srv_conn_close(srv_conn_t *c) {
    if (c->closing) return;
    http_server_t *s = c->srv;
    c->closing = 1;
    c->reading = 0;
    if (c->raw_out) return; /* http_feed_raw frees it */
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    c->prev = c->next = NULL;
    stream_closed(c);
    if (c->counted)
        s->nconns--;
    else
        s->nrejecting--;
    uv_close((uv_handle_t *)&c->timer, srv_conn_close_cb);
    uv_close((uv_handle_t *)&c->tcp, srv_conn_close_cb);
}

static void format_peer(srv_conn_t *c) {
    struct sockaddr_storage ss;
    int len = sizeof ss;
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    snprintf(c->peer, sizeof c->peer, "?");
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) < 0) return;
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
        uv_ip4_name(a, ip, sizeof ip);
        port = ntohs(a->sin_port);
        snprintf(c->peer, sizeof c->peer, "%s:%d", ip, port);
        snprintf(c->addr, sizeof c->addr, "%s", ip);
    } else if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
        uv_ip6_name(a, ip, sizeof ip);
        port = ntohs(a->sin6_port);
        snprintf(c->peer, sizeof c->peer, "[%s]:%d", ip, port);
        /* One client is one /64, what a host gets to choose its addresses in. */
        if (!IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
            struct in6_addr net = a->sin6_addr;
            memset(net.s6_addr + 8, 0, 8);
            inet_ntop(AF_INET6, &net, ip, sizeof ip);
        }
        snprintf(c->addr, sizeof c->addr, "%s", ip);
    }
    /* Every loopback address is this machine: one client, whichever of
     * 127.0.0.0/8 it connects from. */
    if (http_host_is_loopback(c->addr)) snprintf(c->addr, sizeof c->addr, "loopback");
}

/* Waiting for a request with nothing of one received? */
static int srv_conn_is_idle(const srv_conn_t *c) {
    return c->counted && !c->closing && !c->in_request && !c->writing && !c->lingering &&
           c->in.len == 0;
}

/* The oldest idle connection, of address addr only when addr is given. */
static srv_conn_t *oldest_idle(http_server_t *s, const char *addr) {
    srv_conn_t *best = NULL;
    for (srv_conn_t *o = s->conns; o; o = o->next)
        if (srv_conn_is_idle(o) && (!addr || !strcmp(o->addr, addr)) &&
            (!best || o->idle_since <= best->idle_since))
            best = o;
    return best;
}

/* The connection that has been sending one request for the longest, when
 * that is longer than SLOW_SENDER_MS (of address addr only when addr is
 * given): a client with something to say says it in milliseconds. */
static srv_conn_t *slowest_sender(http_server_t *s, const char *addr) {
    uint64_t now = uv_now(s->loop);
    srv_conn_t *best = NULL;
    for (srv_conn_t *o = s->conns; o; o = o->next)
        if (o->counted && !o->closing && o->in_request && !o->writing &&
            now - o->request_since > SLOW_SENDER_MS && (!addr || !strcmp(o->addr, addr)) &&
            (!best || o->request_since <= best->request_since))
            best = o;
    return best;
}

/* May c be served under the caps? Closes an idle connection, else a slow
 * sender, to make room. */
static int srv_conn_admit(http_server_t *s, srv_conn_t *c) {
    int loopback = !strcmp(c->addr, "loopback");
    int per = loopback ? s->lim.max_loopback : s->lim.max_per_client, lim = s->lim.max_connections;
    if (per > 0) {
        int mine = 0;
        for (srv_conn_t *o = s->conns; o; o = o->next)
            mine += o->counted && !strcmp(o->addr, c->addr);
        if (mine >= per) {
            srv_conn_t *victim = oldest_idle(s, c->addr);
            if (!victim) victim = slowest_sender(s, c->addr);
            if (!victim) return 0;
            srv_conn_close(victim);
        }
    }
    if (lim > 0 && s->nconns >= lim) {
        srv_conn_t *victim = oldest_idle(s, NULL);
        if (!victim) victim = slowest_sender(s, NULL);
        if (!victim) return 0;
        srv_conn_close(victim);
    }
    return 1;
}

static void server_connection_cb(uv_stream_t *ls, int status) {
    http_server_t *s = ls->data;
    if (status < 0 || s->closing) return;
    srv_conn_t *c = calloc(1, sizeof *c);
    /* Out of memory: libuv keeps the connection and pauses accepting until the
     * next uv_accept; nothing better can be done without memory. */
    if (!c) return;
    c->srv = s;
    c->query = "";
    srv_conn_init_bufs(c);
    if (uv_timer_init(s->loop, &c->timer) < 0) {
        free(c);
        return;
    }
    c->timer.data = c;
    c->open_handles = 1;
    s->pending++;
    if (uv_tcp_init(s->loop, &c->tcp) < 0) {
        c->closing = 1; /* never linked: only the timer to close */
        uv_close((uv_handle_t *)&c->timer, srv_conn_close_cb);
        return;
    }
    c->tcp.data = c;
    c->open_handles = 2;
    /* Linked and counted before anything else can fail, so srv_conn_close applies. */
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    int lim = s->lim.max_connections;
    s->nrejecting++; /* until admitted below */
    if (uv_accept(ls, (uv_stream_t *)&c->tcp) < 0) {
        srv_conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    format_peer(c);
    c->counted = srv_conn_admit(s, c);
    if (c->counted) {
        s->nrejecting--;
        s->nconns++;
    } else {
        /* Answer 503 while the rejected ones are few; beyond that just close. */
        if (s->nrejecting > (lim > 16 ? lim : 16)) {
            srv_conn_close(c);
            return;
        }
        srv_conn_send_error(c, 503, "too_many_connections",
                            "the server has too many connections (from this address or in all)");
        return;
    }
    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
    /* The first request must start within the first-byte timeout (or the
     * idle timeout, when that is shorter). */
    uint64_t first = s->lim.first_byte_timeout_ms, idle = s->lim.idle_timeout_ms;
    srv_conn_timer(c, first && (!idle || first < idle) ? first : idle);
    c->idle_since = uv_now(s->loop);
    srv_conn_read_start(c);
}

/* ------------------------------------------------- streaming responses */

/* A stream belongs to its connection: it is allocated by http_stream_open,
 * told to its owner by closed() in srv_conn_close and freed in the connection's
 * close callback. Stream writes carry their own bytes and never touch the
 * request/response state above (the parser stays paused for good). */
struct http_stream {
    srv_conn_t *conn; /* NULL once closed */
    http_stream_closed_fn closed;
    void *arg;
    const char *content_type; /* static string */
    char *initial;            /* sent after the head */
    size_t initial_len;
    size_t queued;                        /* bytes handed to uv_write and not yet written */
    http_stream_closed_fn drained;        /* called when queued falls to 0; or NULL */
    int finishing;                        /* http_stream_finish: end once queued is 0 */
    int chunked;                          /* Transfer-Encoding: chunked */
    int deferred;                         /* http_defer: one response to come, not a stream */
    char headers[HTTP_MAX_EXTRA_HEADERS]; /* deferred: the handler's header lines */
};

typedef struct {
    uv_write_t req;
    http_stream_t *st;
    size_t len;
    char data[];
} swrite_t;

/* The end of a finished stream: what was queued is written; close as a
 * response with Connection: close ends, by a lingering close. */
static void stream_done(srv_conn_t *c) {
    c->streaming = 0; /* the linger deadline applies again */
    srv_conn_linger(c);
}

static void stream_write_cb(uv_write_t *req, int status) {
    swrite_t *w = (swrite_t *)req;
    http_stream_t *st = w->st;
    st->queued -= w->len;
    free(w);
    if (!st->conn || st->conn->closing) return;
    if (status < 0)
        srv_conn_close(st->conn);
    else if (st->queued == 0 && st->finishing)
        stream_done(st->conn);
    else if (st->queued == 0 && st->drained)
        st->drained(st, st->arg);
}

static int stream_queue(srv_conn_t *c, const char *data, size_t len) {
    http_stream_t *st = c->stream;
    if (c->closing || !st || st->queued + len > HTTP_STREAM_MAX_QUEUED) return -1;
    swrite_t *w = malloc(sizeof *w + len);
    if (!w) return -1;
    memcpy(w->data, data, len);
    w->st = st;
    w->len = len;
    uv_buf_t b = uv_buf_init(w->data, (unsigned)len);
    if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, stream_write_cb) < 0) {
        free(w);
        return -1;
    }
    st->queued += len;
    return 0;
}

http_stream_t *http_stream_open(const http_request_t *req, http_response_t *res,
                                const char *content_type, const char *initial, size_t len,
                                http_stream_closed_fn closed, void *arg) {
    srv_conn_t *c = req->conn;
    http_stream_t *st = calloc(1, sizeof *st);
    char *head = malloc(len + 1);
    if (!st || !head || c->stream) {
        free(st);
        free(head);
        http_error(res, 503, "unavailable", "out of memory");
        return NULL;
    }
    if (len) memcpy(head, initial, len);
    st->initial = head;
    st->initial_len = len;
    st->content_type = content_type;
    st->conn = c;
    st->closed = closed;
    st->arg = arg;
    res->status = 200;
    res->content_type = content_type;
    c->stream = st;
    return st;
}

/* After the handler opened a stream: send the head (with the response's
 * extra header lines) and the initial bytes. */
static void stream_begin(srv_conn_t *c, const char *headers) {
    http_stream_t *st = c->stream;
    if (st->deferred) { /* http_defer: nothing is sent until the answer */
        snprintf(st->headers, sizeof st->headers, "%s", headers);
        c->streaming = 1; /* no deadline, input discarded */
        c->last = 1;
        srv_conn_timer(c, 0);
        srv_conn_read_start(c); /* to notice the client going away */
        return;
    }
    char head[512 + HTTP_MAX_EXTRA_HEADERS];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 200 OK\r\n"
                     "Content-Type: %s\r\n"
                     "Cache-Control: no-store\r\n"
                     "Connection: close\r\n"
                     "%s%s%s"
                     "X-Accel-Buffering: no\r\n\r\n",
                     st->content_type, st->chunked ? "Transfer-Encoding: chunked\r\n" : "", headers,
                     safety_headers(st->content_type));
    c->streaming = 1;
    c->last = 1;
    srv_conn_timer(c, 0);
    if (c->srv->observe) c->srv->observe(c->path, 200, c->srv->user);
    int rc = n > 0 && n < (int)sizeof head ? stream_queue(c, head, (size_t)n) : -1;
    if (rc == 0 && st->initial_len) rc = stream_put(c, st->initial, st->initial_len);
    free(st->initial);
    st->initial = NULL;
    if (rc < 0) {
        srv_conn_close(c);
        return;
    }
    srv_conn_read_start(c); /* only to notice the peer going away; input is discarded */
}

/* From srv_conn_close: tell the stream's owner, once. */
static void stream_closed(srv_conn_t *c) {
    http_stream_t *st = c->stream;
    if (!st || !st->conn) return;
    st->conn = NULL;
    free(st->initial);
    st->initial = NULL;
    if (st->closed) st->closed(st, st->arg);
}

/* Queue len bytes of the body: as they are, or as one chunk. */
static int stream_put(srv_conn_t *c, const char *data, size_t len) {
    if (!c->stream->chunked || len == 0) return len ? stream_queue(c, data, len) : 0;
    char hdr[24];
    int h = snprintf(hdr, sizeof hdr, "%zx\r\n", len);
    char *chunk = malloc((size_t)h + len + 2);
    if (!chunk) return -1;
    memcpy(chunk, hdr, (size_t)h);
    memcpy(chunk + h, data, len);
    memcpy(chunk + h + len, "\r\n", 2);
    int rc = stream_queue(c, chunk, (size_t)h + len + 2);
    free(chunk);
    return rc;
}

int http_stream_write(http_stream_t *st, const char *data, size_t len) {
    if (!st->conn || !st->conn->streaming || st->finishing) return -1;
    return stream_put(st->conn, data, len);
}

size_t http_stream_queued(const http_stream_t *st) {
    return st->queued;
}

void http_stream_chunked(http_stream_t *st) {
    st->chunked = 1;
}

void http_stream_end(http_stream_t *st) {
    if (st->conn) srv_conn_close(st->conn);
}

void http_stream_on_drain(http_stream_t *st, http_stream_closed_fn drained) {
    st->drained = drained;
}

void http_stream_finish(http_stream_t *st) {
    srv_conn_t *c = st->conn;
    if (!c || c->closing || st->finishing) return;
    if (st->chunked && c->streaming && stream_queue(c, "0\r\n\r\n", 5) < 0) {
        srv_conn_close(c); /* no last chunk: the client sees the body cut */
        return;
    }
    st->finishing = 1;
    if (st->queued == 0 && c->streaming) stream_done(c);
}

http_stream_t *http_defer(const http_request_t *req, http_response_t *res,
                          http_stream_closed_fn closed, void *arg) {
    srv_conn_t *c = req->conn;
    if (!c || c->raw_out) {
        http_error(res, 503, "unavailable", "this answer cannot be deferred here");
        return NULL;
    }
    http_stream_t *st = http_stream_open(req, res, "application/json", NULL, 0, closed, arg);
    if (st) st->deferred = 1;
    return st;
}

void http_deferred_reply(http_stream_t *st, http_response_t *res) {
    srv_conn_t *c = st->conn;
    st->closed = NULL;
    if (!c || c->closing || !c->streaming) {
        free(res->body);
        res->body = NULL;
        return;
    }
    if (res->status < 100 || res->status > 599)
        http_error(res, 500, "internal", "the handler produced no valid status (%d)", res->status);
    char headers[2 * HTTP_MAX_EXTRA_HEADERS];
    snprintf(headers, sizeof headers, "%s%s", st->headers, res->headers);
    c->streaming = 0;
    c->last = 1;
    srv_conn_read_stop(c);
    srv_conn_send(c, res->status, res->content_type ? res->content_type : "application/json",
                  res->body, res->body ? res->body_len : 0, headers, c->parser.method == HTTP_HEAD,
                  1);
    res->body = NULL;
}

/* --------------------------------------------------------------- server */

static void server_free_cb(uv_handle_t *h) {
    free(h->data);
}

int http_server_start(uv_loop_t *loop, const char *host, int port, const http_limits_t *lim,
                      http_handler_fn handler, void *user, http_server_t **out, int *bound_port,
                      char *err, size_t errlen) {
    struct sockaddr_storage addr;
    http_server_t *s = NULL;
    char unbracketed[INET6_ADDRSTRLEN];
    int r;
    *out = NULL;
    if (!host || !*host || !strcasecmp(host, "localhost")) host = "127.0.0.1";
    size_t hlen = strlen(host);
    if (hlen > 2 && host[0] == '[' && host[hlen - 1] == ']' && hlen - 2 < sizeof unbracketed) {
        memcpy(unbracketed, host + 1, hlen - 2); /* "[::1]" as in URLs */
        unbracketed[hlen - 2] = '\0';
        host = unbracketed;
    }
    if (port < 0 || port > 65535) {
        snprintf(err, errlen, "invalid port %d", port);
        return UV_EINVAL;
    }
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&addr) != 0 &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr) != 0) {
        snprintf(err, errlen, "listen address '%s' is not an IPv4 or IPv6 literal", host);
        return UV_EINVAL;
    }
    s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return UV_ENOMEM;
    }
    s->loop = loop;
    if (lim)
        s->lim = *lim;
    else
        http_limits_default(&s->lim);
    /* A cap beyond the descriptors the process may open would only turn
     * into failed accepts; the rest of the process keeps HTTP_FD_RESERVE. */
    struct rlimit rl;
    if (s->lim.max_connections > 0 && getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
        rl.rlim_cur != RLIM_INFINITY) {
        long room = (long)rl.rlim_cur - HTTP_FD_RESERVE;
        if (room < 16) room = 16;
        if (s->lim.max_connections > room) s->lim.max_connections = (int)room;
    }
    s->handler = handler;
    s->user = user;
    r = uv_tcp_init(loop, &s->listener);
    if (r < 0) {
        snprintf(err, errlen, "tcp init: %s", uv_strerror(r));
        free(s);
        return r;
    }
    s->listener.data = s;
    r = uv_tcp_bind(&s->listener, (const struct sockaddr *)&addr, 0);
    if (r < 0) goto fail;
    r = uv_listen((uv_stream_t *)&s->listener, SOMAXCONN, server_connection_cb);
    if (r < 0) goto fail;
    if (bound_port) {
        struct sockaddr_storage got;
        int len = sizeof got;
        r = uv_tcp_getsockname(&s->listener, (struct sockaddr *)&got, &len);
        if (r < 0) goto fail;
        *bound_port = got.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&got)->sin6_port)
                                                : ntohs(((struct sockaddr_in *)&got)->sin_port);
    }
    s->pending = 1; /* the listener */
    *out = s;
    return 0;
fail:
    snprintf(err, errlen, "listen on %s port %d: %s", host, port, uv_strerror(r));
    uv_close((uv_handle_t *)&s->listener, server_free_cb);
    return r;
}

static void listener_close_cb(uv_handle_t *h) {
    server_release(h->data);
}

void http_server_set_observer(http_server_t *s, http_observe_fn fn) {
    s->observe = fn;
}

void http_server_set_authorize(http_server_t *s, http_authorize_fn fn) {
    s->authorize = fn;
}

void http_server_close(http_server_t *s, void (*done)(void *arg), void *arg) {
    if (!s) {
        if (done) done(arg);
        return;
    }
    if (s->closing) return;
    s->closing = 1;
    s->done = done;
    s->done_arg = arg;
    uv_close((uv_handle_t *)&s->listener, listener_close_cb);
    while (s->conns) srv_conn_close(s->conns);
}

/* -------------------------------------------------------------- helpers */

void http_error(http_response_t *res, int status, const char *code, const char *fmt, ...) {
    char small[256];
    char *msg = small;
    char *big = NULL;
    cJSON *root = NULL;
    char *text = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof small) {
        big = malloc((size_t)n + 1);
        if (big) {
            va_start(ap, fmt);
            vsnprintf(big, (size_t)n + 1, fmt, ap);
            va_end(ap);
            msg = big;
        }
    } else if (n < 0) {
        small[0] = '\0';
    }
    util_utf8_scrub(msg); /* a message may quote input: JSON must be UTF-8 */
    free(res->body);
    res->body = NULL;
    res->body_len = 0;
    res->status = status;
    res->content_type = "application/json";
    root = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(root, "error");
    if (!e || !cJSON_AddStringToObject(e, "code", code ? code : "error") ||
        !cJSON_AddStringToObject(e, "message", msg))
        goto fail;
    text = cJSON_PrintUnformatted(root);
    if (!text) goto fail;
    /* Copied so the server's free() never depends on cJSON's allocator hooks. */
    res->body_len = strlen(text);
    res->body = malloc(res->body_len + 1);
    if (res->body)
        memcpy(res->body, text, res->body_len + 1);
    else
        res->body_len = 0;
fail:
    cJSON_free(text);
    cJSON_Delete(root);
    free(big);
}

int http_query_get(const char *query, const char *key, char *buf, size_t buflen) {
    if (buflen) buf[0] = '\0';
    if (!query || !key) return 0;
    size_t keylen = strlen(key);
    const char *p = query;
    while (*p) {
        const char *end = strchr(p, '&');
        if (!end) end = p + strlen(p);
        if (end == p) { /* empty pair */
            p++;
            continue;
        }
        const char *eq = memchr(p, '=', (size_t)(end - p));
        const char *kend = eq ? eq : end;
        size_t klen = (size_t)(kend - p);
        /* The decoded key is never longer than the encoded one. */
        char kbuf[256];
        if (klen < sizeof kbuf && pct_decode(p, klen, 1, kbuf, sizeof kbuf) == (long)keylen &&
            !memcmp(kbuf, key, keylen)) {
            const char *v = eq ? eq + 1 : end;
            if (pct_decode(v, (size_t)(end - v), 1, buf, buflen) < 0) {
                if (buflen) buf[0] = '\0';
                return -1;
            }
            return 1;
        }
        p = *end ? end + 1 : end;
    }
    return 0;
}

int http_parse_listen(const char *s, char *host, size_t hostlen, int *port, char *err,
                      size_t errlen) {
    const char *colon = strrchr(s, ':');
    char *end;
    if (!colon || colon == s) {
        snprintf(err, errlen, "--listen: expected HOST:PORT, got '%s'", s);
        return -1;
    }
    size_t hl = (size_t)(colon - s);
    if (s[0] == '[' && colon[-1] == ']') s++, hl -= 2; /* [::1]:8080 */
    if (hl >= hostlen) {
        snprintf(err, errlen, "--listen: host too long");
        return -1;
    }
    memcpy(host, s, hl);
    host[hl] = '\0';
    long v = strtol(colon + 1, &end, 10);
    if (*end || end == colon + 1 || v < 0 || v > 65535) {
        snprintf(err, errlen, "--listen: bad port in '%s'", s);
        return -1;
    }
    *port = (int)v;
    return 0;
}

int http_host_is_loopback(const char *host) {
    struct in_addr a4;
    struct in6_addr a6;
    char tmp[INET6_ADDRSTRLEN + 2];
    if (!host) return 0;
    if (!strcasecmp(host, "localhost") || !strcasecmp(host, "localhost.")) return 1;
    if (inet_pton(AF_INET, host, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    size_t n = strlen(host);
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']' && n - 2 < sizeof tmp) {
        memcpy(tmp, host + 1, n - 2);
        tmp[n - 2] = '\0';
        host = tmp;
    }
    if (inet_pton(AF_INET6, host, &a6) != 1) return 0;
    if (IN6_IS_ADDR_LOOPBACK(&a6)) return 1;
    return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
}

/* ----------------------------------------------------------------- JSON */

/* "line L, column C" (1-based) of offset pos in text. */
static void json_position(const char *text, size_t pos, char *buf, size_t n) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos; i++) {
        if (text[i] == '\n')
            line++, col = 1;
        else
            col++;
    }
    snprintf(buf, n, "line %zu, column %zu", line, col);
}

/* What cJSON lets through: raw control characters and \u0000 inside strings.
 * Returns the offset of the first such byte and sets *why, or len if none. */
static size_t json_lenient_bytes(const char *text, size_t len, const char **why) {
    int in_string = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)text[i];
        if (!in_string) {
            if (ch == '"') in_string = 1;
            continue;
        }
        if (ch == '"') {
            in_string = 0;
        } else if (ch < 0x20) {
            *why = "a control character inside a string must be escaped";
            return i;
        } else if (ch == '\\' && i + 1 < len) {
            if (text[i + 1] == 'u' && i + 5 < len && !memcmp(text + i + 2, "0000", 4)) {
                *why = "\\u0000 is not allowed in a string";
                return i;
            }
            i++; /* the escaped character, whatever it is (cJSON checks the rest) */
        }
    }
    return len;
}

cJSON *http_json_parse(const char *text, size_t len, char *err, size_t errlen) {
    char where[64];
    const char *why = NULL, *end = NULL;
    size_t bad = json_lenient_bytes(text, len, &why);
    cJSON *root = NULL;
    if (bad < len) goto fail;
    root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        why = "not valid JSON";
        bad = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        goto fail;
    }
    while (end < text + len && strchr(" \t\r\n", *end) && *end) end++;
    if (end != text + len) {
        why = "unexpected text after the JSON value";
        bad = (size_t)(end - text);
        goto fail;
    }
    return root;
fail:
    cJSON_Delete(root);
    json_position(text, bad, where, sizeof where);
    snprintf(err, errlen, "invalid JSON at %s: %s", where, why);
    return NULL;
}

/* ------------------------------------------------------- raw requests */

void http_feed_raw(const char *data, size_t len, http_handler_fn handler,
                   http_authorize_fn authorize, void *user, char **out, size_t *out_len) {
    http_server_t srv = {.handler = handler, .user = user, .authorize = authorize};
    bytebuf_t result;
    srv_conn_t *c = calloc(1, sizeof *c);
    *out = NULL;
    *out_len = 0;
    if (!c) return;
    bytebuf_init(&result, BYTEBUF_UNLIMITED);
    http_limits_default(&srv.lim);
    c->srv = &srv;
    srv_conn_init_bufs(c);
    c->raw_out = &result;
    c->counted = 1;
    c->query = "";
    snprintf(c->peer, sizeof c->peer, "127.0.0.1:1");
    snprintf(c->addr, sizeof c->addr, "127.0.0.1");
    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
    if (bytebuf_append(&c->in, data, len) == 0) srv_conn_process(c);
    srv_conn_free(c);
    *out = bytebuf_take(&result, out_len);
}
