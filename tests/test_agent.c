/* test_agent.c - `nightshift agent` as a process on a loopback port, driven
 * with signed webhook deliveries over libcurl: the signature and timestamp
 * checks (401), the baseline first, a mutation whose parent is the finished
 * run, repeated deliveries, the state across a restart, and a clean exit on
 * SIGTERM. webhook_verify is also checked directly against signatures computed
 * with Python's hmac module (the constants below). */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "experiments/agent/agent.h"
#include "daemon/shared/webhook.h"
#include "engine/spec.h"
#include "tests/testutil.h"

#define SECRET "test-secret"

/* ------------------------------------------------------ the agent process */

#define START_TIMEOUT_S 10.0 /* until the agent prints its address */
#define STOP_TIMEOUT_S  10.0 /* SIGTERM to exit */

static char *dir;      /* the test's directory */
static char *err_path; /* the agent's stderr, dir/agent.err */
static tu_server_t A;  /* the agent, while one runs */

/* Start the agent with more arguments (NULL-terminated, at most 8); it must
 * print its address within START_TIMEOUT_S. */
static void agent_start_with(const char *const *more) {
    char *baseline = tu_path("%s/experiments/specs/baseline.json", tu_src());
    char *argv[24] = {(char *)tu_bin(), "agent", "--listen",   "127.0.0.1:0",
                      "--secret",       SECRET,  "--baseline", baseline};
    int n = 8;
    for (int i = 0; more && more[i] && i < 8; i++) argv[n++] = (char *)more[i];
    argv[n] = NULL;
    tu_server_release(&A); /* an earlier run's */
    tu_server_start(&A, "agent", argv, err_path, START_TIMEOUT_S);
    free(baseline);
}

/* Start the agent (with --state when state is not NULL). */
static void agent_start(const char *state) {
    const char *more[] = {state ? "--state" : NULL, state, NULL};
    agent_start_with(more);
}

/* SIGTERM: the agent must exit 0 within STOP_TIMEOUT_S, with no sanitizer
 * report in its stderr. */
static void agent_stop(void) {
    tu_server_stop(&A, STOP_TIMEOUT_S);
}

static void setup(void) {
    memset(&A, 0, sizeof A);
    dir = tu_tmpdir();
    err_path = tu_path("%s/agent.err", dir);
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void teardown(void) {
    if (A.pid > 0) agent_stop();
    tu_server_release(&A);
    tu_rmrf(dir);
    free(dir);
    free(err_path);
    curl_global_cleanup();
}

TestSuite(agent, .init = setup, .fini = teardown, .timeout = 30);

/* ---------------------------------------------------------------- client */

/* "v1,<base64 HMAC-SHA256(secret, id.ts.body)>" into out. */
static void sign(const char *secret, const char *id, const char *ts, const char *body, char *out) {
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    char *msg = tu_path("%s.%s.%s", id, ts, body);
    cr_assert(HMAC(EVP_sha256(), secret, (int)strlen(secret), (unsigned char *)msg, strlen(msg),
                   mac, &n));
    free(msg);
    strcpy(out, "v1,");
    EVP_EncodeBlock((unsigned char *)out + 3, mac, (int)n);
}

/* POST body to /hook with the given webhook headers (NULL: header left out);
 * returns the status, *resp gets the body (caller frees). */
static long post_raw(const char *id, const char *ts, const char *sig, const char *body,
                     char **resp) {
    const char *headers[5] = {"Expect:"};
    int n = 1;
    if (id) headers[n++] = tu_path("webhook-id: %s", id);
    if (ts) headers[n++] = tu_path("webhook-timestamp: %s", ts);
    if (sig) headers[n++] = tu_path("webhook-signature: %s", sig);
    headers[n] = NULL;
    tu_reply_t r;
    tu_http_headers(&A, "POST", "/hook", body, strlen(body), headers, &r);
    for (int i = 1; i < n; i++) free((char *)headers[i]);
    *resp = r.body; /* taken: no tu_reply_free */
    return r.status;
}

/* A correctly signed delivery at time now + skew seconds. */
static long post_signed(const char *id, long skew, const char *body, char **resp) {
    char ts[32], sig[128];
    snprintf(ts, sizeof ts, "%lld", (long long)time(NULL) + skew);
    sign(SECRET, id, ts, body, sig);
    return post_raw(id, ts, sig, body, resp);
}

/* The reply must be exactly one valid spec; parsed into out. */
static void reply_spec(const char *resp, spec_t *out) {
    char err[SPEC_ERR_LEN];
    cJSON *j = cJSON_Parse(resp);
    cr_assert(cJSON_IsObject(j), "the reply is not one spec: %s", resp);
    cJSON_Delete(j);
    cr_assert_eq(spec_parse(resp, strlen(resp), out, err, sizeof err), 0, "%s: %s", resp, err);
}

static const char *const QUEUE_EMPTY = "{\"type\":\"queue.empty\",\"experiment\":null,"
                                       "\"best\":null,\"recent\":[],\"queue_depth\":0}";

/* experiment.finished for id with the baseline spec and val_bpb v. */
static char *finished_body(int id, double v) {
    char *path = tu_path("%s/experiments/specs/baseline.json", tu_src());
    char *spec = tu_read(path);
    cr_assert_not_null(spec);
    free(path);
    char *body = tu_path("{\"type\":\"experiment.finished\",\"experiment\":{\"id\":%d,"
                         "\"status\":\"succeeded\",\"reason\":null,\"spec\":%s,"
                         "\"result\":{\"val_bpb\":%.4f}},\"best\":null,\"recent\":[],"
                         "\"queue_depth\":0,\"running\":0}",
                         id, spec, v);
    free(spec);
    return body;
}

static int has_tag(const spec_t *sp, const char *tag) {
    for (int i = 0; i < sp->n_tags; i++)
        if (!strcmp(sp->tags[i], tag)) return 1;
    return 0;
}

/* ----------------------------------------------------------------- tests */

Test(agent, verify_against_independent_signatures) {
    char err[256];
    const char *body = "{\"type\":\"queue.empty\"}";
    const char *good = "v1,94rk4BagNdNizfhtNyq1QHxSjzJDptNnO6EcleZVr20=";
    cr_expect_eq(webhook_verify("S", 1, "evt_1", "1700000000", good, body, strlen(body), 1700000000,
                                err, sizeof err),
                 0, "%s", err);
    /* One of several signatures is enough; other versions are skipped. */
    cr_expect_eq(webhook_verify("S", 1, "evt_1", "1700000000",
                                "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= v2,xyz "
                                "v1,94rk4BagNdNizfhtNyq1QHxSjzJDptNnO6EcleZVr20=",
                                body, strlen(body), 1700000100, err, sizeof err),
                 0, "%s", err);
    /* An empty body. */
    cr_expect_eq(webhook_verify("another secret", 14, "msg_2", "1700000123",
                                "v1,b7zc3UysSt9Icie1DtWfIk5wCrqNi2bkRK9D0vM4KKQ=", "", 0,
                                1700000123, err, sizeof err),
                 0, "%s", err);
    /* Anything changed fails: body, id, timestamp, secret, prefix. */
    cr_expect_eq(
        webhook_verify("S", 1, "evt_1", "1700000000", good, "{}", 2, 1700000000, err, sizeof err),
        -1);
    cr_expect_str_eq(err, "no valid v1 signature in webhook-signature");
    cr_expect_eq(webhook_verify("S", 1, "evt_2", "1700000000", good, body, strlen(body), 1700000000,
                                err, sizeof err),
                 -1);
    cr_expect_eq(webhook_verify("S", 1, "evt_1", "1700000001", good, body, strlen(body), 1700000000,
                                err, sizeof err),
                 -1);
    cr_expect_eq(webhook_verify("T", 1, "evt_1", "1700000000", good, body, strlen(body), 1700000000,
                                err, sizeof err),
                 -1);
    cr_expect_eq(webhook_verify("S", 1, "evt_1", "1700000000", good + 3, body, strlen(body),
                                1700000000, err, sizeof err),
                 -1);
    /* Timestamps: five minutes either way, and only digits. */
    cr_expect_eq(webhook_verify("S", 1, "evt_1", "1700000000", good, body, strlen(body),
                                1700000000 + 301, err, sizeof err),
                 -1);
    cr_expect_str_eq(err, "webhook-timestamp 1700000000 is 301 s from now (tolerance 300 s)");
    cr_expect_eq(webhook_verify("S", 1, "evt_1", "1700000000", good, body, strlen(body),
                                1700000000 - 301, err, sizeof err),
                 -1);
    cr_expect_eq(webhook_verify("S", 1, "evt_1", "17e8", good, body, strlen(body), 1700000000, err,
                                sizeof err),
                 -1);
    cr_expect_eq(webhook_verify("S", 1, NULL, "1700000000", good, body, strlen(body), 1700000000,
                                err, sizeof err),
                 -1);
    cr_expect_str_eq(err, "missing webhook-id");
    cr_expect_eq(webhook_verify("S", 1, "evt_1", "1700000000", NULL, body, strlen(body), 1700000000,
                                err, sizeof err),
                 -1);
    cr_expect_str_eq(err, "missing webhook-signature");
}

Test(agent, good_signature_gets_the_baseline) {
    agent_start(NULL);
    char *resp = NULL;
    cr_assert_eq(post_signed("evt_a", 0, QUEUE_EMPTY, &resp), 200, "%s", resp);
    /* the baseline with three seeds, to measure the noise first */
    cJSON *arr = cJSON_Parse(resp);
    cr_assert(cJSON_IsArray(arr) && cJSON_GetArraySize(arr) == 3, "reply: %s", resp);
    for (int i = 0; i < 3; i++) {
        char *text = cJSON_PrintUnformatted(cJSON_GetArrayItem(arr, i));
        spec_t p;
        reply_spec(text, &p);
        cr_expect_str_eq(p.name, "baseline");
        cr_expect_eq(p.seed, 42 + (uint64_t)i);
        cr_expect_eq(p.parent, 0);
        cr_expect(has_tag(&p, "agent"));
        spec_free(&p);
        free(text);
    }
    cJSON_Delete(arr);
    free(resp);
    agent_stop(); /* exit 0 on SIGTERM */
    char *log = tu_read(err_path);
    cr_expect(log && strstr(log, "proposing the baseline \"baseline\" with seeds 42..44 to "
                                 "measure the noise"),
              "%s", log);
    free(log);
}

Test(agent, bad_signatures_are_401) {
    agent_start(NULL);
    char *resp = NULL, ts[32], sig[128];
    snprintf(ts, sizeof ts, "%lld", (long long)time(NULL));
    /* Signed with another secret. */
    sign("wrong", "evt_b", ts, QUEUE_EMPTY, sig);
    cr_expect_eq(post_raw("evt_b", ts, sig, QUEUE_EMPTY, &resp), 401);
    cJSON *j = cJSON_Parse(resp);
    cr_expect_str_eq(
        cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "code")),
        "unauthorized");
    cJSON_Delete(j);
    free(resp);
    /* Signed over another body. */
    sign(SECRET, "evt_b", ts, "{}", sig);
    cr_expect_eq(post_raw("evt_b", ts, sig, QUEUE_EMPTY, &resp), 401);
    free(resp);
    /* Missing headers. */
    sign(SECRET, "evt_b", ts, QUEUE_EMPTY, sig);
    cr_expect_eq(post_raw(NULL, ts, sig, QUEUE_EMPTY, &resp), 401);
    free(resp);
    cr_expect_eq(post_raw("evt_b", NULL, sig, QUEUE_EMPTY, &resp), 401);
    free(resp);
    cr_expect_eq(post_raw("evt_b", ts, NULL, QUEUE_EMPTY, &resp), 401);
    free(resp);
    /* The good one still works, also among others. */
    char several[256];
    snprintf(several, sizeof several, "v1,bm90IGEgc2lnbmF0dXJl %s", sig);
    cr_expect_eq(post_raw("evt_b", ts, several, QUEUE_EMPTY, &resp), 200, "%s", resp);
    free(resp);
    char *log = tu_read(err_path);
    cr_expect(log && strstr(log, "refusing a delivery"), "%s", log);
    free(log);
}

Test(agent, stale_or_future_timestamps_are_401) {
    agent_start(NULL);
    char *resp = NULL;
    cr_expect_eq(post_signed("evt_c", -400, QUEUE_EMPTY, &resp), 401, "%s", resp);
    cr_expect(strstr(resp, "tolerance 300 s"), "%s", resp);
    free(resp);
    cr_expect_eq(post_signed("evt_c", 400, QUEUE_EMPTY, &resp), 401, "%s", resp);
    free(resp);
    /* A retry a couple of minutes late is fine. */
    cr_expect_eq(post_signed("evt_c", -120, QUEUE_EMPTY, &resp), 200, "%s", resp);
    free(resp);
}

Test(agent, finished_run_gets_a_mutation_of_it) {
    agent_start(NULL);
    char *resp = NULL, *body = finished_body(5, 2.5);
    cr_assert_eq(post_signed("evt_d", 0, body, &resp), 200, "%s", resp);
    spec_t p;
    reply_spec(resp, &p);
    cr_expect_eq(p.parent, 5);
    cr_expect(has_tag(&p, "agent"));
    cr_expect(p.n_tags >= 2, "no axis tag");
    cr_expect(!strncmp(p.name, "mut#1 ", 6), "name %s", p.name);
    spec_free(&p);
    free(resp);
    free(body);
    char *log = tu_read(err_path);
    cr_expect(log && strstr(log, "keeping #5: the first successful run (val_bpb 2.5000)"), "%s",
              log);
    cr_expect(log && strstr(log, "proposing mutation of #5 (val_bpb 2.5000)"), "%s", log);
    free(log);
}

/* The parent of the agent's answer to experiment.rejected (delivered as
 * event id) of proposal, a spec's JSON text, with code and error. */
static int64_t parent_after_rejection(const char *id, const char *proposal, const char *code,
                                      const char *error) {
    char *resp = NULL;
    char *body = tu_path("{\"type\":\"experiment.rejected\",\"experiment\":null,"
                         "\"rejected\":{\"proposal\":%s,\"code\":\"%s\",\"error\":\"%s\"},"
                         "\"best\":null,\"recent\":[],\"queue_depth\":0,\"running\":0}",
                         proposal, code, error);
    cr_assert_eq(post_signed(id, 0, body, &resp), 200, "%s", resp);
    spec_t p;
    reply_spec(resp, &p);
    int64_t parent = p.parent;
    spec_free(&p);
    free(resp);
    free(body);
    return parent;
}

/* The agent drops the parent it cannot use on the rejection's code, never on
 * the wording of its message. */
Test(agent, an_unknown_parent_is_decided_by_the_code) {
    agent_start(NULL);
    char *first = NULL, *body = finished_body(5, 2.5);
    spec_t p;
    cr_assert_eq(post_signed("evt_p1", 0, body, &first), 200, "%s", first);
    reply_spec(first, &p);
    cr_expect_eq(p.parent, 5);
    spec_free(&p);
    free(body);
    /* A message that reads like a parent problem, with another code. */
    cr_expect_eq(
        parent_after_rejection("evt_p2", first, "invalid_spec", "parent: wording that decides"), 5,
        "the agent dropped its parent on the message's text");
    /* unknown_parent, whatever the message says. */
    cr_expect_eq(parent_after_rejection("evt_p3", first, "unknown_parent", "no such experiment"), 0,
                 "the agent kept a parent the daemon does not know");
    free(first);
    char *log = tu_read(err_path);
    cr_expect(log && strstr(log, "the daemon does not know #5: proposing without a parent"), "%s",
              log);
    free(log);
}

Test(agent, repeated_delivery_gets_the_same_answer) {
    agent_start(NULL);
    char *r1 = NULL, *r2 = NULL, *r3 = NULL;
    cr_assert_eq(post_signed("evt_e", 0, QUEUE_EMPTY, &r1), 200);
    cr_assert_eq(post_signed("evt_e", 1, QUEUE_EMPTY, &r2), 200);
    cr_expect_str_eq(r1, r2, "a retried delivery got a different answer");
    /* A new event id is a new question. */
    cr_assert_eq(post_signed("evt_f", 0, QUEUE_EMPTY, &r3), 200);
    cr_expect_str_neq(r1, r3);
    free(r1);
    free(r2);
    free(r3);
}

/* A delivery sent again after many others, within the signature's
 * tolerance, is still answered from memory: the agent kept the last 64
 * deliveries, so a replay after 64 others was decided again. Now every
 * delivery of the tolerance window is kept. */
Test(agent, a_replay_within_the_tolerance_is_never_decided_again) {
    agent_start(NULL);
    char ts[32], sig[128], *first = NULL, *again = NULL;
    snprintf(ts, sizeof ts, "%lld", (long long)time(NULL));
    sign(SECRET, "evt_replayed", ts, QUEUE_EMPTY, sig);
    cr_assert_eq(post_raw("evt_replayed", ts, sig, QUEUE_EMPTY, &first), 200);
    for (int i = 0; i < 70; i++) {
        char id[32], *r = NULL;
        snprintf(id, sizeof id, "evt_other_%d", i);
        cr_assert_eq(post_signed(id, 0, QUEUE_EMPTY, &r), 200, "%s: %s", id, r);
        free(r);
    }
    cr_assert_eq(post_raw("evt_replayed", ts, sig, QUEUE_EMPTY, &again), 200);
    cr_expect_str_eq(again, first, "the replay was decided again");
    free(first);
    free(again);
    char *log = tu_read(A.errlog);
    cr_expect(log && strstr(log, "delivery evt_replayed again: answering as the first time"), "%s",
              log);
    free(log);
}

Test(agent, not_json_is_400) {
    agent_start(NULL);
    char *resp = NULL;
    cr_expect_eq(post_signed("evt_g", 0, "not json", &resp), 400, "%s", resp);
    free(resp);
    cr_expect_eq(post_signed("evt_h", 0, "{\"no\":\"type\"}", &resp), 400, "%s", resp);
    free(resp);
}

Test(agent, state_survives_a_restart) {
    char *state = tu_path("%s/agent-state.json", dir);
    agent_start(state);
    char *resp = NULL, *body = finished_body(1, 2.5);
    spec_t p;
    cr_assert_eq(post_signed("evt_i", 0, QUEUE_EMPTY, &resp), 200, "%s", resp);
    free(resp);
    cr_assert_eq(post_signed("evt_j", 0, body, &resp), 200, "%s", resp);
    reply_spec(resp, &p);
    cr_expect_eq(p.parent, 1);
    spec_free(&p);
    char *first = resp;
    agent_stop();
    char *text = tu_read(state);
    cJSON *st = cJSON_Parse(text);
    cr_expect(cJSON_IsObject(st), "the state is not JSON: %s", text);
    cJSON_Delete(st);
    free(text);

    /* Restarted: the best is still #1 and nothing proposed before comes back. */
    agent_start(state);
    cr_assert_eq(post_signed("evt_k", 0, QUEUE_EMPTY, &resp), 200, "%s", resp);
    reply_spec(resp, &p);
    cr_expect_eq(p.parent, 1, "the restarted agent forgot its best");
    cr_expect(strncmp(p.name, "mut#2 ", 6) == 0, "name %s", p.name);
    cr_expect_str_neq(resp, first);
    spec_free(&p);
    free(resp);
    free(first);
    free(body);
    free(state);
    char *log = tu_read(err_path);
    cr_expect(log && strstr(log, "resumed from"), "%s", log);
    free(log);
}

Test(agent, usage) {
    tu_run_t r;
    tu_run_bin(&r, 10, "agent", NULL);
    cr_expect_eq(r.exit_code, 2);
    cr_expect(strstr(r.err, "a secret is required"), "%s", r.err);
    tu_run_free(&r);
    tu_run_bin(&r, 10, "agent", "--help", NULL);
    cr_expect_eq(r.exit_code, 0);
    cr_expect(strstr(r.out, "usage: nightshift agent"), "%s", r.out);
    tu_run_free(&r);
    tu_run_bin(&r, 10, "agent", "--secret", "x", "--baseline", "/nonexistent.json", "--listen",
               "127.0.0.1:0", NULL);
    cr_expect_eq(r.exit_code, 1);
    cr_expect(strstr(r.err, "/nonexistent.json"), "%s", r.err);
    tu_run_free(&r);
}

/* --until: a bad time is refused; a good one is the next such local time,
 * and the runs that can end before it are counted once the pace is known
 * (three ends) and shown in the status. */
Test(agent, until_the_night_ends) {
    tu_run_t r;
    tu_run_bin(&r, 10, "agent", "--secret", "x", "--until", "24:00", NULL);
    cr_expect_eq(r.exit_code, 2);
    cr_expect(strstr(r.err, "--until: expected a local time HH:MM"), "%s", r.err);
    tu_run_free(&r);
    time_t later = time(NULL) + 3 * 3600 + 90;
    struct tm t;
    char until[8];
    strftime(until, sizeof until, "%H:%M", localtime_r(&later, &t));
    const char *more[] = {"--until", until, NULL};
    agent_start_with(more);
    for (int i = 1; i <= 3; i++) {
        char *resp = NULL, *body = finished_body(i, 2.5 - 0.01 * i), id[16];
        snprintf(id, sizeof id, "evt_u%d", i);
        cr_assert_eq(post_signed(id, 0, body, &resp), 200, "%s", resp);
        free(resp);
        free(body);
        usleep(50 * 1000);
    }
    char *log = tu_read(err_path);
    cr_expect(log && strstr(log, "(--until)"), "%s", log);
    const char *at = log ? strstr(log, "more runs can end in time (") : NULL;
    int minutes = at ? atoi(at + strlen("more runs can end in time (")) : -1;
    /* until is the minute of now + 3 h 90 s: 3 h 30 s to 3 h 90 s (whole
     * seconds) are left, printed rounded, so 181.5 minutes prints 182 */
    cr_expect(minutes >= 180 && minutes <= 182, "minutes left %d: %s", minutes, log);
    free(log);
    cJSON *st = tu_get_json(&A, "/");
    cr_expect(tu_jstr(st, "until") && strlen(tu_jstr(st, "until")) >= 19, "no until");
    cr_expect_gt(tu_jnum(st, "runs_left"), 1000, "three ends 50 ms apart, three hours left");
    /* the lowest mean the agent has seen, beside its best */
    const cJSON *low = cJSON_GetObjectItem(st, "lowest");
    cr_expect(cJSON_IsObject(low) && tu_jnum(low, "mean_val_bpb") >= 2.47 - 1e-9 &&
                  tu_jnum(low, "mean_val_bpb") <= 2.49 + 1e-9 && tu_jnum(low, "seeds") >= 1,
              "lowest: mean %g over %g seeds", tu_jnum(low, "mean_val_bpb"), tu_jnum(low, "seeds"));
    cJSON_Delete(st);
    /* and `agent status` says so */
    tu_run_bin(&r, 10, "agent", "status", "--url", A.url, NULL);
    cr_expect_eq(r.exit_code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "  night ends:    ") &&
                  strstr(r.out, "more run(s) can end before then"),
              "%s", r.out);
    tu_run_free(&r);
}

/* The agent's status is no page's to read: a request naming another host
 * (DNS rebinding) is refused, as the daemon refuses it; one naming the
 * agent's own address is answered. */
Test(agent, a_rebinding_page_cannot_read_the_status) {
    agent_start(NULL);
    tu_reply_t r;
    const char *rebound[] = {"Host: rebind.attacker.example", NULL};
    tu_http_headers(&A, "GET", "/", NULL, 0, rebound, &r);
    cr_expect_eq(r.status, 421, "%ld %s", r.status, r.body);
    tu_reply_free(&r);
    const char *own[] = {"Host: 127.0.0.1", NULL};
    tu_http_headers(&A, "GET", "/", NULL, 0, own, &r);
    cr_expect_eq(r.status, 200, "%ld %s", r.status, r.body);
    tu_reply_free(&r);
}

/* --space and --strategy: a bad space file stops the agent with the file and
 * the axis named; a space of one axis the code has no table for, searched by
 * tpe, is what the proposals move; GET says which strategy runs. */
Test(agent, the_space_file_and_the_strategy) {
    tu_run_t r;
    tu_run_bin(&r, 10, "agent", "--secret", "x", "--space", "/nonexistent/space.json", "--listen",
               "127.0.0.1:0", NULL);
    cr_expect_eq(r.exit_code, 1);
    cr_expect(strstr(r.err, "/nonexistent/space.json"), "%s", r.err);
    tu_run_free(&r);
    char *bad = tu_path("%s/bad-space.json", dir);
    tu_write(bad, "{\"axes\":[{\"path\":\"model.widht\",\"type\":\"int\",\"low\":1,"
                  "\"high\":2}]}");
    tu_run_bin(&r, 10, "agent", "--secret", "x", "--space", bad, "--listen", "127.0.0.1:0", NULL);
    cr_expect_eq(r.exit_code, 1);
    cr_expect(strstr(r.err, "bad-space.json: axes[0]: model.widht is not a field of a spec"), "%s",
              r.err);
    tu_run_free(&r);
    tu_run_bin(&r, 10, "agent", "--secret", "x", "--strategy", "annealing", NULL);
    cr_expect_eq(r.exit_code, 2);
    cr_expect(strstr(r.err, "strategy"), "%s", r.err);
    tu_run_free(&r);

    char *good = tu_path("%s/space.json", dir);
    tu_write(good, "{\"axes\":[{\"path\":\"model.mlp_ratio\",\"type\":\"float\","
                   "\"values\":[2,3,6]}]}");
    const char *more[] = {"--space", good, "--strategy", "tpe", "--noise-seeds", "0", NULL};
    agent_start_with(more);
    int ratios[3] = {0};
    for (int i = 0; i < 3; i++) { /* three points: the whole space, one each */
        char id[16], *resp = NULL;
        snprintf(id, sizeof id, "evt_s%d", i);
        cr_assert_eq(post_signed(id, 0, QUEUE_EMPTY, &resp), 200, "%s", resp);
        spec_t p;
        reply_spec(resp, &p);
        cr_expect(has_tag(&p, "tpe"), "%s", p.name);
        cr_expect_eq(p.model.depth, 4, "a field outside the space moved");
        for (int k = 0; k < 3; k++) ratios[k] += p.model.mlp_ratio == (double[]){2, 3, 6}[k];
        spec_free(&p);
        free(resp);
    }
    for (int k = 0; k < 3; k++) cr_expect_eq(ratios[k], 1, "mlp_ratio value %d: %d", k, ratios[k]);
    tu_reply_t st;
    tu_http(&A, "GET", "/", NULL, 0, NULL, &st);
    cr_expect(st.status == 200 && strstr(st.body, "\"strategy\":\"tpe\""), "%s", st.body);
    tu_reply_free(&st);
    agent_stop();
    char *log = tu_read(err_path);
    cr_expect(log && strstr(log, "strategy tpe over 1 axis of"), "%s", log);
    free(log);
    free(good);
    free(bad);
}

/* The night's plan, sized to its length: from --max-proposals (8 and 96
 * runs of tpe), and from --until at the pace the baseline's budget suggests
 * on --slots before any run has ended; printed in the log at start, in the
 * status JSON and by `agent status`. */
Test(agent, the_plan_is_sized_to_the_night) {
    static const struct {
        const char *runs;
        int noise, startup, confirm, final, model;
        const char *line;
    } cases[] = {
        {"8", 1, 5, 1, 0, 2,
         "plan: night of 8 runs: 1 baseline seed (noise), 5 startup results, 2 runs of the model, "
         "1 confirmation seed for the answer and none before"},
        {"96", 2, 10, 3, 16, 69,
         "plan: night of 96 runs: 2 baseline seeds (noise), 10 startup results, 69 runs of the "
         "model, 3 confirmation seeds for the answer (the last 16 runs re-measure the best few, "
         "up to 4 seeds)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *more[] = {"--strategy", "tpe", "--max-proposals", cases[i].runs, NULL};
        agent_start_with(more);
        cJSON *st = tu_get_json(&A, "/");
        cJSON *plan = cJSON_GetObjectItem(st, "plan");
        cr_assert(cJSON_IsObject(plan), "no plan in the status");
        cr_expect_eq(tu_jnum(plan, "runs"), atoi(cases[i].runs));
        cr_expect_eq(tu_jnum(plan, "noise_seeds"), cases[i].noise);
        cr_expect_eq(tu_jnum(plan, "startup"), cases[i].startup);
        cr_expect_eq(tu_jnum(plan, "confirm_seeds"), cases[i].confirm);
        cr_expect_eq(tu_jnum(plan, "final_runs"), cases[i].final);
        cr_expect_eq(tu_jnum(plan, "model"), cases[i].model);
        cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(plan, "noise_known")));
        cJSON_Delete(st);
        tu_run_t r;
        tu_run_bin(&r, 10, "agent", "status", "--url", A.url, NULL);
        char want[128];
        snprintf(want, sizeof want,
                 "  plan:          a night of %s runs: %d baseline noise seed(s)", cases[i].runs,
                 cases[i].noise);
        cr_expect(strstr(r.out, want), "%s", r.out);
        tu_run_free(&r);
        agent_stop();
        char *log = tu_read(err_path);
        cr_expect(log && strstr(log, cases[i].line), "%s", log);
        free(log);
    }
    /* --until in 3 h (and 30 to 90 s) of 300 s runs on 2 slots: 345 s a run,
     * 31 a slot, 62 runs */
    time_t later = time(NULL) + 3 * 3600 + 90;
    struct tm t;
    char until[8];
    strftime(until, sizeof until, "%H:%M", localtime_r(&later, &t));
    const char *more[] = {"--strategy", "tpe", "--until", until, "--slots", "2", NULL};
    agent_start_with(more);
    cJSON *st = tu_get_json(&A, "/");
    cJSON *plan = cJSON_GetObjectItem(st, "plan");
    cr_expect_eq(tu_jnum(plan, "runs"), 62, "runs %g", tu_jnum(plan, "runs"));
    cr_expect_eq(tu_jnum(st, "runs_left"), 62);
    cr_expect_eq(tu_jnum(plan, "confirm_seeds"), 2);
    cr_expect_eq(tu_jnum(plan, "startup"), 10);
    cJSON_Delete(st);
    agent_stop();
    char *log = tu_read(err_path);
    cr_expect(log && strstr(log, "--until: about 62 runs can end in time (300 s budget, 2 slots)"),
              "%s", log);
    cr_expect(log && strstr(log, "plan: night of 62 runs: 1 baseline seed (noise), 10 startup"),
              "%s", log);
    free(log);
}
