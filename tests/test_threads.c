/* test_threads.c - the engine's threads: flush-to-zero and
 * denormals-are-zero in every thread of the team (threads.h; suite threads),
 * how an engine command's team waits between regions (cli.h; the binary),
 * and the kernel path an engine command runs (suite isa, the binary):
 * NIGHTSHIFT_ISA forces it, and one the CPU lacks is refused with a message
 * rather than a SIGILL. */
#include <criterion/criterion.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "engine/attn.h"
#include "engine/cli.h"
#include "engine/gemm.h"
#include "engine/threads.h"
#include "engine/util.h"
#include "tests/testutil.h"

/* MXCSR (or FPCR) of each thread of a team of n, read inside the region. */
static void expect_team_flushes(int n, const char *when) {
    int on[64] = {0}, team = 0;
#pragma omp parallel num_threads(n)
    {
        on[omp_get_thread_num()] = threads_ftz_on();
#pragma omp single
        team = omp_get_num_threads();
    }
    cr_assert_eq(team, n, "%s: a team of %d, not %d", when, team, n);
    for (int t = 0; t < n; t++) cr_expect(on[t], "%s: thread %d does not flush denormals", when, t);
}

Test(threads, every_engine_thread_flushes_denormals) {
#if !defined(__x86_64__) && !defined(__aarch64__)
    cr_skip_test("no flush-to-zero control on this architecture");
#endif
    threads_set(2);
    cr_expect(threads_ftz_on(), "the calling thread");
    expect_team_flushes(2, "after threads_set(2)");
    /* threads the runtime creates later inherit the mode */
    expect_team_flushes(4, "a larger team");
    /* and keep it through the kernels (BLAS's too: it runs on this team) */
    float q[64 * 16], y[64 * 16], lse[64], work[1 << 16];
    for (int i = 0; i < 64 * 16; i++) q[i] = (float)(i % 7) * 0.1f;
    cr_assert(attn_work_floats(16, 64, 2) <= sizeof work / sizeof *work);
    attn_forward(y, lse, q, q, q, 1, 64, 1, 1, 16, 64, work, 2);
    expect_team_flushes(2, "after the attention");
    /* a denormal operand reads as zero, a denormal result is flushed */
    volatile float tiny = 1e-39f, one = 1.0f, half = 0.5f;
    cr_expect_eq(tiny * one, 0.0f);
    volatile float small = 1e-38f;
    cr_expect_eq(small * half * half, 0.0f);
}

/* A one-layer spec for `nightshift bench` on `threads` threads, written to a
 * temporary file named after `what` (malloc'd path; the caller unlinks it). */
static char *tiny_bench_spec(const char *what, int threads) {
    char *spec = tu_path("%s/nightshift-%s-%d.json", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
                         what, (int)getpid());
    char *text =
        tu_path("{\"model\":{\"depth\":1,\"n_embd\":32,\"n_head\":2,\"seq_len\":16,"
                "\"vocab_size\":64},\"train\":{\"batch_size\":2,\"total_batch_tokens\":32},"
                "\"resources\":{\"threads\":%d}}",
                threads);
    tu_write(spec, text);
    free(text);
    return spec;
}

/* NIGHTSHIFT_ISA names a path; one that is not a path, or that this CPU
 * cannot run, stops an engine command with exit 2 and says why. */
Test(isa, forced_path_is_checked, .timeout = 60) {
    char *spec = tiny_bench_spec("isa", 1);
    tu_run_t r;
    setenv("NIGHTSHIFT_ISA", "avx1024", 1);
    tu_run_bin(&r, 30, "bench", "--spec", spec, "--steps", "1", "--warmup", "0", NULL);
    cr_expect_eq(r.exit_code, 2);
    cr_expect(strstr(r.err, "NIGHTSHIFT_ISA=avx1024: not a kernel path"), "%s", r.err);
    tu_run_free(&r);
    const char *supported = gemm_isa_supported();
    for (int i = 0; i < 3; i++) {
        setenv("NIGHTSHIFT_ISA", tu_isas[i], 1);
        tu_run_bin(&r, 30, "bench", "--spec", spec, "--steps", "1", "--warmup", "0", NULL);
        if (strstr(supported, tu_isas[i])) {
            /* the path that ran is the one forced */
            cr_expect_eq(r.exit_code, 0, "%s: %s", tu_isas[i], r.err);
            char want[32];
            snprintf(want, sizeof want, "isa: %s\n", tu_isas[i]);
            cr_expect(strstr(r.out, want), "%s: %s", tu_isas[i], r.out);
        } else {
            cr_log_info("this CPU cannot run %s: checking the refusal", tu_isas[i]);
            cr_expect_eq(r.exit_code, 2, "%s: exit %d (signal %d)", tu_isas[i], r.exit_code,
                         r.signal);
            cr_expect(strstr(r.err, "this CPU cannot run"), "%s", r.err);
        }
        tu_run_free(&r);
    }
    unsetenv("NIGHTSHIFT_ISA");
    unlink(spec);
    free(spec);
}

/* An engine command's team waits briefly, then sleeps (cli.h,
 * threads_passive_wait): with OMP_WAIT_POLICY and GOMP_SPINCOUNT unset the
 * command runs with PASSIVE and THREADS_SPIN_COUNT; a count the caller set
 * stays, and so does a policy the caller set (and no count is added). */
Test(threads, engine_commands_spin_briefly_then_sleep, .timeout = 60) {
    char *spec = tiny_bench_spec("spin", 2);
    static const struct {
        const char *policy, *count, *want_policy, *want_count;
    } cases[] = {
        {NULL, NULL, "PASSIVE", THREADS_SPIN_COUNT},
        {NULL, "0", "PASSIVE", "0"},
        {"ACTIVE", NULL, "ACTIVE", "(unset)"},
        {"PASSIVE", NULL, "PASSIVE", "(unset)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cases[i].policy ? setenv("OMP_WAIT_POLICY", cases[i].policy, 1)
                        : unsetenv("OMP_WAIT_POLICY");
        cases[i].count ? setenv("GOMP_SPINCOUNT", cases[i].count, 1) : unsetenv("GOMP_SPINCOUNT");
        tu_run_t r;
        tu_run_bin(&r, 30, "bench", "--spec", spec, "--steps", "1", "--warmup", "0", NULL);
        cr_expect_eq(r.exit_code, 0, "case %zu: %s", i, r.err);
        char want[128];
        snprintf(want, sizeof want, "omp_wait_policy: %s\ngomp_spincount: %s\n",
                 cases[i].want_policy, cases[i].want_count);
        cr_expect(strstr(r.out, want), "case %zu: expected\n%s\nin\n%s", i, want, r.out);
        tu_run_free(&r);
    }
    unsetenv("OMP_WAIT_POLICY");
    unsetenv("GOMP_SPINCOUNT");
    unlink(spec);
    free(spec);
}

/* kB of AnonHugePages in the mapping of /proc/self/smaps holding p; -1 when
 * no mapping holds it. */
static long huge_kb_at(const void *p) {
    FILE *f = fopen("/proc/self/smaps", "r");
    cr_assert(f);
    char line[512];
    long kb = -1;
    int inside = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
            continue;
        }
        if (inside && sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) break;
    }
    fclose(f);
    return kb;
}

static long minor_faults(void) {
    struct rusage ru;
    cr_assert_eq(getrusage(RUSAGE_SELF, &ru), 0);
    return ru.ru_minflt;
}

/* The arrays a step streams through (util_calloc_huge) come zeroed every
 * time, aligned to whole 2 MB pages, already faulted in (a step's first
 * touch costs no page fault), and in huge pages where the kernel offers
 * them to a process that asks (THP "always" or "madvise"). */
Test(memory, large_arrays_are_zeroed_in_huge_pages) {
    const size_t bytes = 5 * UTIL_HUGE_MIN + 12;
    for (int round = 0; round < 2; round++) { /* the second may reuse the first's memory */
        unsigned char *p = util_calloc_huge(bytes);
        cr_assert(p);
        cr_expect_eq((uintptr_t)p % UTIL_HUGE_MIN, 0, "%p", (void *)p);
        const long faults = minor_faults();
        size_t nonzero = 0;
        for (size_t i = 0; i < bytes; i++) nonzero += p[i] != 0;
        cr_expect_leq(minor_faults() - faults, 2, "reading it faulted %ld times",
                      minor_faults() - faults);
        cr_expect_eq(nonzero, 0, "round %d: %zu bytes not zero", round, nonzero);
        char mode[128] = "";
        FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
        if (f) {
            if (!fgets(mode, sizeof mode, f)) mode[0] = 0;
            fclose(f);
        }
        if (strstr(mode, "[always]") || strstr(mode, "[madvise]"))
            cr_expect_gt(huge_kb_at(p), 0, "THP is %s but no huge page backs the array", mode);
        memset(p, 0xab, bytes);
        free(p);
    }
    unsigned char *small = util_calloc_huge(100);
    cr_assert(small);
    for (int i = 0; i < 100; i++) cr_expect_eq(small[i], 0);
    free(small);
}
