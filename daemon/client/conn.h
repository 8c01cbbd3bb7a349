/* conn.h - one daemon over HTTP (libcurl): conn_open / conn_request own every
 * libcurl setting (the base URL, the bearer token, timeouts, the reply size
 * cap) and the mapping of failures to exit codes and messages, so a command
 * only builds a path, calls it, and prints what came back. */
#ifndef NIGHTSHIFT_CLIENT_CONN_H
#define NIGHTSHIFT_CLIENT_CONN_H

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <signal.h>

#include "daemon/client/cmd.h"
#include "daemon/shared/bytebuf.h"

#define DEFAULT_URL     "http://127.0.0.1:8080"
#define MAX_REPLY_BYTES ((size_t)16 << 20) /* a reply larger than this is refused */

/* One daemon: a curl handle reused for every request (keep-alive). */
typedef struct {
    CURL *curl;
    char *base;                        /* base URL without a trailing '/', owned */
    struct curl_slist *get_h, *post_h; /* request headers, owned */
    int has_token;                     /* an Authorization header is sent */
    volatile sig_atomic_t *stop;       /* watch: abort the transfer when set; or NULL */
    int inited;                        /* curl_global_init ran: conn_close undoes it */
    char errbuf[CURL_ERROR_SIZE];      /* curl's detail for the last failure */
    int quiet;                         /* watch: failures go to said, not stderr */
    long http_status;                  /* of the last request; 0 = no HTTP reply */
    char said[512];                    /* the last failure's message when quiet */
    int agent;                         /* the peer is the agent (agent status), not the daemon */
    const char *source;                /* X-Nightshift-Source (set before conn_open); NULL = cli */
    int keep_errors; /* an HTTP error reply is kept in *r (status and body), not printed */
    /* Set before conn_open (kept by it): a command that only reads (best,
     * leaderboard, ls, show, report) may be answered from the state
     * directory's database when no daemon answers on loopback. */
    int offline_ok;
    int offline; /* from here on, requests go to the database (one notice said) */
    /* Set before conn_open (kept by it): with no token given and none in
     * ./state or $NIGHTSHIFT_DIR, ask a daemon on loopback for its state
     * directory and read the token file there (`nightshift mcp`, which a
     * client starts in a working directory of its own). */
    int find_token;
} conn_t;

/* A reply: its status and body (capped at MAX_REPLY_BYTES; body.data is
 * never NULL once conn_request started), freed with conn_reply_free. */
typedef struct {
    long status;
    bytebuf_t body;
} conn_reply_t;

#define CONN_STOPPED (-1) /* conn_request: the transfer was aborted through conn_t.stop */

/* The answer to a GET from a state directory's database, read-only, for
 * when no daemon runs (daemon/serve/offline.h's offline_get, which main.c
 * hands over: the client layer cannot reach the daemon's). 0 with *status
 * and *body (malloc'd, *len bytes), or -1 with err. */
typedef int (*conn_offline_fn)(const char *state_dir, const char *path, long *status, char **body,
                               size_t *len, char *err, size_t errlen);

/* Set the offline answerer (NULL: none, an unreachable daemon is an error). */
void conn_set_offline(conn_offline_fn fn);

/* Free r's body and zero it; a no-op on a zeroed reply. */
void conn_reply_free(conn_reply_t *r);

/* Release what conn_open set up; a no-op on a zeroed conn_t. */
void conn_close(conn_t *c);

/* Set up c for the daemon named by o. Returns 0, or an exit code after
 * printing why (2 for a bad URL or token). conn_close releases c either way. */
int conn_open(conn_t *c, const conn_opts_t *o, const cmd_help_t *h);

/* Send one request: method "GET" or "POST", path (with its query) under the
 * base URL, body (POST only, may be NULL). With c->offline_ok, a GET that no
 * daemon on loopback answers is answered from the state directory's
 * database ($NIGHTSHIFT_DIR, else ./state), saying so once on stderr. On a
 * 2xx reply returns 0 with *r
 * filled (release with conn_reply_free). Otherwise prints the error and returns
 * CLIENT_EXIT_API (an HTTP error, a broken or oversized reply) or
 * CLIENT_EXIT_UNREACHABLE (no connection), or CONN_STOPPED without a word
 * when c->stop aborted the transfer; *r is then empty. */
int conn_request(conn_t *c, const char *method, const char *path, const char *body, size_t body_len,
                 conn_reply_t *r);

/* conn_request, then the body parsed as JSON into *out (owned by the caller,
 * cJSON_Delete). Same return values. */
int conn_json(conn_t *c, const char *method, const char *path, const char *body, size_t body_len,
              cJSON **out);

/* GET path. With raw (--json), the body goes to stdout as received and *out
 * stays NULL; otherwise as conn_json. Same return values. */
int conn_get_raw(conn_t *c, const char *path, int raw, cJSON **out);

/* Say on stderr that the daemon's reply lacked what (a field, a shape). */
void conn_unexpected(const char *what);

#endif
