/* test_loop.c - the autonomous loop end to end: `nightshift serve` and the
 * reference agent (`nightshift agent`) as two processes hooked together on
 * loopback, with nothing submitted by the test.
 *
 * The daemon starts on an empty queue, tells the agent so (queue.empty), and
 * runs whatever the agent answers; every finished run goes back to the agent,
 * whose reply is the next variant. The test only watches: it polls
 * GET /v1/experiments until WANT_SUCCEEDED runs have succeeded (a hard
 * deadline), compares GET /v1/best with the database, stops both processes
 * with SIGTERM (each must exit 0), and then reads the database with SQL: every
 * row came from the agent, the runs never overlapped (one slot), the variants
 * differ, each mutation names an earlier successful run as its parent, and the
 * hook's deliveries were answered 2xx. The agent's state file must account
 * for every experiment.
 *
 * The corpus is tu_prep_tiny's (as in test_daemon.c), prepared as the dataset
 * "default"; the baseline is a model small enough for hundreds of steps in
 * its 2 s budget. A run takes about 2.2 s end to end, also under the
 * sanitizers, so the five take about 11 s; the deadline leaves room for a
 * loaded machine. */
#include <cJSON.h>
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <curl/curl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "testutil.h"

#define START_TIMEOUT_S 20.0 /* until a server prints its port (sanitizer builds are slow) */
#define STOP_TIMEOUT_S  10.0 /* SIGTERM to exit */
#define LOOP_DEADLINE_S 60.0 /* for WANT_SUCCEEDED runs, from the daemon's start */
#define WANT_SUCCEEDED  5
#define SECRET          "loop-secret"

static char *tmp;   /* the test's directory */
static char *state; /* tmp/state: the daemon's --dir, with datasets/default */
static char *baseline_path, *agent_state;
static tu_server_t agent, server;

/* ---------------------------------------------------------------- fixture */

/* The agent's starting point: a model small enough that a 2 s budget means
 * hundreds of steps, one thread, and a fixed peak so no calibration runs. */
static const char BASELINE[] =
    "{\"name\":\"baseline\",\"seed\":1,\"dataset\":\"default\",\"time_budget_s\":2,"
    "\"model\":{\"depth\":2,\"n_embd\":32,\"n_head\":2,\"seq_len\":32},"
    "\"train\":{\"batch_size\":4,\"total_batch_tokens\":128},"
    "\"resources\":{\"threads\":1,\"peak_gflops\":10}}\n";

static void setup(void) {
    unsetenv("NIGHTSHIFT_TOKEN");
    unsetenv("NIGHTSHIFT_AGENT_SECRET");
    cr_assert_eq(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK);
    tmp = tu_tmpdir();
    state = tu_path("%s/state", tmp);
    baseline_path = tu_path("%s/baseline.json", tmp);
    agent_state = tu_path("%s/agent-state.json", tmp);
    tu_write(baseline_path, BASELINE);
    char *corpus = tu_path("%s/corpus.jsonl", tmp);
    tu_prep_tiny(corpus, state, "default");
    free(corpus);
}

static void teardown(void) {
    tu_server_release(&server);
    tu_server_release(&agent);
    tu_rmrf(tmp);
    free(tmp);
    free(state);
    free(baseline_path);
    free(agent_state);
    curl_global_cleanup();
}

TestSuite(loop, .init = setup, .fini = teardown, .timeout = 90);

/* -------------------------------------------------------------- helpers */

/* Fail (with its stderr) if the server has exited. */
static void expect_running(tu_server_t *s) {
    int status = 0;
    if (s->pid > 0 && waitpid(s->pid, &status, WNOHANG) == s->pid) {
        s->pid = 0;
        tu_server_fail(s, "the %s exited during the loop (status 0x%x)", s->name, status);
    }
}

/* Tally of GET /v1/experiments. */
typedef struct {
    int total, succeeded, unfinished, diverged;
    int other; /* ended in any other status: failed, crashed, timeout, ... */
} tally_t;

static void tally(tu_server_t *s, tally_t *t) {
    memset(t, 0, sizeof *t);
    cJSON *list = tu_get_json(s, "/v1/experiments?limit=1000");
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(list, "experiments")) {
        const char *st = tu_jstr(e, "status");
        cr_assert(st, "an experiment without a status");
        t->total++;
        if (!strcmp(st, "succeeded"))
            t->succeeded++;
        else if (!strcmp(st, "queued") || !strcmp(st, "running"))
            t->unfinished++;
        else if (!strcmp(st, "diverged"))
            t->diverged++;
        else {
            t->other++;
            cr_log_warn("experiment %ld ended %s: %s", (long)tu_jnum(e, "id"), st,
                        tu_jstr(e, "reason") ? tu_jstr(e, "reason") : "no reason");
        }
    }
    cJSON_Delete(list);
}

static sqlite3 *db_open(void) {
    char *path = tu_path("%s/nightshift.db", state);
    sqlite3 *db = tu_db_open(path);
    free(path);
    return db;
}

/* The stored spec of experiment id, parsed (caller deletes). */
static cJSON *sql_spec(sqlite3 *db, long long id) {
    sqlite3_stmt *st = NULL;
    cr_assert_eq(
        sqlite3_prepare_v2(db, "SELECT spec FROM experiments WHERE id = ?1", -1, &st, NULL),
        SQLITE_OK, "%s", sqlite3_errmsg(db));
    sqlite3_bind_int64(st, 1, id);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "no experiment %lld", id);
    cJSON *spec = cJSON_Parse((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    cr_assert(spec, "experiment %lld: the stored spec is not JSON", id);
    return spec;
}

/* GET /v1/best against the database: the experiment with the lowest val_bpb
 * among the succeeded ones. Runs keep finishing meanwhile, so the comparison
 * is retried when the number of successes changed during it. */
static void expect_best_is_minimum(tu_server_t *s) {
    for (int attempt = 0;; attempt++) {
        cr_assert_lt(attempt, 5, "runs kept finishing while /v1/best was compared");
        sqlite3 *db = db_open();
        const char *count = "SELECT count(*) FROM experiments WHERE status = 'succeeded'";
        long long before = tu_sql_int(db, count, 0);
        cJSON *reply = tu_get_json(s, "/v1/best");
        long long after = tu_sql_int(db, count, 0);
        if (before != after) {
            cJSON_Delete(reply);
            sqlite3_close(db);
            continue;
        }
        /* the configuration (repeats with other seeds together) with the
         * lowest mean val_bpb, known by its first run */
        const char *min_sql = "SELECT avg(r.val_bpb) FROM results r JOIN experiments e ON "
                              "e.id = r.experiment_id WHERE e.status = 'succeeded' "
                              "GROUP BY e.config_hash ORDER BY avg(r.val_bpb), min(e.id) LIMIT 1";
        const char *min_id_sql = "SELECT min(e.id) FROM results r JOIN experiments e ON "
                                 "e.id = r.experiment_id WHERE e.status = 'succeeded' "
                                 "GROUP BY e.config_hash ORDER BY avg(r.val_bpb), min(e.id) "
                                 "LIMIT 1";
        double min_bpb = tu_sql_double(db, min_sql, 0);
        const cJSON *best = cJSON_GetObjectItem(reply, "best");
        cr_assert(cJSON_IsObject(best), "GET /v1/best has no best after %lld successes", after);
        long long id = (long long)tu_jnum(best, "id");
        double bpb = tu_jnum(best, "mean_val_bpb");
        cr_expect_float_eq(bpb, min_bpb, 1e-12,
                           "/v1/best: #%lld with mean val_bpb %.6f, the minimum mean is %.6f", id,
                           bpb, min_bpb);
        cr_expect_eq(id, tu_sql_int(db, min_id_sql, 0),
                     "/v1/best's #%lld is not the first run of the best configuration", id);
        /* retrievable: the whole configuration, as stored */
        cJSON *stored = sql_spec(db, id);
        const cJSON *spec = cJSON_GetObjectItem(best, "spec");
        cr_expect(cJSON_IsObject(cJSON_GetObjectItem(spec, "model")), "/v1/best has no full spec");
        cr_expect(cJSON_Compare(spec, stored, 1), "/v1/best's spec differs from the stored one");
        cr_log_info("loop: best #%lld val_bpb %.4f after %lld successes", id, bpb, after);
        cJSON_Delete(stored);
        cJSON_Delete(reply);
        sqlite3_close(db);
        return;
    }
}

/* ================================================================= tests */

/* Daemon + reference agent, no human input: at least WANT_SUCCEEDED runs in
 * sequence, each proposed by the agent, and the best retrievable. */
Test(loop, agent_drives_the_daemon) {
    char *agent_err = tu_path("%s/agent.err", tmp), *daemon_err = tu_path("%s/daemon.err", tmp);
    char *agent_argv[] = {(char *)tu_bin(), "agent",      "--listen",    "127.0.0.1:0", "--secret",
                          SECRET,           "--baseline", baseline_path, "--state",     agent_state,
                          "--seed",         "1",          NULL};
    tu_server_start(&agent, "agent", agent_argv, agent_err, START_TIMEOUT_S);
    char *hook_url = tu_path("%s/hook", agent.url);
    char *serve_argv[] = {(char *)tu_bin(), "serve",   "--dir",       state,         "--listen",
                          "127.0.0.1:0",    "--slots", "1",           "--agent-url", hook_url,
                          "--agent-secret", SECRET,    "--memory-mb", "0",           NULL};
    tu_server_start(&server, "daemon", serve_argv, daemon_err, START_TIMEOUT_S);

    /* Watch, never submit. */
    double t0 = tu_now(), deadline = t0 + LOOP_DEADLINE_S;
    tally_t t;
    for (;;) {
        expect_running(&agent);
        expect_running(&server);
        tally(&server, &t);
        if (t.succeeded >= WANT_SUCCEEDED) break;
        if (tu_now() > deadline) {
            char *alog = tu_read(agent_err);
            size_t len = alog ? strlen(alog) : 0;
            tu_server_fail(&server,
                           "%d of %d runs succeeded within %g s (%d experiments, %d diverged, "
                           "%d ended otherwise)\n--- agent stderr (tail) ---\n%s",
                           t.succeeded, WANT_SUCCEEDED, LOOP_DEADLINE_S, t.total, t.diverged,
                           t.other, alog ? alog + (len > 2000 ? len - 2000 : 0) : "(none)");
        }
        tu_sleep_ms(100);
    }
    cr_log_info("loop: %d runs succeeded in %.1f s (%d experiments, %d diverged)", t.succeeded,
                tu_now() - t0, t.total, t.diverged);
    /* A diverged variant is a fair outcome of a search; a crash, a failure or
     * a timeout of the tiny model is not. */
    cr_expect_eq(t.other, 0, "%d experiments failed, crashed or timed out", t.other);

    expect_best_is_minimum(&server);
    /* The baseline's three seeds measured the noise. */
    cJSON *noise = tu_get_json(&server, "/v1/noise");
    cr_expect_geq(tu_jnum(noise, "configurations"), 1, "no configuration with two seeds");
    cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(noise, "sd")), "no noise estimate");
    cJSON_Delete(noise);

    tu_server_stop(&server, STOP_TIMEOUT_S);
    tu_server_stop(&agent, STOP_TIMEOUT_S);

    /* The database at rest. */
    sqlite3 *db = db_open();
    long long n = tu_sql_int(db, "SELECT count(*) FROM experiments", 0);
    long long n_ok =
        tu_sql_int(db, "SELECT count(*) FROM experiments WHERE status = 'succeeded'", 0);
    cr_expect_geq(n_ok, WANT_SUCCEEDED);
    cr_expect_eq(tu_sql_int(db, "SELECT count(*) FROM experiments WHERE source != 'agent'", 0), 0,
                 "experiments that the agent did not propose");
    cr_expect_eq(tu_sql_int(db, "SELECT count(*) FROM experiments WHERE status = 'running'", 0), 0,
                 "rows left running after a clean stop");
    cr_expect_eq(tu_sql_int(db,
                            "SELECT count(*) FROM experiments e LEFT JOIN results r ON "
                            "r.experiment_id = e.id WHERE e.status = 'succeeded' AND "
                            "NOT (r.val_bpb > 0)",
                            0),
                 0, "succeeded runs without a val_bpb");

    /* In sequence: with one slot, each run started after the previous one
     * finished (times are ISO-8601 UTC strings, which sort as times). */
    cr_expect_eq(tu_sql_int(db,
                            "SELECT count(*) FROM experiments a JOIN experiments b ON a.id != b.id "
                            "WHERE a.started IS NOT NULL AND b.started IS NOT NULL "
                            "AND a.started <= b.started "
                            "AND (a.finished IS NULL OR a.finished > b.started)",
                            0),
                 0, "two runs overlapped in time with one slot");
    cr_expect_geq(tu_sql_int(db, "SELECT count(*) FROM experiments WHERE started IS NOT NULL", 0),
                  WANT_SUCCEEDED);

    /* Variants, not repeats. */
    long long distinct = tu_sql_int(
        db, "SELECT count(DISTINCT spec_hash) FROM experiments WHERE status = 'succeeded'", 0);
    cr_expect_geq(distinct, 4, "only %lld distinct specs among the successes", distinct);

    /* The first three are the baseline with seeds 1..3 (no parent), to
     * measure the noise; every later one names an earlier successful run as
     * its parent. */
    long long first = tu_sql_int(db, "SELECT min(id) FROM experiments", 0);
    cr_expect_eq(tu_sql_int(db,
                            "SELECT count(*) FROM experiments WHERE id BETWEEN ?1 AND ?1 + 2 AND "
                            "parent IS NULL AND name = 'baseline' AND seed = id - ?1 + 1",
                            first),
                 3, "the first three experiments are not the baseline's seeds 1..3");
    cr_expect_eq(tu_sql_int(db,
                            "SELECT count(*) FROM experiments e WHERE e.id > ?1 + 2 AND "
                            "(e.parent IS NULL OR e.parent >= e.id OR NOT EXISTS (SELECT 1 FROM "
                            "experiments p WHERE p.id = e.parent AND p.status = 'succeeded'))",
                            first),
                 0, "a mutation without an earlier successful parent");

    /* The hook: the kick-off and the finished events were answered 2xx, never
     * an error (a 401 would be a signature the agent refused), and the agent
     * never proposed an invalid spec. */
    long long ok_empty = tu_sql_int(db,
                                    "SELECT count(*) FROM hook_deliveries WHERE event_type = "
                                    "'queue.empty' AND http_status BETWEEN 200 AND 299",
                                    0);
    long long ok_finished = tu_sql_int(db,
                                       "SELECT count(*) FROM hook_deliveries WHERE event_type = "
                                       "'experiment.finished' AND http_status BETWEEN 200 AND 299",
                                       0);
    cr_expect_geq(ok_empty, 1, "the empty queue was never reported to the agent");
    cr_expect_geq(ok_finished, WANT_SUCCEEDED - 1, "%lld finished events delivered", ok_finished);
    cr_expect_eq(tu_sql_int(db, "SELECT count(*) FROM hook_deliveries WHERE http_status >= 300", 0),
                 0, "the agent answered a delivery with an error");
    cr_expect_eq(
        tu_sql_int(
            db, "SELECT count(*) FROM hook_deliveries WHERE event_type = 'experiment.rejected'", 0),
        0, "the agent proposed an invalid spec");

    /* The agent's state: saved, and it proposed every experiment there is. */
    char *text = tu_read(agent_state);
    cr_assert(text, "the agent's state file %s does not exist", agent_state);
    cJSON *st = cJSON_Parse(text);
    cr_assert(cJSON_IsObject(st), "the agent's state is not a JSON object");
    cr_expect_geq(tu_jnum(st, "proposals"), (double)n,
                  "the agent proposed fewer specs than the "
                  "daemon ran");
    const cJSON *abest = cJSON_GetObjectItem(st, "best");
    cr_expect(cJSON_IsObject(abest), "the agent kept no best");
    if (cJSON_IsObject(abest))
        cr_expect_eq(tu_sql_int(db, "SELECT status = 'succeeded' FROM experiments WHERE id = ?1",
                                (long long)tu_jnum(abest, "id")),
                     1, "the agent's best is not a succeeded experiment");
    cJSON_Delete(st);
    free(text);
    sqlite3_close(db);

    free(agent_err), free(daemon_err), free(hook_url);
}
