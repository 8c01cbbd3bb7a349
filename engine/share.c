/* share.c - a run's share of the machine (share.h). The kernel's counters
 * are read by hand: no library exposes schedstat or /proc/stat's per-CPU
 * lines, and each is a line of numbers. */
#include "engine/share.h"

#include <dirent.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

void share_snap_sched(share_snap_t *s) {
    s->run_ns = s->wait_ns = 0;
    s->have_sched = 0;
    DIR *d = opendir("/proc/self/task");
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[64];
        snprintf(path, sizeof path, "/proc/self/task/%.20s/schedstat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue; /* the thread ended */
        double run, wait;
        if (fscanf(f, "%lf %lf", &run, &wait) == 2) {
            s->run_ns += run;
            s->wait_ns += wait;
            s->have_sched = 1;
        }
        fclose(f);
    }
    closedir(d);
}

/* A /proc/stat line's user nice system idle iowait irq softirq steal (guest
 * is in user) in clock ticks: busy is all but idle, iowait and steal. */
static double busy_ticks(const unsigned long long *v) {
    return (double)(v[0] + v[1] + v[2] + v[5] + v[6]);
}
static double all_ticks(const unsigned long long *v) {
    return (double)(v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7]);
}

/* The whole machine's sums ("cpu" line) and those of the CPUs this process
 * may use, from its affinity mask ("cpuN" lines), into s. */
static void snap_stat(share_snap_t *s) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) < 0) return;
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return;
    double hz = (double)sysconf(_SC_CLK_TCK);
    char line[512];
    while (fgets(line, sizeof line, f)) {
        int cpu = -1, n = 0; /* cpu -1: the machine's line */
        unsigned long long v[8] = {0};
        if (strncmp(line, "cpu", 3) || (line[3] != ' ' && sscanf(line + 3, "%d%n", &cpu, &n) != 1))
            continue;
        if (sscanf(line + 3 + n, "%llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                   &v[3], &v[4], &v[5], &v[6], &v[7]) < 8)
            continue;
        if (cpu < 0) {
            s->machine_busy_s = busy_ticks(v) / hz;
            s->machine_total_s = all_ticks(v) / hz;
        } else if (cpu < CPU_SETSIZE && CPU_ISSET(cpu, &set)) {
            s->busy_s += busy_ticks(v) / hz;
            s->steal_s += (double)v[7] / hz;
            s->total_s += all_ticks(v) / hz;
            s->have_stat = 1;
        }
    }
    fclose(f);
}

void share_snap(share_snap_t *s) {
    memset(s, 0, sizeof *s);
    share_snap_sched(s);
    snap_stat(s);
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        s->self_s = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
                    (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

void share_between(const share_snap_t *a, const share_snap_t *b, share_t *out) {
    out->cpu = out->steal = out->others = out->machine_others = -1;
    double run = b->run_ns - a->run_ns, wait = b->wait_ns - a->wait_ns;
    if (a->have_sched && b->have_sched && run + wait > 0) out->cpu = fmax(0, run) / (run + wait);
    double total = b->total_s - a->total_s;
    if (a->have_stat && b->have_stat && total > 0) {
        out->steal = fmax(0, b->steal_s - a->steal_s) / total;
        double others = (b->busy_s - a->busy_s) - (b->self_s - a->self_s);
        out->others = fmin(1, fmax(0, others) / total);
    }
    double machine = b->machine_total_s - a->machine_total_s;
    if (a->have_stat && b->have_stat && machine > 0) {
        double others = (b->machine_busy_s - a->machine_busy_s) - (b->self_s - a->self_s);
        out->machine_others = fmin(1, fmax(0, others) / machine);
    }
}

/* ------------------------------------------------------------------- cost */

double share_slowdown_cost_bpb(const double *tokens, const double *loss, int n, double slowdown,
                               double val_bpb) {
    if (!(slowdown > 1) || n < 4 || !(val_bpb > 0)) return 0;
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    int m = 0;
    for (int i = n / 2; i < n; i++) {
        if (!(tokens[i] > 0) || !isfinite(loss[i])) continue;
        double x = log(tokens[i]);
        sx += x;
        sy += loss[i];
        sxx += x * x;
        sxy += x * loss[i];
        m++;
    }
    double den = m * sxx - sx * sx;
    if (m < 2 || !(den > 0)) return 0;
    double slope = (m * sxy - sx * sy) / den, icept = (sy - slope * sx) / m;
    double at_end = icept + slope * log(tokens[n - 1]);
    /* a fall under 1e-9 of the loss over the whole curve is a flat one (rounding) */
    if (!(at_end > 0) || !(-slope * log(tokens[n - 1] / tokens[0]) > 1e-9 * at_end)) return 0;
    /* the loss it would have reached, in nats, then as a share of val_bpb */
    return val_bpb * (-slope * log(slowdown)) / at_end;
}
