/* test_sealed.c - the test split is sealed: nothing that ranks, prunes or
 * proposes reads it.
 *
 * One tiny dataset (tu_prep_tiny) is prepared once and copied; in the copy
 * every token of test.bin but the document starts is replaced by another
 * valid token, so the copy differs from the original in its test tokens
 * alone. Then, side by side on the original and the poisoned copy:
 *
 *   - `nightshift train` of one token-budgeted spec: every step's loss,
 *     val_bpb and the evaluation are bit for bit the same; only the "test"
 *     line differs (so the poison is read where it should be);
 *   - a whole night: the daemon with median pruning and the reference agent
 *     (seeded, a fixed number of proposals, one slot, token budgets, so the
 *     night is deterministic), then one run that must be pruned: the same
 *     experiments proposed in the same order with the same parents, the same
 *     runs pruned with the same reasons, the same val_bpb, leaderboard, best
 *     and noise; the test figures differ, and no event the agent was sent
 *     mentions them.
 *
 * Pruning compares at the first step past each rung, with at most one check
 * a second per slot (sched.c); with --prune-warmup 0.9 a run of these tiny
 * budgets (a second or two) is checked once, at the first step past 0.9 of
 * its tokens, which a token budget makes the same step in both nights. */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <math.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/testutil.h"

#define START_TIMEOUT_S 20.0
#define STOP_TIMEOUT_S  10.0
#define NIGHT_TIMEOUT_S                                                                            \
    360.0           /* both nights, side by side (~10 s; minutes under the sanitizers)             \
                     */
#define PROPOSALS 6 /* the agent's --max-proposals */
#define STR_(x)   #x
#define STR(x)    STR_(x)
#define SECRET    "sealed-secret"

static tu_server_t servers[4];

static void setup(void) {
    unsetenv("NIGHTSHIFT_TOKEN");
    unsetenv("NIGHTSHIFT_AGENT_SECRET");
    cr_assert_eq(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK);
    tu_dir_init();
    /* clean/datasets/tiny, and poisoned/datasets/tiny with other test tokens */
    tu_prep_tiny(tu_dir_path("corpus.jsonl"), tu_dir_path("clean"), "tiny");
    char *mk = tu_path("mkdir -p %s/datasets && cp -r %s/datasets/tiny %s/datasets/",
                       tu_dir_path("poisoned"), tu_dir_path("clean"), tu_dir_path("poisoned"));
    cr_assert_eq(system(mk), 0, "%s", mk);
    free(mk);
    char *mpath = tu_path("%s/datasets/tiny/manifest.json", tu_dir_path("poisoned"));
    char *mtext = tu_read(mpath);
    cJSON *m = cJSON_Parse(mtext);
    double bos = tu_jnum(m, "bos_id");
    cJSON_Delete(m);
    free(mtext);
    free(mpath);
    char *path = tu_path("%s/datasets/tiny/test.bin", tu_dir_path("poisoned"));
    size_t len;
    uint16_t *t = (uint16_t *)tu_read_all(path, &len);
    cr_assert_gt(len, 1000, "the tiny dataset has no test split");
    size_t changed = 0;
    for (size_t i = 0; i < len / 2; i++)
        if (t[i] != bos) t[i] = 'z', changed++; /* BOS stays: the documents stay whole */
    cr_assert_gt(changed, len / 4);
    tu_write_n(path, t, len);
    free(t);
    free(path);
}

static void teardown(void) {
    for (int i = 0; i < 4; i++) tu_server_release(&servers[i]);
    tu_dir_fini();
    curl_global_cleanup();
}

TestSuite(sealed, .init = setup, .fini = teardown, .timeout = 420);

/* A token budget: no clock in the arithmetic, the same steps every time. */
static const char SPEC[] =
    "{\"name\":\"baseline\",\"seed\":1,\"dataset\":\"tiny\",\"token_budget\":8192,"
    "\"model\":{\"depth\":2,\"n_embd\":32,\"n_head\":2,\"seq_len\":32},"
    "\"train\":{\"batch_size\":4,\"total_batch_tokens\":128},"
    "\"resources\":{\"threads\":1,\"peak_gflops\":10}}\n";

/* A spec whose training loss stays far above any other run's. */
static const char LAGGARD[] =
    "{\"name\":\"laggard\",\"seed\":7,\"dataset\":\"tiny\",\"token_budget\":8192,"
    "\"model\":{\"depth\":2,\"n_embd\":32,\"n_head\":2,\"seq_len\":32},"
    "\"train\":{\"batch_size\":4,\"total_batch_tokens\":128,\"matrix_lr\":1e-6,"
    "\"embedding_lr\":1e-6,\"unembedding_lr\":1e-6},"
    "\"resources\":{\"threads\":1,\"peak_gflops\":10}}";

/* The progress lines of a `train` run on dir's dataset, by event (caller
 * deletes the array). */
static cJSON *train_lines(const char *dir) {
    char *spec = tu_path("%s/spec.json", tu_dir()), *prog = tu_path("%s/progress.jsonl", dir);
    tu_write(spec, SPEC);
    tu_run_bin_exit(0, 60, "train", "--dir", dir, "--progress", prog, spec, NULL);
    char *text = tu_read(prog);
    cr_assert(text, "%s: no progress file", prog);
    cJSON *lines = cJSON_CreateArray();
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        cr_assert(o, "not JSON: %s", line);
        cJSON_AddItemToArray(lines, o);
    }
    free(text);
    free(spec);
    free(prog);
    return lines;
}

static const cJSON *line_of(const cJSON *lines, const char *event) {
    const cJSON *l;
    cJSON_ArrayForEach(l, lines) {
        const char *e = tu_jstr(l, "event");
        if (e && !strcmp(e, event)) return l;
    }
    cr_assert_fail("no %s line", event);
    return NULL;
}

Test(sealed, training_and_val_bpb_never_read_the_test_tokens) {
    cJSON *a = train_lines(tu_dir_path("clean")), *b = train_lines(tu_dir_path("poisoned"));
    int steps = 0;
    const cJSON *x, *y = b->child;
    cJSON_ArrayForEach(x, a) {
        cr_assert(y, "the poisoned run has fewer lines");
        const char *ev = tu_jstr(x, "event");
        cr_assert_str_eq(ev, tu_jstr(y, "event"));
        if (!strcmp(ev, "step")) {
            steps++;
            cr_expect_eq(tu_jnum(x, "loss"), tu_jnum(y, "loss"), "step %g: loss %.9g vs %.9g",
                         tu_jnum(x, "step"), tu_jnum(x, "loss"), tu_jnum(y, "loss"));
        }
        y = y->next;
    }
    cr_expect_eq(steps, 8192 / 128);
    cr_expect_eq(tu_jnum(line_of(a, "eval"), "tokens"), tu_jnum(line_of(b, "eval"), "tokens"));
    double va = tu_jnum(line_of(a, "result"), "val_bpb"),
           vb = tu_jnum(line_of(b, "result"), "val_bpb");
    cr_expect_eq(va, vb, "val_bpb %.9g vs %.9g", va, vb);
    /* The test line reads the test tokens: the poison shows there. */
    double ta = tu_jnum(line_of(a, "test"), "test_bpb"),
           tb = tu_jnum(line_of(b, "test"), "test_bpb");
    cr_expect(isfinite(ta) && isfinite(tb) && tb > ta + 0.5, "test_bpb %.6f clean, %.6f poisoned",
              ta, tb);
    cr_expect_eq(tu_jnum(line_of(a, "test"), "tokens"), tu_jnum(line_of(b, "test"), "tokens"));
    cJSON_Delete(a);
    cJSON_Delete(b);
}

/* ------------------------------------------------------------- the nights */

/* Start the agent and the daemon of one night on dir (servers[k], [k + 1]). */
static void night_start(const char *dir, int k) {
    char *baseline = tu_path("%s/baseline.json", dir), *errs[2];
    char *state = tu_path("%s/agent-state.json", dir);
    tu_write(baseline, SPEC);
    errs[0] = tu_path("%s/agent.err", dir);
    errs[1] = tu_path("%s/daemon.err", dir);
    char *agent_argv[] = {(char *)tu_bin(),
                          "agent",
                          "--listen",
                          "127.0.0.1:0",
                          "--secret",
                          SECRET,
                          "--baseline",
                          baseline,
                          "--state",
                          state,
                          "--seed",
                          "1",
                          "--noise-seeds",
                          "2",
                          "--max-proposals",
                          STR(PROPOSALS),
                          "--queue",
                          "1",
                          NULL};
    tu_server_start(&servers[k], "agent", agent_argv, errs[0], START_TIMEOUT_S);
    char *hook = tu_path("%s/hook", servers[k].url);
    char *serve_argv[] = {
        (char *)tu_bin(), "serve", "--dir",       (char *)dir, "--listen",        "127.0.0.1:0",
        "--slots",        "1",     "--agent-url", hook,        "--agent-secret",  SECRET,
        "--memory-mb",    "0",     "--prune",     "median",    "--prune-startup", "2",
        "--prune-warmup", "0.9",   NULL};
    tu_server_start(&servers[k + 1], "daemon", serve_argv, errs[1], START_TIMEOUT_S);
    free(hook);
    free(errs[0]);
    free(errs[1]);
    free(state);
    free(baseline);
}

/* want experiments or more, none queued or running. */
static int night_done(tu_server_t *d, int want) {
    cJSON *list = tu_get_json(d, "/v1/experiments?limit=1000");
    const cJSON *e;
    int n = 0, live = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(list, "experiments")) {
        const char *st = tu_jstr(e, "status");
        n++;
        live += !strcmp(st, "queued") || !strcmp(st, "running");
    }
    cJSON_Delete(list);
    return n >= want && !live;
}

/* o's keys (NULL-terminated) as a new object: the fields of an answer that
 * rank, without the times and speeds that differ from run to run. */
static cJSON *pick(const cJSON *o, const char *const *keys) {
    cJSON *p = cJSON_CreateObject();
    for (const char *const *k = keys; *k; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, *k);
        cJSON_AddItemToObject(p, *k, v ? cJSON_Duplicate(v, 1) : cJSON_CreateNull());
    }
    return p;
}

static const char *const RANKED[] = {
    "id",   "config_hash", "val_bpb",        "mean_val_bpb", "val_bpb_sd", "n_seeds", "seeds",
    "spec", "sd",          "configurations", "runs",         "df",         NULL};

/* GET path on both nights' daemons: the ranked fields of the answer (of
 * each row of an array under key, or of the object under key) alike. */
static void expect_same_reply(const char *path, const char *key) {
    char *t[2];
    for (int k = 0; k < 2; k++) {
        cJSON *r = tu_get_json(&servers[2 * k + 1], path), *out = cJSON_CreateArray();
        const cJSON *v = key ? cJSON_GetObjectItem(r, key) : r, *row;
        cr_assert(v && !cJSON_IsNull(v), "%s: no %s", path, key ? key : "answer");
        if (cJSON_IsArray(v))
            cJSON_ArrayForEach(row, v) cJSON_AddItemToArray(out, pick(row, RANKED));
        else
            cJSON_AddItemToArray(out, pick(v, RANKED));
        t[k] = cJSON_PrintUnformatted(out);
        cJSON_Delete(out);
        cJSON_Delete(r);
    }
    cr_expect_str_eq(t[0], t[1], "%s differs between the clean and the poisoned night", path);
    free(t[0]);
    free(t[1]);
}

/* The rows of sql (every column as text, one line per row) on db. Caller frees. */
static char *rows_text(sqlite3 *db, const char *sql) {
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
    size_t cap = 1 << 16, n = 0;
    char *out = calloc(cap, 1);
    while (sqlite3_step(st) == SQLITE_ROW) {
        for (int i = 0; i < sqlite3_column_count(st); i++) {
            const char *v = (const char *)sqlite3_column_text(st, i);
            /* %.17g: REAL columns compare to the last bit */
            char num[40];
            if (sqlite3_column_type(st, i) == SQLITE_FLOAT)
                snprintf(num, sizeof num, "%.17g", sqlite3_column_double(st, i)), v = num;
            n += (size_t)snprintf(out + n, cap - n, "%s%s", i ? " | " : "", v ? v : "NULL");
            cr_assert_lt(n, cap - 1);
        }
        n += (size_t)snprintf(out + n, cap - n, "\n");
    }
    sqlite3_finalize(st);
    return out;
}

Test(sealed, a_night_ranks_prunes_and_proposes_the_same_on_poisoned_test_tokens) {
    const char *dirs[2] = {tu_dir_path("clean"), tu_dir_path("poisoned")};
    night_start(dirs[0], 0);
    night_start(dirs[1], 2);
    double deadline = tu_now() + NIGHT_TIMEOUT_S;
    for (int want = PROPOSALS; want <= PROPOSALS + 1; want++) {
        while (!(night_done(&servers[1], want) && night_done(&servers[3], want))) {
            if (tu_now() > deadline) tu_server_fail(&servers[1], "the nights did not end in time");
            tu_sleep_ms(200);
        }
        /* Then one run certain to be pruned (whatever the agent tried, which
         * depends on the build's rounding): learning rates too small to learn. */
        if (want == PROPOSALS)
            for (int k = 0; k < 2; k++)
                cJSON_Delete(
                    tu_http_json(&servers[2 * k + 1], "POST", "/v1/experiments", LAGGARD, 201));
    }

    /* The answers a person or an agent ranks by. */
    expect_same_reply("/v1/leaderboard?dataset=tiny&limit=1000", "leaderboard");
    expect_same_reply("/v1/noise?dataset=tiny", NULL);
    expect_same_reply("/v1/best?dataset=tiny", "best");
    /* ... and best's sealed figure, which must differ (the poison was read). */
    double t[2];
    for (int k = 0; k < 2; k++) {
        cJSON *b = tu_get_json(&servers[2 * k + 1], "/v1/best?dataset=tiny");
        t[k] = tu_jnum(cJSON_GetObjectItem(cJSON_GetObjectItem(b, "best"), "test"), "test_bpb");
        cJSON_Delete(b);
    }
    cr_expect(t[1] > t[0] + 0.5, "best's test_bpb %.6f clean, %.6f poisoned", t[0], t[1]);
    for (int i = 3; i >= 0; i--) tu_server_stop(&servers[i], STOP_TIMEOUT_S);

    /* The databases at rest: what was proposed (spec, parent), how it ended
     * (pruned or not, and why), its val_bpb, in order. */
    const char *proposals =
        "SELECT e.id, e.source, e.parent, e.config_hash, e.seed, e.status, e.reason,"
        " r.val_bpb FROM experiments e LEFT JOIN results r ON r.experiment_id = e.id ORDER BY e.id";
    char *text[2];
    int pruned = 0;
    for (int k = 0; k < 2; k++) {
        char *path = tu_path("%s/nightshift.db", dirs[k]);
        sqlite3 *db = tu_db_open(path);
        text[k] = rows_text(db, proposals);
        if (!k) {
            pruned =
                (int)tu_sql_int(db, "SELECT count(*) FROM experiments WHERE status = 'pruned'", 0);
            cr_expect_eq(tu_sql_int(db, "SELECT count(*) FROM experiments", 0), PROPOSALS + 1);
            cr_expect_geq(tu_sql_int(db,
                                     "SELECT count(*) FROM test_results WHERE test_bpb IS NOT"
                                     " NULL",
                                     0),
                          2, "the runs were not measured on the test split");
        }
        /* Nothing the agent was sent carries a test figure. */
        cr_expect_eq(tu_sql_int(db,
                                "SELECT count(*) FROM events WHERE payload LIKE '%test_bpb%'"
                                " OR ifnull(body, '') LIKE '%test_bpb%'",
                                0),
                     0, "an event mentions test_bpb");
        cr_expect_gt(tu_sql_int(db, "SELECT count(*) FROM events WHERE body IS NOT NULL", 0), 0,
                     "no event was delivered to the agent");
        sqlite3_close(db);
        free(path);
    }
    cr_expect_str_eq(text[0], text[1], "the nights differ:\n--- clean\n%s--- poisoned\n%s", text[0],
                     text[1]);
    cr_expect_gt(pruned, 0, "no run was pruned: the night did not exercise pruning\n%s", text[0]);
    cr_log_info("sealed: %d experiments, %d pruned, alike on both nights", PROPOSALS + 1, pruned);
    /* The figures themselves differ run by run. */
    char *path = tu_path("%s/nightshift.db", dirs[0]);
    sqlite3 *db = tu_db_open(path);
    free(path);
    char *attach = tu_path("ATTACH '%s/nightshift.db' AS p", dirs[1]);
    cr_assert_eq(sqlite3_exec(db, attach, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
    cr_expect_eq(tu_sql_int(db,
                            "SELECT count(*) FROM test_results t JOIN p.test_results u"
                            " USING (experiment_id) WHERE u.test_bpb > t.test_bpb + 0.5",
                            0),
                 tu_sql_int(db, "SELECT count(*) FROM test_results WHERE test_bpb IS NOT NULL", 0));
    sqlite3_close(db);
    free(attach);
    free(text[0]);
    free(text[1]);
}
