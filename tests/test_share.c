/* test_share.c - each run's share of the machine (engine/share.h): a run
 * with CPU hogs on its CPU for most of it records a CPU share well under 1, the
 * hogs' CPU as other processes', and a slowdown above 1.3 that cost val_bpb;
 * the same run without them a slowdown within 10% of 1. The worker and the
 * hogs are pinned to CPU 0 and, where the system allows it, scheduled
 * round-robin at one real-time priority, so that the rest of a shared
 * machine's load does not reach them (the kernel's real-time throttling
 * still takes up to 5% of the CPU: within the 10%). Also the cost's
 * extrapolation from a loss curve, on curves whose answer is known. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/share.h"
#include "tests/testutil.h"

static char *state;

static void setup(void) {
    tu_dir_init();
    state = tu_path("%s/state", tu_dir());
    tu_prep_tiny(tu_dir_path("corpus.jsonl"), state, "tiny");
}

static void teardown(void) {
    free(state);
    tu_dir_fini();
}

TestSuite(share, .init = setup, .fini = teardown, .timeout = 90);

/* This test's process (and so every child) on CPU 0, round-robin if allowed. */
static void pin(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    cr_assert_eq(sched_setaffinity(0, sizeof set, &set), 0);
    struct sched_param p = {.sched_priority = 1};
    if (sched_setscheduler(0, SCHED_RR, &p) < 0)
        cr_log_warn("no real-time scheduling (%s): the machine's load reaches the run",
                    strerror(errno));
}

/* A child that spins on CPU 0 from delay_ms on, for at most 20 s. */
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

typedef struct {
    double cpu, others, slowdown, cost, tok_s, quiet;
} shares_t;

/* A 3-second run of a tiny model (one thread) with hogs hogs on its CPU
 * from 0.6 s on. */
static void run(int hogs, shares_t *s) {
    char *spec = tu_path("%s/spec.json", tu_dir());
    tu_write(spec, "{\"name\":\"share\",\"dataset\":\"tiny\",\"time_budget_s\":3,"
                   "\"model\":{\"depth\":2,\"n_embd\":32,\"n_head\":2,\"seq_len\":32},"
                   "\"train\":{\"batch_size\":4,\"total_batch_tokens\":128},"
                   "\"resources\":{\"threads\":1,\"peak_gflops\":10}}");
    pid_t pids[4];
    for (int i = 0; i < hogs; i++) pids[i] = hog(600);
    tu_run_t r;
    char *argv[] = {(char *)tu_bin(), "train", "--dir", state, spec, NULL};
    tu_run(&r, argv, 60);
    for (int i = 0; i < hogs; i++) {
        kill(pids[i], SIGKILL);
        waitpid(pids[i], NULL, 0);
    }
    cr_assert_eq(r.exit_code, 0, "train: %s", r.err);
    *s = (shares_t){summary(r.out, "cpu_share"),         summary(r.out, "others_cpu_share"),
                    summary(r.out, "slowdown"),          summary(r.out, "slowdown_cost_bpb"),
                    summary(r.out, "tokens_per_second"), summary(r.out, "quiet_tokens_per_second")};
    cr_log_info("%d hogs: cpu share %.3f, others %.3f, %.0f tok/s against %.0f quiet: slowdown "
                "%.3f, cost %.4f bpb",
                hogs, s->cpu, s->others, s->tok_s, s->quiet, s->slowdown, s->cost);
    tu_run_free(&r);
    free(spec);
}

Test(share, hogs_on_the_workers_cpu_slow_it_and_are_recorded) {
    pin();
    shares_t quiet, hogged;
    run(0, &quiet);
    run(2, &hogged);
    cr_expect(fabs(quiet.slowdown - 1) < 0.1, "quiet: slowdown %.3f", quiet.slowdown);
    cr_expect_gt(quiet.cpu, 0.9, "quiet: cpu share %.3f", quiet.cpu);
    cr_expect_gt(hogged.slowdown, 1.3, "hogs: slowdown %.3f", hogged.slowdown);
    cr_expect_lt(hogged.cpu, 0.75, "hogs: cpu share %.3f", hogged.cpu);
    cr_expect_gt(hogged.others, 0.25, "hogs: others' cpu %.3f", hogged.others);
    cr_expect_gt(hogged.quiet, 0, "hogs: the quiet steps before them give a reference");
    cr_expect_gt(hogged.cost, 0, "hogs: a time budget's slowdown costs val_bpb");
    cr_expect_lt(hogged.cost, 1, "hogs: cost %.4f", hogged.cost);
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
