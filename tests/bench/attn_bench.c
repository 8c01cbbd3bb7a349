/* attn_bench.c - the fused attention's forward and backward, per kernel.
 *
 *   make bench-attn                   (build/attn-bench REPEATS THREADS)
 *
 * The attention of one layer of make bench's S, M and L models (B, T, H,
 * Hkv, hd: 16 256 2 2 32, 16 256 4 4 32, 8 256 4 2 64), full causal, and L
 * with a half window (128). Each repeat (default 15) times one forward and
 * one backward with every kernel this CPU has, BLAS first, then the avx512
 * path's bf16 products (attn_bf16.c) where the CPU has them, alternating, on
 * THREADS OpenMP threads (default 2); prints the median milliseconds of each
 * and the kernels' speed-up over BLAS, so a noisy machine slows all of them
 * alike. A benchmark, not a test: it checks nothing. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "engine/attn.h"
#include "engine/gemm.h"
#include "engine/rng.h"

typedef struct {
    const char *name;
    int B, T, H, Hkv, hd, window;
} shape_t;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
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

int main(int argc, char **argv) {
    const int repeats = argc > 1 ? atoi(argv[1]) : 15, threads = argc > 2 ? atoi(argv[2]) : 2;
    const shape_t shapes[] = {{"S", 16, 256, 2, 2, 32, 256},
                              {"M", 16, 256, 4, 4, 32, 256},
                              {"L", 8, 256, 4, 2, 64, 256},
                              {"L/2", 8, 256, 4, 2, 64, 128}};
    const gemm_isa all[] = {GEMM_GENERIC, GEMM_AVX2, GEMM_AVX512};
    gemm_isa isas[4];
    int n_isa = 0, bf16 = -1; /* bf16: the index of the bf16 entry, or -1 */
    char why[256];
    for (int i = 0; i < 3; i++)
        if (gemm_select(all[i]) == 0) isas[n_isa++] = all[i];
    if (gemm_select(GEMM_AVX512) == 0 && gemm_bf16_available(why, sizeof why))
        bf16 = n_isa, isas[n_isa++] = GEMM_AVX512;
    if (repeats < 1 || threads < 1) {
        fprintf(stderr, "usage: attn-bench [REPEATS >= 1] [THREADS >= 1]\n");
        return 2;
    }
    omp_set_num_threads(threads);
    printf("attention, one layer: median ms of %d alternating repeats, %d threads\n", repeats,
           threads);
    printf("%-4s %-7s %9s %9s %9s\n", "", "kernel", "fwd ms", "bwd ms", "speed-up");
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        const shape_t s = shapes[si];
        const size_t N = (size_t)s.B * s.T, qn = N * s.H * s.hd, kn = N * s.Hkv * s.hd;
        float *buf = malloc((4 * qn + 5 * kn + (size_t)s.B * s.H * s.T) * sizeof *buf);
        float *work = malloc(attn_work_floats(s.hd, s.T, threads) * sizeof *work);
        double *fwd = malloc((size_t)n_isa * repeats * sizeof *fwd);
        double *bwd = malloc((size_t)n_isa * repeats * sizeof *bwd);
        if (!buf || !work || !fwd || !bwd) {
            fprintf(stderr, "attn-bench: out of memory\n");
            return 1;
        }
        float *q = buf, *y = q + qn, *dy = y + qn, *dq = dy + qn, *k = dq + qn, *v = k + kn;
        float *dk = v + kn, *dv = dk + kn, *lse = dv + kn;
        rng_t r;
        rng_seed(&r, 1);
        for (size_t i = 0; i < qn; i++) q[i] = rng_normal(&r), dy[i] = rng_normal(&r);
        for (size_t i = 0; i < kn; i++) k[i] = rng_normal(&r), v[i] = rng_normal(&r);
        for (int rep = -1; rep < repeats; rep++) /* repeat -1 warms up */
            for (int i = 0; i < n_isa; i++) {
                gemm_select(isas[i]);
                gemm_set_precision(i == bf16 ? GEMM_BF16 : GEMM_FP32, why, sizeof why);
                double t0 = now_ms();
                attn_forward(y, lse, q, k, v, s.B, s.T, s.H, s.Hkv, s.hd, s.window, work, threads);
                double t1 = now_ms();
                attn_backward(dq, dk, dv, dy, y, lse, q, k, v, s.B, s.T, s.H, s.Hkv, s.hd, s.window,
                              work, threads);
                double t2 = now_ms();
                if (rep >= 0) {
                    fwd[i * repeats + rep] = t1 - t0;
                    bwd[i * repeats + rep] = t2 - t1;
                }
            }
        double base = 0.0;
        for (int i = 0; i < n_isa; i++) {
            double f = median(fwd + i * repeats, repeats), b = median(bwd + i * repeats, repeats);
            if (i == 0) base = f + b;
            printf("%-4s %-7s %9.3f %9.3f %8.2fx\n", i ? "" : s.name,
                   i == bf16 ? "bf16" : gemm_isa_name(isas[i]), f, b, base / (f + b));
        }
        free(buf), free(work), free(fwd), free(bwd);
    }
    gemm_set_precision(GEMM_FP32, why, sizeof why);
    gemm_select(GEMM_AUTO);
    return 0;
}
