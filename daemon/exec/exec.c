/* exec.c - `nightshift exec-limited`, the shim between the daemon's worker
 * supervisor (worker.c) and a worker: it applies a slot's limits to itself,
 * then execs the worker. A program of its own that shares only the binary. */
#include "daemon/exec/exec.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#define MAX_MEMORY_MB (1L << 30) /* 1 PiB: anything larger is a typo */

static void exec_usage(FILE *out) {
    fprintf(out, "usage: nightshift exec-limited [--cpus LIST] [--memory-mb N] [--parent PID] "
                 "-- PROGRAM [ARGS...]\n\n"
                 "Internal: run a worker under its slot's limits. Pins the process to LIST\n"
                 "(e.g. 0-1,3), sets RLIMIT_AS to N MiB, dies with its parent (PID, default\n"
                 "the current parent), becomes its own process group, then execs PROGRAM.\n"
                 "Exit: 2 usage, 1 a limit could not be applied, 127 PROGRAM did not run.\n");
}

/* A non-negative decimal integer, whole string, <= max; -1 otherwise. */
static long parse_count(const char *s, long max) {
    if (!s || !*s) return -1;
    long v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return -1;
        v = v * 10 + (*s - '0');
        if (v > max) return -1;
    }
    return v;
}

/* "0-1,3" -> a CPU set. Returns 0, or -1 with err set. */
static int parse_cpus(const char *s, cpu_set_t *set, char *err, size_t errlen) {
    CPU_ZERO(set);
    const char *p = s;
    if (!*p) goto bad;
    while (*p) {
        char item[32];
        size_t n = strcspn(p, ",");
        if (n == 0 || n >= sizeof item) goto bad;
        memcpy(item, p, n);
        item[n] = 0;
        char *dash = strchr(item, '-');
        if (dash) *dash = 0;
        long lo = parse_count(item, CPU_SETSIZE - 1);
        long hi = dash ? parse_count(dash + 1, CPU_SETSIZE - 1) : lo;
        if (lo < 0 || hi < lo) goto bad;
        for (long c = lo; c <= hi; c++) CPU_SET((int)c, set);
        p += n;
        if (*p == ',' && !*++p) goto bad; /* trailing comma */
    }
    return 0;
bad:
    snprintf(err, errlen, "bad CPU list '%s' (want e.g. 0-1,3; CPUs below %d)", s, CPU_SETSIZE);
    return -1;
}

/* The options before the program: *prog gets the program's index in argv.
 * Returns 0, 1 for --help (printed), or 2 after a usage error (printed). */
static int exec_parse(int argc, char **argv, const char **cpus, const char **mem_s,
                      const char **parent_s, int *prog) {
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = !strcmp(a, "--cpus")        ? cpus
                           : !strcmp(a, "--memory-mb") ? mem_s
                           : !strcmp(a, "--parent")    ? parent_s
                                                       : NULL;
        if (dst) {
            if (i + 1 >= argc) {
                fprintf(stderr, "exec-limited: %s needs a value\n", a);
                return 2;
            }
            *dst = argv[++i];
        } else if (!strcmp(a, "--")) {
            i++;
            break;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            exec_usage(stdout);
            return 1;
        } else if (a[0] == '-') {
            fprintf(stderr, "exec-limited: unknown option '%s'\n", a);
            exec_usage(stderr);
            return 2;
        } else {
            break;
        }
    }
    if (i >= argc) {
        fprintf(stderr, "exec-limited: no program to run\n");
        exec_usage(stderr);
        return 2;
    }
    *prog = i;
    return 0;
}

int exec_limited_main(int argc, char **argv) {
    const char *cpus = NULL, *mem_s = NULL, *parent_s = NULL;
    int i = 0, rc = exec_parse(argc, argv, &cpus, &mem_s, &parent_s, &i);
    if (rc) return rc == 1 ? 0 : 2;
    cpu_set_t set;
    char err[160];
    if (cpus && parse_cpus(cpus, &set, err, sizeof err) < 0) {
        fprintf(stderr, "exec-limited: %s\n", err);
        return 2;
    }
    long mem = mem_s ? parse_count(mem_s, MAX_MEMORY_MB) : 0;
    if (mem_s && mem <= 0) {
        fprintf(stderr, "exec-limited: bad --memory-mb '%s' (want 1..%ld)\n", mem_s, MAX_MEMORY_MB);
        return 2;
    }
    long parent = parent_s ? parse_count(parent_s, 1L << 22) : (long)getppid();
    if (parent <= 0) {
        fprintf(stderr, "exec-limited: bad --parent '%s'\n", parent_s);
        return 2;
    }

    /* Die with the parent; if it is already gone (we were re-parented before
     * the request took effect) there is no one to report to. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) {
        fprintf(stderr, "exec-limited: prctl(PR_SET_PDEATHSIG): %s\n", strerror(errno));
        return 1;
    }
    if ((long)getppid() != parent) {
        fprintf(stderr, "exec-limited: parent %ld is gone\n", parent);
        return 1;
    }
    /* Own process group so the supervisor can signal the worker and anything
     * it forks at once. A session leader already leads its group. */
    if (setpgid(0, 0) < 0 && getpgrp() != getpid()) {
        fprintf(stderr, "exec-limited: setpgid: %s\n", strerror(errno));
        return 1;
    }
    if (cpus && sched_setaffinity(0, sizeof set, &set) < 0) {
        fprintf(stderr, "exec-limited: sched_setaffinity(%s): %s\n", cpus, strerror(errno));
        return 1;
    }
    /* The worker gets fds 0-3 only (the daemon's are close-on-exec anyway). */
    close_range(4, ~0U, 0);
    /* Last, right before exec: under the limit this process could not do
     * much else (a sanitizer build reserves terabytes of address space). */
    if (mem > 0) {
        struct rlimit rl = {(rlim_t)mem << 20, (rlim_t)mem << 20};
        if (setrlimit(RLIMIT_AS, &rl) < 0) {
            fprintf(stderr, "exec-limited: setrlimit(RLIMIT_AS, %ld MiB): %s\n", mem,
                    strerror(errno));
            return 1;
        }
    }
    execvp(argv[i], argv + i);
    fprintf(stderr, "exec-limited: cannot run '%s': %s\n", argv[i], strerror(errno));
    fflush(stderr);
    _exit(127); /* no atexit handlers or leak checks under the new limits */
}
