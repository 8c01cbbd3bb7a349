/* attn_bf16.c - the fused attention's products in bfloat16 (see attn.h,
 * attn_kern.h), for runs whose precision is bf16: the six products (q k^T
 * and P v forward; q k^T, dO v^T, P^T dO, dS^T q and dS k backward) take
 * bf16 operands into float32 accumulators through gemm_bf16_rows (AMX
 * tiles where the CPU has them, else vdpbf16ps), as PyTorch's CPU autocast
 * multiplies them; the scores, the softmax and its log-sum-exp, the row
 * dots and every sum over tiles and heads stay float32.
 *
 * The work is split as on the kernel path (attn_kern.c): a unit is one kv
 * head of one sequence with the query heads that read it, tiles of BQ
 * query rows, each tile's keys from jb (its first visible key rounded down
 * to KB). Within a tile the rows go in strips of 16 (one AMX tile), each
 * strip computing the KB-wide key blocks its rows can see. Operands are
 * rounded as they are laid out once per unit (k and v in the two pairings
 * the products read) or per tile (q, dO), and the softmax writes its
 * probabilities, and the backward its score gradient, straight into the
 * paired layout the next product reads, so no pass rounds them again.
 *
 * Layouts, a pair being two bf16 in one 32-bit slot (gemm_bf16.h):
 *   Kp, Vtp  (hd/2, L)  pair (p, j) = (k[j][2p], k[j][2p+1]): keys as
 *            columns, for q k^T and dO v^T;
 *   Vp, Krp  (Tq/2, hd) pair (p, d) = (v[2p][d], v[2p+1][d]): keys paired
 *            down, for P v and dS k;
 *   Pb, dSb  rows of a strip's probabilities or score gradient rounded,
 *            pairs along the keys (the A of P v and dS k);
 *   Pi, dSi  (BQ/2, L) pair (m, j) = (P[2m][j], P[2m+1][j]): the tile's
 *            rows paired down, the B of dV^T = dO^T P and dK^T = q^T dS,
 *            whose A (QTp, OTp: (hd, BQ/2)) pairs q's and dO's rows down;
 *            dK^T and dV^T (hd, L) are summed over the unit in float32 and
 *            transposed into dk and dv at its end.
 * Needs hd a multiple of 32 (whole AMX tiles of depth); attn.c keeps other
 * head sizes in float32. Each output float is summed by one thread in a
 * fixed order, so results do not depend on the thread count. */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "engine/attn_kern.h"
#include "engine/fastmath.h"
#include "engine/gemm_bf16.h"
#include "engine/transpose.h"

#define TARGET "avx512f,avx512bf16"

/* Key blocks: 32 keys, 16 pairs, one AMX tile of depth. */
#define KB 32
/* Rows per strip: one AMX tile. */
#define SR 16

/* Keys rounded up to KB, and the float row length of the score scratch. */
static inline int keys_padded(int T) {
    return (int)round_up((size_t)T, KB);
}

static inline int score_ld(int T) {
    return keys_padded(T) + LPAD;
}

size_t attn_bf16_thread_floats(int hd, int T) {
    const size_t L = (size_t)score_ld(T), tq = (size_t)keys_padded(T), h2 = (size_t)hd / 2;
    return 2 * h2 * L            /* Kp, Vtp */
           + tq / 2 * hd         /* Vp or Krp */
           + 2 * (size_t)hd * L  /* dK^T, dV^T */
           + 2 * SR * L          /* a strip's scores and dP */
           + 2 * (BQ / 2) * L    /* Pi, dSi */
           + BQ * (L / 2)        /* Pb or dSb */
           + 2 * (size_t)BQ * h2 /* the tile's q and dO rounded */
           + 2 * (size_t)hd * (BQ / 2) + BQ;
}

/* ------------------------------------------------------------- vectors */

/* e^x on 16 lanes: fast_expf's steps (fastmath.h). */
__attribute__((target(TARGET))) static inline __m512 vexp(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    const __m512 n = FAST_EXP_ROUND(x), r = FAST_EXP_REDUCE(x, n);
    const __m512 p = FAST_EXP_POLY(r);
    const __m512i bits =
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
}

/* Lanes of the 16 columns from j that are in [jl, jh]. */
__attribute__((target(TARGET))) static inline __mmask16 visible(int j, int jl, int jh) {
    const __m512i c =
        _mm512_add_epi32(_mm512_set1_epi32(j),
                         _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
    return _mm512_cmp_epi32_mask(c, _mm512_set1_epi32(jl), _MM_CMPINT_NLT) &
           _mm512_cmp_epi32_mask(c, _mm512_set1_epi32(jh), _MM_CMPINT_LE);
}

/* 16 floats rounded to bf16 (round to nearest even). */
__attribute__((target(TARGET))) static inline __m256i to_bf16(__m512 v) {
    return (__m256i)_mm512_cvtneps_pbh(v);
}

/* Pairs (a[c], b[c]) of 16 lanes rounded. */
__attribute__((target(TARGET))) static inline __m512i pairs(__m512 a, __m512 b) {
    const __m512i lo = _mm512_cvtepu16_epi32(to_bf16(a)), hi = _mm512_cvtepu16_epi32(to_bf16(b));
    return _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
}

/* The forward's row s over columns [c0, c1) (multiples of 16) with visible
 * keys [jl, jh]: the bf16 row pb (pairs along the keys, bf16 index = column)
 * gets exp(scale (s - max)) over the visible keys and zero elsewhere in
 * [c0, c1). Returns the row sum of the float exps; *mx = the max score. */
__attribute__((target(TARGET))) static float
softmax_row(uint16_t *pb, const float *s, int c0, int c1, int jl, int jh, float scale, float *mx) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    const int a = jl / 16 * 16, e = (jh + 16) / 16 * 16;
    for (int j = a; j < e; j += 16)
        m = _mm512_max_ps(m, _mm512_mask_loadu_ps(m, visible(j, jl, jh), s + j));
    const float M = _mm512_reduce_max_ps(m);
    const __m512 vm = _mm512_set1_ps(M), vs = _mm512_set1_ps(scale);
    __m512 sum = _mm512_setzero_ps();
    for (int j = c0; j < c1; j += 16) {
        __m256i b = _mm256_setzero_si256();
        if (j >= a && j < e) {
            const __m512 x = _mm512_maskz_mov_ps(
                visible(j, jl, jh),
                vexp(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(s + j), vm), vs)));
            sum = _mm512_add_ps(sum, x);
            b = to_bf16(x);
        }
        _mm256_storeu_si256((__m256i *)(pb + j), b);
    }
    *mx = M;
    return _mm512_reduce_add_ps(sum);
}

/* ----------------------------------------------------------------- layouts */

/* Kt (hd/2, ld) = one kv head's rows (k: row stride ks, T rows) rounded and
 * paired along hd, transposed: keys as columns, zero from T to tq. 16 keys
 * by 16 pairs at a time through a block that stays in L1 (rounding every
 * row into scratch first, then transposing it, wrote and read the head's
 * keys once more). */
__attribute__((target(TARGET))) static void keys_t_pairs(float *Kt, int ld, const float *k, int ks,
                                                         int hd, int T, int tq) {
    const int h2 = hd / 2;
    float blk[16 * 16] __attribute__((aligned(64)));
    for (int j0 = 0; j0 < T; j0 += 16) {
        const int nj = imin(16, T - j0);
        for (int p0 = 0; p0 < h2; p0 += 16) {
            for (int j = 0; j < nj; j++) {
                const float *r = k + (size_t)(j0 + j) * ks + 2 * p0;
                const __m512bh h = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(r + 16), _mm512_loadu_ps(r));
                _mm512_store_si512(blk + 16 * j, (__m512i)h);
            }
            transpose_matrix(Kt + (size_t)p0 * ld + j0, ld, blk, 16, nj, 16);
        }
    }
    for (int p = 0; p < h2; p++) memset(Kt + (size_t)p * ld + T, 0, (size_t)(tq - T) * sizeof *Kt);
}

/* --------------------------------------------------------------- forward */

void attn_bf16_forward(float *y, float *lse, const float *q, const float *k, const float *v, int B,
                       int T, int H, int Hkv, int hd, int window, float *work, int threads) {
    const int group = H / Hkv, qs = H * hd, ks = Hkv * hd, tiles = (T + BQ - 1) / BQ;
    const int units = B * Hkv, tq = keys_padded(T), L = score_ld(T), h2 = hd / 2, lp = L / 2;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (units > 1)
    for (int u = 0; u < units; u++) {
        const int b = u / Hkv, g = u % Hkv;
        const size_t ko = (size_t)b * T * ks + (size_t)g * hd;
        float *Kp = work + (size_t)omp_get_thread_num() * attn_bf16_thread_floats(hd, T);
        float *Vp = Kp + 2 * (size_t)h2 * L;
        float *S = Vp + (size_t)tq / 2 * hd, *Pb = S + 2 * SR * (size_t)L;
        float *Qp = Pb + (size_t)BQ * lp, *inv = Qp + 2 * (size_t)BQ * h2;
        keys_t_pairs(Kp, L, k + ko, ks, hd, T, tq);
        gemm_bf16_pair_rows(Vp, hd, v + ko, ks, T, hd, 0, tq / 2);
        for (int h = g * group; h < (g + 1) * group; h++) {
            const size_t qo = (size_t)b * T * qs + (size_t)h * hd;
            float *lse_h = lse + ((size_t)b * H + h) * T;
            for (int t = 0; t < tiles; t++) {
                const int i0 = t * BQ, i1 = imin(T, i0 + BQ), nq = i1 - i0;
                const int jb = first_key(i0, window) / KB * KB;
                gemm_bf16_round_rows(Qp, h2, q + qo + (size_t)i0 * qs, qs, 0, nq, hd);
                for (int r0 = 0; r0 < nq; r0 += SR) {
                    const int r1 = imin(nq, r0 + SR);
                    const int c0 = (first_key(i0 + r0, window) - jb) / KB * KB;
                    const int c1 = (int)round_up((size_t)(i0 + r1 - jb), KB);
                    /* S (the strip's rows, keys jb + [c0, c1)) = q k^T */
                    gemm_bf16_rows(0, r1 - r0, c1 - c0, h2, Qp + (size_t)r0 * h2, h2, Kp + jb + c0,
                                   L, S + c0, L, 0);
                    for (int i = r0; i < r1; i++) {
                        const int row = i0 + i, jl = first_key(row, window) - jb, jh = row - jb;
                        float mx;
                        const float sum =
                            softmax_row((uint16_t *)(Pb + (size_t)(i - r0) * lp),
                                        S + (size_t)(i - r0) * L, c0, c1, jl, jh, scale, &mx);
                        inv[i] = 1.0f / sum;
                        lse_h[row] = mx * scale + logf(sum);
                    }
                    /* y rows = inv * (P v[jb + c0 :]) */
                    float *yr = y + qo + (size_t)(i0 + r0) * qs;
                    gemm_bf16_rows(0, r1 - r0, hd, (c1 - c0) / 2, Pb + c0 / 2, lp,
                                   Vp + (size_t)(jb + c0) / 2 * hd, hd, yr, qs, 0);
                    for (int i = r0; i < r1; i++) {
                        float *restrict yi = yr + (size_t)(i - r0) * qs;
                        for (int d = 0; d < hd; d++) yi[d] *= inv[i];
                    }
                }
            }
        }
    }
}

/* -------------------------------------------------------------- backward */

/* Rows 2m and 2m+1 of a strip (the second absent when !two): from their
 * scores s0, s1 and dP rows g0, g1 over columns [c0, c1), P = exp(scale s -
 * lse) and dS = scale P (dP - D) on each row's visible keys [jl, jh] (zero
 * elsewhere) into the paired rows pi, dsi (column c at lane c) and the
 * rounded rows db0, db1 (bf16 index = column). */
__attribute__((target(TARGET))) static void
dsoftmax_pair(uint32_t *pi, uint32_t *dsi, uint16_t *db0, uint16_t *db1, const float *s0,
              const float *s1, const float *g0, const float *g1, int two, int c0, int c1, int jl0,
              int jh0, int jl1, int jh1, float scale, float L0, float L1, float D0, float D1) {
    const __m512 vs = _mm512_set1_ps(scale);
    for (int j = c0; j < c1; j += 16) {
        const __mmask16 m0 = visible(j, jl0, jh0), m1 = two ? visible(j, jl1, jh1) : 0;
        const __m512 x0 = _mm512_maskz_mov_ps(
            m0,
            vexp(_mm512_sub_ps(_mm512_mul_ps(_mm512_loadu_ps(s0 + j), vs), _mm512_set1_ps(L0))));
        const __m512 d0 = _mm512_maskz_mov_ps(
            m0, _mm512_mul_ps(_mm512_mul_ps(vs, x0),
                              _mm512_sub_ps(_mm512_loadu_ps(g0 + j), _mm512_set1_ps(D0))));
        __m512 x1 = _mm512_setzero_ps(), d1 = _mm512_setzero_ps();
        if (m1) {
            x1 = _mm512_maskz_mov_ps(m1,
                                     vexp(_mm512_sub_ps(_mm512_mul_ps(_mm512_loadu_ps(s1 + j), vs),
                                                        _mm512_set1_ps(L1))));
            d1 = _mm512_maskz_mov_ps(
                m1, _mm512_mul_ps(_mm512_mul_ps(vs, x1),
                                  _mm512_sub_ps(_mm512_loadu_ps(g1 + j), _mm512_set1_ps(D1))));
        }
        _mm512_storeu_si512(pi + j, pairs(x0, x1));
        _mm512_storeu_si512(dsi + j, pairs(d0, d1));
        _mm256_storeu_si256((__m256i *)(db0 + j), to_bf16(d0));
        if (two) _mm256_storeu_si256((__m256i *)(db1 + j), to_bf16(d1));
    }
}

/* sum bf16(x[d]) y[d] over d < n (n a multiple of 16): the row dot D of
 * the score gradient with dO rounded as dP's product rounds it, so that
 * where a row's probabilities are exact (one visible key) dP - D cancels
 * as it does in float32. */
__attribute__((target(TARGET))) static float dot_row(const float *x, const float *y, int n) {
    __m512 acc = _mm512_setzero_ps();
    for (int d = 0; d < n; d += 16) {
        const __m512 xr = _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(to_bf16(_mm512_loadu_ps(x + d))), 16));
        acc = _mm512_fmadd_ps(xr, _mm512_loadu_ps(y + d), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

/* Cd (hd, L) += A^T-side product over the tile: C's key columns [jb, jb +
 * nc) gain At (hd, BQ/2 pairs of the tile's rows) times Bi (the tile's
 * rows paired, BQ/2 pair rows of L lanes, column 0 = key jb). Key blocks
 * left of the tile's first row are seen by all its rows; a block from i0 on
 * only by the rows from it, so its depth starts there. */
static void keys_product(float *Cd, int L, const float *At, const float *Bi, int hd, int i0, int nq,
                         int jb, int nc) {
    const int kt = (int)round_up((size_t)nq, KB) / 2, ab = BQ / 2;
    const int left = imin(imax(i0 - jb, 0), nc);
    if (left > 0) gemm_bf16_rows(0, hd, left, kt, At, ab, Bi, L, Cd + jb, L, 1);
    for (int c = left; c < nc; c += KB) {
        const int p0 = (jb + c - i0) / 2;
        if (p0 >= kt) break;
        gemm_bf16_rows(0, hd, KB, kt - p0, At + p0, ab, Bi + (size_t)p0 * L + c, L, Cd + jb + c, L,
                       1);
    }
}

void attn_bf16_backward(float *dq, float *dk, float *dv, const float *dy, const float *y,
                        const float *lse, const float *q, const float *k, const float *v, int B,
                        int T, int H, int Hkv, int hd, int window, float *work, int threads) {
    const int group = H / Hkv, qs = H * hd, ks = Hkv * hd, tiles = (T + BQ - 1) / BQ;
    const int units = B * Hkv, tq = keys_padded(T), L = score_ld(T), h2 = hd / 2, lp = L / 2;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (units > 1)
    for (int u = 0; u < units; u++) {
        const int b = u / Hkv, g = u % Hkv;
        const size_t ko = (size_t)b * T * ks + (size_t)g * hd;
        float *Kp = work + (size_t)omp_get_thread_num() * attn_bf16_thread_floats(hd, T);
        float *Vtp = Kp + (size_t)h2 * L, *Krp = Vtp + (size_t)h2 * L;
        float *dKt = Krp + (size_t)tq / 2 * hd;
        float *dVt = dKt + (size_t)hd * L, *S = dVt + (size_t)hd * L, *dP = S + SR * (size_t)L;
        float *Pi = dP + SR * (size_t)L, *dSi = Pi + (BQ / 2) * (size_t)L;
        float *dSb = dSi + (BQ / 2) * (size_t)L, *Qp = dSb + (size_t)BQ * lp;
        float *Op = Qp + (size_t)BQ * h2, *QTp = Op + (size_t)BQ * h2;
        float *OTp = QTp + (size_t)hd * (BQ / 2), *Dr = OTp + (size_t)hd * (BQ / 2);
        keys_t_pairs(Kp, L, k + ko, ks, hd, T, tq);
        keys_t_pairs(Vtp, L, v + ko, ks, hd, T, tq);
        gemm_bf16_pair_rows(Krp, hd, k + ko, ks, T, hd, 0, tq / 2);
        memset(dKt, 0, 2 * (size_t)hd * L * sizeof *dKt);
        for (int h = g * group; h < (g + 1) * group; h++) {
            const size_t qo = (size_t)b * T * qs + (size_t)h * hd;
            const float *lse_h = lse + ((size_t)b * H + h) * T;
            for (int t = 0; t < tiles; t++) {
                const int i0 = t * BQ, i1 = imin(T, i0 + BQ), nq = i1 - i0;
                const int jb = first_key(i0, window) / KB * KB;
                const int nc = (int)round_up((size_t)(i1 - jb), KB);
                const float *qt = q + qo + (size_t)i0 * qs, *dO = dy + qo + (size_t)i0 * qs;
                gemm_bf16_pair_cols(QTp, BQ / 2, qt, qs, nq, 0, hd, Qp, h2);
                gemm_bf16_pair_cols(OTp, BQ / 2, dO, qs, nq, 0, hd, Op, h2);
                for (int i = 0; i < nq; i++)
                    Dr[i] = dot_row(dO + (size_t)i * qs, y + qo + (size_t)(i0 + i) * qs, hd);
                for (int r0 = 0; r0 < nq; r0 += SR) {
                    const int r1 = imin(nq, r0 + SR);
                    const int c0 = (first_key(i0 + r0, window) - jb) / KB * KB;
                    const int c1 = (int)round_up((size_t)(i0 + r1 - jb), KB);
                    gemm_bf16_rows(0, r1 - r0, c1 - c0, h2, Qp + (size_t)r0 * h2, h2, Kp + jb + c0,
                                   L, S + c0, L, 0);
                    gemm_bf16_rows(0, r1 - r0, c1 - c0, h2, Op + (size_t)r0 * h2, h2, Vtp + jb + c0,
                                   L, dP + c0, L, 0);
                    for (int i = r0; i < r0 + SR; i += 2) {
                        uint32_t *pi = (uint32_t *)(Pi + (size_t)(i / 2) * L);
                        uint32_t *dsi = (uint32_t *)(dSi + (size_t)(i / 2) * L);
                        /* the tile's paired rows are zero left of the strip's keys
                         * (a window's); right of them keys_product never reads
                         * these rows (a key block's depth starts at its first key) */
                        memset(pi, 0, (size_t)c0 * sizeof *pi);
                        memset(dsi, 0, (size_t)c0 * sizeof *dsi);
                        if (i >= nq) {
                            memset(pi + c0, 0, (size_t)(c1 - c0) * sizeof *pi);
                            memset(dsi + c0, 0, (size_t)(c1 - c0) * sizeof *dsi);
                            continue;
                        }
                        const int two = i + 1 < nq, ra = i0 + i, rb = ra + 1;
                        const size_t sa = (size_t)(i - r0) * L;
                        dsoftmax_pair(pi, dsi, (uint16_t *)(dSb + (size_t)i * lp),
                                      (uint16_t *)(dSb + (size_t)(i + 1) * lp), S + sa, S + sa + L,
                                      dP + sa, dP + sa + L, two, c0, c1, first_key(ra, window) - jb,
                                      ra - jb, first_key(rb, window) - jb, rb - jb, scale,
                                      lse_h[ra], two ? lse_h[rb] : 0.0f, Dr[i],
                                      two ? Dr[i + 1] : 0.0f);
                    }
                    /* dq rows = dS k[jb + c0 :] */
                    gemm_bf16_rows(0, r1 - r0, hd, (c1 - c0) / 2, dSb + (size_t)r0 * lp + c0 / 2,
                                   lp, Krp + (size_t)(jb + c0) / 2 * hd, hd,
                                   dq + qo + (size_t)(i0 + r0) * qs, qs, 0);
                }
                /* pair rows past the strips' (nq not a multiple of SR) up to the
                 * depth the products below take are zero */
                for (int m = (int)round_up((size_t)nq, SR) / 2;
                     m < (int)round_up((size_t)nq, KB) / 2; m++) {
                    memset(Pi + (size_t)m * L, 0, (size_t)nc * sizeof *Pi);
                    memset(dSi + (size_t)m * L, 0, (size_t)nc * sizeof *dSi);
                }
                /* dV^T += dO^T P;  dK^T += q^T dS */
                keys_product(dVt, L, OTp, Pi, hd, i0, nq, jb, nc);
                keys_product(dKt, L, QTp, dSi, hd, i0, nq, jb, nc);
            }
        }
        transpose_matrix(dk + ko, ks, dKt, L, hd, T);
        transpose_matrix(dv + ko, ks, dVt, L, hd, T);
    }
}
