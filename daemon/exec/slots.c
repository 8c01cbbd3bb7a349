/* slots.c - the slot and thread layout of `serve --slots auto` (see slots.h). */
#include "daemon/exec/slots.h"

#include <sched.h>
#include <stdio.h>
#include <unistd.h>

#include "engine/cost.h"
#include "engine/spec.h"

void slots_plan(const slots_input_t *in, slots_plan_t *out) {
    const int cpus = in->cpus > 0 ? in->cpus : 1;
    int t = in->step_gflop < SLOTS_STEP_GFLOP_4   ? 2
            : in->step_gflop < SLOTS_STEP_GFLOP_8 ? 4
                                                  : SLOTS_MAX_THREADS;
    if (t > cpus) t = cpus;
    int slots = cpus / t;
    const char *limit = "CPUs";
    /* three quarters of the memory, as serve shares it among the workers */
    const double fit = in->run_mem_mb > 0 ? 0.75 * in->mem_mb / in->run_mem_mb : slots;
    if (fit < slots) {
        slots = fit >= 1 ? (int)fit : 1;
        limit = "memory";
        t = cpus / slots < SLOTS_MAX_THREADS ? cpus / slots : SLOTS_MAX_THREADS;
        if (t < 1) t = 1;
    }
    out->slots = slots;
    out->threads = t;
    snprintf(out->why, sizeof out->why,
             "%d CPUs, %.0f MiB; a step of %.0f GFLOP, ~%.0f MiB a worker: %d slot%s x %d "
             "thread%s (limited by %s)",
             cpus, in->mem_mb, in->step_gflop, in->run_mem_mb, slots, slots == 1 ? "" : "s", t,
             t == 1 ? "" : "s", limit);
}

void slots_auto(slots_plan_t *out) {
    slots_input_t in = {0};
    cpu_set_t set;
    in.cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    in.mem_mb = pages > 0 && page > 0 ? (double)pages * page / (1 << 20) : 0;
    spec_t s;
    char err[256];
    spec_defaults(&s);
    s.model.vocab_size = 4096;                     /* prep's default */
    if (spec_validate(&s, err, sizeof err) == 0) { /* the derived sizes; the defaults are valid */
        cost_t c;
        cost_compute(&s.model, s.train.batch_size, &c);
        cost_mem_t mem;
        cost_memory(&s.model, s.train.batch_size, 0, s.train.precision, &mem);
        in.step_gflop = c.flops_per_token * s.train.total_batch_tokens / 1e9;
        in.run_mem_mb = mem.total / (1 << 20);
    }
    spec_free(&s);
    slots_plan(&in, out);
}
