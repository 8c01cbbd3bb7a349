/* quiet.h - what a run's shape trains on this machine when the machine is
 * quiet: the reference its slowdown is measured against (share.h).
 *
 * A short bench of the run's own model and batch shape before its training
 * (whole optimiser steps' worth of micro-batches and one update, on random
 * tokens), measured once per machine and shape and cached in
 * DIR/quiet_bench.json like the calibrated peak (calibrate.h). It is stored
 * only when the machine was quiet while it ran (quiet_is). A bench is independent of the run's
 * own conditions, so contention that lasts the whole run (another slot
 * fighting for memory bandwidth) shows as a slowdown, which the run's own
 * steps alone could not show. The bench leaves the model and optimiser as
 * they were made, so a run's results are the same with or without it. */
#ifndef NIGHTSHIFT_QUIET_H
#define NIGHTSHIFT_QUIET_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/gpt.h"
#include "engine/optim.h"
#include "engine/share.h"
#include "engine/spec.h"

/* The bench's timed seconds: QUIET_BENCH_SHARE of a time budget, within
 * [QUIET_BENCH_MIN_S, QUIET_BENCH_MAX_S] (a 5-minute run spends 3 s, once per
 * shape and machine); at least one timed micro-batch and one update whatever
 * they take. */
#define QUIET_BENCH_SHARE 0.01
#define QUIET_BENCH_MIN_S 0.25
#define QUIET_BENCH_MAX_S 3.0

/* Where a run's quiet throughput came from (the result's quiet_source). */
#define QUIET_FROM_CACHE "cached bench"    /* an earlier quiet bench of this shape */
#define QUIET_FROM_BENCH "bench"           /* this run's own bench, quiet, now cached */
#define QUIET_FROM_STEPS "own quiet steps" /* the bench was not quiet: the run's quiet steps */
#define QUIET_FROM_SHARE "cpu share"       /* neither: the threads' CPU share alone */
/* The run was SHARE_SLOWED or more below its reference while its own
 * counters showed a quiet machine (quiet_is over the whole run): no neighbour
 * took anything, so the gap is the reference's (a host whose speed drifts, a
 * shape the bench misjudges) and the run's own throughput is its quiet
 * reference (slowdown 1, no cost). */
#define QUIET_FROM_RUN "quiet run"

/* The cache key of s's shape on this machine: what sets a step's speed (the
 * model, the micro-batch, the tokens per step, Newton-Schulz's steps and the
 * precision) as a hash, then the threads, the kernel path, the precision the
 * run multiplies in and the CPU's name. Learning rates, the schedule, the
 * seed and the budget are not part of it. Returns 0, or -1 (out of memory). */
int quiet_shape_key(const spec_t *s, int threads, const char *isa, const char *precision, char *key,
                    size_t len);

/* The timed seconds a bench takes for a run of this time budget (0 = none). */
double quiet_bench_seconds(double time_budget_s);

typedef struct {
    double tok_s;   /* tokens per second of an optimiser step: accum micro-batches + update */
    double seconds; /* the bench's wall time, warm-up and restoring included */
    share_t share;  /* over the timed part */
    bool quiet;     /* what quiet_is says of share */
} quiet_bench_t;

/* Whether a measurement with these shares ran on a quiet machine: its
 * threads waited under 10% of their runnable time, other processes used at
 * most CALIBRATE_QUIET_OTHERS of its CPUs and, with whole_machine, of every
 * CPU's time (a neighbour on the other CPUs slows a run through memory and
 * caches: measured at up to 40% on a 2-vCPU VM), steal under 5%. */
bool quiet_is(const share_t *sh, bool whole_machine);

/* Whether a bench must find the whole machine quiet: yes, unless
 * NIGHTSHIFT_QUIET_SCOPE=cpus (only the CPUs the run may use: a run pinned
 * to CPUs of its own whose neighbours elsewhere are known not to matter, and
 * the tests, which pin a run beside other tests). */
bool quiet_whole_machine(void);

/* Whether runs time their shape at all: yes, unless
 * NIGHTSHIFT_QUIET_SCOPE=steps (each run's own quiet steps are its
 * reference: on a machine whose speed drifts within seconds, as a busy VM
 * host's does, a cached bench reads the drift as a slowdown). */
bool quiet_bench_enabled(void);

/* Time s's optimiser step (s->train's accumulation of batch_size x seq_len
 * micro-batches, then the update) on model m and optimiser *o for about
 * `seconds` after one warm-up micro-batch and update; then put both back as
 * they were made: the weights initialised again from s->seed, *o replaced by
 * a new optimiser (caller keeps ownership of the new one). On failure *o may
 * be NULL (caller frees nothing more). Returns 0, NS_ERR_NOMEM with err, or
 * -1 with err. */
int quiet_bench(gpt_t *m, optim_t **o, const spec_t *s, double seconds, quiet_bench_t *out,
                char *err, size_t errlen);

/* The cached quiet throughput for key (tokens/s), or 0 when there is none. */
double quiet_cached(const char *dir, const char *key);

/* Store b's throughput as key's in DIR/quiet_bench.json (kept when one is
 * there already: measured once per machine and shape). Returns 0, or -1
 * with err. */
int quiet_store(const char *dir, const char *key, const quiet_bench_t *b, char *err, size_t errlen);

#endif
