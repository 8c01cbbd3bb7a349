/* gemm.c - register-tiled matrix products for the linear layers (see gemm.h).
 *
 * One product shape serves all three: C (M, n) (+)= A (M, K) B (K, n) with
 * element (i, p) of A at A[i*ars + p*acs] (so A may be a transpose read in
 * place) and row p of B contiguous at B + p*ldb. The kernel keeps an MR x
 * (NV vectors) tile of C in registers, loads NV vectors of a B row and
 * broadcasts MR floats of A per step of p; GEMM_ROWS blocks the loops
 * around it so B's panels stay in L1 and A's rows in L2. The forward reads B = W^T (packed
 * once per call), dx = dy W reads B = W as it is, and dW = dy^T x reads A = dy
 * transposed in place and B = x, in chunks of the kernel's kc rows so a chunk
 * of x stays in cache across the row tiles. */
#include "engine/gemm.h"

#include <cblas.h>
#include <immintrin.h>
#include <omp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gemm_bf16.h"
#include "engine/ops.h"
#include "engine/prof.h"
#include "engine/transpose.h"

#define MR 6 /* rows of C per register tile */

static gemm_isa current = GEMM_AUTO;
static gemm_precision precision = GEMM_FP32;

/* ------------------------------------------------------------------ kernels */

/* One tile: rows [0, mr) and nv vectors of VW columns of C; mr and nv are
 * constants where the dispatch below calls it, so the loops unroll and acc
 * stays in registers. acc_in: add to C instead of overwriting it. */
#define GEMM_TILE(NAME, TARGET, VT, VTU, VW, NVMAX, FMA, SET1)                                     \
    __attribute__((target(TARGET), always_inline)) static inline void NAME(                        \
        const int mr, const int nv_, int K, const float *A, ptrdiff_t ars, ptrdiff_t acs,          \
        const float *B, ptrdiff_t ldb, float *C, ptrdiff_t ldc, int acc_in) {                      \
        const int nv = nv_ < NVMAX ? nv_ : NVMAX; /* cases past NVMAX are never taken */           \
        VT acc[MR][NVMAX];                                                                         \
        _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++) {                                     \
            _Pragma("GCC unroll 8") for (int v = 0; v < nv; v++) {                                 \
                acc[r][v] = acc_in ? *(const VTU *)(C + r * ldc + v * VW) : (VT){0};               \
            }                                                                                      \
        }                                                                                          \
        for (int p = 0; p < K; p++) {                                                              \
            VT b[NVMAX];                                                                           \
            const float *a = A + p * acs;                                                          \
            _Pragma("GCC unroll 8") for (int v = 0; v < nv; v++) b[v] =                            \
                *(const VTU *)(B + p * ldb + v * VW);                                              \
            _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++) {                                 \
                VT ar = SET1(a[r * ars]);                                                          \
                _Pragma("GCC unroll 8") for (int v = 0; v < nv; v++) acc[r][v] =                   \
                    FMA(ar, b[v], acc[r][v]);                                                      \
            }                                                                                      \
        }                                                                                          \
        _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++) {                                     \
            _Pragma("GCC unroll 8") for (int v = 0; v < nv; v++) {                                 \
                *(VTU *)(C + r * ldc + v * VW) = acc[r][v];                                        \
            }                                                                                      \
        }                                                                                          \
    }

/* Rows [m0, m1) of C over all n columns (n a multiple of VW). ldb 0: B is
 * packed by pack_panels for this kernel's panel width (NVMAX vectors).
 * Blocked as Goto's GEMM is: the depth in chunks of KCB so a chunk of a
 * column panel of B (KCB x panel floats) stays in L1 while a block of MCB
 * rows runs over it tile by tile, and that block of A (MCB x KCB) stays in
 * L2 while it runs over every panel. With PACK, a wide product's operands
 * are copied as they are read (pack_b, pack_a; see PACK_MIN_ROWS): a B read
 * in place with a power-of-two row stride maps its panel onto a few L1 sets,
 * and A^T read in place (the weight gradient's dy, the Gram matrix's X)
 * touches a line per step of p. A chunk after the first adds to what the last one stored, so
 * each output is still summed over p = 0, 1, ... K-1 in order: the same
 * floats as one pass, packed or not. */
#define GEMM_ROWS(NAME, TILE, TARGET, VW, NVMAX, KCB, PACK)                                        \
    __attribute__((target(TARGET))) static void NAME(                                              \
        int m0, int m1, int n, int K, const float *A, ptrdiff_t ars, ptrdiff_t acs,                \
        const float *B, ptrdiff_t ldb, float *C, ptrdiff_t ldc, int acc_in) {                      \
        const int pack = PACK && n >= PACK_MIN_COLS && m1 - m0 >= PACK_MIN_ROWS;                   \
        for (int k0 = 0; k0 < K; k0 += KCB) {                                                      \
            const int kc = K - k0 < KCB ? K - k0 : KCB, acc = acc_in || k0 > 0;                    \
            const float *Bp =                                                                      \
                pack && ldb ? pack_b(B + (ptrdiff_t)k0 * ldb, ldb, kc, n, NVMAX * VW) : NULL;      \
            for (int i0 = m0; i0 < m1; i0 += MCB) {                                                \
                const int i1 = m1 - i0 < MCB ? m1 : i0 + MCB;                                      \
                const float *Ap = pack && acs != 1                                                 \
                                      ? pack_a(A + i0 * ars + k0 * acs, ars, acs, i1 - i0, kc)     \
                                      : NULL;                                                      \
                for (int j = 0; j < n; j += NVMAX * VW) {                                          \
                    const int nv = (n - j) / VW < NVMAX ? (n - j) / VW : NVMAX;                    \
                    const ptrdiff_t ldbj = ldb && !Bp ? ldb : nv * VW;                             \
                    const float *Bj = Bp    ? Bp + (ptrdiff_t)j * kc                               \
                                      : ldb ? B + j + (ptrdiff_t)k0 * ldb                          \
                                            : B + (ptrdiff_t)j * K + (ptrdiff_t)k0 * ldbj;         \
                    for (int i = i0; i < i1; i += MR) {                                            \
                        const int mr = i1 - i < MR ? i1 - i : MR;                                  \
                        const float *Ai =                                                          \
                            Ap ? Ap + (ptrdiff_t)(i - i0) * kc : A + i * ars + k0 * acs;           \
                        const ptrdiff_t tars = Ap ? 1 : ars, tacs = Ap ? mr : acs;                 \
                        float *Ci = C + i * ldc + j;                                               \
                        switch (mr * 8 + nv) {                                                     \
                            GEMM_CASES(TILE, 1, Ai, tars, tacs, Bj, ldbj, Ci, ldc, acc, kc)        \
                            GEMM_CASES(TILE, 2, Ai, tars, tacs, Bj, ldbj, Ci, ldc, acc, kc)        \
                            GEMM_CASES(TILE, 3, Ai, tars, tacs, Bj, ldbj, Ci, ldc, acc, kc)        \
                            GEMM_CASES(TILE, 4, Ai, tars, tacs, Bj, ldbj, Ci, ldc, acc, kc)        \
                            GEMM_CASES(TILE, 5, Ai, tars, tacs, Bj, ldbj, Ci, ldc, acc, kc)        \
                            GEMM_CASES(TILE, 6, Ai, tars, tacs, Bj, ldbj, Ci, ldc, acc, kc)        \
                        }                                                                          \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

/* The products GEMM_ROWS packs for (PACK 1): at least this many rows of C
 * in the thread's share and columns. Packing copies each operand once per
 * chunk; it pays when the kernel would otherwise read B with a power-of-two
 * row stride (a few L1 sets) or A^T a line per step of p, and costs where the
 * product is too small to amortise the copy. The copies are fixed-size
 * (PACK_PANEL, MR floats), so the compiler emits vector moves rather than a
 * memcpy call per row. Measured on an AMD EPYC (Zen 4, 32 KB L1), AVX2
 * kernel, 2 threads, weight gradients at make bench's shapes, medians of 7
 * interleaved rounds of process CPU time against the earlier thresholds (128
 * rows, 256 columns, a memcpy call per row): M's qkv and fc 1.53x and 1.35x
 * faster, L's qkv, fc and proj 1.51x, 1.44x and 1.23x, the default spec's
 * lm_head 1.23x; M's proj (64 rows a thread) 1.01x. S's products (64
 * columns, or 32 rows a thread) stay in place: packed, they measured
 * 0.96-1.11x, within the noise. The AVX-512 kernel (a 64-float
 * panel, KCB 128) lost 2-20% on every shape packed, so it reads its operands
 * in place. */
#define PACK_MIN_ROWS 64
#define PACK_MIN_COLS 128
#define PACK_PANEL    16 /* the AVX2 kernel's panel, the only one packed */

/* GEMM_ROWS's packed operands, per thread (the OpenMP team's threads live as
 * long as the process; reachable until exit like pack_buf below). */
static _Thread_local float *rows_a_buf, *rows_b_buf;
static _Thread_local size_t rows_a_cap, rows_b_cap;

/* *buf grown to `need` floats; NULL when out of memory (the caller then reads
 * its operand in place). */
static float *rows_reserve(float **buf, size_t *cap, size_t need) {
    if (need > *cap) {
        float *b = realloc(*buf, need * sizeof *b);
        if (!b) return NULL;
        *buf = b;
        *cap = need;
    }
    return *buf;
}

/* kc rows of B (row p at B + p*ldb, n columns) as panels of `panel` columns
 * (the last may be narrower), one after another, each kc rows of its width:
 * panel j starts at j*kc. NULL when out of memory. */
static const float *pack_b(const float *B, ptrdiff_t ldb, int kc, int n, int panel) {
    float *d = rows_reserve(&rows_b_buf, &rows_b_cap, (size_t)kc * n);
    if (!d) return NULL;
    for (int j = 0; j < n; j += panel) {
        const int w = n - j < panel ? n - j : panel;
        float *dj = d + (size_t)j * kc;
        if (w == PACK_PANEL) /* a copy of constant size: vector moves, not a call per row */
            for (int p = 0; p < kc; p++)
                memcpy(dj + (size_t)p * PACK_PANEL, B + p * ldb + j, sizeof(float) * PACK_PANEL);
        else
            for (int p = 0; p < kc; p++)
                memcpy(dj + (size_t)p * w, B + p * ldb + j, (size_t)w * sizeof *d);
    }
    return d;
}

/* Rows [0, m) of A (element (i, p) at A[i*ars + p*acs]) over kc steps of p,
 * as tiles of MR rows (the last may be shorter): tile t starts at t*MR*kc
 * and holds element (r, p) of its mr rows at p*mr + r, so the kernel reads it
 * with ars 1, acs mr. NULL when out of memory. */
static const float *pack_a(const float *A, ptrdiff_t ars, ptrdiff_t acs, int m, int kc) {
    float *d = rows_reserve(&rows_a_buf, &rows_a_cap, (size_t)m * kc);
    if (!d) return NULL;
    for (int i = 0; i < m; i += MR) {
        const int mr = m - i < MR ? m - i : MR;
        float *di = d + (size_t)i * kc;
        const float *ai = A + i * ars;
        if (ars == 1 && mr == MR) /* the weight gradient's dy^T: MR floats of a row of dy */
            for (int p = 0; p < kc; p++)
                memcpy(di + (size_t)p * MR, ai + p * acs, sizeof(float) * MR);
        else
            for (int p = 0; p < kc; p++)
                for (int r = 0; r < mr; r++) di[(size_t)p * mr + r] = ai[r * ars + p * acs];
    }
    return d;
}

/* Rows of A per block of GEMM_ROWS (a multiple of MR). */
#define MCB 96

/* The cases of one row count: 1 to 4 vectors (a kernel with fewer never
 * reaches the larger ones). */
#define GEMM_CASES(TILE, R, ...)                                                                   \
    case R * 8 + 1:                                                                                \
        GEMM_CALL(TILE, R, 1, __VA_ARGS__);                                                        \
        break;                                                                                     \
    case R * 8 + 2:                                                                                \
        GEMM_CALL(TILE, R, 2, __VA_ARGS__);                                                        \
        break;                                                                                     \
    case R * 8 + 3:                                                                                \
        GEMM_CALL(TILE, R, 3, __VA_ARGS__);                                                        \
        break;                                                                                     \
    case R * 8 + 4:                                                                                \
        GEMM_CALL(TILE, R, 4, __VA_ARGS__);                                                        \
        break;
#define GEMM_CALL(TILE, R, V, A, ars, acs, B, ldb, C, ldc, acc_in, K)                              \
    TILE(R, V, K, A, ars, acs, B, ldb, C, ldc, acc_in)

typedef float f8_t __attribute__((vector_size(32)));
typedef float f8u_t __attribute__((vector_size(32), aligned(4)));
typedef float f16_t __attribute__((vector_size(64)));
typedef float f16u_t __attribute__((vector_size(64), aligned(4)));

/* AVX2: 6 x 2 vectors of 8 (12 accumulators of 16 registers). */
GEMM_TILE(tile_avx2, "avx2,fma", f8_t, f8u_t, 8, 2, _mm256_fmadd_ps, _mm256_set1_ps)
GEMM_ROWS(rows_avx2, tile_avx2, "avx2,fma", 8, 2, 384, 1)
/* AVX-512: 6 x 4 vectors of 16 (24 accumulators of 32 registers). */
GEMM_TILE(tile_avx512, "avx512f", f16_t, f16u_t, 16, 4, _mm512_fmadd_ps, _mm512_set1_ps)
GEMM_ROWS(rows_avx512, tile_avx512, "avx512f", 16, 4, 128, 0)

typedef void rows_fn(int m0, int m1, int n, int K, const float *A, ptrdiff_t ars, ptrdiff_t acs,
                     const float *B, ptrdiff_t ldb, float *C, ptrdiff_t ldc, int acc_in);

/* ------------------------------------------------------------ selection */

/* Whether this CPU runs a path's kernels (the OS saves the registers too:
 * __builtin_cpu_supports checks that for AVX and AVX-512). */
static int cpu_has(gemm_isa isa) {
    __builtin_cpu_init();
    switch (isa) {
    case GEMM_AVX512:
        return __builtin_cpu_supports("avx512f");
    case GEMM_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    default:
        return 1;
    }
}

int gemm_select(gemm_isa isa) {
    if (isa == GEMM_AUTO)
        isa = cpu_has(GEMM_AVX512) ? GEMM_AVX512 : cpu_has(GEMM_AVX2) ? GEMM_AVX2 : GEMM_GENERIC;
    if (!cpu_has(isa)) return -1;
    current = isa;
    if (isa != GEMM_AVX512) precision = GEMM_FP32; /* bf16 runs on the avx512 path only */
    return 0;
}

const char *gemm_isa_supported(void) {
    return cpu_has(GEMM_AVX512) ? "avx512 avx2 generic"
           : cpu_has(GEMM_AVX2) ? "avx2 generic"
                                : "generic";
}

int gemm_select_env(char *err, size_t errlen) {
    static const gemm_isa paths[] = {GEMM_AVX512, GEMM_AVX2, GEMM_GENERIC};
    const char *v = getenv("NIGHTSHIFT_ISA");
    if (!v || !*v || !strcmp(v, "auto")) return gemm_select(GEMM_AUTO);
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
        if (strcmp(v, gemm_isa_name(paths[i]))) continue;
        if (gemm_select(paths[i]) == 0) return 0;
        snprintf(err, errlen,
                 "NIGHTSHIFT_ISA=%s: this CPU cannot run the %s kernels (it lacks %s); its "
                 "paths: %s",
                 v, v, paths[i] == GEMM_AVX512 ? "AVX-512F" : "AVX2 or FMA", gemm_isa_supported());
        return -1;
    }
    snprintf(err, errlen, "NIGHTSHIFT_ISA=%s: not a kernel path (avx512, avx2, generic or auto)",
             v);
    return -1;
}

gemm_isa gemm_current(void) {
    /* first use: NIGHTSHIFT_ISA's path (engine commands have checked it), else the widest */
    char err[256];
    if (current == GEMM_AUTO && gemm_select_env(err, sizeof err) < 0) gemm_select(GEMM_AUTO);
    return current;
}

int gemm_bf16_available(char *why, size_t len) {
    if (!gemm_bf16_cpu()) {
        snprintf(why, len, "this CPU lacks AVX512_BF16 (vdpbf16ps), which bf16 products need");
        return 0;
    }
    if (gemm_current() != GEMM_AVX512) {
        snprintf(why, len,
                 "bf16 products run on the avx512 kernel path, and the %s path is in use "
                 "(NIGHTSHIFT_ISA=%s)",
                 gemm_isa_name(gemm_current()), gemm_isa_name(gemm_current()));
        return 0;
    }
    return 1;
}

int gemm_set_precision(gemm_precision p, char *err, size_t errlen) {
    if (p == GEMM_BF16 && !gemm_bf16_available(err, errlen)) return -1;
    precision = p;
    return 0;
}

int gemm_set_precision_named(const char *name, char *err, size_t errlen) {
    char why[200];
    if (!strcmp(name, "fp32")) return gemm_set_precision(GEMM_FP32, err, errlen);
    if (!strcmp(name, "auto"))
        return gemm_set_precision(gemm_bf16_available(why, sizeof why) ? GEMM_BF16 : GEMM_FP32, err,
                                  errlen);
    if (strcmp(name, "bf16")) {
        snprintf(err, errlen, "train.precision: %s: not fp32, bf16 or auto", name);
        return -1;
    }
    if (gemm_set_precision(GEMM_BF16, why, sizeof why) == 0) return 0;
    snprintf(err, errlen, "train.precision: bf16: %s; use fp32 (or auto: bf16 where it runs)", why);
    return -1;
}

gemm_precision gemm_current_precision(void) {
    return precision;
}

const char *gemm_precision_name(gemm_precision p) {
    return p == GEMM_BF16 ? "bf16" : "fp32";
}

const char *gemm_isa_name(gemm_isa isa) {
    switch (isa) {
    case GEMM_GENERIC:
        return "generic";
    case GEMM_AVX2:
        return "avx2";
    case GEMM_AVX512:
        return "avx512";
    default:
        return "auto";
    }
}

/* A kernel, its column panel width (floats) and the rows of dy and x per
 * chunk of the weight gradient (kc) when n is that product's width (in). The
 * AVX2 kernel reads dy^T and x in place there, a line of each per step of p
 * for every 6 x 16 tile; with 64-row chunks the lines a row block shares
 * stay in L1 when x's rows are at most 64 floats (256 bytes apart, which a
 * 256-row chunk maps onto too few L1 sets). Measured on an AMD EPYC (Zen 4,
 * 32 KB L1), 2 threads, the same products interleaved in one process,
 * medians of 41 per-repeat ratios: the weight gradients of S's 64-wide
 * inputs (qkv, fc, lm_head) took 7-19% less CPU time than with 256 rows;
 * 32 and 128 rows did worse; wider inputs (M's 128, S's and M's MLP
 * projections) gained nothing measurable, and keep 256 rows. The AVX-512
 * kernel (64-float panels) lost 1-3% with 64 rows and keeps 256. */
typedef struct {
    rows_fn *rows;
    int panel, kc;
} kernel_t;

/* The kernel for a product whose result has n columns; rows NULL for BLAS
 * (the generic path, or n not a whole number of vectors). Blocked, it takes
 * products of any width: against OpenBLAS's SKYLAKEX kernels it uses 5-35%
 * less CPU time at make bench's shapes and the default spec's lm_head
 * (tests/bench/gemm_bench.c). */
static kernel_t kernel_for(int n) {
    switch (gemm_current()) {
    case GEMM_AVX512:
        if (n % 16 == 0) return (kernel_t){rows_avx512, 64, 256};
        __attribute__((fallthrough)); /* AVX-512 CPUs have AVX2 */
    case GEMM_AVX2:
        if (n % 8 == 0) return (kernel_t){rows_avx2, 16, n <= 64 ? 64 : 256};
        return (kernel_t){NULL, 0, 0};
    default:
        return (kernel_t){NULL, 0, 0};
    }
}

_Static_assert(MR == GEMM_MR, "gemm.h publishes the tile height");

gemm_rows_fn *gemm_rows_for(int n) {
    switch (gemm_current()) {
    case GEMM_AVX512:
        if (n % 16 == 0) return rows_avx512;
        __attribute__((fallthrough)); /* AVX-512 CPUs have AVX2 */
    case GEMM_AVX2:
        return n % 8 == 0 ? rows_avx2 : NULL;
    default:
        return NULL;
    }
}

/* Below this many multiply-adds a product runs on the calling thread. */
#define GEMM_PARALLEL_MIN (1 << 18)

/* This thread's share [*m0, *m1) of M rows, in whole MR-row tiles. */
static void thread_rows(int M, int *m0, int *m1) {
    int t = omp_get_thread_num(), nt = omp_get_num_threads(), tiles = (M + MR - 1) / MR;
    *m0 = (int)((long)tiles * t / nt) * MR;
    *m1 = (int)((long)tiles * (t + 1) / nt) * MR;
    if (*m1 > M) *m1 = M;
}

/* This thread's share [*j0, *j1) of n columns, in whole panels of `panel`. */
static void thread_cols(int n, int panel, int *j0, int *j1) {
    int t = omp_get_thread_num(), nt = omp_get_num_threads(), panels = (n + panel - 1) / panel;
    *j0 = (int)((long)panels * t / nt) * panel;
    *j1 = (int)((long)panels * (t + 1) / nt) * panel;
    if (*j1 > n) *j1 = n;
}

/* --------------------------------------------------------------- products */

/* Products the kernel does not take, split over the team by rows like the
 * kernel's, each thread's share one single-threaded BLAS call (OpenBLAS's
 * OpenMP build runs single-threaded inside a parallel region): no hand-offs
 * inside BLAS, whose threads otherwise meet by spinning on sched_yield.
 * Small products stay one plain BLAS call. */
static void blas_forward(float *y, const float *x, int ldx, const float *W, int N, int in,
                         int out) {
    if ((double)N * in * out < GEMM_PARALLEL_MIN || omp_get_max_threads() < 2) {
        ops_linear_forward(y, x, ldx, W, N, in, out);
        return;
    }
    double t0 = prof_begin();
#pragma omp parallel
    {
        int m0, m1;
        thread_rows(N, &m0, &m1);
        if (m0 < m1)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m1 - m0, out, in, 1.0f,
                        x + (size_t)m0 * ldx, ldx, W, in, 0.0f, y + (size_t)m0 * out, out);
    }
    prof_end(PROF_MATMUL, t0);
}

static void blas_backward(float *dx, int ldx, float beta, float *dW, const float *dy,
                          const float *x, const float *W, int N, int in, int out) {
    if ((double)N * in * out < GEMM_PARALLEL_MIN || omp_get_max_threads() < 2) {
        ops_linear_backward(dx, ldx, beta, dW, dy, x, W, N, in, out);
        return;
    }
    double t0 = prof_begin();
#pragma omp parallel
    {
        int m0, m1;
        /* dW (out, in) += dy^T x, split along its longer side: each thread
         * packs all of the operand along the other side, so that one is the
         * smaller (x is N x in, dy N x out). */
        if (out >= in) {
            thread_rows(out, &m0, &m1);
            if (m0 < m1)
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m1 - m0, in, N, 1.0f, dy + m0,
                            out, x, ldx, 1.0f, dW + (size_t)m0 * in, in);
        } else {
            thread_rows(in, &m0, &m1);
            if (m0 < m1)
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, m1 - m0, N, 1.0f, dy, out,
                            x + m0, ldx, 1.0f, dW + m0, in);
        }
        if (dx) {
            thread_rows(N, &m0, &m1);
            if (m0 < m1)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m1 - m0, in, out, 1.0f,
                            dy + (size_t)m0 * out, out, W, in, beta, dx + (size_t)m0 * ldx, ldx);
        }
    }
    prof_end(PROF_MATMUL, t0);
}

/* The packed weight, grown as needed by the calling thread and filled by
 * its team; owned by this module per calling thread and kept for the next
 * call (reachable until exit). */
static _Thread_local float *pack_buf;
static _Thread_local size_t pack_cap;

/* This thread's pack buffer grown to `need` floats; NULL when out of memory. */
static float *pack_reserve(size_t need) {
    if (need > pack_cap) {
        float *b = realloc(pack_buf, need * sizeof *b);
        if (!b) return NULL;
        pack_buf = b;
        pack_cap = need;
    }
    return pack_buf;
}

/* Panel j0 of B (K, n) with element (p, c) at src[p*sp + c*sc], one of the
 * panels of `panel` columns (the last may be narrower) laid out one after
 * another in dst, each K rows of its width: the panel starts at dst + j0*K.
 * Rows of B are either contiguous in src (sc 1: copied row by row) or its
 * columns are (sp 1: the forward's W^T, the panel's w rows of W transposed
 * in 8 x 8 blocks). */
static void pack_panel(float *dst, const float *src, ptrdiff_t sp, ptrdiff_t sc, int K, int n,
                       int panel, int j0) {
    const int w = n - j0 < panel ? n - j0 : panel;
    float *d = dst + (size_t)j0 * K;
    if (sc == 1) {
        for (int p = 0; p < K; p++)
            memcpy(d + (size_t)p * w, src + p * sp + j0, (size_t)w * sizeof *d);
        return;
    }
    if (sp == 1) {
        transpose_matrix(d, w, src + j0 * sc, sc, w, K);
        return;
    }
    for (int p = 0; p < K; p++)
        for (int c = 0; c < w; c++) d[(size_t)p * w + c] = src[p * sp + (j0 + c) * sc];
}

/* Inside a parallel region: the team packs B's panels into dst, without a
 * barrier at the end (the caller places one before reading dst). */
static void pack_panels_team(float *dst, const float *src, ptrdiff_t sp, ptrdiff_t sc, int K, int n,
                             int panel) {
    const int panels = (n + panel - 1) / panel;
#pragma omp for schedule(static) nowait
    for (int j = 0; j < panels; j++) pack_panel(dst, src, sp, sc, K, n, panel, j * panel);
}

const float *gemm_pack_forward(const float *W, int in, int out, gemm_rows_fn **rows) {
    if (precision == GEMM_BF16) {
        *rows = NULL;
        return NULL;
    }
    kernel_t kn = kernel_for(out);
    float *Wp = kn.rows ? pack_reserve((size_t)in * out) : NULL;
    *rows = Wp ? kn.rows : NULL;
    if (!Wp) return NULL;
    for (int j = 0; j < out; j += kn.panel) pack_panel(Wp, W, 1, in, in, out, kn.panel, j);
    return Wp;
}

void gemm_keep_inputs(int on) {
    if (precision == GEMM_BF16) gemm_bf16_keep_inputs(on);
}

void gemm_linear_forward(float *y, const float *x, int ldx, const float *W, int N, int in,
                         int out) {
    if (precision == GEMM_BF16) {
        gemm_bf16_forward(y, x, ldx, W, N, in, out);
        return;
    }
    kernel_t kn = kernel_for(out);
    float *Wp = kn.rows ? pack_reserve((size_t)in * out) : NULL;
    if (!Wp) {
        blas_forward(y, x, ldx, W, N, in, out);
        return;
    }
    double t0 = prof_begin();
#pragma omp parallel if ((double)N * in * out >= GEMM_PARALLEL_MIN)
    {
        pack_panels_team(Wp, W, 1, in, in, out, kn.panel);
#pragma omp barrier
        int m0, m1;
        thread_rows(N, &m0, &m1);
        if (m0 < m1) kn.rows(m0, m1, out, in, x, ldx, 1, Wp, 0, y, out, 0);
    }
    prof_end(PROF_MATMUL, t0);
}

void gemm_linear_backward(float *dx, int ldx, float beta, float *dW, const float *dy,
                          const float *x, const float *W, int N, int in, int out) {
    if (precision == GEMM_BF16) {
        gemm_bf16_backward(dx, ldx, beta, dW, dy, x, W, N, in, out);
        return;
    }
    kernel_t kn = kernel_for(in);
    float *Wp = kn.rows && dx ? pack_reserve((size_t)out * in) : NULL;
    if (!kn.rows || (dx && !Wp)) {
        blas_backward(dx, ldx, beta, dW, dy, x, W, N, in, out);
        return;
    }
    double t0 = prof_begin();
#pragma omp parallel if ((double)N * in * out >= GEMM_PARALLEL_MIN)
    {
        /* W's panels for dx are packed while the team starts on dW */
        if (dx) pack_panels_team(Wp, W, in, 1, out, in, kn.panel);
        int m0, m1, j0 = 0, j1 = in;
        /* dW (out, in) += dy^T x: A = dy^T read in place, B = x, K = N in
         * chunks. The team splits dW along the side that leaves each thread
         * the fewer floats of dy and x to read (and to copy where the kernel
         * packs them): its rows (all of x, its rows of dy^T) when in <= out,
         * else its columns (all of dy^T, its columns of x). */
        if (in <= out) {
            thread_rows(out, &m0, &m1);
        } else {
            m0 = 0, m1 = out;
            thread_cols(in, kn.panel, &j0, &j1);
        }
        if (m0 < m1 && j0 < j1)
            for (int k0 = 0; k0 < N; k0 += kn.kc) {
                int kc = N - k0 < kn.kc ? N - k0 : kn.kc;
                kn.rows(m0, m1, j1 - j0, kc, dy + (size_t)k0 * out, 1, out,
                        x + (size_t)k0 * ldx + j0, ldx, dW + j0, in, 1);
            }
        /* dx (N, in) (+)= dy (N, out) W (out, in) */
        if (dx) {
#pragma omp barrier
            thread_rows(N, &m0, &m1);
            if (m0 < m1) kn.rows(m0, m1, in, out, dy, out, 1, Wp, 0, dx, ldx, beta != 0.0f);
        }
    }
    prof_end(PROF_MATMUL, t0);
}
