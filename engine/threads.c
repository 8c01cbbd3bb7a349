/* threads.c - the engine's thread count and OpenMP wait policy (see threads.h). */
#include "engine/threads.h"

#include <omp.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine/cli.h"

/* OpenBLAS's own controls; not in the standard cblas.h of every vendor. */
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);

int threads_set(int n) {
    /* "All CPUs" means the ones this process may run on: a daemon slot pins
     * its worker to a CPU set, and more threads than that only contend. */
    cpu_set_t set;
    if (n <= 0 && sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
    if (n <= 0) n = 1;
    /* One pool: OpenBLAS's OpenMP build runs on the engine's OpenMP team. */
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
    return openblas_get_num_threads();
}

void threads_passive_wait(char **argv) {
    if (getenv("OMP_WAIT_POLICY")) return;
    if (setenv("OMP_WAIT_POLICY", "PASSIVE", 1) != 0) return;
    execv("/proc/self/exe", argv);
    /* exec failed: carry on with the default policy */
}
