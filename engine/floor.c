/* floor.c - the engine's address-space floor (see floor.h). */
#include "engine/floor.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/gpt.h"
#include "engine/optim.h"
#include "engine/protocol.h"
#include "engine/spec.h"
#include "engine/threads.h"
#include "engine/util.h"

extern char **environ;

/* A model small enough to cost next to nothing and large enough that its
 * products split over the team (gemm.c's GEMM_PARALLEL_MIN): one training
 * step of it makes on every thread the calls any run makes, and so maps
 * what any run maps beside its own memory. */
static const char floor_spec[] =
    "{\"model\":{\"depth\":1,\"n_embd\":64,\"n_head\":2,\"seq_len\":64,\"vocab_size\":256},"
    "\"train\":{\"batch_size\":8,\"total_batch_tokens\":512}}";

/* OpenBLAS's buffer allocator (exported, not in cblas.h): a call takes a free
 * buffer, mapping a new one when every one is taken, and gives it back at its
 * end. Each thread of the team holds one for good (mapped when the library
 * loads); calls that overlap in time each take one more. */
void *blas_memory_alloc(int procpos);
void blas_memory_free(void *buffer);

static char watchdog_msg[256]; /* written by the handler: nothing may be formatted there */

static void watchdog_cb(int sig) {
    (void)sig;
    ssize_t k = write(STDERR_FILENO, watchdog_msg, strlen(watchdog_msg));
    (void)k;
    _exit(PROTO_EXIT_OOM);
}

/* One training step of floor_spec's model on random tokens. An allocation
 * that fails here will fail for the run too: the run says so itself. */
static void warm_step(void) {
    spec_t spec;
    char err[256];
    if (spec_parse(floor_spec, sizeof floor_spec - 1, &spec, err, sizeof err) < 0) return;
    const int B = spec.train.batch_size, T = spec.model.seq_len, V = spec.model.vocab_size;
    gpt_t *m = gpt_new(&spec.model, err, sizeof err);
    optim_t *o = m ? optim_new(m, &spec.train, err, sizeof err) : NULL;
    int *tok = malloc((size_t)2 * B * T * sizeof *tok);
    float loss;
    if (o && tok && gpt_reserve(m, B, T, err, sizeof err) == 0) {
        gpt_init_weights(m, 1);
        for (int i = 0; i < 2 * B * T; i++) tok[i] = (int)((i * 2654435761u) % (unsigned)V);
        gpt_zero_grad(m);
        if (gpt_forward(m, tok, tok + B * T, B, T, GPT_TRAIN, &loss) == 0) {
            gpt_backward(m, 1.0f);
            optim_step(o, m, 1.0, spec.train.muon_momentum_end, spec.train.weight_decay);
        }
    }
    free(tok);
    optim_free(o);
    gpt_free(m);
    spec_free(&spec);
}

void floor_reserve(int n) {
    struct rlimit rl;
    char limit[64] = "no limit";
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        snprintf(limit, sizeof limit, "%llu MiB", (unsigned long long)(rl.rlim_cur >> 20));
    snprintf(watchdog_msg, sizeof watchdog_msg,
             "out of memory: %d threads could not map their BLAS and thread buffers within %d s "
             "under the address-space limit (%s); see `nightshift floor --threads %d`\n",
             n, FLOOR_WATCHDOG_S, limit, n);
    struct sigaction sa = {.sa_handler = watchdog_cb}, old;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, &old);
    alarm(FLOOR_WATCHDOG_S);
    /* Every thread's malloc arena: glibc gives a thread its own on its first
     * allocation (64 MiB of address space, 128 while it is aligned). Made
     * here, not left to the step below, where whether a thread allocates at
     * all depends on how the work fell: the floor measured was then one
     * figure or another 128 MiB higher from run to run (at 2 threads). */
#pragma omp parallel num_threads(n)
    {
        void *volatile p = malloc(64);
        free(p);
    }
    /* Every thread inside a BLAS call at once: the most buffers a run maps. */
#pragma omp parallel num_threads(n)
    {
        void *buffer = blas_memory_alloc(0);
#pragma omp barrier
        blas_memory_free(buffer);
    }
    warm_step();
    alarm(0);
    sigaction(SIGALRM, &old, NULL);
}

/* The value of "Key:   N kB" in /proc/self/status, in bytes; -1 when absent. */
static double status_bytes(const char *text, const char *key) {
    const char *p = strstr(text, key);
    return p ? atof(p + strlen(key)) * 1024.0 : -1;
}

double floor_measure(int threads, double *size, double *rss) {
    floor_reserve(threads);
    char text[4096];
    FILE *f = fopen("/proc/self/status", "re");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[n] = '\0';
    if (size) *size = status_bytes(text, "VmSize:");
    if (rss) *rss = status_bytes(text, "VmRSS:");
    return status_bytes(text, "VmPeak:");
}

#define PROBE_TIMEOUT_S 30.0 /* `nightshift floor` maps and prints in well under a second */

double floor_probe(const char *exe, int threads, char *const env[], char *err, size_t errlen) {
    char *const *base = env ? env : environ;
    size_t n = 0;
    while (base[n]) n++;
    char **e = calloc(n + 3, sizeof *e), omp[48], blas[48], t[16], out[512];
    if (!e) return util_errorf(err, errlen, "floor: out of memory"), -1;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(base[i], "OMP_NUM_THREADS=", 16) &&
            strncmp(base[i], "OPENBLAS_NUM_THREADS=", 21))
            e[k++] = base[i];
    snprintf(omp, sizeof omp, "OMP_NUM_THREADS=%d", threads);
    snprintf(blas, sizeof blas, "OPENBLAS_NUM_THREADS=%d", threads);
    e[k++] = omp;
    e[k++] = blas;
    e[k] = NULL;
    snprintf(t, sizeof t, "%d", threads);
    char *argv[] = {(char *)exe, "floor", "--threads", t, NULL};
    int fds[2] = {-1, -1};
    double peak = -1;
    size_t len = 0;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    pid_t pid = -1;
    if (pipe2(fds, O_CLOEXEC) < 0 || posix_spawn_file_actions_adddup2(&fa, fds[1], 1) ||
        posix_spawn(&pid, exe, &fa, NULL, argv, e) != 0) {
        util_errorf(err, errlen, "floor: cannot run %s: %s", exe, strerror(errno));
        pid = -1;
        goto done;
    }
    close(fds[1]);
    fds[1] = -1;
    for (double t0 = util_now(); len < sizeof out - 1;) {
        int left = (int)((PROBE_TIMEOUT_S - (util_now() - t0)) * 1000);
        struct pollfd p = {fds[0], POLLIN, 0};
        if (left <= 0 || poll(&p, 1, left) <= 0) break;
        ssize_t got = read(fds[0], out + len, sizeof out - 1 - len);
        if (got <= 0) break;
        len += (size_t)got;
    }
    out[len] = '\0';
    const char *v = strstr(out, "\"vm_peak\":");
    if (v) peak = atof(v + 10);
    if (peak <= 0)
        util_errorf(err, errlen, "floor: %s floor --threads %d said '%.100s'", exe, threads, out);
done:
    if (pid > 0) {
        kill(pid, SIGKILL); /* it has printed, or it is late: either way it is done */
        waitpid(pid, NULL, 0);
    }
    posix_spawn_file_actions_destroy(&fa);
    for (int i = 0; i < 2; i++)
        if (fds[i] >= 0) close(fds[i]);
    free(e);
    return peak;
}

int floor_main(int argc, char **argv) {
    int threads = 0;
    for (int i = 1; i < argc; i++) {
        char *end;
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 4096) {
                fprintf(stderr, "floor: --threads: expected 1 to 4096, got '%s'\n", argv[i]);
                return PROTO_EXIT_USAGE;
            }
            threads = (int)v;
        } else {
            fprintf(stderr, "usage: nightshift floor [--threads N]\n\n"
                            "Internal: the address space the engine maps with N threads (default\n"
                            "every CPU) before a run allocates anything, as JSON in bytes.\n");
            return strcmp(argv[i], "--help") && strcmp(argv[i], "-h") ? PROTO_EXIT_USAGE : 0;
        }
    }
    threads = threads_set(threads);
    double size, rss, peak = floor_measure(threads, &size, &rss);
    if (peak < 0) {
        fprintf(stderr, "floor: /proc/self/status has no VmPeak\n");
        return PROTO_EXIT_FAILED;
    }
    printf("{\"threads\":%d,\"vm_peak\":%.0f,\"vm_size\":%.0f,\"rss\":%.0f}\n", threads, peak, size,
           rss);
    return 0;
}
