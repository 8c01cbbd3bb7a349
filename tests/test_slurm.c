/* test_slurm.c - the Slurm executor's pure parts: the state map, the --time
 * backstop, the job script (run for real under /bin/sh) and the sbatch line;
 * the store's executor columns (migration 007); and a real daemon with the
 * Slurm executor against stand-in Slurm commands (tests/slurm/fake). The
 * executor against a real one-node Slurm is tests/slurm/run.sh (`make
 * test-slurm`). */
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/exec/slurm.h"
#include "daemon/store/store.h"
#include "tests/testutil.h"

TestSuite(slurm, .init = tu_dir_init, .fini = tu_dir_fini, .timeout = 30);

Test(slurm, states_map_one_to_one) {
    static const struct {
        const char *state;
        slurm_phase phase;
        executor_status status;
    } cases[] = {
        {"PENDING", SLURM_QUEUED, 0},
        {"RUNNING", SLURM_RUNNING, 0},
        {"COMPLETING", SLURM_RUNNING, 0},
        {"COMPLETED", SLURM_ENDED, EXECUTOR_SUCCEEDED},
        {"TIMEOUT", SLURM_ENDED, EXECUTOR_TIMEOUT},
        {"OUT_OF_MEMORY", SLURM_ENDED, EXECUTOR_OOM},
        {"FAILED", SLURM_ENDED, EXECUTOR_FAILED},
        {"NODE_FAIL", SLURM_ENDED, EXECUTOR_FAILED},
        {"CANCELLED", SLURM_ENDED, EXECUTOR_CANCELLED},
        {"PREEMPTED", SLURM_ENDED, EXECUTOR_INTERRUPTED},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        executor_status st = (executor_status)-1;
        slurm_phase ph = slurm_state_map(cases[i].state, &st);
        cr_expect_eq(ph, cases[i].phase, "%s: phase %d, want %d", cases[i].state, ph,
                     cases[i].phase);
        if (cases[i].phase == SLURM_ENDED)
            cr_expect_eq(st, cases[i].status, "%s: %s, want %s", cases[i].state,
                         executor_status_name(st), executor_status_name(cases[i].status));
        else
            cr_expect_eq((int)st, -1, "%s: a live state set a status", cases[i].state);
    }
    executor_status st;
    cr_expect_eq(slurm_state_map("WHATEVER", &st), SLURM_UNKNOWN);
    cr_expect_eq(slurm_state_map("", &st), SLURM_UNKNOWN);
    cr_expect_eq(slurm_state_map("completed", &st), SLURM_UNKNOWN, "states are upper case");
    cr_expect_eq(slurm_state_map(NULL, &st), SLURM_UNKNOWN);
}

Test(slurm, time_limit_is_whole_minutes_above_budget_and_slack) {
    cr_expect_eq(slurm_time_minutes(300, 120), 7);  /* 420 s */
    cr_expect_eq(slurm_time_minutes(300, 121), 8);  /* 421 s rounds up */
    cr_expect_eq(slurm_time_minutes(2, 1), 1);      /* the smallest Slurm limit */
    cr_expect_eq(slurm_time_minutes(60, 0), 1);     /* exactly one minute */
    cr_expect_eq(slurm_time_minutes(59.5, 0.6), 2); /* 60.1 s */
    cr_expect_eq(slurm_time_minutes(0, 0), 1);
    cr_expect_eq(slurm_time_minutes(-5, -5), 1);
    cr_expect_eq(slurm_time_minutes(1e12, 0), 1000000, "clamped");
}

static executor_run_t run_for(const char *run_dir, char *const *argv, int memory_mb) {
    return (executor_run_t){.id = 42,
                            .shim = "/opt/ns/nightshift",
                            .argv = argv,
                            .run_dir = run_dir,
                            .log_path = "/shared/state/runs/42/train.log",
                            .threads = 2,
                            .memory_mb = memory_mb,
                            .budget_s = 300,
                            .slack_s = 120};
}

Test(slurm, job_script_quotes_and_limits) {
    char *argv[] = {"/opt/ns/nightshift", "train", "--dir",     "/shared/state",
                    "--progress-fd",      "3",     "it's.json", NULL};
    executor_run_t r = run_for("/shared/state/runs/42", argv, 512);
    char *s = slurm_job_script(&r);
    cr_assert(s);
    cr_expect(!strncmp(s, "#!/bin/sh\n", 10), "%s", s);
    cr_expect(strstr(s, "cd '/shared/state/runs/42' || exit 1\n"), "%s", s);
    cr_expect(strstr(s, "'/opt/ns/nightshift' exec-limited --memory-mb 512 -- '/opt/ns/nightshift' "
                        "'train' '--dir' '/shared/state' '--progress-fd' '3' 'it'\\''s.json' "
                        "3>>progress.jsonl\n"),
              "%s", s);
    cr_expect(strstr(s, "mv -f exit_code.tmp exit_code\n"), "%s", s);
    free(s);

    r.memory_mb = 0; /* no limit: no shim */
    s = slurm_job_script(&r);
    cr_assert(s);
    cr_expect(!strstr(s, "exec-limited"), "%s", s);
    cr_expect(strstr(s, "\n'/opt/ns/nightshift' 'train'"), "%s", s);
    free(s);
}

/* The script as Slurm would run it: progress on fd 3 lands in the file, the
 * exit code in exit_code, and a quote in the directory name does no harm. */
Test(slurm, job_script_runs_under_sh) {
    const char *dir = tu_dir_path("run 'x'");
    cr_assert_eq(mkdir(dir, 0755), 0);
    char *argv[] = {"/bin/sh", "-c", "echo '{\"event\":\"step\",\"step\":1}' >&3; echo out; exit 3",
                    NULL};
    executor_run_t r = run_for(dir, argv, 0);
    char *s = slurm_job_script(&r);
    cr_assert(s);
    char *script = tu_path("%s/job.sh", dir);
    tu_write(script, s);
    free(s);
    char *sh[] = {"/bin/sh", script, NULL};
    tu_run_t out;
    tu_run(&out, sh, 10);
    cr_expect_eq(out.exit_code, 3, "exit %d: %s", out.exit_code, out.err);
    cr_expect(strstr(out.out, "out"));
    tu_run_free(&out);
    char *progress = tu_read(tu_dir_path("run 'x'/progress.jsonl"));
    char *code = tu_read(tu_dir_path("run 'x'/exit_code"));
    cr_assert(progress && code);
    cr_expect_str_eq(progress, "{\"event\":\"step\",\"step\":1}\n");
    cr_expect_str_eq(code, "3\n");
    free(progress);
    free(code);
    free(script);
}

Test(slurm, sbatch_line_carries_the_resources) {
    char *argv_run[] = {"nightshift", "train", NULL};
    executor_run_t r = run_for("/shared/state/runs/42", argv_run, 512);
    char *extra[] = {"--qos=night", "--gres=gpu:0", NULL};
    slurm_opts_t o = {.partition = "cpu", .account = "lab", .sbatch_args = extra};
    char *argv[64], buf[4096];
    int n = slurm_sbatch_argv(&o, &r, "/shared/state/runs/42/job.sh", argv, 64, buf, sizeof buf);
    cr_assert_gt(n, 0);
    cr_expect_null(argv[n]);
    cr_expect_str_eq(argv[0], "sbatch");
    cr_expect_str_eq(argv[n - 1], "/shared/state/runs/42/job.sh", "the script comes last");
    const char *want[] = {"--parsable",
                          "--job-name=nightshift-42",
                          "--chdir=/shared/state/runs/42",
                          "--output=/shared/state/runs/42/train.log",
                          "--open-mode=append",
                          "--cpus-per-task=2",
                          "--mem=512M",
                          "--time=7",
                          "--partition=cpu",
                          "--account=lab",
                          "--qos=night",
                          "--gres=gpu:0"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        int found = 0;
        for (int k = 0; k < n; k++) found |= !strcmp(argv[k], want[i]);
        cr_expect(found, "sbatch line lacks %s", want[i]);
    }

    /* No memory limit, no partition or account: none of those options. */
    slurm_opts_t bare = {.job_prefix = "lab1"};
    r.memory_mb = 0;
    r.threads = 0;
    n = slurm_sbatch_argv(&bare, &r, "job.sh", argv, 64, buf, sizeof buf);
    cr_assert_gt(n, 0);
    for (int k = 0; k < n; k++) {
        cr_expect(strncmp(argv[k], "--mem", 5) && strncmp(argv[k], "--partition", 11) &&
                      strncmp(argv[k], "--account", 9),
                  "unexpected %s", argv[k]);
    }
    int named = 0, cpus = 0;
    for (int k = 0; k < n; k++) {
        named |= !strcmp(argv[k], "--job-name=lab1-42");
        cpus |= !strcmp(argv[k], "--cpus-per-task=1");
    }
    cr_expect(named, "the prefix names the job");
    cr_expect(cpus, "at least one CPU");

    /* Too little room is an error, not a cut line. */
    cr_expect_eq(slurm_sbatch_argv(&o, &r, "job.sh", argv, 5, buf, sizeof buf), -1);
    cr_expect_eq(slurm_sbatch_argv(&o, &r, "job.sh", argv, 64, buf, 40), -1);
}

Test(slurm, rest_job_carries_the_resources) {
    char *argv_run[] = {"nightshift", "train", NULL};
    executor_run_t r = run_for("/shared/state/runs/42", argv_run, 512);
    slurm_opts_t o = {.partition = "cpu", .account = "lab"};
    char *env[] = {"PATH=/opt/bin:/usr/bin",
                   "NIGHTSHIFT_TOKEN=secret",
                   "SLURM_JWT=secret",
                   "SLURM_CONF=/etc/x.conf",
                   "A=b=c",
                   "=nokey",
                   "noequals",
                   NULL};
    cJSON *j = slurm_rest_job(&o, &r, "#!/bin/sh\ntrue\n", env);
    cr_assert(j);
    cr_expect_str_eq(tu_jstr(j, "script"), "#!/bin/sh\ntrue\n");
    cJSON *job = cJSON_GetObjectItem(j, "job");
    cr_assert(cJSON_IsObject(job));
    cr_expect_str_eq(tu_jstr(job, "name"), "nightshift-42");
    cr_expect_str_eq(tu_jstr(job, "current_working_directory"), "/shared/state/runs/42");
    cr_expect_str_eq(tu_jstr(job, "standard_output"), "/shared/state/runs/42/train.log");
    cr_expect_str_eq(tu_jstr(job, "standard_error"), "/shared/state/runs/42/train.log");
    cr_expect_str_eq(tu_jstr(job, "open_mode"), "append");
    cr_expect_str_eq(tu_jstr(job, "partition"), "cpu");
    cr_expect_str_eq(tu_jstr(job, "account"), "lab");
    cr_expect_eq(tu_jnum(job, "cpus_per_task"), 2);
    cr_expect_eq(tu_jnum(job, "memory_per_node"), 512);
    cr_expect_eq(tu_jnum(job, "time_limit"), 7);
    cr_expect_eq(tu_jnum(job, "tasks"), 1);
    cJSON *e = cJSON_GetObjectItem(job, "environment");
    cr_expect_str_eq(tu_jstr(e, "PATH"), "/opt/bin:/usr/bin");
    cr_expect_str_eq(tu_jstr(e, "SLURM_CONF"), "/etc/x.conf");
    cr_expect_str_eq(tu_jstr(e, "A"), "b=c");
    cr_expect_null(cJSON_GetObjectItem(e, "NIGHTSHIFT_TOKEN"), "the daemon's token went to a job");
    cr_expect_null(cJSON_GetObjectItem(e, "SLURM_JWT"), "the JWT went to a job");
    cr_expect_eq(cJSON_GetArraySize(e), 3);
    cJSON_Delete(j);

    slurm_opts_t bare = {0};
    r.memory_mb = 0;
    char *none[] = {NULL};
    j = slurm_rest_job(&bare, &r, "x", none);
    cr_assert(j);
    job = cJSON_GetObjectItem(j, "job");
    cr_expect_null(cJSON_GetObjectItem(job, "memory_per_node"));
    cr_expect_null(cJSON_GetObjectItem(job, "partition"));
    cr_expect_null(cJSON_GetObjectItem(job, "account"));
    cr_expect(tu_jstr(cJSON_GetObjectItem(job, "environment"), "PATH"), "a PATH is always set");
    cJSON_Delete(j);
}

/* Migration 007: the executor and the Slurm job id of a running experiment,
 * and the list a restarted daemon re-attaches from. */
Test(slurm, store_records_executor_and_job) {
    store_t *s;
    char err[256];
    cr_assert_eq(store_open(tu_dir_path("ns.db"), &s, err, sizeof err), 0, "%s", err);
    store_new_experiment_t ne = {.name = "a",
                                 .spec_json = "{\"time_budget_s\":5}",
                                 .config_hash = "h1",
                                 .scope = {"default", "time", 5},
                                 .seed = 1,
                                 .source = "api"};
    int64_t a, b;
    cr_assert_eq(store_insert(s, &ne, &a, err, sizeof err), 0, "%s", err);
    ne.name = NULL;
    ne.config_hash = "h2";
    cr_assert_eq(store_insert(s, &ne, &b, err, sizeof err), 0, "%s", err);
    store_experiment_t x;
    cr_assert_eq(store_claim_next(s, &x, err, sizeof err), 1, "%s", err);
    store_experiment_clear(&x);
    cr_assert_eq(store_claim_next(s, &x, err, sizeof err), 1, "%s", err);
    store_experiment_clear(&x);
    cr_expect_eq(store_set_executor(s, a, "slurm", 0, err, sizeof err), 0, "%s", err);
    cr_expect_eq(store_set_executor(s, a, "slurm", 1234, err, sizeof err), 0, "%s", err);
    cr_expect_eq(store_set_executor(s, b, "local", 0, err, sizeof err), 0, "%s", err);
    cr_expect_eq(store_set_executor(s, 99, "slurm", 1, err, sizeof err), -1);

    store_job_t *jobs;
    size_t n;
    cr_assert_eq(store_running_jobs(s, &jobs, &n, err, sizeof err), 0, "%s", err);
    cr_assert_eq(n, 2);
    cr_expect_eq(jobs[0].e.id, a);
    cr_expect_str_eq(jobs[0].e.name, "a");
    cr_expect_str_eq(jobs[0].executor, "slurm");
    cr_expect_eq(jobs[0].slurm_job_id, 1234);
    cr_expect_str_eq(jobs[0].e.spec_json, "{\"time_budget_s\":5}");
    cr_expect_eq(jobs[1].e.id, b);
    cr_expect_null(jobs[1].e.name);
    cr_expect_str_eq(jobs[1].executor, "local");
    cr_expect_eq(jobs[1].slurm_job_id, 0);
    store_jobs_free(jobs, n);

    /* Finished experiments are not running any more. */
    cr_assert_eq(store_finish(s, a, STORE_SUCCEEDED, NULL, 0, 0, NULL, err, sizeof err), 0, "%s",
                 err);
    cr_assert_eq(store_running_jobs(s, &jobs, &n, err, sizeof err), 0, "%s", err);
    cr_expect_eq(n, 1);
    store_jobs_free(jobs, n);
    store_close(s);
}

/* ------------------------------------------------- the daemon, faked Slurm */

/* The executor in a real daemon, with sbatch, squeue and scancel replaced by
 * the shell stand-ins in tests/slurm/fake (jobs run at once on this machine)
 * and the stand-in worker (tests/bad_worker.c) as the worker command: what
 * the quick suite and the sanitizers can check without a cluster. */

static char *fake_dir; /* the fake Slurm's state: job ids, pids, exit codes */
static char *state;
static tu_server_t daemons[3];
static int n_daemons;

static void fake_setup(void) {
    tu_dir_init();
    unsetenv("NIGHTSHIFT_TOKEN");
    tu_bad_worker();
    cr_assert_eq(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK);
    fake_dir = tu_path("%s/fake", tu_dir());
    state = tu_path("%s/state", tu_dir());
    cr_assert_eq(mkdir(fake_dir, 0755), 0);
    char *path = tu_path("%s/tests/slurm/fake:%s", tu_src(), getenv("PATH"));
    setenv("PATH", path, 1);
    setenv("FAKE_SLURM_DIR", fake_dir, 1);
    free(path);
    char *corpus = tu_path("%s/corpus.jsonl", tu_dir());
    tu_prep_tiny(corpus, state, "tiny");
    free(corpus);
}

/* Stop the daemons, then every fake job still running (their sessions). */
static void fake_teardown(void) {
    for (int i = 0; i < n_daemons; i++) tu_server_release(&daemons[i]);
    char *next = tu_read(tu_dir_path("fake/next"));
    for (int n = 1; next && n <= atoi(next); n++) {
        char *pidfile = tu_path("%s/%d.pid", fake_dir, n);
        char *pid = tu_read(pidfile);
        if (pid && atoi(pid) > 0) kill(-atoi(pid), SIGKILL);
        free(pid);
        free(pidfile);
    }
    free(next);
    free(fake_dir);
    free(state);
    curl_global_cleanup();
    tu_dir_fini();
}

TestSuite(slurm_fake, .init = fake_setup, .fini = fake_teardown, .timeout = 90);

static tu_server_t *fake_daemon(void) {
    cr_assert(n_daemons < 3);
    tu_server_t *d = &daemons[n_daemons];
    char *cmd = tu_path("%s from-spec", tu_bad_worker());
    char *errlog = tu_path("%s/daemon-%d.err", tu_dir(), n_daemons);
    char *argv[] = {(char *)tu_bin(),
                    "serve",
                    "--dir",
                    state,
                    "--listen",
                    "127.0.0.1:0",
                    "--executor",
                    "slurm",
                    "--slots",
                    "2",
                    "--memory-mb",
                    "0",
                    "--slurm-poll",
                    "0.1",
                    "--worker-cmd",
                    cmd,
                    "--slurm-job-prefix",
                    "nsfake",
                    NULL};
    n_daemons++;
    tu_server_start(d, "daemon", argv, errlog, 20);
    free(cmd);
    free(errlog);
    return d;
}

static long fake_submit(const tu_server_t *d, const char *name, int seed, double budget) {
    char *spec = tu_path("{\"name\":\"%s\",\"dataset\":\"tiny\",\"seed\":%d,\"time_budget_s\":%g,"
                         "\"model\":{\"depth\":1,\"n_embd\":32,\"n_head\":2,\"seq_len\":32},"
                         "\"train\":{\"batch_size\":4,\"total_batch_tokens\":128},"
                         "\"resources\":{\"threads\":1,\"peak_gflops\":10}}",
                         name, seed, budget);
    cJSON *o = tu_http_json(d, "POST", "/v1/experiments", spec, 201);
    long id = (long)tu_jnum(o, "id");
    cJSON_Delete(o);
    free(spec);
    return id;
}

/* Poll until experiment id is no longer queued or running (or, with
 * slurm_state, until its slot shows that Slurm state); returns the
 * experiment or the slot's experiment object (caller deletes). */
static cJSON *fake_wait(const tu_server_t *d, long id, const char *slurm_state, double timeout_s) {
    double deadline = tu_now() + timeout_s;
    char path[64];
    snprintf(path, sizeof path, "/v1/experiments/%ld", id);
    for (;;) {
        if (slurm_state) {
            cJSON *st = tu_get_json(d, "/v1/status"), *slot;
            cJSON_ArrayForEach(slot, cJSON_GetObjectItem(st, "slots")) {
                cJSON *e = cJSON_GetObjectItem(slot, "experiment");
                if (cJSON_IsObject(e) && (long)tu_jnum(e, "id") == id &&
                    tu_jstr(e, "slurm_state") && !strcmp(tu_jstr(e, "slurm_state"), slurm_state)) {
                    cJSON *copy = cJSON_Duplicate(e, 1);
                    cJSON_Delete(st);
                    return copy;
                }
            }
            cJSON_Delete(st);
        } else {
            cJSON *e = tu_get_json(d, path);
            const char *s = tu_jstr(e, "status");
            if (s && strcmp(s, "queued") && strcmp(s, "running")) return e;
            cJSON_Delete(e);
        }
        if (tu_now() > deadline)
            tu_server_fail(d, "experiment %ld: no %s within %g s", id,
                           slurm_state ? slurm_state : "end", timeout_s);
        tu_sleep_ms(50);
    }
}

static void expect_status(const cJSON *e, const char *status, const char *reason_part) {
    const char *s = tu_jstr(e, "status"), *r = tu_jstr(e, "reason");
    cr_expect(s && !strcmp(s, status), "status %s (%s), want %s", s, r ? r : "no reason", status);
    if (reason_part)
        cr_expect(r && strstr(r, reason_part), "reason '%s' lacks '%s'", r, reason_part);
}

/* Runs end as their job ends: a result, the engine's exit codes, a cancel, a
 * refused submission; the store records the executor and the job ids. */
Test(slurm_fake, jobs_end_as_slurm_says) {
    tu_server_t *d = fake_daemon();
    long ok = fake_submit(d, "slow-ok", 1, 1), div = fake_submit(d, "diverge", 2, 1);
    cJSON *e = fake_wait(d, ok, NULL, 30);
    expect_status(e, "succeeded", NULL);
    cr_expect(cJSON_IsObject(cJSON_GetObjectItem(e, "result")));
    cJSON_Delete(e);
    e = fake_wait(d, div, NULL, 30);
    expect_status(e, "diverged", " FAILED: ");
    cJSON_Delete(e);

    long hang = fake_submit(d, "hang", 3, 60);
    cJSON_Delete(fake_wait(d, hang, "RUNNING", 30));
    char cancel[64];
    snprintf(cancel, sizeof cancel, "/v1/experiments/%ld/cancel", hang);
    cJSON_Delete(tu_http_json(d, "POST", cancel, NULL, 200));
    e = fake_wait(d, hang, NULL, 30);
    expect_status(e, "cancelled", "by the daemon");
    cJSON_Delete(e);

    tu_write(tu_dir_path("fake/refuse"), "Invalid partition name specified");
    long refused = fake_submit(d, "ok", 4, 1);
    e = fake_wait(d, refused, NULL, 30);
    expect_status(e, "failed", "not submitted: sbatch: sbatch: error: Invalid partition");
    cJSON_Delete(e);
    tu_server_stop(d, 20);

    sqlite3 *db = tu_db_open(tu_dir_path("state/nightshift.db"));
    cr_expect_eq(tu_sql_int(db, "SELECT count(*) FROM experiments WHERE executor = 'slurm'", 0), 4);
    cr_expect_eq(tu_sql_int(db, "SELECT slurm_job_id FROM experiments WHERE id = ?1", ok) > 0, 1);
    cr_expect_eq(tu_sql_int(db, "SELECT slurm_job_id FROM experiments WHERE id = ?1", refused), -1);
    cr_expect_eq(tu_sql_int(db, "SELECT count(*) FROM results", 0), 1);
    cr_expect_gt(tu_sql_int(db, "SELECT count(*) FROM metrics WHERE experiment_id = ?1", ok), 0,
                 "progress from the job's file");
    sqlite3_close(db);
}

/* A stopped daemon leaves its job running; the next one re-attaches to it
 * (no second sbatch). A killed daemon's job is re-attached too, and when the
 * store lacks its job id (the daemon died before sbatch answered) the job is
 * found by its name. */
Test(slurm_fake, restart_reattaches) {
    tu_server_t *d = fake_daemon();
    long id = fake_submit(d, "slow-ok", 1, 6);
    cJSON_Delete(fake_wait(d, id, "RUNNING", 30));
    tu_server_stop(d, 20);
    sqlite3 *db = tu_db_open(tu_dir_path("state/nightshift.db"));
    cr_expect_eq(tu_sql_int(db, "SELECT attempt FROM experiments WHERE id = ?1", id), 1);
    cr_expect(tu_sql_int(db, "SELECT status = 'running' FROM experiments WHERE id = ?1", id) == 1,
              "a detached run is still running");
    sqlite3_close(db);

    tu_server_t *d2 = fake_daemon();
    cJSON_Delete(fake_wait(d2, id, "RUNNING", 30));
    tu_server_kill(d2);
    sqlite3 *rw;
    cr_assert_eq(sqlite3_open(tu_dir_path("state/nightshift.db"), &rw), SQLITE_OK);
    sqlite3_busy_timeout(rw, 2000);
    cr_assert_eq(sqlite3_exec(rw, "UPDATE experiments SET slurm_job_id = NULL", NULL, NULL, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(rw));
    sqlite3_close(rw);

    tu_server_t *d3 = fake_daemon();
    cJSON *e = fake_wait(d3, id, NULL, 30);
    expect_status(e, "succeeded", NULL);
    cr_expect_eq((long)tu_jnum(e, "attempt"), 1);
    cJSON_Delete(e);
    tu_server_stop(d3, 20);
    char *next = tu_read(tu_dir_path("fake/next"));
    cr_expect_str_eq(next, "1\n", "submitted again");
    free(next);
    db = tu_db_open(tu_dir_path("state/nightshift.db"));
    cr_expect_eq(tu_sql_int(db, "SELECT count(*) FROM results", 0), 1);
    cr_expect_eq(tu_sql_int(db, "SELECT slurm_job_id FROM experiments WHERE id = ?1", id), 1,
                 "the job found by its name is recorded");
    sqlite3_close(db);
}
