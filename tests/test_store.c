/* test_store.c - the SQLite store: migrations (fresh, re-open, refused future
 * versions, a failing migration rolled back), the compiled-in schema against
 * the schema directory, the queue (claim order, dedup, finish exactly once, cancel,
 * recovery after a crash), metrics replay, the JSON queries, and a second
 * connection reading the database while the store holds it (WAL).
 *
 * Every test works in its own temporary directory. Where it matters the
 * database is also read with a raw sqlite3 connection, the way a person with
 * the sqlite3 shell would see it. */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <openssl/evp.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/spec.h"
#include "daemon/store/store.h"
#include "tests/testutil.h"

static char err[512];

static void setup(void) {
    tu_dir_init();
    err[0] = '\0';
}

TestSuite(store, .init = setup, .fini = tu_dir_fini, .timeout = 30);

static store_t *open_store(void) {
    store_t *s = NULL;
    int rc = store_open(tu_dir_path("nightshift.db"), &s, err, sizeof err);
    cr_assert_eq(rc, 0, "store_open: %s", err);
    cr_assert_not_null(s);
    return s;
}

/* A raw connection to the store's database, as the sqlite3 shell would open it. */
static sqlite3 *raw_open(const char *name) {
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(tu_dir_path(name), &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    return db;
}

/* The first column of the first row of sql as an integer (-1 when no row). */
static int64_t raw_int(sqlite3 *db, const char *sql) {
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(db));
    int64_t v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    return v;
}

/* The first column of the first row of sql as text, copied into a static
 * buffer ("" for NULL or no row). */
static const char *raw_text(sqlite3 *db, const char *sql) {
    static char buf[4096];
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(db));
    buf[0] = '\0';
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
        snprintf(buf, sizeof buf, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return buf;
}

static void raw_exec(sqlite3 *db, const char *sql) {
    char *msg = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    cr_assert_eq(rc, SQLITE_OK, "%s: %s", sql, msg ? msg : "?");
}

static int last_version(void) {
    return store_migrations[store_n_migrations - 1].version;
}

/* ------------------------------------------------------------ experiments */

/* Canonical JSON of a spec whose model section is model_json (e.g.
 * "\"depth\":2"); the caller frees it. Goes through the engine's parser so the
 * view is tested against real canonical specs. */
static char *canonical(const char *model_json) {
    char text[1024], perr[SPEC_ERR_LEN] = "";
    snprintf(text, sizeof text, "{\"model\":{%s}}", model_json);
    spec_t sp;
    cr_assert_eq(spec_parse(text, strlen(text), &sp, perr, sizeof perr), 0, "%s: %s", text, perr);
    char *c = spec_canonical_json(&sp);
    spec_free(&sp);
    cr_assert_not_null(c);
    return c;
}

/* The spec's configuration hash and scope, as the API files a submission. */
static void file_spec(const char *spec_json, char hash[SPEC_HASH_HEX], store_scope_t *sc) {
    spec_t sp;
    char perr[SPEC_ERR_LEN];
    cr_assert_eq(spec_parse(spec_json, strlen(spec_json), &sp, perr, sizeof perr), 0, "%s", perr);
    cr_assert_eq(spec_config_hash(&sp, hash), 0);
    spec_scope(&sp, sc);
    spec_free(&sp);
}

/* Insert a queued experiment of the model; hash names its configuration
 * (NULL: the spec's, spec_config_hash). */
static int64_t insert_full(store_t *s, const char *name, const char *hash, int64_t seed,
                           int priority, const char *model_json) {
    char *spec = canonical(model_json ? model_json : "");
    char config[SPEC_HASH_HEX];
    store_new_experiment_t e = {.name = name,
                                .tags_json = "[\"t\"]",
                                .spec_json = spec,
                                .config_hash = config,
                                .seed = seed,
                                .source = "api",
                                .priority = priority};
    file_spec(spec, config, &e.scope);
    if (hash) e.config_hash = hash;
    int64_t id = 0;
    int rc = store_insert(s, &e, &id, err, sizeof err);
    free(spec);
    cr_assert_eq(rc, 0, "store_insert: %s", err);
    cr_assert_gt(id, 0);
    return id;
}

static int64_t insert(store_t *s, const char *name, int priority) {
    return insert_full(s, name, NULL, 42, priority, NULL);
}

/* Claim the next experiment, which must be want; returns its attempt. */
static int claim_expect(store_t *s, int64_t want) {
    store_experiment_t x;
    int rc = store_claim_next(s, &x, err, sizeof err);
    cr_assert_eq(rc, 1, "claim: rc %d (%s), want experiment %lld", rc, err, (long long)want);
    cr_assert_eq(x.id, want, "claimed %lld, want %lld", (long long)x.id, (long long)want);
    cr_assert_not_null(x.spec_json);
    int attempt = x.attempt;
    store_experiment_clear(&x);
    return attempt;
}

static store_result_t result_with(double val_bpb) {
    store_result_t r = {.val_bpb = val_bpb,
                        .params_total = 1000,
                        .params_wte = 100,
                        .params_wpe = 0,
                        .params_value_embeds = 200,
                        .params_lm_head = 100,
                        .params_blocks = 590,
                        .params_scalars = 10,
                        .flops_per_token = 6000,
                        .mfu_percent = 12.5,
                        .peak_gflops = 100,
                        .peak_source = "calibration",
                        .tokens_per_second = 5000,
                        .total_tokens = 1.5e6,
                        .num_steps = 300,
                        .training_seconds = 300.01,
                        .total_seconds = 320,
                        .startup_seconds = 5,
                        .eval_seconds = 15,
                        .peak_rss_mb = 512,
                        .time_budget_s = 0,
                        .token_budget = 1500000,
                        .epochs = 0.75};
    return r;
}

/* Insert, claim and finish one succeeded experiment with val_bpb. */
static int64_t succeed(store_t *s, const char *name, double val_bpb, const char *model_json) {
    int64_t id = insert_full(s, name, NULL, 42, 1000, model_json);
    claim_expect(s, id);
    store_result_t r = result_with(val_bpb);
    cr_assert_eq(store_finish(s, id, STORE_SUCCEEDED, NULL, 0, -1, &r, err, sizeof err), 0,
                 "finish: %s", err);
    return id;
}

/* store_get's object, or NULL (err set). */
static cJSON *get(store_t *s, int64_t id, int max_metrics) {
    cJSON *o = NULL;
    store_get(s, id, max_metrics, &o, err, sizeof err);
    return o;
}

/* Experiment id, which must have status and reason (caller deletes). */
static cJSON *get_expect(store_t *s, int64_t id, const char *status, const char *reason) {
    cJSON *o = get(s, id, 0);
    cr_assert_not_null(o, "get %lld: %s", (long long)id, err);
    cr_expect_str_eq(tu_jstr(o, "status"), status);
    cr_expect_str_eq(tu_jstr(o, "reason"), reason);
    return o;
}

static const char *get_status(store_t *s, int64_t id) {
    static char buf[32];
    cJSON *o = get(s, id, 0);
    cr_assert_not_null(o, "get %lld: %s", (long long)id, err);
    snprintf(buf, sizeof buf, "%s", tu_jstr(o, "status"));
    cJSON_Delete(o);
    return buf;
}

/* ------------------------------------------------------------ time */

Test(store, time_format_is_iso8601_utc_with_milliseconds) {
    char buf[STORE_TIME_LEN];
    store_format_time(1795981020123LL, buf, sizeof buf);
    cr_expect_str_eq(buf, "2026-11-29T19:37:00.123Z");
    store_format_time(0, buf, sizeof buf);
    cr_expect_str_eq(buf, "1970-01-01T00:00:00.000Z");
    store_format_time(-1, buf, sizeof buf);
    cr_expect_str_eq(buf, "1969-12-31T23:59:59.999Z");
}

/* ------------------------------------------------------------ migrations */

Test(store, migrations_apply_to_a_fresh_file_and_reopen_is_idempotent) {
    store_t *s = open_store();
    int64_t id = insert(s, "a", 0);
    store_close(s);

    sqlite3 *db = raw_open("nightshift.db");
    cr_expect_eq(raw_int(db, "PRAGMA user_version"), last_version());
    cr_expect_str_eq(raw_text(db, "PRAGMA journal_mode"), "wal");
    const char *objects[] = {"table:experiments",       "table:results",
                             "table:metrics",           "view:leaderboard",
                             "index:experiments_queue", "index:experiments_dedup"};
    for (size_t i = 0; i < sizeof objects / sizeof objects[0]; i++) {
        char sql[256];
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM sqlite_schema WHERE type || ':' || name = '%s'", objects[i]);
        cr_expect_eq(raw_int(db, sql), 1, "%s is missing", objects[i]);
    }
    cr_expect_eq(raw_int(db, "SELECT count(*) FROM pragma_table_list WHERE strict = 1 AND name IN"
                             " ('experiments', 'results', 'metrics')"),
                 3, "the tables must be STRICT");
    sqlite3_close(db);

    /* Twice more: nothing re-applied (CREATE TABLE would fail), data kept. */
    for (int k = 0; k < 2; k++) {
        s = open_store();
        cr_expect_str_eq(get_status(s, id), "queued");
        store_close(s);
    }
    db = raw_open("nightshift.db");
    cr_expect_eq(raw_int(db, "PRAGMA user_version"), last_version());
    cr_expect_eq(raw_int(db, "SELECT count(*) FROM experiments"), 1);
    sqlite3_close(db);
}

Test(store, a_database_from_a_newer_build_is_refused) {
    sqlite3 *db = raw_open("nightshift.db");
    char sql[64], want[128];
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", last_version() + 6);
    raw_exec(db, sql);
    sqlite3_close(db);

    store_t *s = (store_t *)1;
    cr_assert_eq(store_open(tu_dir_path("nightshift.db"), &s, err, sizeof err), -1);
    cr_expect_null(s);
    snprintf(want, sizeof want,
             "store: nightshift.db has schema version %d, this build knows up to %d",
             last_version() + 6, last_version());
    cr_expect_str_eq(err, want);
}

Test(store, migrations_run_in_order_once_each_and_a_failing_one_rolls_back) {
    static const store_migration_t m[] = {
        {1, "001_a.sql", "CREATE TABLE a (x INTEGER) STRICT;\n"},
        {2, "002_b.sql", "CREATE TABLE b (x INTEGER);\nINSERT INTO b VALUES (2);\n"},
        {5, "005_c.sql", "CREATE TABLE c (x INTEGER);\nINSERT INTO no_such_table VALUES (1);\n"},
    };
    const char *p = tu_dir_path("m.db");
    cr_assert_eq(store_migrate(p, m, 1, err, sizeof err), 0, "%s", err);
    cr_assert_eq(store_migrate(p, m, 2, err, sizeof err), 0, "%s", err);
    cr_assert_eq(store_migrate(p, m, 2, err, sizeof err), 0, "%s", err);
    cr_assert_eq(store_migrate(p, m, 3, err, sizeof err), -1);
    cr_expect(strstr(err, "migration 005_c.sql") && strstr(err, "no_such_table"), "err: %s", err);

    sqlite3 *db = raw_open("m.db");
    cr_expect_eq(raw_int(db, "PRAGMA user_version"), 2);
    cr_expect_eq(raw_int(db, "SELECT count(*) FROM b"), 1, "002 ran more than once");
    cr_expect_eq(raw_int(db, "SELECT count(*) FROM sqlite_schema WHERE name = 'c'"), 0,
                 "the failed migration left table c behind");
    sqlite3_close(db);

    cr_assert_eq(store_migrate(p, m, 1, err, sizeof err), -1);
    cr_expect_str_eq(err, "store: m.db has schema version 2, this build knows up to 1");
}

/* schema/current.sql is the schema the migrations make, as `nightshift
 * schema` prints it: a migration that changes the schema without the file
 * regenerated (make schema) fails here. The schema is read from SQLite, not
 * from the migrations' text, so a change the file misses cannot hide. */
Test(store, schema_current_sql_is_the_schema_after_every_migration) {
    char *path = tu_path("%s/schema/current.sql", tu_src());
    char *want = tu_read(path);
    cr_assert_not_null(want, "cannot read %s", path);
    char *got = NULL;
    cr_assert_eq(store_schema_text(tu_dir_path("schema.db"), &got, err, sizeof err), 0, "%s", err);
    cr_expect_str_eq(got, want,
                     "schema/current.sql is out of step with the migrations: make schema");
    sqlite3 *db = raw_open("schema.db");
    int64_t objects = raw_int(db, "SELECT count(*) FROM sqlite_master WHERE sql IS NOT NULL"
                                  " AND name NOT LIKE 'sqlite_%'");
    sqlite3_close(db);
    int64_t creates = 0;
    for (const char *p = got; (p = strstr(p, "\nCREATE ")); p++) creates++;
    cr_expect_eq(creates, objects, "every table, index, view and trigger once");
    cr_expect(strstr(got, "CREATE VIEW leaderboard"), "%s", got);
    free(got);
    free(want);
    free(path);
}

/* The compiled-in table is schema/NNN_*.sql, byte for byte, in file-name order. */
Test(store, the_compiled_schema_is_the_schema_directory) {
    char *dir = tu_path("%s/schema", tu_src());
    struct dirent **names = NULL;
    int n = scandir(dir, &names, NULL, alphasort);
    cr_assert_geq(n, 0, "cannot read %s", dir);
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        const char *f = names[i]->d_name;
        size_t len = strlen(f);
        if (len > 4 && !strcmp(f + len - 4, ".sql") && strcmp(f, "current.sql")) {
            cr_assert_lt(k, store_n_migrations, "%s is not compiled in", f);
            cr_expect_str_eq(store_migrations[k].name, f);
            cr_expect_eq(store_migrations[k].version, atoi(f));
            char *path = tu_path("%s/%s", dir, f);
            char *text = tu_read(path);
            cr_assert_not_null(text, "cannot read %s", path);
            cr_expect_str_eq(store_migrations[k].sql, text, "%s differs from the compiled copy", f);
            free(text);
            free(path);
            k++;
        }
        free(names[i]);
    }
    free(names);
    free(dir);
    cr_expect_eq(k, store_n_migrations);
    cr_expect_eq(store_migrations[0].version, 1);
}

/* Run the generator on the given files (names under tu_dir()); returns its exit status. */
static int embed(const char *files, const char *out) {
    char *cmd = tu_path("cd '%s' && awk -f '%s/scripts/embed-schema.awk' %s > '%s' 2>/dev/null",
                        tu_dir(), tu_src(), files, out);
    int rc = system(cmd);
    free(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

Test(store, the_generator_escapes_text_and_rejects_bad_names_and_order) {
    tu_write(tu_dir_path("001_a.sql"), "SELECT 'a\"b\\c?\?(';\n");
    tu_write(tu_dir_path("010_b.sql"), "-- tab\there\n");
    tu_write(tu_dir_path("bad.sql"), "x\n");
    tu_write(tu_dir_path("002_empty.sql"), "");
    cr_assert_eq(embed("001_a.sql 010_b.sql", "out.c"), 0);

    char *text = tu_read(tu_dir_path("out.c"));
    cr_assert_not_null(text);
    cr_expect(strstr(text, "{1,\n     \"001_a.sql\",\n     \"SELECT 'a\\\"b\\\\c\\?\\?(';\\n\"\n"),
              "%s", text);
    cr_expect(strstr(text, "{10,\n     \"010_b.sql\",\n     \"-- tab\\there\\n\"\n"), "%s", text);
    cr_expect(strstr(text, "const size_t store_n_migrations = 2;"), "%s", text);

    cr_expect_neq(embed("001_a.sql bad.sql", "out2.c"), 0, "a name without NNN_ was accepted");
    cr_expect_neq(embed("010_b.sql 001_a.sql", "out2.c"), 0, "decreasing versions were accepted");
    cr_expect_neq(embed("001_a.sql 002_empty.sql", "out2.c"), 0, "an empty file was accepted");
    free(text);
}

/* ------------------------------------------------------------ the queue */

Test(store, claim_takes_the_highest_priority_then_the_oldest) {
    store_t *s = open_store();
    int64_t a = insert(s, "a", 0), b = insert(s, "b", 5), c = insert(s, "c", 0),
            d = insert(s, "d", 5), e = insert(s, "e", -1);
    cr_expect_eq(store_queue_depth(s, err, sizeof err), 5);
    int64_t want[] = {b, d, a, c, e};
    for (int i = 0; i < 5; i++) cr_expect_eq(claim_expect(s, want[i]), 1);
    store_experiment_t x;
    cr_expect_eq(store_claim_next(s, &x, err, sizeof err), 0, "the queue should be empty");
    cr_expect_eq(store_queue_depth(s, err, sizeof err), 0);

    sqlite3 *db = raw_open("nightshift.db");
    cr_expect_eq(raw_int(db, "SELECT count(*) FROM experiments WHERE status = 'running'"
                             " AND pid = 0 AND started LIKE '____-__-__T__:__:__.___Z'"),
                 5);
    sqlite3_close(db);

    cr_expect_eq(store_set_pid(s, b, 4242, err, sizeof err), 0, "%s", err);
    db = raw_open("nightshift.db");
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT pid FROM experiments WHERE id = %lld", (long long)b);
    cr_expect_eq(raw_int(db, sql), 4242);
    sqlite3_close(db);
    store_close(s);
}

Test(store, insert_checks_source_and_parent) {
    store_t *s = open_store();
    int64_t a = insert(s, "a", 0), id = 0;
    char *spec = canonical("");
    store_new_experiment_t e = {.spec_json = spec, .config_hash = "h", .source = "web"};
    char config[SPEC_HASH_HEX];
    file_spec(spec, config, &e.scope);
    cr_expect_eq(store_insert(s, &e, &id, err, sizeof err), -1);
    cr_expect_str_eq(err, "store: insert: source must be api, cli, agent or mcp");
    e.source = "agent";
    e.parent = 99;
    cr_expect_eq(store_insert(s, &e, &id, err, sizeof err), -1);
    cr_expect_str_eq(err, "parent: experiment 99 does not exist");
    e.parent = a;
    cr_expect_eq(store_insert(s, &e, &id, err, sizeof err), 0, "%s", err);
    cJSON *o = get(s, id, 0);
    cr_assert_not_null(o, "%s", err);
    cr_expect_eq(cJSON_GetObjectItem(o, "parent")->valuedouble, (double)a);
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(o, "name")));
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(o, "tags")), 0, "NULL tags are []");
    cr_expect_str_eq(tu_jstr(o, "source"), "agent");
    cJSON_Delete(o);
    free(spec);
    store_close(s);
}

Test(store, duplicates_are_queued_running_or_succeeded_with_the_same_hash_and_seed) {
    store_t *s = open_store();
    int64_t id = 0;
    cr_expect_eq(store_find_duplicate(s, "h", 1, 0, &id, err, sizeof err), 0);

    int64_t q = insert_full(s, "q", "hq", 1, 0, NULL);
    int64_t r = insert_full(s, "r", "hr", 1, 100, NULL);
    claim_expect(s, r);
    int64_t ok = insert_full(s, "ok", "hok", 1, 100, NULL);
    claim_expect(s, ok);
    store_result_t res = result_with(1.5);
    cr_assert_eq(store_finish(s, ok, STORE_SUCCEEDED, NULL, 0, -1, &res, err, sizeof err), 0);
    int64_t bad = insert_full(s, "bad", "hbad", 1, 100, NULL);
    claim_expect(s, bad);
    cr_assert_eq(store_finish(s, bad, STORE_FAILED, "exit 1", 1, -1, NULL, err, sizeof err), 0);
    int64_t c = insert_full(s, "c", "hc", 1, 0, NULL);
    cr_assert_eq(store_cancel_queued(s, c, err, sizeof err), 1);
    /* A timeout answers for its spec under the daemon's limits (store.h). */
    int64_t slow = insert_full(s, "slow", "hslow", 1, 100, NULL);
    claim_expect(s, slow);
    cr_assert_eq(store_finish(s, slow, STORE_TIMEOUT, "deadline", -1, 9, NULL, err, sizeof err), 0);

    /* every run here is scored on the default count; another evaluation is
     * another experiment */
    const int64_t E = SPEC_DEFAULT_EVAL_TOKENS;
    struct {
        const char *hash;
        int64_t seed, eval, want; /* want 0: no duplicate */
    } cases[] = {{"hq", 1, E, q},       {"hr", 1, E, r},    {"hok", 1, E, ok}, {"hbad", 1, E, 0},
                 {"hc", 1, E, 0},       {"hq", 2, E, 0},    {"hok", 7, E, 0},  {"nope", 1, E, 0},
                 {"hslow", 1, E, slow}, {"hok", 1, 4096, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        id = -5;
        int rc = store_find_duplicate(s, cases[i].hash, cases[i].seed, cases[i].eval, &id, err,
                                      sizeof err);
        cr_expect_eq(rc, cases[i].want ? 1 : 0, "%s/%lld: rc %d", cases[i].hash,
                     (long long)cases[i].seed, rc);
        if (cases[i].want)
            cr_expect_eq(id, cases[i].want, "%s: got %lld", cases[i].hash, (long long)id);
    }

    /* With a forced resubmission of a succeeded one queued too, the result wins. */
    int64_t again = insert_full(s, "ok2", "hok", 1, 0, NULL);
    cr_expect_eq(store_find_duplicate(s, "hok", 1, E, &id, err, sizeof err), 1);
    cr_expect_eq(id, ok);
    cr_expect_neq(again, ok);
    store_close(s);
}

Test(store, finish_records_once_and_only_for_running_experiments) {
    store_t *s = open_store();
    int64_t a = insert(s, "a", 0);
    store_result_t r = result_with(1.25);

    cr_expect_eq(store_finish(s, a, STORE_SUCCEEDED, NULL, 0, -1, &r, err, sizeof err), -1);
    cr_expect_str_eq(err, "store: experiment 1 is not running (it is queued)");
    cr_expect_eq(store_finish(s, 99, STORE_FAILED, NULL, 1, -1, NULL, err, sizeof err), -1);
    cr_expect_str_eq(err, "store: experiment 99 not found");
    claim_expect(s, a);
    cr_expect_eq(store_finish(s, a, STORE_QUEUED, NULL, 0, -1, NULL, err, sizeof err), -1);
    cr_expect_str_eq(err, "store: finish: 'queued' is not a final status");

    cr_assert_eq(store_finish(s, a, STORE_SUCCEEDED, NULL, 0, -1, &r, err, sizeof err), 0, "%s",
                 err);
    cr_expect_eq(store_finish(s, a, STORE_SUCCEEDED, NULL, 0, -1, &r, err, sizeof err), -1);
    cr_expect_str_eq(err, "store: experiment 1 is not running (it is succeeded)");
    cr_expect_eq(
        store_finish(s, a, STORE_CRASHED, "killed by SIGSEGV", -1, 11, NULL, err, sizeof err), -1);

    /* A crash records its signal and reason, and no result row. */
    int64_t b = insert(s, "b", 0);
    claim_expect(s, b);
    cr_assert_eq(
        store_finish(s, b, STORE_CRASHED, "killed by SIGSEGV", -1, 11, NULL, err, sizeof err), 0,
        "%s", err);

    sqlite3 *db = raw_open("nightshift.db");
    cr_expect_eq(raw_int(db, "SELECT count(*) FROM results"), 1);
    cr_expect_eq(raw_int(db, "SELECT count(*) FROM experiments WHERE id = 1 AND status ="
                             " 'succeeded' AND exit_code = 0 AND term_signal IS NULL AND reason"
                             " IS NULL AND finished >= started"),
                 1);
    cr_expect_eq(raw_int(db, "SELECT count(*) FROM experiments WHERE id = 2 AND status ="
                             " 'crashed' AND exit_code IS NULL AND term_signal = 11 AND reason ="
                             " 'killed by SIGSEGV'"),
                 1);
    cr_expect_str_eq(raw_text(db, "SELECT peak_source FROM results"), "calibration");
    cr_expect_eq(raw_int(db, "SELECT params_value_embeds FROM results"), 200);
    sqlite3_close(db);
    store_close(s);
}

Test(store, cancel_only_cancels_queued_experiments) {
    store_t *s = open_store();
    int64_t a = insert(s, "a", 0), b = insert(s, "b", 1);
    claim_expect(s, b);
    cr_expect_eq(store_cancel_queued(s, a, err, sizeof err), 1);
    cr_expect_str_eq(get_status(s, a), "cancelled");
    cr_expect_eq(store_cancel_queued(s, a, err, sizeof err), 0, "already cancelled");
    cr_expect_eq(store_cancel_queued(s, b, err, sizeof err), 0, "running: the caller stops it");
    cr_expect_str_eq(get_status(s, b), "running");
    cr_expect_eq(store_cancel_queued(s, 77, err, sizeof err), NS_ERR_NOT_FOUND);
    cr_expect_str_eq(err, "store: experiment 77 not found");
    cr_expect_eq(store_queue_depth(s, err, sizeof err), 0);
    store_experiment_t x;
    cr_expect_eq(store_claim_next(s, &x, err, sizeof err), 0, "a cancelled one was claimed");
    store_close(s);
}

Test(store, metrics_batches_replay_without_duplicates) {
    store_t *s = open_store();
    int64_t a = insert(s, "a", 0);
    claim_expect(s, a);
    store_metric_t m[10];
    for (int i = 0; i < 10; i++)
        m[i] = (store_metric_t){
            .step = i, .time_s = i * 0.5, .loss = 5.0 - i * 0.1, .lr_mult = 1, .tok_s = 1000 + i};
    cr_assert_eq(store_add_metrics(s, a, m, 6, err, sizeof err), 0, "%s", err);
    cr_assert_eq(store_add_metrics(s, a, m, 6, err, sizeof err), 0, "replay: %s", err);
    cr_assert_eq(store_add_metrics(s, a, m + 4, 6, err, sizeof err), 0, "overlap: %s", err);
    cr_assert_eq(store_add_metrics(s, a, m, 0, err, sizeof err), 0);
    cr_expect_eq(store_add_metrics(s, 99, m, 1, err, sizeof err), -1, "unknown experiment");

    sqlite3 *db = raw_open("nightshift.db");
    cr_expect_eq(raw_int(db, "SELECT count(*) FROM metrics"), 10);
    cr_expect_eq(raw_int(db, "SELECT count(DISTINCT step) FROM metrics WHERE experiment_id = 1"),
                 10);
    cr_expect_eq(raw_int(db, "SELECT tok_s FROM metrics WHERE step = 9"), 1009);
    sqlite3_close(db);

    /* All of them, then at most 4 evenly spaced ending with the last step. */
    cJSON *o = get(s, a, 100);
    cr_assert_not_null(o, "%s", err);
    cJSON *arr = cJSON_GetObjectItem(o, "metrics");
    cr_assert_eq(cJSON_GetArraySize(arr), 10);
    for (int i = 0; i < 10; i++) {
        cJSON *row = cJSON_GetArrayItem(arr, i);
        cr_expect_eq(cJSON_GetObjectItem(row, "step")->valuedouble, i);
        cr_expect_float_eq(cJSON_GetObjectItem(row, "loss")->valuedouble, 5.0 - i * 0.1, 1e-12);
    }
    cr_expect_eq(cJSON_GetObjectItem(o, "metrics_total")->valuedouble, 10);
    cJSON_Delete(o);

    o = get(s, a, 4);
    cr_assert_not_null(o, "%s", err);
    arr = cJSON_GetObjectItem(o, "metrics");
    cr_assert_eq(cJSON_GetArraySize(arr), 4);
    int want[] = {0, 3, 6, 9};
    for (int i = 0; i < 4; i++)
        cr_expect_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(arr, i), "step")->valuedouble, want[i]);
    cr_expect_eq(cJSON_GetObjectItem(o, "metrics_total")->valuedouble, 10);
    cJSON_Delete(o);

    o = get(s, a, 0);
    cr_assert_not_null(o, "%s", err);
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(o, "metrics")), 0);
    cr_expect_eq(cJSON_GetObjectItem(o, "metrics_total")->valuedouble, 10);
    cJSON_Delete(o);
    store_close(s);
}

Test(store, recover_requeues_interrupted_runs_up_to_the_retry_limit) {
    store_t *s = open_store();
    int64_t a = insert(s, "a", 3), b = insert(s, "b", 2), c = insert(s, "c", 1);
    claim_expect(s, a);
    claim_expect(s, b);
    store_result_t r = result_with(1.0);
    cr_assert_eq(store_finish(s, b, STORE_SUCCEEDED, NULL, 0, -1, &r, err, sizeof err), 0);
    store_metric_t m = {.step = 1, .loss = 4};
    cr_assert_eq(store_add_metrics(s, a, &m, 1, err, sizeof err), 0);
    store_close(s); /* the daemon dies with a running */

    int requeued = -1, abandoned = -1;
    s = open_store();
    cr_assert_eq(store_recover(s, 2, &requeued, &abandoned, err, sizeof err), 0, "%s", err);
    cr_expect_eq(requeued, 1);
    cr_expect_eq(abandoned, 0);
    cr_expect_str_eq(get_status(s, a), "queued");
    cr_expect_str_eq(get_status(s, b), "succeeded", "a finished run must stay finished");
    cr_expect_str_eq(get_status(s, c), "queued");
    cr_expect_eq(claim_expect(s, a), 2, "the requeued run is attempt 2");

    sqlite3 *db = raw_open("nightshift.db");
    cr_expect_eq(raw_int(db, "SELECT count(*) FROM metrics WHERE experiment_id = 1"), 0,
                 "attempt 1's metrics must not mix with attempt 2's");
    sqlite3_close(db);

    /* Attempt 2 of 2 dies as well: interrupted for good. */
    store_close(s);
    s = open_store();
    cr_assert_eq(store_recover(s, 2, &requeued, &abandoned, err, sizeof err), 0, "%s", err);
    cr_expect_eq(requeued, 0);
    cr_expect_eq(abandoned, 1);
    cJSON *o = get_expect(s, a, "interrupted",
                          "the daemon stopped during attempt 2; not requeued (at most 2 attempts)");
    cr_expect(cJSON_IsString(cJSON_GetObjectItem(o, "finished")));
    cr_expect_eq(cJSON_GetObjectItem(o, "attempt")->valuedouble, 2);
    cJSON_Delete(o);

    /* Nothing running: recover is a no-op. */
    cr_assert_eq(store_recover(s, 2, &requeued, &abandoned, err, sizeof err), 0, "%s", err);
    cr_expect_eq(requeued + abandoned, 0);
    cr_expect_eq(store_queue_depth(s, err, sizeof err), 1);
    store_close(s);
}

Test(store, interrupt_requeues_one_running_experiment) {
    store_t *s = open_store();
    int64_t a = insert(s, "a", 1), b = insert(s, "b", 0);
    claim_expect(s, a);
    cr_expect_eq(store_interrupt(s, b, 3, err, sizeof err), -1);
    cr_expect_str_eq(err, "store: experiment 2 is not running (it is queued)");
    cr_assert_eq(store_interrupt(s, a, 3, err, sizeof err), 0, "%s", err);
    cJSON *o = get_expect(s, a, "queued", "the daemon stopped during attempt 1; requeued");
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(o, "pid")));
    cJSON_Delete(o);
    cr_expect_eq(claim_expect(s, a), 2);
    cr_assert_eq(store_interrupt(s, a, 2, err, sizeof err), 0, "%s", err);
    cr_expect_str_eq(get_status(s, a), "interrupted");
    store_close(s);
}

/* ------------------------------------------------------------ queries */

Test(store, leaderboard_orders_succeeded_runs_by_val_bpb_with_spec_columns) {
    store_t *s = open_store();
    int64_t mid = succeed(s, "mid", 1.50, "\"depth\":2,\"n_embd\":64,\"n_head\":2,\"n_kv_head\":1");
    int64_t best = succeed(s, "best", 1.20,
                           "\"depth\":3,\"n_embd\":96,\"n_head\":3,\"mlp\":\"swiglu\","
                           "\"ve_layers\":[0,1],\"window_pattern\":\"L\",\"tie_embeddings\":true");
    int64_t worst = succeed(s, "worst", 1.90, NULL);
    int64_t failed = insert(s, "failed", 0);
    claim_expect(s, failed);
    cr_assert_eq(
        store_finish(s, failed, STORE_DIVERGED, "loss is NaN", 3, -1, NULL, err, sizeof err), 0);
    insert(s, "queued", 0);
    /* A result row on a run that did not succeed does not rank. */
    int64_t late = insert(s, "late", 1000);
    claim_expect(s, late);
    store_result_t r = result_with(0.5);
    cr_assert_eq(store_finish(s, late, STORE_TIMEOUT, "deadline", -1, 9, &r, err, sizeof err), 0);
    cJSON *l = store_list(s, STORE_TIMEOUT, NULL, NULL, NULL, 10, 0, err, sizeof err);
    cr_assert_not_null(l, "%s", err);
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(l, 0), "val_bpb")));
    cJSON_Delete(l);

    /* As a person would ask it. */
    sqlite3 *db = raw_open("nightshift.db");
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT id, name, val_bpb, depth, n_embd, n_head, n_kv_head,"
                                    " ve_layers, ve_gate_channels, mlp, window_pattern,"
                                    " tie_embeddings, params_total, mfu_percent, tokens_per_second,"
                                    " num_steps, training_seconds, finished"
                                    " FROM leaderboard LIMIT 5",
                                    -1, &st, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    int64_t order[] = {best, mid, worst};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
        cr_expect_eq(sqlite3_column_int64(st, 0), order[i]);
    }
    cr_expect_eq(sqlite3_step(st), SQLITE_DONE, "only succeeded runs belong on the leaderboard");
    sqlite3_reset(st);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_expect_str_eq((const char *)sqlite3_column_text(st, 1), "best");
    cr_expect_float_eq(sqlite3_column_double(st, 2), 1.20, 1e-12);
    cr_expect_eq(sqlite3_column_int(st, 3), 3);
    cr_expect_eq(sqlite3_column_int(st, 4), 96);
    cr_expect_eq(sqlite3_column_int(st, 5), 3);
    cr_expect_eq(sqlite3_column_int(st, 6), 3, "n_kv_head defaults to n_head");
    cr_expect_str_eq((const char *)sqlite3_column_text(st, 7), "[0,1]");
    cr_expect_eq(sqlite3_column_int(st, 8), 32);
    cr_expect_str_eq((const char *)sqlite3_column_text(st, 9), "swiglu");
    cr_expect_str_eq((const char *)sqlite3_column_text(st, 10), "L");
    cr_expect_eq(sqlite3_column_int(st, 11), 1);
    cr_expect_eq(sqlite3_column_int(st, 12), 1000);
    cr_expect_float_eq(sqlite3_column_double(st, 13), 12.5, 1e-12);
    cr_expect_eq(sqlite3_column_int(st, 15), 300);
    cr_expect_neq(sqlite3_column_type(st, 17), SQLITE_NULL);
    sqlite3_finalize(st);
    cr_expect_str_eq(raw_text(db, "SELECT ve_layers FROM leaderboard WHERE name = 'mid'"),
                     "alternate");
    sqlite3_close(db);

    /* The API's copy. */
    store_scope_t sc = {.eval_tokens = -1};
    cr_assert_eq(store_default_scope(s, &sc, err, sizeof err), 1, "%s", err);
    cJSON *lb = store_leaderboard(s, &sc, 2, err, sizeof err);
    cr_assert_not_null(lb, "%s", err);
    cr_assert_eq(cJSON_GetArraySize(lb), 2);
    cJSON *top = cJSON_GetArrayItem(lb, 0);
    cr_expect_eq(cJSON_GetObjectItem(top, "id")->valuedouble, best);
    cr_expect_str_eq(tu_jstr(top, "name"), "best");
    cr_expect_float_eq(cJSON_GetObjectItem(top, "val_bpb")->valuedouble, 1.20, 1e-12);
    cr_expect_str_eq(tu_jstr(top, "mlp"), "swiglu");
    cJSON *ve = cJSON_GetObjectItem(top, "ve_layers");
    cr_expect(cJSON_IsArray(ve) && cJSON_GetArraySize(ve) == 2, "ve_layers is the index array");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(top, "tie_embeddings")));
    cr_expect_str_eq(tu_jstr(top, "dataset"), "default");
    cJSON *second = cJSON_GetArrayItem(lb, 1);
    cr_expect_eq(cJSON_GetObjectItem(second, "id")->valuedouble, mid);
    cr_expect_str_eq(tu_jstr(second, "ve_layers"), "alternate");
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(second, "tie_embeddings")));
    cJSON_Delete(lb);

    cr_expect_null(store_leaderboard(s, &sc, 0, err, sizeof err));
    cr_expect_str_eq(err, "limit: must be 1..1000");
    store_close(s);
}

/* store_best_in of the scope the last finished experiment ran in (the
 * hook's best): null while nothing finished. */
static cJSON *best_of_last_scope(store_t *s) {
    store_scope_t sc;
    int have = store_last_scope(s, &sc, err, sizeof err);
    cr_assert_geq(have, 0, "%s", err);
    cJSON *b = have ? store_best_in(s, &sc, err, sizeof err) : cJSON_CreateNull();
    cr_assert_not_null(b, "%s", err);
    return b;
}

Test(store, best_is_null_until_something_succeeds_then_the_lowest_val_bpb) {
    store_t *s = open_store();
    cJSON *b = best_of_last_scope(s);
    cr_expect(cJSON_IsNull(b));
    cJSON_Delete(b);

    int64_t f = insert(s, "f", 0);
    claim_expect(s, f);
    cr_assert_eq(store_finish(s, f, STORE_TIMEOUT, "deadline", -1, 9, NULL, err, sizeof err), 0);
    b = best_of_last_scope(s);
    cr_expect(cJSON_IsNull(b), "a timed-out run is not the best");
    cJSON_Delete(b);

    succeed(s, "x", 1.7, NULL);
    int64_t y = succeed(s, "y", 1.3, "\"depth\":2");
    succeed(s, "z", 1.4, NULL);
    b = best_of_last_scope(s);
    cr_expect_eq(cJSON_GetObjectItem(b, "id")->valuedouble, y);
    cJSON *spec = cJSON_GetObjectItem(b, "spec");
    cr_assert(cJSON_IsObject(spec), "the full spec, parsed");
    cr_expect_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(spec, "model"), "depth")->valuedouble, 2);
    cr_expect_float_eq(
        cJSON_GetObjectItem(cJSON_GetObjectItem(b, "result"), "val_bpb")->valuedouble, 1.3, 1e-12);
    cJSON_Delete(b);
    store_close(s);
}

Test(store, get_returns_the_row_spec_result_and_not_found) {
    store_t *s = open_store();
    int64_t a = succeed(s, "a", 1.11, "\"depth\":2");
    store_metric_t m[2] = {{.step = 1, .time_s = 0.5, .loss = 4.5, .lr_mult = 1, .tok_s = 900},
                           {.step = 2, .time_s = 1.0, .loss = 4.25, .lr_mult = 0.5, .tok_s = 950}};
    cr_assert_eq(store_add_metrics(s, a, m, 2, err, sizeof err), 0, "%s", err);
    cJSON *o = NULL;
    cr_assert_eq(store_get(s, a, 10, &o, err, sizeof err), 0, "%s", err);
    cr_assert_not_null(o);
    cr_expect_eq(cJSON_GetObjectItem(o, "id")->valuedouble, a);
    cr_expect_str_eq(tu_jstr(o, "status"), "succeeded");
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "tags"), 0)),
                     "t");
    cr_expect_eq(cJSON_GetObjectItem(o, "seed")->valuedouble, 42);
    cr_expect_eq(cJSON_GetObjectItem(o, "exit_code")->valuedouble, 0);
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(o, "term_signal")));
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(o, "reason")));
    const char *created = tu_jstr(o, "created");
    cr_assert_not_null(created);
    cr_expect_eq(strlen(created), 24, "ISO-8601 with milliseconds: %s", created);
    cr_expect_eq(created[23], 'Z');
    cr_expect(cJSON_IsObject(cJSON_GetObjectItem(o, "spec")));
    cJSON *res = cJSON_GetObjectItem(o, "result");
    cr_assert(cJSON_IsObject(res));
    cr_expect_null(cJSON_GetObjectItem(res, "experiment_id"));
    cr_expect_float_eq(cJSON_GetObjectItem(res, "val_bpb")->valuedouble, 1.11, 1e-12);
    cr_expect_eq(cJSON_GetObjectItem(res, "params_blocks")->valuedouble, 590);
    cr_expect_float_eq(cJSON_GetObjectItem(res, "total_tokens")->valuedouble, 1.5e6, 1e-6);
    cr_expect_eq(cJSON_GetObjectItem(res, "time_budget_s")->valuedouble, 0);
    cr_expect_eq(cJSON_GetObjectItem(res, "token_budget")->valuedouble, 1500000);
    cr_expect_float_eq(cJSON_GetObjectItem(res, "epochs")->valuedouble, 0.75, 1e-12);
    cr_expect_str_eq(tu_jstr(res, "peak_source"), "calibration");
    cJSON *arr = cJSON_GetObjectItem(o, "metrics");
    cr_assert_eq(cJSON_GetArraySize(arr), 2);
    cJSON *m1 = cJSON_GetArrayItem(arr, 1);
    cr_expect_eq(cJSON_GetObjectItem(m1, "step")->valuedouble, 2);
    cr_expect_float_eq(cJSON_GetObjectItem(m1, "lr_mult")->valuedouble, 0.5, 1e-12);
    cJSON_Delete(o);

    int64_t q = insert(s, "q", 0);
    o = get(s, q, 10);
    cr_assert_not_null(o, "%s", err);
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(o, "result")));
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(o, "started")));
    cJSON_Delete(o);

    cr_expect_eq(store_get(s, 12345, 10, &o, err, sizeof err), NS_ERR_NOT_FOUND);
    cr_expect_null(o);
    cr_expect_str_eq(err, "experiment 12345 not found");
    store_close(s);
}

/* The export's rows keep what the database holds: a ve_layers list is its
 * JSON text (a table cell), not an array as in store_get's spec. They come
 * page by page from a snapshot: a row written after the first page is not
 * in it. */
Test(store, export_rows_are_the_stored_values_oldest_first) {
    store_t *s = open_store();
    int64_t q = insert_full(s, "queued", NULL, 7, 0, "\"depth\":6,\"ve_layers\":[0,2]");
    int64_t a = succeed(s, "done", 1.25, "\"depth\":2");
    store_export_t *x;
    cr_assert_eq(store_export_open(s, &x, err, sizeof err), 0, "%s", err);
    cJSON *rows = store_export_page(x, 1, err, sizeof err);
    cr_assert_not_null(rows, "%s", err);
    cr_assert_eq(cJSON_GetArraySize(rows), 1);
    insert(s, "later", 0);
    cJSON *more = store_export_page(x, 10, err, sizeof err);
    cr_assert_not_null(more, "%s", err);
    cr_expect_eq(cJSON_GetArraySize(more), 1, "the snapshot holds two experiments");
    cJSON_AddItemToArray(rows, cJSON_DetachItemFromArray(more, 0));
    cJSON_Delete(more);
    more = store_export_page(x, 10, err, sizeof err);
    cr_expect_eq(cJSON_GetArraySize(more), 0);
    cJSON_Delete(more);
    store_export_close(x);
    cJSON *columns = store_export_columns(s);
    int n = cJSON_GetArraySize(columns);
    cr_expect(n > 20 && !strcmp(cJSON_GetArrayItem(columns, 0)->valuestring, "id") &&
                  !strcmp(cJSON_GetArrayItem(columns, n - 1)->valuestring, "peak_rss_mb"),
              "%d columns", n);
    for (const cJSON *k = columns->child; k; k = k->next)
        cr_expect(cJSON_GetObjectItem(cJSON_GetArrayItem(rows, 0), k->valuestring),
                  "%s is no key of a row", k->valuestring);
    cJSON_Delete(columns);
    cr_assert_eq(cJSON_GetArraySize(rows), 2);
    cJSON *first = cJSON_GetArrayItem(rows, 0), *second = cJSON_GetArrayItem(rows, 1);
    cr_expect_eq(cJSON_GetObjectItem(first, "id")->valuedouble, a, "finished first");
    cr_expect_float_eq(cJSON_GetObjectItem(first, "val_bpb")->valuedouble, 1.25, 1e-12);
    cr_expect_str_eq(tu_jstr(first, "ve_layers"), "alternate");
    cr_expect_eq(cJSON_GetObjectItem(second, "id")->valuedouble, q);
    cr_expect_str_eq(tu_jstr(second, "ve_layers"), "[0,2]");
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(second, "val_bpb")));
    cr_expect_eq(cJSON_GetObjectItem(second, "seed")->valuedouble, 7);
    cr_expect_eq(cJSON_GetObjectItem(second, "time_budget_s")->valuedouble, 300);
    cJSON_Delete(rows);
    store_close(s);
}

/* The ids of a list answer, in order, into ids; returns how many. */
static int list_ids(store_t *s, const char *status, const char *order, int limit, int64_t after,
                    int64_t *ids) {
    cJSON *l = store_list(s, status, NULL, NULL, order, limit, after, err, sizeof err);
    cr_assert_not_null(l, "list %s %s: %s", status ? status : "-", order ? order : "-", err);
    int n = 0;
    cJSON *it;
    cJSON_ArrayForEach(it, l) ids[n++] = (int64_t)cJSON_GetObjectItem(it, "id")->valuedouble;
    cJSON_Delete(l);
    return n;
}

Test(store, list_filters_orders_limits_and_pages) {
    store_t *s = open_store();
    int64_t a = succeed(s, "a", 1.5, NULL); /* 1 */
    int64_t b = succeed(s, "b", 1.2, NULL); /* 2 */
    int64_t c = insert(s, "c", 0);          /* 3 */
    int64_t d = succeed(s, "d", 1.8, NULL); /* 4 */
    int64_t e = insert(s, "e", 0);          /* 5 */
    int64_t ids[16];

    int n = list_ids(s, NULL, NULL, 100, 0, ids);
    cr_assert_eq(n, 5);
    cr_expect(ids[0] == e && ids[1] == d && ids[2] == c && ids[3] == b && ids[4] == a,
              "default order is newest first");

    n = list_ids(s, NULL, "id", 2, 0, ids);
    cr_assert_eq(n, 2);
    cr_expect(ids[0] == a && ids[1] == b);
    n = list_ids(s, NULL, "id", 2, ids[1], ids);
    cr_assert_eq(n, 2);
    cr_expect(ids[0] == c && ids[1] == d, "the page after b");
    n = list_ids(s, NULL, "-id", 2, d, ids);
    cr_assert_eq(n, 2);
    cr_expect(ids[0] == c && ids[1] == b);

    n = list_ids(s, STORE_QUEUED, "id", 10, 0, ids);
    cr_assert_eq(n, 2);
    cr_expect(ids[0] == c && ids[1] == e);
    n = list_ids(s, STORE_FAILED, NULL, 10, 0, ids);
    cr_expect_eq(n, 0);

    /* val_bpb: best first, the ones without a result last (by id); pages follow. */
    n = list_ids(s, NULL, "val_bpb", 10, 0, ids);
    cr_assert_eq(n, 5);
    cr_expect(ids[0] == b && ids[1] == a && ids[2] == d && ids[3] == c && ids[4] == e);
    n = list_ids(s, NULL, "val_bpb", 2, a, ids);
    cr_assert_eq(n, 2);
    cr_expect(ids[0] == d && ids[1] == c, "got %lld %lld", (long long)ids[0], (long long)ids[1]);
    n = list_ids(s, NULL, "val_bpb", 10, c, ids);
    cr_assert_eq(n, 1);
    cr_expect_eq(ids[0], e);

    n = list_ids(s, NULL, "created", 10, 0, ids);
    cr_assert_eq(n, 5);
    for (int i = 0; i < 5; i++) cr_expect_eq(ids[i], i + 1);
    n = list_ids(s, NULL, "created", 10, c, ids);
    cr_assert_eq(n, 2);
    cr_expect(ids[0] == d && ids[1] == e);

    /* The item shape. */
    cJSON *l = store_list(s, STORE_SUCCEEDED, NULL, NULL, "id", 1, 0, err, sizeof err);
    cr_assert_not_null(l, "%s", err);
    cJSON *it = cJSON_GetArrayItem(l, 0);
    const char *keys[] = {"id",     "name", "tags",    "status",  "reason",  "source",   "priority",
                          "parent", "seed", "attempt", "created", "started", "finished", "val_bpb"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        cr_expect_not_null(cJSON_GetObjectItem(it, keys[i]), "list items need %s", keys[i]);
    cr_expect_float_eq(cJSON_GetObjectItem(it, "val_bpb")->valuedouble, 1.5, 1e-12);
    cr_expect(cJSON_IsArray(cJSON_GetObjectItem(it, "tags")));
    cJSON_Delete(l);

    cr_expect_null(
        store_list(s, NULL, NULL, NULL, "name; DROP TABLE experiments", 10, 0, err, sizeof err));
    cr_expect_str_eq(err, "order: must be one of id, -id, val_bpb, created, queue");
    cr_expect_null(store_list(s, "bogus", NULL, NULL, NULL, 10, 0, err, sizeof err));
    cr_expect(strncmp(err, "status: must be one of", 22) == 0, "%s", err);
    cr_expect_null(store_list(s, NULL, NULL, NULL, NULL, 0, 0, err, sizeof err));
    cr_expect_null(store_list(s, NULL, NULL, NULL, NULL, 1001, 0, err, sizeof err));
    cr_expect_str_eq(err, "limit: must be 1..1000");
    store_close(s);
}

/* ------------------------------------------------------------ concurrency */

Test(store, a_second_connection_reads_while_the_store_writes) {
    store_t *s = open_store();
    insert(s, "a", 0);
    sqlite3 *db = raw_open("nightshift.db");
    cr_expect_str_eq(raw_text(db, "PRAGMA journal_mode"), "wal");

    /* A reader in the middle of a read transaction does not block the store's
     * writes, and keeps its snapshot until it ends. */
    raw_exec(db, "BEGIN");
    cr_expect_eq(raw_int(db, "SELECT count(*) FROM experiments"), 1);
    insert(s, "b", 0);
    int64_t c = succeed(s, "c", 1.0, NULL);
    cr_expect_eq(raw_int(db, "SELECT count(*) FROM experiments"), 1);
    raw_exec(db, "COMMIT");
    cr_expect_eq(raw_int(db, "SELECT count(*) FROM experiments"), 3);
    cr_expect_eq(raw_int(db, "SELECT id FROM leaderboard LIMIT 1"), c);

    /* A reader with an open statement mid-iteration does not block either. */
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT id FROM experiments ORDER BY id", -1, &st, NULL),
                 SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    int64_t d = insert(s, "d", 0);
    cr_expect_eq(store_cancel_queued(s, d, err, sizeof err), 1, "%s", err);
    sqlite3_finalize(st);
    sqlite3_close(db);
    store_close(s);
}

/* ---------------------------------------------- scopes, repeats and noise */

/* Insert and claim a run of the spec {top_json} (top-level fields, e.g.
 * "\"dataset\":\"b\",\"seed\":3"); returns its id. */
static int64_t start_top(store_t *s, const char *name, const char *top_json) {
    char text[1024], perr[SPEC_ERR_LEN] = "";
    snprintf(text, sizeof text, "{%s}", top_json);
    spec_t sp;
    cr_assert_eq(spec_parse(text, strlen(text), &sp, perr, sizeof perr), 0, "%s: %s", text, perr);
    char *spec = spec_canonical_json(&sp);
    char hash[SPEC_HASH_HEX];
    store_new_experiment_t e = {.name = name,
                                .spec_json = spec,
                                .config_hash = hash,
                                .seed = (int64_t)sp.seed,
                                .source = "api",
                                .priority = 1000};
    file_spec(spec, hash, &e.scope);
    spec_free(&sp);
    int64_t id = 0;
    cr_assert_eq(store_insert(s, &e, &id, err, sizeof err), 0, "%s", err);
    free(spec);
    claim_expect(s, id);
    return id;
}

/* Insert, claim and finish a succeeded run of the spec {top_json} with val_bpb. */
static int64_t succeed_top(store_t *s, const char *name, const char *top_json, double val_bpb) {
    int64_t id = start_top(s, name, top_json);
    store_result_t r = result_with(val_bpb);
    cr_assert_eq(store_finish(s, id, STORE_SUCCEEDED, NULL, 0, -1, &r, err, sizeof err), 0, "%s",
                 err);
    return id;
}

/* A scope of the default evaluation. */
static store_scope_t scope(const char *dataset, const char *kind, double budget) {
    store_scope_t sc = {.budget = budget, .eval_tokens = SPEC_DEFAULT_EVAL_TOKENS};
    snprintf(sc.dataset, sizeof sc.dataset, "%s", dataset);
    snprintf(sc.budget_kind, sizeof sc.budget_kind, "%s", kind);
    return sc;
}

static double mean_of(const double *v, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) m += v[i];
    return m / n;
}

static double ss_of(const double *v, int n) { /* sum of squared deviations */
    double m = mean_of(v, n), ss = 0;
    for (int i = 0; i < n; i++) ss += (v[i] - m) * (v[i] - m);
    return ss;
}

Test(store, repeats_are_one_leaderboard_row_with_mean_sd_and_seeds) {
    store_t *s = open_store();
    /* Configuration A: depth 2, three seeds; B: depth 3, two seeds; C: one. */
    const double a[] = {1.31, 1.27, 1.35}, b[] = {1.25, 1.34}, c = 1.40;
    int64_t a0 = 0, b0 = 0;
    for (int i = 0; i < 3; i++) {
        char top[128];
        snprintf(top, sizeof top, "\"seed\":%d,\"model\":{\"depth\":2}", 10 + i);
        int64_t id = succeed_top(s, i ? "a again" : "a", top, a[i]);
        if (!i) a0 = id;
    }
    for (int i = 0; i < 2; i++) {
        char top[128];
        snprintf(top, sizeof top, "\"seed\":%d,\"model\":{\"depth\":3},\"prune\":false", 20 + i);
        int64_t id = succeed_top(s, "b", top, b[i]);
        if (!i) b0 = id;
    }
    succeed_top(s, "c", "\"seed\":30,\"model\":{\"depth\":1}", c);

    /* In SQL, against an independent computation. */
    sqlite3 *db = raw_open("nightshift.db");
    cr_expect_eq(raw_int(db, "SELECT count(*) FROM leaderboard"), 3, "one row per configuration");
    sqlite3_stmt *st = NULL;
    cr_assert_eq(
        sqlite3_prepare_v2(db,
                           "SELECT id, val_bpb, val_bpb_sd, n_seeds, seeds FROM leaderboard"
                           " WHERE dataset = 'default' AND budget_kind = 'time'"
                           " AND budget = 300",
                           -1, &st, NULL),
        SQLITE_OK, "%s", sqlite3_errmsg(db));
    /* means: A 1.31, B 1.295, C 1.40: B first */
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_expect_eq(sqlite3_column_int64(st, 0), b0);
    cr_expect_float_eq(sqlite3_column_double(st, 1), mean_of(b, 2), 1e-12);
    cr_expect_float_eq(sqlite3_column_double(st, 2), sqrt(ss_of(b, 2) / 1), 1e-9);
    cr_expect_eq(sqlite3_column_int(st, 3), 2);
    cr_expect_str_eq((const char *)sqlite3_column_text(st, 4), "[20,21]");
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_expect_eq(sqlite3_column_int64(st, 0), a0);
    cr_expect_float_eq(sqlite3_column_double(st, 1), mean_of(a, 3), 1e-12);
    cr_expect_float_eq(sqlite3_column_double(st, 2), sqrt(ss_of(a, 3) / 2), 1e-9);
    cr_expect_eq(sqlite3_column_int(st, 3), 3);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_expect_float_eq(sqlite3_column_double(st, 1), c, 1e-12);
    cr_expect_eq(sqlite3_column_type(st, 2), SQLITE_NULL, "no sd from one seed");
    cr_expect_eq(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    sqlite3_close(db);

    /* The API's copy, and the best configuration. */
    store_scope_t sc = scope("default", "time", 300);
    cJSON *lb = store_leaderboard(s, &sc, 10, err, sizeof err);
    cr_assert_not_null(lb, "%s", err);
    cJSON *top = cJSON_GetArrayItem(lb, 0);
    cr_expect_float_eq(cJSON_GetObjectItem(top, "val_bpb")->valuedouble, mean_of(b, 2), 1e-12);
    cr_expect_eq(cJSON_GetObjectItem(top, "n_seeds")->valuedouble, 2);
    cr_expect(cJSON_IsArray(cJSON_GetObjectItem(top, "seeds")));
    cJSON_Delete(lb);
    cJSON *best = store_best_in(s, &sc, err, sizeof err);
    cr_assert_not_null(best, "%s", err);
    cr_expect_eq(cJSON_GetObjectItem(best, "id")->valuedouble, b0);
    cr_expect_float_eq(cJSON_GetObjectItem(best, "mean_val_bpb")->valuedouble, mean_of(b, 2),
                       1e-12);
    cr_expect_eq(cJSON_GetObjectItem(best, "n_seeds")->valuedouble, 2);
    cJSON_Delete(best);

    /* The noise: pooled over A and B (C has one seed). */
    cJSON *nz = store_noise(s, &sc, err, sizeof err);
    cr_assert_not_null(nz, "%s", err);
    double want = sqrt((ss_of(a, 3) + ss_of(b, 2)) / (2 + 1));
    cr_expect_float_eq(cJSON_GetObjectItem(nz, "sd")->valuedouble, want, 1e-12);
    cr_expect_eq(cJSON_GetObjectItem(nz, "configurations")->valuedouble, 2);
    cr_expect_eq(cJSON_GetObjectItem(nz, "runs")->valuedouble, 5);
    cr_expect_eq(cJSON_GetObjectItem(nz, "df")->valuedouble, 3);
    cJSON_Delete(nz);
    store_close(s);
}

Test(store, leaderboard_best_and_noise_never_mix_datasets_or_budgets) {
    store_t *s = open_store();
    int64_t a = succeed_top(s, "a", "\"dataset\":\"alpha\",\"seed\":1", 2.0);
    succeed_top(s, "a2", "\"dataset\":\"alpha\",\"seed\":2", 2.2);
    int64_t b = succeed_top(s, "b", "\"dataset\":\"beta\",\"seed\":1", 1.0); /* easier data */
    tu_sleep_ms(5); /* t is alpha's latest result by the clock too */
    int64_t t = succeed_top(s, "t", "\"dataset\":\"alpha\",\"seed\":1,\"time_budget_s\":60", 2.5);
    store_scope_t sa = scope("alpha", "time", 300), sb = scope("beta", "time", 300);
    store_scope_t st = scope("alpha", "time", 60);

    cJSON *best = store_best_in(s, &sa, err, sizeof err);
    cr_assert_not_null(best, "%s", err);
    cr_expect_eq(cJSON_GetObjectItem(best, "id")->valuedouble, a, "beta's 1.0 leaked into alpha");
    cr_expect_float_eq(cJSON_GetObjectItem(best, "mean_val_bpb")->valuedouble, 2.1, 1e-12);
    cJSON_Delete(best);
    best = store_best_in(s, &sb, err, sizeof err);
    cr_expect_eq(cJSON_GetObjectItem(best, "id")->valuedouble, b);
    cJSON_Delete(best);
    best = store_best_in(s, &st, err, sizeof err);
    cr_expect_eq(cJSON_GetObjectItem(best, "id")->valuedouble, t);
    cJSON_Delete(best);
    sqlite3 *db = raw_open("nightshift.db");
    cr_expect_eq(raw_int(db, "SELECT count(*) FROM leaderboard WHERE dataset = 'alpha'"
                             " AND budget_kind = 'time' AND budget = 300"),
                 1);
    sqlite3_close(db);
    cJSON *lb = store_leaderboard(s, &sb, 10, err, sizeof err);
    cr_expect_eq(cJSON_GetArraySize(lb), 1);
    cJSON_Delete(lb);
    cJSON *nz = store_noise(s, &sb, err, sizeof err);
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(nz, "sd")), "beta has no repeats");
    cJSON_Delete(nz);

    /* The default scope of a dataset is the scope of its latest result. */
    store_scope_t d = {.dataset = "alpha", .eval_tokens = -1};
    cr_assert_eq(store_default_scope(s, &d, err, sizeof err), 1, "%s", err);
    cr_expect_str_eq(d.budget_kind, "time");
    cr_expect_eq(d.budget, 60);
    d = (store_scope_t){.dataset = "nothing", .eval_tokens = -1};
    cr_assert_eq(store_default_scope(s, &d, err, sizeof err), 0, "%s", err);
    cr_expect_str_eq(d.budget_kind, "", "left as it was");
    store_close(s);
}

Test(store, prune_losses_are_window_means_of_finished_runs_in_the_scope) {
    store_t *s = open_store();
    /* Two finished runs with losses by progress, one in another dataset. */
    int64_t r1 = succeed_top(s, "r1", "\"seed\":1", 2.0);
    int64_t r2 = succeed_top(s, "r2", "\"seed\":2", 2.0);
    int64_t other = succeed_top(s, "o", "\"dataset\":\"o\",\"seed\":1", 2.0);
    store_metric_t m[3];
    for (int i = 0; i < 3; i++) m[i] = (store_metric_t){.step = i + 1, .progress = 0.38 + 0.01 * i};
    m[0].loss = 5, m[1].loss = 4, m[2].loss = 3; /* r1: mean 4 over [0.35, 0.40] */
    cr_assert_eq(store_add_metrics(s, r1, m, 3, err, sizeof err), 0, "%s", err);
    m[0].loss = 7, m[1].loss = 6, m[2].loss = 5; /* r2: mean 6 */
    cr_assert_eq(store_add_metrics(s, r2, m, 3, err, sizeof err), 0, "%s", err);
    m[0].loss = m[1].loss = m[2].loss = 1;
    cr_assert_eq(store_add_metrics(s, other, m, 3, err, sizeof err), 0, "%s", err);
    store_scope_t sc = scope("default", "time", 300);
    double *v = NULL;
    size_t n = 0;
    cr_assert_eq(store_prune_losses(s, &sc, 0.40, 0.05, 100, &v, &n, err, sizeof err), 0, "%s",
                 err);
    cr_assert_eq(n, 2);
    cr_expect_float_eq(v[0], 4.0, 1e-12);
    cr_expect_float_eq(v[1], 6.0, 1e-12);
    free(v);
    double loss = 0;
    int64_t rows = 0;
    cr_assert_eq(store_run_loss(s, r2, 0.39, 0.05, &loss, &rows, err, sizeof err), 0, "%s", err);
    cr_expect_eq(rows, 2);
    cr_expect_float_eq(loss, 6.5, 1e-12);
    store_close(s);
}

Test(store, migration_004_rebuilds_experiments_and_backfills_scope_columns) {
    const char *p = tu_dir_path("old.db");
    cr_assert_eq(store_migrate(p, store_migrations, 2, err, sizeof err), 0, "%s", err);
    sqlite3 *db = raw_open("old.db");
    cr_expect_eq(raw_int(db, "PRAGMA user_version"), 2);
    raw_exec(db, "INSERT INTO experiments (id, spec, spec_hash, seed, source, status)"
                 " VALUES (1, '{\"dataset\":\"d\",\"seed\":1,\"time_budget_s\":60}', 'x', 1,"
                 " 'api', 'succeeded'),"
                 " (2, '{\"dataset\":\"d\",\"seed\":2,\"time_budget_s\":60}', 'y', 2, 'api',"
                 " 'succeeded');"
                 "INSERT INTO results (experiment_id, val_bpb) VALUES (1, 1.5), (2, 1.7);"
                 "INSERT INTO metrics (experiment_id, step, loss) VALUES (1, 1, 3.0);");
    sqlite3_close(db);
    store_t *s = NULL;
    cr_assert_eq(store_open(p, &s, err, sizeof err), 0, "%s", err);
    store_close(s);
    db = raw_open("old.db");
    cr_expect_eq(raw_int(db, "PRAGMA user_version"), last_version());
    cr_expect_str_eq(raw_text(db, "SELECT dataset || '/' || budget_kind || '/' || budget"
                                  " FROM experiments WHERE id = 1"),
                     "d/time/60.0");
    cr_expect_eq(raw_int(db, "SELECT count(DISTINCT config_hash) FROM experiments"), 1,
                 "two seeds of one spec are one configuration");
    cr_expect_eq(raw_int(db, "SELECT n_seeds FROM leaderboard"), 2);
    cr_expect_eq(raw_int(db, "SELECT count(*) FROM metrics"), 1, "metrics kept");
    cr_expect_eq(raw_int(db, "SELECT count(*) FROM pragma_foreign_key_check"), 0);
    raw_exec(db, "UPDATE experiments SET status = 'pruned' WHERE id = 2");
    cr_expect_eq(raw_int(db, "SELECT count(*) FROM sqlite_schema WHERE name = 'experiments_scope'"),
                 1);
    sqlite3_close(db);
}

/* ------------------------------------------- migration 009: one identity */

/* The configuration hash as the store wrote it before migration 009: the
 * SHA-256 of the canonical spec with json_remove's list of labels. */
static void old_sha256_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    char hex[2 * EVP_MAX_MD_SIZE + 1];
    (void)argc;
    EVP_Digest(sqlite3_value_text(argv[0]), (size_t)sqlite3_value_bytes(argv[0]), md, &n,
               EVP_sha256(), NULL);
    for (unsigned int i = 0; i < n; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    sqlite3_result_text(ctx, hex, (int)(2 * n), SQLITE_TRANSIENT);
}

/* What a spec trains, as text: two specs with the same key train the same
 * model the same way. Decided from what the model is built from (every
 * layer's window and value embedding, the fields the engine reads), not
 * from spec_config_json: the fields the engine does not read (spec.h's
 * list) are set alike and the derived arrays written out. The caller frees. */
static char *training_key(const spec_t *sp) {
    spec_t x = *sp;
    spec_model_t *m = &x.model;
    x.name = NULL, x.n_tags = 0, x.priority = 0, x.parent = 0, x.prune = true, x.seed = 0;
    snprintf(m->window_pattern, sizeof m->window_pattern, "L");
    snprintf(m->ve_layers, sizeof m->ve_layers, "none");
    bool any_ve = false;
    for (int i = 0; i < m->depth; i++) any_ve |= m->has_ve[i];
    if (m->pos == POS_ROPE) m->max_pos = 0;
    if (!any_ve) m->ve_gate_channels = 0, x.train.value_embedding_lr = 0;
    if (m->tie_embeddings && m->pos == POS_ROPE) x.train.embedding_lr = 0;
    char *text = spec_canonical_json(&x), *key = malloc(strlen(text) + 4 * SPEC_MAX_DEPTH + 64);
    cr_assert(text && key);
    size_t n = (size_t)sprintf(key, "%s|", text);
    for (int i = 0; i < m->depth; i++)
        n +=
            (size_t)sprintf(key + n, "%d%c,", sp->model.window[i], sp->model.has_ve[i] ? 'v' : '-');
    free(text);
    return key;
}

#define CORPUS_MAX 600

/* Specs in many spellings: every window pattern and value-embedding choice
 * below at several depths, and the fields the engine may not read. */
static int corpus(char specs[][256]) {
    static const char *const windows[] = {"L",    "S",    "SL",   "LS",   "SSL",
                                          "SSSL", "SLSL", "SSSS", "SLLL", "SSSLSSSL"};
    static const char *const ves[] = {"\"alternate\"", "\"all\"", "\"none\"", "\"first_half\"",
                                      "\"last_half\"", "[0]",     "[]"};
    static const int depths[] = {1, 2, 3, 4, 6, 8};
    static const char *const extras[] = {
        "\"model\":{\"seq_len\":128,\"max_pos\":512}",
        "\"model\":{\"seq_len\":128}",
        "\"model\":{\"seq_len\":128,\"max_pos\":512,\"pos\":\"learned\"}",
        "\"model\":{\"seq_len\":128,\"pos\":\"learned\"}",
        "\"model\":{\"ve_layers\":\"none\",\"ve_gate_channels\":8}",
        "\"model\":{\"ve_layers\":\"none\"},\"train\":{\"value_embedding_lr\":0.1}",
        "\"model\":{\"ve_gate_channels\":8}",
        "\"model\":{\"tie_embeddings\":true},\"train\":{\"embedding_lr\":0.2}",
        "\"model\":{\"tie_embeddings\":true}",
        "\"model\":{\"tie_embeddings\":true,\"pos\":\"learned\"},\"train\":{\"embedding_lr\":0.2}",
        "\"model\":{\"tie_embeddings\":true,\"pos\":\"learned\"}",
        "\"token_budget\":5000",
        "\"dataset\":\"other\"",
        "\"name\":\"labelled\",\"tags\":[\"t\"],\"priority\":5,\"prune\":false",
    };
    int n = 0;
    for (size_t d = 0; d < sizeof depths / sizeof *depths; d++)
        for (size_t w = 0; w < sizeof windows / sizeof *windows; w++)
            for (size_t v = 0; v < sizeof ves / sizeof *ves; v++)
                snprintf(specs[n++], 256,
                         "{\"model\":{\"depth\":%d,\"window_pattern\":\"%s\",\"ve_layers\":%s}}",
                         depths[d], windows[w], ves[v]);
    for (size_t e = 0; e < sizeof extras / sizeof *extras; e++)
        snprintf(specs[n++], 256, "{%s}", extras[e]);
    cr_assert_leq(n, CORPUS_MAX);
    return n;
}

/* The old and the new hashes of the same rows map one to one, except where
 * specs that train alike (spec.h's spellings) become one configuration; the
 * rows are filed by the spec's scope; the summaries are summed again. */
Test(store, migration_009_files_every_row_again_one_to_one_but_for_spellings) {
    static char specs[CORPUS_MAX][256];
    static spec_t parsed[CORPUS_MAX];
    static char old_hash[CORPUS_MAX][SPEC_HASH_HEX], new_hash[CORPUS_MAX][SPEC_HASH_HEX];
    static char *key[CORPUS_MAX];
    int n = corpus(specs);
    const char *path = tu_dir_path("v8.db");
    size_t before = 0; /* the migrations up to 008 */
    while (before < store_n_migrations && store_migrations[before].version < 9) before++;
    cr_assert_eq(store_migrate(path, store_migrations, before, err, sizeof err), 0, "%s", err);
    sqlite3 *db = raw_open("v8.db");
    cr_assert_eq(raw_int(db, "PRAGMA user_version"), 8);
    cr_assert_eq(
        sqlite3_create_function(db, "old_sha256", 1, SQLITE_UTF8, NULL, old_sha256_fn, NULL, NULL),
        SQLITE_OK);
    sqlite3_stmt *ins = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "INSERT INTO experiments (id, spec, spec_hash, seed, source,"
                                    " status, finished, config_hash) VALUES (?1, ?2, 'x', ?3,"
                                    " 'api', 'succeeded', '2026-01-01', old_sha256(json_remove(?2,"
                                    " '$.seed', '$.name', '$.tags', '$.priority', '$.parent',"
                                    " '$.prune'))) RETURNING config_hash",
                                    -1, &ins, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    raw_exec(db, "BEGIN");
    for (int i = 0; i < n; i++) {
        char perr[SPEC_ERR_LEN];
        cr_assert_eq(spec_parse(specs[i], strlen(specs[i]), &parsed[i], perr, sizeof perr), 0,
                     "%s: %s", specs[i], perr);
        char *canon = spec_canonical_json(&parsed[i]);
        sqlite3_bind_int(ins, 1, i + 1);
        sqlite3_bind_text(ins, 2, canon, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(ins, 3, 1 + i % 2); /* seeds never split a configuration */
        cr_assert_eq(sqlite3_step(ins), SQLITE_ROW, "%s", sqlite3_errmsg(db));
        snprintf(old_hash[i], SPEC_HASH_HEX, "%s", (const char *)sqlite3_column_text(ins, 0));
        sqlite3_reset(ins);
        free(canon);
    }
    sqlite3_finalize(ins);
    raw_exec(db, "INSERT INTO results (experiment_id, val_bpb) SELECT id, 1 + id / 1000.0"
                 " FROM experiments;"
                 "INSERT INTO experiments (id, spec, spec_hash, seed, source, config_hash)"
                 " VALUES (9999, '{\"model\":{\"depth\":0}}', 'x', 1, 'api', 'kept');"
                 "COMMIT");
    sqlite3_close(db);

    store_t *s = NULL;
    cr_assert_eq(store_open(path, &s, err, sizeof err), 0, "%s", err);
    store_close(s);
    db = raw_open("v8.db");
    cr_expect_str_eq(raw_text(db, "SELECT config_hash FROM experiments WHERE id = 9999"), "kept",
                     "a spec this build cannot parse keeps its row as it was");
    int merged = 0;
    for (int i = 0; i < n; i++) {
        char sql[128];
        spec_scope_t sc;
        snprintf(sql, sizeof sql, "SELECT config_hash FROM experiments WHERE id = %d", i + 1);
        snprintf(new_hash[i], SPEC_HASH_HEX, "%s", raw_text(db, sql));
        char want[SPEC_HASH_HEX];
        cr_assert_eq(spec_config_hash(&parsed[i], want), 0);
        cr_expect_str_eq(new_hash[i], want, "row %d is filed by spec_config_hash", i + 1);
        key[i] = training_key(&parsed[i]);
        spec_scope(&parsed[i], &sc);
        snprintf(sql, sizeof sql,
                 "SELECT dataset || '|' || budget_kind || '|' || budget FROM experiments"
                 " WHERE id = %d",
                 i + 1);
        char scope[128];
        snprintf(scope, sizeof scope, "%s|%s|%.1f", sc.dataset, sc.budget_kind, sc.budget);
        cr_expect_str_eq(raw_text(db, sql), scope, "%s", specs[i]);
        for (int j = 0; j < i; j++) {
            bool same_old = !strcmp(old_hash[i], old_hash[j]);
            bool same_new = !strcmp(new_hash[i], new_hash[j]);
            bool alike = !strcmp(key[i], key[j]);
            if (same_old)
                cr_expect(same_new, "one old configuration became two: %s, %s", specs[j], specs[i]);
            if (same_new && !same_old) merged++;
            cr_expect(same_new == alike, "%s: %s, %s",
                      alike ? "they train alike but are two configurations"
                            : "joined, but they train differently",
                      specs[j], specs[i]);
        }
    }
    cr_expect_gt(merged, 0, "the corpus has equivalent spellings");
    cr_log_info("migration 009: %d pairs of %d specs joined as one configuration", merged, n);
    cr_expect_eq(raw_int(db, "SELECT count(*) FROM configs"),
                 raw_int(db, "SELECT count(DISTINCT dataset || budget_kind || budget ||"
                             " config_hash) FROM experiments WHERE status = 'succeeded'"),
                 "the summary counts the configurations now");
    cr_expect_eq(raw_int(db, "SELECT sum(n) FROM configs"), n);
    cr_expect_eq(raw_int(db,
                         "SELECT count(*) FROM sqlite_schema WHERE name IN"
                         " ('experiments_dedup', 'experiments_scope', 'configs_add_on_result')"),
                 3);
    sqlite3_close(db);
    for (int i = 0; i < n; i++) {
        spec_free(&parsed[i]);
        free(key[i]);
    }
}

/* The configs summary (schema 008) that the leaderboard, best and noise read
 * is kept by triggers: after many runs in several scopes, some failed, every
 * row equals a regrouping of experiments and results from scratch. */
Test(store, the_config_summary_equals_a_regrouping_from_scratch) {
    store_t *s = open_store();
    unsigned x = 12345;
    for (int i = 0; i < 60; i++) {
        x = x * 1103515245u + 12345u;
        const char *dataset = (x >> 8) % 2 ? "default" : "other";
        int depth = 1 + (int)((x >> 12) % 3);
        char top[160];
        snprintf(top, sizeof top, "\"dataset\":\"%s\",\"seed\":%d,\"model\":{\"depth\":%d}",
                 dataset, 100 + i, depth);
        if ((x >> 20) % 5 == 0) { /* a failed run: no result, never counted */
            int64_t id = start_top(s, "failed", top);
            cr_assert_eq(store_finish(s, id, STORE_FAILED, "x", 1, -1, NULL, err, sizeof err), 0,
                         "%s", err);
            continue;
        }
        succeed_top(s, "run", top, 1.0 + (double)((x >> 4) % 1000) / 997.0);
    }
    store_close(s);

    sqlite3 *db = raw_open("nightshift.db");
    const char *regroup =
        "WITH g AS (SELECT e.dataset AS d, e.budget_kind AS k, e.budget AS b,"
        " e.config_hash AS h, min(e.id) AS first_id, count(*) AS n, avg(r.val_bpb) AS mean,"
        " min(r.val_bpb) AS best, sum((r.val_bpb) * (r.val_bpb)) AS sumsq"
        " FROM experiments e JOIN results r ON r.experiment_id = e.id"
        " WHERE e.status = 'succeeded' GROUP BY 1, 2, 3, 4)"
        " SELECT count(*) FROM g LEFT JOIN configs c ON c.dataset = g.d AND c.budget_kind = g.k"
        " AND c.budget = g.b AND c.config_hash = g.h"
        " WHERE c.n IS NOT g.n OR c.first_id IS NOT g.first_id OR abs(c.mean - g.mean) > 1e-12"
        " OR c.best IS NOT g.best OR abs(c.sumsq - g.sumsq) > 1e-9";
    cr_expect_eq(raw_int(db, regroup), 0, "configs rows that differ from a regrouping");
    cr_expect_eq(raw_int(db, "SELECT count(*) FROM configs"),
                 raw_int(db, "SELECT count(DISTINCT dataset || config_hash) FROM experiments"
                             " WHERE status = 'succeeded'"),
                 "one configs row per succeeded configuration");
    cr_expect_gt(raw_int(db, "SELECT count(*) FROM experiments WHERE status = 'failed'"), 0);
    /* and scopes, the per-scope sums behind the default budget and the noise */
    const char *rescope =
        "WITH g AS (SELECT e.dataset AS d, e.budget_kind AS k, e.budget AS b, count(*) AS n,"
        " sum(r.val_bpb) AS s, sum(r.val_bpb * r.val_bpb) AS q"
        " FROM experiments e JOIN results r ON r.experiment_id = e.id"
        " WHERE e.status = 'succeeded' GROUP BY e.dataset, e.budget_kind, e.budget,"
        " e.config_hash),"
        " h AS (SELECT d, k, b, sum(n) AS succeeded, sum(n >= 2) AS configs2,"
        " sum(CASE WHEN n >= 2 THEN n ELSE 0 END) AS runs2,"
        " sum(CASE WHEN n >= 2 THEN n - 1 ELSE 0 END) AS df,"
        " sum(CASE WHEN n >= 2 THEN q - s * s / n ELSE 0 END) AS ss FROM g GROUP BY d, k, b)"
        " SELECT count(*) FROM h LEFT JOIN scopes c ON c.dataset = h.d AND c.budget_kind = h.k"
        " AND c.budget = h.b WHERE c.succeeded IS NOT h.succeeded OR c.configs2 IS NOT h.configs2"
        " OR c.runs2 IS NOT h.runs2 OR c.df IS NOT h.df OR abs(c.ss - h.ss) > 1e-9";
    cr_expect_eq(raw_int(db, rescope), 0, "scopes rows that differ from a regrouping");
    cr_expect_eq(raw_int(db, "SELECT count(*) FROM scopes"), 2);
    sqlite3_close(db);
}

/* ------------------------------------------------ people first, scopes */

/* Insert a queued experiment from source with priority; returns its id. */
static int64_t insert_from(store_t *s, const char *name, const char *source, int priority) {
    char *spec = canonical(""), config[SPEC_HASH_HEX];
    store_new_experiment_t e = {.name = name,
                                .spec_json = spec,
                                .config_hash = name,
                                .seed = 42,
                                .source = source,
                                .priority = priority};
    file_spec(spec, config, &e.scope);
    int64_t id = 0;
    cr_assert_eq(store_insert(s, &e, &id, err, sizeof err), 0, "%s", err);
    free(spec);
    return id;
}

Test(store, claim_puts_a_persons_submission_before_the_agents_of_equal_priority) {
    store_t *s = open_store();
    /* the agent's three baseline seeds, then a person's run from the CLI and
     * one from the API, then one a person put behind the agent's on purpose */
    int64_t a1 = insert_from(s, "a1", "agent", 0), a2 = insert_from(s, "a2", "agent", 0),
            a3 = insert_from(s, "a3", "agent", 0), cli = insert_from(s, "mine", "cli", 0),
            api = insert_from(s, "api", "api", 0), later = insert_from(s, "later", "cli", -1),
            urgent = insert_from(s, "urgent", "agent", 1);
    int64_t want[] = {urgent, cli, api, a1, a2, a3, later};
    /* the list in queue order says the same, page by page */
    int64_t after = 0;
    for (int i = 0; i < 7; i += 2) {
        cJSON *l = store_list(s, STORE_QUEUED, NULL, NULL, "queue", 2, after, err, sizeof err);
        cr_assert_not_null(l, "%s", err);
        for (int k = 0; k < cJSON_GetArraySize(l); k++)
            cr_expect_eq(tu_jnum(cJSON_GetArrayItem(l, k), "id"), want[i + k], "position %d",
                         i + k);
        after = (int64_t)tu_jnum(cJSON_GetArrayItem(l, cJSON_GetArraySize(l) - 1), "id");
        cJSON_Delete(l);
    }
    for (int i = 0; i < 7; i++) claim_expect(s, want[i]);
    store_close(s);
}

/* Insert, claim and finish with status a run of {top_json}; val_bpb when it
 * succeeded. */
static int64_t finish_run(store_t *s, const char *name, const char *top_json, const char *status,
                          double val_bpb) {
    int64_t id = start_top(s, name, top_json);
    store_result_t r = result_with(val_bpb);
    int ok = !strcmp(status, STORE_SUCCEEDED);
    cr_assert_eq(store_finish(s, id, status, NULL, 0, -1, ok ? &r : NULL, err, sizeof err), 0, "%s",
                 err);
    tu_sleep_ms(3); /* finish times differ */
    return id;
}

Test(store, the_default_scope_is_the_latest_results_then_the_latest_experiments) {
    store_t *s = open_store();
    store_scope_t sc = {.eval_tokens = -1};
    cr_expect_eq(store_default_scope(s, &sc, err, sizeof err), 0, "an empty store: %s", err);

    /* A queued run names its scope while nothing has a result. */
    int64_t q = insert_full(s, "q", "hq", 1, 0, "\"depth\":2");
    (void)q;
    cr_expect_eq(store_default_scope(s, &sc, err, sizeof err), 2, "%s", err);
    cr_expect_str_eq(sc.dataset, "default");
    claim_expect(s, q);

    int64_t b1 = finish_run(s, "b1", "\"dataset\":\"book\",\"seed\":1", STORE_SUCCEEDED, 2.0);
    finish_run(s, "x", "\"dataset\":\"other\",\"seed\":1,\"time_budget_s\":60", STORE_FAILED, 0);
    /* the latest finished run failed: the latest result's scope still answers */
    sc = (store_scope_t){.eval_tokens = -1};
    cr_expect_eq(store_default_scope(s, &sc, err, sizeof err), 1, "%s", err);
    cr_expect_str_eq(sc.dataset, "book");
    cr_expect_str_eq(sc.budget_kind, "time");
    cr_expect_eq(sc.budget, 300);
    cr_expect_eq(sc.eval_tokens, SPEC_DEFAULT_EVAL_TOKENS);
    /* a dataset given: its latest result; one without results: its latest experiment */
    finish_run(s, "d", "\"seed\":7,\"token_budget\":4096", STORE_SUCCEEDED, 3.0);
    sc = (store_scope_t){.dataset = "book", .eval_tokens = -1};
    cr_expect_eq(store_default_scope(s, &sc, err, sizeof err), 1, "%s", err);
    cr_expect_eq(sc.budget, 300);
    sc = (store_scope_t){.eval_tokens = -1};
    cr_expect_eq(store_default_scope(s, &sc, err, sizeof err), 1, "%s", err);
    cr_expect_str_eq(sc.dataset, "default");
    cr_expect_str_eq(sc.budget_kind, "tokens");
    sc = (store_scope_t){.dataset = "other", .eval_tokens = -1};
    cr_expect_eq(store_default_scope(s, &sc, err, sizeof err), 2, "%s", err);
    cr_expect_eq(sc.budget, 60);
    /* a budget given keeps it, and finds the dataset of its latest result */
    sc = (store_scope_t){.budget_kind = "time", .budget = 300, .eval_tokens = -1};
    cr_expect_eq(store_default_scope(s, &sc, err, sizeof err), 1, "%s", err);
    cr_expect_str_eq(sc.dataset, "book");
    sc = (store_scope_t){.budget_kind = "time", .budget = 12, .eval_tokens = -1};
    cr_expect_eq(store_default_scope(s, &sc, err, sizeof err), 0, "no run used 12 s");

    /* every scope with results, the latest first, with its best */
    cJSON *list = store_scopes(s, 10, err, sizeof err);
    cr_assert_not_null(list, "%s", err);
    cr_assert_eq(cJSON_GetArraySize(list), 2, "the failed run's scope has no results");
    cJSON *book = cJSON_GetArrayItem(list, 1);
    cr_expect_str_eq(tu_jstr(book, "dataset"), "book");
    cr_expect_eq(tu_jnum(book, "runs"), 1);
    cr_expect_eq(tu_jnum(book, "best_id"), b1);
    cr_expect_float_eq(tu_jnum(book, "best_val_bpb"), 2.0, 1e-12);
    cr_expect_eq(tu_jnum(book, "best_n_seeds"), 1);
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(book, "best_val_bpb_sd")));
    cr_expect_str_eq(tu_jstr(cJSON_GetArrayItem(list, 0), "budget_kind"), "tokens");
    cJSON_Delete(list);
    store_close(s);
}

Test(store, results_of_different_evaluations_never_rank_together) {
    store_t *s = open_store();
    /* the same model scored on 4096 tokens and on the default count */
    char *spec = canonical("");
    int64_t ids[2];
    for (int i = 0; i < 2; i++) {
        char config[SPEC_HASH_HEX];
        store_new_experiment_t e = {
            .spec_json = spec, .config_hash = "same", .seed = 1, .source = "api"};
        file_spec(spec, config, &e.scope);
        e.scope.eval_tokens = i ? 4096 : SPEC_DEFAULT_EVAL_TOKENS;
        cr_assert_eq(store_insert(s, &e, &ids[i], err, sizeof err), 0, "%s", err);
        claim_expect(s, ids[i]);
        store_result_t r = result_with(i ? 1.0 : 2.0);
        cr_assert_eq(store_finish(s, ids[i], STORE_SUCCEEDED, NULL, 0, -1, &r, err, sizeof err), 0,
                     "%s", err);
    }
    free(spec);
    store_scope_t full = scope("default", "time", 300), small = full;
    small.eval_tokens = 4096;
    cJSON *b = store_best_in(s, &full, err, sizeof err);
    cr_expect_eq(tu_jnum(b, "id"), ids[0], "the 4096-token score leaked into the default's");
    cr_expect_eq(tu_jnum(b, "n_seeds"), 1);
    cJSON_Delete(b);
    b = store_best_in(s, &small, err, sizeof err);
    cr_expect_eq(tu_jnum(b, "id"), ids[1]);
    cJSON_Delete(b);
    /* the same spec and seed under another evaluation is no duplicate */
    int64_t id = 0;
    cr_expect_eq(store_find_duplicate(s, "same", 1, 4096, &id, err, sizeof err), 1);
    cr_expect_eq(id, ids[1]);
    cr_expect_eq(store_find_duplicate(s, "same", 1, 1000, &id, err, sizeof err), 0);
    store_close(s);
}

Test(store, migration_010_gives_earlier_runs_the_whole_split_as_their_evaluation) {
    const char *p = tu_dir_path("old.db");
    size_t before = 0;
    while (before < store_n_migrations && store_migrations[before].version < 10) before++;
    cr_assert_eq(store_migrate(p, store_migrations, before, err, sizeof err), 0, "%s", err);
    sqlite3 *db = raw_open("old.db");
    raw_exec(db, "INSERT INTO experiments (id, spec, seed, source, status, finished, config_hash,"
                 " dataset, budget_kind, budget) VALUES (1, '{\"dataset\":\"d\",\"seed\":1,"
                 "\"time_budget_s\":60}', 1, 'api', 'succeeded', '2026-01-01T00:00:00.000Z', 'c',"
                 " 'd', 'time', 60), (2, '{\"dataset\":\"d\",\"seed\":2,\"time_budget_s\":60}',"
                 " 2, 'agent', 'queued', NULL, 'c', 'd', 'time', 60);"
                 "INSERT INTO results (experiment_id, val_bpb) VALUES (1, 1.5);");
    sqlite3_close(db);
    store_t *s = NULL;
    cr_assert_eq(store_open(p, &s, err, sizeof err), 0, "%s", err);
    store_scope_t sc = {.eval_tokens = -1};
    cr_expect_eq(store_default_scope(s, &sc, err, sizeof err), 1, "%s", err);
    cr_expect_eq(sc.eval_tokens, 0, "an earlier run scored the whole split");
    cJSON *lb = store_leaderboard(s, &sc, 10, err, sizeof err);
    cr_assert_eq(cJSON_GetArraySize(lb), 1, "%s", err);
    cr_expect_eq(tu_jnum(cJSON_GetArrayItem(lb, 0), "eval_tokens"), 0);
    cJSON_Delete(lb);
    /* the queued one still scores what it was submitted to score */
    store_experiment_t x;
    cr_assert_eq(store_claim_next(s, &x, err, sizeof err), 1, "%s", err);
    spec_t sp;
    char perr[SPEC_ERR_LEN];
    cr_assert_eq(spec_parse(x.spec_json, strlen(x.spec_json), &sp, perr, sizeof perr), 0, "%s",
                 perr);
    cr_expect_eq(sp.eval_tokens, 0);
    cr_expect_eq(x.scope.eval_tokens, 0);
    spec_free(&sp);
    store_experiment_clear(&x);
}

/* ------------------------------------------------- the sealed test figure */

static void set_test(store_t *s, int64_t id, double v, const char *reason) {
    store_test_t t = {.test_bpb = v, .tokens = 1000, .seconds = 0.5, .reason = reason};
    cr_assert_eq(store_set_test(s, id, &t, err, sizeof err), 0, "%s", err);
}

static void finish_ok(store_t *s, int64_t id, double val_bpb) {
    store_result_t r = result_with(val_bpb);
    cr_assert_eq(store_finish(s, id, STORE_SUCCEEDED, NULL, 0, -1, &r, err, sizeof err), 0, "%s",
                 err);
}

/* Test figures are written while a run runs, averaged per configuration over
 * its succeeded runs, say why when there are none, go with a re-queued
 * attempt, and appear in no ranking answer. */
Test(store, test_figures_are_kept_apart_and_averaged_per_configuration) {
    store_t *s = open_store();
    store_scope_t sc = scope("default", "time", 300);
    int64_t a1 = start_top(s, "a", "\"seed\":1,\"model\":{\"depth\":2}");
    set_test(s, a1, 2.5, NULL); /* replaced by the next line of the same attempt */
    set_test(s, a1, 2.0, NULL);
    finish_ok(s, a1, 1.9);
    int64_t a2 = start_top(s, "a", "\"seed\":2,\"model\":{\"depth\":2}");
    set_test(s, a2, 2.2, NULL);
    finish_ok(s, a2, 2.1);
    /* A failed run of A measured before it failed: not one of A's figures. */
    int64_t a3 = start_top(s, "a", "\"seed\":3,\"model\":{\"depth\":2}");
    set_test(s, a3, 9.0, NULL);
    cr_assert_eq(store_finish(s, a3, STORE_FAILED, "x", 1, -1, NULL, err, sizeof err), 0);
    int64_t b = start_top(s, "b", "\"seed\":1,\"model\":{\"depth\":3}");
    set_test(s, b, NAN, "dataset default has no test split (--test-fraction 0)");
    finish_ok(s, b, 1.5);
    int64_t c = succeed_top(s, "c", "\"seed\":1,\"model\":{\"depth\":4}", 1.7);

    /* Only a running experiment takes one. */
    store_test_t t = {.test_bpb = 1.0};
    cr_expect_eq(store_set_test(s, c, &t, err, sizeof err), -1);
    cr_expect(strstr(err, "is not running (it is succeeded)"), "%s", err);
    cr_expect_eq(store_set_test(s, 999, &t, err, sizeof err), -1);

    cJSON *e = get(s, a1, 0);
    cr_assert_not_null(e, "%s", err);
    cJSON *o = store_test_of(s, &sc, tu_jstr(e, "config_hash"), err, sizeof err);
    cJSON_Delete(e);
    cr_assert_not_null(o, "%s", err);
    cr_expect_float_eq(tu_jnum(o, "test_bpb"), 2.1, 1e-12);
    cr_expect_float_eq(tu_jnum(o, "test_bpb_sd"), sqrt(0.02), 1e-12);
    cr_expect_eq(tu_jnum(o, "test_n"), 2);
    cr_expect_eq(tu_jnum(o, "runs"), 2);
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(o, "test_reason")));
    cJSON_Delete(o);

    /* store_scope_configs carries the hashes: B has a reason, C predates figures. */
    cJSON *cfgs = store_scope_configs(s, &sc, err, sizeof err);
    cr_assert_not_null(cfgs, "%s", err);
    cr_assert_eq(cJSON_GetArraySize(cfgs), 3);
    const cJSON *row;
    cJSON_ArrayForEach(row, cfgs) {
        double id = tu_jnum(row, "id");
        cJSON *f = store_test_of(s, &sc, tu_jstr(row, "config_hash"), err, sizeof err);
        cr_assert_not_null(f, "%s", err);
        if (id == b) {
            cr_expect(cJSON_IsNull(cJSON_GetObjectItem(f, "test_bpb")));
            cr_expect_str_eq(tu_jstr(f, "test_reason"),
                             "dataset default has no test split (--test-fraction 0)");
        } else if (id == c) {
            cr_expect(strstr(tu_jstr(f, "test_reason"), "not measured"), "%s",
                      tu_jstr(f, "test_reason"));
            cr_expect_eq(tu_jnum(f, "test_n"), 0);
        }
        cJSON_Delete(f);
    }
    cJSON_Delete(cfgs);

    /* No ranking answer carries a test figure. */
    cJSON *lb = store_leaderboard(s, &sc, 10, err, sizeof err),
          *best = store_best_in(s, &sc, err, sizeof err);
    char *text = cJSON_PrintUnformatted(lb), *btext = cJSON_PrintUnformatted(best);
    cr_expect_null(strstr(text, "test"), "%s", text);
    cr_expect_null(strstr(btext, "test"), "%s", btext);
    free(text);
    free(btext);
    cJSON_Delete(lb);
    cJSON_Delete(best);

    /* A re-queued attempt loses its figure with its metrics. */
    int64_t d = start_top(s, "d", "\"seed\":1,\"model\":{\"depth\":5}");
    set_test(s, d, 3.0, NULL);
    store_close(s);
    s = open_store();
    int requeued = 0;
    cr_assert_eq(store_recover(s, 3, &requeued, NULL, err, sizeof err), 0, "%s", err);
    cr_expect_eq(requeued, 1);
    sqlite3 *db = raw_open("nightshift.db");
    char *sql =
        tu_path("SELECT count(*) FROM test_results WHERE experiment_id = %lld", (long long)d);
    cr_expect_eq(raw_int(db, sql), 0);
    cr_expect_eq(raw_int(db, "SELECT count(*) FROM test_results"), 4);
    free(sql);
    sqlite3_close(db);
    store_close(s);
}

/* ------------------------------------------------------------- the totals */

/* store_totals against counts and sums taken from the tables themselves. */
static void expect_totals_match(store_t *s, sqlite3 *db) {
    store_totals_t t;
    cr_assert_eq(store_totals(s, &t, err, sizeof err), 0, "totals: %s", err);
    for (int i = 0; i < STORE_N_STATUSES; i++) {
        sqlite3_stmt *st = NULL;
        cr_assert_eq(sqlite3_prepare_v2(db, "SELECT count(*) FROM experiments WHERE status = ?1",
                                        -1, &st, NULL),
                     SQLITE_OK);
        sqlite3_bind_text(st, 1, store_status_name(i), -1, SQLITE_STATIC);
        cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
        cr_expect_eq(t.by_status[i], sqlite3_column_int64(st, 0), "%s: %lld", store_status_name(i),
                     (long long)t.by_status[i]);
        sqlite3_finalize(st);
    }
    cr_expect_eq(t.tokens_trained, (double)raw_int(db, "SELECT total(total_tokens) FROM results"));
    cr_expect_float_eq(t.seconds_trained,
                       raw_int(db, "SELECT total(training_seconds) * 1000 FROM results") / 1000.0,
                       1e-3);
    cr_expect_gt(t.db_bytes, 0);
}

Test(store, totals_follow_every_status_change_and_result) {
    store_t *s = open_store();
    sqlite3 *db = raw_open("nightshift.db");
    cr_expect_null(store_status_name(-1));
    cr_expect_null(store_status_name(STORE_N_STATUSES));
    cr_expect_str_eq(store_status_name(0), STORE_QUEUED);
    expect_totals_match(s, db);

    succeed(s, "a", 1.5, NULL);
    succeed(s, "b", 1.4, NULL);
    int64_t q = insert_full(s, "q", "hq", 1, 0, NULL);
    int64_t bad = insert_full(s, "bad", "hbad", 1, 100, NULL);
    claim_expect(s, bad);
    expect_totals_match(s, db);
    cr_assert_eq(store_finish(s, bad, STORE_FAILED, "exit 1", 1, -1, NULL, err, sizeof err), 0);
    cr_assert_eq(store_cancel_queued(s, q, err, sizeof err), 1);
    int64_t r = insert_full(s, "r", "hr", 1, 100, NULL);
    claim_expect(s, r);
    expect_totals_match(s, db);
    store_totals_t t;
    cr_assert_eq(store_totals(s, &t, err, sizeof err), 0, "%s", err);
    cr_expect_eq(t.by_status[1], 1, "one running");
    cr_expect_eq(t.tokens_trained, 3e6, "two results of 1.5M tokens");

    /* a daemon that died with r running: requeued at the next start */
    store_close(s);
    s = open_store();
    int requeued = 0, abandoned = 0;
    cr_assert_eq(store_recover(s, 3, &requeued, &abandoned, err, sizeof err), 0, "%s", err);
    cr_expect_eq(requeued, 1);
    expect_totals_match(s, db);

    /* a person's edits with the sqlite3 shell are counted too */
    raw_exec(db, "UPDATE results SET total_tokens = 1e6 WHERE experiment_id = 1");
    raw_exec(db, "DELETE FROM results WHERE experiment_id = 2");
    expect_totals_match(s, db);
    sqlite3_close(db);
    store_close(s);
}

/* A store from before 015 gets totals of what it already holds. */
Test(store, totals_start_from_what_an_older_store_holds) {
    size_t before = 0;
    while (before < store_n_migrations && store_migrations[before].version < 15) before++;
    cr_assert_lt(before, store_n_migrations);
    cr_assert_eq(
        store_migrate(tu_dir_path("nightshift.db"), store_migrations, before, err, sizeof err), 0,
        "%s", err);
    sqlite3 *db = raw_open("nightshift.db");
    raw_exec(db, "INSERT INTO experiments (id, spec, seed, source, status, config_hash, dataset,"
                 " budget_kind, budget) VALUES"
                 " (1, '{}', 1, 'api', 'succeeded', 'c', 'd', 'time', 60),"
                 " (2, '{}', 2, 'api', 'queued', 'c', 'd', 'time', 60),"
                 " (3, '{}', 3, 'api', 'failed', 'c', 'd', 'time', 60)");
    raw_exec(db, "INSERT INTO results (experiment_id, total_tokens, training_seconds) VALUES"
                 " (1, 1000, 2.5), (3, 7, 0.5)");
    store_t *s = open_store();
    store_totals_t t;
    cr_assert_eq(store_totals(s, &t, err, sizeof err), 0, "%s", err);
    cr_expect_eq(t.by_status[0], 1, "queued");
    cr_expect_eq(t.by_status[2], 1, "succeeded");
    cr_expect_eq(t.by_status[3], 1, "failed");
    cr_expect_eq(t.tokens_trained, 1007);
    cr_expect_eq(t.seconds_trained, 3);
    expect_totals_match(s, db);
    sqlite3_close(db);
    store_close(s);
}

/* ------------------------------------------- migration 017: source mcp */

/* An MCP submission filed before 017 (source agent, via mcp) becomes source
 * mcp; the webhook's stay agent; the totals' triggers, the leaderboard and
 * the queue's order (a person's first) survive the rebuild. */
Test(store, migration_017_files_mcp_submissions_as_source_mcp) {
    const char *p = tu_dir_path("old17.db");
    size_t n = 0;
    while (n < store_n_migrations && store_migrations[n].version < 17) n++;
    cr_assert_eq(store_migrate(p, store_migrations, n, err, sizeof err), 0, "%s", err);
    sqlite3 *db = raw_open("old17.db");
    raw_exec(db,
             "INSERT INTO experiments (id, spec, seed, source, via, status)"
             " VALUES (1, '{}', 1, 'agent', 'mcp', 'queued'),"
             " (2, '{}', 2, 'agent', 'webhook', 'queued'), (3, '{}', 3, 'api', NULL, 'queued')");
    sqlite3_close(db);
    store_t *s = NULL;
    cr_assert_eq(store_open(p, &s, err, sizeof err), 0, "%s", err);
    store_close(s);
    db = raw_open("old17.db");
    cr_expect_eq(raw_int(db, "PRAGMA user_version"), last_version());
    cr_expect_str_eq(raw_text(db, "SELECT group_concat(source, ',') FROM "
                                  "(SELECT source FROM experiments ORDER BY id)"),
                     "mcp,agent,api");
    cr_expect_str_eq(raw_text(db, "SELECT group_concat(id, ',') FROM (SELECT id FROM experiments"
                                  " WHERE status = 'queued' ORDER BY priority DESC,"
                                  " coalesce(rung, 0) DESC, source IN ('agent', 'mcp'), id)"),
                     "3,1,2", "a person's submission first");
    raw_exec(db, "UPDATE experiments SET status = 'running' WHERE id = 1");
    cr_expect_eq(raw_int(db, "SELECT n FROM status_counts WHERE status = 'running'"), 1,
                 "the totals' triggers were made again");
    cr_expect_eq(raw_int(db, "SELECT count(*) FROM leaderboard"), 0);
    cr_expect_eq(raw_int(db, "SELECT count(*) FROM pragma_foreign_key_check"), 0);
    sqlite3_close(db);
}
