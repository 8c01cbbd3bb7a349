/* test_asha.c - multi-fidelity search: asynchronous successive halving in the
 * scheduler (serve --prune asha, daemon/exec/sched.h).
 *
 * In process, a store and a scheduler with scripted results: submissions
 * filed at rung 0's budget, the promotions after every finish against an
 * oracle that replays the rule over the finishes in their order (kept by the
 * test, not read back from SQL), failed and diverged runs ranked last,
 * cancelled ones left out, the queue order, the promoted experiments' specs
 * rebuilt from their text, one transaction per promotion, and the
 * leaderboards of the rungs. With the real daemon: promotions a stopped
 * daemon left due are queued at its next start, and a night of tiny real
 * runs checked through the API and in SQL. */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <uv.h>

#include "daemon/exec/sched.h"
#include "daemon/shared/log.h"
#include "daemon/store/store.h"
#include "engine/spec.h"
#include "tests/testutil.h"

#define MAX_RUNS 128

static char err[512];

static void setup(void) {
    unsetenv("NIGHTSHIFT_TOKEN");
    log_threshold = LOG_WARN; /* the scheduler's promotions, checked in the store, not logged */
    tu_dir_init();
    cr_assert_eq(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK);
}

static void teardown(void) {
    tu_dir_fini();
    curl_global_cleanup();
}

TestSuite(asha, .init = setup, .fini = teardown, .timeout = 300);

/* ------------------------------------------------------------- in process */

typedef struct {
    uv_loop_t loop;
    store_t *store;
    sched_t *sched;
    sqlite3 *db; /* read-only, as a person with the sqlite3 shell */
} lab_t;

static void lab_open(lab_t *l, int eta, int rungs) {
    memset(l, 0, sizeof *l);
    cr_assert_eq(uv_loop_init(&l->loop), 0);
    cr_assert_eq(store_open(tu_dir_path("nightshift.db"), &l->store, err, sizeof err), 0, "%s",
                 err);
    sched_opts_t o = {.state_dir = tu_dir(),
                      .exe = tu_bin(),
                      .slots = 1,
                      .prune = SCHED_PRUNE_ASHA,
                      .asha_eta = eta,
                      .asha_rungs = rungs};
    l->sched = sched_new(&l->loop, l->store, &o, err, sizeof err);
    cr_assert_not_null(l->sched, "%s", err);
    l->db = tu_db_open(tu_dir_path("nightshift.db"));
}

static void lab_close(lab_t *l) {
    sqlite3_close(l->db);
    sched_free(l->sched);
    uv_run(&l->loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&l->loop), 0);
    store_close(l->store);
}

/* The spec text of configuration c (its matrix_lr) at a token budget. */
static char *spec_text(int c, int seed, double budget, int prune) {
    return tu_path("{\"name\":\"c%d\",\"seed\":%d,\"dataset\":\"tiny\",\"token_budget\":%.0f,"
                   "\"prune\":%s,\"model\":{\"depth\":1,\"n_embd\":32,\"n_head\":2,\"seq_len\":32},"
                   "\"train\":{\"matrix_lr\":%g,\"batch_size\":4,\"total_batch_tokens\":128}}",
                   c, seed, budget, prune ? "true" : "false", 0.001 * (c + 1));
}

/* Its configuration hash, from the text alone. */
static void hash_of(const char *text, char hash[SPEC_HASH_HEX]) {
    spec_t sp;
    char perr[SPEC_ERR_LEN];
    cr_assert_eq(spec_parse(text, strlen(text), &sp, perr, sizeof perr), 0, "%s", perr);
    cr_assert_eq(spec_config_hash(&sp, hash), 0);
    spec_free(&sp);
}

/* Submit configuration c at full budget B as the API files it: through
 * sched_asha_file, then canonical JSON, hash and scope of what it made. */
static int64_t submit(lab_t *l, int c, double budget) {
    char *text = spec_text(c, 1, budget, 1), hash[SPEC_HASH_HEX], full[SPEC_HASH_HEX];
    spec_t sp;
    store_asha_t a;
    char perr[SPEC_ERR_LEN];
    cr_assert_eq(spec_parse(text, strlen(text), &sp, perr, sizeof perr), 0, "%s", perr);
    cr_assert_eq(sched_asha_file(l->sched, &sp, &a, full, err, sizeof err), 1);
    char *canon = spec_canonical_json(&sp);
    cr_assert_eq(spec_config_hash(&sp, hash), 0);
    store_new_experiment_t e = {.name = sp.name,
                                .spec_json = canon,
                                .config_hash = hash,
                                .seed = 1,
                                .source = "api",
                                .asha = &a};
    spec_scope(&sp, &e.scope);
    int64_t id;
    cr_assert_eq(store_insert(l->store, &e, &id, err, sizeof err), 0, "%s", err);
    spec_free(&sp);
    free(canon);
    free(text);
    return id;
}

/* What the test knows of each run it finished, in finish order. */
typedef struct {
    int64_t id;
    int rung;
    int ok;   /* succeeded */
    double v; /* its val_bpb when ok */
} fin_t;

/* Whether a ranks before b in its rung: succeeded runs by val_bpb, then
 * the others; ties by id. */
static int ranks_before(const fin_t *a, const fin_t *b) {
    if (a->ok != b->ok) return a->ok;
    if (a->ok && a->v != b->v) return a->v < b->v;
    return a->id < b->id;
}

/* The oracle: replay the finishes in order; after each one, the first
 * floor(n / eta) of its rung's finished runs (failures last, ties by id) that
 * succeeded and are below the top rung are promoted, once. promoted[k] = the
 * id of the finish the k-th finish was promoted at, 0 when it never was. */
static void oracle(const fin_t *f, int n, int eta, int rungs, int64_t *promoted) {
    memset(promoted, 0, sizeof(int64_t) * (size_t)n);
    for (int t = 0; t < n; t++) {
        int r = f[t].rung, idx[MAX_RUNS], m = 0;
        if (r >= rungs - 1) continue;
        for (int k = 0; k <= t; k++)
            if (f[k].rung == r) idx[m++] = k;
        for (int i = 1; i < m; i++) /* insertion sort by rank_before */
            for (int j = i; j > 0 && ranks_before(&f[idx[j]], &f[idx[j - 1]]); j--) {
                int x = idx[j];
                idx[j] = idx[j - 1];
                idx[j - 1] = x;
            }
        for (int i = 0; i < m / eta; i++)
            if (f[idx[i]].ok && !promoted[idx[i]]) promoted[idx[i]] = f[t].id;
    }
}

static int64_t rung_of(lab_t *l, int64_t id) {
    return tu_sql_int(l->db, "SELECT rung FROM experiments WHERE id = ?1", id);
}

/* The scripted val_bpb of configuration c at rung r: a fixed shuffle of the
 * configurations, better at higher rungs. */
static double value_of(int c, int r) {
    return 2.0 + 0.01 * ((c * 37) % 101) - 0.1 * r;
}

static int config_of(lab_t *l, int64_t id) {
    return (int)tu_sql_int(l->db,
                           "SELECT CAST(substr(name, 2) AS INTEGER) FROM experiments"
                           " WHERE id = ?1",
                           id);
}

/* Claim the next run (it must be of the highest rung queued), finish it as
 * configuration c's script says, record it in f, and apply the rule. */
static void run_next(lab_t *l, fin_t *f, int *n) {
    long long top = tu_sql_int(l->db,
                               "SELECT max(coalesce(rung, 0)) FROM experiments"
                               " WHERE status = 'queued'",
                               0);
    store_experiment_t e;
    cr_assert_eq(store_claim_next(l->store, &e, err, sizeof err), 1, "%s", err);
    int r = (int)rung_of(l, e.id), c = config_of(l, e.id);
    cr_expect_eq(r, top, "experiment %lld of rung %d claimed while rung %lld waits",
                 (long long)e.id, r, top);
    cr_assert(*n < MAX_RUNS);
    fin_t *x = &f[(*n)++];
    *x = (fin_t){.id = e.id, .rung = r, .ok = c % 7 != 3 && c % 11 != 5, .v = value_of(c, r)};
    if (x->ok) {
        store_result_t res = {.val_bpb = x->v};
        cr_assert_eq(
            store_finish(l->store, e.id, STORE_SUCCEEDED, NULL, 0, -1, &res, err, sizeof err), 0,
            "%s", err);
    } else {
        const char *st = c % 7 == 3 ? STORE_FAILED : STORE_DIVERGED;
        cr_assert_eq(store_finish(l->store, e.id, st, "scripted", 1, -1, NULL, err, sizeof err), 0,
                     "%s", err);
    }
    int64_t ended = e.id;
    store_experiment_clear(&e);
    sched_asha_promote(l->sched, ended);
}

/* The promotions in the store are the oracle's, each a run at the next
 * rung's budget of the same configuration and seed, parent the promoted run. */
static void expect_promotions(lab_t *l, const fin_t *f, int n, int eta, int rungs, double full) {
    int64_t promoted[MAX_RUNS];
    oracle(f, n, eta, rungs, promoted);
    int want = 0;
    for (int k = 0; k < n; k++) {
        long long to =
            tu_sql_int(l->db, "SELECT promoted_to FROM experiments WHERE id = ?1", f[k].id);
        cr_expect_eq(to > 0, promoted[k] > 0, "experiment %lld (rung %d, %s %.2f): promoted %s",
                     (long long)f[k].id, f[k].rung, f[k].ok ? "val_bpb" : "failed", f[k].v,
                     to > 0 ? "but should not be" : "should be");
        if (!promoted[k] || to <= 0) continue;
        want++;
        cr_expect_eq(
            tu_sql_int(l->db, "SELECT promoted_by FROM experiments WHERE id = ?1", f[k].id),
            promoted[k], "decided at the end of the wrong run");
        int c = config_of(l, f[k].id), r = f[k].rung + 1;
        double b = sched_asha_budget(full, 1, eta, rungs, r);
        char *text = spec_text(c, 1, b, 1), hash[SPEC_HASH_HEX], full_hash[SPEC_HASH_HEX];
        hash_of(text, hash);
        free(text);
        text = spec_text(c, 1, full, 1);
        hash_of(text, full_hash);
        free(text);
        cr_expect_eq(rung_of(l, to), r);
        cr_expect_eq(tu_sql_int(l->db, "SELECT parent FROM experiments WHERE id = ?1", to),
                     f[k].id);
        cr_expect_eq(tu_sql_int(l->db, "SELECT seed FROM experiments WHERE id = ?1", to), 1);
        cr_expect_eq(tu_sql_double(l->db, "SELECT budget FROM experiments WHERE id = ?1", to), b);
        cr_expect_eq(tu_sql_double(l->db,
                                   "SELECT json_extract(spec, '$.token_budget') FROM experiments"
                                   " WHERE id = ?1",
                                   to),
                     b);
        sqlite3_stmt *st;
        cr_assert_eq(sqlite3_prepare_v2(l->db,
                                        "SELECT config_hash, full_config_hash FROM experiments"
                                        " WHERE id = ?1",
                                        -1, &st, NULL),
                     SQLITE_OK);
        sqlite3_bind_int64(st, 1, to);
        cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
        cr_expect_str_eq((const char *)sqlite3_column_text(st, 0), hash);
        cr_expect_str_eq((const char *)sqlite3_column_text(st, 1), full_hash);
        sqlite3_finalize(st);
    }
    cr_expect_eq(tu_sql_int(l->db, "SELECT count(*) FROM experiments WHERE rung > 0", 0), want,
                 "one experiment per promotion, no more");
}

/* Submissions are filed at rung 0's budget with their full budget beside it;
 * a spec that does not allow pruning is not. */
Test(asha, submissions_are_filed_at_the_lowest_rung) {
    lab_t l;
    lab_open(&l, 3, 3);
    cr_expect_eq(sched_asha_budget(9000, 1, 3, 3, 0), 1000);
    cr_expect_eq(sched_asha_budget(9000, 1, 3, 3, 1), 3000);
    cr_expect_eq(sched_asha_budget(9000, 1, 3, 3, 2), 9000);
    cr_expect_eq(sched_asha_budget(1000, 1, 3, 3, 0), 111, "tokens: rounded");
    cr_expect(fabs(sched_asha_budget(300, 0, 3, 3, 0) - 300.0 / 9) < 1e-12, "seconds: as is");
    cr_expect_eq(sched_asha_budget(300, 0, 2, 1, 0), 300, "one rung: the full budget");

    int64_t id = submit(&l, 4, 9000);
    cr_expect_eq(tu_sql_double(l.db, "SELECT budget FROM experiments WHERE id = ?1", id), 1000);
    cr_expect_eq(tu_sql_double(l.db, "SELECT full_budget FROM experiments WHERE id = ?1", id),
                 9000);
    cr_expect_eq(tu_sql_int(l.db, "SELECT rung FROM experiments WHERE id = ?1", id), 0);
    cr_expect_eq(tu_sql_int(l.db, "SELECT rungs * 10 + eta FROM experiments WHERE id = ?1", id),
                 33);

    char *text = spec_text(4, 1, 300, 0);
    spec_t sp;
    store_asha_t a;
    char full[SPEC_HASH_HEX], perr[SPEC_ERR_LEN];
    cr_assert_eq(spec_parse(text, strlen(text), &sp, perr, sizeof perr), 0, "%s", perr);
    cr_expect_eq(sched_asha_file(l.sched, &sp, &a, full, err, sizeof err), 0,
                 "\"prune\": false runs as submitted");
    cr_expect_eq(sp.token_budget, 300);
    spec_free(&sp);
    free(text);

    cJSON *got = NULL;
    cr_assert_eq(store_get(l.store, id, 0, &got, err, sizeof err), 0, "%s", err);
    const cJSON *as = cJSON_GetObjectItem(got, "asha");
    cr_expect_eq(tu_jnum(as, "rung"), 0);
    cr_expect_eq(tu_jnum(as, "full_budget"), 9000);
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(as, "promoted_to")));
    cJSON_Delete(got);
    lab_close(&l);
}

/* A night of 30 configurations, submitted while earlier ones finish: after
 * every finish the promotions are exactly the oracle's, promotions are
 * claimed before rung-0 work, and a second pass of the rule adds nothing. */
Test(asha, promotes_exactly_the_top_of_each_rung_as_results_arrive) {
    enum { N = 30, ETA = 3, RUNGS = 3 };
    lab_t l;
    lab_open(&l, ETA, RUNGS);
    fin_t f[MAX_RUNS];
    int n = 0, submitted = 0;
    /* one run cancelled while queued: it is not a result of its rung */
    int64_t cancelled = submit(&l, 1000, 9000);
    cr_assert_eq(store_cancel_queued(l.store, cancelled, err, sizeof err), 1);
    while (submitted < N || tu_sql_int(l.db,
                                       "SELECT count(*) FROM experiments"
                                       " WHERE status = 'queued'",
                                       0) > 0) {
        for (int k = 0; k < 2 && submitted < N; k++) submit(&l, submitted++, 9000);
        run_next(&l, f, &n);
        expect_promotions(&l, f, n, ETA, RUNGS, 9000);
    }
    cr_expect_eq(sched_asha_promote(l.sched, 0), 0, "the rule is applied once per run");
    /* every rung reached: a run of rung 2 (the full budget) was made */
    cr_expect_gt(tu_sql_int(l.db, "SELECT count(*) FROM experiments WHERE rung = 2", 0), 0);
    cr_expect_eq(
        tu_sql_int(l.db, "SELECT promoted_to IS NULL FROM experiments WHERE id = ?1", cancelled),
        1);
    lab_close(&l);
}

/* Failures rank last: three runs of a rung, two failed, one succeeded with the
 * worst number: it is the top 1/3. All failed: none is promoted. */
Test(asha, failed_runs_rank_last_and_are_never_promoted) {
    lab_t l;
    lab_open(&l, 3, 2);
    fin_t f[MAX_RUNS];
    int n = 0;
    submit(&l, 3, 900);  /* c % 7 == 3: fails */
    submit(&l, 16, 900); /* c % 11 == 5: diverges */
    submit(&l, 17, 900); /* 17 % 7 = 3: fails */
    for (int k = 0; k < 3; k++) run_next(&l, f, &n);
    cr_expect_eq(tu_sql_int(l.db, "SELECT count(*) FROM experiments WHERE rung = 1", 0), 0);
    submit(&l, 0, 900);
    submit(&l, 1, 900);
    submit(&l, 2, 900);
    while (tu_sql_int(l.db, "SELECT count(*) FROM experiments WHERE status = 'queued'", 0) > 0)
        run_next(&l, f, &n);
    expect_promotions(&l, f, n, 3, 2, 900);
    /* n = 6 at rung 0, floor(6 / 3) = 2: two of the succeeded runs */
    cr_expect_eq(tu_sql_int(l.db, "SELECT count(*) FROM experiments WHERE rung = 1", 0), 2);
    lab_close(&l);
}

/* A promotion and its experiment are one transaction: promoting a run that
 * is promoted already writes nothing, not even the new experiment. */
Test(asha, a_promotion_is_written_once_with_its_experiment) {
    lab_t l;
    lab_open(&l, 2, 2);
    fin_t f[MAX_RUNS];
    int n = 0;
    int64_t a = submit(&l, 0, 800);
    submit(&l, 1, 800);
    run_next(&l, f, &n);
    run_next(&l, f, &n);
    long long to = tu_sql_int(l.db, "SELECT promoted_to FROM experiments WHERE id = ?1", a);
    long long before = tu_sql_int(l.db, "SELECT count(*) FROM experiments", 0);
    cr_assert_gt(to, 0);

    char *text = spec_text(0, 1, 800, 1), hash[SPEC_HASH_HEX];
    hash_of(text, hash);
    store_asha_t as = {
        .rung = 1, .rungs = 2, .eta = 2, .full_budget = 800, .full_config_hash = hash};
    store_new_experiment_t e = {
        .spec_json = text, .config_hash = hash, .seed = 1, .source = "api", .asha = &as};
    snprintf(e.scope.dataset, sizeof e.scope.dataset, "tiny");
    snprintf(e.scope.budget_kind, sizeof e.scope.budget_kind, "tokens");
    e.scope.budget = 800;
    int64_t id = 0;
    cr_expect_eq(store_asha_promote(l.store, a, 0, &e, &id, err, sizeof err), 1);
    cr_expect_eq(tu_sql_int(l.db, "SELECT count(*) FROM experiments", 0), before);
    cr_expect_eq(tu_sql_int(l.db, "SELECT promoted_to FROM experiments WHERE id = ?1", a), to);
    free(text);
    lab_close(&l);
}

/* The leaderboard of the full budget holds only full-budget runs (the top
 * rung's, which trained from scratch at it); a lower rung's leaderboard shows
 * each configuration's highest rung. */
Test(asha, lower_rungs_never_appear_in_the_full_budget_leaderboard) {
    lab_t l;
    lab_open(&l, 3, 3);
    fin_t f[MAX_RUNS];
    int n = 0;
    for (int c = 0; c < 12; c++) submit(&l, c, 9000);
    while (tu_sql_int(l.db, "SELECT count(*) FROM experiments WHERE status = 'queued'", 0) > 0)
        run_next(&l, f, &n);
    int64_t eval = tu_sql_int(l.db, "SELECT eval_tokens FROM experiments LIMIT 1", 0);
    store_scope_t full = {.dataset = "tiny", .budget_kind = "tokens", .budget = 9000},
                  low = {.dataset = "tiny", .budget_kind = "tokens", .budget = 1000};
    full.eval_tokens = low.eval_tokens = eval;
    cJSON *lb = store_leaderboard(l.store, &full, 1000, err, sizeof err);
    cr_assert_not_null(lb, "%s", err);
    int rows = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, lb) {
        rows++;
        int64_t id = (int64_t)tu_jnum(r, "id");
        cr_expect_eq(rung_of(&l, id), 2, "experiment %lld of rung %lld in the full leaderboard",
                     (long long)id, (long long)rung_of(&l, id));
        cr_expect_eq(tu_jnum(r, "rung"), 2);
    }
    cr_expect_eq(rows, tu_sql_int(l.db,
                                  "SELECT count(*) FROM experiments WHERE rung = 2"
                                  " AND status = 'succeeded'",
                                  0));
    cr_expect_gt(rows, 0);
    cJSON_Delete(lb);

    lb = store_leaderboard(l.store, &low, 1000, err, sizeof err);
    cr_assert_not_null(lb, "%s", err);
    cJSON_ArrayForEach(r, lb) {
        int64_t id = (int64_t)tu_jnum(r, "id"), top = 0;
        for (int64_t x = id; x > 0;) { /* follow promoted_to up the ladder */
            top = rung_of(&l, x);
            x = tu_sql_int(l.db, "SELECT promoted_to FROM experiments WHERE id = ?1", x);
        }
        cr_expect_eq(tu_jnum(r, "rung"), top, "experiment %lld", (long long)id);
    }
    cJSON_Delete(lb);
    lab_close(&l);
}

/* ------------------------------------------------------------- the daemon */

static void start_daemon(tu_server_t *d, const char *state, const char *const *extra) {
    char *argv[32];
    int n = 0;
    argv[n++] = (char *)tu_bin();
    argv[n++] = "serve";
    argv[n++] = "--dir";
    argv[n++] = (char *)state;
    argv[n++] = "--listen";
    argv[n++] = "127.0.0.1:0";
    argv[n++] = "--memory-mb";
    argv[n++] = "0";
    argv[n++] = "--prune";
    argv[n++] = "asha";
    for (int i = 0; extra[i]; i++) argv[n++] = (char *)extra[i];
    argv[n] = NULL;
    tu_server_start(d, "daemon", argv, tu_dir_path("daemon.err"), 60);
}

/* Wait (at most limit_s) until nothing is queued or running. */
static void wait_idle(const tu_server_t *d, sqlite3 *db, double limit_s) {
    double t0 = tu_now();
    while (tu_sql_int(db, "SELECT count(*) FROM experiments WHERE status IN ('queued', 'running')",
                      0) > 0) {
        if (tu_now() - t0 > limit_s) tu_server_fail(d, "not idle after %.0f s", limit_s);
        tu_sleep_ms(200);
    }
}

/* A daemon that stopped between runs' ends and the rule (the store written
 * here as it left it) queues the promotions at its next start. */
Test(asha, a_restarted_daemon_queues_the_promotions_left_due) {
    const char *state = tu_dir();
    char *corpus = tu_path("%s/corpus.jsonl", tu_dir());
    tu_prep_tiny(corpus, state, "tiny");
    free(corpus);
    lab_t l;
    lab_open(&l, 2, 2);
    fin_t f[MAX_RUNS];
    int n = 0;
    for (int c = 0; c < 4; c++) submit(&l, c, 4096);
    /* the runs finish, and the rule never runs: as a daemon killed in between */
    for (int k = 0; k < 4; k++) {
        store_experiment_t e;
        cr_assert_eq(store_claim_next(l.store, &e, err, sizeof err), 1);
        int c = config_of(&l, e.id);
        f[n++] = (fin_t){.id = e.id, .rung = 0, .ok = 1, .v = value_of(c, 0)};
        store_result_t res = {.val_bpb = value_of(c, 0)};
        cr_assert_eq(
            store_finish(l.store, e.id, STORE_SUCCEEDED, NULL, 0, -1, &res, err, sizeof err), 0);
        store_experiment_clear(&e);
    }
    lab_close(&l);

    tu_server_t d = {0};
    char *cmd = tu_path("%s ok", tu_bad_worker());
    const char *extra[] = {"--asha-eta", "2", "--asha-rungs", "2", "--worker-cmd", cmd, NULL};
    start_daemon(&d, state, extra);
    sqlite3 *db = tu_db_open(tu_dir_path("nightshift.db"));
    wait_idle(&d, db, 60);
    int64_t promoted[MAX_RUNS];
    oracle(f, n, 2, 2, promoted); /* the whole rung at once: its top two */
    for (int k = 0; k < n; k++) {
        cr_expect_eq(tu_sql_int(db, "SELECT promoted_to IS NOT NULL FROM experiments WHERE id = ?1",
                                f[k].id),
                     promoted[k] > 0, "experiment %lld", (long long)f[k].id);
        cr_expect_eq(tu_sql_int(db, "SELECT promoted_by FROM experiments WHERE id = ?1", f[k].id),
                     -1, "decided at a start, not at a run's end");
    }
    cr_expect_eq(tu_sql_int(db, "SELECT count(*) FROM experiments WHERE rung = 1", 0), 2);
    cr_expect_eq(tu_sql_int(db,
                            "SELECT count(*) FROM experiments WHERE rung = 1"
                            " AND status = 'succeeded'",
                            0),
                 2);
    sqlite3_close(db);
    tu_server_stop(&d, 30);
    tu_server_release(&d);
    free(cmd);
}

/* The finished runs of the ladder in the order they finished, as the store
 * recorded it (a daemon with one slot finishes one at a time). */
static int finishes_of(sqlite3 *db, fin_t *f) {
    sqlite3_stmt *st;
    int n = 0;
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT e.id, e.rung, e.status = 'succeeded', r.val_bpb"
                                    " FROM experiments e LEFT JOIN results r"
                                    " ON r.experiment_id = e.id WHERE e.rung IS NOT NULL"
                                    " AND e.status NOT IN ('queued', 'running', 'cancelled',"
                                    " 'interrupted') ORDER BY e.finished, e.id",
                                    -1, &st, NULL),
                 SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW && n < MAX_RUNS)
        f[n++] =
            (fin_t){.id = sqlite3_column_int64(st, 0),
                    .rung = sqlite3_column_int(st, 1),
                    .ok = sqlite3_column_int(st, 2) && sqlite3_column_type(st, 3) != SQLITE_NULL,
                    .v = sqlite3_column_double(st, 3)};
    sqlite3_finalize(st);
    return n;
}

/* GET /v1/experiments/BY (the object the hook's experiment.finished carries)
 * lists the promotion of `from` to `to` among those its end decided. */
static void expect_announced(const tu_server_t *dp, int64_t by, int64_t from, int64_t to) {
    char path[64];
    snprintf(path, sizeof path, "/v1/experiments/%lld", (long long)by);
    cJSON *e = tu_get_json(dp, path);
    const cJSON *p, *list = cJSON_GetObjectItem(cJSON_GetObjectItem(e, "asha"), "promotions");
    int found = 0;
    cJSON_ArrayForEach(p, list) found +=
        tu_jnum(p, "id") == from && tu_jnum(p, "promoted_to") == to;
    cr_expect_eq(found, 1, "experiment %lld: the promotion of %lld to %lld is not among its %d",
                 (long long)by, (long long)from, (long long)to, cJSON_GetArraySize(list));
    cJSON_Delete(e);
}

/* The promotions of a daemon's night (eta 2, three rungs over full) are the
 * oracle's over its finishes; the API shows each on both ends; each went ahead of the rung-0 work
 * queued when it was made. */
static void check_promotions(const tu_server_t *dp, sqlite3 *db, double full) {
    fin_t f[MAX_RUNS];
    int64_t promoted[MAX_RUNS];
    int n = finishes_of(db, f), want = 0;
    oracle(f, n, 2, 3, promoted);
    for (int k = 0; k < n; k++) {
        long long to = tu_sql_int(db, "SELECT promoted_to FROM experiments WHERE id = ?1", f[k].id);
        cr_expect_eq(to > 0, promoted[k] > 0, "experiment %lld (rung %d)", (long long)f[k].id,
                     f[k].rung);
        if (to <= 0) continue;
        want++;
        expect_announced(dp, promoted[k], f[k].id, to);
        char path[64];
        snprintf(path, sizeof path, "/v1/experiments/%lld", (long long)f[k].id);
        cJSON *e = tu_get_json(dp, path);
        cr_expect_eq(tu_jnum(cJSON_GetObjectItem(e, "asha"), "promoted_to"), to);
        cJSON_Delete(e);
        snprintf(path, sizeof path, "/v1/experiments/%lld", to);
        e = tu_get_json(dp, path);
        const cJSON *as = cJSON_GetObjectItem(e, "asha");
        cr_expect_eq(tu_jnum(as, "rung"), f[k].rung + 1);
        cr_expect_eq(tu_jnum(as, "full_budget"), full);
        cr_expect_eq(tu_jnum(e, "parent"), f[k].id);
        cJSON_Delete(e);
        /* ahead of the rung-0 work queued when it was made */
        cr_expect_eq(tu_sql_int(db,
                                "SELECT count(*) FROM experiments z, experiments p"
                                " WHERE p.id = ?1 AND z.rung = 0 AND z.started > p.created"
                                " AND z.started < p.started",
                                to),
                     0, "rung-0 work started before promotion %lld", to);
    }
    cr_expect_gt(want, 0);
    cr_expect_eq(tu_sql_int(db, "SELECT count(*) FROM experiments WHERE rung > 0", 0), want);
    cr_expect_gt(tu_sql_int(db, "SELECT count(*) FROM experiments WHERE rung = 2", 0), 0);
}

/* The full-budget leaderboard holds only full-budget runs: the top rung's
 * (rung 2) and the one that never was on the ladder (plain, rung null). */
static void check_full_leaderboard(const tu_server_t *dp, sqlite3 *db, int64_t plain) {
    cJSON *lb = tu_get_json(dp, "/v1/leaderboard?dataset=tiny&budget=tokens:8192");
    const cJSON *r;
    int rows = 0;
    cJSON_ArrayForEach(r, cJSON_GetObjectItem(lb, "leaderboard")) {
        int64_t id = (int64_t)tu_jnum(r, "id");
        rows++;
        cr_expect_eq(tu_sql_double(db, "SELECT budget FROM experiments WHERE id = ?1", id), 8192);
        if (id == plain)
            cr_expect(cJSON_IsNull(cJSON_GetObjectItem(r, "rung")));
        else
            cr_expect_eq(tu_jnum(r, "rung"), 2, "experiment %lld", (long long)id);
    }
    cr_expect_eq(rows, 1 + tu_sql_int(db,
                                      "SELECT count(*) FROM experiments WHERE rung = 2"
                                      " AND status = 'succeeded'",
                                      0));
    cJSON_Delete(lb);
}

/* A night of tiny real runs under --prune asha, eta 2 and three rungs over
 * 8192 tokens: every submission ran at 2048 tokens first; the promotions are
 * the oracle's over the finishes in their order, each ahead of the rung-0
 * work queued when it was made; the API shows each run's place; the
 * full-budget leaderboard holds only full-budget runs, and `nightshift
 * leaderboard` prints the rungs. */
Test(asha, a_night_of_real_runs_through_the_api, .timeout = 400) {
    enum { N = 8 };
    const char *state = tu_dir();
    char *corpus = tu_path("%s/corpus.jsonl", tu_dir());
    tu_prep_tiny(corpus, state, "tiny");
    free(corpus);
    tu_server_t d = {0};
    const char *extra[] = {"--asha-eta", "2", "--asha-rungs", "3", NULL};
    start_daemon(&d, state, extra);
    int64_t ids[N + 1];
    for (int c = 0; c <= N; c++) { /* the last one does not allow pruning */
        char *text = tu_path(
            "{\"name\":\"c%d\",\"seed\":1,\"dataset\":\"tiny\",\"token_budget\":8192,\"prune\":%s,"
            "\"model\":{\"depth\":1,\"n_embd\":32,\"n_head\":2,\"seq_len\":32},"
            "\"train\":{\"matrix_lr\":%g,\"embedding_lr\":%g,\"batch_size\":4,"
            "\"total_batch_tokens\":128},\"resources\":{\"threads\":1,\"peak_gflops\":10}}",
            c, c == N ? "false" : "true", 0.005 * (c + 1), c % 3 == 1 ? 1e-4 : 0.6);
        cJSON *o = tu_http_json(&d, "POST", "/v1/experiments", text, 201);
        ids[c] = (int64_t)tu_jnum(o, "id");
        cJSON_Delete(o);
        free(text);
    }
    sqlite3 *db = tu_db_open(tu_dir_path("nightshift.db"));
    wait_idle(&d, db, 300);

    for (int c = 0; c < N; c++) {
        cr_expect_eq(tu_sql_double(db, "SELECT budget FROM experiments WHERE id = ?1", ids[c]),
                     2048);
        cr_expect_eq(
            tu_sql_int(db, "SELECT num_steps FROM results WHERE experiment_id = ?1", ids[c]), 16,
            "2048 tokens of 128 a step");
    }
    cr_expect_eq(tu_sql_double(db, "SELECT budget FROM experiments WHERE id = ?1", ids[N]), 8192);
    cr_expect_eq(tu_sql_int(db, "SELECT rung IS NULL FROM experiments WHERE id = ?1", ids[N]), 1);

    check_promotions(&d, db, 8192);
    check_full_leaderboard(&d, db, ids[N]);
    tu_run_t run;
    tu_run_bin(&run, 30, "leaderboard", "--url", d.url, "--budget", "tokens:2048", NULL);
    cr_expect_eq(run.exit_code, 0, "%s", run.err);
    cr_expect(strstr(run.out, "RUNG"), "%s", run.out);
    tu_run_free(&run);
    sqlite3_close(db);
    tu_server_stop(&d, 30);
    tu_server_release(&d);
}

/* A webhook receiver (Python's http.server on loopback): every POST body is
 * saved as DIR/req-N.json, the answer is 200 with no body (no proposals). */
static const char RECEIVER_PY[] =
    "import http.server, os, sys\n"
    "d = sys.argv[1]\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    n = 0\n"
    "    def do_POST(self):\n"
    "        body = self.rfile.read(int(self.headers['Content-Length']))\n"
    "        H.n += 1\n"
    "        with open(os.path.join(d, 'req-%03d.tmp' % H.n), 'wb') as f: f.write(body)\n"
    "        os.rename(os.path.join(d, 'req-%03d.tmp' % H.n), os.path.join(d, 'req-%03d.json' % "
    "H.n))\n"
    "        self.send_response(200); self.send_header('Content-Length', '0'); self.end_headers()\n"
    "    def log_message(self, *a): pass\n"
    "s = http.server.HTTPServer(('127.0.0.1', 0), H)\n"
    "print('listening on http://127.0.0.1:%d' % s.server_address[1], flush=True)\n"
    "s.serve_forever()\n";

/* The experiment.finished body the receiver got for experiment id, or NULL
 * (caller deletes). */
static cJSON *finished_body(const char *dir, int64_t id) {
    for (int k = 1; k < 100; k++) {
        char *path = tu_path("%s/req-%03d.json", dir, k), *text = tu_read(path);
        free(path);
        if (!text) return NULL;
        cJSON *o = cJSON_Parse(text);
        free(text);
        const cJSON *e = cJSON_GetObjectItem(o, "experiment");
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItem(o, "type"));
        if (type && !strcmp(type, "experiment.finished") && cJSON_IsObject(e) &&
            tu_jnum(e, "id") == id)
            return o;
        cJSON_Delete(o);
    }
    return NULL;
}

/* The bodies of the three experiment.finished events (the two rung-0 runs,
 * then the promoted one's): every key the experiment had, its asha object,
 * and the promotion of the first run in the second's. */
static void expect_bodies(const tu_server_t *d, const char *rx, const int64_t ids[2], int64_t to) {
    static const char *const keys[] = {"id", "name", "status", "reason", "spec", "result"};
    int64_t want[3] = {ids[0], ids[1], to};
    cJSON *b[3] = {NULL, NULL, NULL};
    double t0 = tu_now();
    for (int k = 0; k < 3; k++)
        while (!(b[k] = finished_body(rx, want[k]))) {
            if (tu_now() - t0 > 60)
                tu_server_fail(d, "no experiment.finished for %lld", (long long)want[k]);
            tu_sleep_ms(100);
        }
    for (int k = 0; k < 3; k++) {
        const cJSON *e = cJSON_GetObjectItem(b[k], "experiment");
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
            cr_expect(cJSON_HasObjectItem(e, keys[i]), "experiment.%s is gone", keys[i]);
        const cJSON *as = cJSON_GetObjectItem(e, "asha");
        cr_expect_eq(tu_jnum(as, "rung"), k == 2 ? 1 : 0);
        cr_expect_eq(tu_jnum(as, "full_budget"), 4096);
        const cJSON *list = cJSON_GetObjectItem(as, "promotions");
        cr_expect_eq(cJSON_GetArraySize(list), k == 1, "experiment %lld: %d promotions",
                     (long long)want[k], cJSON_GetArraySize(list));
        if (k != 1) continue;
        const cJSON *p = cJSON_GetArrayItem(list, 0);
        cr_expect_eq(tu_jnum(p, "id"), ids[0]);
        cr_expect_eq(tu_jnum(p, "promoted_to"), to);
        cr_expect_eq(tu_jnum(p, "rung"), 1);
    }
    for (int k = 0; k < 3; k++) cJSON_Delete(b[k]);
}

/* The agent hook still gets experiment.finished for every run, its
 * experiment with every key it had, and an asha object beside them that
 * says where the run stands and what its end promoted. */
Test(asha, the_hook_hears_every_run_and_each_promotion) {
    const char *state = tu_dir();
    char *corpus = tu_path("%s/corpus.jsonl", tu_dir()), *rx = tu_path("%s/rx", tu_dir());
    tu_prep_tiny(corpus, state, "tiny");
    tu_write(tu_dir_path("receiver.py"), RECEIVER_PY);
    cr_assert_eq(mkdir(rx, 0700), 0);
    tu_server_t agent = {0}, d = {0};
    char *const rargv[] = {"/usr/bin/python3", (char *)tu_dir_path("receiver.py"), rx, NULL};
    tu_server_start(&agent, "receiver", rargv, tu_dir_path("receiver.err"), 30);
    char *cmd = tu_path("%s ok", tu_bad_worker());
    const char *extra[] = {"--asha-eta",
                           "2",
                           "--asha-rungs",
                           "2",
                           "--worker-cmd",
                           cmd,
                           "--agent-url",
                           agent.url,
                           "--agent-secret",
                           "s3cret",
                           NULL};
    start_daemon(&d, state, extra);
    int64_t ids[2];
    for (int k = 0; k < 2; k++) {
        char *text = tu_path("{\"name\":\"ok\",\"seed\":%d,\"dataset\":\"tiny\",\"token_budget\":"
                             "4096,\"model\":{\"depth\":1,\"n_embd\":32,\"n_head\":2,\"seq_len\":"
                             "32}}",
                             k + 1);
        cJSON *o = tu_http_json(&d, "POST", "/v1/experiments", text, 201);
        ids[k] = (int64_t)tu_jnum(o, "id");
        cJSON_Delete(o);
        free(text);
    }
    sqlite3 *db = tu_db_open(tu_dir_path("nightshift.db"));
    /* equal val_bpb: the older run ranks first, promoted when the second
     * ends; the promotion is queued after the run's end is stored, so the
     * queue may look idle between the two */
    const double t0 = tu_now();
    long long to;
    while ((to = tu_sql_int(db, "SELECT promoted_to FROM experiments WHERE id = ?1", ids[0])) <=
           0) {
        if (tu_now() - t0 > 60)
            tu_server_fail(&d, "experiment %lld not promoted", (long long)ids[0]);
        tu_sleep_ms(100);
    }
    cr_assert_gt(to, 0);
    expect_bodies(&d, rx, ids, to);
    sqlite3_close(db);
    tu_server_stop(&d, 30);
    tu_server_release(&d);
    tu_server_release(&agent);
    free(cmd);
    free(rx);
    free(corpus);
}
