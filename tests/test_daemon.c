/* test_daemon.c - the daemon end to end: `nightshift serve` started as a child
 * process on 127.0.0.1 port 0 and driven over HTTP (libcurl), its database
 * read with SQL while or after it runs.
 *
 * Each test gets a state directory with a tiny prepared dataset (tu_prep_tiny,
 * as in test_train.c), starts one or more daemons on it, and stops them at the
 * end (SIGTERM, then SIGKILL); the process, HTTP and SQL helpers are in
 * testutil.h. A daemon dies with its test process (PR_SET_PDEATHSIG), so a
 * test killed by its timeout leaves nothing running.
 * Real training runs use a tiny model with a 1-2 s budget; the fault, cancel,
 * guard and CLI tests use the stand-in worker (tests/bad_worker.c) in its
 * from-spec mode, where each experiment's name picks the behaviour. Every
 * wait is a bounded poll with a hard deadline. The daemon's stderr goes to a
 * file, quoted when a test fails and searched for sanitizer reports.
 *
 * Every test runs under the suite's one .timeout, on purpose: Criterion
 * 2.4's runner keeps timeouts in a list sorted by deadline, and inserting a
 * deadline earlier than a pending one drops the rest of that list (those
 * timeouts are lost and LeakSanitizer reports the runner). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/testutil.h"

#define START_TIMEOUT_S 20.0 /* until the daemon prints its port (sanitizer builds are slow) */
#define STOP_TIMEOUT_S  10.0 /* SIGTERM to exit */
#define LATENCY_BOUND_S 1.0  /* /healthz and /v1/status while workers misbehave */
#define MAX_DAEMONS     4
#define MIB             ((size_t)1 << 20)

typedef tu_server_t daemon_t;

static char *tmp;   /* the test's directory */
static char *state; /* tmp/state: the daemons' --dir, with datasets/tiny */
static daemon_t daemons[MAX_DAEMONS];
static int n_daemons;

/* ---------------------------------------------------------------- fixture */

static void setup(void) {
    /* The tests decide about tokens themselves. */
    unsetenv("NIGHTSHIFT_TOKEN");
    tu_bad_worker(); /* must be set: the stand-in tests need it */
    cr_assert_eq(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK);
    tmp = tu_tmpdir();
    state = tu_path("%s/state", tmp);
    char *corpus = tu_path("%s/corpus.jsonl", tmp);
    tu_prep_tiny(corpus, state, "tiny");
    free(corpus);
}

static void teardown(void) {
    for (int i = 0; i < n_daemons; i++) tu_server_release(&daemons[i]);
    n_daemons = 0;
    tu_rmrf(tmp);
    free(tmp);
    free(state);
    curl_global_cleanup();
}

TestSuite(daemon, .init = setup, .fini = teardown, .timeout = 90);

/* ------------------------------------------------------------- the daemon */

/* Start `nightshift serve --dir DIR --listen 127.0.0.1:0 EXTRA...` and read
 * the port it prints. The daemon is owned by the test (stopped by
 * daemon_stop or daemon_kill, else by the teardown). */
static daemon_t *daemon_start(const char *dir, const char *const *extra) {
    cr_assert(n_daemons < MAX_DAEMONS);
    daemon_t *d = &daemons[n_daemons];
    char errlog[4096];
    snprintf(errlog, sizeof errlog, "%s/daemon-%d.err", tmp, n_daemons);

    char *argv[32];
    int n = 0;
    argv[n++] = (char *)tu_bin();
    argv[n++] = "serve";
    argv[n++] = "--dir";
    argv[n++] = (char *)dir;
    argv[n++] = "--listen";
    argv[n++] = "127.0.0.1:0";
    /* No default memory limit: an ASan-built train cannot run under RLIMIT_AS
     * (the stand-in's oom test sets its own limit in the spec). */
    argv[n++] = "--memory-mb";
    argv[n++] = "0";
    argv[n++] = "--dataset"; /* what the leaderboard, best and noise default to */
    argv[n++] = "tiny";
    for (int i = 0; extra && extra[i]; i++) {
        cr_assert(n < 31);
        argv[n++] = (char *)extra[i];
    }
    argv[n] = NULL;
    n_daemons++; /* released by the teardown from here on */
    tu_server_start(d, "daemon", argv, errlog, START_TIMEOUT_S);
    return d;
}

/* SIGTERM, wait for the exit (SIGKILL after STOP_TIMEOUT_S: a failure).
 * Expects a clean shutdown: exit 0 and no sanitizer report. */
static void daemon_stop(daemon_t *d) {
    tu_server_stop(d, STOP_TIMEOUT_S);
}

/* ------------------------------------------------------------------- HTTP */

/* POST one spec that must be accepted as new (201); returns its id. */
static long submit(const daemon_t *d, const char *spec) {
    cJSON *o = tu_http_json(d, "POST", "/v1/experiments", spec, 201);
    long id = (long)tu_jnum(o, "id");
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(o, "duplicate")));
    cJSON_Delete(o);
    return id;
}

/* An error reply: the status, the envelope's code, and its message (which
 * must contain want_msg); returns nothing, frees everything. */
static void expect_error(const daemon_t *d, const char *method, const char *path, const char *body,
                         size_t len, long want_status, const char *want_code,
                         const char *want_msg) {
    tu_reply_t r;
    tu_http(d, method, path, body, len, NULL, &r);
    cr_expect_eq(r.status, want_status, "%s %s: HTTP %ld, expected %ld: %.300s", method, path,
                 r.status, want_status, r.body);
    cJSON *o = cJSON_Parse(r.body);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "error");
    cr_expect(cJSON_IsObject(e), "%s %s: no error envelope: %.300s", method, path, r.body);
    const char *code = tu_jstr(e, "code"), *msg = tu_jstr(e, "message");
    cr_expect(code && !strcmp(code, want_code), "%s %s: code %s, expected %s", method, path,
              code ? code : "(none)", want_code);
    cr_expect(msg && strstr(msg, want_msg), "%s %s: message '%s' lacks '%s'", method, path,
              msg ? msg : "(none)", want_msg);
    cJSON_Delete(o);
    tu_reply_free(&r);
}

/* ------------------------------------------------------------ experiments */

static int is_terminal(const char *status) {
    return status && strcmp(status, "queued") != 0 && strcmp(status, "running") != 0;
}

/* GET /v1/experiments/{id} (caller deletes). */
static cJSON *get_experiment(const daemon_t *d, long id) {
    char path[64];
    snprintf(path, sizeof path, "/v1/experiments/%ld", id);
    return tu_get_json(d, path);
}

/* Poll experiment id until its status is want (NULL: any terminal status),
 * at most timeout_s; returns the experiment (caller deletes). Reaching
 * another terminal status, or the deadline, fails the test. */
static cJSON *wait_for(const daemon_t *d, long id, const char *want, double timeout_s) {
    double deadline = tu_now() + timeout_s;
    for (;;) {
        cJSON *e = get_experiment(d, id);
        const char *st = tu_jstr(e, "status");
        if (want ? st && !strcmp(st, want) : is_terminal(st)) return e;
        if (want && is_terminal(st))
            tu_server_fail(d, "experiment %ld ended %s (%s), expected %s", id, st,
                           tu_jstr(e, "reason") ? tu_jstr(e, "reason") : "no reason", want);
        if (tu_now() > deadline)
            tu_server_fail(d, "experiment %ld still %s after %g s (waiting for %s)", id,
                           st ? st : "?", timeout_s, want ? want : "an end");
        cJSON_Delete(e);
        tu_sleep_ms(50);
    }
}

/* GET /v1/experiments lists nothing: every request so far was refused. */
static void expect_nothing_queued(const daemon_t *d) {
    cJSON *list = tu_get_json(d, "/v1/experiments");
    int n = cJSON_GetArraySize(cJSON_GetObjectItem(list, "experiments"));
    cr_expect_eq(n, 0, "%d experiments were queued", n);
    cJSON_Delete(list);
}

/* Poll experiment id until it reports progress at step min_step or later
 * (0: any progress), at most timeout_s; the run ending first, or the
 * deadline, fails the test. */
static void wait_progress(const daemon_t *d, long id, int min_step, double timeout_s) {
    double deadline = tu_now() + timeout_s;
    for (;;) {
        cJSON *e = get_experiment(d, id);
        const cJSON *p = cJSON_GetObjectItem(e, "progress");
        int stepping = cJSON_IsObject(p) && (min_step == 0 || tu_jnum(p, "step") >= min_step);
        const char *st = tu_jstr(e, "status");
        if (is_terminal(st))
            tu_server_fail(d, "experiment %ld ended %s before it reported progress", id, st);
        cJSON_Delete(e);
        if (stepping) return;
        if (tu_now() > deadline)
            tu_server_fail(d, "no progress from experiment %ld within %g s", id, timeout_s);
        tu_sleep_ms(20);
    }
}

/* A spec for the tiny dataset. name is also the stand-in's mode; seeds keep
 * otherwise equal specs from being answered as duplicates. resources_extra
 * is spliced into "resources" (e.g. ",\"memory_mb\":64"). Caller frees. */
static char *spec(const char *name, int seed, double budget, int depth,
                  const char *resources_extra) {
    return tu_path("{\"name\":\"%s\",\"dataset\":\"tiny\",\"seed\":%d,\"time_budget_s\":%g,"
                   "\"model\":{\"depth\":%d,\"n_embd\":32,\"n_head\":2,\"seq_len\":32},"
                   "\"train\":{\"batch_size\":4,\"total_batch_tokens\":128},"
                   "\"resources\":{\"threads\":1,\"peak_gflops\":10%s}}",
                   name, seed, budget, depth, resources_extra ? resources_extra : "");
}

/* The stand-in worker as the daemon's worker command. Caller frees. */
static char *stand_in_cmd(void) {
    return tu_path("%s from-spec", tu_bad_worker());
}

/* ------------------------------------------------------------------- SQL */

/* The daemon's database, read-only (it may be running). */
static sqlite3 *db_open(void) {
    char *path = tu_path("%s/nightshift.db", state);
    sqlite3 *db = tu_db_open(path);
    free(path);
    return db;
}

/* The status column of experiment id (compared, not returned, to keep
 * ownership simple). */
static int sql_status_is(sqlite3 *db, long long id, const char *want) {
    sqlite3_stmt *st = NULL;
    cr_assert_eq(
        sqlite3_prepare_v2(db, "SELECT status FROM experiments WHERE id = ?1", -1, &st, NULL),
        SQLITE_OK);
    sqlite3_bind_int64(st, 1, id);
    int ok =
        sqlite3_step(st) == SQLITE_ROW && !strcmp((const char *)sqlite3_column_text(st, 0), want);
    sqlite3_finalize(st);
    return ok;
}

/* ================================================================= tests */

/* Invalid, malformed, oversized and partly invalid batch submissions are
 * refused with the field path and the reason, and queue nothing. */
Test(daemon, invalid_submissions_queue_nothing) {
    daemon_t *d = daemon_start(state, NULL);
    const char *bad = "{\"dataset\":\"tiny\",\"model\":{\"n_embd\":128,\"n_head\":7}}";
    expect_error(d, "POST", "/v1/experiments", bad, strlen(bad), 400, "invalid_spec",
                 "model.n_head: 7 does not divide n_embd 128");
    const char *typo = "{\"dataset\":\"tiny\",\"modle\":{}}";
    expect_error(d, "POST", "/v1/experiments", typo, strlen(typo), 400, "invalid_spec", "modle");
    expect_error(d, "POST", "/v1/experiments", "{not json", 9, 400, "invalid_json", "JSON");

    /* oversized: a body over the 1 MiB limit */
    size_t big_len = MIB + 64;
    char *big = malloc(big_len + 1);
    cr_assert(big);
    memset(big, ' ', big_len);
    memcpy(big, "{\"name\":\"", 9);
    big[big_len - 2] = '"';
    big[big_len - 1] = '}';
    big[big_len] = '\0';
    expect_error(d, "POST", "/v1/experiments", big, big_len, 413, "body_too_large", "limit");
    free(big);

    /* a batch with one invalid spec: the index in the path, nothing queued */
    char *c = spec("c", 7, 1, 1, NULL);
    char *batch = tu_path("[%s,{\"dataset\":\"tiny\",\"model\":{\"n_embd\":128,\"n_head\":7}}]", c);
    expect_error(d, "POST", "/v1/experiments", batch, strlen(batch), 400, "invalid_spec",
                 "[1].model.n_head: 7 does not divide n_embd 128");
    /* an unknown dataset */
    const char *nodata = "{\"dataset\":\"nope\"}";
    expect_error(d, "POST", "/v1/experiments", nodata, strlen(nodata), 400, "invalid_spec",
                 "dataset: no dataset named 'nope'");

    expect_nothing_queued(d);
    daemon_stop(d);
    free(c), free(batch);
}

/* A resubmitted spec is answered with the first submission's id and its
 * current status (a new name does not make it new); ?force=1 queues it again. */
Test(daemon, duplicates_answer_with_the_first) {
    daemon_t *d = daemon_start(state, NULL);
    char *a = spec("a", 1, 1, 1, NULL);
    long id_a = submit(d, a);
    cJSON *dup = tu_http_json(d, "POST", "/v1/experiments", a, 200);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(dup, "duplicate")));
    cr_expect_eq((long)tu_jnum(dup, "id"), id_a);
    cJSON_Delete(dup);
    char *a_renamed = spec("a-again", 1, 1, 1, NULL);
    dup = tu_http_json(d, "POST", "/v1/experiments", a_renamed, 200);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(dup, "duplicate")));
    cr_expect_eq((long)tu_jnum(dup, "id"), id_a);
    cJSON_Delete(dup);
    cJSON *forced = tu_http_json(d, "POST", "/v1/experiments?force=1", a, 201);
    long id_c = (long)tu_jnum(forced, "id");
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(forced, "duplicate")));
    cr_expect_neq(id_c, id_a);
    cJSON_Delete(forced);

    /* a duplicate of a finished run reports its status */
    cJSON_Delete(wait_for(d, id_a, "succeeded", 60));
    dup = tu_http_json(d, "POST", "/v1/experiments", a, 200);
    cr_expect_eq((long)tu_jnum(dup, "id"), id_a);
    cr_expect(tu_jstr(dup, "status") && !strcmp(tu_jstr(dup, "status"), "succeeded"),
              "a duplicate of a succeeded run says '%s'", tu_jstr(dup, "status"));
    cJSON_Delete(dup);
    daemon_stop(d);
    free(a), free(a_renamed);
}

/* Specs train for real in two slots, and their results and metrics show up
 * in the database, the experiment view, the leaderboard and /v1/best; two
 * seeds of one configuration rank as their mean. */
Test(daemon, runs_record_results_and_rank) {
    const char *extra[] = {"--slots", "2", NULL};
    daemon_t *d = daemon_start(state, extra);

    char *a = spec("a", 1, 1, 1, NULL), *b = spec("b", 1, 1, 2, NULL);
    long id_a = submit(d, a), id_b = submit(d, b);
    cr_expect_neq(id_a, id_b);
    cJSON *forced = tu_http_json(d, "POST", "/v1/experiments?force=1", a, 201);
    long id_c = (long)tu_jnum(forced, "id");
    cJSON_Delete(forced);

    /* the three run for real */
    long ids[3] = {id_a, id_b, id_c};
    for (int i = 0; i < 3; i++) cJSON_Delete(wait_for(d, ids[i], "succeeded", 60));

    sqlite3 *db = db_open();
    cr_expect_eq(tu_sql_int(db, "SELECT count(*) FROM experiments", 0), 3);
    cr_expect_eq(tu_sql_int(db, "SELECT count(*) FROM results", 0), 3);
    double best_bpb = INFINITY;
    long best_id = 0;
    for (int i = 0; i < 3; i++) {
        long id = ids[i];
        cr_expect(sql_status_is(db, id, "succeeded"));
        cr_expect_eq(tu_sql_int(db, "SELECT count(*) FROM results WHERE experiment_id = ?1", id),
                     1);
        long long n_metrics =
            tu_sql_int(db, "SELECT count(*) FROM metrics WHERE experiment_id = ?1", id);
        cr_expect_gt(n_metrics, 0, "experiment %ld has no metrics rows", id);
        double bpb = tu_sql_double(db, "SELECT val_bpb FROM results WHERE experiment_id = ?1", id);
        cr_expect(bpb > 0 && bpb < 20, "val_bpb %g", bpb);
        /* the budget the run had, and its passes over the training tokens */
        cr_expect_eq(
            tu_sql_double(db, "SELECT time_budget_s FROM results WHERE experiment_id = ?1", id), 1);
        cr_expect_eq(
            tu_sql_int(db, "SELECT token_budget FROM results WHERE experiment_id = ?1", id), 0);
        cr_expect_gt(tu_sql_double(db, "SELECT epochs FROM results WHERE experiment_id = ?1", id),
                     0);
        if (bpb < best_bpb) best_bpb = bpb, best_id = id;

        cJSON *e = get_experiment(d, id);
        const cJSON *result = cJSON_GetObjectItem(e, "result");
        cr_expect(cJSON_IsObject(result), "experiment %ld: no result", id);
        if (cJSON_IsObject(result)) {
            cr_expect_float_eq(tu_jnum(result, "val_bpb"), bpb, 1e-12);
            cr_expect_gt(tu_jnum(result, "num_steps"), 0);
        }
        const cJSON *metrics = cJSON_GetObjectItem(e, "metrics");
        cr_expect(cJSON_IsArray(metrics) && cJSON_GetArraySize(metrics) > 0,
                  "experiment %ld: no metrics", id);
        cr_expect_eq((long long)tu_jnum(e, "metrics_total"), n_metrics);
        cr_expect_eq((long)tu_jnum(e, "attempt"), 1);
        cJSON_Delete(e);
    }
    sqlite3_close(db);

    /* the leaderboard: all three, best first; /v1/best is its head */
    /* a and the forced a are one configuration: its mean over the two runs */
    cJSON *lb = tu_get_json(d, "/v1/leaderboard");
    const cJSON *rows = cJSON_GetObjectItem(lb, "leaderboard");
    cr_assert_eq(cJSON_GetArraySize(rows), 2);
    cr_expect_leq(tu_jnum(cJSON_GetArrayItem(rows, 0), "val_bpb"),
                  tu_jnum(cJSON_GetArrayItem(rows, 1), "val_bpb"), "leaderboard out of order");
    db = db_open();
    double bpb_a = tu_sql_double(db, "SELECT val_bpb FROM results WHERE experiment_id = ?1", id_a);
    double bpb_b = tu_sql_double(db, "SELECT val_bpb FROM results WHERE experiment_id = ?1", id_b);
    double bpb_c = tu_sql_double(db, "SELECT val_bpb FROM results WHERE experiment_id = ?1", id_c);
    double mean_a = (bpb_a + bpb_c) / 2;
    /* the best configuration's first run is /v1/best */
    best_id = mean_a <= bpb_b ? id_a : id_b;
    best_bpb = mean_a <= bpb_b ? bpb_a : bpb_b;
    cr_expect_eq((long)tu_jnum(cJSON_GetArrayItem(rows, 0), "id"), best_id);
    cr_expect_float_eq(tu_jnum(cJSON_GetArrayItem(rows, 0), "val_bpb"),
                       mean_a <= bpb_b ? mean_a : bpb_b, 1e-12);
    cJSON_Delete(lb);
    cr_expect_eq(tu_sql_int(db, "SELECT id FROM leaderboard LIMIT 1", 0), best_id);
    cr_expect_eq(tu_sql_int(db, "SELECT count(*) FROM leaderboard", 0), 2);
    cr_expect_eq(tu_sql_int(db, "SELECT n_seeds FROM leaderboard WHERE id = ?1", id_a), 2);
    sqlite3_close(db);
    cJSON *best = tu_get_json(d, "/v1/best");
    const cJSON *bo = cJSON_GetObjectItem(best, "best");
    cr_assert(cJSON_IsObject(bo));
    cr_expect_eq((long)tu_jnum(bo, "id"), best_id);
    cr_expect_float_eq(tu_jnum(cJSON_GetObjectItem(bo, "result"), "val_bpb"), best_bpb, 1e-12);
    cr_expect(cJSON_IsObject(cJSON_GetObjectItem(cJSON_GetObjectItem(bo, "spec"), "model")),
              "best has no full spec");
    cJSON_Delete(best);

    /* the run's log as text */
    tu_reply_t r;
    char path[64];
    snprintf(path, sizeof path, "/v1/experiments/%ld/log", id_a);
    tu_http(d, "GET", path, NULL, 0, NULL, &r);
    cr_expect_eq(r.status, 200);
    cr_expect(!strncmp(r.content_type, "text/plain", 10), "log content type %s", r.content_type);
    cr_expect(strstr(r.body, "val_bpb:"), "the log lacks the summary: %.500s", r.body);
    tu_reply_free(&r);
    expect_error(d, "GET", "/v1/experiments/999", NULL, 0, 404, "not_found", "999");

    daemon_stop(d);
    free(a), free(b);
}

/* The stand-in crashes, fails, hangs, runs out of memory, floods stdout and
 * writes garbage in one slot while a well-behaved run keeps going in the
 * other; each ends with its status and reason and the API stays responsive.
 * Nothing here races the machine's load: only the hang has a deadline it
 * can reach (a budget of 1 s); the other faults end on their own, well
 * inside theirs (60 s), however slowly they start; and the slow run goes
 * on until the test, having seen every fault end and the run advance,
 * creates its stop file (bad-worker's --until). Before, every run had
 * 2 s (and the slow run 6 s) from its spawn, and a flood of 100 MB or a
 * slow start on a loaded machine ended as a timeout. */
Test(daemon, faults_are_contained) {
    char *stop_file = tu_path("%s/slow-run.stop", state);
    char *cmd = tu_path("%s from-spec --until %s", tu_bad_worker(), stop_file);
    const char *extra[] = {
        "--slots", "2", "--worker-cmd", cmd, "--deadline-slack", "1", "--kill-grace", "0.5", NULL};
    daemon_t *d = daemon_start(state, extra);

    const double slow_budget = 60.0;
    char *slow = spec("slow-ok", 100, slow_budget, 1, NULL);
    long id_slow = submit(d, slow);
    cJSON_Delete(wait_for(d, id_slow, "running", 20));

    static const struct {
        const char *mode, *status, *reason;
        double budget;
    } faults[] = {
        {"crash", "crashed", "SIGSEGV", 60}, {"fail", "failed", "the disk is on fire", 60},
        {"hang", "timeout", "deadline", 1},  {"oom", "oom", "out of memory (limit 64 MiB)", 60},
        {"flood", "succeeded", NULL, 60},    {"garbage", "succeeded", NULL, 60},
    };
    enum { N_FAULTS = sizeof faults / sizeof faults[0] };
    char *batch = strdup("[");
    for (int i = 0; i < N_FAULTS; i++) {
        char *s = spec(faults[i].mode, i + 1, faults[i].budget, 1,
                       !strcmp(faults[i].mode, "oom") ? ",\"memory_mb\":64" : NULL);
        char *next = tu_path("%s%s%s", batch, i ? "," : "", s);
        free(batch), free(s);
        batch = next;
    }
    char *closed = tu_path("%s]", batch);
    cJSON *sub = tu_http_json(d, "POST", "/v1/experiments", closed, 201);
    free(batch), free(closed);
    const cJSON *items = cJSON_GetObjectItem(sub, "experiments");
    cr_assert_eq(cJSON_GetArraySize(items), N_FAULTS);
    long ids[N_FAULTS];
    for (int i = 0; i < N_FAULTS; i++) ids[i] = (long)tu_jnum(cJSON_GetArrayItem(items, i), "id");
    cJSON_Delete(sub);

    /* Poll until every fault has ended and the slow run has been seen
     * advancing (it runs until told to stop): health and status answer
     * fast each time, and the slow run keeps its slot. */
    double deadline = tu_now() + 90, worst = 0;
    int polls = 0, slow_seen = 0, slow_advanced = 0, done = 0;
    double last_step = -1;
    while (!done || slow_advanced <= 3 || last_step < 10) {
        if (tu_now() > deadline)
            tu_server_fail(d, "the faults did not all end, or the slow run did not advance, "
                              "within 90 s");
        tu_reply_t r;
        tu_http(d, "GET", "/healthz", NULL, 0, NULL, &r);
        cr_assert_eq(r.status, 200);
        cr_expect(strstr(r.body, "\"ok\":true"));
        worst = fmax(worst, r.seconds);
        tu_reply_free(&r);
        tu_http(d, "GET", "/v1/status", NULL, 0, NULL, &r);
        cr_assert_eq(r.status, 200);
        worst = fmax(worst, r.seconds);
        cJSON *st = cJSON_Parse(r.body);
        tu_reply_free(&r);
        cr_assert(st, "/v1/status is not JSON");
        const cJSON *slot;
        cJSON_ArrayForEach(slot, cJSON_GetObjectItem(st, "slots")) {
            const cJSON *e = cJSON_GetObjectItem(slot, "experiment");
            const cJSON *p = cJSON_GetObjectItem(slot, "progress");
            if (!cJSON_IsObject(e) || (long)tu_jnum(e, "id") != id_slow) continue;
            slow_seen++;
            if (cJSON_IsObject(p) && tu_jnum(p, "step") > last_step) {
                slow_advanced += last_step >= 0;
                last_step = tu_jnum(p, "step");
            }
        }
        cJSON_Delete(st);
        cJSON *list = tu_get_json(d, "/v1/experiments?limit=100");
        done = 1;
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItem(list, "experiments")) {
            if ((long)tu_jnum(e, "id") != id_slow)
                done &= is_terminal(tu_jstr(e, "status"));
            else
                cr_assert_str_eq(tu_jstr(e, "status"), "running",
                                 "the slow run ended before it was told to");
        }
        cJSON_Delete(list);
        polls++;
        tu_sleep_ms(50);
    }
    cr_log_info("faults: %d polls, worst health/status latency %.3f s", polls, worst);
    cr_expect_lt(worst, LATENCY_BOUND_S, "the API took %.3f s to answer during the faults", worst);
    cr_expect_gt(slow_advanced, 3, "the slow run made no visible progress during the faults");

    sqlite3 *db = db_open();
    for (int i = 0; i < N_FAULTS; i++) {
        cJSON *e = get_experiment(d, ids[i]);
        const char *status = tu_jstr(e, "status"), *reason = tu_jstr(e, "reason");
        cr_expect(status && !strcmp(status, faults[i].status), "%s: status %s, expected %s (%s)",
                  faults[i].mode, status ? status : "?", faults[i].status,
                  reason ? reason : "no reason");
        if (faults[i].reason)
            cr_expect(reason && strstr(reason, faults[i].reason), "%s: reason '%s' lacks '%s'",
                      faults[i].mode, reason ? reason : "(null)", faults[i].reason);
        int ok = !strcmp(faults[i].status, "succeeded");
        cr_expect_eq(
            tu_sql_int(db, "SELECT count(*) FROM results WHERE experiment_id = ?1", ids[i]), ok,
            "%s: results rows", faults[i].mode);
        cJSON_Delete(e);
    }
    cr_expect_eq(tu_sql_int(db, "SELECT term_signal FROM experiments WHERE id = ?1", ids[0]),
                 SIGSEGV);
    cr_expect_eq(tu_sql_int(db, "SELECT exit_code FROM experiments WHERE id = ?1", ids[1]), 1);
    cr_expect_eq(tu_sql_int(db, "SELECT exit_code FROM experiments WHERE id = ?1", ids[3]), 4);
    cr_expect_float_eq(
        tu_sql_double(db, "SELECT val_bpb FROM results WHERE experiment_id = ?1", ids[5]), 2.5,
        1e-9);
    sqlite3_close(db);

    /* the flood was capped in the log, and the log is still served */
    tu_reply_t r;
    char path[64];
    snprintf(path, sizeof path, "/v1/experiments/%ld/log?tail=4096", ids[4]);
    tu_http(d, "GET", path, NULL, 0, NULL, &r);
    cr_expect_eq(r.status, 200);
    cr_expect(strstr(r.body, "log capped"), "the flood's log tail: %.300s", r.body);
    tu_reply_free(&r);

    /* the slow run was never disturbed: one attempt, and it ends when told */
    FILE *f = fopen(stop_file, "w");
    cr_assert(f, "%s: %s", stop_file, strerror(errno));
    fclose(f);
    cJSON *e = wait_for(d, id_slow, "succeeded", 20);
    cr_expect_eq((long)tu_jnum(e, "attempt"), 1);
    cr_expect_geq(tu_jnum(e, "metrics_total"), 10, "slow-ok recorded too few steps");
    cr_expect_gt(slow_seen, 0);
    cJSON_Delete(e);

    daemon_stop(d);
    free(slow);
    free(cmd);
    free(stop_file);
}

/* kill -9 the daemon while a real training run is in progress; its worker
 * dies with it; restarted on the same directory, the daemon re-queues the
 * run (attempt 2), which completes, with one results row and one experiment. */
Test(daemon, kill9_restart_requeues) {
    daemon_t *d = daemon_start(state, NULL);
    char *s = spec("k", 3, 2, 1, NULL);
    long id = submit(d, s);

    wait_progress(d, id, 1, 30); /* training steps */
    sqlite3 *db = db_open();
    pid_t worker = (pid_t)tu_sql_int(db, "SELECT pid FROM experiments WHERE id = ?1", id);
    cr_assert_gt(worker, 0);
    sqlite3_close(db);

    tu_server_kill(d);
    /* the worker dies with the daemon (parent-death signal) */
    double deadline = tu_now() + 5;
    while (!tu_process_gone(worker) && tu_now() < deadline) tu_sleep_ms(20);
    cr_expect(tu_process_gone(worker), "worker %d outlived the killed daemon", (int)worker);

    db = db_open();
    cr_expect(sql_status_is(db, id, "running"), "the killed run is not left running in the db");
    cr_expect_eq(tu_sql_int(db, "SELECT count(*) FROM results", 0), 0);
    sqlite3_close(db);

    daemon_t *d2 = daemon_start(state, NULL);
    cJSON *e = wait_for(d2, id, "succeeded", 60);
    cr_expect_eq((long)tu_jnum(e, "attempt"), 2);
    cr_expect(cJSON_IsObject(cJSON_GetObjectItem(e, "result")));
    cJSON_Delete(e);
    char *log = tu_read(d2->errlog);
    cr_expect(log && strstr(log, "re-queued"), "the restart does not report the recovery");
    free(log);

    db = db_open();
    cr_expect_eq(tu_sql_int(db, "SELECT count(*) FROM experiments", 0), 1);
    cr_expect_eq(tu_sql_int(db, "SELECT count(*) FROM results WHERE experiment_id = ?1", id), 1);
    cr_expect_eq(tu_sql_int(db, "SELECT count(*) FROM results", 0), 1);
    cr_expect(sql_status_is(db, id, "succeeded"));
    cr_expect_eq(tu_sql_int(db, "SELECT attempt FROM experiments WHERE id = ?1", id), 2);
    /* metrics start again at step 1 for the new attempt and are not doubled */
    cr_expect_eq(tu_sql_int(db, "SELECT min(step) FROM metrics WHERE experiment_id = ?1", id), 1);
    cr_expect_eq(tu_sql_int(db, "SELECT count(*) - count(DISTINCT step) FROM metrics", 0), 0);
    sqlite3_close(db);

    daemon_stop(d2);
    free(s);
}

/* SIGTERM while a run is in progress: the daemon stops its worker, records
 * the run as interrupted and queues it again (attempt 2), and exits 0; the
 * next daemon on the directory runs it to the end. */
Test(daemon, sigterm_interrupts_and_requeues) {
    char *cmd = stand_in_cmd();
    const char *extra[] = {"--worker-cmd", cmd, "--kill-grace", "0.5", NULL};
    daemon_t *d = daemon_start(state, extra);
    char *s = spec("slow-ok", 1, 2, 1, NULL);
    long id = submit(d, s);
    wait_progress(d, id, 0, 20);
    daemon_stop(d); /* exit 0 within the limit, clean log */

    sqlite3 *db = db_open();
    cr_expect(sql_status_is(db, id, "queued"), "the interrupted run is not queued again");
    cr_expect_eq(tu_sql_int(db, "SELECT attempt FROM experiments WHERE id = ?1", id), 2);
    cr_expect_eq(tu_sql_int(db, "SELECT count(*) FROM results", 0), 0);
    sqlite3_close(db);

    daemon_t *d2 = daemon_start(state, extra);
    cJSON *e = wait_for(d2, id, "succeeded", 20);
    cr_expect_eq((long)tu_jnum(e, "attempt"), 2);
    cJSON_Delete(e);
    daemon_stop(d2);
    free(s), free(cmd);
}

/* Cancel a queued and a running experiment; finished and unknown ones are
 * refused; the slot is free again afterwards. */
Test(daemon, cancel) {
    char *cmd = stand_in_cmd();
    const char *extra[] = {"--slots", "1", "--worker-cmd", cmd, "--kill-grace", "0.5", NULL};
    daemon_t *d = daemon_start(state, extra);

    char *hang = spec("hang", 1, 60, 1, NULL), *ok = spec("ok", 2, 1, 1, NULL);
    long id_run = submit(d, hang);
    cJSON_Delete(wait_for(d, id_run, "running", 20));
    long id_queued = submit(d, ok);
    cJSON *e = get_experiment(d, id_queued);
    cr_assert_str_eq(tu_jstr(e, "status"), "queued", "the one slot is busy");
    cJSON_Delete(e);

    char path[64];
    snprintf(path, sizeof path, "/v1/experiments/%ld/cancel", id_queued);
    cJSON *o = tu_http_json(d, "POST", path, "", 200);
    cr_expect_str_eq(tu_jstr(o, "status"), "cancelled");
    cJSON_Delete(o);
    e = get_experiment(d, id_queued);
    cr_expect_str_eq(tu_jstr(e, "status"), "cancelled");
    cJSON_Delete(e);
    expect_error(d, "POST", path, "", 0, 409, "not_cancellable", "finished");

    snprintf(path, sizeof path, "/v1/experiments/%ld/cancel", id_run);
    o = tu_http_json(d, "POST", path, "", 200);
    cr_expect_str_eq(tu_jstr(o, "status"), "cancelling");
    cJSON_Delete(o);
    e = wait_for(d, id_run, "cancelled", 10);
    const char *reason = tu_jstr(e, "reason");
    cr_expect(reason && strstr(reason, "cancelled"), "reason: %s", reason ? reason : "(null)");
    cJSON_Delete(e);
    expect_error(d, "POST", path, "", 0, 409, "not_cancellable", "finished");
    expect_error(d, "POST", "/v1/experiments/999/cancel", "", 0, 404, "not_found", "999");

    /* the slot is free: the next one runs */
    char *ok2 = spec("ok", 3, 1, 1, NULL);
    cJSON_Delete(wait_for(d, submit(d, ok2), "succeeded", 20));
    sqlite3 *db = db_open();
    cr_expect_eq(tu_sql_int(db, "SELECT count(*) FROM results WHERE experiment_id = ?1", id_run),
                 0);
    cr_expect_eq(tu_sql_int(db, "SELECT count(*) FROM results WHERE experiment_id = ?1", id_queued),
                 0);
    sqlite3_close(db);

    daemon_stop(d);
    free(hang), free(ok), free(ok2), free(cmd);
}

/* One daemon per directory; no non-loopback listener without a token; with a
 * token, every POST needs it and every GET works without it. */
Test(daemon, lock_listen_and_token) {
    char *cmd = stand_in_cmd();
    const char *extra[] = {"--token", "s3cret", "--worker-cmd", cmd, NULL};
    daemon_t *d = daemon_start(state, extra);

    tu_run_t r;
    char *second[] = {(char *)tu_bin(), "serve", "--dir", state, "--listen", "127.0.0.1:0", NULL};
    tu_run(&r, second, 15);
    cr_expect(!r.timed_out && r.exit_code != 0, "a second daemon on the same dir started (%d)",
              r.exit_code);
    cr_expect(strstr(r.err, "another nightshift daemon") && strstr(r.err, "locked"),
              "the second daemon's message: %s", r.err);
    tu_run_free(&r);

    char *other = tu_path("%s/other", tmp);
    char *open_listen[] = {(char *)tu_bin(), "serve",     "--dir", other,
                           "--listen",       "0.0.0.0:0", NULL};
    tu_run(&r, open_listen, 15);
    cr_expect(!r.timed_out && r.exit_code != 0, "listening on 0.0.0.0 without a token (%d)",
              r.exit_code);
    cr_expect(strstr(r.err, "refusing") && strstr(r.err, "token"), "the message: %s", r.err);
    tu_run_free(&r);

    char *s = spec("ok", 1, 1, 1, NULL);
    tu_reply_t rep;
    tu_http(d, "POST", "/v1/experiments", s, strlen(s), NULL, &rep);
    cr_expect_eq(rep.status, 401, "POST without the token: %ld %s", rep.status, rep.body);
    cr_expect(strstr(rep.body, "unauthorized"));
    tu_reply_free(&rep);
    tu_http(d, "POST", "/v1/experiments", s, strlen(s), "Bearer wrong", &rep);
    cr_expect_eq(rep.status, 401, "POST with a wrong token: %ld", rep.status);
    tu_reply_free(&rep);
    tu_http(d, "POST", "/v1/experiments/1/cancel", "", 0, NULL, &rep);
    cr_expect_eq(rep.status, 401, "cancel without the token: %ld", rep.status);
    tu_reply_free(&rep);
    tu_http(d, "POST", "/v1/experiments", s, strlen(s), "Bearer s3cret", &rep);
    cr_assert_eq(rep.status, 201, "POST with the token: %ld %s", rep.status, rep.body);
    cJSON *o = cJSON_Parse(rep.body);
    long id = (long)tu_jnum(o, "id");
    cJSON_Delete(o);
    tu_reply_free(&rep);

    cJSON_Delete(wait_for(d, id, "succeeded", 20));
    char one[64], log[64];
    snprintf(one, sizeof one, "/v1/experiments/%ld", id);
    snprintf(log, sizeof log, "/v1/experiments/%ld/log", id);
    const char *const gets[] = {
        "/healthz", "/v1/status", "/v1/experiments", "/v1/leaderboard", "/v1/best", one, log};
    for (size_t i = 0; i < sizeof gets / sizeof *gets; i++) {
        tu_http(d, "GET", gets[i], NULL, 0, NULL, &rep);
        cr_expect_eq(rep.status, 200, "GET %s without the token: %ld", gets[i], rep.status);
        tu_reply_free(&rep);
    }
    daemon_stop(d);

    /* the lock goes with the daemon; options from --config, the line winning */
    char *config = tu_path("%s/serve.json", tmp);
    tu_write(config, "{\"slots\": 3, \"threads_per_slot\": 1, \"token\": \"from-config\"}");
    const char *with_config[] = {"--config", config, "--slots", "2", NULL};
    daemon_t *d2 = daemon_start(state, with_config);
    cJSON *st = tu_get_json(d2, "/v1/status");
    cJSON *slots = cJSON_GetObjectItem(st, "slots");
    cr_expect_eq(cJSON_GetArraySize(slots), 2, "the command line's --slots wins");
    cr_expect_eq(tu_jnum(cJSON_GetArrayItem(slots, 1), "threads"), 1, "threads_per_slot");
    cJSON_Delete(st);
    tu_http(d2, "POST", "/v1/experiments", s, strlen(s), NULL, &rep);
    cr_expect_eq(rep.status, 401, "the config's token is required: %ld", rep.status);
    tu_reply_free(&rep);
    tu_http(d2, "POST", "/v1/experiments", s, strlen(s), "Bearer from-config", &rep);
    cr_expect_eq(rep.status, 200, "the config's token: %ld %s", rep.status, rep.body);
    tu_reply_free(&rep);
    daemon_stop(d2);
    free(s), free(other), free(cmd), free(config);
}

/* Run `nightshift CMD [ARG1 [ARG2]] --url URL` (NULL args are left out). */
static void cli(tu_run_t *r, const daemon_t *d, const char *cmd, const char *arg1,
                const char *arg2) {
    char *argv[8];
    int n = 0;
    argv[n++] = (char *)tu_bin();
    argv[n++] = (char *)cmd;
    if (arg1) argv[n++] = (char *)arg1;
    if (arg2) argv[n++] = (char *)arg2;
    argv[n++] = "--url";
    argv[n++] = (char *)d->url;
    argv[n] = NULL;
    tu_run(r, argv, 15);
    cr_assert(!r->timed_out, "nightshift %s timed out", cmd);
}

/* The command-line client against the real daemon. */
Test(daemon, cli) {
    char *cmd = stand_in_cmd();
    const char *extra[] = {"--slots", "1", "--worker-cmd", cmd, "--kill-grace", "0.5", NULL};
    daemon_t *d = daemon_start(state, extra);
    char *ok_path = tu_path("%s/ok.json", tmp), *hang_path = tu_path("%s/hang.json", tmp);
    char *bad_path = tu_path("%s/bad.json", tmp);
    char *ok = spec("ok", 1, 1, 1, NULL), *hang = spec("hang", 2, 60, 1, NULL);
    tu_write(ok_path, ok);
    tu_write(hang_path, hang);
    tu_write(bad_path, "{\"dataset\":\"tiny\",\"model\":{\"n_embd\":128,\"n_head\":7}}\n");

    tu_run_t r;
    cli(&r, d, "submit", ok_path, NULL);
    cr_assert_eq(r.exit_code, 0, "submit: %s", r.err);
    char *end;
    long id_ok = strtol(r.out, &end, 10);
    cr_expect(id_ok > 0 && strstr(end, "queued"), "submit printed '%s'", r.out);
    tu_run_free(&r);
    cJSON_Delete(wait_for(d, id_ok, "succeeded", 20));

    cli(&r, d, "submit", ok_path, NULL);
    cr_expect_eq(r.exit_code, 0, "submit again: %s", r.err);
    cr_expect(strtol(r.out, NULL, 10) == id_ok && strstr(r.out, "duplicate (already succeeded)"),
              "a duplicate submit printed '%s'", r.out);
    tu_run_free(&r);

    cli(&r, d, "submit", bad_path, NULL);
    cr_expect_eq(r.exit_code, 1, "an invalid spec: exit %d", r.exit_code);
    cr_expect(strstr(r.err, "model.n_head: 7 does not divide n_embd 128"), "stderr: %s", r.err);
    tu_run_free(&r);

    cli(&r, d, "submit", hang_path, NULL);
    cr_assert_eq(r.exit_code, 0, "submit: %s", r.err);
    long id_hang = strtol(r.out, NULL, 10);
    cr_assert_gt(id_hang, id_ok);
    tu_run_free(&r);
    cJSON_Delete(wait_for(d, id_hang, "running", 20));

    cli(&r, d, "ls", NULL, NULL);
    cr_expect_eq(r.exit_code, 0, "ls: %s", r.err);
    cr_expect(strstr(r.out, "succeeded") && strstr(r.out, "running") && strstr(r.out, "hang"),
              "ls printed:\n%s", r.out);
    tu_run_free(&r);

    char id_arg[32];
    snprintf(id_arg, sizeof id_arg, "%ld", id_ok);
    cli(&r, d, "show", id_arg, NULL);
    cr_expect_eq(r.exit_code, 0, "show: %s", r.err);
    cr_expect(strstr(r.out, "succeeded") && strstr(r.out, "1.2345"), "show printed:\n%s", r.out);
    tu_run_free(&r);

    cli(&r, d, "show", "999", NULL);
    cr_expect_eq(r.exit_code, 1, "show of an unknown id: exit %d", r.exit_code);
    tu_run_free(&r);

    cli(&r, d, "best", NULL, NULL);
    cr_expect_eq(r.exit_code, 0, "best: %s", r.err);
    cr_expect(strstr(r.out, "1.2345") || strstr(r.out, "\"name\""), "best printed:\n%s", r.out);
    tu_run_free(&r);

    cli(&r, d, "watch", "--once", NULL);
    cr_expect_eq(r.exit_code, 0, "watch --once: %s", r.err);
    cr_expect(strstr(r.out, "hang"), "watch --once printed:\n%s", r.out);
    tu_run_free(&r);

    snprintf(id_arg, sizeof id_arg, "%ld", id_hang);
    cli(&r, d, "cancel", id_arg, NULL);
    cr_expect_eq(r.exit_code, 0, "cancel: %s", r.err);
    tu_run_free(&r);
    cJSON_Delete(wait_for(d, id_hang, "cancelled", 10));

    cli(&r, d, "cancel", id_arg, NULL);
    cr_expect_eq(r.exit_code, 1, "cancel of a finished run: exit %d", r.exit_code);
    tu_run_free(&r);

    /* --repeats 3: seed 1 is the run above, seeds 2 and 3 are new */
    char *argv[] = {(char *)tu_bin(), "submit", ok_path, "--repeats", "3", "--url", d->url, NULL};
    tu_run(&r, argv, 15);
    cr_expect_eq(r.exit_code, 0, "submit --repeats: %s", r.err);
    char *line2 = strchr(r.out, '\n');
    cr_assert(line2 && strstr(r.out, "duplicate (already succeeded)") && strstr(line2, "queued"),
              "submit --repeats printed:\n%s", r.out);
    char *line3 = strchr(line2 + 1, '\n');
    cr_assert(line3, "submit --repeats 3 printed:\n%s", r.out);
    long id_r3 = strtol(line3 + 1, NULL, 10);
    tu_run_free(&r);
    cJSON_Delete(wait_for(d, id_r3, "succeeded", 20));
    cli(&r, d, "leaderboard", NULL, NULL);
    cr_expect_eq(r.exit_code, 0, "leaderboard: %s", r.err);
    cr_expect(
        strstr(r.out,
               "dataset tiny, budget time:1, eval_tokens 0 (the whole split: 0, or a cap past its "
               "size such as the default 65536)") &&
            strstr(r.out, "MEAN_BPB") && strstr(r.out, "1.234500") && strstr(r.out, "      3  ok"),
        "leaderboard printed:\n%s", r.out);
    tu_run_free(&r);

    daemon_stop(d);
    free(ok_path), free(hang_path), free(bad_path), free(ok), free(hang), free(cmd);
}

/* ------------------------------------------- repeats, noise and pruning */

/* val_bpb of every succeeded run of the configuration whose first run is id
 * (same config_hash), into v (at most 8); returns how many. */
static int config_values(sqlite3 *db, long id, double *v) {
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT r.val_bpb FROM experiments e JOIN results r"
                                    " ON r.experiment_id = e.id WHERE e.status = 'succeeded'"
                                    " AND e.config_hash = (SELECT config_hash FROM experiments"
                                    " WHERE id = ?1) ORDER BY e.id",
                                    -1, &st, NULL),
                 SQLITE_OK);
    sqlite3_bind_int64(st, 1, id);
    int n = 0;
    while (n < 8 && sqlite3_step(st) == SQLITE_ROW) v[n++] = sqlite3_column_double(st, 0);
    sqlite3_finalize(st);
    return n;
}

/* ?repeats=k queues seeds seed .. seed + k - 1; the leaderboard shows each
 * configuration once with its mean, sd and seeds; /v1/noise pools the
 * within-configuration variance; another dataset never mixes in. */
Test(daemon, repeats_are_one_configuration_with_mean_sd_and_noise) {
    char *corpus = tu_path("%s/corpus2.jsonl", tmp);
    tu_prep_tiny(corpus, state, "tiny2");
    free(corpus);
    const char *extra[] = {"--slots", "2", NULL};
    daemon_t *d = daemon_start(state, extra);

    char *a = spec("a", 5, 0.6, 1, NULL), *b = spec("b", 9, 0.6, 2, NULL);
    cJSON *r = tu_http_json(d, "POST", "/v1/experiments?repeats=3", a, 201);
    const cJSON *items = cJSON_GetObjectItem(r, "experiments");
    cr_assert_eq(cJSON_GetArraySize(items), 3, "3 repeats, 3 experiments");
    long ids[5];
    for (int i = 0; i < 3; i++) ids[i] = (long)tu_jnum(cJSON_GetArrayItem(items, i), "id");
    cJSON_Delete(r);
    r = tu_http_json(d, "POST", "/v1/experiments?repeats=2", b, 201);
    items = cJSON_GetObjectItem(r, "experiments");
    cr_assert_eq(cJSON_GetArraySize(items), 2);
    for (int i = 0; i < 2; i++) ids[3 + i] = (long)tu_jnum(cJSON_GetArrayItem(items, i), "id");
    cJSON_Delete(r);
    /* the same again: duplicates, nothing new */
    r = tu_http_json(d, "POST", "/v1/experiments?repeats=3", a, 200);
    cJSON_Delete(r);
    char *other = tu_path("{\"name\":\"o\",\"dataset\":\"tiny2\",\"time_budget_s\":0.6,"
                          "\"model\":{\"depth\":1,\"n_embd\":32,\"n_head\":2,\"seq_len\":32},"
                          "\"train\":{\"batch_size\":4,\"total_batch_tokens\":128},"
                          "\"resources\":{\"threads\":1,\"peak_gflops\":10}}");
    r = tu_http_json(d, "POST", "/v1/experiments", other, 201);
    long id_other = (long)tu_jnum(r, "id");
    cJSON_Delete(r);
    for (int i = 0; i < 5; i++) cJSON_Delete(wait_for(d, ids[i], "succeeded", 60));
    cJSON_Delete(wait_for(d, id_other, "succeeded", 60));

    sqlite3 *db = db_open();
    cr_expect_eq(tu_sql_int(db, "SELECT count(*) FROM experiments", 0), 6);
    for (int i = 0; i < 3; i++)
        cr_expect_eq(tu_sql_int(db, "SELECT seed FROM experiments WHERE id = ?1", ids[i]), 5 + i);
    double va[8], vb[8];
    cr_assert_eq(config_values(db, ids[0], va), 3);
    cr_assert_eq(config_values(db, ids[3], vb), 2);
    double ma = (va[0] + va[1] + va[2]) / 3, mb = (vb[0] + vb[1]) / 2, ssa = 0, ssb = 0;
    for (int i = 0; i < 3; i++) ssa += (va[i] - ma) * (va[i] - ma);
    for (int i = 0; i < 2; i++) ssb += (vb[i] - mb) * (vb[i] - mb);
    cr_expect_eq(tu_sql_int(db, "SELECT count(*) FROM leaderboard WHERE dataset = 'tiny'", 0), 2);
    cr_expect_float_eq(tu_sql_double(db, "SELECT val_bpb FROM leaderboard WHERE id = ?1", ids[0]),
                       ma, 1e-12);
    cr_expect_float_eq(
        tu_sql_double(db, "SELECT val_bpb_sd FROM leaderboard WHERE id = ?1", ids[0]),
        sqrt(ssa / 2), 1e-9);
    cr_expect_eq(tu_sql_int(db, "SELECT n_seeds FROM leaderboard WHERE id = ?1", ids[0]), 3);
    sqlite3_close(db);

    /* the API: one row per configuration, best mean first */
    cJSON *lb = tu_get_json(d, "/v1/leaderboard?dataset=tiny&budget=time:0.6");
    const cJSON *rows = cJSON_GetObjectItem(lb, "leaderboard");
    cr_assert_eq(cJSON_GetArraySize(rows), 2);
    const cJSON *first = cJSON_GetArrayItem(rows, 0);
    cr_expect_eq((long)tu_jnum(first, "id"), ma <= mb ? ids[0] : ids[3]);
    cr_expect_float_eq(tu_jnum(first, "val_bpb"), ma <= mb ? ma : mb, 1e-12);
    cr_expect_eq((int)tu_jnum(first, "n_seeds"), ma <= mb ? 3 : 2);
    cJSON_Delete(lb);

    /* the noise: pooled over both configurations (df 2 + 1) */
    cJSON *nz = tu_get_json(d, "/v1/noise?dataset=tiny&budget=0.6");
    cr_expect_float_eq(tu_jnum(nz, "sd"), sqrt((ssa + ssb) / 3), 1e-9);
    cr_expect_eq((int)tu_jnum(nz, "configurations"), 2);
    cr_expect_eq((int)tu_jnum(nz, "runs"), 5);
    cJSON_Delete(nz);
    cJSON *st = tu_get_json(d, "/v1/status");
    cr_expect_float_eq(tu_jnum(cJSON_GetObjectItem(st, "noise"), "sd"), sqrt((ssa + ssb) / 3), 1e-9,
                       "status defaults to --dataset tiny and its budget");
    cJSON_Delete(st);
    expect_error(d, "GET", "/v1/noise?budget=fortnight", NULL, 0, 400, "invalid_query", "budget");

    /* the other dataset: its own leaderboard and best, never mixed */
    cJSON *best = tu_get_json(d, "/v1/best?dataset=tiny2");
    cr_expect_eq((long)tu_jnum(cJSON_GetObjectItem(best, "best"), "id"), id_other);
    cJSON_Delete(best);
    best = tu_get_json(d, "/v1/best");
    long b_id = (long)tu_jnum(cJSON_GetObjectItem(best, "best"), "id");
    cr_expect(b_id == ids[0] || b_id == ids[3], "the best of tiny is #%ld", b_id);
    cJSON_Delete(best);
    lb = tu_get_json(d, "/v1/leaderboard?dataset=tiny2");
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(lb, "leaderboard")), 1);
    cJSON_Delete(lb);

    daemon_stop(d);
    free(a), free(b), free(other);
}

/* A spec whose learning rates are all multiplied by lr_mult. */
static char *lr_spec(const char *name, int seed, double lr_mult) {
    return tu_path("{\"name\":\"%s\",\"dataset\":\"tiny\",\"seed\":%d,\"time_budget_s\":5,"
                   "\"model\":{\"depth\":1,\"n_embd\":32,\"n_head\":2,\"seq_len\":32},"
                   "\"train\":{\"batch_size\":4,\"total_batch_tokens\":128,\"matrix_lr\":%g,"
                   "\"embedding_lr\":%g,\"unembedding_lr\":%g,\"scalar_lr\":%g},"
                   "\"resources\":{\"threads\":1,\"peak_gflops\":10}}",
                   name, seed, 0.04 * lr_mult, 0.6 * lr_mult, 0.004 * lr_mult, 0.5 * lr_mult);
}

/* With --prune median: once two runs have finished, a run with its learning
 * rates x100 is stopped as pruned after the warm-up and a good one finishes,
 * compared at the three rungs only (5 s budgets: a check a second would
 * compare it four or five times).
 * On this tiny corpus a x100 run still learns, at a pace set by its seed:
 * with seed 1 its training loss stays near 2-3, with seed 2 it falls towards
 * 1. The two finished runs are a good one and x100 with seed 2, so that the
 * median (their mean) sits well between a good run's loss (~0.1) and x100
 * seed 1's at every progress, whatever the machine's load. */
Test(daemon, a_lagging_run_is_pruned_and_a_good_one_finishes) {
    const char *extra[] = {"--slots",        "1",   "--prune", "median", "--prune-startup", "2",
                           "--prune-warmup", "0.3", NULL};
    daemon_t *d = daemon_start(state, extra);
    char *good1 = lr_spec("good", 1, 1), *mid = lr_spec("x100 seed 2", 2, 100);
    char *bad = lr_spec("x100 seed 1", 1, 100), *good2 = lr_spec("good again", 2, 1);
    char *batch = tu_path("[%s,%s,%s,%s]", good1, mid, bad, good2);
    cJSON *r = tu_http_json(d, "POST", "/v1/experiments", batch, 201);
    const cJSON *items = cJSON_GetObjectItem(r, "experiments");
    long ids[4];
    for (int i = 0; i < 4; i++) ids[i] = (long)tu_jnum(cJSON_GetArrayItem(items, i), "id");
    cJSON_Delete(r);
    /* "prune" is not part of a spec's identity: the x100 run again with
     * "prune": false is the queued one; with another seed, it is exempt */
    char *exempt = lr_spec("exempt", 1, 100);
    exempt[strlen(exempt) - 1] = '\0';
    char *exempt1 = tu_path("%s,\"prune\":false}", exempt);
    r = tu_http_json(d, "POST", "/v1/experiments", exempt1, 200);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(r, "duplicate")));
    cr_expect_eq((long)tu_jnum(r, "id"), ids[2]);
    cJSON_Delete(r);
    free(exempt);
    exempt = lr_spec("exempt", 3, 100);
    exempt[strlen(exempt) - 1] = '\0';
    char *exempt3 = tu_path("%s,\"prune\":false}", exempt);
    r = tu_http_json(d, "POST", "/v1/experiments", exempt3, 201);
    long id_exempt = (long)tu_jnum(r, "id");
    cJSON_Delete(r);
    free(exempt);
    cJSON_Delete(wait_for(d, ids[0], "succeeded", 30));
    cJSON_Delete(wait_for(d, ids[1], "succeeded", 30)); /* one to compare with: too few */
    cJSON *e = wait_for(d, ids[2], "pruned", 30);
    const char *reason = tu_jstr(e, "reason");
    cr_expect(reason && strstr(reason, "pruned at progress") &&
                  strstr(reason, "worse than the median") && strstr(reason, "of 2 finished runs"),
              "reason: %s", reason ? reason : "none");
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(e, "result")), "a pruned run has no result");
    cr_expect_gt(tu_jnum(e, "metrics_total"), 0, "a pruned run keeps its metrics");
    cJSON_Delete(e);
    cJSON_Delete(wait_for(d, ids[3], "succeeded", 30));
    cJSON_Delete(wait_for(d, id_exempt, "succeeded", 30));
    /* the good run was compared at the rungs only (0.3, 0.53, 0.77), not at
     * every step line: each comparison is a chance to prune it by noise */
    char *log = tu_read(d->errlog), needle[64];
    snprintf(needle, sizeof needle, "experiment %ld: kept at progress", ids[3]);
    int kept = 0;
    for (const char *q = log; (q = strstr(q, needle)); q++) kept++;
    cr_expect(kept >= 1 && kept <= 3, "the good run was compared %d times (1 to 3 rungs)", kept);
    free(log);

    sqlite3 *db = db_open();
    cr_expect(sql_status_is(db, ids[2], "pruned"));
    cr_expect_eq(tu_sql_int(db, "SELECT count(*) FROM leaderboard WHERE id = ?1", ids[2]), 0);
    double p =
        tu_sql_double(db, "SELECT max(progress) FROM metrics WHERE experiment_id = ?1", ids[2]);
    cr_expect(p >= 0.3 && p < 0.95, "pruned at progress %g: after the warm-up, well before the end",
              p);
    cr_expect(tu_sql_int(db, "SELECT count(*) FROM metrics WHERE progress IS NULL", 0) == 0,
              "every metrics row has its progress");
    sqlite3_close(db);
    cJSON *lst = tu_get_json(d, "/v1/experiments?status=pruned");
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(lst, "experiments")), 1);
    cJSON_Delete(lst);
    daemon_stop(d);
    free(good1), free(mid), free(bad), free(good2), free(batch), free(exempt1), free(exempt3);
}

/* ============================================== hostile input and faults */

/* Finding: when the end-of-run metrics flush failed (disk full) but the
 * finish write succeeded, the rows stayed in the slot's buffer, were retried
 * as experiment 0 while idle, and the next run on the slot got them under its
 * own id (its own rows at those steps then dropped as conflicts). A trigger
 * refuses experiment 1's metrics rows, as a full disk would; experiment 2
 * (the stand-in's "ok": steps 1 and 2, losses 4.5 and 4.25) must get exactly
 * its own rows, and experiment 1's are dropped with a log line. */
Test(daemon, pending_metrics_stay_with_their_run) {
    char *cmd = stand_in_cmd();
    const char *extra[] = {"--worker-cmd", cmd, NULL};
    daemon_t *d = daemon_start(state, extra);
    char *path = tu_path("%s/nightshift.db", state);
    sqlite3 *rw = NULL;
    cr_assert_eq(sqlite3_open(path, &rw), SQLITE_OK);
    sqlite3_busy_timeout(rw, 10000);
    cr_assert_eq(sqlite3_exec(rw,
                              "CREATE TRIGGER full_disk BEFORE INSERT ON metrics"
                              " WHEN NEW.experiment_id = 1"
                              " BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END",
                              NULL, NULL, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(rw));
    sqlite3_close(rw);

    char *a = spec("slow-ok", 1, 1, 1, NULL);
    long id_a = submit(d, a);
    cr_assert_eq(id_a, 1);
    cJSON_Delete(wait_for(d, id_a, "succeeded", 20));
    tu_sleep_ms(1500); /* idle: the flush timer runs at least once */
    char *b = spec("ok", 2, 1, 1, NULL);
    long id_b = submit(d, b);
    cJSON_Delete(wait_for(d, id_b, "succeeded", 20));
    daemon_stop(d);

    sqlite3 *db = db_open();
    const char *count = "SELECT count(*) FROM metrics WHERE experiment_id = ?1";
    cr_expect_eq(tu_sql_int(db, count, id_a), 0);
    cr_expect_eq(tu_sql_int(db, count, id_b), 2, "experiment %ld got rows of another run", id_b);
    cr_expect_eq(
        tu_sql_double(db, "SELECT loss FROM metrics WHERE experiment_id = ?1 AND step = 1", id_b),
        4.5);
    cr_expect_eq(tu_sql_int(db,
                            "SELECT count(*) FROM metrics WHERE experiment_id NOT IN"
                            " (SELECT id FROM experiments)",
                            0),
                 0);
    sqlite3_close(db);
    char *log = tu_read(d->errlog);
    cr_assert_not_null(log);
    cr_expect(strstr(log, "experiment 1: ") && strstr(log, "could not be recorded; dropped"),
              "no log line for the dropped rows:\n%s", log);
    cr_expect(!strstr(log, "experiment 0"), "rows retried as experiment 0:\n%s", log);
    free(log), free(a), free(b), free(path), free(cmd);
}

/* Finding: time_budget_s had no upper bound; 1e17 s overflowed the deadline's
 * millisecond conversion and the worker was killed after 1 ms. */
Test(daemon, huge_time_budget_is_refused) {
    char *cmd = stand_in_cmd();
    const char *extra[] = {"--worker-cmd", cmd, NULL};
    daemon_t *d = daemon_start(state, extra);
    char *s = spec("ok", 1, 1e17, 1, NULL);
    expect_error(d, "POST", "/v1/experiments", s, strlen(s), 400, "invalid_spec",
                 "time_budget_s: must be in [0, 604800]");
    free(s);
    /* a week is accepted */
    s = spec("ok", 1, 604800, 1, NULL);
    long id = submit(d, s);
    cJSON_Delete(wait_for(d, id, "succeeded", 20));
    daemon_stop(d);
    free(s), free(cmd);
}

/* Finding: {A}{B} queued A and dropped B; raw control bytes in strings were
 * accepted; "a\u0000b" was stored as "a". Each is a 400 naming the place,
 * and nothing is queued. */
Test(daemon, json_bodies_are_strict) {
    daemon_t *d = daemon_start(state, NULL);
    char *a = spec("a", 1, 1, 1, NULL), *b = spec("b", 2, 1, 1, NULL);
    char *two = tu_path("%s%s", a, b);
    expect_error(d, "POST", "/v1/experiments", two, strlen(two), 400, "invalid_json",
                 "unexpected text after the JSON value");
    char msg[64];
    snprintf(msg, sizeof msg, "line 1, column %zu", strlen(a) + 1);
    expect_error(d, "POST", "/v1/experiments", two, strlen(two), 400, "invalid_json", msg);
    const char nul[] = "{\"name\":\"a\\u0000b\",\"dataset\":\"tiny\"}";
    expect_error(d, "POST", "/v1/experiments", nul, sizeof nul - 1, 400, "invalid_json",
                 "\\u0000 is not allowed");
    const char ctl[] = "{\"name\":\"a\x01z\",\"dataset\":\"tiny\"}";
    expect_error(d, "POST", "/v1/experiments", ctl, sizeof ctl - 1, 400, "invalid_json",
                 "line 1, column 11: a control character");
    const char raw_nul[] = "{\"name\":\"a\0z\",\"dataset\":\"tiny\"}";
    expect_error(d, "POST", "/v1/experiments", raw_nul, sizeof raw_nul - 1, 400, "invalid_json",
                 "control character");
    expect_nothing_queued(d);
    daemon_stop(d);
    free(a), free(b), free(two);
}

/* Finding: --token and --agent-secret were visible in ps. The token comes
 * from a file or the environment (the flag still works, with a warning), and
 * off loopback it guards every GET but /healthz too. */
Test(daemon, secrets_from_files_and_reads_guarded_off_loopback) {
    char *token_file = tu_path("%s/token", tmp);
    tu_write(token_file, "fil3-token\n");
    const char *extra[] = {"--listen", "0.0.0.0:0", "--token-file", token_file, NULL};
    daemon_t *d = daemon_start(state, extra);
    tu_reply_t r;
    const char *const gets[] = {"/v1/status", "/v1/experiments", "/v1/leaderboard",
                                "/v1/experiments/1"};
    for (size_t i = 0; i < sizeof gets / sizeof *gets; i++) {
        tu_http(d, "GET", gets[i], NULL, 0, NULL, &r);
        cr_expect_eq(r.status, 401, "GET %s without the token off loopback: %ld", gets[i],
                     r.status);
        tu_reply_free(&r);
    }
    tu_http(d, "GET", "/healthz", NULL, 0, NULL, &r);
    cr_expect_eq(r.status, 200, "/healthz needs no token: %ld", r.status);
    tu_reply_free(&r);
    tu_http(d, "GET", "/v1/status", NULL, 0, "Bearer fil3-token", &r);
    cr_expect_eq(r.status, 200, "GET with the token: %ld %s", r.status, r.body);
    tu_reply_free(&r);
    daemon_stop(d);
    char *log = tu_read(d->errlog);
    cr_expect(log && !strstr(log, "command line"), "a warning for a token file:\n%s", log);
    free(log);

    /* The environment, on loopback: reads are open, POSTs are guarded. */
    setenv("NIGHTSHIFT_TOKEN", "env-token", 1);
    d = daemon_start(state, NULL);
    unsetenv("NIGHTSHIFT_TOKEN");
    tu_http(d, "GET", "/v1/status", NULL, 0, NULL, &r);
    cr_expect_eq(r.status, 200, "GET on loopback: %ld", r.status);
    tu_reply_free(&r);
    tu_http(d, "POST", "/v1/experiments", "{}", 2, NULL, &r);
    cr_expect_eq(r.status, 401, "POST without the token: %ld", r.status);
    tu_reply_free(&r);
    tu_http(d, "POST", "/v1/experiments", "{", 1, "Bearer env-token", &r);
    cr_expect_eq(r.status, 400, "POST with the token from the environment: %ld", r.status);
    tu_reply_free(&r);
    daemon_stop(d);

    /* --token still works, with a warning. */
    const char *flag[] = {"--token", "flag-token", NULL};
    d = daemon_start(state, flag);
    tu_http(d, "POST", "/v1/experiments", "{", 1, "Bearer flag-token", &r);
    cr_expect_eq(r.status, 400, "POST with the token from the flag: %ld", r.status);
    tu_reply_free(&r);
    daemon_stop(d);
    log = tu_read(d->errlog);
    cr_expect(log && strstr(log, "--token puts the secret on the command line"),
              "no warning for --token:\n%s", log);
    free(log), free(token_file);
}

/* The leaderboard's replies are cached until a run finishes: the same query,
 * asked before and after each finish, shows each new run at once. */
Test(daemon, the_leaderboard_changes_as_soon_as_a_run_finishes) {
    char *cmd = stand_in_cmd();
    const char *extra[] = {"--worker-cmd", cmd, NULL};
    daemon_t *d = daemon_start(state, extra);
    const char *q = "/v1/leaderboard?dataset=tiny&budget=time:1";
    /* before anything ran with that budget, the scope names nothing */
    expect_error(d, "GET", q, NULL, 0, 404, "unknown_scope",
                 "no experiment ran in dataset tiny with budget time:1");
    for (int n = 0; n <= 2; n++) {
        for (int again = 0; again < 2 && n > 0; again++) { /* the second read is the cached one */
            cJSON *lb = tu_get_json(d, q);
            cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(lb, "leaderboard")), n,
                         "after %d finished runs (read %d)", n, again + 1);
            cJSON_Delete(lb);
        }
        if (n == 2) break;
        char *s = spec("ok", 10 + n, 1, 1 + n, NULL);
        cJSON_Delete(wait_for(d, submit(d, s), "succeeded", 20));
        free(s);
    }
    daemon_stop(d);
    free(cmd);
}

/* ============================================== the first hour's follow-ups */

/* A run whose directory cannot be written (a full disk; here `runs` is a
 * file, which fails the same write) never started: it waits in the queue
 * without spending attempts, and runs once the disk takes writes again.
 * With --max-attempts 1 a spent attempt would have ended it `interrupted`. */
Test(daemon, a_run_that_cannot_be_written_waits_without_spending_attempts) {
    char *cmd = stand_in_cmd();
    const char *extra[] = {"--worker-cmd", cmd, "--max-attempts", "1", NULL};
    daemon_t *d = daemon_start(state, extra);
    char *runs = tu_path("%s/runs", state);
    rmdir(runs); /* empty so far, if the daemon made it */
    tu_write(runs, "not a directory\n");
    char *s = spec("ok", 1, 1, 1, NULL);
    long id = submit(d, s);
    tu_sleep_ms(6500); /* the first try and one retry (every 5 s) */
    cJSON *e = get_experiment(d, id);
    cr_expect_str_eq(tu_jstr(e, "status"), "queued");
    cr_expect_eq(tu_jnum(e, "attempt"), 1, "no attempt is spent on a run that never started");
    const char *why = tu_jstr(e, "reason");
    cr_expect(why && strstr(why, "not started: ") && strstr(why, "re-queued"), "reason: %s",
              why ? why : "(none)");
    cJSON_Delete(e);
    cr_assert_eq(unlink(runs), 0);
    e = wait_for(d, id, "succeeded", 20);
    cr_expect_eq(tu_jnum(e, "attempt"), 1);
    cJSON_Delete(e);
    daemon_stop(d);
    free(s);
    free(runs);
    free(cmd);
}

/* A timeout is an answer about the spec under the daemon's limits: the same
 * spec and seed again is that experiment (200, duplicate), not another hour
 * of a slot; ?force=1 runs it again. */
Test(daemon, a_timed_out_spec_is_a_duplicate_until_forced) {
    char *cmd = stand_in_cmd();
    const char *extra[] = {"--worker-cmd", cmd, "--deadline-slack", "1", "--kill-grace",
                           "0.2",          NULL};
    daemon_t *d = daemon_start(state, extra);
    char *s = spec("hang", 7, 0.5, 1, NULL);
    long id = submit(d, s);
    cJSON_Delete(wait_for(d, id, "timeout", 20));
    cJSON *o = tu_http_json(d, "POST", "/v1/experiments", s, 200);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(o, "duplicate")));
    cr_expect_eq((long)tu_jnum(o, "id"), id);
    cr_expect_str_eq(tu_jstr(o, "status"), "timeout");
    cJSON_Delete(o);
    o = tu_http_json(d, "POST", "/v1/experiments?force=1", s, 201);
    cr_expect_neq((long)tu_jnum(o, "id"), id);
    cJSON_Delete(o);
    daemon_stop(d);
    free(s);
    free(cmd);
}

/* The daemon failing while it checks a submission (here its results table
 * is gone, so the parent cannot be read) is the daemon's fault: 500
 * store_error, not 400 invalid_spec, which would tell an agent to change
 * its spec. */
Test(daemon, a_store_failure_during_validation_answers_500) {
    char *cmd = stand_in_cmd();
    const char *extra[] = {"--worker-cmd", cmd, NULL};
    daemon_t *d = daemon_start(state, extra);
    char *s = spec("ok", 1, 1, 1, NULL);
    long id = submit(d, s);
    cJSON_Delete(wait_for(d, id, "succeeded", 20));
    char *path = tu_path("%s/nightshift.db", state);
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    cr_assert_eq(sqlite3_exec(db, "ALTER TABLE results RENAME TO results_gone", NULL, NULL, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    sqlite3_close(db);
    char *child = tu_path("{\"name\":\"ok\",\"dataset\":\"tiny\",\"seed\":2,\"parent\":%ld,"
                          "\"time_budget_s\":1}",
                          id);
    expect_error(d, "POST", "/v1/experiments", child, strlen(child), 500, "store_error", "results");
    /* a parent that does not exist is still the spec's fault */
    const char *orphan = "{\"dataset\":\"tiny\",\"parent\":999}";
    expect_error(d, "POST", "/v1/experiments", orphan, strlen(orphan), 400, "invalid_spec",
                 "parent: experiment 999 does not exist");
    daemon_stop(d);
    free(child);
    free(path);
    free(s);
    free(cmd);
}

/* `ls --order val_bpb` ranks one scope, the one it names, never two
 * datasets together; --dataset picks another. */
Test(daemon, ls_by_val_bpb_never_ranks_two_datasets_together) {
    char *corpus = tu_path("%s/corpus2.jsonl", tmp);
    tu_prep_tiny(corpus, state, "tiny2");
    free(corpus);
    char *cmd = stand_in_cmd();
    const char *extra[] = {"--worker-cmd", cmd, NULL};
    daemon_t *d = daemon_start(state, extra); /* serve --dataset tiny: the default dataset */
    /* tiny: 1.2345 and 2.0 (two configurations); tiny2: 1.5 */
    char *a = spec("ok", 1, 1, 1, NULL), *b = spec("slow-ok", 2, 1, 2, NULL);
    char *c = tu_path("{\"name\":\"grandchild\",\"dataset\":\"tiny2\",\"seed\":3,"
                      "\"time_budget_s\":1}");
    cJSON_Delete(wait_for(d, submit(d, a), "succeeded", 20));
    cJSON_Delete(wait_for(d, submit(d, b), "succeeded", 20));
    cJSON_Delete(wait_for(d, submit(d, c), "succeeded", 20));
    tu_run_t r;
    tu_run_bin(&r, 20, "ls", "--url", d->url, "--order", "val_bpb", NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_expect(!strncmp(r.out, "ranked within dataset tiny, budget time:1, eval_tokens 0", 56), "%s",
              r.out);
    const char *x = strstr(r.out, "1.234500"), *y = strstr(r.out, "2.000000");
    cr_expect(x && y && x < y && !strstr(r.out, "1.500000"), "tiny's, best first: %s", r.out);
    cr_expect(strstr(r.out, "+0.7655 vs exp 1  tiny"), "%s", r.out);
    cr_expect(strstr(r.out, "other scopes with results:\n  --dataset tiny2 --budget time:1 "), "%s",
              r.out);
    tu_run_free(&r);
    tu_run_bin(&r, 20, "ls", "--url", d->url, "--order", "val_bpb", "--dataset", "tiny2", NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "1.500000") && !strstr(r.out, "1.234500") && !strstr(r.out, "2.000000"),
              "only tiny2's runs: %s", r.out);
    tu_run_free(&r);
    daemon_stop(d);
    free(a), free(b), free(c), free(cmd);
}

/* The night report of real runs: the JSON, the Markdown and the page over
 * HTTP, `nightshift report`, and best's sealed test figure (the tiny dataset
 * has a test split). */
Test(daemon, the_report_over_http_on_the_page_and_in_the_cli) {
    daemon_t *d = daemon_start(state, NULL);
    char *specs[3] = {spec("base", 1, 1, 1, NULL), spec("base", 2, 1, 1, NULL),
                      spec("deeper", 1, 1, 2, NULL)};
    long ids[3];
    for (int i = 0; i < 3; i++) ids[i] = submit(d, specs[i]);
    for (int i = 0; i < 3; i++) cJSON_Delete(wait_for(d, ids[i], "succeeded", 60));

    cJSON *r = tu_get_json(d, "/v1/report?dataset=tiny&budget=time:1");
    cr_expect_eq(tu_jnum(cJSON_GetObjectItem(r, "runs"), "total"), 3);
    cr_expect_eq(tu_jnum(cJSON_GetObjectItem(r, "baseline"), "id"), ids[0]);
    const cJSON *best = cJSON_GetObjectItem(r, "best");
    cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetObjectItem(best, "test"), "test_bpb")),
              "the best has no test figure");
    const cJSON *axis = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "axes"), 0);
    cr_expect_str_eq(tu_jstr(axis, "axis"), "model.depth");
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(r, "anytime")), 3);
    cJSON_Delete(r);
    cJSON *b = tu_get_json(d, "/v1/best?dataset=tiny&budget=time:1");
    const cJSON *t = cJSON_GetObjectItem(cJSON_GetObjectItem(b, "best"), "test");
    cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(t, "test_bpb")), "/v1/best has no test figure");
    cr_expect_eq(tu_jnum(t, "test_n"), tu_jnum(cJSON_GetObjectItem(b, "best"), "n_seeds"));
    cJSON_Delete(b);

    tu_reply_t rep;
    tu_http(d, "GET", "/v1/report?dataset=tiny&budget=time:1&format=md", NULL, 0, NULL, &rep);
    cr_expect_eq(rep.status, 200);
    cr_expect(!strncmp(rep.content_type, "text/markdown", 13), "%s", rep.content_type);
    cr_expect(!strncmp(rep.body, "# Night report: tiny, 1 s a run\n", 32), "%.200s", rep.body);
    cr_expect(strstr(rep.body, "| model.depth | 1 → 2 | 1 |"), "%s", rep.body);
    tu_reply_free(&rep);
    tu_http(d, "GET", "/report?dataset=tiny&budget=time:1", NULL, 0, NULL, &rep);
    cr_expect_eq(rep.status, 200);
    cr_expect(!strncmp(rep.content_type, "text/html", 9), "%s", rep.content_type);
    cr_expect(strstr(rep.body, "<h2>Night report: tiny, 1 s a run</h2>"), "%.300s", rep.body);
    cr_expect(strstr(rep.body, "id=\"report-data\">{"), "no report JSON in the page");
    cr_expect(strstr(rep.body, "<script src=\"/ui/report.js\">"), "no chart script");
    tu_reply_free(&rep);
    tu_http(d, "GET", "/ui/report.js", NULL, 0, NULL, &rep);
    cr_expect_eq(rep.status, 200);
    tu_reply_free(&rep);
    expect_error(d, "GET", "/v1/report?dataset=tiny&budget=time:1&baseline=999", NULL, 0, 404,
                 "not_found", "baseline: experiment 999 is not in this scope");
    expect_error(d, "GET", "/v1/report?format=pdf", NULL, 0, 400, "invalid_query", "format");

    /* The CLI prints the daemon's Markdown. */
    tu_run_t run;
    char bl[32];
    snprintf(bl, sizeof bl, "%ld", ids[2]);
    tu_run_bin(&run, 30, "report", "--url", d->url, "--dataset", "tiny", "--budget", "time:1",
               "--baseline", bl, NULL);
    cr_expect_eq(run.exit_code, 0, "%s", run.err);
    cr_expect(strstr(run.out, "## The answer"), "%s", run.out);
    cr_expect(strstr(run.out, "test_bpb (sealed)"), "%s", run.out);
    cr_expect(strstr(run.out, "## What failed\n\nNothing failed."), "%s", run.out);
    tu_run_free(&run);
    tu_run_bin(&run, 30, "report", "--url", d->url, "--baseline", "x", NULL);
    cr_expect_eq(run.exit_code, 2);
    tu_run_free(&run);
    daemon_stop(d);
    for (int i = 0; i < 3; i++) free(specs[i]);
}

/* The threads of process pid now (its /proc/PID/task entries); -1 when it
 * is gone. */
static int task_count(long pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/task", pid);
    DIR *dir = opendir(path);
    if (!dir) return -1;
    int n = 0;
    for (struct dirent *de; (de = readdir(dir));)
        if (de->d_name[0] != '.') n++;
    closedir(dir);
    return n;
}

/* The most threads experiment id's worker has had over a second of its
 * training (it must be training: progress past step 2). */
static int worker_threads(const daemon_t *d, long id) {
    wait_progress(d, id, 2, 60);
    cJSON *st = tu_get_json(d, "/v1/status");
    const cJSON *e =
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(st, "slots"), 0), "experiment");
    long pid = (long)tu_jnum(e, "pid");
    cr_assert(pid > 0 && (long)tu_jnum(e, "id") == id, "no worker pid in /v1/status");
    cJSON_Delete(st);
    int most = 0;
    for (int i = 0; i < 20; i++, tu_sleep_ms(50)) {
        int n = task_count(pid);
        if (n > most) most = n;
    }
    char path[64];
    snprintf(path, sizeof path, "/v1/experiments/%ld/cancel", id);
    cJSON_Delete(tu_http_json(d, "POST", path, "", 200));
    cJSON_Delete(wait_for(d, id, "cancelled", 20));
    return most;
}

/* `serve --threads-per-slot 1` and a spec that leaves resources.threads at
 * 0: the worker runs the slot's one thread (its memory limit is sized for
 * one), as many as a spec asking for 1 gets, not one per CPU of the slot.
 * Counted in /proc/PID/task while the real engine trains. */
Test(daemon, a_slot_of_one_thread_runs_one_thread) {
    cpu_set_t set;
    cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0);
    if (CPU_COUNT(&set) < 2) cr_log_info("one CPU: the test cannot tell one thread from all");
    const char *extra[] = {"--threads-per-slot", "1", NULL};
    daemon_t *d = daemon_start(state, extra);
    int n[2];
    for (int threads = 0; threads <= 1; threads++) {
        char *s = tu_path("{\"name\":\"t%d\",\"dataset\":\"tiny\",\"seed\":%d,\"time_budget_s\":60,"
                          "\"model\":{\"depth\":2,\"n_embd\":64,\"n_head\":2,\"seq_len\":32},"
                          "\"train\":{\"batch_size\":8,\"total_batch_tokens\":256},"
                          "\"resources\":{\"threads\":%d,\"peak_gflops\":10}}",
                          threads, threads + 1, threads);
        n[threads] = worker_threads(d, submit(d, s));
        free(s);
    }
    cr_log_info("worker threads: %d with resources.threads 0, %d with 1", n[0], n[1]);
    cr_expect(n[1] >= 1);
    cr_expect_eq(n[0], n[1], "resources.threads 0 on a 1-thread slot ran %d threads, 1 ran %d",
                 n[0], n[1]);
    daemon_stop(d);
}
