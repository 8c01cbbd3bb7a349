/* threads.h - the engine's threads: their count, how BLAS runs on them, and
 * their floating-point mode. threads_passive_wait is declared in cli.h
 * (main.c calls it before an engine command). */
#ifndef NIGHTSHIFT_THREADS_H
#define NIGHTSHIFT_THREADS_H

/* Set the thread count of BLAS and of the engine's OpenMP loops (one team:
 * OpenBLAS's OpenMP build); n <= 0 means OMP_NUM_THREADS's count when it
 * is set (the daemon sets it to a slot's count), else every CPU this
 * process may run on (its affinity mask). Returns the count set.
 *
 * Every thread of the team, and the calling one, runs with flush-to-zero
 * and denormals-are-zero (threads_ftz): a denormal operand costs a
 * microcode assist of ~100 cycles on x86, and the attention's backward on
 * degenerate scores ran 8x slower on them. */
int threads_set(int n);

/* Inside a parallel region that may be a team of one (an `if` clause, a
 * num_threads of 1): hold the BLAS calls the calling thread makes in it to
 * one thread. OpenBLAS's OpenMP build splits a call made outside an active
 * region over omp_get_max_threads() threads, and some of its kernels
 * (Haswell's, Zen's) round a row differently depending on where the split
 * falls, so a region that runs one thread in one run and several in another
 * would not give the same bits. The setting ends with the region. */
void threads_blas_single(void);

/* Flush-to-zero and denormals-are-zero on the calling thread (x86's MXCSR,
 * AArch64's FPCR.FZ; nothing elsewhere). Threads it creates afterwards
 * inherit the mode. */
void threads_ftz(void);

/* Whether the calling thread flushes denormals (both modes on x86). */
int threads_ftz_on(void);

#endif
