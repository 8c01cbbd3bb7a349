/* fuzz_origin.c - the Host and Origin checks (daemon/shared/origin.h): an
 * input is up to four lines, a request's Host, Origin, Content-Type and
 * method (an empty line is a header not sent; the first byte picks a daemon
 * on loopback or on every address). Properties: an authority that parses
 * parses again to the same host and port from its normal form; the check
 * answers 0 or one of its statuses with an error envelope; a Host it lets
 * through names this daemon (loopback, or a name given), and an Origin it
 * lets through is the request's own or the one given; CORS headers only for
 * that origin. */
#include "daemon/shared/http.h"
#include "daemon/shared/origin.h"
#include "tests/fuzz/fuzz.h"

static origin_policy_t *loopback, *everywhere;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    char err[256];
    (void)argc, (void)argv;
    origin_opts_t a = {.listen_host = "127.0.0.1",
                       .allowed_hosts = "lab.example, 10.0.0.7",
                       .allowed_origins = "https://dash.example,http://[::1]:9000"};
    origin_opts_t b = {.listen_host = "0.0.0.0"};
    if (origin_policy_new(&a, &loopback, err, sizeof err) < 0 ||
        origin_policy_new(&b, &everywhere, err, sizeof err) < 0) {
        fprintf(stderr, "fuzz_origin: %s\n", err);
        abort();
    }
    return 0;
}

/* host[:port] of a parsed authority back as text, brackets for IPv6. */
static void unparse(const char *host, int port, char *out, size_t len) {
    int v6 = strchr(host, ':') != NULL;
    if (port >= 0)
        snprintf(out, len, "%s%s%s:%d", v6 ? "[" : "", host, v6 ? "]" : "", port);
    else
        snprintf(out, len, "%s%s%s", v6 ? "[" : "", host, v6 ? "]" : "");
}

static void check_authority(const char *s) {
    char host[ORIGIN_HOST_MAX], again[ORIGIN_HOST_MAX], text[ORIGIN_HOST_MAX + 16];
    int port, port2;
    if (origin_parse_authority(s, strlen(s), host, sizeof host, &port) < 0) return;
    FUZZ_CHECK(host[0] && (port == -1 || (port >= 1 && port <= 65535)), "'%s': host '%s' port %d",
               s, host, port);
    for (const char *p = host; *p; p++)
        FUZZ_CHECK(!(*p >= 'A' && *p <= 'Z'), "'%s': host '%s' is not lower case", s, host);
    unparse(host, port, text, sizeof text);
    FUZZ_CHECK(origin_parse_authority(text, strlen(text), again, sizeof again, &port2) == 0 &&
                   !strcmp(again, host) && port2 == port,
               "'%s' -> '%s' does not parse to itself", s, text);
}

static void check_request(const origin_policy_t *p, const http_request_t *req) {
    http_response_t res = {0};
    int rc = origin_check(p, req, &res);
    FUZZ_CHECK(rc == 0 || rc == 400 || rc == 403 || rc == 415 || rc == 421, "status %d", rc);
    FUZZ_CHECK(rc == 0 ? !res.body : (res.status == rc && res.body), "status %d, res %d", rc,
               res.status);
    free(res.body);
    if (rc) return;
    char host[ORIGIN_HOST_MAX];
    int port;
    if (req->host && p == loopback) {
        FUZZ_CHECK(origin_parse_authority(req->host, strlen(req->host), host, sizeof host, &port) ==
                           0 &&
                       (http_host_is_loopback(host) || !strcmp(host, "lab.example") ||
                        !strcmp(host, "10.0.0.7")),
                   "Host '%s' passed", req->host);
    }
    char scheme[8];
    if (req->origin)
        FUZZ_CHECK(origin_parse(req->origin, scheme, sizeof scheme, host, sizeof host, &port) == 0,
                   "Origin '%s' passed", req->origin);
    res = (http_response_t){0};
    origin_cors(p, req, &res);
    const char *acao = strstr(res.headers, "Access-Control-Allow-Origin: ");
    FUZZ_CHECK(!acao || (p == loopback && req->origin), "CORS for '%s'", req->origin);
    if (acao)
        FUZZ_CHECK(!strncmp(acao + 29, "https://dash.example\r\n", 22) ||
                       !strncmp(acao + 29, "http://[::1]:9000\r\n", 19),
                   "CORS header '%s'", res.headers);
    free(res.body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1), *lines[4] = {NULL, NULL, NULL, NULL};
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    if (strlen(text) != size || size == 0) { /* a NUL never reaches a header */
        free(text);
        return 0;
    }
    char *s = text + 1;
    for (int i = 0; i < 4 && s; i++) {
        char *nl = strchr(s, '\n');
        if (nl) *nl = '\0';
        lines[i] = *s ? s : NULL;
        s = nl ? nl + 1 : NULL;
    }
    for (int i = 0; i < 2; i++)
        if (lines[i]) check_authority(lines[i]);
    if (lines[1]) {
        char scheme[8], host[ORIGIN_HOST_MAX];
        int port;
        if (origin_parse(lines[1], scheme, sizeof scheme, host, sizeof host, &port) == 0)
            FUZZ_CHECK(port >= 1 && port <= 65535 &&
                           (!strcmp(scheme, "http") || !strcmp(scheme, "https")),
                       "origin '%s'", lines[1]);
    }
    http_request_t req = {.method = lines[3] ? lines[3] : "GET",
                          .path = "/v1/status",
                          .query = "",
                          .body = "",
                          .host = lines[0],
                          .origin = lines[1],
                          .content_type = lines[2],
                          .peer = "127.0.0.1:1"};
    check_request(text[0] & 1 ? everywhere : loopback, &req);
    free(text);
    return 0;
}
