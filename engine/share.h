/* share.h - a run's share of the machine, from the kernel's accounting.
 *
 * A training run's speed depends on its neighbours as much as on its
 * configuration. This module measures what the run got: the CPU time its
 * threads ran against the time they were runnable (/proc/self/task/N/schedstat:
 * on-CPU and run-queue-wait nanoseconds), and on the CPUs it may use
 * (sched_getaffinity) the steal time and the other processes' CPU time
 * (/proc/stat deltas, less this process's own getrusage time). The run's
 * throughput against what the same shape trains on this machine when it is
 * quiet (quiet.h) is its slowdown. Linux only: elsewhere, or without
 * schedstat, the shares are unknown (negative). */
#ifndef NIGHTSHIFT_SHARE_H
#define NIGHTSHIFT_SHARE_H

#include <stddef.h>
#include <stdint.h>

#define SHARE_QUIET_WAIT  0.05 /* a step is quiet when its threads waited less than this */
#define SHARE_QUIET_STEPS 5    /* quiet steps needed for a reference of the run's own */
#define SHARE_SLOWED      1.2  /* a run this much slower than quiet is flagged (ls, report) */

/* What the kernel has counted so far. */
typedef struct {
    double run_ns, wait_ns; /* this process's threads: on a CPU, runnable but waiting */
    double busy_s, steal_s; /* its CPUs (affinity): busy (user .. softirq) and steal seconds */
    double total_s;         /* its CPUs: all accounted seconds */
    double machine_busy_s, machine_total_s; /* every CPU's, from /proc/stat's "cpu" line */
    double self_s;                          /* this process's user + system CPU seconds */
    int have_sched, have_stat;
} share_snap_t;

/* Fill s (what is unreadable stays 0, its have_ flag 0). */
void share_snap(share_snap_t *s);

/* Only the threads' schedstat (cheap enough for every step). */
void share_snap_sched(share_snap_t *s);

/* The shares between two snapshots: cpu the threads' on-CPU fraction of
 * their runnable time (1 = never waited), steal and others fractions of its
 * CPUs' time, machine_others other processes' fraction of every CPU's time
 * (what a neighbour on the other CPUs took shows as memory and cache
 * contention, never as waiting); -1 each when unknown. */
typedef struct {
    double cpu, steal, others, machine_others;
} share_t;
void share_between(const share_snap_t *a, const share_snap_t *b, share_t *out);

/* The val_bpb a slowdown cost a time-budget run, from its loss curve: loss
 * against ln(tokens) fitted by least squares over the second half of the
 * curve (n points of tokens[i], loss[i] in nats), extrapolated to the tokens
 * a quiet run would have seen (tokens x slowdown), scaled from nats to the
 * run's val_bpb (val_bpb / final loss). 0 when the slowdown is at most 1 or
 * the curve does not fall; never negative. */
double share_slowdown_cost_bpb(const double *tokens, const double *loss, int n, double slowdown,
                               double val_bpb);

#endif
