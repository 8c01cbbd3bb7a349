/* test_slots.c - `serve --slots auto`'s rule (daemon/exec/slots.h) on
 * machines nobody here has: 2, 8, 16 and 64 CPUs, with plenty of memory and
 * with little, for the default spec's size and for larger ones. */
#include <criterion/criterion.h>
#include <string.h>

#include "daemon/exec/slots.h"

static slots_plan_t plan(int cpus, double mem_mb, double step_gflop, double run_mem_mb) {
    slots_input_t in = {cpus, mem_mb, step_gflop, run_mem_mb};
    slots_plan_t p;
    slots_plan(&in, &p);
    cr_assert(p.slots >= 1 && p.threads >= 1, "%s", p.why);
    cr_assert(p.slots * p.threads <= (cpus > 0 ? cpus : 1) || p.threads == 1, "%s", p.why);
    return p;
}

static void expect(slots_plan_t p, int slots, int threads) {
    cr_expect(p.slots == slots && p.threads == threads, "want %d x %d: %s", slots, threads, p.why);
}

/* The default spec: 34 GFLOP a step, ~400 MiB a worker. */
Test(slots, default_spec_gets_two_threads_a_slot) {
    expect(plan(2, 24 * 1024, 34, 400), 1, 2);
    expect(plan(8, 32 * 1024, 34, 400), 4, 2);
    expect(plan(16, 64 * 1024, 34, 400), 8, 2);
    expect(plan(64, 256 * 1024, 34, 400), 32, 2);
    expect(plan(1, 4 * 1024, 34, 400), 1, 1); /* one CPU: one thread */
    expect(plan(3, 8 * 1024, 34, 400), 1, 2); /* the odd CPU is the daemon's */
}

/* Larger steps scale further: 4 threads, then 8, never more than the CPUs. */
Test(slots, larger_models_get_more_threads) {
    expect(plan(16, 64 * 1024, 300, 2000), 4, 4);
    expect(plan(64, 256 * 1024, 300, 2000), 16, 4);
    expect(plan(64, 256 * 1024, 2000, 8000), 8, 8);
    expect(plan(2, 24 * 1024, 2000, 8000), 1, 2);
    expect(plan(8, 64 * 1024, 2000, 8000), 1, 8);
}

/* Memory bounds the slots at three quarters of it; the CPUs left go to the
 * slots' threads, up to 8 each. */
Test(slots, memory_bounds_the_slots) {
    expect(plan(64, 4 * 1024, 34, 400), 7, 8); /* 3072 MiB / 400 = 7 workers */
    expect(plan(16, 2 * 1024, 34, 400), 3, 5);
    expect(plan(8, 256, 34, 400), 1, 8); /* not even one fits: one, on every CPU it may use */
    expect(plan(2, 1024, 34, 400), 1, 2);
    slots_plan_t p = plan(64, 4 * 1024, 34, 400);
    cr_expect(strstr(p.why, "limited by memory"), "%s", p.why);
    p = plan(16, 64 * 1024, 34, 400);
    cr_expect(strstr(p.why, "limited by CPUs"), "%s", p.why);
}

/* This machine, through the default spec's real cost. */
Test(slots, this_machine) {
    slots_plan_t p;
    slots_auto(&p);
    cr_expect(p.slots >= 1 && p.threads >= 1 && p.threads <= SLOTS_MAX_THREADS, "%s", p.why);
    cr_log_info("this machine: %s", p.why);
}
