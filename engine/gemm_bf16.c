/* gemm_bf16.c - bfloat16 products into float32 accumulators (see gemm_bf16.h).
 *
 * vdpbf16ps multiplies 16 lanes of bf16 pairs: lane c of the accumulator
 * gains a0*b0 + a1*b1, (a0, a1) and (b0, b1) the two bf16 halves of lane c of
 * its operands. A product C (M, n) (+)= A (M, K) B (K, n) therefore runs over
 * the depth in pairs: A is read as pairs (A[i][2p], A[i][2p+1]), broadcast
 * one 32-bit pair at a time, and B is packed so that lane c of row p holds
 * (B[2p][c], B[2p+1][c]), in panels of 64 columns as the float32 AVX-512
 * kernel reads B (gemm.c). A pair is two bf16 bit patterns in one 32-bit
 * slot of a float array: the packing only moves those bits (no float
 * arithmetic touches them until vdpbf16ps). An odd depth pairs its last
 * element with a zero; a width that is not a whole number of vectors is
 * padded with zero columns and stored through a mask.
 *
 * The three products of a linear layer:
 *   forward  y = x W^T:  A = x rounded row by row, B = W^T: lane c of row p
 *            is the pair p of W's row c, i.e. W rounded and transposed as a
 *            matrix of 32-bit pairs;
 *   dx = dy W:           A = dy rounded row by row, B = W's rows 2p, 2p+1
 *            interleaved;
 *   dW += dy^T x:        A = dy^T: the rows 2p, 2p+1 of dy interleaved and
 *            transposed, B = x's rows 2p, 2p+1 interleaved; or, where x is
 *            the narrower, T = x^T dy with the roles swapped and dW += T^T.
 * Hand-written rather than through a library: Debian 12's OpenBLAS 0.3.21
 * has no sbgemm for these CPUs in its OpenMP build's dispatch, and oneDNN is
 * not a dependency of the engine. */
#include "engine/gemm_bf16.h"

#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine/prof.h"
#include "engine/transpose.h"

#define TARGET "avx512f,avx512bf16"
#define MR     6   /* rows of C per register tile */
#define NVMAX  4   /* vectors of 16 columns per panel */
#define PANEL  64  /* columns per panel of B */
#define KCB    128 /* pairs per depth chunk: a panel's chunk is 32 KB */
#define MCB    96  /* rows of A per block */

/* Below this many multiply-adds a product runs on the calling thread. */
#define PARALLEL_MIN (1 << 18)

int gemm_bf16_cpu(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
}

float gemm_bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7f800000u) == 0) /* vcvtneps2bf16 takes a denormal for zero */
        u &= 0x80000000u;
    else if ((u & 0x7fffffffu) > 0x7f800000u)
        u |= 0x00400000u; /* NaN stays NaN, quiet */
    else
        u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline int round16(int n) {
    return (n + 15) & ~15;
}

/* Pairs of a product's depth K as packed: a whole number of AMX tiles' 16,
 * the pairs past K zero (they add exact zeros on either kernel). */
static inline int depth_pairs(int K) {
    return round16((K + 1) / 2);
}

/* ----------------------------------------------------------------- packing */

/* 16 floats from src (the lanes of m) rounded to bf16, widened to the low
 * halves of 16 32-bit lanes; also stored as 16 bf16 at row where it is not
 * NULL (zero past m's lanes). */
__attribute__((target(TARGET))) static inline __m512i low_halves(const float *src, __mmask16 m,
                                                                 uint16_t *row) {
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src));
    if (row) _mm256_storeu_si256((__m256i *)row, (__m256i)h);
    return _mm512_cvtepu16_epi32((__m256i)h);
}

/* Rows [r0, r1) of src (row stride lds, K floats each) rounded to bf16 into
 * dst's rows (ldd floats = 2*ldd bf16, ldd a multiple of 8 and >= K/2):
 * pairs along the row, zero from K to the row's end. */
__attribute__((target(TARGET))) void gemm_bf16_round_rows(float *dst, ptrdiff_t ldd,
                                                          const float *src, ptrdiff_t lds, int r0,
                                                          int r1, int K) {
    for (int i = r0; i < r1; i++) {
        const float *s = src + i * lds;
        uint16_t *d = (uint16_t *)(dst + i * ldd);
        for (int k = 0; k < 2 * ldd; k += 16) {
            const __mmask16 m = K - k >= 16 ? 0xffff : K > k ? (__mmask16)((1u << (K - k)) - 1) : 0;
            __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, s + k));
            _mm256_storeu_si256((__m256i *)(d + k), (__m256i)h);
        }
    }
}

/* gemm_bf16_pair_rows, and where rows is not NULL each source row also
 * rounded into rows as gemm_bf16_round_rows rounds it (row r at rows +
 * r*ldr floats, columns [0, round16(n)) written, zero from n). */
__attribute__((target(TARGET))) static void pair_rows_into(float *dst, ptrdiff_t ldd,
                                                           const float *src, ptrdiff_t lds, int K,
                                                           int n, int p0, int p1, float *rows,
                                                           ptrdiff_t ldr) {
    for (int p = p0; p < p1; p++) {
        const float *s0 = 2 * p < K ? src + (ptrdiff_t)(2 * p) * lds : NULL;
        const float *s1 = 2 * p + 1 < K ? s0 + lds : NULL;
        uint16_t *r0 = rows && s0 ? (uint16_t *)(rows + (ptrdiff_t)(2 * p) * ldr) : NULL;
        uint16_t *r1 = rows && s1 ? r0 + 2 * ldr : NULL;
        float *d = dst + p * ldd;
        for (int c = 0; c < n; c += 16) {
            const __mmask16 m = n - c >= 16 ? 0xffff : (__mmask16)((1u << (n - c)) - 1);
            const __m512i lo =
                s0 ? low_halves(s0 + c, m, r0 ? r0 + c : NULL) : _mm512_setzero_si512();
            const __m512i hi =
                s1 ? low_halves(s1 + c, m, r1 ? r1 + c : NULL) : _mm512_setzero_si512();
            _mm512_storeu_si512(d + c, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
        }
    }
}

/* Pair rows [p0, p1) of dst (ldd floats apart, round16(n) pairs each) from
 * src (K rows of n floats, row stride lds): lane c of pair row p is
 * (src[2p][c], src[2p+1][c]) rounded, zero past row K - 1 (a pair row
 * wholly past it is zero), and the lanes from n to round16(n) zero. */
void gemm_bf16_pair_rows(float *dst, ptrdiff_t ldd, const float *src, ptrdiff_t lds, int K, int n,
                         int p0, int p1) {
    pair_rows_into(dst, ldd, src, lds, K, n, p0, p1, NULL, 0);
}

/* gemm_bf16_pair_cols over the pairs [q0, q1) of the depth only (multiples
 * of 16): a block of 32 source rows at a time across the columns, so the
 * rows stay in L1 while they are read. */
__attribute__((target(TARGET))) static void pair_cols_range(float *dst, ptrdiff_t ldd,
                                                            const float *src, ptrdiff_t lds, int K,
                                                            int c0, int c1, int q0, int q1,
                                                            float *rows, ptrdiff_t ldr) {
    float blk[16 * 16] __attribute__((aligned(64)));
    for (int p0 = q0; p0 < q1; p0 += 16) {
        for (int c = c0; c < c1; c += 16) {
            const int w = c1 - c < 16 ? c1 - c : 16;
            const __mmask16 m = w == 16 ? 0xffff : (__mmask16)((1u << w) - 1);
            for (int q = 0; q < 16; q++) {
                const int r = 2 * (p0 + q);
                uint16_t *r0 = rows && r < K ? (uint16_t *)(rows + r * ldr) + c : NULL;
                uint16_t *r1 = rows && r + 1 < K ? r0 + 2 * ldr : NULL;
                const __m512i lo =
                    r < K ? low_halves(src + r * lds + c, m, r0) : _mm512_setzero_si512();
                const __m512i hi = r + 1 < K ? low_halves(src + (ptrdiff_t)(r + 1) * lds + c, m, r1)
                                             : _mm512_setzero_si512();
                _mm512_store_si512(blk + 16 * q, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
            }
            transpose_matrix(dst + c * ldd + p0, ldd, blk, 16, 16, w);
        }
    }
}

/* Rows [c0, c1) of dst (ldd floats apart; c0 a multiple of 16, c1 <= n):
 * row c is column c of src (K rows, row stride lds) as depth_pairs(K) pairs
 * (src[2p][c], src[2p+1][c]) rounded, zero past row K - 1: gemm_bf16_pair_rows
 * and a transpose in one pass, 16 x 16 pairs at a time through a block that
 * stays in L1 (the two passes wrote and re-read the whole paired matrix: 8%
 * of make bench's M bf16 step). Where rows is not NULL, the source's rows
 * are rounded into it too, as gemm_bf16_round_rows rounds them (row r at
 * rows + r*ldr floats, columns [c0, c0 + round16(c1 - c0)) written, zero
 * from c1), so a source both products read is read once. */
void gemm_bf16_pair_cols(float *dst, ptrdiff_t ldd, const float *src, ptrdiff_t lds, int K, int c0,
                         int c1, float *rows, ptrdiff_t ldr) {
    pair_cols_range(dst, ldd, src, lds, K, c0, c1, 0, depth_pairs(K), rows, ldr);
}

/* Rows [r0, r1) of rounded rows (ldr floats = 2*ldr bf16 apart) zero from
 * bf16 column `from` to the row's end. */
static void zero_tails(float *rows, ptrdiff_t ldr, int r0, int r1, int from) {
    if (from < 2 * ldr)
        for (int r = r0; r < r1; r++)
            memset((uint16_t *)(rows + (ptrdiff_t)r * ldr) + from, 0,
                   (size_t)(2 * ldr - from) * sizeof(uint16_t));
}

/* Inside a parallel region: gemm_bf16_pair_cols of all n columns of src,
 * the team splitting the depth's pairs (src's rows) in blocks of 16 as
 * thread_rows splits rows in tiles, so that the rows a thread rounds into
 * rows (where not NULL; zero from round16(n) to the row's end, ldr floats)
 * are mostly those its own products read next. No barrier at the end. */
static void pair_cols_team(float *dst, ptrdiff_t ldd, const float *src, ptrdiff_t lds, int K, int n,
                           float *rows, ptrdiff_t ldr) {
    const int blocks = depth_pairs(K) / 16, t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int q0 = (int)((long)blocks * t / nt) * 16, q1 = (int)((long)blocks * (t + 1) / nt) * 16;
    if (q0 >= q1) return;
    pair_cols_range(dst, ldd, src, lds, K, 0, n, q0, q1, rows, ldr);
    if (rows) zero_tails(rows, ldr, 2 * q0, 2 * q1 < K ? 2 * q1 : K, round16(n));
}

/* Panel j0 of B (K2 pair rows of round16(n) lanes, panels of PANEL lanes one
 * after another, the panel at dst + j0*K2) from pair rows src (K2 rows of
 * n lanes, row stride lds): rows of the source matrix's columns when trans
 * is 0 (a copy), or the transpose of src's (n rows of K2 pairs) when 1. */
static void pack_panel(float *dst, const float *src, ptrdiff_t lds, int K2, int n, int j0,
                       int trans) {
    const int pw = round16(n) - j0 < PANEL ? round16(n) - j0 : PANEL;
    const int w = n - j0 < pw ? n - j0 : pw;
    float *d = dst + (ptrdiff_t)j0 * K2;
    if (trans) {
        transpose_matrix(d, pw, src + j0 * lds, lds, w, K2);
        if (w < pw)
            for (int p = 0; p < K2; p++) memset(d + p * pw + w, 0, (size_t)(pw - w) * sizeof *d);
    } else {
        for (int p = 0; p < K2; p++) memcpy(d + p * pw, src + p * lds + j0, (size_t)pw * sizeof *d);
    }
}

/* Inside a parallel region: pair rows [0, K2) of x-like src (K rows of n
 * floats) packed as B's panels into dst, the team splitting the pair rows
 * (no barrier at the end). Each panel's rows are written by pair_rows_into
 * straight into place (row stride = the panel's width); where rows is not
 * NULL, src's rows are also rounded into it as gemm_bf16_round_rows rounds
 * them (ldr floats apart, zero from n to the row's end). */
static void pack_pairs_team(float *dst, const float *src, ptrdiff_t lds, int K, int n, float *rows,
                            ptrdiff_t ldr) {
    const int K2 = depth_pairs(K), npad = round16(n);
#pragma omp for schedule(static) nowait
    for (int p = 0; p < K2; p++) {
        for (int j = 0; j < npad; j += PANEL) {
            const int pw = npad - j < PANEL ? npad - j : PANEL;
            pair_rows_into(dst + (ptrdiff_t)j * K2, pw, src + j, lds, K, n - j < pw ? n - j : pw, p,
                           p + 1, rows ? rows + j / 2 : NULL, ldr);
        }
        if (rows) zero_tails(rows, ldr, 2 * p, 2 * p + 2 < K ? 2 * p + 2 : K, npad);
    }
}

/* ------------------------------------------------------------------ kernel */

/* One tile: mr rows, nv vectors of C over K2 pairs; A's pair (i, p) at
 * A[i*ars + p*acs], B's pair row p at B + p*ldb. lm masks the last vector's
 * columns. acc_in: add to C. */
__attribute__((target(TARGET), always_inline)) static inline void
tile(const int mr, const int nv, int K2, const float *A, ptrdiff_t ars, ptrdiff_t acs,
     const float *B, ptrdiff_t ldb, float *C, ptrdiff_t ldc, int acc_in, __mmask16 lm) {
    __m512 acc[MR][NVMAX];
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++)
            acc[r][v] = acc_in
                            ? _mm512_maskz_loadu_ps(v == nv - 1 ? lm : 0xffff, C + r * ldc + v * 16)
                            : _mm512_setzero_ps();
    for (int p = 0; p < K2; p++) {
        __m512 b[NVMAX];
        const float *a = A + p * acs;
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++) b[v] = _mm512_loadu_ps(B + p * ldb + v * 16);
#pragma GCC unroll 8
        for (int r = 0; r < mr; r++) {
            const __m512bh ar = (__m512bh)_mm512_set1_ps(a[r * ars]);
#pragma GCC unroll 8
            for (int v = 0; v < nv; v++)
                acc[r][v] = _mm512_dpbf16_ps(acc[r][v], ar, (__m512bh)b[v]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++)
            _mm512_mask_storeu_ps(C + r * ldc + v * 16, v == nv - 1 ? lm : 0xffff, acc[r][v]);
}

#define TILE_CASE(R, V)                                                                            \
    case R * 8 + V:                                                                                \
        tile(R, V, kc, Ai, ars, acs, Bj, ldbj, Ci, ldc, acc, lm);                                  \
        break;
#define TILE_CASES(R) TILE_CASE(R, 1) TILE_CASE(R, 2) TILE_CASE(R, 3) TILE_CASE(R, 4)

/* Rows [m0, m1) of C (n columns) (+)= A B over K2 pairs, B packed in panels
 * (pack_panel; ldb 0) or pair row p at B + p*ldb (ldb > 0; n a multiple of
 * 16); blocked as gemm.c's GEMM_ROWS: a depth chunk of a panel stays in L1
 * while a block of MCB rows runs over it, and a chunk after the first adds
 * to what the last one stored, so every output is summed over p = 0, 1, ...
 * in order. */
__attribute__((target(TARGET))) static void rows(int m0, int m1, int n, int K2, const float *A,
                                                 ptrdiff_t ars, ptrdiff_t acs, const float *B,
                                                 ptrdiff_t ldb, float *C, ptrdiff_t ldc,
                                                 int acc_in) {
    const int npad = round16(n);
    for (int k0 = 0; k0 < K2; k0 += KCB) {
        const int kc = K2 - k0 < KCB ? K2 - k0 : KCB, acc = acc_in || k0 > 0;
        for (int i0 = m0; i0 < m1; i0 += MCB) {
            const int i1 = m1 - i0 < MCB ? m1 : i0 + MCB;
            for (int j = 0; j < npad; j += PANEL) {
                const int pw = npad - j < PANEL ? npad - j : PANEL, nv = pw / 16;
                const int tail = n - (j + pw - 16);
                const __mmask16 lm = tail >= 16 ? 0xffff : (__mmask16)((1u << tail) - 1);
                const ptrdiff_t ldbj = ldb ? ldb : pw;
                const float *Bj =
                    ldb ? B + j + (ptrdiff_t)k0 * ldb : B + (ptrdiff_t)j * K2 + (ptrdiff_t)k0 * pw;
                for (int i = i0; i < i1; i += MR) {
                    const int mr = i1 - i < MR ? i1 - i : MR;
                    const float *Ai = A + i * ars + k0 * acs;
                    float *Ci = C + i * ldc + j;
                    switch (mr * 8 + nv) {
                        TILE_CASES(1)
                        TILE_CASES(2)
                        TILE_CASES(3)
                        TILE_CASES(4)
                        TILE_CASES(5)
                        TILE_CASES(6)
                    }
                }
            }
        }
    }
}

/* -------------------------------------------------------------------- AMX */

/* AMX tiles, where the CPU has AMX-BF16 and Linux grants the process the
 * tile data state (arch_prctl ARCH_REQ_XCOMP_PERM): TDPBF16PS multiplies a
 * 16 x 32 bf16 tile of A by a 16-pair-row x 16-column tile of B (the pair
 * rows B is packed in already) into a 16 x 16 float32 tile of C. Each output
 * is summed over its depth 16 pairs at a time in order, by one thread, so
 * here too results do not depend on the thread count; they differ from
 * vdpbf16ps's in the last bits (the tile unit rounds its sums otherwise). */
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA  18

static int amx_allowed = 1; /* gemm_bf16_set_amx */

int gemm_bf16_amx_cpu(void) {
    static int state; /* 0 unknown, 1 usable, -1 not */
    if (state == 0) {
        unsigned a, b, c, d;
        const int has = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 24 & 1) /* AMX-TILE */
                        && (d >> 22 & 1) /* AMX-BF16 */;
        state =
            has && syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 ? 1 : -1;
    }
    return state == 1;
}

void gemm_bf16_set_amx(int on) {
    amx_allowed = on;
}

int gemm_bf16_uses_amx(void) {
    return amx_allowed && gemm_bf16_cpu() && gemm_bf16_amx_cpu();
}

/* The tile configuration, loaded once per thread: palette 1, tiles 0-7 each
 * 16 rows of 64 bytes. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg_t;
static _Thread_local int tiles_configured;

__attribute__((target("amx-tile"))) static void amx_configure(void) {
    if (tiles_configured) return;
    tilecfg_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    _tile_loadconfig(&cfg);
    tiles_configured = 1;
}

/* amx_rows' blocking: depth chunks of AMX_KC pairs; blocks of rows whose
 * pairs in a chunk fill at most AMX_A_BLOCK floats (32 KB: L1), 32 rows at
 * the least. */
#define AMX_KC      256
#define AMX_A_BLOCK 8192

/* Rows [m0, m1) of C (n columns; m1 - m0 and n multiples of 16) (+)= A B
 * over K2 pairs (a multiple of 16), A's rows of pairs lda floats apart, B
 * in panels (pack_panel; ldb 0) or its pair row p at B + p*ldb. Blocks of
 * 32 x 32 outputs in tiles 0-3, A's two row tiles in 4-5, B's two column
 * tiles in 6-7. Blocked for the caches as rows() is: a depth chunk of
 * AMX_KC pairs at a time (C stored after each chunk and loaded again for
 * the next, exact in float32, so the sums are those of one pass), and
 * within it a block of A's rows that stays in L1 runs across every column
 * of blocks, B streaming from L2. One pass over the whole depth per column
 * of blocks instead re-read all of A for every 32 columns (1 MB at a time
 * for a dW of N = 4,096 rows), and the tile loads, not the products, took
 * most of amx_rows' time: build/gemm-bench's bf16 products of make bench's
 * S, M and L layers are 1.14-1.32x faster this way (lm_head 1.02x). */
__attribute__((target("amx-tile,amx-bf16"))) static void
amx_rows(int m0, int m1, int n, int K2, const float *A, ptrdiff_t lda, const float *B,
         ptrdiff_t ldb, float *C, ptrdiff_t ldc, int acc_in) {
    amx_configure();
    for (int k0 = 0; k0 < K2; k0 += AMX_KC) {
        const int k1 = K2 - k0 < AMX_KC ? K2 : k0 + AMX_KC, acc = acc_in || k0 > 0;
        /* rows per block: A's block within AMX_A_BLOCK floats, at least 32 */
        const int mb =
            (AMX_A_BLOCK / (k1 - k0)) / 32 * 32 > 32 ? (AMX_A_BLOCK / (k1 - k0)) / 32 * 32 : 32;
        for (int ib = m0; ib < m1; ib += mb) {
            const int ie = m1 - ib < mb ? m1 : ib + mb;
            for (int j = 0; j < n; j += 32) {
                const int two_cols = j + 16 < n;
                /* the column tiles' places in their panels */
                const int p0 = j - j % PANEL, p1 = (j + 16) - (j + 16) % PANEL;
                const ptrdiff_t w0 = ldb ? ldb : n - p0 < PANEL ? n - p0 : PANEL;
                const ptrdiff_t w1 = ldb ? ldb : n - p1 < PANEL ? n - p1 : PANEL;
                const float *b0 = ldb ? B + j : B + (ptrdiff_t)p0 * K2 + (j - p0);
                const float *b1 = ldb ? B + j + 16 : B + (ptrdiff_t)p1 * K2 + (j + 16 - p1);
                for (int i = ib; i < ie; i += 32) {
                    const int two_rows = i + 16 < ie;
                    float *c00 = C + i * ldc + j, *c10 = c00 + 16 * ldc;
                    const float *a0 = A + i * lda, *a1 = a0 + 16 * lda;
                    if (acc) {
                        _tile_loadd(0, c00, ldc * 4);
                        if (two_cols) _tile_loadd(1, c00 + 16, ldc * 4);
                        if (two_rows) _tile_loadd(2, c10, ldc * 4);
                        if (two_rows && two_cols) _tile_loadd(3, c10 + 16, ldc * 4);
                    } else {
                        _tile_zero(0);
                        _tile_zero(1);
                        _tile_zero(2);
                        _tile_zero(3);
                    }
                    for (int p = k0; p < k1; p += 16) {
                        _tile_loadd(4, a0 + p, lda * 4);
                        _tile_loadd(6, b0 + (ptrdiff_t)p * w0, w0 * 4);
                        _tile_dpbf16ps(0, 4, 6);
                        if (two_cols) {
                            _tile_loadd(7, b1 + (ptrdiff_t)p * w1, w1 * 4);
                            _tile_dpbf16ps(1, 4, 7);
                        }
                        if (two_rows) {
                            _tile_loadd(5, a1 + p, lda * 4);
                            _tile_dpbf16ps(2, 5, 6);
                            if (two_cols) _tile_dpbf16ps(3, 5, 7);
                        }
                    }
                    _tile_stored(0, c00, ldc * 4);
                    if (two_cols) _tile_stored(1, c00 + 16, ldc * 4);
                    if (two_rows) _tile_stored(2, c10, ldc * 4);
                    if (two_rows && two_cols) _tile_stored(3, c10 + 16, ldc * 4);
                }
            }
        }
    }
}

/* Rows [m0, m1) of C, A in rows of pairs (lda floats apart): the whole
 * 16-row tiles on AMX when `amx` (the product's full width a multiple of
 * 16 and AMX in use; m0 a multiple of 16), the rest on vdpbf16ps. */
static void product_rows(int amx, int m0, int m1, int n, int K2, const float *A, ptrdiff_t lda,
                         const float *B, ptrdiff_t ldb, float *C, ptrdiff_t ldc, int acc_in) {
    int mid = amx ? m0 + (m1 - m0) / 16 * 16 : m0;
    if (mid > m0) amx_rows(m0, mid, n, K2, A, lda, B, ldb, C, ldc, acc_in);
    if (mid < m1) rows(mid, m1, n, K2, A, lda, 1, B, ldb, C, ldc, acc_in);
}

void gemm_bf16_rows(int m0, int m1, int n, int K2, const float *A, ptrdiff_t lda, const float *B,
                    ptrdiff_t ldb, float *C, ptrdiff_t ldc, int acc_in) {
    const int amx = amx_allowed && n % 16 == 0 && K2 % 16 == 0 && gemm_bf16_amx_cpu();
    product_rows(amx, m0, m1, n, K2, A, lda, B, ldb, C, ldc, acc_in);
}

/* --------------------------------------------------------------- products */

/* Scratch of the calling thread's products, shared by its team: kept for
 * the next call (reachable until exit). */
enum { BUF_B, BUF_A, BUF_W, BUF_X, BUF_T, N_BUFS };
static _Thread_local float *bufs[N_BUFS];
static _Thread_local size_t caps[N_BUFS];

/* Buffer k grown to `need` floats; exits on out of memory (the engine, a
 * batch process, fails fast: its model's arrays are far larger). */
static float *reserve(int k, size_t need) {
    if (need > caps[k]) {
        float *b = realloc(bufs[k], need * sizeof *b);
        if (!b) {
            fprintf(stderr, "%s:%d: out of memory for %zu floats\n", __FILE__, __LINE__, need);
            abort();
        }
        bufs[k] = b;
        caps[k] = need;
    }
    return bufs[k];
}

/* ---------------------------------------------------------- weights' cache */

/* A packed W: its forward panels (kind 0) or its paired rows for dx (kind 1),
 * valid while epoch is the cache's. */
typedef struct {
    const float *W;
    int in, out, kind;
    unsigned long epoch;
    float *packed;
    size_t cap;
} packed_w_t;

static const float *cache_lo; /* gemm_bf16_cache_weights: the block, or NULL */
static size_t cache_n;
static unsigned long cache_epoch = 1;
static packed_w_t *cache;
static int cache_len, cache_cap;

void gemm_bf16_weights_changed(void) {
    cache_epoch++;
}

void gemm_bf16_cache_weights(const float *lo, size_t n) {
    for (int i = 0; i < cache_len; i++) free(cache[i].packed);
    free(cache);
    cache = NULL;
    cache_len = cache_cap = 0;
    cache_lo = lo;
    cache_n = lo ? n : 0;
    cache_epoch++;
}

/* W's packed form of `kind` (need floats) and whether it must be packed
 * now (*fresh): from the cache where W lies in the named block (packed
 * already this epoch, or to be packed into the entry, marked valid here
 * since the caller fills it before returning), else scratch buffer `buf`. */
static float *packed_weight(const float *W, int in, int out, int kind, int buf, size_t need,
                            int *fresh) {
    *fresh = 1;
    if (!cache_lo || W < cache_lo || W >= cache_lo + cache_n) return reserve(buf, need);
    packed_w_t *e = NULL;
    for (int i = 0; i < cache_len && !e; i++)
        if (cache[i].W == W && cache[i].in == in && cache[i].out == out && cache[i].kind == kind)
            e = &cache[i];
    if (!e) {
        if (cache_len == cache_cap) {
            int cap = cache_cap ? 2 * cache_cap : 32;
            packed_w_t *c = realloc(cache, (size_t)cap * sizeof *c);
            if (!c) return reserve(buf, need);
            cache = c;
            cache_cap = cap;
        }
        e = &cache[cache_len++];
        *e = (packed_w_t){W, in, out, kind, 0, NULL, 0};
    }
    if (e->epoch == cache_epoch) {
        *fresh = 0;
        return e->packed;
    }
    if (need > e->cap) {
        float *b = realloc(e->packed, need * sizeof *b);
        if (!b) return reserve(buf, need);
        e->packed = b;
        e->cap = need;
    }
    e->epoch = cache_epoch;
    return e->packed;
}

/* ------------------------------------------------------------ kept inputs */

/* A linear layer's backward pairs its input x down the batch for dW (x^T
 * paired into rows when out > in, else x's row pairs as B's panels): a
 * second pass over x after the forward's rounding pass. While inputs are
 * kept (gemm_bf16_keep_inputs), the forward's one pass over x writes both
 * its own rounded rows and that paired form, kept here per (x, ldx, N, in,
 * out) for the backward. An entry is valid from the forward that wrote it
 * until gemm_bf16_keep_inputs is called again; a forward of the same key
 * while inputs are not kept drops it, so a backward never reads a pairing
 * of values other than the last forward's. The caller must not change x
 * between the forward and the backward (gpt.c's saved activations). */
typedef struct {
    const float *x;
    int ldx, N, in, out, valid;
    float *pairs;
    size_t cap;
} kept_x_t;

static int keep_inputs;
static kept_x_t *kept;
static int kept_len, kept_cap;

void gemm_bf16_keep_inputs(int on) {
    keep_inputs = on;
    for (int i = 0; i < kept_len; i++) kept[i].valid = 0;
}

/* Floats of x's paired form for the backward. */
static size_t kept_floats(int N, int in, int out) {
    return out <= in ? (size_t)depth_pairs(N) * round16(in) : (size_t)in * depth_pairs(N);
}

/* The entry of (x, ldx, N, in, out). make: while inputs are kept, an entry
 * (invalid, room for the pairs) is made or reused, else NULL (out of memory:
 * the backward then pairs x itself); otherwise the entry is dropped and NULL
 * returned. Not make: the valid entry or NULL. */
static kept_x_t *kept_entry(const float *x, int ldx, int N, int in, int out, int make) {
    kept_x_t *e = NULL;
    for (int i = 0; i < kept_len && !e; i++)
        if (kept[i].x == x && kept[i].ldx == ldx && kept[i].N == N && kept[i].in == in &&
            kept[i].out == out)
            e = &kept[i];
    if (!make) return e && e->valid ? e : NULL;
    if (e) e->valid = 0;
    if (!keep_inputs) return NULL;
    if (!e) {
        if (kept_len == kept_cap) {
            int cap = kept_cap ? 2 * kept_cap : 16;
            kept_x_t *k = realloc(kept, (size_t)cap * sizeof *k);
            if (!k) return NULL;
            kept = k;
            kept_cap = cap;
        }
        e = &kept[kept_len++];
        *e = (kept_x_t){x, ldx, N, in, out, 0, NULL, 0};
    }
    const size_t need = kept_floats(N, in, out);
    if (need > e->cap) {
        float *b = realloc(e->pairs, need * sizeof *b);
        if (!b) return NULL;
        e->pairs = b;
        e->cap = need;
    }
    return e;
}

size_t gemm_bf16_memory_floats(int N, const int (*linears)[2], int n) {
    /* the scratch buffers' sizes per product, as reserve() asks them */
    size_t need[N_BUFS] = {0}, kept_total = 0, cache_total = 0;
    const int KN = depth_pairs(N);
    for (int l = 0; l < n; l++) {
        const int in = linears[l][0], out = linears[l][1];
        const int K2 = depth_pairs(in), KO = depth_pairs(out), tdy = out <= in;
        const size_t ra = (size_t)(tdy ? out : in), wb = (size_t)round16(tdy ? in : out);
        const size_t fw = (size_t)K2 * round16(out), dxw = (size_t)KO * round16(in);
        const size_t b[N_BUFS] = {
            [BUF_B] = fw > dxw ? fw : dxw,
            [BUF_A] = (size_t)N * K2 > (size_t)in * out ? (size_t)N * K2 : (size_t)in * out,
            [BUF_W] = (size_t)N * KO > (size_t)out * K2 ? (size_t)N * KO : (size_t)out * K2,
            [BUF_X] = KN * wb,
            [BUF_T] = ra * KN,
        };
        for (int k = 0; k < N_BUFS; k++)
            if (b[k] > need[k]) need[k] = b[k];
        kept_total += kept_floats(N, in, out);
        cache_total += fw + dxw;
    }
    size_t total = kept_total + cache_total;
    for (int k = 0; k < N_BUFS; k++) total += need[k];
    return total;
}

/* This thread's share [*m0, *m1) of M rows, in whole 16-row tiles, so that
 * which rows run on AMX does not depend on the thread count. */
static void thread_rows(int M, int *m0, int *m1) {
    int t = omp_get_thread_num(), nt = omp_get_num_threads(), tiles = (M + 15) / 16;
    *m0 = (int)((long)tiles * t / nt) * 16;
    *m1 = (int)((long)tiles * (t + 1) / nt) * 16;
    if (*m1 > M) *m1 = M;
}

void gemm_bf16_forward(float *y, const float *x, int ldx, const float *W, int N, int in, int out) {
    const int K2 = depth_pairs(in), npad = round16(out),
              amx = gemm_bf16_uses_amx() && out % 16 == 0;
    int fresh;
    float *Bp = packed_weight(W, in, out, 0, BUF_B, (size_t)K2 * npad, &fresh);
    float *Wb = fresh ? reserve(BUF_W, (size_t)out * K2) : NULL;
    float *Ax = reserve(BUF_A, (size_t)N * K2);
    kept_x_t *keep = kept_entry(x, ldx, N, in, out, 1);
    double t0 = prof_begin();
#pragma omp parallel if ((double)N * in * out >= PARALLEL_MIN)
    {
        /* W rounded row by row, then transposed as pairs into B's panels */
        if (fresh) {
#pragma omp for schedule(static)
            for (int c = 0; c < out; c++) gemm_bf16_round_rows(Wb, K2, W, in, c, c + 1, in);
#pragma omp for schedule(static) nowait
            for (int j = 0; j < npad; j += PANEL) pack_panel(Bp, Wb, K2, K2, out, j, 1);
        }
        int m0, m1;
        thread_rows(N, &m0, &m1);
        if (!keep) {
            gemm_bf16_round_rows(Ax, K2, x, ldx, m0, m1, in);
        } else if (out <= in) { /* x's row pairs as the backward's B, rounding x's rows */
            pack_pairs_team(keep->pairs, x, ldx, N, in, Ax, K2);
        } else { /* x^T paired as the backward's A, rounding x's rows */
            pair_cols_team(keep->pairs, depth_pairs(N), x, ldx, N, in, Ax, K2);
        }
#pragma omp barrier
        if (m0 < m1) product_rows(amx, m0, m1, out, K2, Ax, K2, Bp, 0, y, out, 0);
    }
    if (keep) keep->valid = 1;
    prof_end(PROF_MATMUL, t0);
}

/* C (rows x width, row stride ldc) (+)= A B by the team: A in rows of K2
 * pairs, B in panels. The team splits C's rows when width <= rows, else its
 * columns in whole panels (each thread then reads all of A and only its
 * panels of B): this thread's columns [*j0, *j1) (all of them when the rows
 * are split). Which rows run on AMX does not depend on the team's size. */
static void team_product(int use_amx, int rows, int width, int K2, const float *A, const float *B,
                         float *C, ptrdiff_t ldc, int acc_in, int *j0, int *j1) {
    const int amx = use_amx && width % 16 == 0;
    if (width <= rows) {
        int m0, m1;
        thread_rows(rows, &m0, &m1);
        *j0 = 0, *j1 = width;
        if (m0 < m1) product_rows(amx, m0, m1, width, K2, A, K2, B, 0, C, ldc, acc_in);
    } else {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        const int panels = (round16(width) + PANEL - 1) / PANEL;
        *j0 = (int)((long)panels * t / nt) * PANEL;
        *j1 = (int)((long)panels * (t + 1) / nt) * PANEL;
        if (*j1 > width) *j1 = width;
        if (*j0 < *j1)
            product_rows(amx, 0, rows, *j1 - *j0, K2, A, K2, B + (ptrdiff_t)*j0 * K2, 0, C + *j0,
                         ldc, acc_in);
    }
}

void gemm_bf16_backward(float *dx, int ldx, float beta, float *dW, const float *dy, const float *x,
                        const float *W, int N, int in, int out) {
    const int KN = depth_pairs(N), KO = depth_pairs(out), ldi = round16(in);
    const int use_amx = gemm_bf16_uses_amx();
    /* dW's product has its depth along N, so one of its operands is paired
     * down the columns and transposed (AMX and vdpbf16ps both read A as rows
     * of pairs): the narrower of dy and x. Either dW (out, in) += dy^T x, or
     * T (in, out) = x^T dy and dW += T^T afterwards (T is as small as W). */
    const int tdy = out <= in;
    const int ra = tdy ? out : in, wb = tdy ? in : out;
    const float *sa = tdy ? dy : x, *sb = tdy ? x : dy;
    const ptrdiff_t lsa = tdy ? out : ldx, lsb = tdy ? ldx : out;
    /* x's pairing from the forward where it was kept */
    const kept_x_t *kx = kept_entry(x, ldx, N, in, out, 0);
    float *AT = kx && !tdy ? kx->pairs : reserve(BUF_T, (size_t)ra * KN);
    float *Bp = kx && tdy ? kx->pairs : reserve(BUF_X, (size_t)KN * round16(wb));
    float *T = tdy ? NULL : reserve(BUF_A, (size_t)in * out);
    int fresh = 0;
    float *Wp = dx ? packed_weight(W, in, out, 1, BUF_B, (size_t)KO * ldi, &fresh) : NULL;
    float *Dy = dx ? reserve(BUF_W, (size_t)N * KO) : NULL;
    double t0 = prof_begin();
#pragma omp parallel if ((double)N * in * out >= PARALLEL_MIN)
    {
        /* dy's pairing pass also rounds its rows for dx (Dy), reading dy once */
        if (!(kx && !tdy)) pair_cols_team(AT, KN, sa, lsa, N, ra, tdy ? Dy : NULL, KO);
        if (!(kx && tdy)) pack_pairs_team(Bp, sb, lsb, N, wb, tdy ? NULL : Dy, KO);
        if (fresh) pack_pairs_team(Wp, W, in, out, in, NULL, 0);
#pragma omp barrier
        int j0, j1;
        team_product(use_amx, ra, wb, KN, AT, Bp, tdy ? dW : T, tdy ? in : out, tdy, &j0, &j1);
        /* T's columns this thread computed are dW's rows [j0, j1) (out > in:
         * the team split T's columns), added without waiting for the team */
        if (!tdy)
            for (int o = j0; o < j1; o++)
                for (int i = 0; i < in; i++) dW[(ptrdiff_t)o * in + i] += T[(ptrdiff_t)i * out + o];
        /* dx (N, in) (+)= dy (N, out) W (out, in), dy rounded in the pairing */
        if (dx) {
            int m0, m1;
            thread_rows(N, &m0, &m1);
            if (m0 < m1)
                product_rows(use_amx && in % 16 == 0, m0, m1, in, KO, Dy, KO, Wp, 0, dx, ldx,
                             beta != 0.0f);
        }
    }
    prof_end(PROF_MATMUL, t0);
}
