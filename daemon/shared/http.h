/* http.h - a small HTTP/1.1 server on a libuv loop (parsing by http-parser).
 *
 * Accepts connections, parses requests with keep-alive, enforces limits (header
 * bytes, body bytes, idle time between requests, time to the first byte of a
 * new connection, time to receive a whole request, concurrent connections in
 * all and per remote client: a peer address, an IPv6 /64 as one; loopback
 * has a cap of its own, none by default), and hands each complete request to
 * one handler callback that answers synchronously. At the connection cap the oldest idle connection
 * (one waiting for a request) is closed to make room, else the one that has been sending a request
 * for longest (over a second); only when there is neither does a new connection get 503. An
 * optional authorize callback sees each request once its headers are in, before its body is read.
 * Limit violations and malformed requests are answered by the server itself with the JSON error
 * envelope
 * {"error":{"code":...,"message":...}} (400, 408, 413, 431, 503) and the
 * connection is closed.
 *
 * http-parser stays inside http.c so it can be swapped. */
#ifndef NIGHTSHIFT_HTTP_H
#define NIGHTSHIFT_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct http_server http_server_t;

typedef struct {
    size_t max_header_bytes;        /* all header lines together; default 16 KiB */
    size_t max_body_bytes;          /* default 1 MiB */
    uint64_t idle_timeout_ms;       /* keep-alive connection with no request; default 30 s */
    uint64_t request_timeout_ms;    /* first byte to complete request; default 10 s */
    uint64_t header_timeout_ms;     /* first byte to the end of the headers; default 5 s */
    int max_connections;            /* default 4096 (at most the open files allowed, less
                                       HTTP_FD_RESERVE); beyond it new connections get 503 */
    int max_per_client;             /* connections from one remote client; default 64 */
    int max_loopback;               /* connections from loopback, all together; default none */
    uint64_t first_byte_timeout_ms; /* a new connection that starts no request; default 5 s */
} http_limits_t;                    /* a timeout of 0 disables it; a cap <= 0 means no limit */

#define HTTP_FD_RESERVE 256 /* descriptors max_connections leaves to the rest of the process */

/* A parsed request. Everything is borrowed for the duration of the handler. */
typedef struct {
    const char *method; /* "GET", "POST", ... */
    const char *path;   /* decoded path without the query, e.g. "/v1/experiments/3" */
    const char *query;  /* raw query string without '?', or "" */
    const char *body;   /* NUL-terminated copy of the body ("" when none) */
    size_t body_len;
    const char *authorization; /* the Authorization header, or NULL */
    const char *content_type;  /* or NULL */
    const char *source;        /* the X-Nightshift-Source header ("cli", ...), or NULL */
    /* The Standard Webhooks headers (read by the agent), each or NULL. */
    const char *webhook_id;
    const char *webhook_timestamp;
    const char *webhook_signature;
    const char *peer;                 /* "127.0.0.1:54321" */
    const char *last_event_id;        /* the Last-Event-ID header (SSE reconnects), or NULL */
    const char *host;                 /* the Host header, or NULL */
    const char *origin;               /* the Origin header (sent by browsers), or NULL */
    const char *mcp_protocol_version; /* the MCP-Protocol-Version header (/mcp), or NULL */
    /* A browser's Fetch Metadata: Sec-Fetch-Site, -Mode and -Dest, or NULL
     * (origin_costly_check reads them). */
    const char *fetch_site, *fetch_mode, *fetch_dest;
    void *conn; /* the server's connection, for http_stream_open only */
} http_request_t;

#define HTTP_MAX_EXTRA_HEADERS 512

/* The handler's answer. body is malloc'd by the handler and freed by the server. */
typedef struct {
    int status;               /* e.g. 200 */
    const char *content_type; /* static string; default "application/json" */
    char *body;
    size_t body_len;
    /* Header lines the server adds to the head ("Name: value\r\n" each; "" for
     * none), e.g. CORS headers (daemon/shared/origin.h). */
    char headers[HTTP_MAX_EXTRA_HEADERS];
} http_response_t;

typedef void (*http_handler_fn)(const http_request_t *req, http_response_t *res, void *user);

/* Called when a request's headers are complete, before its body is read;
 * req->body is "" then. Returns 0 to go on, or non-zero with res holding the
 * refusal (a status and, e.g. from http_error, a body), which the server
 * answers before it closes the connection; without a valid status in res
 * that is 401 (code "unauthorized"). */
typedef int (*http_authorize_fn)(const http_request_t *req, http_response_t *res, void *user);

/* Fill lim with the defaults above. */
void http_limits_default(http_limits_t *lim);

/* Listen on host:port (port 0 = pick a free one; *bound_port gets the port).
 * host is an IPv4 or IPv6 literal or "localhost" (127.0.0.1, no DNS); lim may
 * be NULL for the defaults. Returns 0 or a negative libuv error with err set;
 * after a failed bind the half-made listener is freed on the loop's next run.
 * The server is owned by the caller and released by http_server_close. */
int http_server_start(uv_loop_t *loop, const char *host, int port, const http_limits_t *lim,
                      http_handler_fn handler, void *user, http_server_t **out, int *bound_port,
                      char *err, size_t errlen);

/* Check every request's headers with fn (NULL: none) before its body is read;
 * fn gets the server's user pointer. */
void http_server_set_authorize(http_server_t *s, http_authorize_fn fn);

/* Called once for every final response the server sends: the handler's, a
 * refusal of authorize, the server's own errors (400, 408, 413, 431, 503)
 * and a stream's head; path is the request's decoded path, or NULL when the
 * connection ended before one was read; user is the server's user pointer.
 * The one place where requests can be counted (GET /metrics). */
typedef void (*http_observe_fn)(const char *path, int status, void *user);

/* Tell fn (NULL: nobody) about every response. */
void http_server_set_observer(http_server_t *s, http_observe_fn fn);

/* Stop listening and close every connection (responses in flight are
 * dropped). The memory is freed once libuv has closed every handle; done (may
 * be NULL) is called then. May be called from the handler. s == NULL calls
 * done at once; a second call on the same server is ignored. */
void http_server_close(http_server_t *s, void (*done)(void *arg), void *arg);

/* Helpers for handlers. Both take ownership of nothing and copy what they need. */
/* res = status + the JSON error envelope with code and message (any body
 * already in res is freed and replaced). */
void http_error(http_response_t *res, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The value of the first key=value pair whose decoded key is key, URL-decoded
 * ('+' is a space) into buf; returns 1 if present ("flag" alone counts, with
 * value ""), 0 if absent, -1 if the value has an invalid escape or %00 or does
 * not fit in buf (buf is then ""). */
int http_query_get(const char *query, const char *key, char *buf, size_t buflen);

/* Split "HOST:PORT" ("[::1]:8080" for IPv6) into host and port (0..65535).
 * Returns 0, or -1 with "--listen: ..." in err. */
int http_parse_listen(const char *s, char *host, size_t hostlen, int *port, char *err,
                      size_t errlen);

/* ------------------------------------------------ streaming responses
 *
 * A long-lived response (Server-Sent Events): the handler calls
 * http_stream_open instead of filling res with a body. The server then writes
 * the head (200, the content type, no Content-Length, Connection: close) and
 * the initial bytes, and the connection stays open with no idle deadline; it
 * reads no further requests. Writes are queued with uv_write and never block:
 * a client that does not read lets its queue grow to HTTP_STREAM_MAX_QUEUED
 * bytes, after which http_stream_write refuses (the caller ends the stream).
 * closed(st, arg) is called exactly once when the stream ends for any reason
 * (http_stream_end, the peer closing, an error, http_server_close); st is
 * invalid after it returns. */
typedef struct http_stream http_stream_t;
typedef void (*http_stream_closed_fn)(http_stream_t *st, void *arg);

#define HTTP_STREAM_MAX_QUEUED (1 << 20)

/* From inside the handler of req: answer with a stream. initial (may be NULL)
 * is copied and sent right after the head. Returns the stream (owned by the
 * server), or NULL when out of memory (res then carries a 503). */
http_stream_t *http_stream_open(const http_request_t *req, http_response_t *res,
                                const char *content_type, const char *initial, size_t len,
                                http_stream_closed_fn closed, void *arg);

/* Queue len bytes (copied). Returns 0, or -1 when the client's queue is over
 * HTTP_STREAM_MAX_QUEUED or out of memory (nothing queued). */
int http_stream_write(http_stream_t *st, const char *data, size_t len);

/* Bytes written to the stream that have not reached the socket yet: how far
 * its client is behind. */
size_t http_stream_queued(const http_stream_t *st);

/* End the stream: close the connection (closed is called before this returns). */
void http_stream_end(http_stream_t *st);

/* Have drained(st, arg) (arg as given to http_stream_open) called each time
 * every byte queued so far has reached the socket: a producer of a long
 * response writes its next piece then, so a client that reads slowly holds
 * at most one piece in the daemon's memory (export.c). */
void http_stream_on_drain(http_stream_t *st, http_stream_closed_fn drained);

/* End the response once the bytes queued so far are written; nothing may be
 * written after it. closed is called when the connection is gone. */
void http_stream_finish(http_stream_t *st);

/* From the handler, right after http_stream_open: send the body chunked
 * (Transfer-Encoding), so that the client can tell a body ended by
 * http_stream_finish (the last chunk) from one cut short by an error or
 * http_stream_end (none). */
void http_stream_chunked(http_stream_t *st);

/* ------------------------------------------------ deferred responses
 *
 * A handler whose answer is made off the loop (a report on the thread pool)
 * calls http_defer instead of filling res, and answers later, on the loop,
 * with http_deferred_reply. Meanwhile the connection has no deadline and
 * reads nothing but its client's going away (pipelined requests behind it
 * are dropped: the reply closes the connection); closed(st, arg) is called
 * if that happens first, and st is invalid after it returns. The header
 * lines the handler put in res (CORS) go out with the reply. */
http_stream_t *http_defer(const http_request_t *req, http_response_t *res,
                          http_stream_closed_fn closed, void *arg);

/* Send res (its body taken) as the deferred answer of st and close the
 * connection after it; closed is not called after this. */
void http_deferred_reply(http_stream_t *st, http_response_t *res);
/* Parse a whole JSON text strictly: exactly one value with only whitespace
 * around it, no raw control characters (below 0x20) inside strings and no
 * \u0000 escape (a string with a NUL in it cannot be stored faithfully).
 * Returns the value (caller deletes), or NULL with "invalid JSON at line L,
 * column C: why" in err. Every JSON body the daemon and the agent accept goes
 * through this. */
struct cJSON *http_json_parse(const char *text, size_t len, char *err, size_t errlen);

/* Run one request given as raw bytes through the parser, the limits and
 * handler (with authorize, when given) as a connection would, without a
 * socket or a loop; out gets everything the server would have written
 * (malloc'd, caller frees; *out_len bytes). For the fuzz targets. */
void http_feed_raw(const char *data, size_t len, http_handler_fn handler,
                   http_authorize_fn authorize, void *user, char **out, size_t *out_len);

/* Is host a loopback address (127.0.0.0/8, ::1, "localhost")? */
int http_host_is_loopback(const char *host);

#endif
