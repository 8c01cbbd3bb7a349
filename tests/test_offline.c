/* test_offline.c - the morning answer without the daemon: a real daemon runs
 * two tiny experiments and is stopped; `best`, `leaderboard`, `ls`, `show`
 * and `report` then answer from its state directory's database, read-only,
 * with what they said while it ran, and say so on stderr. The daemon's log
 * of the same runs gives their token budgets. Every wait is bounded. */
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/testutil.h"

static char *state; /* tu_dir()/state */

static void setup(void) {
    tu_dir_init();
    state = tu_path("%s/state", tu_dir());
    cr_assert_eq(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK);
}

static void teardown(void) {
    free(state);
    tu_dir_fini();
    curl_global_cleanup();
}

TestSuite(offline, .init = setup, .fini = teardown, .timeout = 120);

/* Poll experiment id until it has ended; it must have succeeded. */
static void wait_succeeded(const tu_server_t *d, long id) {
    char path[64];
    snprintf(path, sizeof path, "/v1/experiments/%ld", id);
    for (double t = tu_now() + 90;; tu_sleep_ms(100)) {
        cJSON *e = tu_get_json(d, path);
        const char *st = tu_jstr(e, "status");
        int done = st && strcmp(st, "queued") && strcmp(st, "running");
        if (done) cr_assert_str_eq(st, "succeeded", "experiment %ld: %s", id, tu_jstr(e, "reason"));
        cJSON_Delete(e);
        if (done) return;
        cr_assert_lt(tu_now(), t, "experiment %ld did not finish", id);
    }
}

/* The report without its "generated" line (the time it was built). */
static char *without_generated(const char *text) {
    char *out = strdup(text), *o = out;
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, "\n");
        if (!strstr(p, "enerated") || (size_t)(strstr(p, "enerated") - p) > n) {
            memcpy(o, p, n);
            o += n;
            if (p[n]) *o++ = '\n';
        }
        p += n + (p[n] != 0);
    }
    *o = '\0';
    return out;
}

#define N_ASKS 6
static const char *const asks[N_ASKS][3] = {
    {"best", NULL}, {"best", "--json"}, {"leaderboard", NULL},
    {"ls", NULL},   {"show", "1"},      {"report", NULL},
};

/* The answers to asks while the daemon runs and after it stopped must be
 * the same, the latter saying once where they come from; the database is
 * not changed by them. */
Test(offline, best_and_report_answer_from_a_stopped_daemons_state) {
    tu_prep_tiny(tu_dir_path("corpus.jsonl"), state, "default");
    cr_assert_eq(setenv("NIGHTSHIFT_DIR", state, 1), 0);
    tu_server_t d;
    tu_daemon_start(&d, state, NULL, 30);
    long ids[2];
    for (int i = 0; i < 2; i++) {
        char *s = tu_path("{\"name\":\"small %d\",\"seed\":%d,\"token_budget\":2048,"
                          "\"model\":{\"depth\":%d,\"n_embd\":32,\"n_head\":2,\"seq_len\":32},"
                          "\"train\":{\"batch_size\":4,\"total_batch_tokens\":128},"
                          "\"resources\":{\"threads\":1,\"peak_gflops\":10}}",
                          i + 1, i + 1, i + 1);
        cJSON *o = tu_http_json(&d, "POST", "/v1/experiments", s, 201);
        ids[i] = (long)tu_jnum(o, "id");
        cJSON_Delete(o);
        free(s);
    }
    for (int i = 0; i < 2; i++) wait_succeeded(&d, ids[i]);

    char *live[N_ASKS];
    tu_run_t r;
    for (int i = 0; i < N_ASKS; i++) {
        tu_run_bin(&r, 30, asks[i][0], "--url", d.url, asks[i][1], NULL);
        cr_assert_eq(r.exit_code, 0, "%s: %s", asks[i][0], r.err);
        cr_expect(!strstr(r.err, "answering from"), "%s said %s with the daemon up", asks[i][0],
                  r.err);
        live[i] = strdup(r.out);
        tu_run_free(&r);
    }
    tu_server_stop(&d, 30);
    /* the daemon's log gives a token-budget run its budget in tokens */
    char *log = tu_read(d.errlog);
    cr_assert(log);
    cr_expect(strstr(log, "experiment 1 started (") && strstr(log, ", budget 2048 tokens)\n") &&
                  !strstr(log, "budget 0 s"),
              "%s", log);
    free(log);
    char *db_path = tu_path("%s/nightshift.db", state);
    size_t db_len;
    char *db_before = tu_read_all(db_path, &db_len);

    char *said = tu_path("nightshift: answering from %s/nightshift.db because no daemon answers "
                         "at %s\n",
                         state, d.url);
    for (int i = 0; i < N_ASKS; i++) {
        tu_run_bin(&r, 30, asks[i][0], "--url", d.url, asks[i][1], NULL);
        cr_assert_eq(r.exit_code, 0, "%s %s from the database: exit %d: %s", asks[i][0],
                     asks[i][1] ? asks[i][1] : "", r.exit_code, r.err);
        cr_expect(!strncmp(r.err, said, strlen(said)) &&
                      !strstr(r.err + strlen(said), "answering from"),
                  "%s: stderr %s", asks[i][0], r.err);
        cr_expect(!strstr(r.err, "cannot reach"), "%s: %s", asks[i][0], r.err);
        int report = !strcmp(asks[i][0], "report");
        char *want = report ? without_generated(live[i]) : strdup(live[i]);
        char *got = report ? without_generated(r.out) : strdup(r.out);
        cr_expect_str_eq(got, want, "%s %s: from the database\n%s\nfrom the daemon\n%s", asks[i][0],
                         asks[i][1] ? asks[i][1] : "", got, want);
        free(want);
        free(got);
        tu_run_free(&r);
        free(live[i]);
    }
    size_t after_len;
    char *db_after = tu_read_all(db_path, &after_len);
    cr_expect(after_len == db_len && !memcmp(db_before, db_after, db_len),
              "the database changed under the readers");

    /* what is not a read is not answered from the database */
    tu_run_bin(&r, 30, "cancel", "--url", d.url, "1", NULL);
    cr_expect_eq(r.exit_code, 3, "cancel without the daemon: %s", r.err);
    cr_expect(strstr(r.err, "cannot reach the daemon"), "%s", r.err);
    tu_run_free(&r);
    /* no database in the state directory: unreachable, as before */
    cr_assert_eq(setenv("NIGHTSHIFT_DIR", tu_dir_path("none"), 1), 0);
    tu_run_bin(&r, 30, "best", "--url", d.url, NULL);
    cr_expect_eq(r.exit_code, 3, "%s", r.err);
    cr_expect(strstr(r.err, "cannot reach the daemon") && !strstr(r.err, "answering"), "%s", r.err);
    tu_run_free(&r);
    free(said);
    free(db_path);
    free(db_before);
    free(db_after);
    tu_server_release(&d);
}
