/* bad_worker.c - a stand-in for `nightshift train` that misbehaves on purpose.
 *
 * Built as its own small program (build/.../bad-worker, never linked into the
 * test binary, never built with sanitizers so that memory limits mean what
 * they say). It follows the worker contract where the mode says so: JSON
 * progress lines on fd 3, the summary on stdout, errors on stderr, the exit
 * codes of engine/protocol.h. `bad-worker help` lists the modes. Writes to
 * fd 3 are ignored when it is not open.
 *
 * `bad-worker from-spec ... SPEC` takes its mode from the "name" field of the
 * spec file given as the last argument (the daemon appends the run's
 * spec.json), so one daemon can run a different behaviour per experiment;
 * slow-ok then runs for the spec's time_budget_s, or with `--until PATH`
 * among the ARGS until PATH exists (at most that budget), so that a test can
 * end it when it has seen what it waits for rather than guess a duration. */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "engine/protocol.h"

#define PROGRESS_FD 3
#define MiB         ((size_t)1 << 20)
/* A safety stop for the memory modes when no limit was applied. */
#define MEMORY_SAFETY_CAP (4096 * MiB)
#define SLOW_OK_SECONDS   3.0 /* slow-ok's run time when no spec says otherwise */
#define SPEC_MAX          (64 * 1024)

static void write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return;
        c += k;
        n -= (size_t)k;
    }
}

/* One progress line (printf format, newline added) on fd 3. */
static void progress(const char *fmt, ...) {
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n > sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    write_all(PROGRESS_FD, line, (size_t)n);
}

static void result_ok(double val_bpb) {
    progress("{\"event\":\"result\",\"status\":\"succeeded\",\"val_bpb\":%g}", val_bpb);
}

static void say(int fd, const char *s) {
    write_all(fd, s, strlen(s));
}

static void hang(void) {
    progress("{\"event\":\"start\",\"pid\":%d}", (int)getpid());
    for (;;) pause();
}

/* Allocate and touch 1 MiB blocks until malloc fails; returns 0 then, or -1
 * when the safety cap is reached first. The blocks are never freed: the
 * process ends right after. */
static int eat_memory(void) {
    static void *blocks[MEMORY_SAFETY_CAP / MiB];
    for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++) {
        blocks[i] = malloc(MiB);
        if (!blocks[i]) return 0;
        memset(blocks[i], (int)(i & 0xff) | 1, MiB);
    }
    return -1;
}

static int mode_ok(void) {
    progress("{\"event\":\"start\",\"params\":1234}");
    say(2, "step 1 loss 4.5\n");
    progress("{\"event\":\"step\",\"step\":1,\"loss\":4.5}");
    progress("{\"event\":\"step\",\"step\":2,\"loss\":4.25}");
    say(1, "---\nval_bpb:          1.234500\n");
    result_ok(1.2345);
    return 0;
}

static int mode_fail(void) {
    progress("{\"event\":\"start\"}");
    say(2, "bad-worker: reading the dataset\n");
    say(2, "bad-worker: something broke: the disk is on fire\n");
    progress("{\"event\":\"result\",\"status\":\"failed\",\"reason\":\"the disk is on fire\"}");
    return PROTO_EXIT_FAILED;
}

/* Many stderr lines, then the one that matters. */
static int mode_fail_long(void) {
    char line[128];
    for (int i = 0; i < 20; i++) {
        snprintf(line, sizeof line, "bad-worker: noise line %02d %070d\n", i, 0);
        say(2, line);
    }
    say(2, "bad-worker: fatal: the last words\n");
    return PROTO_EXIT_FAILED;
}

static int mode_diverge(void) {
    progress("{\"event\":\"step\",\"step\":1,\"loss\":4.5}");
    say(2, "train: diverged: loss nan at step 2\n");
    progress("{\"event\":\"result\",\"status\":\"diverged\","
             "\"reason\":\"diverged: loss nan at step 2\"}");
    return PROTO_EXIT_DIVERGED;
}

/* Non-JSON, overlong (5000 bytes), non-object, binary, trailing junk and
 * truncated lines, a line split across two writes, a blank line, then a
 * valid result: 6 garbage lines and 3 valid objects. */
static int mode_garbage(void) {
    char junk[300], big[5200];
    for (size_t i = 0; i < sizeof junk; i++) {
        junk[i] = (char)((i * 37 + 11) & 0xff);
        if (junk[i] == '\n') junk[i] = 0;
    }
    progress("this is not json at all");
    progress("{\"event\":\"step\",\"step\":1}");
    int n = snprintf(big, sizeof big, "{\"event\":\"step\",\"pad\":\"");
    memset(big + n, 'x', 5000);
    n += 5000;
    n += snprintf(big + n, sizeof big - (size_t)n, "\"}\n");
    write_all(PROGRESS_FD, big, (size_t)n);
    progress("[1,2,3]");
    write_all(PROGRESS_FD, junk, sizeof junk);
    write_all(PROGRESS_FD, "\n", 1);
    progress("{\"event\":\"step\",\"step\":2} trailing");
    progress("{\"event\":\"step\"");
    progress("");
    write_all(PROGRESS_FD, "{\"event\":\"step\",", 16);
    usleep(20000);
    write_all(PROGRESS_FD, "\"step\":3}\n", 10);
    write_all(1, junk, sizeof junk);
    write_all(2, junk, sizeof junk);
    result_ok(2.5);
    return 0;
}

/* 100 MB on stdout as fast as the pipe takes it. */
static int mode_flood(void) {
    static char chunk[MiB];
    for (size_t i = 0; i < sizeof chunk; i++) chunk[i] = (i % 64 == 63) ? '\n' : 'x';
    for (int i = 0; i < 100; i++) write_all(1, chunk, sizeof chunk);
    result_ok(3.0);
    return 0;
}

/* Step lines every 100 ms for `seconds`, with the fields `nightshift train`
 * sends, then a result: a well-behaved run that takes a while. */
static const char *until_path; /* from-spec --until: slow-ok ends once this exists */

static int mode_slow_ok(double seconds) {
    struct timespec t0, now, tick = {0, 100 * 1000 * 1000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    progress("{\"event\":\"start\",\"params\":1234}");
    double t = 0;
    for (int step = 1;; step++) {
        nanosleep(&tick, NULL);
        clock_gettime(CLOCK_MONOTONIC, &now);
        t = (double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) * 1e-9;
        double frac = seconds > 0 ? t / seconds : 1.0;
        if (frac > 1.0) frac = 1.0;
        double loss = 5.0 - 3.0 * frac;
        progress("{\"event\":\"step\",\"step\":%d,\"progress\":%.4f,"
                 "\"training_seconds\":%.3f,\"loss\":%.4f,\"smooth_loss\":%.4f,"
                 "\"lrm\":%.3f,\"tok_s\":1000,\"mfu\":1,\"remaining_s\":%.3f}",
                 step, frac, t, loss, loss, 1.0 - frac, seconds > t ? seconds - t : 0.0);
        if (t >= seconds || (until_path && access(until_path, F_OK) == 0)) break;
    }
    say(1, "---\nval_bpb:          2.000000\n");
    progress("{\"event\":\"result\",\"status\":\"succeeded\",\"val_bpb\":2.0,"
             "\"training_seconds\":%.3f}",
             t);
    return 0;
}

/* Runs into the memory limit, then exits 4 or (by_signal) says so on fd 3
 * and aborts, as a runtime might once an allocation has failed. */
static int mode_oom(int by_signal) {
    progress("{\"event\":\"start\"}");
    if (eat_memory() < 0) {
        say(2, "bad-worker: no memory limit was hit\n");
        return 5;
    }
    say(2, "bad-worker: out of memory\n");
    if (by_signal) {
        progress("{\"event\":\"result\",\"status\":\"oom\"}");
        abort();
    }
    return PROTO_EXIT_OOM;
}

/* "out of memory" on stderr, then an ending that says nothing structured
 * about memory: how ("exit1", "abort" or "sigkill"). */
static int mode_oom_text(const char *how) {
    say(2, "bad-worker: out of memory\n");
    if (!strcmp(how, "abort")) abort();
    if (!strcmp(how, "sigkill")) raise(SIGKILL);
    return PROTO_EXIT_FAILED;
}

/* What the kernel's OOM killer leaves behind: the "oom_kill N" count in path
 * (the daemon's stand-in for /proc/vmstat) one higher, and a SIGKILL, without
 * a word on any pipe. */
static int mode_oom_killed(const char *path) {
    static char text[4096];
    FILE *f = fopen(path, "r+");
    if (!f) {
        fprintf(stderr, "bad-worker: oom-killed: cannot open %s: %s\n", path, strerror(errno));
        return 2;
    }
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    char *at = strstr(text, "oom_kill "), *end;
    if (!at) {
        fclose(f);
        fprintf(stderr, "bad-worker: oom-killed: no oom_kill line in %s\n", path);
        return 2;
    }
    long long count = strtoll(at + 9, &end, 10);
    rewind(f);
    fprintf(f, "%.*soom_kill %lld%s", (int)(at - text), text, count + 1, end);
    fclose(f);
    raise(SIGKILL);
    return 1;
}

static int mode_affinity(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) < 0) return 1;
    char line[8192];
    size_t n = (size_t)snprintf(line, sizeof line, "{\"event\":\"affinity\",\"cpus\":[");
    const char *sep = "";
    for (int c = 0; c < CPU_SETSIZE && n < sizeof line - 64; c++)
        if (CPU_ISSET(c, &set)) {
            n += (size_t)snprintf(line + n, sizeof line - n, "%s%d", sep, c);
            sep = ",";
        }
    snprintf(line + n, sizeof line - n, "]}");
    progress("%s", line);
    result_ok(1.0);
    return 0;
}

/* A result line without its newline, the last thing on fd 3. */
static int mode_no_newline(void) {
    const char *line = "{\"event\":\"result\",\"status\":\"succeeded\",\"val_bpb\":1.75}";
    write_all(PROGRESS_FD, line, strlen(line));
    return 0;
}

/* The variables the supervisor sets or must pass through, as strings
 * ("" when unset; printed unescaped: tests use plain values), and the
 * process and group ids. */
static int mode_env(void) {
    static const char *names[] = {
        "OMP_NUM_THREADS",  "OPENBLAS_NUM_THREADS",    "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
        "NIGHTSHIFT_TOKEN", "NIGHTSHIFT_AGENT_SECRET", "SLURM_JWT"};
    char line[2048];
    size_t n = (size_t)snprintf(line, sizeof line, "{\"event\":\"env\"");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = getenv(names[i]);
        n += (size_t)snprintf(line + n, sizeof line - n, ",\"%s\":\"%s\"", names[i], v ? v : "");
    }
    snprintf(line + n, sizeof line - n, ",\"pid\":%d,\"pgid\":%d}", (int)getpid(), (int)getpgrp());
    progress("%s", line);
    printf("%s\n", line); /* in the run's log too, where a test can read it */
    result_ok(1.0);
    return 0;
}

/* The child keeps every pipe open for 2 s after the parent exited; it sends
 * one progress line 0.2 s after the fork. */
static int mode_grandchild(void) {
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
        usleep(200000);
        progress("{\"event\":\"late-progress\"}");
        sleep(2);
        say(1, "late output from the grandchild\n");
        _exit(0);
    }
    progress("{\"event\":\"grandchild\",\"pid\":%d}", (int)pid);
    result_ok(1.5);
    return 0;
}

static const char *const modes[] = {
    "ok",
    "fail",
    "fail-long",
    "diverge",
    "crash",
    "abort",
    "hang",
    "hang-ignore-term",
    "flood",
    "garbage",
    "oom",
    "oom-signal",
    "exit0-noresult",
    "affinity",
    "env",
    "grandchild",
    "no-newline",
    "slow-ok",
    "from-spec",
    "oom-text-exit1",
    "oom-text-abort",
    "oom-text-sigkill",
    "exit4-silent",
    "oom-killed",
};

/* The value after "key": in the JSON text (whitespace skipped), or NULL. */
static const char *json_value(const char *text, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *p = strstr(text, pat);
    if (!p) return NULL;
    p += strlen(pat);
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    if (*p++ != ':') return NULL;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

/* from-spec: the mode is the spec's "name" (copied into mode), and slow-ok's
 * run time its "time_budget_s". Returns 0, or -1 with a message on stderr. */
static int read_spec(const char *path, char *mode, size_t modelen, double *seconds) {
    static char text[SPEC_MAX];
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "bad-worker: from-spec: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    const char *name = json_value(text, "name");
    const char *end = name && *name == '"' ? strchr(name + 1, '"') : NULL;
    if (!end || (size_t)(end - name - 1) >= modelen) {
        fprintf(stderr, "bad-worker: from-spec: %s has no usable \"name\"\n", path);
        return -1;
    }
    memcpy(mode, name + 1, (size_t)(end - name - 1));
    mode[end - name - 1] = '\0';
    const char *budget = json_value(text, "time_budget_s");
    if (budget) *seconds = strtod(budget, NULL);
    return 0;
}

int main(int argc, char **argv) {
    const char *m = argc > 1 ? argv[1] : "help";
    double slow_seconds = SLOW_OK_SECONDS;
    char spec_mode[64];
    /* Crashing modes must not leave core files behind. */
    struct rlimit core = {0, 0};
    setrlimit(RLIMIT_CORE, &core);

    if (!strcmp(m, "from-spec")) {
        if (argc < 3) {
            fprintf(stderr, "usage: bad-worker from-spec [ARGS...] SPEC_PATH\n");
            return 2;
        }
        for (int i = 2; i + 2 < argc; i++)
            if (!strcmp(argv[i], "--until")) until_path = argv[i + 1];
        if (read_spec(argv[argc - 1], spec_mode, sizeof spec_mode, &slow_seconds) < 0) return 2;
        if (!strcmp(spec_mode, "from-spec")) {
            fprintf(stderr, "bad-worker: from-spec: the spec's name cannot be from-spec\n");
            return 2;
        }
        m = spec_mode;
    }
    if (!strcmp(m, "ok")) return mode_ok();
    if (!strcmp(m, "slow-ok")) return mode_slow_ok(slow_seconds);
    if (!strcmp(m, "fail")) return mode_fail();
    if (!strcmp(m, "fail-long")) return mode_fail_long();
    if (!strcmp(m, "diverge")) return mode_diverge();
    if (!strcmp(m, "crash")) {
        progress("{\"event\":\"start\"}");
        raise(SIGSEGV);
        return 1;
    }
    if (!strcmp(m, "abort")) {
        say(2, "bad-worker: an assertion failed\n");
        abort();
    }
    if (!strcmp(m, "hang")) hang();
    if (!strcmp(m, "hang-ignore-term")) {
        signal(SIGTERM, SIG_IGN);
        hang();
    }
    if (!strcmp(m, "flood")) return mode_flood();
    if (!strcmp(m, "garbage")) return mode_garbage();
    if (!strcmp(m, "oom")) return mode_oom(0);
    if (!strcmp(m, "oom-signal")) return mode_oom(1);
    if (!strcmp(m, "oom-text-exit1") || !strcmp(m, "oom-text-abort") ||
        !strcmp(m, "oom-text-sigkill"))
        return mode_oom_text(m + 9);
    if (!strcmp(m, "exit4-silent")) return PROTO_EXIT_OOM;
    if (!strcmp(m, "oom-killed") && argc > 2) return mode_oom_killed(argv[2]);
    if (!strcmp(m, "exit0-noresult")) {
        progress("{\"event\":\"step\",\"step\":1,\"loss\":4.5}");
        return 0;
    }
    if (!strcmp(m, "affinity")) return mode_affinity();
    if (!strcmp(m, "env")) return mode_env();
    if (!strcmp(m, "no-newline")) return mode_no_newline();
    if (!strcmp(m, "grandchild")) return mode_grandchild();

    FILE *out = strcmp(m, "help") ? stderr : stdout;
    fprintf(out, "usage: bad-worker MODE\nmodes:");
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) fprintf(out, " %s", modes[i]);
    fprintf(out, "\n");
    return strcmp(m, "help") ? 2 : 0;
}
