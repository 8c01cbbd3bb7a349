/* origin.c - the Host, Origin and Content-Type checks and CORS (see
 * origin.h). Host names are compared in one normal form: lower case, a
 * trailing dot dropped, IP literals as inet_ntop writes them. */
#include "daemon/shared/origin.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

typedef struct {
    char scheme[8];
    char host[ORIGIN_HOST_MAX];
    int port;
    char text[ORIGIN_HOST_MAX + 32]; /* serialised as a browser sends it, for CORS */
} allowed_origin_t;

struct origin_policy {
    char listen[ORIGIN_HOST_MAX]; /* normal form; "" when it is a wildcard */
    int wildcard;                 /* listening on 0.0.0.0 or :: */
    char hostname[ORIGIN_HOST_MAX];
    char hosts[ORIGIN_MAX_NAMES][ORIGIN_HOST_MAX];
    int n_hosts;
    allowed_origin_t origins[ORIGIN_MAX_NAMES];
    int n_origins;
};

/* ------------------------------------------------------------- parsers */

/* An IP literal (no brackets) in its normal form into out; 4, 6, or 0 when
 * s is none. */
static int ip_normal(const char *s, char *out, size_t outlen) {
    unsigned char a[16];
    if (inet_pton(AF_INET, s, a) == 1) return inet_ntop(AF_INET, a, out, (socklen_t)outlen) ? 4 : 0;
    if (inet_pton(AF_INET6, s, a) == 1)
        return inet_ntop(AF_INET6, a, out, (socklen_t)outlen) ? 6 : 0;
    return 0;
}

/* A host name's characters: letters, digits, '-', '.', '_' (no percent
 * escapes, no user info). */
static int name_char(char ch) {
    return isalnum((unsigned char)ch) || ch == '-' || ch == '.' || ch == '_';
}

int origin_parse_authority(const char *s, size_t len, char *host, size_t hostlen, int *port) {
    char buf[ORIGIN_HOST_MAX];
    const char *rest;
    *port = -1;
    if (hostlen) host[0] = '\0';
    if (len == 0 || hostlen < 2) return -1;
    if (s[0] == '[') { /* an IPv6 literal */
        const char *close = memchr(s, ']', len);
        size_t n = close ? (size_t)(close - s - 1) : 0;
        if (!close || n == 0 || n >= sizeof buf) return -1;
        memcpy(buf, s + 1, n);
        buf[n] = '\0';
        if (!strchr(buf, ':') || ip_normal(buf, host, hostlen) != 6) return -1;
        rest = close + 1;
    } else {
        const char *colon = memchr(s, ':', len);
        size_t n = colon ? (size_t)(colon - s) : len;
        if (n == 0 || n >= sizeof buf || n >= hostlen) return -1;
        for (size_t i = 0; i < n; i++) {
            if (!name_char(s[i])) return -1;
            buf[i] = (char)tolower((unsigned char)s[i]);
        }
        buf[n] = '\0';
        if (n > 1 && buf[n - 1] == '.') buf[--n] = '\0'; /* "localhost." is localhost */
        if (buf[0] == '.' || buf[n - 1] == '.') return -1;
        if (!ip_normal(buf, host, hostlen)) memcpy(host, buf, n + 1);
        rest = colon ? colon : s + len;
    }
    const char *end = s + len;
    if (rest == end) return 0;
    if (*rest != ':' || rest + 1 == end || end - rest > 6) return -1;
    int v = 0;
    for (const char *p = rest + 1; p < end; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (*p - '0');
    }
    if (v < 1 || v > 65535) return -1;
    *port = v;
    return 0;
}

int origin_parse(const char *s, char *scheme, size_t schemelen, char *host, size_t hostlen,
                 int *port) {
    const char *sep = s ? strstr(s, "://") : NULL;
    size_t n = sep ? (size_t)(sep - s) : 0;
    if (!sep || n == 0 || n >= schemelen) return -1;
    for (size_t i = 0; i < n; i++) scheme[i] = (char)tolower((unsigned char)s[i]);
    scheme[n] = '\0';
    int https = !strcmp(scheme, "https");
    if (!https && strcmp(scheme, "http")) return -1;
    const char *auth = sep + 3;
    if (origin_parse_authority(auth, strlen(auth), host, hostlen, port) < 0) return -1;
    if (*port < 0) *port = https ? 443 : 80;
    return 0;
}

/* ------------------------------------------------------------- policy */

/* Split the comma-separated list into at most ORIGIN_MAX_NAMES items (each
 * trimmed of spaces), calling add for each. Returns 0, or -1 with err. */
static int each_item(const char *list, const char *what,
                     int (*add)(origin_policy_t *, const char *, char *, size_t),
                     origin_policy_t *p, char *err, size_t errlen) {
    char item[ORIGIN_HOST_MAX + 32];
    for (const char *s = list; s && *s;) {
        const char *comma = strchr(s, ',');
        size_t n = comma ? (size_t)(comma - s) : strlen(s);
        while (n && isspace((unsigned char)*s)) s++, n--;
        while (n && isspace((unsigned char)s[n - 1])) n--;
        if (n >= sizeof item) {
            snprintf(err, errlen, "%s: an item is longer than %zu characters", what,
                     sizeof item - 1);
            return -1;
        }
        memcpy(item, s, n);
        item[n] = '\0';
        if (n && add(p, item, err, errlen) < 0) return -1;
        s = comma ? comma + 1 : s + n;
    }
    return 0;
}

static int add_host(origin_policy_t *p, const char *name, char *err, size_t errlen) {
    int port;
    if (p->n_hosts == ORIGIN_MAX_NAMES) {
        snprintf(err, errlen, "allowed-host: at most %d names", ORIGIN_MAX_NAMES);
        return -1;
    }
    if (origin_parse_authority(name, strlen(name), p->hosts[p->n_hosts], ORIGIN_HOST_MAX, &port) <
            0 ||
        port >= 0) {
        snprintf(err, errlen, "allowed-host: '%s' is not a host name (no port, no scheme)", name);
        return -1;
    }
    p->n_hosts++;
    return 0;
}

static int add_origin(origin_policy_t *p, const char *text, char *err, size_t errlen) {
    allowed_origin_t *o = &p->origins[p->n_origins];
    if (p->n_origins == ORIGIN_MAX_NAMES) {
        snprintf(err, errlen, "allowed-origin: at most %d origins", ORIGIN_MAX_NAMES);
        return -1;
    }
    if (origin_parse(text, o->scheme, sizeof o->scheme, o->host, sizeof o->host, &o->port) < 0) {
        snprintf(err, errlen,
                 "allowed-origin: '%s' is not an origin (http or https://HOST[:PORT], no path)",
                 text);
        return -1;
    }
    /* A browser leaves the scheme's default port out of its Origin. */
    int v6 = strchr(o->host, ':') != NULL, def = o->port == (strcmp(o->scheme, "https") ? 80 : 443);
    char buf[sizeof o->text], port[16] = "";
    if (!def) snprintf(port, sizeof port, ":%d", o->port);
    snprintf(buf, sizeof buf, "%s://%s%s%s%s", o->scheme, v6 ? "[" : "", o->host, v6 ? "]" : "",
             port);
    memcpy(o->text, buf, sizeof buf);
    p->n_origins++;
    return 0;
}

int origin_policy_new(const origin_opts_t *o, origin_policy_t **out, char *err, size_t errlen) {
    origin_policy_t *p = calloc(1, sizeof *p);
    *out = NULL;
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    const char *listen = o->listen_host && *o->listen_host ? o->listen_host : "127.0.0.1";
    int port;
    if (origin_parse_authority(listen, strlen(listen), p->listen, sizeof p->listen, &port) < 0 &&
        ip_normal(listen, p->listen, sizeof p->listen) == 0) {
        snprintf(err, errlen, "listen: '%s' is not a host", listen);
        goto fail;
    }
    p->wildcard = !strcmp(p->listen, "0.0.0.0") || !strcmp(p->listen, "::");
    if (p->wildcard) {
        char name[ORIGIN_HOST_MAX];
        if (gethostname(name, sizeof name) == 0) {
            name[sizeof name - 1] = '\0';
            if (origin_parse_authority(name, strlen(name), p->hostname, sizeof p->hostname, &port) <
                0)
                p->hostname[0] = '\0';
        }
    }
    if (each_item(o->allowed_hosts, "allowed-host", add_host, p, err, errlen) < 0 ||
        each_item(o->allowed_origins, "allowed-origin", add_origin, p, err, errlen) < 0)
        goto fail;
    *out = p;
    return 0;
fail:
    free(p);
    return -1;
}

void origin_policy_free(origin_policy_t *p) {
    free(p);
}

/* ------------------------------------------------------------- checks */

/* Does host (normal form) name this server? */
static int host_allowed(const origin_policy_t *p, const char *host) {
    char ip[INET6_ADDRSTRLEN];
    if (http_host_is_loopback(host)) return 1;
    if (!p->wildcard && !strcmp(host, p->listen)) return 1;
    if (p->wildcard &&
        (ip_normal(host, ip, sizeof ip) || (p->hostname[0] && !strcmp(host, p->hostname))))
        return 1;
    for (int i = 0; i < p->n_hosts; i++)
        if (!strcmp(host, p->hosts[i])) return 1;
    return 0;
}

/* The allowed origin that origin (a header's value) is, or NULL. */
static const allowed_origin_t *find_origin(const origin_policy_t *p, const char *origin) {
    char scheme[8], host[ORIGIN_HOST_MAX];
    int port;
    if (!origin || origin_parse(origin, scheme, sizeof scheme, host, sizeof host, &port) < 0)
        return NULL;
    for (int i = 0; i < p->n_origins; i++) {
        const allowed_origin_t *o = &p->origins[i];
        if (!strcmp(o->scheme, scheme) && !strcmp(o->host, host) && o->port == port) return o;
    }
    return NULL;
}

/* Is the request's Origin its own: the Host it was sent to? */
static int same_origin(const char *origin, const char *host_header) {
    char scheme[8], oh[ORIGIN_HOST_MAX], hh[ORIGIN_HOST_MAX];
    int op, hp;
    if (!host_header || origin_parse(origin, scheme, sizeof scheme, oh, sizeof oh, &op) < 0 ||
        origin_parse_authority(host_header, strlen(host_header), hh, sizeof hh, &hp) < 0)
        return 0;
    if (hp < 0) hp = strcmp(scheme, "https") ? 80 : 443;
    return !strcmp(oh, hh) && op == hp;
}

/* Whether content_type's media type is application/json (parameters such as
 * "; charset=utf-8" may follow). */
static int is_json(const char *content_type) {
    static const char json[] = "application/json";
    const char *s = content_type;
    if (!s) return 0;
    while (*s == ' ' || *s == '\t') s++;
    if (strncasecmp(s, json, sizeof json - 1)) return 0;
    s += sizeof json - 1;
    while (*s == ' ' || *s == '\t') s++;
    return *s == '\0' || *s == ';';
}

/* A quoted copy of a header for a message: at most 80 printable bytes. */
static const char *quoted(const char *v, char *buf, size_t len) {
    size_t o = 0;
    for (const char *s = v; *s && o + 4 < len && s - v < 80; s++)
        buf[o++] = isprint((unsigned char)*s) ? *s : '?';
    buf[o] = '\0';
    return buf;
}

int origin_check(const origin_policy_t *p, const http_request_t *req, http_response_t *res) {
    char host[ORIGIN_HOST_MAX], q[96];
    int port;
    if (!p) return 0;
    if (req->host) {
        if (origin_parse_authority(req->host, strlen(req->host), host, sizeof host, &port) < 0) {
            http_error(res, 400, "bad_request", "Host '%s' is not a host",
                       quoted(req->host, q, sizeof q));
            return 400;
        }
        if (!host_allowed(p, host)) {
            http_error(res, 421, "misdirected_request",
                       "Host '%s' is not a name this server answers to (loopback names and "
                       "addresses, the --listen address, or one given with --allowed-host)",
                       quoted(req->host, q, sizeof q));
            return 421;
        }
    }
    if (req->origin && !find_origin(p, req->origin) && !same_origin(req->origin, req->host)) {
        http_error(res, 403, "forbidden_origin",
                   "requests from the page at '%s' are refused (only this server's own pages, "
                   "or an origin given with --allowed-origin)",
                   quoted(req->origin, q, sizeof q));
        return 403;
    }
    const char *m = req->method;
    if (strcmp(m, "GET") && strcmp(m, "HEAD") && strcmp(m, "OPTIONS") &&
        !is_json(req->content_type)) {
        http_error(res, 415, "unsupported_media_type",
                   "%s needs Content-Type: application/json, not %s", m,
                   req->content_type ? quoted(req->content_type, q, sizeof q) : "none");
        return 415;
    }
    return 0;
}

int origin_costly_check(const http_request_t *req, http_response_t *res) {
    const char *site = req->fetch_site;
    if (!site || !strcasecmp(site, "same-origin") || !strcasecmp(site, "none")) return 0;
    if (req->origin) return 0; /* a CORS request, which origin_check let through */
    if (req->fetch_mode && !strcasecmp(req->fetch_mode, "navigate") && req->fetch_dest &&
        !strcasecmp(req->fetch_dest, "document"))
        return 0;
    http_error(res, 403, "cross_site",
               "%s costs the daemon work and is not answered to another site's page "
               "(Sec-Fetch-Site: %.20s); open it from the daemon's own page or by its address",
               req->path, site);
    return 403;
}

int origin_cors(const origin_policy_t *p, const http_request_t *req, http_response_t *res) {
    const allowed_origin_t *o = p ? find_origin(p, req->origin) : NULL;
    if (!o) return 0;
    size_t n = strlen(res->headers);
    snprintf(res->headers + n, sizeof res->headers - n,
             "Access-Control-Allow-Origin: %s\r\nVary: Origin\r\n", o->text);
    if (strcmp(req->method, "OPTIONS")) return 0;
    n = strlen(res->headers);
    snprintf(res->headers + n, sizeof res->headers - n,
             "Access-Control-Allow-Methods: GET, POST\r\n"
             "Access-Control-Allow-Headers: Authorization, Content-Type, Last-Event-ID, "
             "X-Nightshift-Source\r\n"
             "Access-Control-Max-Age: 600\r\n");
    free(res->body);
    res->body = NULL;
    res->body_len = 0;
    res->status = 204;
    res->content_type = "text/plain";
    return 1;
}
