/* slots.h - how many experiments run at once on this machine, and on how
 * many threads each: `serve --slots auto` (the default of `make run`).
 *
 * The rule, from measurements on a 2-core machine (README, "Slots"):
 *   threads per slot  2 for a spec whose optimiser step is under
 *                     SLOTS_STEP_GFLOP_4 GFLOP of training work (the default
 *                     spec: 34), 4 under SLOTS_STEP_GFLOP_8, else 8; never more
 *                     than the CPUs. The engine's small products and its
 *                     per-tensor optimiser split scale well to 2 threads and
 *                     poorly past a few: a small model on 16 threads spends
 *                     most of them waiting, where 8 slots of 2 run 8
 *                     experiments.
 *   slots             the CPUs over the threads per slot, at most as many
 *                     workers as three quarters of the memory hold (the
 *                     spec's memory estimate each, as serve shares it out);
 *                     when memory is what limits them, the CPUs left over go
 *                     to the slots' threads (up to 8).
 * One pure function of the numbers, so the rule is checked on machines
 * nobody has (tests/test_slots.c), and one that reads this machine. */
#ifndef NIGHTSHIFT_SLOTS_H
#define NIGHTSHIFT_SLOTS_H

#include <stddef.h>

/* Training GFLOP per optimiser step from which a slot gets 4, and 8,
 * threads. */
#define SLOTS_STEP_GFLOP_4 200.0
#define SLOTS_STEP_GFLOP_8 800.0
#define SLOTS_MAX_THREADS  8

typedef struct {
    int cpus;          /* CPUs the daemon may use (>= 1) */
    double mem_mb;     /* the machine's memory, MiB */
    double step_gflop; /* training work of one optimiser step of the night's spec */
    double run_mem_mb; /* the memory one of its workers needs, MiB (cost_memory) */
} slots_input_t;

typedef struct {
    int slots, threads; /* experiments at once, threads each */
    char why[160];      /* the rule's reasoning in one line, for the log */
} slots_plan_t;

/* The rule above. */
void slots_plan(const slots_input_t *in, slots_plan_t *out);

/* slots_plan for this machine (the CPUs of the daemon's affinity mask, its
 * physical memory) and the default spec (experiments/specs/default.json's
 * values, a 4096-token vocabulary). */
void slots_auto(slots_plan_t *out);

#endif
