/* store_bench.c - how fast the scoped queries are on a big store.
 *
 *   make bench-store                  (build/store-bench N REPEATS)
 *
 * Fills a fresh store with N experiments (default 100,000) in 8 scopes (4
 * datasets x 2 time budgets), each scope 5 seeds of N/40 configurations, 90%
 * succeeded with a result, then times store_leaderboard (limit 20),
 * store_best_in and store_noise in one scope and store_scopes (the list
 * every scoped reply carries), REPEATS times each (default
 * 20), and prints the median and the slowest, and the query plan of the
 * leaderboard; then GET /metrics' body (metrics_render, whose store part is
 * store_totals) as a scrape sees it right after a run finished (the sums
 * of the results read again) and as the next scrape does ("keep" as a
 * third argument keeps the database and prints its path). Rows are written through a second connection in one
 * transaction (the store's own inserts are one transaction each). */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/serve/metrics.h"
#include "daemon/store/store.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void check(int rc, sqlite3 *db, const char *what) {
    if (rc == SQLITE_OK || rc == SQLITE_DONE || rc == SQLITE_ROW) return;
    fprintf(stderr, "store-bench: %s: %s\n", what, sqlite3_errmsg(db));
    exit(1);
}

static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The median and max wall-clock milliseconds and the median CPU
 * milliseconds of reps runs (on a loaded machine the wall clock also counts
 * waiting for a core). */
static void report(const char *label, double *wall, double *cpu, int reps) {
    qsort(wall, (size_t)reps, sizeof *wall, cmp);
    qsort(cpu, (size_t)reps, sizeof *cpu, cmp);
    printf("%-24s wall median %7.2f ms, max %7.2f ms; cpu median %7.2f ms (%d runs)\n", label,
           wall[reps / 2], wall[reps - 1], cpu[reps / 2], reps);
}

/* Time expr (a new cJSON tree) reps times. */
#define TIME(label, reps, expr)                                                                    \
    do {                                                                                           \
        double w_[1000], c_[1000];                                                                 \
        for (int i_ = 0; i_ < (reps); i_++) {                                                      \
            double w0_ = now_ms(), c0_ = cpu_ms();                                                 \
            cJSON *j_ = (expr);                                                                    \
            w_[i_] = now_ms() - w0_;                                                               \
            c_[i_] = cpu_ms() - c0_;                                                               \
            if (!j_) {                                                                             \
                fprintf(stderr, "store-bench: %s: %s\n", label, err);                              \
                exit(1);                                                                           \
            }                                                                                      \
            cJSON_Delete(j_);                                                                      \
        }                                                                                          \
        report(label, w_, c_, reps);                                                               \
    } while (0)

/* n experiments in 8 scopes (5 seeds of each configuration, a tenth
 * failed) written straight into the database at path, then its leaderboard
 * query plan. */
static void load(const char *path, long n) {
    sqlite3 *db;
    check(sqlite3_open(path, &db), db, "open");
    double t0 = now_ms();
    check(sqlite3_exec(db, "BEGIN", NULL, NULL, NULL), db, "begin");
    sqlite3_stmt *ins, *res;
    check(sqlite3_prepare_v2(db,
                             "INSERT INTO experiments (id, spec, dataset, budget_kind, budget, seed,"
                             " source, status, config_hash, finished) VALUES (?1, ?2,"
                             " json_extract(?2, '$.dataset'), 'time',"
                             " json_extract(?2, '$.time_budget_s'), ?4, 'api', ?5, ?6,"
                             " strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
                             -1, &ins, NULL),
          db, "prepare");
    check(sqlite3_prepare_v2(db,
                             "INSERT INTO results (experiment_id, val_bpb, total_tokens,"
                             " training_seconds) VALUES (?1, ?2, ?3, ?4)",
                             -1, &res, NULL),
          db, "prepare");
    long configs = n / 40; /* per scope, 5 seeds each */
    srand(1);
    for (long id = 1; id <= n; id++) {
        long k = id - 1, scope = k % 8, cfg = (k / 8) % configs, seed = k / (8 * configs);
        char spec[256], chash[64];
        snprintf(spec, sizeof spec,
                 "{\"dataset\":\"d%ld\",\"model\":{\"depth\":%ld,\"n_embd\":%ld},\"seed\":%ld,"
                 "\"time_budget_s\":%d}",
                 scope / 2, 1 + cfg % 8, 32 * (1 + cfg % 16), seed, scope % 2 ? 300 : 60);
        snprintf(chash, sizeof chash, "c%ld-%ld", scope, cfg);
        int ok = rand() % 10 != 0;
        sqlite3_bind_int64(ins, 1, id);
        sqlite3_bind_text(ins, 2, spec, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(ins, 4, seed);
        sqlite3_bind_text(ins, 5, ok ? "succeeded" : "failed", -1, SQLITE_STATIC);
        sqlite3_bind_text(ins, 6, chash, -1, SQLITE_TRANSIENT);
        check(sqlite3_step(ins), db, "insert");
        sqlite3_reset(ins);
        if (ok) {
            sqlite3_bind_int64(res, 1, id);
            sqlite3_bind_double(res, 2, 1.0 + (cfg % 997) / 1000.0 + (rand() % 100) / 1e5);
            sqlite3_bind_double(res, 3, 1e7 + rand() % 1000000);
            sqlite3_bind_double(res, 4, scope % 2 ? 300 : 60);
            check(sqlite3_step(res), db, "result");
            sqlite3_reset(res);
        }
    }
    sqlite3_finalize(ins);
    sqlite3_finalize(res);
    check(sqlite3_exec(db, "COMMIT; ANALYZE", NULL, NULL, NULL), db, "commit");
    printf("loaded %ld experiments (%ld configurations x 5 seeds in 8 scopes) in %.1f s\n", n,
           configs, (now_ms() - t0) / 1e3);

    sqlite3_stmt *plan;
    check(sqlite3_prepare_v2(db,
                             "EXPLAIN QUERY PLAN SELECT * FROM leaderboard WHERE dataset = 'd1'"
                             " AND budget_kind = 'time' AND budget = 300 AND eval_tokens = 0"
                             " LIMIT 20",
                             -1, &plan, NULL),
          db, "plan");
    printf("leaderboard query plan:\n");
    while (sqlite3_step(plan) == SQLITE_ROW)
        printf("  %s\n", (const char *)sqlite3_column_text(plan, 3));
    sqlite3_finalize(plan);
    sqlite3_close(db);

}

/* One run through the store as the scheduler takes it: queued, claimed,
 * finished with a result (store_finishes moves). */
static void finish_one(store_t *s, long k) {
    char err[512], spec[128];
    int64_t id;
    snprintf(spec, sizeof spec, "{\"dataset\":\"d0\",\"time_budget_s\":60,\"seed\":%ld}", k);
    store_new_experiment_t e = {.spec_json = spec, .config_hash = "bench", .seed = k,
                                .source = "api", .scope = {.dataset = "d0", .budget_kind = "time", .budget = 60}};
    store_experiment_t got = {0};
    store_result_t r = {.val_bpb = 1.5, .total_tokens = 1e7, .training_seconds = 60};
    if (store_insert(s, &e, &id, err, sizeof err) < 0 || store_claim_next(s, &got, err, sizeof err) < 0 ||
        store_finish(s, got.id, STORE_SUCCEEDED, NULL, 0, 0, &r, err, sizeof err) < 0) {
        fprintf(stderr, "store-bench: finish: %s\n", err);
        exit(1);
    }
    store_experiment_clear(&got);
}

/* metrics_render reps times right after a run finished, and reps times
 * with nothing finished in between. */
static void time_metrics(store_t *s, int reps) {
    metrics_t *m = metrics_new(s, NULL);
    double w[2][1000], c[2][1000];
    size_t bytes = 0;
    char err[512];
    for (int i = 0; m && i < 2 * reps; i++) {
        int after_finish = i % 2 == 0;
        if (after_finish) finish_one(s, i);
        bytebuf_t b;
        bytebuf_init(&b, BYTEBUF_UNLIMITED);
        double w0 = now_ms(), c0 = cpu_ms();
        if (metrics_render(m, &b, err, sizeof err) < 0) {
            fprintf(stderr, "store-bench: metrics: %s\n", err);
            exit(1);
        }
        w[!after_finish][i / 2] = now_ms() - w0;
        c[!after_finish][i / 2] = cpu_ms() - c0;
        bytes = b.len;
        bytebuf_free(&b);
    }
    report("metrics, a run finished", w[0], c[0], reps);
    report("metrics, next scrape", w[1], c[1], reps);
    printf("metrics body: %zu bytes\n", bytes);
    metrics_free(m);
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100000;
    int reps = argc > 2 ? atoi(argv[2]) : 20;
    if (n < 40 || reps < 1 || reps > 1000) {
        fprintf(stderr, "usage: store-bench [N >= 40] [REPEATS 1..1000]\n");
        return 2;
    }
    char dir[] = "/tmp/store-bench-XXXXXX", path[64], err[512];
    if (!mkdtemp(dir)) return 1;
    snprintf(path, sizeof path, "%s/nightshift.db", dir);
    store_t *s = NULL;
    if (store_open(path, &s, err, sizeof err) < 0) {
        fprintf(stderr, "store-bench: %s\n", err);
        return 1;
    }
    load(path, n);
    store_scope_t sc = {.budget = 300};
    snprintf(sc.dataset, sizeof sc.dataset, "d1");
    snprintf(sc.budget_kind, sizeof sc.budget_kind, "time");
    TIME("leaderboard (limit 20)", reps, store_leaderboard(s, &sc, 20, err, sizeof err));
    TIME("best", reps, store_best_in(s, &sc, err, sizeof err));
    TIME("noise", reps, store_noise(s, &sc, err, sizeof err));
    TIME("scopes", reps, store_scopes(s, 50, err, sizeof err));
    time_metrics(s, reps);
    store_close(s);
    if (argc > 3 && !strcmp(argv[3], "keep")) {
        printf("kept %s\n", path);
        return 0;
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : 1;
}
