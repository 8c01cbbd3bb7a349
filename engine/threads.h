/* threads.h - the engine's thread count: BLAS and the OpenMP loops share one
 * pool (OpenBLAS's OpenMP build). threads_passive_wait is declared in cli.h
 * (main.c calls it before an engine command). */
#ifndef NIGHTSHIFT_THREADS_H
#define NIGHTSHIFT_THREADS_H

/* Set the thread count of BLAS and of the engine's OpenMP loops (one pool:
 * OpenBLAS's OpenMP build); n <= 0 means every CPU this process may run on
 * (its affinity mask). Returns the count set. */
int threads_set(int n);

#endif
