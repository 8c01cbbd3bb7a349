/* threads.c - the engine's threads: count, BLAS, floating-point mode (see
 * threads.h), and the OpenMP wait policy (cli.h). */
#include "engine/threads.h"

#include <omp.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "engine/cli.h"

/* OpenBLAS's own controls; not in the standard cblas.h of every vendor. */
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);

void threads_ftz(void) {
#if defined(__x86_64__) || defined(__i386__)
    _mm_setcsr(_mm_getcsr() | 0x8040); /* FTZ (bit 15) and DAZ (bit 6) */
#elif defined(__aarch64__)
    unsigned long fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    __asm__ volatile("msr fpcr, %0" : : "r"(fpcr | (1ul << 24))); /* FZ */
#endif
}

int threads_ftz_on(void) {
#if defined(__x86_64__) || defined(__i386__)
    return (_mm_getcsr() & 0x8040) == 0x8040;
#elif defined(__aarch64__)
    unsigned long fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    return (fpcr >> 24) & 1;
#else
    return 0;
#endif
}

/* The first count of OMP_NUM_THREADS (it may be a list, "4,2"); 0 when it
 * is unset or not a positive number. */
static int env_threads(void) {
    const char *v = getenv("OMP_NUM_THREADS");
    if (!v) return 0;
    char *end;
    long n = strtol(v, &end, 10);
    return end != v && n > 0 && n <= 4096 ? (int)n : 0;
}

int threads_set(int n) {
    /* Unset, the count is the environment's: the daemon exports a slot's
     * thread count (and sizes the worker's memory for it) as
     * OMP_NUM_THREADS. Otherwise "all CPUs" means the ones this process may
     * run on: a slot pins its worker to a CPU set, and more threads than
     * that only contend. */
    cpu_set_t set;
    if (n <= 0) n = env_threads();
    if (n <= 0 && sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
    if (n <= 0) n = 1;
    /* One pool: OpenBLAS's OpenMP build runs on the engine's OpenMP team. */
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
    /* The calling thread first, so threads created later inherit the mode;
     * then every thread of a team that may already exist. */
    threads_ftz();
#pragma omp parallel num_threads(n)
    threads_ftz();
    return openblas_get_num_threads();
}

void threads_blas_single(void) {
    if (omp_get_num_threads() == 1) omp_set_num_threads(1);
}

void threads_passive_wait(char **argv) {
    if (getenv("OMP_WAIT_POLICY")) return;
    if (setenv("OMP_WAIT_POLICY", "PASSIVE", 1) != 0) return;
    if (!getenv("GOMP_SPINCOUNT")) setenv("GOMP_SPINCOUNT", THREADS_SPIN_COUNT, 1);
    execv("/proc/self/exe", argv);
    /* exec failed: carry on with the default policy */
}
