/* test_loop.c - the autonomous loop end to end: `nightshift serve` and the
 * reference agent (`nightshift agent`) as two processes hooked together on
 * loopback, with nothing submitted by the test.
 *
 * The daemon starts on an empty queue, tells the agent so (queue.empty), and
 * runs whatever the agent answers; every finished run goes back to the agent,
 * whose reply is the next variant. A whole "night" of that takes ~12 s, so it
 * runs once per test run and is recorded; each test then judges one behaviour
 * over the record.
 *
 * The night (run_night) only watches: it polls GET /v1/experiments until
 * WANT_SUCCEEDED runs have succeeded (a hard deadline), records the last list,
 * GET /v1/best with a copy of the database taken at that moment, and
 * GET /v1/noise, then stops both processes with SIGTERM and records how they
 * exited. What stays behind: those HTTP answers, the daemon's database at
 * rest, the agent's state file and both processes' stderr.
 *
 * Sharing: a report hook in the test runner makes one directory for the suite
 * (NIGHT_ENV, removed when all tests are done). The first test to take its
 * lock runs the night there; the others wait for the lock (a hard timeout)
 * and find the record. A night that failed is not re-run: the tests after it
 * fail at once, naming the test that ran it and where it stopped. Without the
 * hook (a test started some other way) a test runs its own night.
 *
 * The corpus is tu_prep_tiny's (as in test_daemon.c), prepared as the dataset
 * "default"; the baseline is a model small enough for hundreds of steps in
 * its 2 s budget. A run takes about 2.2 s end to end, also under the
 * sanitizers, so the five take about 11 s; the deadline leaves room for a
 * loaded machine. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <criterion/logging.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/testutil.h"

#define START_TIMEOUT_S 20.0  /* until a server prints its port (sanitizer builds are slow) */
#define STOP_TIMEOUT_S  10.0  /* SIGTERM to exit */
#define LOOP_DEADLINE_S 60.0  /* for WANT_SUCCEEDED runs, from the daemon's start */
#define TEST_TIMEOUT_S  150.0 /* one test; the one that runs the night needs ~110 s at worst */
#define NIGHT_WAIT_S    140.0 /* for another test's night to end */
#define WANT_SUCCEEDED  5
#define SECRET          "loop-secret"
#define NIGHT_ENV       "NIGHTSHIFT_TEST_LOOP_DIR" /* the shared night's directory */

/* The recorded night's directory (malloc'd), shared or this test's own. */
static char *night_dir;
static int night_private; /* night_dir is this test's own: remove it in fini */
static tu_server_t agent, server;

/* ------------------------------------------------------ the shared record */

static char *hook_dir; /* in the runner: the directory the hook made */

/* In the runner, before the suite's tests start (they inherit NIGHT_ENV). */
ReportHook(PRE_SUITE)(struct criterion_suite_set *set) {
    if (strcmp(set->suite.name, "loop") != 0 || hook_dir) return;
    const char *base = getenv("TMPDIR");
    if (asprintf(&hook_dir, "%s/nightshift-loop.XXXXXX", base && *base ? base : "/tmp") < 0) {
        hook_dir = NULL;
        return;
    }
    if (mkdtemp(hook_dir))
        setenv(NIGHT_ENV, hook_dir, 1);
    else
        free(hook_dir), hook_dir = NULL;
}

/* In the runner, once every test has ended (POST_SUITE may come earlier). */
ReportHook(POST_ALL)(struct criterion_global_stats *stats) {
    tu_rmrf(hook_dir);
    free(hook_dir);
    hook_dir = NULL;
}

/* night_dir/name in one of four rotating static buffers. */
static const char *night_path(const char *name) {
    static char paths[4][1024];
    static int k;
    k = (k + 1) % 4;
    int n = snprintf(paths[k], sizeof paths[k], "%s/%s", night_dir, name);
    cr_assert(n > 0 && (size_t)n < sizeof paths[k], "path too long: %s/%s", night_dir, name);
    return paths[k];
}

/* The recorded file name, parsed as JSON (caller deletes). */
static cJSON *night_json(const char *name) {
    char *text = tu_read(night_path(name));
    cr_assert(text, "the night recorded no %s", name);
    cJSON *o = cJSON_Parse(text);
    cr_assert(o, "the night's %s is not JSON: %s", name, text);
    free(text);
    return o;
}

/* A recorded database (file under night_dir), read-only; caller closes. */
static sqlite3 *night_db(const char *name) {
    return tu_db_open(night_path(name));
}

/* The daemon's database at rest. */
static sqlite3 *db_at_rest(void) {
    return night_db("state/nightshift.db");
}

/* tu_sql_int on the daemon's database at rest. */
static long long at_rest(const char *sql, long long arg) {
    sqlite3 *db = db_at_rest();
    long long v = tu_sql_int(db, sql, arg);
    sqlite3_close(db);
    return v;
}

/* The id of the night's first experiment. */
static long long first_experiment(void) {
    return at_rest("SELECT min(id) FROM experiments", 0);
}

/* The last `max` bytes of a recorded file, for messages (malloc'd). */
static char *night_tail(const char *name, size_t max) {
    char *text = tu_read(night_path(name));
    if (!text) return strdup("(none)");
    size_t n = strlen(text);
    if (n > max) memmove(text, text + n - max, max + 1);
    return text;
}

/* ---------------------------------------------------------------- the night */

/* The agent's starting point: a model small enough that a 2 s budget means
 * hundreds of steps, one thread, and a fixed peak so no calibration runs. */
static const char BASELINE[] =
    "{\"name\":\"baseline\",\"seed\":1,\"dataset\":\"default\",\"time_budget_s\":2,"
    "\"model\":{\"depth\":2,\"n_embd\":32,\"n_head\":2,\"seq_len\":32},"
    "\"train\":{\"batch_size\":4,\"total_batch_tokens\":128},"
    "\"resources\":{\"threads\":1,\"peak_gflops\":10}}\n";

/* Say what the night is doing, for a test that finds it unfinished. */
static void phase(const char *what) {
    char *text = tu_path("loop/%s, %s", criterion_current_test->name, what);
    tu_write(night_path("phase"), text);
    free(text);
}

/* Fail (with its stderr) if the server has exited. */
static void expect_running(tu_server_t *s) {
    int status = 0;
    if (s->pid > 0 && waitpid(s->pid, &status, WNOHANG) == s->pid) {
        s->pid = 0;
        tu_server_fail(s, "the %s exited during the night (status 0x%x)", s->name, status);
    }
}

/* GET path, which must answer 200: the body (caller frees). */
static char *get_body(tu_server_t *s, const char *path) {
    tu_reply_t r;
    tu_http(s, "GET", path, NULL, 0, NULL, &r);
    if (r.status != 200) tu_server_fail(s, "GET %s: HTTP %ld: %s", path, r.status, r.body);
    return r.body;
}

/* Experiments with status st in a GET /v1/experiments answer. */
static int count_status(const cJSON *list, const char *st) {
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(list, "experiments")) {
        const char *s = tu_jstr(e, "status");
        n += s && !strcmp(s, st);
    }
    return n;
}

/* A consistent copy of the live database in path; returns its succeeded count. */
static long long db_snapshot(sqlite3 *live, const char *path) {
    sqlite3 *copy = NULL;
    cr_assert_eq(sqlite3_open(path, &copy), SQLITE_OK, "%s: %s", path, sqlite3_errmsg(copy));
    sqlite3_backup *b = sqlite3_backup_init(copy, "main", live, "main");
    cr_assert(b, "backup to %s: %s", path, sqlite3_errmsg(copy));
    int rc = sqlite3_backup_step(b, -1);
    sqlite3_backup_finish(b);
    cr_assert_eq(rc, SQLITE_DONE, "backup to %s: %s", path, sqlite3_errstr(rc));
    long long n =
        tu_sql_int(copy, "SELECT count(*) FROM experiments WHERE status = 'succeeded'", 0);
    sqlite3_close(copy);
    return n;
}

/* GET /v1/best with the database as it was when it answered (best.json,
 * best.db). Runs keep finishing meanwhile, so the pair is taken again when
 * the number of successes changed during it. */
static void record_best(void) {
    sqlite3 *live = db_at_rest(); /* not at rest yet: read-only beside the daemon */
    for (int attempt = 0;; attempt++) {
        cr_assert_lt(attempt, 5, "runs kept finishing while /v1/best was recorded");
        long long before =
            tu_sql_int(live, "SELECT count(*) FROM experiments WHERE status = 'succeeded'", 0);
        char *best = get_body(&server, "/v1/best");
        if (db_snapshot(live, night_path("best.db")) == before) {
            tu_write(night_path("best.json"), best);
            free(best);
            break;
        }
        free(best);
    }
    sqlite3_close(live);
}

/* Stop s with SIGTERM and record how it exited in rec[name]. */
static void record_stop(cJSON *rec, tu_server_t *s) {
    int timed_out, status = tu_server_term(s, STOP_TIMEOUT_S, &timed_out);
    cJSON *o = cJSON_AddObjectToObject(rec, s->name);
    cJSON_AddNumberToObject(o, "status", status);
    cJSON_AddBoolToObject(o, "timed_out", timed_out);
}

/* The whole night in night_dir; night.json, written last, marks it done. */
static void run_night(void) {
    double t_start = tu_now();
    phase("preparing the corpus");
    char *state = tu_path("%s/state", night_dir);
    char *baseline = tu_path("%s/baseline.json", night_dir);
    char *agent_state = tu_path("%s/agent-state.json", night_dir);
    tu_write(baseline, BASELINE);
    tu_prep_tiny(night_path("corpus.jsonl"), state, "default");

    phase("starting the agent");
    char *agent_argv[] = {(char *)tu_bin(), "agent",      "--listen", "127.0.0.1:0", "--secret",
                          SECRET,           "--baseline", baseline,   "--state",     agent_state,
                          "--seed",         "1",          NULL};
    tu_server_start(&agent, "agent", agent_argv, night_path("agent.err"), START_TIMEOUT_S);

    phase("starting the daemon");
    char *hook_url = tu_path("%s/hook", agent.url);
    char *serve_argv[] = {(char *)tu_bin(), "serve",   "--dir",       state,         "--listen",
                          "127.0.0.1:0",    "--slots", "1",           "--agent-url", hook_url,
                          "--agent-secret", SECRET,    "--memory-mb", "0",           NULL};
    tu_server_start(&server, "daemon", serve_argv, night_path("daemon.err"), START_TIMEOUT_S);
    free(hook_url), free(state), free(baseline), free(agent_state);

    /* Watch, never submit. */
    phase("waiting for the runs");
    double t0 = tu_now(), deadline = t0 + LOOP_DEADLINE_S;
    char *list_text = NULL;
    int succeeded;
    for (;;) {
        expect_running(&agent);
        expect_running(&server);
        free(list_text);
        list_text = get_body(&server, "/v1/experiments?limit=1000");
        cJSON *list = cJSON_Parse(list_text);
        cr_assert(list, "GET /v1/experiments is not JSON: %s", list_text);
        succeeded = count_status(list, "succeeded");
        cJSON_Delete(list);
        if (succeeded >= WANT_SUCCEEDED || tu_now() > deadline) break;
        tu_sleep_ms(100);
    }
    double loop_s = tu_now() - t0;
    tu_write(night_path("experiments.json"), list_text);
    free(list_text);

    phase("recording /v1/best and /v1/noise");
    record_best();
    char *noise = get_body(&server, "/v1/noise");
    tu_write(night_path("noise.json"), noise);
    free(noise);

    phase("stopping the daemon and the agent");
    cJSON *rec = cJSON_CreateObject();
    record_stop(rec, &server);
    record_stop(rec, &agent);
    cJSON_AddNumberToObject(rec, "loop_seconds", loop_s);
    char *text = cJSON_Print(rec);
    const char *tmp = night_path("night.json.tmp");
    tu_write(tmp, text);
    cr_assert(rename(tmp, night_path("night.json")) == 0, "rename: %s", strerror(errno));
    cr_log_info("loop: the night took %.1f s (%d runs succeeded in %.1f s)", tu_now() - t_start,
                succeeded, loop_s);
    free(text);
    cJSON_Delete(rec);
}

/* The night in the shared directory: wait for its lock, then run it unless
 * an earlier test did. */
static void shared_night(void) {
    int fd = open(night_path("lock"), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    cr_assert(fd >= 0, "%s: %s", night_path("lock"), strerror(errno));
    double deadline = tu_now() + NIGHT_WAIT_S;
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        cr_assert(errno == EWOULDBLOCK || errno == EINTR, "flock: %s", strerror(errno));
        if (tu_now() > deadline) {
            char *was = tu_read(night_path("phase"));
            cr_assert_fail("the night did not end within %g s (%s)", NIGHT_WAIT_S,
                           was ? was : "not started");
        }
        tu_sleep_ms(100);
    }
    if (access(night_path("night.json"), F_OK) != 0) {
        char *was = tu_read(night_path("phase"));
        cr_assert_not(was, "the night failed in %s: see that test's failure", was);
        run_night();
    }
    close(fd); /* unlocks */
}

static void setup(void) {
    unsetenv("NIGHTSHIFT_TOKEN");
    unsetenv("NIGHTSHIFT_AGENT_SECRET");
    cr_assert_eq(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK);
    const char *shared = getenv(NIGHT_ENV);
    night_private = !shared || !*shared;
    night_dir = night_private ? tu_tmpdir() : strdup(shared);
    cr_assert(night_dir, "out of memory");
    if (night_private)
        run_night();
    else
        shared_night();
}

static void teardown(void) {
    tu_server_release(&server);
    tu_server_release(&agent);
    if (night_private) tu_rmrf(night_dir);
    free(night_dir);
    night_dir = NULL;
    curl_global_cleanup();
}

TestSuite(loop, .init = setup, .fini = teardown, .timeout = TEST_TIMEOUT_S);

/* ================================================================= tests */

/* Daemon + reference agent, no human input: WANT_SUCCEEDED runs within the
 * deadline, all proposed by the agent (nothing else submits). */
Test(loop, runs_succeed_unattended) {
    cJSON *list = night_json("experiments.json");
    int ok = count_status(list, "succeeded");
    if (ok < WANT_SUCCEEDED) {
        char *alog = night_tail("agent.err", 2000);
        cr_assert_fail("%d of %d runs succeeded within %g s (%d experiments, %d diverged)\n"
                       "--- agent stderr (tail) ---\n%s",
                       ok, WANT_SUCCEEDED, LOOP_DEADLINE_S,
                       cJSON_GetArraySize(cJSON_GetObjectItem(list, "experiments")),
                       count_status(list, "diverged"), alog);
    }
    cJSON_Delete(list);
    cr_expect_geq(at_rest("SELECT count(*) FROM experiments WHERE status = 'succeeded'", 0),
                  WANT_SUCCEEDED, "fewer successes in the database than over HTTP");
}

/* A diverged variant is a fair outcome of a search; a crash, a failure or a
 * timeout of the tiny model is not. */
Test(loop, no_run_fails_crashes_or_times_out) {
    cJSON *list = night_json("experiments.json");
    int other = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(list, "experiments")) {
        const char *st = tu_jstr(e, "status");
        cr_assert(st, "an experiment without a status");
        if (!strcmp(st, "succeeded") || !strcmp(st, "diverged") || !strcmp(st, "queued") ||
            !strcmp(st, "running"))
            continue;
        other++;
        cr_log_warn("experiment %ld ended %s: %s", (long)tu_jnum(e, "id"), st,
                    tu_jstr(e, "reason") ? tu_jstr(e, "reason") : "no reason");
    }
    cr_expect_eq(other, 0, "%d experiments failed, crashed or timed out", other);
    cJSON_Delete(list);
}

/* GET /v1/best against the database as it was: the configuration (repeats
 * with other seeds together) with the lowest mean val_bpb, known by its
 * first run. */
Test(loop, best_is_the_configuration_with_the_lowest_mean) {
    cJSON *reply = night_json("best.json");
    sqlite3 *db = night_db("best.db");
    const char *min_sql = "SELECT avg(r.val_bpb) FROM results r JOIN experiments e ON "
                          "e.id = r.experiment_id WHERE e.status = 'succeeded' "
                          "GROUP BY e.config_hash ORDER BY avg(r.val_bpb), min(e.id) LIMIT 1";
    const char *min_id_sql = "SELECT min(e.id) FROM results r JOIN experiments e ON "
                             "e.id = r.experiment_id WHERE e.status = 'succeeded' "
                             "GROUP BY e.config_hash ORDER BY avg(r.val_bpb), min(e.id) "
                             "LIMIT 1";
    long long n_ok =
        tu_sql_int(db, "SELECT count(*) FROM experiments WHERE status = 'succeeded'", 0);
    const cJSON *best = cJSON_GetObjectItem(reply, "best");
    cr_assert(cJSON_IsObject(best), "GET /v1/best has no best after %lld successes", n_ok);
    double min_bpb = tu_sql_double(db, min_sql, 0);
    long long id = (long long)tu_jnum(best, "id");
    double bpb = tu_jnum(best, "mean_val_bpb");
    cr_expect_float_eq(bpb, min_bpb, 1e-12,
                       "/v1/best: #%lld with mean val_bpb %.6f, the minimum mean is %.6f", id, bpb,
                       min_bpb);
    cr_expect_eq(id, tu_sql_int(db, min_id_sql, 0),
                 "/v1/best's #%lld is not the first run of the best configuration", id);
    cr_log_info("loop: best #%lld val_bpb %.4f after %lld successes", id, bpb, n_ok);
    sqlite3_close(db);
    cJSON_Delete(reply);
}

/* The best is retrievable: its whole configuration, as stored. */
Test(loop, best_carries_the_stored_spec) {
    cJSON *reply = night_json("best.json");
    const cJSON *best = cJSON_GetObjectItem(reply, "best");
    cr_assert(cJSON_IsObject(best), "GET /v1/best has no best");
    long long id = (long long)tu_jnum(best, "id");
    sqlite3 *db = night_db("best.db");
    sqlite3_stmt *st = NULL;
    cr_assert_eq(
        sqlite3_prepare_v2(db, "SELECT spec FROM experiments WHERE id = ?1", -1, &st, NULL),
        SQLITE_OK, "%s", sqlite3_errmsg(db));
    sqlite3_bind_int64(st, 1, id);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "no experiment %lld", id);
    cJSON *stored = cJSON_Parse((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    cr_assert(stored, "experiment %lld: the stored spec is not JSON", id);
    const cJSON *spec = cJSON_GetObjectItem(best, "spec");
    cr_expect(cJSON_IsObject(cJSON_GetObjectItem(spec, "model")), "/v1/best has no full spec");
    cr_expect(cJSON_Compare(spec, stored, 1), "/v1/best's spec differs from the stored one");
    cJSON_Delete(stored);
    sqlite3_close(db);
    cJSON_Delete(reply);
}

/* The baseline's three seeds measured the noise. */
Test(loop, noise_is_measured_from_repeated_seeds) {
    cJSON *noise = night_json("noise.json");
    cr_expect_geq(tu_jnum(noise, "configurations"), 1, "no configuration with two seeds");
    cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(noise, "sd")), "no noise estimate");
    cJSON_Delete(noise);
}

/* SIGTERM: exit 0 within STOP_TIMEOUT_S, no sanitizer report in stderr. */
static void expect_clean_stop(const char *name) {
    cJSON *rec = night_json("night.json");
    const cJSON *o = cJSON_GetObjectItem(rec, name);
    cr_assert(cJSON_IsObject(o), "the night recorded no stop of the %s", name);
    int status = (int)tu_jnum(o, "status");
    tu_server_t s = {.errlog = tu_path("%s/%s.err", night_dir, name)};
    snprintf(s.name, sizeof s.name, "%s", name);
    if (cJSON_IsTrue(cJSON_GetObjectItem(o, "timed_out")))
        tu_server_fail(&s, "the %s did not exit within %g s of SIGTERM", name, STOP_TIMEOUT_S);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        tu_server_fail(&s, "the %s did not shut down cleanly (status 0x%x)", name, status);
    tu_server_expect_clean_log(&s);
    free(s.errlog);
    cJSON_Delete(rec);
}

Test(loop, daemon_stops_cleanly) {
    expect_clean_stop("daemon");
}

Test(loop, agent_stops_cleanly) {
    expect_clean_stop("agent");
}

Test(loop, every_experiment_comes_from_the_agent) {
    cr_expect_gt(at_rest("SELECT count(*) FROM experiments", 0), 0, "no experiments");
    cr_expect_eq(at_rest("SELECT count(*) FROM experiments WHERE source != 'agent'", 0), 0,
                 "experiments that the agent did not propose");
}

Test(loop, no_run_is_left_running_after_a_clean_stop) {
    cr_expect_eq(at_rest("SELECT count(*) FROM experiments WHERE status = 'running'", 0), 0,
                 "rows left running after a clean stop");
}

Test(loop, every_success_has_a_val_bpb) {
    cr_expect_eq(at_rest("SELECT count(*) FROM experiments e LEFT JOIN results r ON "
                         "r.experiment_id = e.id WHERE e.status = 'succeeded' AND "
                         "NOT (r.val_bpb > 0)",
                         0),
                 0, "succeeded runs without a val_bpb");
}

/* In sequence: with one slot, each run started after the previous one
 * finished (times are ISO-8601 UTC strings, which sort as times). */
Test(loop, runs_never_overlap_on_one_slot) {
    long long started = at_rest("SELECT count(*) FROM experiments WHERE started IS NOT NULL", 0);
    cr_expect_geq(started, WANT_SUCCEEDED, "only %lld runs started", started);
    cr_expect_eq(at_rest("SELECT count(*) FROM experiments a JOIN experiments b ON a.id != b.id "
                         "WHERE a.started IS NOT NULL AND b.started IS NOT NULL "
                         "AND a.started <= b.started "
                         "AND (a.finished IS NULL OR a.finished > b.started)",
                         0),
                 0, "two runs overlapped in time with one slot");
}

Test(loop, agent_proposes_variants_not_repeats) {
    long long distinct = at_rest("SELECT count(DISTINCT config_hash || seed) FROM experiments"
                                 " WHERE status = 'succeeded'",
                                 0);
    cr_expect_geq(distinct, 4, "only %lld distinct specs among the successes", distinct);
}

/* The first three are the baseline with seeds 1..3 (no parent), to measure
 * the noise. */
Test(loop, first_runs_are_the_baseline_seeds) {
    cr_expect_eq(at_rest("SELECT count(*) FROM experiments WHERE id BETWEEN ?1 AND ?1 + 2 AND "
                         "parent IS NULL AND name = 'baseline' AND seed = id - ?1 + 1",
                         first_experiment()),
                 3, "the first three experiments are not the baseline's seeds 1..3");
}

/* Every run after the baseline's seeds names an earlier successful run as
 * its parent. */
Test(loop, mutations_name_an_earlier_successful_parent) {
    cr_expect_eq(at_rest("SELECT count(*) FROM experiments e WHERE e.id > ?1 + 2 AND "
                         "(e.parent IS NULL OR e.parent >= e.id OR NOT EXISTS (SELECT 1 FROM "
                         "experiments p WHERE p.id = e.parent AND p.status = 'succeeded'))",
                         first_experiment()),
                 0, "a mutation without an earlier successful parent");
}

/* The kick-off: the daemon started on an empty queue and said so. */
Test(loop, hook_reports_the_empty_queue) {
    cr_expect_geq(at_rest("SELECT count(*) FROM hook_deliveries WHERE event_type = "
                          "'queue.empty' AND http_status BETWEEN 200 AND 299",
                          0),
                  1, "the empty queue was never reported to the agent");
}

Test(loop, hook_reports_every_finished_run) {
    long long n = at_rest("SELECT count(*) FROM hook_deliveries WHERE event_type = "
                          "'experiment.finished' AND http_status BETWEEN 200 AND 299",
                          0);
    cr_expect_geq(n, WANT_SUCCEEDED - 1, "%lld finished events delivered", n);
}

/* Never an error (a 401 would be a signature the agent refused). */
Test(loop, agent_answers_every_delivery) {
    cr_expect_eq(at_rest("SELECT count(*) FROM hook_deliveries WHERE http_status >= 300", 0), 0,
                 "the agent answered a delivery with an error");
}

Test(loop, agent_never_proposes_an_invalid_spec) {
    cr_expect_eq(at_rest("SELECT count(*) FROM hook_deliveries WHERE event_type = "
                         "'experiment.rejected'",
                         0),
                 0, "the agent proposed an invalid spec");
}

/* The agent's state: saved, and it proposed every experiment there is. */
Test(loop, agent_state_accounts_for_every_experiment) {
    cJSON *st = night_json("agent-state.json");
    cr_assert(cJSON_IsObject(st), "the agent's state is not a JSON object");
    long long n = at_rest("SELECT count(*) FROM experiments", 0);
    cr_expect_geq(tu_jnum(st, "proposals"), (double)n,
                  "the agent proposed fewer specs than the daemon ran (%lld)", n);
    cJSON_Delete(st);
}

Test(loop, agent_best_is_a_succeeded_run) {
    cJSON *st = night_json("agent-state.json");
    const cJSON *abest = cJSON_GetObjectItem(st, "best");
    cr_assert(cJSON_IsObject(abest), "the agent kept no best");
    cr_expect_eq(at_rest("SELECT status = 'succeeded' FROM experiments WHERE id = ?1",
                         (long long)tu_jnum(abest, "id")),
                 1, "the agent's best is not a succeeded experiment");
    cJSON_Delete(st);
}
