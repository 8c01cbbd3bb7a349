/* client.c - the command-line client over the daemon's HTTP API (see client.h).
 *
 * One request helper (conn_open / conn_request) owns every libcurl setting:
 * the base URL, the bearer token, timeouts, the reply size cap, and the
 * mapping of failures to exit codes and messages. The commands only build a
 * path, call it, and print what came back. Text that came from the daemon
 * (names, messages, tags) is printed with control characters replaced, so a
 * spec name cannot move the cursor or recolour the terminal. */
#include "daemon/client/client.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "daemon/shared/bytebuf.h"
#include "engine/cli.h"
#include "engine/util.h"

#define DEFAULT_URL        "http://127.0.0.1:8080"
#define CONNECT_TIMEOUT_MS 5000L
#define TOTAL_TIMEOUT_MS   30000L
#define MAX_REPLY_BYTES    ((size_t)16 << 20) /* a reply larger than this is refused */
#define MAX_SPEC_BYTES     ((size_t)1 << 20)  /* the submit file; the daemon's body limit */
#define MAX_TOKEN_BYTES    4096
#define LOG_TAIL_DEFAULT   16384 /* bytes of the run's log for show --log */
#define NAME_WIDTH         32    /* characters of a name shown in tables and progress lines */
#define BAR_WIDTH          20
#define METRICS_SHOWN      5 /* last metrics rows in show */
#define MAX_DATASETS_SHOWN 8 /* datasets whose best watch and ls know */

/* ------------------------------------------------------------ text helpers */

/* A fixed line that appends with printf and truncates silently. */
typedef struct {
    char s[1024];
    size_t n;
} line_t;

static void line_add(line_t *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void line_add(line_t *l, const char *fmt, ...) {
    if (l->n + 1 >= sizeof l->s) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(l->s + l->n, sizeof l->s - l->n, fmt, ap);
    va_end(ap);
    if (k > 0) l->n = l->n + (size_t)k < sizeof l->s ? l->n + (size_t)k : sizeof l->s - 1;
}

/* Copy s into dst (NUL-terminated) with C0/C1 control characters and DEL
 * replaced by '?', keeping at most max_chars characters (UTF-8 sequences are
 * kept whole); "..." marks a cut. Returns the number of characters written. */
static size_t clean_copy(char *dst, size_t dstlen, const char *s, size_t max_chars) {
    const unsigned char *p = (const unsigned char *)s;
    size_t n = 0, chars = 0;
    if (!dstlen) return 0;
    while (*p && chars < max_chars) {
        size_t len = 1;
        if (*p >= 0xc0) /* a UTF-8 lead byte: take its continuation bytes with it */
            while ((p[len] & 0xc0) == 0x80 && len < 4) len++;
        if (n + len + 4 > dstlen) break;
        if (util_is_control(p, len, UTIL_CTRL_C1)) {
            dst[n++] = '?';
        } else {
            memcpy(dst + n, p, len);
            n += len;
        }
        p += len;
        chars++;
    }
    if (*p && n + 4 <= dstlen) {
        memcpy(dst + n, "...", 3);
        n += 3;
        chars += 3;
    }
    dst[n] = '\0';
    return chars;
}

static void line_add_clean(line_t *l, const char *s, size_t max_chars) {
    char buf[512];
    clean_copy(buf, sizeof buf, s, max_chars);
    line_add(l, "%s", buf);
}

static void put_clean(FILE *f, const char *s) {
    char buf[1024];
    clean_copy(buf, sizeof buf, s, sizeof buf);
    fputs(buf, f);
}

/* 1234567.8 -> "1,234,568" (rounded), written into buf (32 bytes is enough),
 * which is returned. */
static const char *commas(double v, char *buf, size_t len) {
    char digits[32];
    if (!isfinite(v) || fabs(v) >= 1e18) {
        snprintf(buf, len, "%g", v);
        return buf;
    }
    long long x = llround(v);
    snprintf(digits, sizeof digits, "%lld", x < 0 ? -x : x);
    size_t nd = strlen(digits), o = 0;
    if (x < 0 && o + 1 < len) buf[o++] = '-';
    for (size_t i = 0; i < nd && o + 1 < len; i++) {
        if (i && (nd - i) % 3 == 0 && o + 2 < len) buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = '\0';
    return buf;
}

/* Seconds as "44s", "2m44s" or "1h02m", written into buf, which is returned. */
static const char *duration(double s, char *buf, size_t len) {
    if (!isfinite(s) || s < 0) s = 0;
    long long t = llround(s);
    if (t < 60)
        snprintf(buf, len, "%llds", t);
    else if (t < 3600)
        snprintf(buf, len, "%lldm%02llds", t / 60, t % 60);
    else
        snprintf(buf, len, "%lldh%02lldm", t / 3600, t / 60 % 60);
    return buf;
}

/* "2026-11-29T19:37:00.123Z" -> seconds since the epoch, NAN if unparsable. */
static double iso_seconds(const char *iso) {
    struct tm tm = {0};
    double sec = 0;
    if (!iso || sscanf(iso, "%4d-%2d-%2dT%2d:%2d:%lf", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                       &tm.tm_hour, &tm.tm_min, &sec) != 6)
        return NAN;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    tm.tm_sec = (int)sec;
    time_t t = timegm(&tm);
    return t == (time_t)-1 ? NAN : (double)t + (sec - (int)sec);
}

/* An API time shown in local time, "2026-11-29 20:37:00", written into buf;
 * returns buf, or the static "-" when iso is NULL. */
static const char *local_time(const char *iso, char *buf, size_t len) {
    double t = iso_seconds(iso);
    struct tm lt;
    if (!iso) return "-";
    time_t tt = isfinite(t) ? (time_t)t : 0;
    if (isfinite(t) && localtime_r(&tt, &lt) && strftime(buf, len, "%Y-%m-%d %H:%M:%S", &lt))
        return buf;
    clean_copy(buf, len, iso, len);
    return buf;
}

/* ------------------------------------------------------------ JSON helpers */

/* o["a"]["b"] for path "a.b"; NULL when any step is missing. Borrowed. */
static const cJSON *jget(const cJSON *o, const char *path) {
    char key[64];
    while (o && *path) {
        size_t n = strcspn(path, ".");
        if (n >= sizeof key) return NULL;
        memcpy(key, path, n);
        key[n] = '\0';
        o = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
        path += n + (path[n] == '.');
    }
    return o;
}

static double jnum(const cJSON *o, const char *path, double dflt) {
    const cJSON *v = jget(o, path);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

/* The string at path, borrowed from o; NULL when missing or not a string. */
static const char *jstr(const cJSON *o, const char *path) {
    const cJSON *v = jget(o, path);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A scalar (or any value) as compact JSON text, or a string's bare text, into
 * buf. Returns 0, or -1 when the value is missing or null. */
static int jtext(const cJSON *v, char *buf, size_t len) {
    if (!v || cJSON_IsNull(v)) return -1;
    if (cJSON_IsString(v)) {
        clean_copy(buf, len, v->valuestring, len);
        return 0;
    }
    char *t = cJSON_PrintUnformatted(v);
    if (!t) return -1;
    clean_copy(buf, len, t, len);
    cJSON_free(t);
    return 0;
}

/* Print v as JSON indented by two spaces per level; arrays of scalars stay on
 * one line ("adam_betas": [0.8, 0.95]). Returns 0, or -1 when out of memory. */
static int print_json(FILE *f, const cJSON *v, int indent) {
    int obj = cJSON_IsObject(v);
    if (!obj && !cJSON_IsArray(v)) {
        char *t = cJSON_PrintUnformatted(v);
        if (!t) return -1;
        fputs(t, f);
        cJSON_free(t);
        return 0;
    }
    if (!v->child) {
        fputs(obj ? "{}" : "[]", f);
        return 0;
    }
    int flat = !obj;
    for (const cJSON *c = v->child; c; c = c->next)
        if (cJSON_IsObject(c) || cJSON_IsArray(c)) flat = 0;
    fputs(obj ? "{" : "[", f);
    for (const cJSON *c = v->child; c; c = c->next) {
        if (flat) {
            if (c != v->child) fputs(", ", f);
        } else {
            fprintf(f, "\n%*s", indent + 2, "");
        }
        if (obj) {
            cJSON *key = cJSON_CreateStringReference(c->string);
            char *t = key ? cJSON_PrintUnformatted(key) : NULL;
            cJSON_Delete(key);
            if (!t) return -1;
            fprintf(f, "%s: ", t);
            cJSON_free(t);
        }
        if (print_json(f, c, indent + 2) < 0) return -1;
        if (!flat && c->next) fputc(',', f);
    }
    if (!flat) fprintf(f, "\n%*s", indent, "");
    fputs(obj ? "}" : "]", f);
    return 0;
}

/* -------------------------------------------------------- options, usage */

typedef struct {
    const char *name;     /* the subcommand, "submit" */
    const char *synopsis; /* its arguments, "FILE|- [--force]" */
    const char *details;  /* what it does and its own options, one per line */
} help_t;

typedef struct {
    const char *url, *token, *token_file; /* borrowed from argv; NULL = not given */
    int help;
} conn_opts_t;

static void print_usage(FILE *f, const help_t *h) {
    fprintf(f,
            "usage: nightshift %s %s [--url URL] [--token T | --token-file F]\n\n%s\n"
            "common options:\n"
            "  --url URL         the daemon (default $NIGHTSHIFT_URL, else port\n"
            "                    $NIGHTSHIFT_PORT on 127.0.0.1, else " DEFAULT_URL ")\n"
            "  --token T         bearer token for the daemon (default $NIGHTSHIFT_TOKEN)\n"
            "  --token-file F    read the token from the file F\n"
            "  --help            this text\n\n"
            "exit status: 0 ok, 1 the daemon answered with an error, 2 usage,\n"
            "3 the daemon cannot be reached\n",
            h->name, h->synopsis, h->details);
}

static int usage_error(const help_t *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int usage_error(const help_t *h, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "nightshift %s: ", h->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nusage: nightshift %s %s [--url URL] [--token T | --token-file F]\n", h->name,
            h->synopsis);
    return CLIENT_EXIT_USAGE;
}

/* argv[*i] is "NAME VALUE" or "NAME=VALUE": 1 with *val set (advancing *i past
 * a separate value), -1 when the value is missing, 0 for any other argument. */
static int opt_value(int argc, char **argv, int *i, const char *name, const char **val) {
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0) return 0;
    if (argv[*i][n] == '=') {
        *val = argv[*i] + n + 1;
        return 1;
    }
    if (argv[*i][n]) return 0;
    if (*i + 1 >= argc) return -1;
    *val = argv[++*i];
    return 1;
}

/* The options every command takes: 1 if argv[*i] was one (consumed), 0 if
 * not, -1 when its value is missing. */
static int common_option(int argc, char **argv, int *i, conn_opts_t *o) {
    int r;
    if (!strcmp(argv[*i], "--help") || !strcmp(argv[*i], "-h")) {
        o->help = 1;
        return 1;
    }
    if ((r = opt_value(argc, argv, i, "--url", &o->url)) != 0) return r;
    if ((r = opt_value(argc, argv, i, "--token", &o->token)) != 0) return r;
    return opt_value(argc, argv, i, "--token-file", &o->token_file);
}

/* One option of a command besides the common ones: with value set it takes
 * a value ("--limit N" or "--limit=N"), stored there; with flag set it is a
 * flag ("--json"), and *flag becomes 1. A list of them ends with {0}. */
typedef struct {
    const char *name;
    const char **value;
    int *flag;
} opt_t;

/* The arguments of a command that are not options. */
typedef struct {
    const char **v;       /* they go here, at most max of them */
    int max;              /* 0: none is accepted ("unexpected argument") */
    const char *too_many; /* the usage message past max */
    int dash;             /* a lone "-" is one (stdin), not an option */
    int n;                /* how many were given */
} args_t;

/* Parse a command's argv[1..]: the common options into o, the command's own
 * opts (may be NULL), and the other arguments into args (NULL when it takes
 * none). Returns 1 when the command should run (*rc 0), or 0 with *rc its
 * exit code: --help was given (0, the usage printed), or a usage error
 * (printed). */
static int parse_args(int argc, char **argv, const help_t *h, conn_opts_t *o, const opt_t *opts,
                      args_t *args, int *rc) {
    for (int i = 1; i < argc; i++) {
        int r = common_option(argc, argv, &i, o);
        for (const opt_t *op = opts; r == 0 && op && op->name; op++) {
            if (op->value)
                r = opt_value(argc, argv, &i, op->name, op->value);
            else if (!strcmp(argv[i], op->name))
                r = *op->flag = 1;
        }
        if (r < 0) {
            *rc = usage_error(h, "%s needs a value", argv[i]);
            return 0;
        }
        if (r) continue;
        if (argv[i][0] == '-' && !(args && args->dash && !argv[i][1])) {
            *rc = usage_error(h, "unknown option %s", argv[i]);
            return 0;
        }
        if (!args || args->max == 0) {
            *rc = usage_error(h, "unexpected argument '%s'", argv[i]);
            return 0;
        }
        if (args->n == args->max) {
            *rc = usage_error(h, "%s", args->too_many);
            return 0;
        }
        args->v[args->n++] = argv[i];
    }
    *rc = 0;
    if (o->help) {
        print_usage(stdout, h);
        return 0;
    }
    return 1;
}

/* A positive integer argument (an experiment id, a limit); -1 if it is not. */
static long long parse_positive(const char *s) {
    char *end;
    errno = 0;
    long long v = s && *s >= '0' && *s <= '9' ? strtoll(s, &end, 10) : 0;
    return v > 0 && !errno && !*end ? v : -1;
}

/* Read all of path ("-" = stdin), at most max bytes, into *out (malloc'd,
 * NUL-terminated, owned by the caller). Returns 0, or -1 with err set. */
static int read_input(const char *path, size_t max, char **out, size_t *len, char *err,
                      size_t errlen) {
    int is_stdin = !strcmp(path, "-");
    const char *shown = is_stdin ? "stdin" : path;
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    char chunk[4096];
    size_t got;
    bytebuf_t b;
    bytebuf_init(&b, max);
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
        int rc = bytebuf_append(&b, chunk, got);
        if (rc == NS_ERR_TOO_LARGE) {
            snprintf(err, errlen, "%s: larger than %zu bytes", shown, max);
            goto fail;
        }
        if (rc < 0) {
            snprintf(err, errlen, "%s: out of memory", shown);
            goto fail;
        }
    }
    if (ferror(f)) {
        snprintf(err, errlen, "%s: %s", shown, strerror(errno));
        goto fail;
    }
    if (!(*out = bytebuf_take(&b, len))) {
        snprintf(err, errlen, "%s: out of memory", shown);
        goto fail;
    }
    if (!is_stdin) fclose(f);
    return 0;
fail:
    if (!is_stdin) fclose(f);
    bytebuf_free(&b);
    return -1;
}

/* ------------------------------------------------------------ the request */

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
} conn_t;

/* A reply: its status and body (capped at MAX_REPLY_BYTES; body.data is
 * never NULL once conn_request started), freed with reply_free. */
typedef struct {
    long status;
    bytebuf_t body;
} reply_t;

#define CONN_STOPPED (-1) /* conn_request: the transfer was aborted through conn_t.stop */

static void reply_free(reply_t *r) {
    bytebuf_free(&r->body);
    memset(r, 0, sizeof *r);
}

static size_t write_cb(char *data, size_t size, size_t nmemb, void *arg) {
    reply_t *r = arg;
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

/* Release what conn_open set up; a no-op on a zeroed conn_t. */
static void conn_close(conn_t *c) {
    if (!c->inited) return;
    if (c->curl) curl_easy_cleanup(c->curl);
    curl_slist_free_all(c->get_h);
    curl_slist_free_all(c->post_h);
    free(c->base);
    curl_global_cleanup();
    memset(c, 0, sizeof *c);
}

/* The token from --token, --token-file or $NIGHTSHIFT_TOKEN into buf ("" for
 * none). Returns 0 or an exit code after printing why. */
static int resolve_token(const conn_opts_t *o, const help_t *h, char *buf, size_t len) {
    char err[512], *text = NULL;
    size_t n = 0;
    buf[0] = '\0';
    if (o->token && o->token_file) return usage_error(h, "give --token or --token-file, not both");
    if (o->token_file) {
        if (read_input(o->token_file, MAX_TOKEN_BYTES, &text, &n, err, sizeof err) < 0) {
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

/* Set up c for the daemon named by o. Returns 0, or an exit code after
 * printing why (2 for a bad URL or token). conn_close releases c either way. */
static int conn_open(conn_t *c, const conn_opts_t *o, const help_t *h) {
    char token[MAX_TOKEN_BYTES + 1], hdr[MAX_TOKEN_BYTES + 64], noproxy[1024], port_url[64];
    const char *url = o->url;
    memset(c, 0, sizeof *c);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "nightshift %s: cannot initialise libcurl\n", h->name);
        return CLIENT_EXIT_API;
    }
    c->inited = 1;
    int rc = resolve_token(o, h, token, sizeof token);
    if (rc) return rc;
    if (!url || !*url) url = getenv("NIGHTSHIFT_URL");
    if (!url || !*url) { /* the port run.sh and serve were given, on loopback */
        const char *port = getenv("NIGHTSHIFT_PORT");
        if (port && parse_positive(port) > 0 && parse_positive(port) < 65536) {
            snprintf(port_url, sizeof port_url, "http://127.0.0.1:%s", port);
            url = port_url;
        }
    }
    if (!url || !*url) url = DEFAULT_URL;
    if (strncasecmp(url, "http://", 7) && strncasecmp(url, "https://", 8))
        return usage_error(h, "--url: expected http://HOST:PORT or https://..., got '%s'", url);
    for (const char *p = url; *p; p++)
        if (*p <= ' ' || *p == 0x7f) return usage_error(h, "--url: contains a space or control");
    if (!(c->base = strdup(url))) goto oom;
    for (size_t n = strlen(c->base); n > 8 && c->base[n - 1] == '/';) c->base[--n] = '\0';

    /* Headers: the source of the submission, the token, and no
     * "Expect: 100-continue" round trip for larger bodies. */
    if (add_header(c, "X-Nightshift-Source: cli", 0) < 0 || add_header(c, "Expect:", 0) < 0 ||
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
    return 0;
oom:
    fprintf(stderr, "nightshift %s: out of memory\n", h->name);
    return CLIENT_EXIT_API;
}

/* The daemon's error envelope {"error":{"code","message"}} on errf, or the
 * bare HTTP status when the body is not one. */
static void print_api_error(FILE *errf, const conn_t *c, const char *method, const char *path,
                            const reply_t *r) {
    cJSON *j = cJSON_ParseWithLength(r->body.data, r->body.len);
    const char *code = jstr(j, "error.code"), *msg = jstr(j, "error.message");
    if (code && msg) {
        fputs("nightshift: ", errf);
        put_clean(errf, code);
        fputs(": ", errf);
        put_clean(errf, msg);
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
            put_clean(errf, first);
        }
        fputc('\n', errf);
    }
    cJSON_Delete(j);
}

/* Send one request: method "GET" or "POST", path (with its query) under the
 * base URL, body (POST only, may be NULL). On a 2xx reply returns 0 with *r
 * filled (release with reply_free). Otherwise prints the error and returns
 * CLIENT_EXIT_API (an HTTP error, a broken or oversized reply) or
 * CLIENT_EXIT_UNREACHABLE (no connection), or CONN_STOPPED without a word
 * when c->stop aborted the transfer; *r is then empty. */
static int conn_request(conn_t *c, const char *method, const char *path, const char *body,
                        size_t body_len, reply_t *r) {
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
    CURLcode cr = curl_easy_perform(k);
    c->http_status = 0;
    const char *detail = c->errbuf[0] ? c->errbuf : curl_easy_strerror(cr);
    curl_off_t connect_us = 0;
    curl_easy_getinfo(k, CURLINFO_CONNECT_TIME_T, &connect_us);
    switch (cr) {
    case CURLE_OK:
        curl_easy_getinfo(k, CURLINFO_RESPONSE_CODE, &r->status);
        c->http_status = r->status;
        if (r->status >= 200 && r->status < 300) {
            if (errf != stderr) fclose(errf);
            free(url);
            return 0;
        }
        print_api_error(errf, c, method, path, r);
        goto fail;
    case CURLE_ABORTED_BY_CALLBACK:
        rc = CONN_STOPPED;
        goto fail;
    case CURLE_WRITE_ERROR:
    case CURLE_FILESIZE_EXCEEDED:
        if (cr == CURLE_FILESIZE_EXCEEDED || r->body.err == NS_ERR_TOO_LARGE)
            fprintf(errf, "nightshift: the reply to %s %s is larger than %zu MiB\n", method, path,
                    MAX_REPLY_BYTES >> 20);
        else
            fprintf(errf, "nightshift: out of memory reading the reply to %s %s\n", method, path);
        goto fail;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
        rc = CLIENT_EXIT_UNREACHABLE;
        fprintf(errf, "nightshift: cannot reach the daemon at %s: %s\n", c->base, detail);
        goto fail;
    case CURLE_OPERATION_TIMEDOUT:
        if (connect_us == 0) {
            rc = CLIENT_EXIT_UNREACHABLE;
            fprintf(errf, "nightshift: cannot reach the daemon at %s: %s\n", c->base, detail);
        } else {
            fprintf(errf, "nightshift: no complete reply to %s %s within %ld s: %s\n", method, path,
                    TOTAL_TIMEOUT_MS / 1000, detail);
        }
        goto fail;
    default:
        fprintf(errf, "nightshift: %s %s%s failed: %s\n", method, c->base, path, detail);
        goto fail;
    }
fail:
    if (errf != stderr) fclose(errf);
    free(url);
    reply_free(r);
    return rc;
}

/* conn_request, then the body parsed as JSON into *out (owned by the caller,
 * cJSON_Delete). Same return values. */
static int conn_json(conn_t *c, const char *method, const char *path, const char *body,
                     size_t body_len, cJSON **out) {
    reply_t r;
    *out = NULL;
    int rc = conn_request(c, method, path, body, body_len, &r);
    if (rc) return rc;
    *out = cJSON_ParseWithLength(r.body.data, r.body.len);
    reply_free(&r);
    if (!*out) {
        fprintf(stderr, "nightshift: the reply to %s %s is not JSON\n", method, path);
        return CLIENT_EXIT_API;
    }
    return 0;
}

/* GET path. With raw (--json), the body goes to stdout as received and *out
 * stays NULL; otherwise as conn_json. Same return values. */
static int conn_get_raw(conn_t *c, const char *path, int raw, cJSON **out) {
    reply_t r;
    *out = NULL;
    if (!raw) return conn_json(c, "GET", path, NULL, 0, out);
    int rc = conn_request(c, "GET", path, NULL, 0, &r);
    if (rc) return rc;
    fwrite(r.body.data, 1, r.body.len, stdout);
    if (!r.body.len || r.body.data[r.body.len - 1] != '\n') fputc('\n', stdout);
    reply_free(&r);
    return 0;
}

static void unexpected(const char *what) {
    fprintf(stderr, "nightshift: unexpected reply from the daemon (%s)\n", what);
}

static void query_add(line_t *q, const char *key, const char *value);

/* ----------------------------------------------------------------- submit */

static const help_t submit_help = {
    "submit", "FILE|- [--force] [--repeats K]",
    "Queue the spec in FILE (or on stdin with -): one spec object, or an array\n"
    "of specs (at most 1 MiB). Prints one line per experiment, e.g. `5 queued`\n"
    "or `5 duplicate (already queued)`. The daemon validates the specs; an\n"
    "invalid one is reported with its field path and nothing is queued.\n\n"
    "  --force           queue even when an identical spec and seed exists\n"
    "  --repeats K       queue K runs of each spec, seeds seed .. seed + K - 1\n"
    "                    (the leaderboard shows them as one row: mean, sd, seeds)\n"};

static int print_submitted(const cJSON *item) {
    const cJSON *id = jget(item, "id"), *dup = jget(item, "duplicate");
    const char *status = jstr(item, "status");
    if (!cJSON_IsNumber(id)) {
        unexpected("a submitted experiment without an id");
        return CLIENT_EXIT_API;
    }
    printf("%" PRId64, (int64_t)id->valuedouble);
    if (cJSON_IsTrue(dup)) {
        fputs(" duplicate (already ", stdout);
        put_clean(stdout, status ? status : "known");
        fputs(")\n", stdout);
    } else {
        fputc(' ', stdout);
        put_clean(stdout, status ? status : "queued");
        fputc('\n', stdout);
    }
    return 0;
}

int submit_main(int argc, char **argv) {
    const help_t *h = &submit_help;
    conn_opts_t o = {0};
    conn_t c = {0};
    const char *file = NULL, *repeats = NULL;
    int force = 0, rc;
    char *text = NULL, err[512];
    size_t len = 0;
    cJSON *spec = NULL, *reply = NULL;

    const opt_t opts[] = {{"--repeats", .value = &repeats}, {"--force", .flag = &force}, {0}};
    args_t args = {.v = &file,
                   .max = 1,
                   .too_many = "one FILE at a time (an array of specs submits several)",
                   .dash = 1};
    if (!parse_args(argc, argv, h, &o, opts, &args, &rc)) return rc;
    if (!file) return usage_error(h, "no FILE given (- reads stdin)");
    if (repeats && parse_positive(repeats) < 0)
        return usage_error(h, "--repeats: expected a positive integer, got '%s'", repeats);
    line_t path = {"/v1/experiments", 15};
    if (force) query_add(&path, "force", "1");
    if (repeats) query_add(&path, "repeats", repeats);

    /* Read and check the JSON shape here, so a typo never costs a round trip;
     * the spec itself is validated by the daemon (one validator). */
    rc = CLIENT_EXIT_API;
    if (read_input(file, MAX_SPEC_BYTES, &text, &len, err, sizeof err) < 0) {
        fprintf(stderr, "nightshift submit: %s\n", err);
        goto fail;
    }
    const char *shown = strcmp(file, "-") ? file : "stdin";
    spec = cJSON_ParseWithLength(text, len);
    if (!spec) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = at && at >= text && at <= text + len ? (size_t)(at - text) : 0;
        size_t line = 1, col = 1;
        for (size_t i = 0; i < off; i++) {
            if (text[i] == '\n')
                line++, col = 1;
            else if ((text[i] & 0xc0) != 0x80)
                col++;
        }
        fprintf(stderr, "nightshift submit: %s:%zu:%zu: not valid JSON\n", shown, line, col);
        goto fail;
    }
    int ok = cJSON_IsObject(spec) || (cJSON_IsArray(spec) && spec->child);
    for (const cJSON *s = cJSON_IsArray(spec) ? spec->child : NULL; s; s = s->next)
        ok &= cJSON_IsObject(s);
    if (!ok) {
        fprintf(stderr, "nightshift submit: %s: expected a spec object or an array of specs\n",
                shown);
        goto fail;
    }
    if ((rc = conn_open(&c, &o, h)) != 0) goto fail;
    rc = conn_json(&c, "POST", path.s, text, len, &reply);
    if (rc) goto fail;
    if (cJSON_IsArray(spec) || cJSON_IsArray(jget(reply, "experiments"))) {
        const cJSON *items = jget(reply, "experiments");
        if (!cJSON_IsArray(items)) {
            unexpected("no experiments array");
            rc = CLIENT_EXIT_API;
            goto fail;
        }
        for (const cJSON *it = items->child; it; it = it->next)
            if ((rc = print_submitted(it)) != 0) goto fail;
    } else if ((rc = print_submitted(reply)) != 0) {
        goto fail;
    }
    rc = 0;
fail:
    cJSON_Delete(reply);
    cJSON_Delete(spec);
    free(text);
    conn_close(&c);
    return rc;
}

/* --------------------------------------------------------------------- ls */

static const help_t ls_help = {
    "ls", "[--status S] [--dataset D] [--limit N] [--order O] [--after ID] [--json]",
    "List experiments as a table: id, status, val_bpb, its verdict (`best` when\n"
    "it leads its dataset, else how far behind the best), dataset, parameters,\n"
    "the parent it varies, name and creation time (local). When more rows exist\n"
    "than --limit, the next page's --after is printed on stderr.\n\n"
    "  --status S        only this status: queued, running, succeeded, failed,\n"
    "                    crashed, timeout, oom, diverged, cancelled, interrupted,\n"
    "                    pruned\n"
    "  --dataset D       only experiments on dataset D (val_bpb compares only\n"
    "                    within one dataset and budget: see `nightshift best`)\n"
    "  --limit N         at most N rows (the daemon's default is 100, at most 1000)\n"
    "  --order O         id, -id (newest first, the default), val_bpb or created\n"
    "  --after ID        the page after the row with id ID\n"
    "  --json            the daemon's JSON as is\n"};

/* Append "?key=value" or "&key=value" to the path in q, value percent-encoded. */
static void query_add(line_t *q, const char *key, const char *value) {
    line_add(q, "%c%s=", strchr(q->s, '?') ? '&' : '?', key);
    for (const unsigned char *p = (const unsigned char *)value; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            strchr("-._~", *p))
            line_add(q, "%c", *p);
        else
            line_add(q, "%%%02X", *p);
    }
}

typedef struct {
    char id[24], status[64], bpb[32], name[NAME_WIDTH * 4 + 8], created[32];
    char verdict[48], dataset[100], params[24], parent[24];
    size_t name_chars, dataset_chars;
} ls_row_t;

static void print_padded(const char *s, size_t chars, size_t width) {
    fputs(s, stdout);
    for (size_t i = chars; i < width; i++) fputc(' ', stdout);
}

/* "38.6M", "412K", "900". */
static const char *short_count(double v, char *buf, size_t len) {
    if (v >= 1e9)
        snprintf(buf, len, "%.1fB", v / 1e9);
    else if (v >= 1e6)
        snprintf(buf, len, "%.1fM", v / 1e6);
    else if (v >= 1e4)
        snprintf(buf, len, "%.0fK", v / 1e3);
    else
        snprintf(buf, len, "%.0f", v);
    return buf;
}

/* The best succeeded experiment of a dataset (watch and ls, from the
 * leaderboard). */
typedef struct {
    char dataset[64];
    int64_t id;
    double val_bpb;
} best_t;
static int bests_from(const cJSON *board, best_t *best);
static void verdict(const cJSON *e, const best_t *best, int n, int newest, char *buf, size_t len);

static void ls_table(const cJSON *items, const cJSON *board) {
    int n = cJSON_GetArraySize(items), i = 0;
    size_t w_id = 2, w_st = 6, w_bpb = 7, w_name = 4, w_v = 7, w_ds = 7, w_p = 6, w_par = 6;
    ls_row_t *rows = calloc(n > 0 ? (size_t)n : 1, sizeof *rows);
    best_t *bests = calloc(MAX_DATASETS_SHOWN, sizeof *bests);
    if (!rows || !bests) {
        fprintf(stderr, "nightshift: out of memory\n");
        free(rows);
        free(bests);
        return;
    }
    int nbest = board ? bests_from(board, bests) : 0;
    for (const cJSON *e = items->child; e && i < n; e = e->next, i++) {
        ls_row_t *r = &rows[i];
        const cJSON *bpb = jget(e, "val_bpb"), *name = jget(e, "name");
        snprintf(r->id, sizeof r->id, "%" PRId64, (int64_t)jnum(e, "id", 0));
        clean_copy(r->status, sizeof r->status, jstr(e, "status") ? jstr(e, "status") : "?", 16);
        if (cJSON_IsNumber(bpb))
            snprintf(r->bpb, sizeof r->bpb, "%.6f", bpb->valuedouble);
        else
            snprintf(r->bpb, sizeof r->bpb, "-");
        r->name_chars = clean_copy(r->name, sizeof r->name,
                                   cJSON_IsString(name) ? name->valuestring : "-", NAME_WIDTH);
        local_time(jstr(e, "created"), r->created, sizeof r->created);
        verdict(e, bests, nbest, 0, r->verdict, sizeof r->verdict);
        if (!r->verdict[0]) snprintf(r->verdict, sizeof r->verdict, "-");
        r->dataset_chars = clean_copy(r->dataset, sizeof r->dataset,
                                      jstr(e, "dataset") ? jstr(e, "dataset") : "-", 24);
        if (cJSON_IsNumber(jget(e, "params_total")))
            short_count(jnum(e, "params_total", 0), r->params, sizeof r->params);
        else
            snprintf(r->params, sizeof r->params, "-");
        if (cJSON_IsNumber(jget(e, "parent")))
            snprintf(r->parent, sizeof r->parent, "%" PRId64, (int64_t)jnum(e, "parent", 0));
        else
            snprintf(r->parent, sizeof r->parent, "-");
        if (strlen(r->verdict) > w_v) w_v = strlen(r->verdict);
        if (r->dataset_chars > w_ds) w_ds = r->dataset_chars;
        if (strlen(r->params) > w_p) w_p = strlen(r->params);
        if (strlen(r->parent) > w_par) w_par = strlen(r->parent);
        if (strlen(r->id) > w_id) w_id = strlen(r->id);
        if (strlen(r->status) > w_st) w_st = strlen(r->status);
        if (strlen(r->bpb) > w_bpb) w_bpb = strlen(r->bpb);
        if (r->name_chars > w_name) w_name = r->name_chars;
    }
    printf("%*s  %-*s  %*s  %-*s  %-*s  %*s  %*s  %-*s  %s\n", (int)w_id, "ID", (int)w_st, "STATUS",
           (int)w_bpb, "VAL_BPB", (int)w_v, "VERDICT", (int)w_ds, "DATASET", (int)w_p, "PARAMS",
           (int)w_par, "PARENT", (int)w_name, "NAME", "CREATED");
    for (i = 0; i < n; i++) {
        printf("%*s  %-*s  %*s  %-*s  ", (int)w_id, rows[i].id, (int)w_st, rows[i].status,
               (int)w_bpb, rows[i].bpb, (int)w_v, rows[i].verdict);
        print_padded(rows[i].dataset, rows[i].dataset_chars, w_ds);
        printf("  %*s  %*s  ", (int)w_p, rows[i].params, (int)w_par, rows[i].parent);
        print_padded(rows[i].name, rows[i].name_chars, w_name);
        printf("  %s\n", rows[i].created);
    }
    free(rows);
    free(bests);
}

int ls_main(int argc, char **argv) {
    const help_t *h = &ls_help;
    conn_opts_t o = {0};
    conn_t c = {0};
    const char *status = NULL, *limit = NULL, *order = NULL, *after = NULL, *dataset = NULL;
    int json = 0, rc;
    cJSON *list = NULL;
    line_t path = {"/v1/experiments", 15};

    const opt_t opts[] = {{"--status", .value = &status},
                          {"--limit", .value = &limit},
                          {"--order", .value = &order},
                          {"--dataset", .value = &dataset},
                          {"--after", .value = &after},
                          {"--json", .flag = &json},
                          {0}};
    if (!parse_args(argc, argv, h, &o, opts, NULL, &rc)) return rc;
    if (limit && parse_positive(limit) < 0)
        return usage_error(h, "--limit: expected a positive integer, got '%s'", limit);
    if (after && parse_positive(after) < 0)
        return usage_error(h, "--after: expected an experiment id, got '%s'", after);
    if ((status && strlen(status) > 32) || (order && strlen(order) > 32))
        return usage_error(h, "--status and --order take a single word");
    if (dataset && strlen(dataset) > 63) return usage_error(h, "--dataset: at most 63 characters");
    if (status) query_add(&path, "status", status);
    if (dataset) query_add(&path, "dataset", dataset);
    if (order) query_add(&path, "order", order);
    if (limit) query_add(&path, "limit", limit);
    if (after) query_add(&path, "after", after);

    if ((rc = conn_open(&c, &o, h)) != 0) goto fail;
    if ((rc = conn_get_raw(&c, path.s, json, &list)) != 0 || json) goto fail;
    const cJSON *items = jget(list, "experiments"), *next = jget(list, "next_after");
    if (!cJSON_IsArray(items)) {
        unexpected("no experiments array");
        rc = CLIENT_EXIT_API;
        goto fail;
    }
    if (!items->child) {
        puts("no experiments");
    } else {
        /* The verdicts need the best of each dataset: best effort. */
        cJSON *board = NULL;
        c.quiet = 1;
        if (conn_json(&c, "GET", "/v1/leaderboard?limit=1000", NULL, 0, &board) != 0) board = NULL;
        ls_table(items, board);
        cJSON_Delete(board);
    }
    if (cJSON_IsNumber(next))
        fprintf(stderr, "more: nightshift ls --after %" PRId64 "\n", (int64_t)next->valuedouble);
fail:
    cJSON_Delete(list);
    conn_close(&c);
    return rc;
}

/* ------------------------------------------------------------------- show */

static const help_t show_help = {
    "show", "ID [--json] [--log [--tail BYTES]]",
    "One experiment: status and reason, times, the key spec fields, the result's\n"
    "key numbers, live progress while it runs, and the last metrics.\n\n"
    "  --json            the daemon's JSON as is (full spec, result and metrics)\n"
    "  --log             print the tail of the run's log instead\n"
    "  --tail BYTES      how much of the log (default 16384)\n"};

/* Append "key value" for each path present in o, comma-separated; the key
 * shown is the path's last component. */
static void add_fields(line_t *l, const cJSON *o, const char *const *paths) {
    char val[256];
    for (; *paths; paths++) {
        if (jtext(jget(o, *paths), val, sizeof val) < 0) continue;
        const char *dot = strrchr(*paths, '.');
        line_add(l, "%s%s %s", l->n ? ", " : "", dot ? dot + 1 : *paths, val);
    }
}

static void show_row(const char *label, const line_t *l) {
    if (l->n) printf("  %-10s %s\n", label, l->s);
}

static void show_summary(const cJSON *e) {
    static const char *const model_f[] = {"model.depth",
                                          "model.n_embd",
                                          "model.n_head",
                                          "model.n_kv_head",
                                          "model.mlp",
                                          "model.mlp_ratio",
                                          "model.seq_len",
                                          "model.pos",
                                          "model.window_pattern",
                                          "model.ve_layers",
                                          "model.ve_gate_channels",
                                          "model.tie_embeddings",
                                          NULL};
    static const char *const train_f[] = {"train.batch_size",     "train.total_batch_tokens",
                                          "train.matrix_lr",      "train.embedding_lr",
                                          "train.unembedding_lr", NULL};
    char a[64], b[64];
    line_t l = {0};
    const cJSON *spec = jget(e, "spec"), *res = jget(e, "result"), *prog = jget(e, "progress");
    const cJSON *metrics = jget(e, "metrics"), *tags = jget(e, "tags");

    printf("experiment %" PRId64, (int64_t)jnum(e, "id", 0));
    if (jstr(e, "name")) {
        fputs(" \"", stdout);
        put_clean(stdout, jstr(e, "name"));
        fputc('"', stdout);
    }
    fputc('\n', stdout);
    line_add_clean(&l, jstr(e, "status") ? jstr(e, "status") : "?", 32);
    if (jstr(e, "reason")) {
        line_add(&l, " (");
        line_add_clean(&l, jstr(e, "reason"), 400);
        line_add(&l, ")");
    }
    show_row("status", &l);
    l.n = 0;
    for (const cJSON *t = cJSON_IsArray(tags) ? tags->child : NULL; t; t = t->next)
        if (cJSON_IsString(t)) {
            line_add(&l, "%s", l.n ? ", " : "");
            line_add_clean(&l, t->valuestring, 64);
        }
    show_row("tags", &l);
    l.n = 0;
    add_fields(&l, e, (const char *const[]){"source", "priority", "attempt", "parent", NULL});
    show_row("origin", &l);
    static const char *const times[] = {"created", "started", "finished"};
    for (int i = 0; i < 3; i++) {
        if (!jstr(e, times[i])) continue;
        l.n = 0;
        line_add(&l, "%s", local_time(jstr(e, times[i]), a, sizeof a));
        double t0 = iso_seconds(jstr(e, "started")), t1 = iso_seconds(jstr(e, "finished"));
        if (i == 2 && isfinite(t0) && isfinite(t1))
            line_add(&l, " (ran %s)", duration(t1 - t0, b, sizeof b));
        show_row(times[i], &l);
    }
    l.n = 0;
    add_fields(&l, e, (const char *const[]){"pid", "exit_code", NULL});
    if (cJSON_IsNumber(jget(e, "term_signal"))) {
        int sig = (int)jnum(e, "term_signal", 0);
        line_add(&l, "%ssignal %d (%s)", l.n ? ", " : "", sig, strsignal(sig));
    }
    show_row("worker", &l);
    l.n = 0;
    /* the budget the run used: the other one is 0 (or absent) */
    add_fields(&l, spec, (const char *const[]){"dataset", NULL});
    add_fields(
        &l, spec,
        (const char *const[]){jnum(spec, "token_budget", 0) > 0 ? "token_budget" : "time_budget_s",
                              "seed", NULL});
    show_row("spec", &l);
    l.n = 0;
    add_fields(&l, spec, model_f);
    /* vocab_size 0 in a spec means the dataset's; a finished run tells which. */
    double vocab = jnum(spec, "model.vocab_size", 0), embd = jnum(spec, "model.n_embd", 0);
    if (!cJSON_IsObject(jget(spec, "model")))
        ;
    else if (vocab > 0)
        line_add(&l, "%svocab_size %.0f", l.n ? ", " : "", vocab);
    else if (cJSON_IsNumber(jget(res, "params_wte")) && embd > 0)
        line_add(&l, "%svocab_size %.0f (the dataset's)", l.n ? ", " : "",
                 jnum(res, "params_wte", 0) / embd);
    else
        line_add(&l, "%svocab_size from the dataset", l.n ? ", " : "");
    show_row("model", &l);
    l.n = 0;
    add_fields(&l, spec, train_f);
    show_row("train", &l);
    if (cJSON_IsObject(res)) {
        l.n = 0;
        if (cJSON_IsNumber(jget(res, "val_bpb")))
            line_add(&l, "val_bpb %.6f", jnum(res, "val_bpb", 0));
        if (cJSON_IsNumber(jget(res, "params_total")))
            line_add(&l, "%sparams %s", l.n ? ", " : "",
                     commas(jnum(res, "params_total", 0), a, sizeof a));
        if (cJSON_IsNumber(jget(res, "num_steps")))
            line_add(&l, "%s%s steps", l.n ? ", " : "",
                     commas(jnum(res, "num_steps", 0), a, sizeof a));
        if (cJSON_IsNumber(jget(res, "training_seconds")))
            line_add(&l, "%s%.1f s training", l.n ? ", " : "", jnum(res, "training_seconds", 0));
        if (cJSON_IsNumber(jget(res, "tokens_per_second")))
            line_add(&l, "%s%s tok/s", l.n ? ", " : "",
                     commas(jnum(res, "tokens_per_second", 0), a, sizeof a));
        if (cJSON_IsNumber(jget(res, "mfu_percent")))
            line_add(&l, "%smfu %.2f%%", l.n ? ", " : "", jnum(res, "mfu_percent", 0));
        if (cJSON_IsNumber(jget(res, "peak_rss_mb")))
            line_add(&l, "%speak rss %.0f MiB", l.n ? ", " : "", jnum(res, "peak_rss_mb", 0));
        show_row("result", &l);
    }
    if (cJSON_IsObject(prog)) {
        l.n = 0;
        if (cJSON_IsNumber(jget(prog, "step")))
            line_add(&l, "step %" PRId64, (int64_t)jnum(prog, "step", 0));
        if (cJSON_IsNumber(jget(prog, "percent")))
            line_add(&l, "%s%.1f%% of the budget", l.n ? ", " : "", jnum(prog, "percent", 0));
        if (cJSON_IsNumber(jget(prog, "loss")))
            line_add(&l, "%sloss %.3f", l.n ? ", " : "", jnum(prog, "loss", 0));
        if (cJSON_IsNumber(jget(prog, "tok_s")))
            line_add(&l, "%s%s tok/s", l.n ? ", " : "",
                     commas(jnum(prog, "tok_s", 0), a, sizeof a));
        if (cJSON_IsNumber(jget(prog, "eta_s")))
            line_add(&l, "%sETA %s", l.n ? ", " : "",
                     duration(jnum(prog, "eta_s", 0), b, sizeof b));
        show_row("progress", &l);
    }
    int n = cJSON_GetArraySize(metrics);
    if (cJSON_IsArray(metrics) && n > 0) {
        int first = n > METRICS_SHOWN ? n - METRICS_SHOWN : 0;
        printf("  %-10s last %d of %d\n", "metrics", n - first, n);
        printf("  %10s %10s %10s %10s %10s\n", "step", "time_s", "loss", "lr_mult", "tok/s");
        for (int i = first; i < n; i++) {
            const cJSON *m = cJSON_GetArrayItem(metrics, i);
            printf("  %10" PRId64 " %10.1f %10.4f %10.3f %10s\n", (int64_t)jnum(m, "step", 0),
                   jnum(m, "time_s", NAN), jnum(m, "loss", NAN), jnum(m, "lr_mult", NAN),
                   commas(jnum(m, "tok_s", NAN), a, sizeof a));
        }
    }
}

int show_main(int argc, char **argv) {
    const help_t *h = &show_help;
    conn_opts_t o = {0};
    conn_t c = {0};
    const char *id_arg = NULL, *tail = NULL;
    int json = 0, log = 0, rc;
    cJSON *e = NULL;
    reply_t r = {0};
    line_t path = {0};

    const opt_t opts[] = {
        {"--tail", .value = &tail}, {"--json", .flag = &json}, {"--log", .flag = &log}, {0}};
    args_t args = {.v = &id_arg, .max = 1, .too_many = "one ID at a time"};
    if (!parse_args(argc, argv, h, &o, opts, &args, &rc)) return rc;
    long long id = parse_positive(id_arg);
    if (!id_arg) return usage_error(h, "no experiment ID given");
    if (id < 0) return usage_error(h, "expected an experiment id, got '%s'", id_arg);
    if (tail && (!log || parse_positive(tail) < 0))
        return usage_error(h, "--tail needs --log and a positive number of bytes");
    if (json && log) return usage_error(h, "give --json or --log, not both");

    if ((rc = conn_open(&c, &o, h)) != 0) goto fail;
    line_add(&path, "/v1/experiments/%lld", id);
    if (log) {
        line_add(&path, "/log?tail=%lld",
                 tail ? parse_positive(tail) : (long long)LOG_TAIL_DEFAULT);
        if ((rc = conn_request(&c, "GET", path.s, NULL, 0, &r)) != 0) goto fail;
        fwrite(r.body.data, 1, r.body.len, stdout);
        goto fail;
    }
    if ((rc = conn_get_raw(&c, path.s, json, &e)) != 0 || json) goto fail;
    if (!cJSON_IsObject(e)) {
        unexpected("not an experiment object");
        rc = CLIENT_EXIT_API;
        goto fail;
    }
    show_summary(e);
fail:
    reply_free(&r);
    cJSON_Delete(e);
    conn_close(&c);
    return rc;
}

/* ------------------------------------------------------------------- best */

static const help_t best_help = {
    "best", "[--dataset D] [--budget B] [--json]",
    "The best configuration (lowest mean val_bpb over its seeds) on one dataset\n"
    "and budget. Its id, mean val_bpb and seeds go to stderr and its spec to\n"
    "stdout as indented JSON, ready to edit and resubmit:\n"
    "  nightshift best > next.json\n"
    "Says `nothing has succeeded yet` (exit 0) when no run has succeeded there.\n\n"
    "  --dataset D       the dataset (default: the default dataset)\n"
    "  --budget B        time:SECONDS or tokens:N (default: the budget most runs\n"
    "                    on the dataset used)\n"
    "  --json            the daemon's JSON as is\n"};

/* "?dataset=D&budget=B" for the scoped queries. */
static void scope_query(line_t *path, const char *dataset, const char *budget) {
    if (dataset) query_add(path, "dataset", dataset);
    if (budget) query_add(path, "budget", budget);
}

int best_main(int argc, char **argv) {
    const help_t *h = &best_help;
    conn_opts_t o = {0};
    conn_t c = {0};
    int json = 0, rc;
    cJSON *reply = NULL;
    const char *dataset = NULL, *budget = NULL;
    line_t path = {"/v1/best", 8};

    const opt_t opts[] = {{"--dataset", .value = &dataset},
                          {"--budget", .value = &budget},
                          {"--json", .flag = &json},
                          {0}};
    if (!parse_args(argc, argv, h, &o, opts, NULL, &rc)) return rc;
    if ((rc = conn_open(&c, &o, h)) != 0) goto fail;
    scope_query(&path, dataset, budget);
    if ((rc = conn_get_raw(&c, path.s, json, &reply)) != 0 || json) goto fail;
    const cJSON *best = jget(reply, "best"), *spec = jget(best, "spec");
    rc = CLIENT_EXIT_API;
    if (cJSON_IsNull(best)) {
        fprintf(stderr, "nothing has succeeded yet\n");
        rc = 0;
        goto fail;
    }
    if (!cJSON_IsObject(spec)) {
        unexpected(best ? "the best experiment has no spec" : "no best field");
        goto fail;
    }
    fprintf(stderr, "best: experiment %" PRId64, (int64_t)jnum(best, "id", 0));
    if (jstr(best, "name")) {
        fputs(" \"", stderr);
        put_clean(stderr, jstr(best, "name"));
        fputc('"', stderr);
    }
    /* val_bpb sits beside the id, or only in the result. */
    double bpb = jnum(best, "val_bpb", jnum(best, "result.val_bpb", NAN));
    double sd = jnum(best, "val_bpb_sd", NAN), n = jnum(best, "n_seeds", 1);
    if (isfinite(bpb)) fprintf(stderr, " val_bpb %.6f", bpb);
    if (isfinite(bpb) && isfinite(sd)) fprintf(stderr, " +- %.6f (sd of %.0f seeds)", sd, n);
    fputc('\n', stderr);
    fflush(stderr);
    if (print_json(stdout, spec, 0) < 0) {
        fprintf(stderr, "nightshift: out of memory\n");
        goto fail;
    }
    fputc('\n', stdout);
    rc = 0;
fail:
    cJSON_Delete(reply);
    conn_close(&c);
    return rc;
}

/* ------------------------------------------------------------ leaderboard */

static const help_t leaderboard_help = {
    "leaderboard", "[--dataset D] [--budget B] [--limit N] [--json]",
    "The leaderboard of one dataset and budget: one row per configuration (its\n"
    "repeats with different seeds together), best mean val_bpb first, with the\n"
    "standard deviation and number of seeds, and the measured noise.\n\n"
    "  --dataset D       the dataset (default: the default dataset)\n"
    "  --budget B        time:SECONDS or tokens:N (default: the budget most runs\n"
    "                    on the dataset used)\n"
    "  --limit N         at most N rows (default 20)\n"
    "  --json            the daemon's JSON as is\n"};

int leaderboard_main(int argc, char **argv) {
    const help_t *h = &leaderboard_help;
    conn_opts_t o = {0};
    conn_t c = {0};
    int json = 0, rc;
    cJSON *reply = NULL;
    const char *dataset = NULL, *budget = NULL, *limit = NULL;
    line_t path = {"/v1/leaderboard", 15};

    const opt_t opts[] = {{"--dataset", .value = &dataset},
                          {"--budget", .value = &budget},
                          {"--limit", .value = &limit},
                          {"--json", .flag = &json},
                          {0}};
    if (!parse_args(argc, argv, h, &o, opts, NULL, &rc)) return rc;
    if (limit && parse_positive(limit) < 0)
        return usage_error(h, "--limit: expected a positive integer, got '%s'", limit);
    scope_query(&path, dataset, budget);
    if (limit) query_add(&path, "limit", limit);
    if ((rc = conn_open(&c, &o, h)) != 0) goto fail;
    if ((rc = conn_get_raw(&c, path.s, json, &reply)) != 0 || json) goto fail;
    const cJSON *rows = jget(reply, "leaderboard");
    if (!cJSON_IsArray(rows)) {
        unexpected("no leaderboard array");
        rc = CLIENT_EXIT_API;
        goto fail;
    }
    char scope[128];
    clean_copy(scope, sizeof scope, jstr(reply, "dataset") ? jstr(reply, "dataset") : "?", 40);
    printf("dataset %s, budget %s %g\n", scope,
           jstr(reply, "budget_kind") ? jstr(reply, "budget_kind") : "?", jnum(reply, "budget", 0));
    if (!rows->child) {
        puts("nothing has succeeded yet");
        goto fail;
    }
    printf("%6s  %9s  %9s  %5s  %s\n", "ID", "MEAN_BPB", "SD", "SEEDS", "NAME");
    for (const cJSON *r = rows->child; r; r = r->next) {
        char name[NAME_WIDTH * 4 + 8], sd[32] = "-";
        double v = jnum(r, "val_bpb_sd", NAN);
        if (isfinite(v)) snprintf(sd, sizeof sd, "%.6f", v);
        clean_copy(name, sizeof name, jstr(r, "name") ? jstr(r, "name") : "-", NAME_WIDTH);
        printf("%6" PRId64 "  %9.6f  %9s  %5.0f  %s\n", (int64_t)jnum(r, "id", 0),
               jnum(r, "val_bpb", NAN), sd, jnum(r, "n_seeds", 0), name);
    }
fail:
    cJSON_Delete(reply);
    conn_close(&c);
    return rc;
}

/* ----------------------------------------------------------------- cancel */

static const help_t cancel_help = {
    "cancel", "ID",
    "Cancel experiment ID: a queued one at once (`5 cancelled`); a running one by\n"
    "stopping its worker (`5 cancelling`; it shows as cancelled once stopped).\n"
    "An experiment that has already finished is not cancellable (exit 1).\n"};

int cancel_main(int argc, char **argv) {
    const help_t *h = &cancel_help;
    conn_opts_t o = {0};
    conn_t c = {0};
    const char *id_arg = NULL;
    int rc;
    cJSON *reply = NULL;
    line_t path = {0};

    args_t args = {.v = &id_arg, .max = 1, .too_many = "one ID at a time"};
    if (!parse_args(argc, argv, h, &o, NULL, &args, &rc)) return rc;
    long long id = parse_positive(id_arg);
    if (!id_arg) return usage_error(h, "no experiment ID given");
    if (id < 0) return usage_error(h, "expected an experiment id, got '%s'", id_arg);

    if ((rc = conn_open(&c, &o, h)) != 0) goto fail;
    line_add(&path, "/v1/experiments/%lld/cancel", id);
    if ((rc = conn_json(&c, "POST", path.s, NULL, 0, &reply)) != 0) goto fail;
    const char *status = jstr(reply, "status");
    if (!status) {
        unexpected("no status");
        rc = CLIENT_EXIT_API;
        goto fail;
    }
    printf("%lld ", id);
    put_clean(stdout, status);
    puts(!strcmp(status, "cancelling") ? " (the worker is being stopped)" : "");
fail:
    cJSON_Delete(reply);
    conn_close(&c);
    return rc;
}

/* ------------------------------------------------------------------ watch */

static const help_t watch_help = {
    "watch", "[--interval S] [--once]",
    "Live progress of every slot: a bar of the time budget, the experiment, its\n"
    "step, loss, tokens/s and time left, or `evaluating` once its budget is spent\n"
    "and it is scoring the validation split. Below: the last finished experiment\n"
    "and its verdict (a new best for its dataset, or how far behind the best),\n"
    "the best so far on each dataset, and the queue depth. On a terminal the\n"
    "lines are redrawn in place; otherwise a snapshot is printed every interval.\n"
    "When the daemon goes away (a restart), watch says `reconnecting` and carries\n"
    "on when it is back. Ctrl-C stops (exit 0).\n\n"
    "  --interval S      seconds between polls (default 2, at least 0.1)\n"
    "  --once            print one snapshot and exit\n"};

static volatile sig_atomic_t watch_stop;

static void watch_signal_cb(int sig) {
    (void)sig;
    watch_stop = 1;
}

/* slot 0 [#########...........]  45.2% ETA 2m44s exp 12 step 130 loss 3.214 2,810 tok/s "name"
 * slot 0 [####################] evaluating exp 12 step 400 loss 2.914 "name"
 * The name goes last: on a narrow terminal it is what gets cut. */
static void slot_line(const cJSON *slot, line_t *l) {
    const cJSON *exp = jget(slot, "experiment"), *p = jget(slot, "progress");
    char a[64];
    line_add(l, "slot %d ", (int)jnum(slot, "slot", 0));
    if (!cJSON_IsObject(exp)) {
        line_add(l, "idle");
        return;
    }
    double pct = cJSON_IsObject(p) ? jnum(p, "percent", 0) : 0;
    /* The worker's last step line says 100% exactly when the budget is spent;
     * evaluation follows, before the result. */
    int evaluating = pct >= 100;
    pct = pct < 0 ? 0 : pct > 100 ? 100 : pct;
    int fill = (int)lround(pct / 100 * BAR_WIDTH);
    line_add(l, "[");
    for (int i = 0; i < BAR_WIDTH; i++) line_add(l, "%c", i < fill ? '#' : '.');
    if (evaluating)
        line_add(l, "] evaluating");
    else
        line_add(l, "] %5.1f%%", pct);
    if (!evaluating && cJSON_IsObject(p) && cJSON_IsNumber(jget(p, "eta_s")))
        line_add(l, " ETA %s", duration(jnum(p, "eta_s", 0), a, sizeof a));
    line_add(l, " exp %" PRId64, (int64_t)jnum(exp, "id", 0));
    if (!cJSON_IsObject(p)) {
        line_add(l, " starting");
    } else {
        if (cJSON_IsNumber(jget(p, "step")))
            line_add(l, " step %" PRId64, (int64_t)jnum(p, "step", 0));
        if (cJSON_IsNumber(jget(p, "loss"))) line_add(l, " loss %.3f", jnum(p, "loss", 0));
        if (!evaluating && cJSON_IsNumber(jget(p, "tok_s")))
            line_add(l, " %s tok/s", commas(jnum(p, "tok_s", 0), a, sizeof a));
    }
    if (jstr(exp, "name")) {
        line_add(l, " \"");
        line_add_clean(l, jstr(exp, "name"), NAME_WIDTH);
        line_add(l, "\"");
    }
}

/* The best of each dataset: the leaderboard is ordered best first, so the
 * first row of a dataset is its best. */

/* Fill best[] (at most MAX_DATASETS_SHOWN) from a leaderboard reply; returns the count. */
static int bests_from(const cJSON *board, best_t *best) {
    const cJSON *rows = jget(board, "leaderboard");
    int n = 0;
    for (const cJSON *r = cJSON_IsArray(rows) ? rows->child : NULL; r; r = r->next) {
        const char *ds = jstr(r, "dataset");
        if (!ds || !cJSON_IsNumber(jget(r, "val_bpb"))) continue;
        int k = 0;
        while (k < n && strcmp(best[k].dataset, ds)) k++;
        if (k < n || n == MAX_DATASETS_SHOWN) continue;
        clean_copy(best[n].dataset, sizeof best[n].dataset, ds, 24);
        best[n].id = (int64_t)jnum(r, "id", 0);
        best[n].val_bpb = jnum(r, "val_bpb", 0);
        n++;
    }
    return n;
}

static const best_t *best_of(const best_t *best, int n, const char *dataset) {
    char clean[64];
    clean_copy(clean, sizeof clean, dataset ? dataset : "", 24);
    for (int k = 0; k < n; k++)
        if (!strcmp(best[k].dataset, clean)) return &best[k];
    return NULL;
}

/* How a finished experiment e did: "new best" / "best" when it leads its
 * dataset, "+0.0123 vs 5" behind the best, else "" (not succeeded). */
static void verdict(const cJSON *e, const best_t *best, int n, int newest, char *buf, size_t len) {
    buf[0] = '\0';
    if (!jstr(e, "status") || strcmp(jstr(e, "status"), "succeeded") ||
        !cJSON_IsNumber(jget(e, "val_bpb")))
        return;
    const best_t *b = best_of(best, n, jstr(e, "dataset"));
    if (!b) return;
    if (b->id == (int64_t)jnum(e, "id", 0))
        snprintf(buf, len, "%s", newest ? "new best" : "best");
    else
        snprintf(buf, len, "%+.4f vs %" PRId64, jnum(e, "val_bpb", 0) - b->val_bpb, b->id);
}

/* "last: exp 11 "name" succeeded 1.8342, new best on book" or the status and
 * reason of a run that did not succeed. */
static void last_line(const cJSON *list, const best_t *best, int nbest, line_t *l) {
    const cJSON *items = jget(list, "experiments"), *e = NULL;
    for (const cJSON *it = cJSON_IsArray(items) ? items->child : NULL; it; it = it->next) {
        const char *st = jstr(it, "status");
        if (st && strcmp(st, "queued") && strcmp(st, "running")) {
            e = it;
            break;
        }
    }
    if (!e) return;
    line_add(l, "last: exp %" PRId64, (int64_t)jnum(e, "id", 0));
    if (jstr(e, "name")) {
        line_add(l, " \"");
        line_add_clean(l, jstr(e, "name"), 20);
        line_add(l, "\"");
    }
    line_add(l, " ");
    line_add_clean(l, jstr(e, "status"), 16);
    if (cJSON_IsNumber(jget(e, "val_bpb"))) {
        char v[64];
        verdict(e, best, nbest, 1, v, sizeof v);
        line_add(l, " val_bpb %.4f", jnum(e, "val_bpb", 0));
        if (v[0]) {
            line_add(l, ", %s", v);
            if (jstr(e, "dataset")) {
                line_add(l, " on ");
                line_add_clean(l, jstr(e, "dataset"), 24);
            }
        }
    } else if (jstr(e, "reason")) {
        line_add(l, ": ");
        line_add_clean(l, jstr(e, "reason"), 80);
    }
}

/* The snapshot's lines: one per slot, the last result and the best of each
 * dataset (when list and board are given), then the queue. *out is malloc'd
 * (the caller frees it); returns the count, or -1 when the reply is unusable. */
static int status_lines(const cJSON *st, const cJSON *list, const cJSON *board, line_t **out) {
    const cJSON *slots = jget(st, "slots");
    *out = NULL;
    if (!cJSON_IsArray(slots) || !cJSON_IsNumber(jget(st, "queue_depth"))) return -1;
    int n = cJSON_GetArraySize(slots), i = 0;
    line_t *lines = calloc((size_t)n + 3, sizeof *lines);
    if (!lines) return -1;
    for (const cJSON *s = slots->child; s && i < n; s = s->next) slot_line(s, &lines[i++]);
    best_t best[MAX_DATASETS_SHOWN];
    int nbest = board ? bests_from(board, best) : 0;
    if (list) {
        last_line(list, best, nbest, &lines[i]);
        if (lines[i].n) i++;
    }
    for (int k = 0; k < nbest; k++)
        line_add(&lines[i], "%s%s %.4f (exp %" PRId64 ")", k ? ", " : "best: ", best[k].dataset,
                 best[k].val_bpb, best[k].id);
    if (nbest) i++;
    line_add(&lines[i++], "queue: %" PRId64 " queued", (int64_t)jnum(st, "queue_depth", 0));
    *out = lines;
    return i;
}

/* Cut l to at most cols - 1 characters (so it never wraps). */
static void fit_width(line_t *l, int cols) {
    if (cols <= 1) return;
    size_t chars = 0;
    for (size_t i = 0; i < l->n; i++)
        if ((l->s[i] & 0xc0) != 0x80 && ++chars == (size_t)cols) {
            l->s[i] = '\0';
            l->n = i;
            return;
        }
}

/* One snapshot: /v1/status, then (best effort, quietly) the latest
 * experiments and the leaderboard. Returns 0 with the lines and their
 * count set, or the status request's exit code. */
static int watch_poll(conn_t *c, line_t **lines, int *n) {
    cJSON *st = NULL, *list = NULL, *board = NULL;
    int rc = conn_json(c, "GET", "/v1/status", NULL, 0, &st);
    if (rc) return rc;
    int quiet = c->quiet;
    c->quiet = 1;
    if (conn_json(c, "GET", "/v1/experiments?order=-id&limit=20", NULL, 0, &list) != 0) list = NULL;
    if (!watch_stop && conn_json(c, "GET", "/v1/leaderboard?limit=1000", NULL, 0, &board) != 0)
        board = NULL;
    c->quiet = quiet;
    c->said[0] = '\0';
    *n = status_lines(st, list, board, lines);
    cJSON_Delete(st);
    cJSON_Delete(list);
    cJSON_Delete(board);
    if (*n < 0) {
        unexpected("no slots or queue_depth in /v1/status");
        return CLIENT_EXIT_API;
    }
    return 0;
}

int watch_main(int argc, char **argv) {
    const help_t *h = &watch_help;
    conn_opts_t o = {0};
    conn_t c = {0};
    const char *interval_arg = NULL;
    double interval = 2, lost_at = 0;
    int once = 0, rc, tty = isatty(STDOUT_FILENO), shown = 0;
    struct sigaction sa, old_int, old_term;

    const opt_t opts[] = {{"--interval", .value = &interval_arg}, {"--once", .flag = &once}, {0}};
    if (!parse_args(argc, argv, h, &o, opts, NULL, &rc)) return rc;
    if (interval_arg) {
        char *end;
        interval = strtod(interval_arg, &end);
        if (end == interval_arg || *end || !(interval >= 0.1 && interval <= 86400))
            return usage_error(h, "--interval: expected seconds >= 0.1, got '%s'", interval_arg);
    }
    if ((rc = conn_open(&c, &o, h)) != 0) {
        conn_close(&c);
        return rc;
    }

    /* SIGINT/SIGTERM end the loop: no SA_RESTART, so a sleep returns early,
     * and the transfer in flight is aborted through c.stop. */
    watch_stop = 0;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = watch_signal_cb;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    c.stop = &watch_stop;
    if (tty && !once) fputs("\x1b[?25l", stdout); /* hide the cursor while redrawing */

    while (!watch_stop) {
        line_t *lines = NULL;
        int n = 0;
        /* Losing the daemon (a restart, a crash, not started yet) is not
         * the end: say so and keep asking. Only --once gives up; an HTTP
         * error (a bad token, a broken reply) ends the watch either way. */
        c.quiet = !once;
        rc = watch_poll(&c, &lines, &n);
        if (rc && rc != CONN_STOPPED && !once && c.http_status == 0) {
            if (lost_at == 0) lost_at = util_now();
            free(lines);
            lines = calloc(1, sizeof *lines);
            if (!lines) break;
            char d[32];
            line_add(&lines[0], "reconnecting to %s (no answer for %s)", c.base,
                     duration(util_now() - lost_at, d, sizeof d));
            n = 1;
            rc = 0;
        } else if (rc) {
            if (rc != CONN_STOPPED && c.said[0]) fputs(c.said, stderr);
            break;
        } else {
            lost_at = 0;
        }
        if (tty) {
            struct winsize ws;
            int cols = ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 ? ws.ws_col : 0;
            if (shown) printf("\x1b[%dA", shown); /* back to the first line drawn */
            for (int i = 0; i < n; i++) {
                fit_width(&lines[i], cols);
                printf("\r\x1b[2K%s\n", lines[i].s);
            }
            if (n < shown) fputs("\x1b[J", stdout); /* fewer lines than before */
            shown = n;
        } else {
            for (int i = 0; i < n; i++) puts(lines[i].s);
        }
        fflush(stdout);
        free(lines);
        if (once) break;
        /* Sleep in short naps so a signal that lands between the check and
         * the sleep is still seen promptly. */
        for (double left = interval; left > 0 && !watch_stop; left -= 0.1) {
            double nap = left < 0.1 ? left : 0.1;
            struct timespec ts = {0, (long)(nap * 1e9)};
            nanosleep(&ts, NULL);
        }
    }
    if (rc == CONN_STOPPED) rc = 0;
    if (tty && !once) fputs("\x1b[?25h", stdout);
    fflush(stdout);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    conn_close(&c);
    return rc;
}

/* ----------------------------------------------------------------- export */

static const help_t export_help = {
    "export", "--format csv|tsv|jsonl|results-tsv",
    "Every experiment with its key spec fields and result, oldest first, to\n"
    "stdout: CSV (RFC 4180), TSV, JSON lines, or autoresearch's results.tsv\n"
    "(commit val_bpb memory_gb status description; commit is the experiment id,\n"
    "status keep / discard / crash).\n"};

int export_main(int argc, char **argv) {
    const help_t *h = &export_help;
    conn_opts_t o = {0};
    conn_t c = {0};
    const char *format = NULL;
    int rc;
    reply_t r = {0};
    line_t path = {0};

    const opt_t opts[] = {{"--format", .value = &format}, {0}};
    if (!parse_args(argc, argv, h, &o, opts, NULL, &rc)) return rc;
    if (!format) return usage_error(h, "--format is required");
    if (strcmp(format, "csv") && strcmp(format, "tsv") && strcmp(format, "jsonl") &&
        strcmp(format, "results-tsv"))
        return usage_error(h, "--format: expected csv, tsv, jsonl or results-tsv, got '%s'",
                           format);
    if ((rc = conn_open(&c, &o, h)) != 0) goto fail;
    line_add(&path, "/v1/export?format=%s", format);
    if ((rc = conn_request(&c, "GET", path.s, NULL, 0, &r)) != 0) goto fail;
    fwrite(r.body.data, 1, r.body.len, stdout);
    rc = fflush(stdout) == 0 ? 0 : CLIENT_EXIT_API;
fail:
    reply_free(&r);
    conn_close(&c);
    return rc;
}

/* ------------------------------------------------------------------- diff */

static const help_t diff_help = {
    "diff", "ID ID",
    "Compare two experiments: every spec field that differs (`model.depth: 4 -> 6`),\n"
    "then both results and loss summaries side by side.\n"};

/* Print every leaf of a and b that differs, as "path: A -> B" (absent fields
 * show as -). Returns how many. */
static int spec_diff(const cJSON *a, const cJSON *b, const char *prefix) {
    int n = 0;
    char path[256], ta[128], tb[128];
    for (int pass = 0; pass < 2; pass++) {
        const cJSON *from = pass ? b : a, *other = pass ? a : b;
        for (const cJSON *k = from ? from->child : NULL; k; k = k->next) {
            const cJSON *o = cJSON_GetObjectItemCaseSensitive(other, k->string);
            if (pass && o) continue; /* seen in the first pass */
            snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", k->string);
            if (cJSON_IsObject(k) && cJSON_IsObject(o)) {
                n += pass ? spec_diff(o, k, path) : spec_diff(k, o, path);
                continue;
            }
            if (o && cJSON_Compare(k, o, 1)) continue;
            const cJSON *va = pass ? o : k, *vb = pass ? k : o;
            if (!va || jtext(va, ta, sizeof ta) < 0) snprintf(ta, sizeof ta, "-");
            if (!vb || jtext(vb, tb, sizeof tb) < 0) snprintf(tb, sizeof tb, "-");
            printf("  %s: ", path);
            put_clean(stdout, ta);
            fputs(" -> ", stdout);
            put_clean(stdout, tb);
            fputc('\n', stdout);
            n++;
        }
    }
    return n;
}

/* The last and the lowest loss of an experiment's metrics (NAN when none). */
static void loss_summary(const cJSON *e, double *last, double *min) {
    *last = *min = NAN;
    const cJSON *m;
    cJSON_ArrayForEach(m, jget(e, "metrics")) {
        double l = jnum(m, "loss", NAN);
        if (!isfinite(l)) continue;
        *last = l;
        if (!isfinite(*min) || l < *min) *min = l;
    }
}

int diff_main(int argc, char **argv) {
    const help_t *h = &diff_help;
    conn_opts_t o = {0};
    conn_t c = {0};
    const char *ids[2] = {NULL, NULL};
    int rc;
    cJSON *e[2] = {NULL, NULL};

    args_t args = {.v = ids, .max = 2, .too_many = "two IDs, not more"};
    if (!parse_args(argc, argv, h, &o, NULL, &args, &rc)) return rc;
    if (args.n != 2) return usage_error(h, "two experiment IDs are needed");
    long long id[2];
    for (int k = 0; k < 2; k++)
        if ((id[k] = parse_positive(ids[k])) < 0)
            return usage_error(h, "expected an experiment id, got '%s'", ids[k]);
    if ((rc = conn_open(&c, &o, h)) != 0) goto fail;
    for (int k = 0; k < 2; k++) {
        line_t path = {0};
        line_add(&path, "/v1/experiments/%lld", id[k]);
        if ((rc = conn_json(&c, "GET", path.s, NULL, 0, &e[k])) != 0) goto fail;
    }
    printf("spec differences, %lld -> %lld:\n", id[0], id[1]);
    if (spec_diff(jget(e[0], "spec"), jget(e[1], "spec"), "") == 0) printf("  (none)\n");
    static const struct {
        const char *label, *path, *fmt;
    } rows[] = {
        {"val_bpb", "result.val_bpb", "%.6f"},     {"params", "result.params_total", "%.0f"},
        {"mfu %", "result.mfu_percent", "%.2f"},   {"tok/s", "result.tokens_per_second", "%.0f"},
        {"steps", "result.num_steps", "%.0f"},     {"train s", "result.training_seconds", "%.1f"},
        {"peak MB", "result.peak_rss_mb", "%.0f"},
    };
    char a[64], b[64];
    printf("\n  %-12s %14lld %14lld\n", "", id[0], id[1]);
    for (int k = 0; k < 2; k++)
        clean_copy(k ? b : a, sizeof a, jstr(e[k], "status") ? jstr(e[k], "status") : "?", 14);
    printf("  %-12s %14s %14s\n", "status", a, b);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        for (int k = 0; k < 2; k++) {
            double v = jnum(e[k], rows[i].path, NAN);
            if (isfinite(v))
                snprintf(k ? b : a, sizeof a, rows[i].fmt, v);
            else
                snprintf(k ? b : a, sizeof a, "-");
        }
        printf("  %-12s %14s %14s\n", rows[i].label, a, b);
    }
    double last[2], min[2];
    for (int k = 0; k < 2; k++) loss_summary(e[k], &last[k], &min[k]);
    for (int row = 0; row < 2; row++) {
        for (int k = 0; k < 2; k++) {
            double v = row ? min[k] : last[k];
            if (isfinite(v))
                snprintf(k ? b : a, sizeof a, "%.4f", v);
            else
                snprintf(k ? b : a, sizeof a, "-");
        }
        printf("  %-12s %14s %14s\n", row ? "lowest loss" : "final loss", a, b);
    }
    rc = 0;
fail:
    cJSON_Delete(e[0]);
    cJSON_Delete(e[1]);
    conn_close(&c);
    return rc;
}

/* ----------------------------------------------------------- agent status */

static const help_t agent_status_help = {
    "agent status", "",
    "What the running reference agent is doing: its best so far, the last event\n"
    "the daemon sent it and the decision it took, and what it is waiting for.\n"
    "The agent acts only when the daemon calls it: when a run ends or the queue\n"
    "runs dry; between those it is silent. --url is the agent's address\n"
    "(default http://127.0.0.1:$NIGHTSHIFT_AGENT_PORT, else port 8090).\n"};

int agent_status_main(int argc, char **argv) {
    const help_t *h = &agent_status_help;
    conn_opts_t o = {0};
    conn_t c = {0};
    int rc;
    cJSON *st = NULL;
    char url[128], a[32];
    for (int i = 1; i < argc; i++) {
        if ((rc = common_option(argc, argv, &i, &o)) < 0)
            return usage_error(h, "%s needs a value", argv[i]);
        if (rc) continue;
        return usage_error(h, "unexpected argument '%s'", argv[i]);
    }
    if (o.help) {
        print_usage(stdout, h);
        return 0;
    }
    if (!o.url) {
        const char *port = getenv("NIGHTSHIFT_AGENT_PORT");
        snprintf(url, sizeof url, "http://127.0.0.1:%s",
                 port && parse_positive(port) > 0 ? port : "8090");
        o.url = url;
    }
    if ((rc = conn_open(&c, &o, h)) != 0) goto fail;
    if ((rc = conn_json(&c, "GET", "/", NULL, 0, &st)) != 0) goto fail;
    printf("agent at %s: %" PRId64 " proposals so far, %" PRId64 " near ties awaiting a re-run\n",
           c.base, (int64_t)jnum(st, "proposals", 0), (int64_t)jnum(st, "pending_reruns", 0));
    const cJSON *best = jget(st, "best"), *ev = jget(st, "last_event");
    if (cJSON_IsObject(best))
        printf("  best:          exp %" PRId64 ", val_bpb %.4f\n", (int64_t)jnum(best, "id", 0),
               jnum(best, "val_bpb", 0));
    else
        printf("  best:          none yet\n");
    if (cJSON_IsObject(ev)) {
        fputs("  last event:    ", stdout);
        put_clean(stdout, jstr(ev, "type") ? jstr(ev, "type") : "?");
        printf(", %s ago, %" PRId64 " spec(s) proposed in reply\n",
               duration(jnum(ev, "seconds_ago", 0), a, sizeof a), (int64_t)jnum(ev, "proposed", 0));
    } else {
        printf("  last event:    none since it started\n");
    }
    if (jstr(st, "last_decision")) {
        fputs("  last decision: ", stdout);
        put_clean(stdout, jstr(st, "last_decision"));
        fputc('\n', stdout);
    }
    if (jstr(st, "waiting_for")) {
        fputs("  waiting for:   ", stdout);
        put_clean(stdout, jstr(st, "waiting_for"));
        fputc('\n', stdout);
    }
fail:
    cJSON_Delete(st);
    conn_close(&c);
    return rc;
}

/* ----------------------------------------------------------------- sample */

static const help_t sample_help = {"sample", "ID --url URL [sample options]",
                                   "`nightshift sample ID --url URL`: asks the daemon for its "
                                   "state directory, then\nsamples from experiment ID's "
                                   "checkpoint there (see `nightshift sample --help`).\n"};

int client_sample_main(int argc, char **argv) {
    const char *url = NULL;
    int at = -1;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r = opt_value(argc, argv, &i, "--url", &v);
        if (r < 0) return usage_error(&sample_help, "--url needs a value");
        if (r > 0) {
            url = v;
            at = i;
        }
    }
    if (!url) return sample_main(argc, argv);

    conn_opts_t o = {.url = url};
    conn_t c = {0};
    cJSON *st = NULL;
    char **args = calloc((size_t)argc + 2, sizeof *args);
    char *dir = NULL;
    int rc = CLIENT_EXIT_API, n = 0;
    if (!args) goto fail;
    if ((rc = conn_open(&c, &o, &sample_help)) != 0 ||
        (rc = conn_json(&c, "GET", "/v1/status", NULL, 0, &st)) != 0)
        goto fail;
    if (!jstr(st, "state_dir") || !(dir = strdup(jstr(st, "state_dir")))) {
        unexpected("no state_dir in /v1/status");
        rc = CLIENT_EXIT_API;
        goto fail;
    }
    /* argv without --url (one or two entries ending at index at), plus --dir. */
    int url_first = strchr(argv[at], '=') ? at : at - 1;
    for (int i = 0; i < argc; i++)
        if (i < url_first || i > at) args[n++] = argv[i];
    args[n++] = "--dir";
    args[n++] = dir;
    conn_close(&c);
    rc = sample_main(n, args);
fail:
    cJSON_Delete(st);
    conn_close(&c);
    free(dir);
    free(args);
    return rc;
}
