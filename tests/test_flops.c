/* test_flops.c - the FLOPs budget end to end: two models of different sizes
 * given one flops_budget train the tokens their FLOPs per token imply (the
 * first step whose FLOPs reach the budget), through the local executor and
 * the Slurm one (the stand-in commands of tests/slurm/fake); such runs file
 * under a scope kind of their own, and `cost` says what the budget buys. */
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include "tests/testutil.h"

#define FLOPS_BUDGET 4e8 /* tens of steps of either model at 128 tokens a step */
#define STEP_TOKENS  128

static char *state, *fake_dir;
static tu_server_t daemon_;
static int started;

static void setup(void) {
    tu_dir_init();
    unsetenv("NIGHTSHIFT_TOKEN");
    cr_assert_eq(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK);
    state = tu_path("%s/state", tu_dir());
    fake_dir = tu_path("%s/fake", tu_dir());
    cr_assert_eq(mkdir(fake_dir, 0755), 0);
    char *path = tu_path("%s/tests/slurm/fake:%s", tu_src(), getenv("PATH"));
    setenv("PATH", path, 1);
    setenv("FAKE_SLURM_DIR", fake_dir, 1);
    free(path);
    tu_prep_tiny(tu_dir_path("corpus.jsonl"), state, "tiny");
}

/* The daemon, then any stand-in Slurm job still running (its session). */
static void teardown(void) {
    if (started) tu_server_release(&daemon_);
    char *next = tu_read(tu_dir_path("fake/next"));
    for (int n = 1; next && n <= atoi(next); n++) {
        char *pidfile = tu_path("%s/%d.pid", fake_dir, n);
        char *pid = tu_read(pidfile);
        if (pid && atoi(pid) > 0) kill(-atoi(pid), SIGKILL);
        free(pid);
        free(pidfile);
    }
    free(next);
    free(state);
    free(fake_dir);
    curl_global_cleanup();
    tu_dir_fini();
}

TestSuite(flops, .init = setup, .fini = teardown, .timeout = 120);

static const char *const models[] = {
    "\"depth\":1,\"n_embd\":32,\"n_head\":2,\"seq_len\":32",
    "\"depth\":2,\"n_embd\":64,\"n_head\":2,\"seq_len\":32",
};

static char *spec_json(int model) {
    return tu_path("{\"name\":\"flops-%d\",\"dataset\":\"tiny\",\"flops_budget\":%g,"
                   "\"model\":{%s},\"train\":{\"batch_size\":4,\"total_batch_tokens\":%d},"
                   "\"resources\":{\"threads\":1,\"peak_gflops\":10}}",
                   model, FLOPS_BUDGET, models[model], STEP_TOKENS);
}

static cJSON *wait_end(long id, double timeout_s) {
    char path[64];
    snprintf(path, sizeof path, "/v1/experiments/%ld", id);
    for (double deadline = tu_now() + timeout_s;; tu_sleep_ms(100)) {
        cJSON *e = tu_get_json(&daemon_, path);
        const char *s = tu_jstr(e, "status");
        if (s && strcmp(s, "queued") && strcmp(s, "running")) return e;
        cJSON_Delete(e);
        if (tu_now() > deadline)
            tu_server_fail(&daemon_, "experiment %ld: no end within %g s", id, timeout_s);
    }
}

/* Both models through executor: each run trains the first whole number of
 * steps whose FLOPs (its flops_per_token x tokens) reach the budget, so the
 * tokens differ as the models' FLOPs per token do; the runs file under the
 * "flops" scope, and the leaderboard of that scope holds them and no other. */
static void both_models(const char *executor) {
    const char *extra[] = {"--listen", "127.0.0.1:0",        "--executor", executor, "--slurm-poll",
                           "0.1",      "--slurm-job-prefix", "nsflops",    NULL};
    tu_daemon_start(&daemon_, state, extra, 20);
    started = 1;
    long ids[2];
    for (int m = 0; m < 2; m++) {
        char *spec = spec_json(m);
        cJSON *o = tu_http_json(&daemon_, "POST", "/v1/experiments", spec, 201);
        ids[m] = (long)tu_jnum(o, "id");
        cJSON_Delete(o);
        free(spec);
    }
    double fpt[2], tokens[2];
    for (int m = 0; m < 2; m++) {
        cJSON *e = wait_end(ids[m], 90);
        cr_assert_str_eq(tu_jstr(e, "status"), "succeeded", "%s: model %d: %s", executor, m,
                         tu_jstr(e, "reason"));
        const cJSON *r = cJSON_GetObjectItem(e, "result");
        fpt[m] = tu_jnum(r, "flops_per_token");
        tokens[m] = tu_jnum(r, "total_tokens");
        cr_expect(fpt[m] > 0);
        cr_expect(tokens[m] * fpt[m] >= FLOPS_BUDGET, "%s: model %d: %g tokens x %g FLOPs < %g",
                  executor, m, tokens[m], fpt[m], FLOPS_BUDGET);
        cr_expect((tokens[m] - STEP_TOKENS) * fpt[m] < FLOPS_BUDGET,
                  "%s: model %d: %g tokens: a step more than the budget needs", executor, m,
                  tokens[m]);
        cr_expect_eq(tu_jnum(r, "token_budget"), 0);
        cr_expect_eq(tu_jnum(r, "time_budget_s"), 0);
        cJSON_Delete(e);
    }
    cr_expect(fpt[1] > 2 * fpt[0], "the models' FLOPs per token: %g and %g", fpt[0], fpt[1]);
    /* the tokens follow the FLOPs per token, within a step each */
    cr_expect(fabs(tokens[0] / tokens[1] - fpt[1] / fpt[0]) <
                  fpt[1] / fpt[0] * (STEP_TOKENS / tokens[0] + STEP_TOKENS / tokens[1]),
              "%s: tokens %g and %g for FLOPs per token %g and %g", executor, tokens[0], tokens[1],
              fpt[0], fpt[1]);

    char q[128];
    snprintf(q, sizeof q, "/v1/leaderboard?dataset=tiny&budget=flops:%.0f", FLOPS_BUDGET);
    cJSON *lb = tu_get_json(&daemon_, q);
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(lb, "leaderboard")), 2, "%s", executor);
    cJSON_Delete(lb);
    snprintf(q, sizeof q, "/v1/leaderboard?dataset=tiny&budget=tokens:%.0f", FLOPS_BUDGET);
    lb = tu_http_json(&daemon_, "GET", q, NULL, 404); /* a FLOPs budget is no token budget */
    cr_expect_str_eq(tu_jstr(cJSON_GetObjectItem(lb, "error"), "code"), "unknown_scope");
    cJSON_Delete(lb);
    tu_server_stop(&daemon_, 20);
    started = 0;

    sqlite3 *db = tu_db_open(tu_dir_path("state/nightshift.db"));
    cr_expect_eq(tu_sql_int(db,
                            strcmp(executor, "slurm")
                                ? "SELECT count(*) FROM experiments WHERE budget_kind = 'flops' "
                                  "AND budget = 4e8 AND executor = 'local'"
                                : "SELECT count(*) FROM experiments WHERE budget_kind = 'flops' "
                                  "AND budget = 4e8 AND executor = 'slurm'",
                            0),
                 2, "%s", executor);
    sqlite3_close(db);
}

Test(flops, local_executor_trains_the_tokens_the_flops_imply) {
    both_models("local");
}

Test(flops, slurm_executor_trains_the_tokens_the_flops_imply) {
    both_models("slurm");
    char *next = tu_read(tu_dir_path("fake/next"));
    cr_expect(next && atoi(next) == 2, "the stand-in sbatch ran %s times", next ? next : "no");
    free(next);
}

/* cost: the tokens the budget buys and the steps train takes for them. */
Test(flops, cost_prints_what_the_budget_buys) {
    char *spec = tu_path("%s/spec.json", tu_dir());
    char *json = spec_json(0);
    tu_write(spec, json);
    tu_run_t r;
    tu_run_bin(&r, 30, "cost", spec, "--dir", state, NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    const char *fpt = strstr(r.out, "flops_per_token:"), *steps = strstr(r.out, "optimiser steps:");
    cr_assert(fpt && steps, "%s", r.out);
    double f = strtod(strchr(fpt, '(') + 1, NULL);
    double n = strtod(steps + strlen("optimiser steps:"), NULL);
    cr_expect_eq(n, ceil(FLOPS_BUDGET / f / STEP_TOKENS), "%s", r.out);
    tu_run_free(&r);
    free(json);
    free(spec);
}
