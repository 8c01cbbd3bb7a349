/* attn_kern.c - the fused attention's kernel path (see attn.h, attn_kern.h),
 * compiled once per instruction set: -DATTN_KERN_AVX512 (16-float vectors,
 * AVX-512's flags) and -DATTN_KERN_AVX2 (8-float vectors, AVX2 and FMA with
 * AVX-512 off); the Makefile builds both objects from this file.
 *
 * A unit of work is one kv head of one sequence with the query heads that
 * read it (forward and backward alike), so what a unit copies serves every
 * tile of its whole GQA group: K^T (and V^T in the backward), the operands
 * read across a row, transposed into (hd, Tp + LPAD) with zeros past T, and
 * V's (forward) or K's (backward) rows made contiguous. A tile's score
 * columns are keys [jb, jb + nc) with jb its first visible key rounded down
 * to KA and nc a multiple of KA. Rows go in blocks of GEMM_MR, each
 * computing only the KA-wide column blocks its rows can see, so the masked
 * half of the diagonal and the keys a sliding window hides cost (almost)
 * nothing; products that read key rows walk them in chunks that stay in
 * L1. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "engine/attn_kern.h"
#include "engine/fastmath.h"
#include "engine/gemm.h"

#if defined(ATTN_KERN_AVX512)
#define VW         16
#define KERN(name) name##_avx512
#elif defined(ATTN_KERN_AVX2)
#define VW         8
#define KERN(name) name##_avx2
#else
#error "attn_kern.c is built with -DATTN_KERN_AVX512 or -DATTN_KERN_AVX2 (see the Makefile)"
#endif

/* Rows this far ahead are prefetched by the copies below (copy_rows; 2 VW
 * blocks in pack_keys_t): a kv head's rows are ks floats apart and were last
 * written by another pass, so each row's first touch waits on L3 unless it
 * was asked for earlier. */
#define AHEAD 16

/* The lines of row x (hd floats), asked for ahead of their use. */
static inline void prefetch_row(const float *x, int hd) {
    for (int d = 0; d < hd; d += 16) __builtin_prefetch(x + d);
}

/* R (T, hd) = one kv head's rows (row stride ks), contiguous. */
static void copy_rows(float *R, const float *k, int ks, int hd, int T) {
    for (int j = 0; j < T; j++) {
        if (j + AHEAD < T) prefetch_row(k + (size_t)(j + AHEAD) * ks, hd);
        memcpy(R + (size_t)j * hd, k + (size_t)j * ks, (size_t)hd * sizeof *R);
    }
}

/* ------------------------------------------------------------- vectors */

/* Softmax rows, row dots and the transposes in vectors of VW floats (GCC's
 * generic vectors, one register of the instruction set this file is
 * compiled for). A row is taken in whole vectors over the VW-aligned span
 * around its visible keys [jl, jh], lanes outside them selected away, so it
 * costs no scalar remainder loops. */
typedef float vf __attribute__((vector_size(VW * 4)));
typedef int vi __attribute__((vector_size(VW * 4)));
typedef float vfu __attribute__((vector_size(VW * 4), aligned(4)));

#if VW == 16
static const vi iota = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
/* lanes [VW/2, VW) then [0, VW/2), and so on halving: the folds of hmax/hsum */
#define FOLD1(a) __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7)
#define FOLD2(a) __builtin_shufflevector(a, a, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3)
#define FOLD3(a) __builtin_shufflevector(a, a, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1)
#define FOLD4(a) __builtin_shufflevector(a, a, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0)
/* the low and high halves of a and b interleaved: one round of the transpose */
#define ZIP_LO(a, b)                                                                               \
    __builtin_shufflevector(a, b, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23)
#define ZIP_HI(a, b)                                                                               \
    __builtin_shufflevector(a, b, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31)
#define LOG2_VW 4
#else
static const vi iota = {0, 1, 2, 3, 4, 5, 6, 7};
#define FOLD1(a)     __builtin_shufflevector(a, a, 4, 5, 6, 7, 0, 1, 2, 3)
#define FOLD2(a)     __builtin_shufflevector(a, a, 2, 3, 0, 1, 2, 3, 0, 1)
#define FOLD3(a)     __builtin_shufflevector(a, a, 1, 0, 1, 0, 1, 0, 1, 0)
#define FOLD4(a)     (a)
#define ZIP_LO(a, b) __builtin_shufflevector(a, b, 0, 8, 1, 9, 2, 10, 3, 11)
#define ZIP_HI(a, b) __builtin_shufflevector(a, b, 4, 12, 5, 13, 6, 14, 7, 15)
#define LOG2_VW      3
#endif
static const vf zero = {0};

static inline vf vsel(vi m, vf a, vf b) {
    return (vf)((m & (vi)a) | (~m & (vi)b));
}

static inline vf vmax(vf a, vf b) {
    return vsel(a > b, a, b);
}

static inline vf vload(const float *x) {
    return *(const vfu *)x;
}

static inline void vstore(float *x, vf v) {
    *(vfu *)x = v;
}

static inline float hmax(vf a) {
    a = vmax(a, FOLD1(a));
    a = vmax(a, FOLD2(a));
    a = vmax(a, FOLD3(a));
    if (VW == 16) a = vmax(a, FOLD4(a));
    return a[0];
}

static inline float hsum(vf a) {
    a += FOLD1(a);
    a += FOLD2(a);
    a += FOLD3(a);
    if (VW == 16) a += FOLD4(a);
    return a[0];
}

/* fast_expf (fastmath.h) on VW lanes, the same steps. */
static inline vf vexp(vf x) {
    x = vmax(x, zero - 87.0f);
    const vf n = FAST_EXP_ROUND(x), r = FAST_EXP_REDUCE(x, n);
    const vf p = FAST_EXP_POLY(r);
    vi bits = (__builtin_convertvector(n, vi) + 127) << 23;
    return p * (vf)bits;
}

/* Lanes of the vector at column j that are in [jl, jh]. */
static inline vi visible(int j, int jl, int jh) {
    const vi c = j + iota;
    return (c >= jl) & (c <= jh);
}

/* The forward's row s (nc columns, nc a multiple of VW past jh): s =
 * exp(scale (s - max)) over [jl, jh], zero elsewhere. Returns the row sum
 * (VW lanes, folded in halves); *mx = the row's max score. */
static float softmax_row(float *s, int jl, int jh, int nc, float scale, float *mx) {
    const int a = jl / VW * VW, e = (jh + VW) / VW * VW;
    vf m = zero - INFINITY;
    for (int j = a; j < e; j += VW) m = vmax(m, vsel(visible(j, jl, jh), vload(s + j), m));
    const float M = hmax(m);
    vf sum = zero;
    for (int j = a; j < e; j += VW) {
        vf x = vsel(visible(j, jl, jh), vexp((vload(s + j) - M) * scale), zero);
        vstore(s + j, x);
        sum += x;
    }
    for (int j = 0; j < a; j++) s[j] = 0.0f;
    for (int j = e; j < nc; j++) s[j] = 0.0f;
    *mx = M;
    return hsum(sum);
}

/* The backward's rows p (scores in, probabilities out) and ds (dP in,
 * dS out), nc columns: p = exp(scale p - L), ds = scale p (ds - Di) over
 * [jl, jh], both zero elsewhere. */
static void dsoftmax_row(float *p, float *ds, int jl, int jh, int nc, float scale, float L,
                         float Di) {
    const int a = jl / VW * VW, e = (jh + VW) / VW * VW;
    for (int j = a; j < e; j += VW) {
        const vi vis = visible(j, jl, jh);
        const vf x = vsel(vis, vexp(vload(p + j) * scale - L), zero);
        vstore(p + j, x);
        vstore(ds + j, vsel(vis, scale * x * (vload(ds + j) - Di), zero));
    }
    for (int j = 0; j < a; j++) p[j] = ds[j] = 0.0f;
    for (int j = e; j < nc; j++) p[j] = ds[j] = 0.0f;
}

/* The transpose of VW rows of VW floats (row r at x + r*xs) into VW rows at
 * y + c*ys: log2(VW) rounds of interleaving row i with row i + VW/2, each
 * round rotating the bits of (row, column) by one place. */
static inline void transpose(float *y, size_t ys, const float *x, size_t xs) {
    vf r[VW], t[VW];
    for (int i = 0; i < VW; i++) r[i] = vload(x + i * xs);
    for (int round = 0; round < LOG2_VW; round++) {
        for (int i = 0; i < VW / 2; i++) {
            t[2 * i] = ZIP_LO(r[i], r[i + VW / 2]);
            t[2 * i + 1] = ZIP_HI(r[i], r[i + VW / 2]);
        }
        for (int i = 0; i < VW; i++) r[i] = t[i];
    }
    for (int i = 0; i < VW; i++) vstore(y + i * ys, r[i]);
}

/* Kt (hd, nc; row stride ld) = keys [j0, j0 + nc) of one kv head transposed,
 * zero past T. k: that head's keys, row stride ks. In blocks of VW keys by
 * VW dimensions where both are whole, element by element elsewhere. */
static void pack_keys_t(float *Kt, int ld, const float *k, int ks, int hd, int j0, int nc, int T) {
    for (int c0 = 0; c0 < nc; c0 += VW) {
        const int n = imin(VW, nc - c0), live = imax(0, imin(n, T - j0 - c0));
        const float *kc = k + (size_t)(j0 + c0) * ks;
        for (int c = 2 * VW; c < 3 * VW; c++)
            if (j0 + c0 + c < T) prefetch_row(kc + (size_t)c * ks, hd);
        int d0 = 0;
        if (live == VW)
            for (; d0 + VW <= hd; d0 += VW)
                transpose(Kt + (size_t)d0 * ld + c0, (size_t)ld, kc + d0, (size_t)ks);
        for (int d = d0; d < hd; d++) {
            float *restrict dst = Kt + (size_t)d * ld + c0;
            for (int c = 0; c < live; c++) dst[c] = kc[(size_t)c * ks + d];
            for (int c = live; c < n; c++) dst[c] = 0.0f;
        }
    }
}

/* sum x[d] y[d] over d < n, in VW float lanes when n is a multiple of VW
 * (dot_f64 otherwise). */
static float dot_row(const float *x, const float *y, int n) {
    if (n % VW) return (float)dot_f64(x, y, n);
    vf acc = zero;
    for (int d = 0; d < n; d += VW) acc += vload(x + d) * vload(y + d);
    return hsum(acc);
}

/* Score columns [*c0, *c1) (relative to jb) that rows [r0, r1) of the tile
 * starting at row i0 compute: whole KA blocks covering every key a row of
 * the block can see. */
static inline void block_cols(int i0, int r0, int r1, int jb, int window, int *c0, int *c1) {
    *c0 = (first_key(i0 + r0, window) - jb) / KA * KA;
    *c1 = (int)round_up((size_t)(i0 + r1 - jb), KA);
}

/* Keys per chunk of the products that read key rows or columns: a chunk of
 * K^T or V (16 KB) stays in L1 while every row block of the tile uses it. */
#define PANEL 64
static inline int chunk_keys(int hd) {
    return imax(16, 4096 / hd);
}

/* S (nq, ld) = q k^T for rows [i0, i0 + nq) against columns from jb, block
 * by block (see block_cols); other columns are left as they were. q: row i0
 * of the query head (row stride qs); Kt: packed keys whose column 0 is key
 * jb. */
static void block_scores(gemm_rows_fn *rows, float *S, int ld, const float *q, int qs,
                         const float *Kt, int ldk, int hd, int i0, int nq, int jb, int window) {
    for (int p0 = 0; p0 < i0 + nq - jb; p0 += PANEL) {
        int rs = 0, pc0 = 0, pc1 = 0; /* row blocks [rs, r0) share columns [pc0, pc1) */
        for (int r0 = 0;; r0 += GEMM_MR) {
            int c0 = 0, c1 = 0;
            if (r0 < nq) {
                block_cols(i0, r0, imin(nq, r0 + GEMM_MR), jb, window, &c0, &c1);
                c0 = imax(c0, p0), c1 = imin(c1, p0 + PANEL);
                if (c0 >= c1) c0 = c1 = 0;
            }
            if (r0 < nq && c0 == pc0 && c1 == pc1) continue;
            if (pc0 < pc1)
                rows(rs, imin(r0, nq), pc1 - pc0, hd, q, qs, 1, Kt + pc0, ldk, S + pc0, ld, 0);
            if (r0 >= nq) break;
            rs = r0, pc0 = c0, pc1 = c1;
        }
    }
}

/* C rows [i0, i0 + nq) (row stride ldc) = A B with A the tile's (nq, ld)
 * probabilities or score gradient (columns from key jb) and B the keys'
 * rows (b: key jb's row, stride ks), each row block summing over the keys
 * its rows can see, in key order: chunk by chunk, each continuing the sums
 * the last one stored (the same float operations as one pass). */
static void block_apply(gemm_rows_fn *rows, float *C, int ldc, const float *A, int ld,
                        const float *b, int ks, int hd, int i0, int nq, int jb, int window) {
    const int kc = chunk_keys(hd);
    for (int p0 = 0; p0 < i0 + nq - jb; p0 += kc) {
        /* row blocks [rs, r0) share keys [pa, pe) and whether they continue */
        int rs = 0, pa = 0, pe = 0, pacc = 0;
        for (int r0 = 0;; r0 += GEMM_MR) {
            int a = 0, e = 0, acc = 0;
            if (r0 < nq) {
                const int lo = first_key(i0 + r0, window) - jb;
                const int hi = i0 + imin(nq, r0 + GEMM_MR) - jb;
                a = imax(lo, p0), e = imin(hi, p0 + kc), acc = a > lo;
                if (a >= e) a = e = acc = 0;
            }
            if (r0 < nq && a == pa && e == pe && acc == pacc) continue;
            if (pa < pe)
                rows(rs, imin(r0, nq), hd, pe - pa, A + pa, ld, 1, b + (size_t)pa * ks, ks,
                     C + (size_t)i0 * ldc, ldc, pacc);
            if (r0 >= nq) break;
            rs = r0, pa = a, pe = e, pacc = acc;
        }
    }
}

/* block_apply_t over the keys [jb + c0, jb + c1), adding to C or not. */
static void keys_apply_t(gemm_rows_fn *rows, float *C, int ldc, const float *A, int ld,
                         const float *Bm, int ldb, int hd, int i0, int nq, int jb, int c0, int c1,
                         int window, int acc_in) {
    int cs = c0, plo = 0, phi = 0; /* key blocks [cs, c) share rows [plo, phi) */
    for (int c = c0;; c += GEMM_MR) {
        int lo = 0, hi = 0;
        if (c < c1) {
            lo = imax(0, jb + c - i0);
            hi = imin(nq, jb + imin(c1, c + GEMM_MR) - 1 + window - i0 + 1);
            if (lo >= hi) lo = hi = 0;
        }
        if (c < c1 && lo == plo && hi == phi) continue;
        if (plo < phi)
            rows(0, imin(c, c1) - cs, hd, phi - plo, A + (size_t)plo * ld + cs, 1, ld,
                 Bm + (size_t)plo * ldb, ldb, C + (size_t)cs * ldc, ldc, acc_in);
        if (c >= c1) break;
        cs = c, plo = lo, phi = hi;
    }
}

/* C rows of keys [j0, i0 + nq) (key jb's row at C, stride ldc) (+)= A^T B
 * with A (nq, ld) as in block_apply and B the tile's rows (row stride ldb):
 * each block of GEMM_MR keys sums over the tile's rows that can see one of
 * them, in row order. Keys from `fresh` on are overwritten (their first
 * contribution), the others added to. */
static void block_apply_t(gemm_rows_fn *rows, float *C, int ldc, const float *A, int ld,
                          const float *Bm, int ldb, int hd, int i0, int nq, int jb, int j0,
                          int fresh, int window) {
    fresh = imax(j0, imin(fresh, i0 + nq));
    keys_apply_t(rows, C, ldc, A, ld, Bm, ldb, hd, i0, nq, jb, j0 - jb, fresh - jb, window, 1);
    keys_apply_t(rows, C, ldc, A, ld, Bm, ldb, hd, i0, nq, jb, fresh - jb, i0 + nq - jb, window, 0);
}

void KERN(attn_kern_forward)(gemm_rows_fn *rows_s, gemm_rows_fn *rows_h, float *y, float *lse,
                             const float *q, const float *k, const float *v, int B, int T, int H,
                             int Hkv, int hd, int window, float *work, int threads) {
    const int group = H / Hkv, qs = H * hd, ks = Hkv * hd, tiles = (T + BQ - 1) / BQ;
    const int units = B * Hkv, tp = (int)round_up((size_t)T, KA), ldt = tp + LPAD;
    const float scale = 1.0f / sqrtf((float)hd);
    /* A unit is one kv head of one sequence and the query heads that read
     * it: K^T is copied once for all their tiles. */
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (units > 1)
    for (int u = 0; u < units; u++) {
        const int b = u / Hkv, g = u % Hkv;
        const size_t ko = (size_t)b * T * ks + (size_t)g * hd;
        float *S = work + (size_t)omp_get_thread_num() * attn_thread_floats(hd, T);
        float *Kt = S + 2 * (size_t)BQ * ldt, *Vr = Kt + 2 * (size_t)hd * ldt;
        float *inv = Vr + (size_t)hd * ldt;
        pack_keys_t(Kt, ldt, k + ko, ks, hd, 0, tp, T);
        copy_rows(Vr, v + ko, ks, hd, T);
        for (int h = g * group; h < (g + 1) * group; h++) {
            const size_t qo = (size_t)b * T * qs + (size_t)h * hd;
            float *lse_h = lse + ((size_t)b * H + h) * T;
            for (int t = 0; t < tiles; t++) {
                const int i0 = t * BQ, i1 = imin(T, i0 + BQ), nq = i1 - i0;
                const int jb = first_key(i0, window) / KA * KA;
                const int nc = (int)round_up((size_t)(i1 - jb), KA), ld = nc + LPAD;
                block_scores(rows_s, S, ld, q + qo + (size_t)i0 * qs, qs, Kt + jb, ldt, hd, i0, nq,
                             jb, window);
                /* S = exp(scale S - max) over each row's keys, zero elsewhere;
                 * inv = 1 / its row sums, applied to y below */
                for (int i = 0; i < nq; i++) {
                    const int row = i0 + i, jl = first_key(row, window) - jb, jh = row - jb;
                    float mx;
                    const float sum = softmax_row(S + (size_t)i * ld, jl, jh, nc, scale, &mx);
                    inv[i] = 1.0f / sum;
                    lse_h[row] = mx * scale + logf(sum);
                }
                /* y rows (nq, hd) = softmax V[jb:] = inv * (S V[jb:]) */
                block_apply(rows_h, y + qo, qs, S, ld, Vr + (size_t)jb * hd, hd, hd, i0, nq, jb,
                            window);
                for (int i = 0; i < nq; i++) {
                    float *restrict yi = y + qo + (size_t)(i0 + i) * qs;
                    for (int d = 0; d < hd; d++) yi[d] *= inv[i];
                }
            }
        }
    }
}

void KERN(attn_kern_backward)(gemm_rows_fn *rows_s, gemm_rows_fn *rows_h, float *dq, float *dk,
                              float *dv, const float *dy, const float *y, const float *lse,
                              const float *q, const float *k, const float *v, int B, int T, int H,
                              int Hkv, int hd, int window, float *work, int threads) {
    const int group = H / Hkv, qs = H * hd, ks = Hkv * hd, tiles = (T + BQ - 1) / BQ;
    const int units = B * Hkv, tp = (int)round_up((size_t)T, KA), ldt = tp + LPAD;
    const float scale = 1.0f / sqrtf((float)hd);
    /* A unit owns one kv head of one sequence: its dk, dv rows and the dq
     * rows of the query heads that read it, so no two threads write the
     * same float and the sums run in a fixed order. */
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (units > 1)
    for (int u = 0; u < units; u++) {
        const int b = u / Hkv, g = u % Hkv;
        const size_t ko = (size_t)b * T * ks + (size_t)g * hd;
        float *P = work + (size_t)omp_get_thread_num() * attn_thread_floats(hd, T);
        float *dS = P + (size_t)BQ * ldt, *Kt = dS + (size_t)BQ * ldt;
        float *Vt = Kt + (size_t)hd * ldt, *Kr = Vt + (size_t)hd * ldt;
        float *Qc = Kr + (size_t)hd * ldt, *Oc = Qc + (size_t)BQ * hd, *Dr = Oc + (size_t)BQ * hd;
        pack_keys_t(Kt, ldt, k + ko, ks, hd, 0, tp, T);
        pack_keys_t(Vt, ldt, v + ko, ks, hd, 0, tp, T);
        copy_rows(Kr, k + ko, ks, hd, T);
        for (int h = g * group; h < (g + 1) * group; h++) {
            const size_t qo = (size_t)b * T * qs + (size_t)h * hd;
            const float *lse_h = lse + ((size_t)b * H + h) * T;
            for (int t = 0; t < tiles; t++) {
                const int i0 = t * BQ, i1 = imin(T, i0 + BQ), nq = i1 - i0;
                const int j0 = first_key(i0, window), jb = j0 / KA * KA;
                const int nc = (int)round_up((size_t)(i1 - jb), KA), ld = nc + LPAD;
                const float *dO = dy + qo + (size_t)i0 * qs;
                /* the tile's q and dO rows, contiguous (hd floats apart) */
                for (int i = 0; i < nq; i++) {
                    memcpy(Qc + (size_t)i * hd, q + qo + (size_t)(i0 + i) * qs,
                           (size_t)hd * sizeof *Qc);
                    memcpy(Oc + (size_t)i * hd, dO + (size_t)i * qs, (size_t)hd * sizeof *Oc);
                    Dr[i] = dot_row(dO + (size_t)i * qs, y + qo + (size_t)(i0 + i) * qs, hd);
                }
                /* S = q K^T and dP = dO V^T, the visible blocks */
                block_scores(rows_s, P, ld, Qc, hd, Kt + jb, ldt, hd, i0, nq, jb, window);
                block_scores(rows_s, dS, ld, Oc, hd, Vt + jb, ldt, hd, i0, nq, jb, window);
                /* P = exp(scale S - lse); dS = scale P (dP - rowsum(dO * y));
                 * both zero outside each row's keys */
                for (int i = 0; i < nq; i++) {
                    const int row = i0 + i, jl = first_key(row, window) - jb, jh = row - jb;
                    dsoftmax_row(P + (size_t)i * ld, dS + (size_t)i * ld, jl, jh, nc, scale,
                                 lse_h[row], Dr[i]);
                }
                /* dV[j0:i1] += P^T dO;  dK[j0:i1] += dS^T q;  dQ = dS K[jb:]. The
                 * group's first head meets keys [i0, i1) first here (row j is
                 * the first to see key j): those rows are overwritten. */
                const int fresh = h == g * group ? i0 : i1;
                block_apply_t(rows_h, dv + ko + (size_t)jb * ks, ks, P, ld, Oc, hd, hd, i0, nq, jb,
                              j0, fresh, window);
                block_apply_t(rows_h, dk + ko + (size_t)jb * ks, ks, dS, ld, Qc, hd, hd, i0, nq, jb,
                              j0, fresh, window);
                block_apply(rows_h, dq + qo, qs, dS, ld, Kr + (size_t)jb * hd, hd, hd, i0, nq, jb,
                            window);
            }
        }
    }
}
