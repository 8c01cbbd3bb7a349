/* test_report.c - the morning report (daemon/serve/report.c) against an
 * independent recomputation from the database.
 *
 * A store is filled through its own API as a night would fill it: repeats of
 * a baseline, variants one spec field away from it and from each other (a
 * number, a category, a boolean, a list), a variant two fields away, every
 * kind of failure, a pruned, a cancelled, a running and a queued run, runs
 * in other scopes, test figures measured, missing and never written; the
 * runs' start and finish times are then spread over hours, finishing out of
 * id order. report_build's answer is written to a file, and
 * tests/report_check.py (Debian's python3 and its sqlite3 module) recomputes
 * every number from the base tables with its own SQL and compares. A report
 * with one number changed must fail the check, so the check cannot pass
 * vacuously. */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/serve/report.h"
#include "daemon/store/store.h"
#include "engine/spec.h"
#include "tests/testutil.h"

static char err[512];

TestSuite(report, .init = tu_dir_init, .fini = tu_dir_fini, .timeout = 60);

/* One run of the night: its spec's top-level fields, how it ends, and when
 * it started and how long it ran (hours after 19:00 UTC). */
typedef struct {
    const char *name, *top, *status;
    double val_bpb;
    double test_bpb;         /* NAN with test_reason: measured as none; NAN without: no row */
    const char *test_reason; /* or the ending's reason for a failure */
    double start_h, run_h;
} night_run_t;

#define NO_TEST NAN, NULL

static const night_run_t night[] = {
    {"baseline", "\"seed\":1", STORE_SUCCEEDED, 2.00, 2.05, NULL, 0.0, 0.10},
    {"baseline", "\"seed\":2", STORE_SUCCEEDED, 2.04, 2.08, NULL, 0.0, 0.12},
    {"baseline", "\"seed\":3", STORE_SUCCEEDED, 1.98, NO_TEST, 0.10, 0.10},
    {"shallow", "\"seed\":1,\"model\":{\"depth\":2}", STORE_SUCCEEDED, 2.10, 2.20, NULL, 0.12,
     0.08},
    {"shallow", "\"seed\":2,\"model\":{\"depth\":2}", STORE_SUCCEEDED, 2.14, 2.16, NULL, 0.20,
     0.10},
    {"deep", "\"seed\":1,\"model\":{\"depth\":6}", STORE_SUCCEEDED, 1.95, 2.10, NULL, 0.20, 0.30},
    {"hot", "\"seed\":1,\"train\":{\"matrix_lr\":0.08}", STORE_SUCCEEDED, 1.90, 1.99, NULL, 0.30,
     0.10},
    {"hot", "\"seed\":2,\"train\":{\"matrix_lr\":0.08}", STORE_SUCCEEDED, 1.92, 2.01, NULL, 0.40,
     0.10},
    {"cold", "\"seed\":1,\"train\":{\"matrix_lr\":0.02}", STORE_SUCCEEDED, 2.20, NAN,
     "dataset default has no test split (--test-fraction 0)", 0.50, 0.10},
    {"gelu", "\"seed\":1,\"model\":{\"mlp\":\"gelu\"}", STORE_SUCCEEDED, 2.03, 2.09, NULL, 0.50,
     0.05},
    {"swiglu", "\"seed\":1,\"model\":{\"mlp\":\"swiglu\"}", STORE_SUCCEEDED, 2.01, 2.04, NULL, 0.60,
     0.10},
    {"tied", "\"seed\":1,\"model\":{\"tie_embeddings\":true}", STORE_SUCCEEDED, 2.06, 2.10, NULL,
     0.60, 0.20},
    {"deep hot", "\"seed\":1,\"model\":{\"depth\":6},\"train\":{\"matrix_lr\":0.08}",
     STORE_SUCCEEDED, 1.85, 1.97, NULL, 0.70, 0.30},
    {"long", "\"seed\":1,\"model\":{\"window_pattern\":\"L\"}", STORE_SUCCEEDED, 2.02, 2.07, NULL,
     0.80, 0.10},
    {"ve list", "\"seed\":1,\"model\":{\"ve_layers\":[0,3]}", STORE_SUCCEEDED, 2.05, 2.12, NULL,
     0.90, 0.10},
    {"fire", "\"seed\":1,\"model\":{\"depth\":3}", STORE_FAILED, 0, NAN, "the disk is on fire",
     0.90, 0.01},
    {"huge", "\"seed\":1,\"model\":{\"n_embd\":256}", STORE_OOM, 0, NAN, "out of memory at step 3",
     1.00, 0.02},
    {"wild", "\"seed\":1,\"train\":{\"matrix_lr\":0.5}", STORE_DIVERGED, 0, NAN,
     "diverged: loss nan at step 2 (micro-batch 1)", 1.00, 0.03},
    {"slow", "\"seed\":1,\"model\":{\"depth\":8}", STORE_TIMEOUT, 0, NAN, "killed at the deadline",
     1.10, 0.20},
    {"segv", "\"seed\":2,\"model\":{\"depth\":3}", STORE_CRASHED, 0, NAN,
     "killed by SIGSEGV | a pipe in the reason", 1.20, 0.01},
    {"laggard", "\"seed\":1,\"train\":{\"matrix_lr\":0.001}", STORE_PRUNED, 0, NAN,
     "pruned at progress 0.300: training loss 5.1 is worse than the median 4.2", 1.20, 0.04},
    /* Other scopes: never in this report. */
    {"elsewhere", "\"seed\":1,\"dataset\":\"other\"", STORE_SUCCEEDED, 1.00, 1.00, NULL, 0.05,
     0.05},
    {"tokens", "\"seed\":1,\"token_budget\":100000", STORE_SUCCEEDED, 0.50, 0.60, NULL, 0.06, 0.01},
};
#define N_NIGHT (sizeof night / sizeof night[0])

/* Queue the spec {top} as the API files a submission: its canonical form
 * (the engine's parser fills every default), configuration and scope. */
static int64_t insert(store_t *s, const char *name, const char *top) {
    char text[1024], perr[SPEC_ERR_LEN] = "", hash[SPEC_HASH_HEX];
    snprintf(text, sizeof text, "{%s}", top);
    spec_t sp;
    cr_assert_eq(spec_parse(text, strlen(text), &sp, perr, sizeof perr), 0, "%s: %s", text, perr);
    char *spec = spec_canonical_json(&sp);
    cr_assert(spec && spec_config_hash(&sp, hash) == 0);
    store_new_experiment_t e = {.name = name,
                                .spec_json = spec,
                                .config_hash = hash,
                                .seed = (int64_t)sp.seed,
                                .source = "agent"};
    spec_scope(&sp, &e.scope);
    spec_free(&sp);
    int64_t id = 0;
    cr_assert_eq(store_insert(s, &e, &id, err, sizeof err), 0, "%s", err);
    free(spec);
    return id;
}

static void claim(store_t *s, int64_t want) {
    store_experiment_t x;
    cr_assert_eq(store_claim_next(s, &x, err, sizeof err), 1, "%s", err);
    cr_assert_eq(x.id, want);
    store_experiment_clear(&x);
}

/* Set experiment id's times: started start_h and finished start_h + run_h
 * hours after 19:00 UTC (run_h < 0: not finished; start_h < 0: not started). */
static void set_times(sqlite3 *db, int64_t id, double start_h, double run_h) {
    const int64_t t0 = 1795978800000; /* 2026-11-29T19:00:00Z, ms */
    char started[STORE_TIME_LEN], finished[STORE_TIME_LEN];
    store_format_time(t0 + (int64_t)llround(start_h * 3600e3), started, sizeof started);
    store_format_time(t0 + (int64_t)llround((start_h + run_h) * 3600e3), finished, sizeof finished);
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "UPDATE experiments SET started = ?2, finished = ?3"
                                    " WHERE id = ?1",
                                    -1, &st, NULL),
                 SQLITE_OK);
    sqlite3_bind_int64(st, 1, id);
    if (start_h >= 0)
        sqlite3_bind_text(st, 2, started, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, 2);
    if (start_h >= 0 && run_h >= 0)
        sqlite3_bind_text(st, 3, finished, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, 3);
    cr_assert_eq(sqlite3_step(st), SQLITE_DONE, "%s", sqlite3_errmsg(db));
    sqlite3_finalize(st);
}

/* The night above, an interrupted, a cancelled, a running and a queued run;
 * returns the id of night[i] in ids[i]. */
static store_t *fill(int64_t *ids) {
    store_t *s = NULL;
    cr_assert_eq(store_open(tu_dir_path("nightshift.db"), &s, err, sizeof err), 0, "%s", err);
    for (size_t i = 0; i < N_NIGHT; i++) {
        const night_run_t *r = &night[i];
        int64_t id = ids[i] = insert(s, r->name, r->top);
        claim(s, id);
        int ok = !strcmp(r->status, STORE_SUCCEEDED);
        if (!isnan(r->test_bpb) || (ok && r->test_reason)) {
            store_test_t t = {.test_bpb = r->test_bpb,
                              .tokens = 1000,
                              .seconds = 1,
                              .reason = isnan(r->test_bpb) ? r->test_reason : NULL};
            cr_assert_eq(store_set_test(s, id, &t, err, sizeof err), 0, "%s", err);
        }
        store_result_t res = {
            .val_bpb = r->val_bpb, .training_seconds = 300, .peak_source = "spec"};
        cr_assert_eq(store_finish(s, id, r->status, ok ? NULL : r->test_reason, ok ? 0 : 1, -1,
                                  ok ? &res : NULL, err, sizeof err),
                     0, "%s", err);
    }
    /* Interrupted for good, cancelled while queued, running, queued. */
    int64_t intr = insert(s, "interrupted", "\"seed\":9,\"model\":{\"depth\":5}");
    claim(s, intr);
    cr_assert_eq(store_interrupt(s, intr, 1, err, sizeof err), 0, "%s", err);
    int64_t cancel = insert(s, "cancelled", "\"seed\":10,\"model\":{\"depth\":5}");
    cr_assert_eq(store_cancel_queued(s, cancel, err, sizeof err), 1, "%s", err);
    int64_t running = insert(s, "running", "\"seed\":11,\"model\":{\"depth\":5}");
    claim(s, running);
    insert(s, "queued", "\"seed\":12,\"model\":{\"depth\":5}");

    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(tu_dir_path("nightshift.db"), &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    for (size_t i = 0; i < N_NIGHT; i++) set_times(db, ids[i], night[i].start_h, night[i].run_h);
    set_times(db, intr, 1.3, 0.05);
    set_times(db, cancel, -1, -1);
    set_times(db, running, 1.35, -1);
    sqlite3_close(db);
    return s;
}

/* report_build's answer for sc (baseline as given) in a file; the check's
 * exit code and output for it. */
static int check(store_t *s, const char *dataset, const char *kind, double budget, int64_t baseline,
                 const char *tamper, char **out) {
    store_scope_t sc = {.budget = budget, .eval_tokens = SPEC_DEFAULT_EVAL_TOKENS};
    snprintf(sc.dataset, sizeof sc.dataset, "%s", dataset);
    snprintf(sc.budget_kind, sizeof sc.budget_kind, "%s", kind);
    int code = 0;
    cJSON *r = report_build(s, &sc, baseline, &code, err, sizeof err);
    cr_assert_not_null(r, "report_build: %s (%d)", err, code);
    if (tamper) { /* one number off by a little: the check must notice */
        cJSON *axes = cJSON_GetObjectItem(r, "axes");
        cJSON *m = cJSON_GetObjectItem(cJSON_GetArrayItem(axes, 0), tamper);
        cr_assert(cJSON_IsNumber(m));
        cJSON_SetNumberValue(m, m->valuedouble + 1e-4);
    }
    char *text = cJSON_Print(r), *bl = tu_path("%lld", (long long)baseline);
    cJSON_Delete(r);
    tu_write(tu_dir_path("report.json"), text);
    free(text);
    char *script = tu_path("%s/tests/report_check.py", tu_src());
    char *const argv[] = {"/usr/bin/python3",
                          script,
                          (char *)tu_dir_path("nightshift.db"),
                          (char *)tu_dir_path("report.json"),
                          bl,
                          NULL};
    tu_run_t run;
    tu_run(&run, argv, 30);
    cr_assert(!run.timed_out, "report_check.py timed out");
    *out = tu_path("%s%s", run.out, run.err);
    int rc = run.exit_code;
    tu_run_free(&run);
    free(script);
    free(bl);
    return rc;
}

static void expect_match(store_t *s, const char *dataset, const char *kind, double budget,
                         int64_t baseline, const char *want_in_output) {
    char *out;
    int rc = check(s, dataset, kind, budget, baseline, NULL, &out);
    cr_expect_eq(rc, 0, "%s %s %g (baseline %lld): the report and the database disagree:\n%s",
                 dataset, kind, budget, (long long)baseline, out);
    if (want_in_output) cr_expect(strstr(out, want_in_output), "%s", out);
    free(out);
}

Test(report, numbers_match_an_independent_recomputation) {
    int64_t ids[N_NIGHT];
    store_t *s = fill(ids);
    /* 11 configurations of the 25 runs in the scope, and the pairs one field
     * apart: depth 2-4, 4-6, 2-6, lr 0.02-0.04, 0.04-0.08, 0.02-0.08, depth 4-6 at
     * lr 0.08, lr 0.04-0.08 at depth 6, mlp x3, tie, window, ve_layers. */
    expect_match(s, "default", "time", 300, 0, "25 runs, 11 configurations, 14 one-axis pairs");
    expect_match(s, "default", "time", 300, ids[6], NULL); /* "hot" as the baseline */
    expect_match(s, "other", "time", 300, 0, "1 runs, 1 configurations");
    expect_match(s, "default", "tokens", 100000, 0, NULL);
    expect_match(s, "nothing", "time", 300, 0, "0 runs");

    /* The check is not vacuous: one number off fails it. */
    char *out;
    cr_expect_eq(check(s, "default", "time", 300, 0, "mean", &out), 1, "%s", out);
    cr_expect(strstr(out, "axes[model.depth].mean"), "%s", out);
    free(out);

    /* A baseline outside the scope is refused. */
    store_scope_t sc = {.dataset = "default",
                        .budget_kind = "time",
                        .budget = 300,
                        .eval_tokens = SPEC_DEFAULT_EVAL_TOKENS};
    int code = 0;
    cr_expect_null(report_build(s, &sc, ids[N_NIGHT - 1], &code, err, sizeof err));
    cr_expect_eq(code, NS_ERR_NOT_FOUND);
    cr_expect(strstr(err, "is not in this scope"), "%s", err);
    store_close(s);
}

/* What the report says of the night above, spot-checked by hand (the check
 * above covers every number; these are the ones a reader acts on). */
Test(report, the_answer_in_noise_units_with_its_test_figure) {
    int64_t ids[N_NIGHT];
    store_t *s = fill(ids);
    store_scope_t sc = {.dataset = "default",
                        .budget_kind = "time",
                        .budget = 300,
                        .eval_tokens = SPEC_DEFAULT_EVAL_TOKENS};
    cJSON *r = report_build(s, &sc, 0, NULL, err, sizeof err);
    cr_assert_not_null(r, "%s", err);
    const cJSON *best = cJSON_GetObjectItem(r, "best"), *base = cJSON_GetObjectItem(r, "baseline");
    cr_expect_eq(tu_jnum(best, "id"), ids[12], "deep hot (1.85) is the best");
    cr_expect_eq(tu_jnum(base, "id"), ids[0]);
    cr_expect_float_eq(tu_jnum(cJSON_GetObjectItem(best, "test"), "test_bpb"), 1.97, 1e-12);
    /* The baseline: 2.05 and 2.08 measured, the third run predates figures. */
    const cJSON *bt = cJSON_GetObjectItem(base, "test");
    cr_expect_float_eq(tu_jnum(bt, "test_bpb"), 2.065, 1e-12);
    cr_expect_eq(tu_jnum(bt, "test_n"), 2);
    cr_expect_eq(tu_jnum(bt, "runs"), 3);
    const cJSON *v = cJSON_GetObjectItem(r, "versus_baseline");
    cr_expect_float_eq(tu_jnum(v, "delta"), 1.85 - (2.00 + 2.04 + 1.98) / 3, 1e-12);
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(v, "changes")), 2);
    cr_expect_eq(tu_jnum(r, "failures_total"), 6);
    const cJSON *by = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "runs"), "by_status");
    cr_expect_eq(tu_jnum(by, "pruned"), 1);
    cr_expect_eq(tu_jnum(by, "queued"), 1);
    cr_expect_eq(tu_jnum(by, "interrupted"), 1);
    cJSON_Delete(r);
    store_close(s);
}
