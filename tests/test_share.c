/* test_share.c - each run's share of the machine (engine/share.h): a run
 * with CPU hogs on its CPU for most of it records a CPU share well under 1, the
 * hogs' CPU as other processes', and a slowdown above 1.3 that cost val_bpb;
 * the same run without them a slowdown within 10% of 1. The worker and the
 * hogs are pinned to one CPU and, where the system allows it, scheduled
 * round-robin at one real-time priority, so that the rest of a shared
 * machine's load does not reach them (the kernel's real-time throttling
 * still takes up to 5% of the CPU: within the 10%). Also the cost's
 * extrapolation from a loss curve, on curves whose answer is known. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/share.h"
#include "engine/util.h"
#include "tests/testutil.h"

static char *state;

static void setup(void) {
    tu_dir_init();
    unsetenv("NIGHTSHIFT_TOKEN");
    cr_assert_eq(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK);
    state = tu_path("%s/state", tu_dir());
    tu_prep_tiny(tu_dir_path("corpus.jsonl"), state, "tiny");
}

static void teardown(void) {
    curl_global_cleanup();
    free(state);
    tu_dir_fini();
}

TestSuite(share, .init = setup, .fini = teardown, .timeout = 90);

/* This test's process (and so every child) on one CPU, cpu or else CPU 0
 * (the two tests that hog take one each, so that they never meet when the
 * suite runs in parallel), round-robin if allowed. */
static bool pin(int cpu) {
    /* other tests run on the other CPUs: the quiet bench looks at this one */
    setenv("NIGHTSHIFT_QUIET_SCOPE", "cpus", 1);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) < 0) {
        CPU_ZERO(&set);
        CPU_SET(0, &set);
        cr_assert_eq(sched_setaffinity(0, sizeof set, &set), 0);
    }
    struct sched_param p = {.sched_priority = 1};
    if (sched_setscheduler(0, SCHED_RR, &p) == 0) return true;
    cr_log_info("no real-time scheduling (%s): the machine's load reaches the run, and its "
                "bench may not be quiet",
                strerror(errno));
    return false;
}

/* A child that spins on this process's CPU from delay_ms on, for at most 20 s. */
static pid_t hog(int delay_ms) {
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        alarm(20);
        usleep((useconds_t)delay_ms * 1000);
        for (volatile unsigned long i = 0;; i++) {
        }
    }
    return pid;
}

static double summary(const char *out, const char *key) {
    const char *block = strstr(out, "---\n");
    char pat[64];
    snprintf(pat, sizeof pat, "\n%s:", key);
    const char *at = block ? strstr(block, pat) : NULL;
    return at ? strtod(at + strlen(pat), NULL) : NAN;
}

/* The summary's text value of key ("" when there is none), into buf. */
static void summary_text(const char *out, const char *key, char *buf, size_t len) {
    const char *block = strstr(out, "---\n");
    char pat[64];
    snprintf(pat, sizeof pat, "\n%s:", key);
    const char *at = block ? strstr(block, pat) : NULL;
    if (at) at += strlen(pat) + strspn(at + strlen(pat), " ");
    snprintf(buf, len, "%.*s", at ? (int)strcspn(at, "\n") : 0, at ? at : "");
}

typedef struct {
    double cpu, others, steal, slowdown, cost, tok_s, quiet;
    char source[32]; /* quiet_source */
    char why[400];   /* the worker's line on a bench it did not cache, or "" */
} shares_t;

/* Whether a run's own counters show it alone on its CPUs: other processes
 * and the hypervisor took almost none of them. */
static bool alone_on_its_cpus(const shares_t *s) {
    return s->others <= 0.1 && s->steal <= 0.05;
}

/* A 3-second run of a tiny model (one thread, micro-batches of `batch` rows)
 * with hogs hogs on its CPU from delay_ms on. */
static void run(int batch, int hogs, int delay_ms, shares_t *s) {
    char *spec = tu_path("%s/spec.json", tu_dir());
    char *text = tu_path("{\"name\":\"share\",\"dataset\":\"tiny\",\"time_budget_s\":3,"
                         "\"model\":{\"depth\":2,\"n_embd\":32,\"n_head\":2,\"seq_len\":32},"
                         "\"train\":{\"batch_size\":%d,\"total_batch_tokens\":128},"
                         "\"resources\":{\"threads\":1,\"peak_gflops\":10}}",
                         batch);
    tu_write(spec, text);
    free(text);
    pid_t pids[4];
    for (int i = 0; i < hogs; i++) pids[i] = hog(delay_ms);
    tu_run_t r;
    char *argv[] = {(char *)tu_bin(), "train", "--dir", state, spec, NULL};
    tu_run(&r, argv, 60);
    for (int i = 0; i < hogs; i++) {
        kill(pids[i], SIGKILL);
        waitpid(pids[i], NULL, 0);
    }
    cr_assert_eq(r.exit_code, 0, "train: %s", r.err);
    *s = (shares_t){.cpu = summary(r.out, "cpu_share"),
                    .others = summary(r.out, "others_cpu_share"),
                    .steal = summary(r.out, "steal_share"),
                    .slowdown = summary(r.out, "slowdown"),
                    .cost = summary(r.out, "slowdown_cost_bpb"),
                    .tok_s = summary(r.out, "tokens_per_second"),
                    .quiet = summary(r.out, "quiet_tokens_per_second")};
    summary_text(r.out, "quiet_source", s->source, sizeof s->source);
    const char *why = strstr(r.err, "was not quiet while this shape was timed");
    snprintf(s->why, sizeof s->why, "%.*s", why ? (int)strcspn(why, "\n") : 0, why ? why : "");
    cr_log_info("%d hogs: cpu share %.3f, others %.3f, %.0f tok/s against %.0f quiet (%s): "
                "slowdown %.3f, cost %.4f bpb",
                hogs, s->cpu, s->others, s->tok_s, s->quiet, s->source, s->slowdown, s->cost);
    tu_run_free(&r);
    free(spec);
}

/* The cached bench of the first shape made three times too fast (as a bench
 * taken while a VM's host ran fast reads a later quiet run): a run without
 * hogs, whose counters show its CPU quiet, is not slowed, costs nothing and
 * says its reference is itself; one whose counters do not show it quiet
 * keeps the slowdown against the bench. */
static void misjudged_bench(const char *cache) {
    size_t len = 0;
    char *text = util_read_file(cache, 1 << 16, &len, NULL, 0);
    cJSON *doc = text ? cJSON_Parse(text) : NULL;
    free(text);
    cr_assert(doc, "the cache is JSON");
    /* {shape key: {"tokens_per_second": ..., ...}} (quiet.c) */
    const cJSON *e;
    int scaled = 0;
    cJSON_ArrayForEach(e, doc) {
        cJSON *t = cJSON_GetObjectItem(e, "tokens_per_second");
        if (cJSON_IsNumber(t)) {
            cJSON_SetNumberValue(t, 3 * t->valuedouble);
            scaled++;
        }
    }
    cr_assert_eq(scaled, 1, "one shape cached");
    char *out = cJSON_Print(doc);
    tu_write(cache, out);
    free(out);
    cJSON_Delete(doc);
    shares_t s;
    run(4, 0, 0, &s);
    if (s.cpu >= 0.9 && alone_on_its_cpus(&s) && s.steal >= 0) {
        cr_expect_str_eq(s.source, "quiet run");
        cr_expect_eq(s.slowdown, 1, "a quiet run against a misjudged bench: slowdown %.3f",
                     s.slowdown);
        cr_expect_eq(s.cost, 0, "cost %.4f", s.cost);
        cr_expect(fabs(s.quiet - s.tok_s) <= 0.01 * s.tok_s, "its reference %.0f, its speed %.0f",
                  s.quiet, s.tok_s);
    } else {
        cr_log_info("the run's CPU was not quiet (cpu %.3f, others %.3f, steal %.3f)", s.cpu,
                    s.others, s.steal);
        cr_expect_str_eq(s.source, "cached bench");
        cr_expect_gt(s.slowdown, 1.2, "against the misjudged bench: slowdown %.3f", s.slowdown);
    }
}

Test(share, hogs_on_the_workers_cpu_slow_it_and_are_recorded) {
    bool rt = pin(0);
    shares_t quiet, timing, hogged, busy_bench;
    /* A run without hogs against its own quiet steps: within 10% of 1. Not
     * against a bench: this VM's speed drifts within seconds, and a bench
     * taken at another moment read quiet runs at 0.69 to 1.29. */
    setenv("NIGHTSHIFT_QUIET_SCOPE", "steps", 1);
    run(4, 0, 0, &quiet);
    cr_expect_str_eq(quiet.source, "own quiet steps");
    /* The first run of a shape times it (quiet.h), cached when the bench
     * was quiet (steal or the kernel's own work can leave it not quiet). */
    setenv("NIGHTSHIFT_QUIET_SCOPE", "cpus", 1);
    char *cache = tu_path("%s/quiet_bench.json", state);
    run(4, 0, 0, &timing);
    const bool timed = !strcmp(timing.source, "bench");
    run(4, 2, 600, &hogged);
    /* another shape, hogged from the start: its bench is not quiet */
    run(2, 2, 0, &busy_bench);
    if (timed) {
        cr_expect_str_eq(hogged.source, "cached bench", "the second run finds the bench cached");
    } else {
        /* the machine's state, not the code: the bench path is the quiet
         * suite's to check then (a_bench_leaves_the_run_as_it_was_made) */
        cr_log_info("the first run's bench was not quiet (%s%s): the cached bench is not checked",
                    timing.why, rt ? "" : "; no real-time scheduling");
    }
    cr_expect(strcmp(busy_bench.source, "bench") && strcmp(busy_bench.source, "cached bench"),
              "a bench among hogs is no reference: %s", busy_bench.source);
    cr_expect_gt(busy_bench.slowdown, 1.3, "hogs from the start: slowdown %.3f",
                 busy_bench.slowdown);
    size_t len = 0;
    char *text = util_read_file(cache, 1 << 16, &len, NULL, 0);
    int entries = 0;
    for (const char *p = text; p && (p = strstr(p, "tokens_per_second")); p++) entries++;
    /* the first shape's (from the timing run, or the hogged one's own bench
     * before its hogs), never the shape timed among hogs */
    cr_expect(timed ? entries == 1 : entries <= 1, "only a quiet bench is cached: %s",
              text ? text : "none");
    free(text);
    if (timed) misjudged_bench(cache);
    free(cache);
    if (alone_on_its_cpus(&quiet)) {
        cr_expect(fabs(quiet.slowdown - 1) < 0.1, "quiet: slowdown %.3f", quiet.slowdown);
        cr_expect_gt(quiet.cpu, 0.9, "quiet: cpu share %.3f", quiet.cpu);
    } else {
        /* the machine's state, not the code: another process shared the
         * pinned CPU (make asan runs another test beside this one; one such
         * run had 0.555 of its CPU), and the run recorded it; the hogged
         * runs below are the check */
        cr_log_info("the run without hogs was not alone on its CPU (cpu %.3f, others %.3f, "
                    "steal %.3f, slowdown %.3f): its slowdown is not checked",
                    quiet.cpu, quiet.others, quiet.steal, quiet.slowdown);
    }
    cr_expect_gt(hogged.slowdown, 1.3, "hogs: slowdown %.3f", hogged.slowdown);
    cr_expect_lt(hogged.cpu, 0.75, "hogs: cpu share %.3f", hogged.cpu);
    cr_expect_gt(hogged.others, 0.25, "hogs: others' cpu %.3f", hogged.others);
    cr_expect_gt(hogged.quiet, 0, "hogs: the cached bench is the reference");
    cr_expect_gt(hogged.cost, 0, "hogs: a time budget's slowdown costs val_bpb");
    cr_expect_lt(hogged.cost, 1, "hogs: cost %.4f", hogged.cost);
}

#define SPEC                                                                                       \
    "{\"name\":\"%s\",\"dataset\":\"tiny\",\"seed\":%d,\"time_budget_s\":3,"                       \
    "\"model\":{\"depth\":2,\"n_embd\":64,\"n_head\":2,\"seq_len\":64},"                           \
    "\"train\":{\"batch_size\":8,\"total_batch_tokens\":512},"                                     \
    "\"resources\":{\"threads\":1,\"peak_gflops\":10}}"

static cJSON *wait_status(tu_server_t *d, long id, const char *want_live, double timeout_s) {
    char path[64];
    snprintf(path, sizeof path, "/v1/experiments/%ld", id);
    for (double deadline = tu_now() + timeout_s;; tu_sleep_ms(20)) {
        cJSON *e = tu_get_json(d, path);
        const char *s = tu_jstr(e, "status");
        if (s && (want_live ? !strcmp(s, want_live) : strcmp(s, "queued") && strcmp(s, "running")))
            return e;
        cJSON_Delete(e);
        if (tu_now() > deadline) tu_server_fail(d, "experiment %ld: not there in time", id);
    }
}

static long submit(tu_server_t *d, const char *name, int seed) {
    char *spec = tu_path(SPEC, name, seed);
    cJSON *o = tu_http_json(d, "POST", "/v1/experiments", spec, 201);
    long id = (long)tu_jnum(o, "id");
    cJSON_Delete(o);
    free(spec);
    return id;
}

/* Through the daemon (its slot on the one CPU of the daemon's mask; steps
 * of a few milliseconds, so that the daemon's handling of each step's line,
 * on the same CPU, takes little of them): the
 * result records the share, `show` and `ls` flag the slowed run and not the
 * quiet one, and the report names it. */
Test(share, the_daemon_records_shows_and_reports_a_slowed_run) {
    pin(1);
    /* the runs' own quiet steps: this test is about what the daemon does with
     * a slowed run, and a cached bench on a VM whose speed drifts can flag
     * the quiet run too (the bench is the test above's) */
    setenv("NIGHTSHIFT_QUIET_SCOPE", "steps", 1);
    tu_server_t d;
    tu_daemon_start(&d, state, NULL, 20);
    long quiet = submit(&d, "quiet", 1);
    cJSON *e = wait_status(&d, quiet, NULL, 40);
    cr_assert_str_eq(tu_jstr(e, "status"), "succeeded");
    const char *first = tu_jstr(cJSON_GetObjectItem(e, "result"), "quiet_source");
    cr_expect(first && !strcmp(first, "own quiet steps"), "quiet_source %s",
              first ? first : "none");
    double quiet_slowdown = tu_jnum(cJSON_GetObjectItem(e, "result"), "slowdown");
    cJSON_Delete(e);
    long slowed = submit(&d, "slowed", 2);
    cJSON_Delete(wait_status(&d, slowed, "running", 20));
    pid_t pids[2] = {hog(600), hog(600)};
    e = wait_status(&d, slowed, NULL, 40);
    for (int i = 0; i < 2; i++) {
        kill(pids[i], SIGKILL);
        waitpid(pids[i], NULL, 0);
    }
    cr_assert_str_eq(tu_jstr(e, "status"), "succeeded");
    const cJSON *res = cJSON_GetObjectItem(e, "result");
    cr_log_info("daemon: quiet slowdown %.3f, slowed %.3f (cpu share %.3f, cost %.4f)",
                quiet_slowdown, tu_jnum(res, "slowdown"), tu_jnum(res, "cpu_share"),
                tu_jnum(res, "slowdown_cost_bpb"));
    /* within 10% of 1 is the CLI test's (with its tries); here: not flagged */
    cr_expect_lt(quiet_slowdown, SHARE_SLOWED, "quiet: slowdown %.3f", quiet_slowdown);
    cr_expect_gt(tu_jnum(res, "slowdown"), 1.3);
    cr_expect_gt(tu_jnum(res, "others_cpu_share"), 0.2);
    cJSON_Delete(e);

    char url[64], id[24];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", d.port);
    snprintf(id, sizeof id, "%ld", slowed);
    tu_run_t r;
    tu_run_bin(&r, 30, "show", "--url", url, id, NULL);
    cr_expect(strstr(r.out, "slowed by its neighbours"), "%s", r.out);
    tu_run_free(&r);
    snprintf(id, sizeof id, "%ld", quiet);
    tu_run_bin(&r, 30, "show", "--url", url, id, NULL);
    cr_expect(strstr(r.out, "slowdown") && !strstr(r.out, "slowed by"), "%s", r.out);
    tu_run_free(&r);
    tu_run_bin(&r, 30, "ls", "--url", url, NULL);
    cr_expect_eq(r.exit_code, 0, "%s", r.err);
    char *line = strstr(r.out, "slowed ");
    cr_expect(strstr(r.out, "~ slowed by its neighbours"), "%s", r.out);
    const char *nl = line ? line : r.out;
    while (nl > r.out && nl[-1] != '\n') nl--;
    cr_expect(line && memchr(nl, '~', (size_t)(line - nl)), "ls marks the slowed run: %s", r.out);
    tu_run_free(&r);

    cJSON *rep = tu_get_json(&d, "/v1/report?dataset=tiny&budget=time:3");
    cr_expect_eq(tu_jnum(rep, "slowed_total"), 1);
    cr_expect_eq(tu_jnum(cJSON_GetArrayItem(cJSON_GetObjectItem(rep, "slowed"), 0), "id"), slowed);
    cJSON_Delete(rep);
    tu_reply_t md;
    tu_http(&d, "GET", "/v1/report?dataset=tiny&budget=time:3&format=md", NULL, 0, NULL, &md);
    char named[32];
    snprintf(named, sizeof named, "| #%ld | slowed |", slowed);
    cr_expect(strstr(md.body, "## Slowed by the machine") && strstr(md.body, named), "%s", md.body);
    tu_reply_free(&md);
    tu_server_stop(&d, 20);
    tu_server_release(&d);
}

/* On loss = a - b ln(tokens) the cost of a slowdown s is b ln(s) in nats,
 * scaled to val_bpb by the fitted final loss; a flat or rising curve and a
 * slowdown of at most 1 cost nothing. */
Test(share, cost_extrapolates_the_loss_curve) {
    enum { N = 40 };
    double tokens[N], loss[N];
    for (int i = 0; i < N; i++) {
        tokens[i] = 128.0 * (i + 1);
        loss[i] = 8 - 0.5 * log(tokens[i]);
    }
    double end = loss[N - 1];
    cr_expect_float_eq(share_slowdown_cost_bpb(tokens, loss, N, 2, 1.5), 1.5 * 0.5 * log(2) / end,
                       1e-9);
    cr_expect_eq(share_slowdown_cost_bpb(tokens, loss, N, 1, 1.5), 0);
    cr_expect_eq(share_slowdown_cost_bpb(tokens, loss, N, 0.8, 1.5), 0);
    for (int i = 0; i < N; i++) loss[i] = 3;
    cr_expect_eq(share_slowdown_cost_bpb(tokens, loss, N, 2, 1.5), 0);
    for (int i = 0; i < N; i++) loss[i] = 2 + 0.1 * log(tokens[i]);
    cr_expect_eq(share_slowdown_cost_bpb(tokens, loss, N, 2, 1.5), 0);
    cr_expect_eq(share_slowdown_cost_bpb(tokens, loss, 3, 2, 1.5), 0, "too short a curve");
}
