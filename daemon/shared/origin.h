/* origin.h - which requests a server on this machine answers, so that no web
 * page can drive it: the Host and Origin checks against DNS rebinding and
 * cross-site requests, and CORS for origins given on purpose.
 *
 * A page anywhere on the web can make a browser send requests to 127.0.0.1:
 * a form or fetch() POSTs text/plain without asking first, and a page whose
 * own name is made to resolve to 127.0.0.1 (DNS rebinding) reads the replies
 * as its own. Three rules close that:
 *
 *   Host          must name this server: a loopback name or address
 *                 (localhost, 127.0.0.0/8, ::1), the address it listens
 *                 on, or a name given with --allowed-host. A server that
 *                 listens on every address (0.0.0.0, ::) also answers any
 *                 IP literal (no page can rebind one) and the machine's
 *                 hostname. Others get 421; a malformed Host 400. A request
 *                 without Host comes from no browser and passes.
 *   Origin        when present (a browser's request), must be the request's
 *                 own (its host and port equal Host's: the page came from
 *                 this server) or one given with --allowed-origin; others,
 *                 "null" included, get 403.
 *   Content-Type  a request that may change state (any method but GET, HEAD
 *                 and OPTIONS) must be application/json, which a browser
 *                 sends cross-site only after a CORS preflight; others get
 *                 415.
 *
 * CORS: a request from an --allowed-origin gets Access-Control-Allow-Origin
 * (and its preflight an answer); no other request ever gets a CORS header.
 *
 * origin_check is the one check; every HTTP front of the daemon calls it
 * (api_guard does, for every route). The parsers are exposed for the fuzz
 * target. */
#ifndef NIGHTSHIFT_ORIGIN_H
#define NIGHTSHIFT_ORIGIN_H

#include <stddef.h>

#include "daemon/shared/http.h"

#define ORIGIN_MAX_NAMES 32  /* names in --allowed-host, origins in --allowed-origin */
#define ORIGIN_HOST_MAX  256 /* bytes of a host name (DNS: 253) */

typedef struct origin_policy origin_policy_t;

typedef struct {
    const char *listen_host;     /* the address the server listens on ("127.0.0.1", "::") */
    const char *allowed_hosts;   /* comma-separated names (--allowed-host), or NULL */
    const char *allowed_origins; /* comma-separated origins "https://lab.example:8443", or NULL */
} origin_opts_t;

/* A policy for o (strings copied). Returns 0 with *out (free it with
 * origin_policy_free), or -1 with the bad name in err. */
int origin_policy_new(const origin_opts_t *o, origin_policy_t **out, char *err, size_t errlen);
void origin_policy_free(origin_policy_t *p);

/* The check: 0 when req may go on; otherwise the status (400, 403, 415 or
 * 421) with res holding the error envelope. A NULL policy checks nothing. */
int origin_check(const origin_policy_t *p, const http_request_t *req, http_response_t *res);

/* For the GETs that cost the daemon work (a report, an export): a
 * browser's request that another site's page made without asking (an
 * <img>, a <script>, a frame: Sec-Fetch-Site cross-site or same-site with
 * no Origin header) gets 403 cross_site, so a page cannot keep the daemon
 * busy; the daemon's own pages (same-origin), an address typed or
 * bookmarked (none), a link followed to a page of its own (a top-level
 * navigation: mode navigate, dest document) and a CORS request from an
 * --allowed-origin pass, as does every request without Fetch Metadata
 * (curl, scripts, and browsers too old to send it, which only the lanes'
 * bounds then hold: export.h, report_lane.h). Returns 0, or 403 with res
 * holding the refusal. */
int origin_costly_check(const http_request_t *req, http_response_t *res);

/* CORS for a request from an allowed origin: its headers appended to
 * res->headers. Returns 1 when req is a preflight (OPTIONS) that res now
 * answers completely (204), else 0. */
int origin_cors(const origin_policy_t *p, const http_request_t *req, http_response_t *res);

/* ------------------------------------------------------- the parsers */

/* An authority "name", "name:port", "[v6]" or "[v6]:port" into host (lower
 * case, IPv6 without brackets, a trailing dot dropped) and *port (-1 when
 * absent). Returns 0, or -1 when it is malformed. */
int origin_parse_authority(const char *s, size_t len, char *host, size_t hostlen, int *port);

/* An Origin "scheme://authority" into lower-case scheme (http or https only),
 * host and port (the scheme's default when absent). Returns 0, or -1 for
 * anything else ("null", a path, another scheme). */
int origin_parse(const char *s, char *scheme, size_t schemelen, char *host, size_t hostlen,
                 int *port);

#endif
