/* attn.c - fused causal attention (see attn.h).
 *
 * Work goes in query tiles of BQ rows. A tile's visible keys are one span
 * [first key of its first row, its last row], so tiles never touch keys a
 * sliding window hides from all their rows; the tile's scores against that
 * span live in per-thread scratch (BQ x span, never T x T), the softmax is
 * taken row by row, and the backward recomputes the tile's probabilities
 * from the stored log-sum-exp.
 *
 * Two paths compute the same thing. The kernel path (when gemm.c has a
 * register-tiled kernel for this CPU and head size, i.e. AVX2 or AVX-512
 * and hd a multiple of 8) runs every product through gemm_rows_fn: the
 * operands are laid out once per (sequence, kv head) and every block of
 * GEMM_MR query rows computes only the keys its rows can see. The BLAS path
 * (other CPUs and head sizes) makes one single-threaded sgemm per tile and
 * product (OpenBLAS's OpenMP build runs single-threaded inside a parallel
 * region, so one call keeps both cores busy with no hand-offs). */
#include "engine/attn.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "engine/attn_kern.h"
#include "engine/fastmath.h"
#include "engine/gemm.h"
#include "engine/threads.h"

/* Per-thread scratch, in floats. The BLAS path: scores and their gradient
 * for one query tile against every key (BQ, T each), the tile's scaled
 * queries (BQ, hd) and a per-row vector. The kernel path: the same two
 * (BQ, Tp + LPAD) with Tp = T rounded up to KA, K^T and V^T (hd, Tp + LPAD
 * each), V's or K's rows (Tp, hd), the tile's queries and output gradient
 * (BQ, hd each) and a per-row vector. The larger of the two. */
size_t attn_thread_floats(int hd, int T) {
    const size_t tp = round_up((size_t)T, KA) + LPAD;
    const size_t blas = 2 * (size_t)BQ * T + (size_t)BQ * hd + BQ;
    const size_t kern = 2 * (size_t)BQ * tp + 3 * (size_t)hd * tp + 2 * (size_t)BQ * hd + BQ;
    const size_t most = blas > kern ? blas : kern, bf16 = attn_bf16_thread_floats(hd, T);
    return most > bf16 ? most : bf16;
}

size_t attn_work_floats(int hd, int T, int threads) {
    return (size_t)(threads > 0 ? threads : 1) * attn_thread_floats(hd, T);
}

/* Rows [i0, i1) of one head: S (nq, nk) = the scaled scores against keys
 * [j0, j0 + nk) with nk = i1 - j0, then in place the probabilities
 * P = exp(S - lse), zero outside each row's window. Qs gets the tile's
 * queries times 1/sqrt(hd). With lse NULL the row log-sum-exps are computed
 * and stored in lse_out (the forward); otherwise they are read. */
static void tile_probs(float *S, float *Qs, const float *q, const float *k, int qs, int ks, int hd,
                       int i0, int i1, int j0, int window, const float *lse, float *lse_out) {
    const float scale = 1.0f / sqrtf((float)hd);
    const int nq = i1 - i0, nk = i1 - j0;
    for (int i = 0; i < nq; i++) {
        const float *qi = q + (size_t)(i0 + i) * qs;
        for (int d = 0; d < hd; d++) Qs[(size_t)i * hd + d] = qi[d] * scale;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, hd, 1.0f, Qs, hd,
                k + (size_t)j0 * ks, ks, 0.0f, S, nk);
    for (int i = 0; i < nq; i++) {
        float *restrict s = S + (size_t)i * nk;
        const int row = i0 + i, jl = first_key(row, window) - j0, jh = row - j0;
        if (lse) {
            const float L = lse[row];
            for (int j = 0; j < nk; j++) s[j] = j >= jl && j <= jh ? fast_expf(s[j] - L) : 0.0f;
            continue;
        }
        const float mx = max_f32(s + jl, jh - jl + 1);
        for (int j = 0; j < nk; j++) s[j] = j >= jl && j <= jh ? fast_expf(s[j] - mx) : 0.0f;
        const float sum = (float)sum_f64(s, nk), inv = 1.0f / sum;
        for (int j = 0; j < nk; j++) s[j] *= inv;
        lse_out[row] = mx + logf(sum);
    }
}

/* ------------------------------------------------------------- BLAS forward */

static void blas_forward(float *y, float *lse, const float *q, const float *k, const float *v,
                         int B, int T, int H, int Hkv, int hd, int window, float *work,
                         int threads) {
    const int group = H / Hkv, qs = H * hd, ks = Hkv * hd, tiles = (T + BQ - 1) / BQ;
    const int units = B * H * tiles;
    /* Later tiles see more keys: hand them out first and dynamically. Inside
     * the team every sgemm runs on its calling thread. */
#pragma omp parallel num_threads(threads) if (units > 1)
    {
        threads_blas_single(); /* a team of one: still one BLAS thread (threads.h) */
#pragma omp for schedule(dynamic, 1)
        for (int u = 0; u < units; u++) {
            const int t = tiles - 1 - u % tiles, bh = u / tiles, b = bh / H, h = bh % H;
            const size_t qo = (size_t)b * T * qs + (size_t)h * hd;
            const size_t ko = (size_t)b * T * ks + (size_t)(h / group) * hd;
            const int i0 = t * BQ, i1 = imin(T, i0 + BQ), j0 = first_key(i0, window);
            float *S = work + (size_t)omp_get_thread_num() * attn_thread_floats(hd, T);
            float *Qs = S + 2 * (size_t)BQ * T;
            tile_probs(S, Qs, q + qo, k + ko, qs, ks, hd, i0, i1, j0, window, NULL,
                       lse + (size_t)bh * T);
            /* y rows (nq, hd) = P (nq, nk) V[j0:i1] */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i1 - i0, hd, i1 - j0, 1.0f, S,
                        i1 - j0, v + ko + (size_t)j0 * ks, ks, 0.0f, y + qo + (size_t)i0 * qs, qs);
        }
    }
}

/* ------------------------------------------------------------ BLAS backward */

static void blas_backward(float *dq, float *dk, float *dv, const float *dy, const float *y,
                          const float *lse, const float *q, const float *k, const float *v, int B,
                          int T, int H, int Hkv, int hd, int window, float *work, int threads) {
    const int group = H / Hkv, qs = H * hd, ks = Hkv * hd, tiles = (T + BQ - 1) / BQ;
    const int units = B * Hkv;
    const float scale = 1.0f / sqrtf((float)hd);
    /* A unit owns one kv head of one sequence: its dk, dv rows and the dq
     * rows of the query heads that read it, so no two threads write the
     * same float and the sums run in a fixed order. */
#pragma omp parallel num_threads(threads) if (units > 1)
    {
        threads_blas_single();
#pragma omp for schedule(dynamic, 1)
        for (int u = 0; u < units; u++) {
            const int b = u / Hkv, g = u % Hkv;
            const size_t ko = (size_t)b * T * ks + (size_t)g * hd;
            float *P = work + (size_t)omp_get_thread_num() * attn_thread_floats(hd, T);
            float *dS = P + (size_t)BQ * T, *Qs = dS + (size_t)BQ * T, *Dr = Qs + (size_t)BQ * hd;
            for (int t = 0; t < T; t++) {
                memset(dk + ko + (size_t)t * ks, 0, (size_t)hd * sizeof *dk);
                memset(dv + ko + (size_t)t * ks, 0, (size_t)hd * sizeof *dv);
            }
            for (int h = g * group; h < (g + 1) * group; h++) {
                const size_t qo = (size_t)b * T * qs + (size_t)h * hd;
                for (int t = 0; t < tiles; t++) {
                    const int i0 = t * BQ, i1 = imin(T, i0 + BQ), j0 = first_key(i0, window);
                    const int nq = i1 - i0, nk = i1 - j0;
                    const float *dO = dy + qo + (size_t)i0 * qs, *kt = k + ko + (size_t)j0 * ks;
                    const float *vt = v + ko + (size_t)j0 * ks;
                    tile_probs(P, Qs, q + qo, k + ko, qs, ks, hd, i0, i1, j0, window,
                               lse + ((size_t)b * H + h) * T, NULL);
                    /* dP (nq, nk) = dO V^T;  dS = P (dP - rowsum(dO * y)) */
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, hd, 1.0f, dO, qs,
                                vt, ks, 0.0f, dS, nk);
                    for (int i = 0; i < nq; i++) {
                        const float *gi = dO + (size_t)i * qs, *yi = y + qo + (size_t)(i0 + i) * qs;
                        Dr[i] = (float)dot_f64(gi, yi, hd);
                    }
                    for (int i = 0; i < nq; i++) {
                        const float *restrict p = P + (size_t)i * nk;
                        float *restrict ds = dS + (size_t)i * nk;
                        const float Di = Dr[i];
                        for (int j = 0; j < nk; j++) ds[j] = p[j] * (ds[j] - Di);
                    }
                    /* dV[j0:i1] += P^T dO;  dK[j0:i1] += dS^T Qs;  dQ = scale dS K[j0:i1] */
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hd, nq, 1.0f, P, nk,
                                dO, qs, 1.0f, dv + ko + (size_t)j0 * ks, ks);
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hd, nq, 1.0f, dS, nk,
                                Qs, hd, 1.0f, dk + ko + (size_t)j0 * ks, ks);
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, hd, nk, scale, dS,
                                nk, kt, ks, 0.0f, dq + qo + (size_t)i0 * qs, qs);
                }
            }
        }
    }
}

/* ------------------------------------------------------------------ public */

/* Whether the products run in bf16 (attn_bf16.c): the run's precision is
 * bf16 (which needs the avx512 path and AVX512_BF16) and hd is a whole
 * number of AMX tiles' depth (32); other head sizes stay float32. */
static int bf16_path(int hd) {
    return gemm_current_precision() == GEMM_BF16 && gemm_current() == GEMM_AVX512 && hd % 32 == 0;
}

void attn_forward(float *y, float *lse, const float *q, const float *k, const float *v, int B,
                  int T, int H, int Hkv, int hd, int window, float *work, int threads) {
    gemm_rows_fn *rows_s = gemm_rows_for(KA), *rows_h = gemm_rows_for(hd);
    window = imin(window, T); /* the same keys; row + window cannot overflow */
    if (bf16_path(hd))
        attn_bf16_forward(y, lse, q, k, v, B, T, H, Hkv, hd, window, work, threads);
    else if (rows_s && rows_h && gemm_current() == GEMM_AVX512)
        attn_kern_forward_avx512(rows_s, rows_h, y, lse, q, k, v, B, T, H, Hkv, hd, window, work,
                                 threads);
    else if (rows_s && rows_h)
        attn_kern_forward_avx2(rows_s, rows_h, y, lse, q, k, v, B, T, H, Hkv, hd, window, work,
                               threads);
    else
        blas_forward(y, lse, q, k, v, B, T, H, Hkv, hd, window, work, threads);
}

void attn_backward(float *dq, float *dk, float *dv, const float *dy, const float *y,
                   const float *lse, const float *q, const float *k, const float *v, int B, int T,
                   int H, int Hkv, int hd, int window, float *work, int threads) {
    gemm_rows_fn *rows_s = gemm_rows_for(KA), *rows_h = gemm_rows_for(hd);
    window = imin(window, T);
    if (bf16_path(hd))
        attn_bf16_backward(dq, dk, dv, dy, y, lse, q, k, v, B, T, H, Hkv, hd, window, work,
                           threads);
    else if (rows_s && rows_h && gemm_current() == GEMM_AVX512)
        attn_kern_backward_avx512(rows_s, rows_h, dq, dk, dv, dy, y, lse, q, k, v, B, T, H, Hkv, hd,
                                  window, work, threads);
    else if (rows_s && rows_h)
        attn_kern_backward_avx2(rows_s, rows_h, dq, dk, dv, dy, y, lse, q, k, v, B, T, H, Hkv, hd,
                                window, work, threads);
    else
        blas_backward(dq, dk, dv, dy, y, lse, q, k, v, B, T, H, Hkv, hd, window, work, threads);
}
