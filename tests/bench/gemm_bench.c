/* gemm_bench.c - the linear layers' products per kernel path.
 *
 *   make bench-gemm                   (build/gemm-bench REPEATS THREADS)
 *
 * One forward and one backward (dW and dx) of the linear layers of make
 * bench's S, M and L models and of the default spec's lm_head (vocabulary
 * 4096), on every kernel path this CPU runs (generic is OpenBLAS) and
 * with bf16 operands where it has AVX512_BF16 (`avx512-bf16`), alternating, on THREADS threads (default 2). Prints the median
 * milliseconds of CPU time of the process (all threads; the team sleeps
 * between regions) and GFLOP/s of CPU time, so other work on a shared
 * machine slows the numbers less than wall time would. A benchmark, not a
 * test: it checks nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "engine/gemm.h"
#include "engine/rng.h"
#include "engine/threads.h"

typedef struct {
    const char *name;
    int N, in, out;
} shape_t;

static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static float *randn(rng_t *r, size_t n) {
    float *x = malloc(n * sizeof *x);
    if (!x) exit(1);
    for (size_t i = 0; i < n; i++) x[i] = rng_normal(r);
    return x;
}

int main(int argc, char **argv) {
    const int repeats = argc > 1 ? atoi(argv[1]) : 9, threads = argc > 2 ? atoi(argv[2]) : 2;
    if (repeats < 1 || threads < 1) {
        fprintf(stderr, "usage: gemm-bench [REPEATS >= 1] [THREADS >= 1]\n");
        return 2;
    }
    const shape_t shapes[] = {{"S qkv", 4096, 64, 192},    {"S fc", 4096, 64, 256},
                              {"S proj", 4096, 256, 64},   {"M qkv", 4096, 128, 384},
                              {"M fc", 4096, 128, 512},    {"M proj", 4096, 512, 128},
                              {"L qkv", 2048, 256, 512},   {"L fc", 2048, 256, 1024},
                              {"L proj", 2048, 1024, 256}, {"lm_head 4096", 4096, 128, 4096}};
    const gemm_isa all[] = {GEMM_GENERIC, GEMM_AVX2, GEMM_AVX512, GEMM_AVX512};
    const gemm_precision prec[] = {GEMM_FP32, GEMM_FP32, GEMM_FP32, GEMM_BF16};
    char err[256];
    int isas[4];
    int n_isa = 0;
    for (int i = 0; i < 4; i++)
        if (gemm_select(all[i]) == 0 && gemm_set_precision(prec[i], err, sizeof err) == 0)
            isas[n_isa++] = i;
    threads_set(threads);
    printf("linear layer forward + backward: median ms of process CPU time over %d alternating "
           "repeats, %d threads\n",
           repeats, threads);
    printf("%-13s %-11s %9s %9s %9s\n", "", "path", "fwd ms", "bwd ms", "GFLOP/s");
    rng_t r;
    rng_seed(&r, 1);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const shape_t sh = shapes[s];
        float *x = randn(&r, (size_t)sh.N * sh.in), *W = randn(&r, (size_t)sh.out * sh.in);
        float *dy = randn(&r, (size_t)sh.N * sh.out), *y = randn(&r, (size_t)sh.N * sh.out);
        float *dW = randn(&r, (size_t)sh.out * sh.in), *dx = randn(&r, (size_t)sh.N * sh.in);
        double f[4][64], b[4][64];
        for (int rep = 0; rep < repeats && rep < 64; rep++)
            for (int i = 0; i < n_isa; i++) {
                gemm_select(all[isas[i]]);
                gemm_set_precision(prec[isas[i]], err, sizeof err);
                double t0 = cpu_ms();
                gemm_linear_forward(y, x, sh.in, W, sh.N, sh.in, sh.out);
                double t1 = cpu_ms();
                gemm_linear_backward(dx, sh.in, 0.0f, dW, dy, x, W, sh.N, sh.in, sh.out);
                double t2 = cpu_ms();
                f[i][rep] = t1 - t0;
                b[i][rep] = t2 - t1;
            }
        const int n = repeats < 64 ? repeats : 64;
        for (int i = 0; i < n_isa; i++) {
            double fm = median(f[i], n), bm = median(b[i], n);
            double flops = 6.0 * sh.N * sh.in * (double)sh.out;
            printf("%-13s %-6s%-5s %9.3f %9.3f %9.1f\n", i ? "" : sh.name,
                   gemm_isa_name(all[isas[i]]), prec[isas[i]] == GEMM_BF16 ? "-bf16" : "", fm, bm,
                   flops / ((fm + bm) * 1e-3) / 1e9);
        }
        free(x), free(W), free(dy), free(y), free(dW), free(dx);
    }
    gemm_select(GEMM_AUTO);
    gemm_set_precision(GEMM_FP32, err, sizeof err);
    return 0;
}
