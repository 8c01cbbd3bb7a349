/* prof.h - the engine's phase timers: where a training step's wall time goes.
 *
 * Kernels charge their wall-clock time to one phase (attention, matrix
 * products, optimiser); whatever a step spends outside them is element-wise
 * work. The counters are process-wide and only ever touched from the thread
 * that drives the step (never from inside a parallel region), so they need no
 * locking. `nightshift bench` reads them; a run that never reads them pays two
 * clock reads per kernel call. */
#ifndef NIGHTSHIFT_PROF_H
#define NIGHTSHIFT_PROF_H

#include "engine/util.h"

typedef enum { PROF_ATTENTION, PROF_MATMUL, PROF_OPTIM, PROF_PHASES } prof_phase;

/* Seconds charged to each phase since the last prof_reset. */
extern double prof_seconds[PROF_PHASES];

void prof_reset(void);

/* Nested charges are not double-counted: only the outermost phase counts. */
extern int prof_depth;

static inline double prof_begin(void) {
    return prof_depth++ == 0 ? util_now() : 0.0;
}

static inline void prof_end(prof_phase p, double t0) {
    if (--prof_depth == 0) prof_seconds[p] += util_now() - t0;
}

#endif
