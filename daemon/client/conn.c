/* conn.c - one daemon over HTTP for the client commands (see conn.h). */
#include "daemon/client/conn.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/client/client.h"
#include "daemon/client/cmd.h"
#include "daemon/client/fmt.h"
#include "daemon/shared/bytebuf.h"
#include "daemon/shared/http.h"
#include "daemon/shared/origin.h"
#include "engine/util.h"

#define CONNECT_TIMEOUT_MS 5000L
#define TOTAL_TIMEOUT_MS   30000L
#define MAX_TOKEN_BYTES    4096
#define CONN_OFFLINE       (-2) /* reply_code: no daemon; the database may answer */

static conn_offline_fn offline_fn;

void conn_set_offline(conn_offline_fn fn) {
    offline_fn = fn;
}

void conn_reply_free(conn_reply_t *r) {
    bytebuf_free(&r->body);
    memset(r, 0, sizeof *r);
}

static size_t write_cb(char *data, size_t size, size_t nmemb, void *arg) {
    conn_reply_t *r = arg;
    size_t add = size * nmemb;
    /* Past the cap or out of memory, curl ends the transfer with
     * CURLE_WRITE_ERROR; body.err says which. */
    return bytebuf_append(&r->body, data, add) == 0 ? add : 0;
}

static int progress_cb(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow) {
    const conn_t *c = arg;
    return c->stop && *c->stop;
}

void conn_close(conn_t *c) {
    if (!c->inited) return;
    if (c->curl) curl_easy_cleanup(c->curl);
    curl_slist_free_all(c->get_h);
    curl_slist_free_all(c->post_h);
    free(c->base);
    curl_global_cleanup();
    memset(c, 0, sizeof *c);
}

/* Is url's host a loopback name or address ("http://127.0.0.1:8080/...")? */
static int url_is_loopback(const char *url) {
    char host[ORIGIN_HOST_MAX];
    int port;
    const char *a = strstr(url, "://");
    if (!a) return 0;
    a += 3;
    return origin_parse_authority(a, strcspn(a, "/?#"), host, sizeof host, &port) == 0 &&
           http_host_is_loopback(host);
}

/* The token file a daemon on this machine keeps in its state directory
 * (scripts/run.sh writes DIR/token, mode 0600): $NIGHTSHIFT_DIR/token, by
 * default state/token as `serve` defaults to --dir state. NULL when there is
 * none. The path is in buf. */
static const char *state_dir(void) {
    const char *dir = getenv("NIGHTSHIFT_DIR");
    return dir && *dir ? dir : "state";
}

static const char *state_token_file(char *buf, size_t len) {
    snprintf(buf, len, "%s/token", state_dir());
    return access(buf, R_OK) == 0 ? buf : NULL;
}

/* The token from --token, --token-file or $NIGHTSHIFT_TOKEN into buf ("" for
 * none); for a daemon on loopback, else from its state directory's token
 * file when there is one. Returns 0 or an exit code after printing why. */
static int resolve_token(const conn_opts_t *o, const cmd_help_t *h, const char *url, char *buf,
                         size_t len) {
    char err[512], state_file[4096], *text = NULL;
    size_t n = 0;
    buf[0] = '\0';
    if (o->token && o->token_file)
        return cmd_usage_error(h, "give --token or --token-file, not both");
    const char *file = o->token_file;
    if (!file && !o->token && !getenv("NIGHTSHIFT_TOKEN") && url_is_loopback(url))
        file = state_token_file(state_file, sizeof state_file);
    if (file) {
        if (cmd_read_input(file, MAX_TOKEN_BYTES, &text, &n, err, sizeof err) < 0) {
            fprintf(stderr, "nightshift %s: token file %s\n", h->name, err);
            return CLIENT_EXIT_USAGE;
        }
        while (n && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == ' ' ||
                     text[n - 1] == '\t'))
            text[--n] = '\0';
        snprintf(buf, len, "%s", text);
        free(text);
    } else {
        const char *t = o->token ? o->token : getenv("NIGHTSHIFT_TOKEN");
        if (t && strlen(t) >= len) {
            fprintf(stderr, "nightshift %s: the token is longer than %zu bytes\n", h->name,
                    len - 1);
            return CLIENT_EXIT_USAGE;
        }
        snprintf(buf, len, "%s", t ? t : "");
    }
    for (const char *p = buf; *p; p++)
        if (*p <= ' ' || *p > '~') {
            fprintf(stderr, "nightshift %s: the token must be printable ASCII without spaces\n",
                    h->name);
            return CLIENT_EXIT_USAGE;
        }
    return 0;
}

/* Append a header line to the POST list and, unless post_only, to the GET
 * list (curl copies it). Returns 0, or -1 when out of memory. */
static int add_header(conn_t *c, const char *line, int post_only) {
    struct curl_slist *l;
    if (!post_only) {
        if (!(l = curl_slist_append(c->get_h, line))) return -1;
        c->get_h = l;
    }
    if (!(l = curl_slist_append(c->post_h, line))) return -1;
    c->post_h = l;
    return 0;
}

/* The token file in the state directory a daemon on loopback names in
 * GET /v1/status (where reads are open), as an Authorization header. The
 * file is read only when it is DIR/token, a regular file of this user's
 * that nobody else may read (as run.sh writes it): a process posing as the
 * daemon cannot have another file sent to it. Returns 0 (no token found is
 * no error: the daemon may have none) or an exit code. */
static int daemon_token(conn_t *c, const cmd_help_t *h) {
    char path[4096], hdr[MAX_TOKEN_BYTES + 64], err[256], *text = NULL;
    size_t n = 0;
    int quiet = c->quiet, keep = c->keep_errors;
    c->quiet = c->keep_errors = 1;
    cJSON *st = NULL;
    int rc = conn_json(c, "GET", "/v1/status", NULL, 0, &st);
    c->quiet = quiet;
    c->keep_errors = keep;
    c->said[0] = '\0';
    c->http_status = 0;
    const char *dir = cJSON_GetStringValue(cJSON_GetObjectItem(st, "state_dir"));
    struct stat sb;
    int ok = rc == 0 && dir && dir[0] == '/' &&
             (size_t)snprintf(path, sizeof path, "%s/token", dir) < sizeof path &&
             lstat(path, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == getuid() &&
             !(sb.st_mode & 077) &&
             cmd_read_input(path, MAX_TOKEN_BYTES, &text, &n, err, sizeof err) == 0;
    cJSON_Delete(st);
    if (!ok) return 0;
    while (n && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == ' '))
        text[--n] = '\0';
    int printable = n > 0;
    for (const char *p = text; *p; p++) printable &= *p > ' ' && *p <= '~';
    if (printable) snprintf(hdr, sizeof hdr, "Authorization: Bearer %s", text);
    free(text);
    if (!printable) return 0;
    if (add_header(c, hdr, 0) < 0) {
        fprintf(stderr, "nightshift %s: out of memory\n", h->name);
        return CLIENT_EXIT_API;
    }
    c->has_token = 1;
    return 0;
}

int conn_open(conn_t *c, const conn_opts_t *o, const cmd_help_t *h) {
    char token[MAX_TOKEN_BYTES + 1], hdr[MAX_TOKEN_BYTES + 64], noproxy[1024], port_url[64];
    const char *url = o->url;
    const char *source = c->source; /* the settings made before */
    int offline_ok = c->offline_ok, find_token = c->find_token;
    memset(c, 0, sizeof *c);
    c->source = source;
    c->offline_ok = offline_ok;
    c->find_token = find_token;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "nightshift %s: cannot initialise libcurl\n", h->name);
        return CLIENT_EXIT_API;
    }
    c->inited = 1;
    if (!url || !*url) url = getenv("NIGHTSHIFT_URL");
    if (!url || !*url) { /* the port run.sh and serve were given, on loopback */
        const char *port = getenv("NIGHTSHIFT_PORT");
        if (port && cmd_positive(port) > 0 && cmd_positive(port) < 65536) {
            snprintf(port_url, sizeof port_url, "http://127.0.0.1:%s", port);
            url = port_url;
        }
    }
    if (!url || !*url) url = DEFAULT_URL;
    if (strncasecmp(url, "http://", 7) && strncasecmp(url, "https://", 8))
        return cmd_usage_error(h, "--url: expected http://HOST:PORT or https://..., got '%s'", url);
    for (const char *p = url; *p; p++)
        if (*p <= ' ' || *p == 0x7f)
            return cmd_usage_error(h, "--url: contains a space or control");
    int rc = resolve_token(o, h, url, token, sizeof token);
    if (rc) return rc;
    if (!(c->base = strdup(url))) goto oom;
    for (size_t n = strlen(c->base); n > 8 && c->base[n - 1] == '/';) c->base[--n] = '\0';

    /* Headers: the source of the submission, the token, and no
     * "Expect: 100-continue" round trip for larger bodies. */
    snprintf(hdr, sizeof hdr, "X-Nightshift-Source: %s", c->source ? c->source : "cli");
    if (add_header(c, hdr, 0) < 0 || add_header(c, "Expect:", 0) < 0 ||
        add_header(c, "Accept: application/json", 0) < 0 ||
        add_header(c, "Content-Type: application/json", 1) < 0)
        goto oom;
    if (token[0]) {
        snprintf(hdr, sizeof hdr, "Authorization: Bearer %s", token);
        if (add_header(c, hdr, 0) < 0) goto oom;
        c->has_token = 1;
    }

    /* A daemon on loopback is never reached through a proxy; the user's
     * no_proxy list still applies to the rest. */
    const char *np = getenv("no_proxy");
    if (!np || !*np) np = getenv("NO_PROXY");
    snprintf(noproxy, sizeof noproxy, "localhost,127.0.0.1,::1%s%s", np && *np ? "," : "",
             np && *np ? np : "");

    if (!(c->curl = curl_easy_init())) goto oom;
    CURL *k = c->curl;
    curl_easy_setopt(k, CURLOPT_ERRORBUFFER, c->errbuf);
    curl_easy_setopt(k, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(k, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(k, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
    curl_easy_setopt(k, CURLOPT_TIMEOUT_MS, TOTAL_TIMEOUT_MS);
    curl_easy_setopt(k, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)MAX_REPLY_BYTES);
    curl_easy_setopt(k, CURLOPT_NOPROXY, noproxy);
    curl_easy_setopt(k, CURLOPT_USERAGENT, "nightshift-cli");
    curl_easy_setopt(k, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(k, CURLOPT_XFERINFOFUNCTION, progress_cb);
    curl_easy_setopt(k, CURLOPT_XFERINFODATA, c);
    curl_easy_setopt(k, CURLOPT_NOPROGRESS, 0L);
    if (c->find_token && !token[0] && !o->token && !o->token_file && !getenv("NIGHTSHIFT_TOKEN") &&
        url_is_loopback(url))
        return daemon_token(c, h);
    return 0;
oom:
    fprintf(stderr, "nightshift %s: out of memory\n", h->name);
    return CLIENT_EXIT_API;
}

/* The daemon's error envelope {"error":{"code","message"}} on errf, or the
 * bare HTTP status when the body is not one. */
static void print_api_error(FILE *errf, const conn_t *c, const char *method, const char *path,
                            const conn_reply_t *r) {
    cJSON *j = cJSON_ParseWithLength(r->body.data, r->body.len);
    const char *code = jstr(j, "error.code"), *msg = jstr(j, "error.message");
    if (code && msg) {
        fputs("nightshift: ", errf);
        fmt_put_clean(errf, code);
        fputs(": ", errf);
        fmt_put_clean(errf, msg);
        if (r->status == 401 && !c->has_token)
            fputs(" (give --token, --token-file or set NIGHTSHIFT_TOKEN)", errf);
        fputc('\n', errf);
    } else {
        fprintf(errf, "nightshift: HTTP %ld from %s %s%s", r->status, method, c->base, path);
        if (r->body.len) {
            char first[200];
            size_t n = strcspn(r->body.data, "\r\n");
            snprintf(first, sizeof first, "%.*s", (int)(n < sizeof first ? n : sizeof first - 1),
                     r->body.data);
            fputs(": ", errf);
            fmt_put_clean(errf, first);
        }
        fputc('\n', errf);
    }
    cJSON_Delete(j);
}

/* "cannot reach the daemon at URL: why", and how to start it. */
static void unreachable(FILE *errf, const conn_t *c, const char *detail) {
    fprintf(errf, "nightshift: cannot reach the %s at %s: %s\n", c->agent ? "agent" : "daemon",
            c->base, detail);
    if (c->agent)
        fprintf(errf, "  is it running? `make run` starts it with the daemon; alone: nightshift "
                      "agent --listen 127.0.0.1:PORT --secret-file FILE --baseline SPEC.json\n");
    else
        fprintf(errf, "  is it running? `make run` starts it (and the agent); alone: nightshift "
                      "serve --dir state --listen 127.0.0.1:PORT; elsewhere: --url URL or "
                      "NIGHTSHIFT_URL\n");
}

/* No daemon answered: CONN_OFFLINE when the state directory's database may
 * answer instead (a reading command, a GET, a daemon meant on loopback, the
 * database there), else the reason said and CLIENT_EXIT_UNREACHABLE. */
static int no_daemon(FILE *errf, const conn_t *c, const char *method, const char *detail) {
    char db[4096];
    snprintf(db, sizeof db, "%s/nightshift.db", state_dir());
    if (c->offline_ok && offline_fn && !c->agent && !strcmp(method, "GET") &&
        url_is_loopback(c->base) && access(db, R_OK) == 0)
        return CONN_OFFLINE;
    unreachable(errf, c, detail);
    return CLIENT_EXIT_UNREACHABLE;
}

/* GET path answered from the state directory's database (offline_fn): as
 * reply_code, saying once that the answer comes from there. */
static int offline_reply(conn_t *c, const char *path, conn_reply_t *r, FILE *errf) {
    char err[512], *body = NULL;
    size_t len = 0;
    if (offline_fn(state_dir(), path, &r->status, &body, &len, err, sizeof err) < 0) {
        unreachable(errf, c, c->errbuf[0] ? c->errbuf : "no connection");
        fprintf(errf, "  and its state directory cannot answer: ");
        fmt_put_clean(errf, err);
        fputc('\n', errf);
        return CLIENT_EXIT_UNREACHABLE;
    }
    if (!c->offline)
        fprintf(errf,
                "nightshift: answering from %s/nightshift.db because no daemon answers at %s\n",
                state_dir(), c->base);
    c->offline = 1;
    int rc = bytebuf_append(&r->body, body, len);
    free(body);
    if (rc < 0) {
        fprintf(errf, "nightshift: the answer to GET %s is larger than %zu MiB\n", path,
                MAX_REPLY_BYTES >> 20);
        return CLIENT_EXIT_API;
    }
    c->http_status = r->status;
    if (r->status >= 200 && r->status < 300) return 0;
    if (c->keep_errors) return CLIENT_EXIT_API;
    print_api_error(errf, c, "GET", path, r);
    return CLIENT_EXIT_API;
}

/* What the transfer's outcome cr means: 0 for a 2xx reply, else the exit
 * code, the reason said on errf. */
static int reply_code(conn_t *c, CURLcode cr, const char *method, const char *path, conn_reply_t *r,
                      FILE *errf) {
    const char *detail = c->errbuf[0] ? c->errbuf : curl_easy_strerror(cr);
    curl_off_t connect_us = 0;
    curl_easy_getinfo(c->curl, CURLINFO_CONNECT_TIME_T, &connect_us);
    c->http_status = 0;
    switch (cr) {
    case CURLE_OK:
        curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &r->status);
        c->http_status = r->status;
        if (r->status >= 200 && r->status < 300) return 0;
        if (c->keep_errors) return CLIENT_EXIT_API;
        print_api_error(errf, c, method, path, r);
        return CLIENT_EXIT_API;
    case CURLE_ABORTED_BY_CALLBACK:
        return CONN_STOPPED;
    case CURLE_WRITE_ERROR:
    case CURLE_FILESIZE_EXCEEDED:
        if (cr == CURLE_FILESIZE_EXCEEDED || r->body.err == NS_ERR_TOO_LARGE)
            fprintf(errf, "nightshift: the reply to %s %s is larger than %zu MiB\n", method, path,
                    MAX_REPLY_BYTES >> 20);
        else
            fprintf(errf, "nightshift: out of memory reading the reply to %s %s\n", method, path);
        return CLIENT_EXIT_API;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
        return no_daemon(errf, c, method, detail);
    case CURLE_OPERATION_TIMEDOUT:
        if (connect_us == 0) return no_daemon(errf, c, method, detail);
        fprintf(errf, "nightshift: no complete reply to %s %s within %ld s: %s\n", method, path,
                TOTAL_TIMEOUT_MS / 1000, detail);
        return CLIENT_EXIT_API;
    default:
        fprintf(errf, "nightshift: %s %s%s failed: %s\n", method, c->base, path, detail);
        return CLIENT_EXIT_API;
    }
}

int conn_request(conn_t *c, const char *method, const char *path, const char *body, size_t body_len,
                 conn_reply_t *r) {
    CURL *k = c->curl;
    int rc = CLIENT_EXIT_API;
    FILE *errf = c->quiet ? fmemopen(c->said, sizeof c->said, "w") : stderr;
    if (!errf) errf = stderr;
    char *url = malloc(strlen(c->base) + strlen(path) + 1);
    memset(r, 0, sizeof *r);
    bytebuf_init(&r->body, MAX_REPLY_BYTES);
    if (!url || bytebuf_reserve(&r->body, 0) < 0) { /* body.data is "" from here on */
        fprintf(errf, "nightshift: out of memory\n");
        goto fail;
    }
    strcpy(url, c->base);
    strcat(url, path);
    curl_easy_setopt(k, CURLOPT_URL, url);
    curl_easy_setopt(k, CURLOPT_WRITEDATA, r);
    if (!strcmp(method, "POST")) {
        curl_easy_setopt(k, CURLOPT_POST, 1L);
        curl_easy_setopt(k, CURLOPT_POSTFIELDS, body ? body : "");
        curl_easy_setopt(k, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body ? body_len : 0));
        curl_easy_setopt(k, CURLOPT_HTTPHEADER, c->post_h);
    } else {
        curl_easy_setopt(k, CURLOPT_HTTPGET, 1L);
        curl_easy_setopt(k, CURLOPT_HTTPHEADER, c->get_h);
    }
    c->errbuf[0] = '\0';
    rc = c->offline && !strcmp(method, "GET")
             ? CONN_OFFLINE
             : reply_code(c, curl_easy_perform(k), method, path, r, errf);
    if (rc == CONN_OFFLINE) rc = offline_reply(c, path, r, errf);
    if (rc == 0 || (rc == CLIENT_EXIT_API && c->keep_errors && c->http_status)) {
        if (errf != stderr) fclose(errf);
        free(url);
        return 0;
    }
fail:
    if (errf != stderr) fclose(errf);
    free(url);
    conn_reply_free(r);
    return rc;
}

int conn_json(conn_t *c, const char *method, const char *path, const char *body, size_t body_len,
              cJSON **out) {
    conn_reply_t r;
    *out = NULL;
    int rc = conn_request(c, method, path, body, body_len, &r);
    if (rc) return rc;
    *out = cJSON_ParseWithLength(r.body.data, r.body.len);
    conn_reply_free(&r);
    if (!*out) {
        fprintf(stderr, "nightshift: the reply to %s %s is not JSON\n", method, path);
        return CLIENT_EXIT_API;
    }
    return 0;
}

int conn_get_raw(conn_t *c, const char *path, int raw, cJSON **out) {
    conn_reply_t r;
    *out = NULL;
    if (!raw) return conn_json(c, "GET", path, NULL, 0, out);
    int rc = conn_request(c, "GET", path, NULL, 0, &r);
    if (rc) return rc;
    fwrite(r.body.data, 1, r.body.len, stdout);
    if (!r.body.len || r.body.data[r.body.len - 1] != '\n') fputc('\n', stdout);
    conn_reply_free(&r);
    return 0;
}

void conn_unexpected(const char *what) {
    fprintf(stderr, "nightshift: unexpected reply from the daemon (%s)\n", what);
}
