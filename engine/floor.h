/* floor.h - the engine's address-space floor: what a run's threads map
 * before the run allocates anything of its own. Each thread of the OpenMP
 * team gets OpenBLAS's buffer on its first BLAS call (128 MiB of address
 * space in Debian's build), a stack, and, on its first allocation, a malloc
 * arena (up to 128 MiB reserved): about 320 MiB a thread beside the
 * libraries, where the run itself may need 20 MiB. A worker's memory limit is
 * a limit on address space (RLIMIT_AS), so it must leave room for this: the
 * daemon measures it once at start (`nightshift floor`) and admission adds
 * it to a run's own needs.
 *
 * Under a limit too low for it, OpenBLAS retries its buffer's mmap forever:
 * the run would hang until its deadline. floor_reserve maps everything at
 * the start instead, under a watchdog that ends the process as out of memory
 * (PROTO_EXIT_OOM) within seconds. */
#ifndef NIGHTSHIFT_FLOOR_H
#define NIGHTSHIFT_FLOOR_H

#include <stddef.h>

#define FLOOR_WATCHDOG_S 5 /* seconds for every thread to map its share */

/* Have every thread of a team of n (as threads_set made it) map now what it
 * maps on its first BLAS call and its first allocation. Call it right after
 * threads_set, before the run's own allocations. When that has not finished
 * within FLOOR_WATCHDOG_S (the address-space limit leaves no room for it),
 * the process says so on stderr and exits PROTO_EXIT_OOM; it does not
 * return then. */
void floor_reserve(int n);

/* floor_reserve(threads) in this process (a team as threads_set made it),
 * then its peak address space in bytes (VmPeak; -1 when /proc says none),
 * and its current size and resident memory when size and rss are given. In a
 * fresh process that has allocated little, this is the floor. */
double floor_measure(int threads, double *size, double *rss);

/* The floor as a worker has it: `exe floor --threads threads` run with env
 * (NULL: this process's environment), OMP_NUM_THREADS and
 * OPENBLAS_NUM_THREADS set to threads as a worker's are; its VmPeak in
 * bytes, or -1 with err. The daemon (at start) and `nightshift cost` both
 * measure it so, so they count one figure. */
double floor_probe(const char *exe, int threads, char *const env[], char *err, size_t errlen);

/* `nightshift floor [--threads N]`: threads_set(N) and floor_reserve, then
 * {"threads": N, "vm_peak": B, "vm_size": B, "rss": B} (bytes, from
 * /proc/self/status) on stdout. */
int floor_main(int argc, char **argv);

#endif
