/* test_metrics.c - GET /metrics: Prometheus' text format 0.0.4 (its content
 * type; HELP and TYPE for every family; counters named _total), the counters
 * moving when a tiny run of the real engine finishes, request counts by
 * route template (ids and unknown paths make no new series), the writer's
 * escaping of label values and HELP text, and the guard of the other GETs
 * (Host, Origin, the token off loopback).
 *
 * The daemon runs as a child process on a loopback port, on a tiny dataset. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/serve/metrics.h"
#include "daemon/shared/version.h"
#include "daemon/serve/api.h"
#include "tests/testutil.h"

#define START_TIMEOUT_S 20
#define STOP_TIMEOUT_S  20
#define RUN_TIMEOUT_S   90 /* a two-second run, its startup and evaluation, on a busy machine */

static char *state; /* tu_dir()/state, with datasets/tiny */

static void setup(void) {
    unsetenv("NIGHTSHIFT_TOKEN");
    cr_assert_eq(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK);
    tu_dir_init();
    state = tu_path("%s/state", tu_dir());
    tu_prep_tiny(tu_dir_path("corpus.jsonl"), state, "tiny");
}

static void teardown(void) {
    free(state);
    tu_dir_fini();
    curl_global_cleanup();
}

TestSuite(metrics, .init = setup, .fini = teardown, .timeout = 150);

/* ------------------------------------------------------------- helpers */

static void daemon_start(tu_server_t *d, const char *const *extra) {
    tu_daemon_start(d, state, extra, START_TIMEOUT_S);
}

/* GET /metrics, which must answer 200 in the exposition format; the body
 * is returned (caller frees). */
static char *scrape(const tu_server_t *d) {
    tu_reply_t r;
    tu_http(d, "GET", "/metrics", NULL, 0, NULL, &r);
    cr_assert_eq(r.status, 200, "GET /metrics: %ld %s", r.status, r.body);
    cr_expect_str_eq(r.content_type, METRICS_CONTENT_TYPE);
    char *body = r.body;
    r.body = NULL;
    tu_reply_free(&r);
    return body;
}

/* The value of the sample whose name and labels are exactly series (e.g.
 * `nightshift_experiments_ended_total{status="succeeded"}`), or NAN when the body
 * has none. */
static double sample(const char *body, const char *series) {
    size_t n = strlen(series);
    for (const char *p = body; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (!strncmp(p, series, n) && p[n] == ' ') return strtod(p + n + 1, NULL);
    }
    return NAN;
}

/* The sum of every sample of family name (0 when it has none). */
static double family_sum(const char *body, const char *name) {
    size_t n = strlen(name);
    double sum = 0;
    for (const char *p = body; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, name, n) || (p[n] != '{' && p[n] != ' ')) continue;
        const char *v =
            strchr(p, '}') && strchr(p, '}') < strchr(p, '\n') ? strchr(p, '}') + 1 : p + n;
        sum += strtod(v, NULL);
    }
    return sum;
}

static const char *const families[][2] = {
    {"nightshift_experiments_ended_total", "counter"},
    {"nightshift_queue_depth", "gauge"},
    {"nightshift_experiments_running", "gauge"},
    {"nightshift_slots_in_use", "gauge"},
    {"nightshift_slots", "gauge"},
    {"nightshift_tokens_trained_total", "counter"},
    {"nightshift_training_seconds_total", "counter"},
    {"nightshift_hook_deliveries_total", "counter"},
    {"nightshift_hook_delivery_failures_total", "counter"},
    {"nightshift_http_requests_total", "counter"},
    {"nightshift_store_size_bytes", "gauge"},
    {"nightshift_start_time_seconds", "gauge"},
    {"nightshift_run_duration_seconds", "histogram"},
    {"nightshift_best_val_bpb", "gauge"},
    {"nightshift_http_request_duration_seconds", "histogram"},
    {"nightshift_build_info", "gauge"},
    {"process_cpu_seconds_total", "counter"},
    {"process_resident_memory_bytes", "gauge"},
    {"process_virtual_memory_bytes", "gauge"},
    {"process_open_fds", "gauge"},
    {"process_max_fds", "gauge"},
    {"process_start_time_seconds", "gauge"},
};
#define N_FAMILIES (sizeof families / sizeof families[0])

/* Every sample's family has a HELP and then a TYPE line before it, counters
 * end in _total, each family of the list is there with its type, and no
 * other family is. */
static void expect_well_formed(const char *body) {
    char typed[N_FAMILIES] = {0}, helped[N_FAMILIES] = {0};
    char *copy = strdup(body), *save = NULL;
    cr_assert(body[strlen(body) - 1] == '\n', "the body ends with a newline");
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char name[128];
        if (!strncmp(line, "# HELP ", 7) || !strncmp(line, "# TYPE ", 7)) {
            int help = line[2] == 'H';
            cr_assert_eq(sscanf(line + 7, "%127s", name), 1, "%s", line);
            size_t i = 0;
            while (i < N_FAMILIES && strcmp(families[i][0], name)) i++;
            cr_assert_lt(i, N_FAMILIES, "an unknown family: %s", line);
            if (help) {
                cr_expect(!helped[i] && !typed[i], "HELP once, before TYPE: %s", line);
                helped[i] = 1;
            } else {
                cr_expect(helped[i] && !typed[i], "TYPE once, after HELP: %s", line);
                cr_expect_str_eq(line + 7 + strlen(name) + 1, families[i][1], "%s", line);
                typed[i] = 1;
            }
            continue;
        }
        cr_assert_neq(line[0], '#', "no other comments: %s", line);
        size_t len = strcspn(line, "{ ");
        cr_assert_lt(len, sizeof name);
        memcpy(name, line, len);
        name[len] = '\0';
        size_t i = 0;
        while (i < N_FAMILIES && strcmp(families[i][0], name)) i++;
        /* a histogram's samples: its name with _bucket, _sum or _count */
        static const char *const parts[] = {"_bucket", "_sum", "_count"};
        for (size_t k = 0; i == N_FAMILIES && k < 3; k++) {
            size_t pl = strlen(parts[k]);
            if (len <= pl || strcmp(name + len - pl, parts[k])) continue;
            name[len - pl] = '\0';
            for (i = 0; i < N_FAMILIES && strcmp(families[i][0], name); i++) continue;
            if (i < N_FAMILIES) cr_expect_str_eq(families[i][1], "histogram", "%s", line);
            name[len - pl] = parts[k][0];
        }
        cr_assert_lt(i, N_FAMILIES, "a sample of an unknown family: %s", line);
        cr_expect(typed[i], "a sample before its family's TYPE: %s", line);
        if (!strcmp(families[i][1], "counter"))
            cr_expect(len > 6 && !strcmp(name + len - 6, "_total"), "%s", name);
    }
    for (size_t i = 0; i < N_FAMILIES; i++)
        cr_expect(helped[i] && typed[i], "%s has no HELP or TYPE", families[i][0]);
    free(copy);
}

/* ----------------------------------------------------------------- tests */

Test(metrics, the_format_and_every_family_with_help_and_type) {
    tu_server_t d;
    daemon_start(&d, NULL);
    char *body = scrape(&d);
    expect_well_formed(body);
    cr_expect_eq(sample(body, "nightshift_experiments_ended_total{status=\"succeeded\"}"), 0);
    cr_expect_eq(sample(body, "nightshift_queue_depth"), 0);
    cr_expect_eq(sample(body, "nightshift_slots"), 1);
    cr_expect_eq(sample(body, "nightshift_slots_in_use"), 0);
    cr_expect(isnan(sample(body, "nightshift_experiments_ended_total{status=\"queued\"}")),
              "a queue is a gauge, not a counter");
    cr_expect_gt(sample(body, "nightshift_store_size_bytes{file=\"db\"}"), 0);
    free(body);
    tu_server_stop(&d, STOP_TIMEOUT_S);
    tu_server_release(&d);
}

Test(metrics, the_counters_move_when_a_run_finishes) {
    tu_server_t d;
    daemon_start(&d, NULL);
    char *before = scrape(&d);
    cJSON *o = tu_http_json(&d, "POST", "/v1/experiments",
                            "{\"dataset\":\"tiny\",\"time_budget_s\":2,\"model\":{\"depth\":1,"
                            "\"n_embd\":32,\"n_head\":2,\"seq_len\":32},\"train\":"
                            "{\"batch_size\":4,\"total_batch_tokens\":128}}",
                            201);
    long id = (long)tu_jnum(o, "id");
    cJSON_Delete(o);
    char path[64];
    snprintf(path, sizeof path, "/v1/experiments/%ld", id);
    double deadline = tu_now() + RUN_TIMEOUT_S;
    for (;;) {
        cJSON *e = tu_get_json(&d, path);
        const char *st = tu_jstr(e, "status");
        int done = st && strcmp(st, "queued") && strcmp(st, "running");
        if (done) cr_assert_str_eq(st, "succeeded", "experiment %ld: %s", id, st);
        cJSON_Delete(e);
        if (done) break;
        if (tu_now() > deadline) tu_server_fail(&d, "experiment %ld never finished", id);
        tu_sleep_ms(100);
    }
    /* the stored result is the engine's whole (its peak's source was once cut
     * to 31 bytes by the scheduler's copy) */
    cJSON *e = tu_get_json(&d, path);
    const char *src =
        cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "result"), "peak_source"));
    cr_expect(src && (!strcmp(src, "measured") || !strcmp(src, "calibration") ||
                      !strcmp(src, "calibration, accepted under load") ||
                      !strcmp(src, "measured under load, this run only")),
              "peak_source: %s", src ? src : "(none)");
    cJSON_Delete(e);
    char *after = scrape(&d);
    expect_well_formed(after);
    const char *ok = "nightshift_experiments_ended_total{status=\"succeeded\"}";
    cr_expect_eq(sample(after, ok), sample(before, ok) + 1, "%s:\n%s", ok, after);
    /* the run in its duration histogram (2 s of budget: between 1 and 120 s
     * of wall time), the scope's best, the handlers' durations */
    cr_expect_eq(sample(after, "nightshift_run_duration_seconds_count{status=\"succeeded\"}"), 1);
    cr_expect_eq(
        sample(after, "nightshift_run_duration_seconds_bucket{status=\"succeeded\",le=\"1\"}"), 0);
    cr_expect_eq(
        sample(after, "nightshift_run_duration_seconds_bucket{status=\"succeeded\",le=\"120\"}"),
        1);
    cr_expect_gt(sample(after, "nightshift_run_duration_seconds_sum{status=\"succeeded\"}"), 1);
    e = tu_get_json(&d, path);
    double bpb =
        cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "result"), "val_bpb"));
    cJSON_Delete(e);
    cr_expect_float_eq(sample(after, "nightshift_best_val_bpb{dataset=\"tiny\",budget=\"time:2\","
                                     "eval_tokens=\"0\"}"),
                       bpb, 1e-9, "the scope's best is the one run's val_bpb %g:\n%s", bpb, after);
    cr_expect_geq(sample(after, "nightshift_http_request_duration_seconds_count{route=\"/v1/"
                                "experiments/{id}\"}"),
                  2);
    cr_expect_eq(sample(after, "nightshift_build_info{version=\"" NIGHTSHIFT_VERSION
                               "\",compiler=\"" __VERSION__ "\"}"),
                 1);
    cr_expect_gt(sample(after, "process_resident_memory_bytes"), 1 << 20);
    cr_expect_gt(sample(after, "process_open_fds"), 3);
    tu_reply_t head;
    tu_http(&d, "HEAD", "/metrics", NULL, 0, NULL, &head);
    cr_expect_eq(head.status, 200, "HEAD /metrics: %ld", head.status);
    cr_expect_eq(head.len, 0, "HEAD has no body");
    tu_reply_free(&head);
    cr_expect_gt(sample(after, "nightshift_tokens_trained_total"),
                 sample(before, "nightshift_tokens_trained_total"));
    cr_expect_gt(sample(after, "nightshift_training_seconds_total"),
                 sample(before, "nightshift_training_seconds_total"));
    cr_expect_gt(family_sum(after, "nightshift_http_requests_total"),
                 family_sum(before, "nightshift_http_requests_total"));
    cr_expect_eq(
        sample(after, "nightshift_http_requests_total{route=\"/v1/experiments\",code=\"201\"}"), 1);
    cr_expect_geq(
        sample(after,
               "nightshift_http_requests_total{route=\"/v1/experiments/{id}\",code=\"200\"}"),
        1, "the polls, under the route's template:\n%s", after);
    cr_expect_eq(sample(after, "nightshift_http_requests_total{route=\"/metrics\",code=\"200\"}"),
                 1, "the first scrape (a response is counted once it is sent)");
    cr_expect_eq(sample(after, "nightshift_queue_depth"), 0);
    free(before);
    free(after);
    tu_server_stop(&d, STOP_TIMEOUT_S);
    tu_server_release(&d);
}

Test(metrics, requests_count_by_route_template_and_unknown_paths_fold_into_one) {
    tu_server_t d;
    daemon_start(&d, NULL);
    const char *const paths[] = {"/nope",
                                 "/nope/1",
                                 "/v1/experiments/77/what",
                                 "/v1/experimentsX",
                                 "/v1/experiments/12",
                                 "/v1/experiments/13/log"};
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
        tu_reply_t r;
        tu_http(&d, "GET", paths[i], NULL, 0, NULL, &r);
        cr_expect_eq(r.status, 404, "GET %s: %ld", paths[i], r.status);
        tu_reply_free(&r);
    }
    char *body = scrape(&d);
    cr_expect_eq(sample(body, "nightshift_http_requests_total{route=\"other\",code=\"404\"}"), 4,
                 "%s", body);
    cr_expect_eq(
        sample(body, "nightshift_http_requests_total{route=\"/v1/experiments/{id}\",code=\"404\"}"),
        1);
    cr_expect_eq(
        sample(body,
               "nightshift_http_requests_total{route=\"/v1/experiments/{id}/log\",code=\"404\"}"),
        1);
    cr_expect_null(strstr(body, "nope"), "no path becomes a label value");
    cr_expect_null(strstr(body, "/12"));
    free(body);
    tu_server_stop(&d, STOP_TIMEOUT_S);
    tu_server_release(&d);
}

/* A loopback port with nothing listening on it (bound once, then closed). */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    cr_assert(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    cr_assert(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

Test(metrics, hook_attempts_and_failures_are_counted) {
    /* An agent that refuses connections: the queue.empty event at start
     * fails, and is retried. */
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/hook", free_port());
    const char *extra[] = {"--listen",       "127.0.0.1:0", "--agent-url", url,
                           "--agent-secret", "s3cret",      NULL};
    tu_server_t d;
    daemon_start(&d, extra);
    double deadline = tu_now() + 20;
    char *body = NULL;
    for (;;) {
        body = scrape(&d);
        if (sample(body, "nightshift_hook_delivery_failures_total") >= 1) break;
        if (tu_now() > deadline) tu_server_fail(&d, "no failed delivery counted:\n%s", body);
        free(body);
        tu_sleep_ms(100);
    }
    cr_expect_geq(sample(body, "nightshift_hook_deliveries_total"),
                  sample(body, "nightshift_hook_delivery_failures_total"));
    free(body);
    tu_server_stop(&d, STOP_TIMEOUT_S);
    tu_server_release(&d);
}

Test(metrics, label_values_and_help_are_escaped) {
    bytebuf_t b;
    bytebuf_init(&b, BYTEBUF_UNLIMITED);
    const char *labels[] = {"route", "a\\b\"c\nd", "code", "200"};
    metrics_write_family(&b, "x_total", "counter", "back\\slash\nnew \"line\"");
    metrics_write_sample(&b, "x_total", labels, 2, 3);
    metrics_write_sample(&b, "x_total", NULL, 0, 1.5);
    metrics_write_sample(&b, "x_total", NULL, 0, NAN);
    metrics_write_sample(&b, "x_total", NULL, 0, -INFINITY);
    metrics_write_sample(&b, "x_total", NULL, 0, 1e17);
    cr_expect_str_eq(bytebuf_str(&b), "# HELP x_total back\\\\slash\\nnew \"line\"\n"
                                      "# TYPE x_total counter\n"
                                      "x_total{route=\"a\\\\b\\\"c\\nd\",code=\"200\"} 3\n"
                                      "x_total 1.5\n"
                                      "x_total NaN\n"
                                      "x_total -Inf\n"
                                      "x_total 1e+17\n");
    bytebuf_free(&b);
}

Test(metrics, guarded_like_the_other_gets) {
    tu_server_t d;
    daemon_start(&d, NULL);
    tu_reply_t r;
    char rebind[128];
    snprintf(rebind, sizeof rebind, "Host: rebind.attacker.example:%d", d.port);
    const char *rebound[] = {rebind, NULL};
    tu_http_headers(&d, "GET", "/metrics", NULL, 0, rebound, &r);
    cr_expect_eq(r.status, 421, "a foreign Host: %ld", r.status);
    tu_reply_free(&r);
    const char *evil[] = {"Origin: http://evil.example", NULL};
    tu_http_headers(&d, "GET", "/metrics", NULL, 0, evil, &r);
    cr_expect_eq(r.status, 403, "a foreign Origin: %ld", r.status);
    tu_reply_free(&r);
    char *body = scrape(&d);
    cr_expect_eq(sample(body, "nightshift_http_requests_total{route=\"/metrics\",code=\"421\"}"), 1,
                 "refusals are counted too:\n%s", body);
    cr_expect_eq(sample(body, "nightshift_http_requests_total{route=\"/metrics\",code=\"403\"}"),
                 1);
    free(body);
    tu_server_stop(&d, STOP_TIMEOUT_S);
    tu_server_release(&d);

    /* Off loopback every GET but /healthz needs the token. */
    char *token_file = tu_path("%s/token", tu_dir());
    tu_write(token_file, "m3trics-token\n");
    const char *extra[] = {"--listen", "0.0.0.0:0", "--token-file", token_file, NULL};
    daemon_start(&d, extra);
    tu_http(&d, "GET", "/metrics", NULL, 0, NULL, &r);
    cr_expect_eq(r.status, 401, "GET /metrics without the token off loopback: %ld", r.status);
    tu_reply_free(&r);
    tu_http(&d, "GET", "/metrics", NULL, 0, "Bearer m3trics-token", &r);
    cr_expect_eq(r.status, 200, "with the token: %ld %s", r.status, r.body);
    cr_expect_eq(sample(r.body, "nightshift_http_requests_total{route=\"/metrics\",code=\"401\"}"),
                 1, "%s", r.body);
    tu_reply_free(&r);
    tu_server_stop(&d, STOP_TIMEOUT_S);
    tu_server_release(&d);
    free(token_file);
}
