/* test_attn.c - the fused attention (attn.c) against the plain reference
 * (ops_attention_forward/backward): windows, GQA, T below a tile and across
 * tiles, odd head sizes, one and several threads, with BLAS and with every
 * register-tiled kernel this CPU has (gemm_select), and the same bits
 * whatever the thread count. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/attn.h"
#include "engine/gemm.h"
#include "engine/gemm_bf16.h"
#include "engine/ops.h"
#include "engine/rng.h"
#include "tests/testutil.h"

typedef struct {
    int B, T, H, Hkv, hd, window, threads;
} shape_t;

static float max_abs(const float *x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

/* Largest |a - b| over max |b| (or over 1 when b is all zero). */
static float rel_err(const float *a, const float *b, size_t n) {
    float e = 0.0f;
    for (size_t i = 0; i < n; i++) e = fmaxf(e, fabsf(a[i] - b[i]));
    float s = max_abs(b, n);
    return e / (s > 0.0f ? s : 1.0f);
}

/* bf16 products (attn_bf16.c) against the float32 reference. Each product
 * rounds both operands to 8 significant bits (unit roundoff u = 2^-8), so
 * a product's output moves by at most ~2u of its sum of |terms|; the
 * scores (|q k| up to ~4 hd here) carry that into the probabilities
 * through exp, and the backward's dS = P (dP - D) cancels. Measured
 * rel_err (largest |error| over the largest |output|) on these shapes:
 * up to 1.2e-2 (dk); the bound allows about twice that. */
#define BF16_ATTN_BOUND 2.5e-2f

/* check's bound on each output's rel_err: float32's (2e-5), or bf16's
 * (below) when `bf16`, which also requires some output to move by more
 * than float32 rounding (the products did run in bf16). */
static void check_bounds(shape_t s, int bf16);

static void check(shape_t s) {
    check_bounds(s, 0);
}

static void check_bounds(shape_t s, int bf16) {
    const size_t N = (size_t)s.B * s.T, qn = N * s.H * s.hd, kn = N * s.Hkv * s.hd;
    float *q = malloc(qn * 4), *k = malloc(kn * 4), *v = malloc(kn * 4), *dy = malloc(qn * 4);
    float *y_ref = malloc(qn * 4), *y = malloc(qn * 4);
    float *P = malloc((size_t)s.B * s.H * s.T * s.T * 4), *scratch = malloc((size_t)s.T * s.T * 4);
    float *lse = malloc((size_t)s.B * s.H * s.T * 4);
    float *dq_ref = malloc(qn * 4), *dk_ref = malloc(kn * 4), *dv_ref = malloc(kn * 4);
    float *dq = malloc(qn * 4), *dk = malloc(kn * 4), *dv = malloc(kn * 4);
    float *work = malloc(attn_work_floats(s.hd, s.T, s.threads) * 4);
    cr_assert(q && k && v && dy && y_ref && y && P && scratch && lse && dq_ref && dk_ref &&
              dv_ref && dq && dk && dv && work);
    rng_t r;
    rng_seed(&r, (uint64_t)(s.T * 131 + s.hd * 7 + s.window));
    /* q, k of unit RMS per head as the model's QK-norm makes them, scaled up
     * so the softmax is far from uniform. */
    for (size_t i = 0; i < qn; i++) q[i] = 2.0f * rng_normal(&r);
    for (size_t i = 0; i < kn; i++) k[i] = 2.0f * rng_normal(&r);
    for (size_t i = 0; i < kn; i++) v[i] = rng_normal(&r);
    for (size_t i = 0; i < qn; i++) dy[i] = rng_normal(&r);
    /* garbage in the outputs: everything must be overwritten */
    for (size_t i = 0; i < qn; i++) y[i] = dq[i] = NAN;
    for (size_t i = 0; i < kn; i++) dk[i] = dv[i] = NAN;

    ops_attention_forward(y_ref, P, q, k, v, s.B, s.T, s.H, s.Hkv, s.hd, s.window);
    ops_attention_backward(dq_ref, dk_ref, dv_ref, dy, P, q, k, v, s.B, s.T, s.H, s.Hkv, s.hd,
                           s.window, scratch);
    attn_forward(y, lse, q, k, v, s.B, s.T, s.H, s.Hkv, s.hd, s.window, work, s.threads);
    attn_backward(dq, dk, dv, dy, y, lse, q, k, v, s.B, s.T, s.H, s.Hkv, s.hd, s.window, work,
                  s.threads);

    const char *what[4] = {"y", "dq", "dk", "dv"};
    const float *got[4] = {y, dq, dk, dv}, *want[4] = {y_ref, dq_ref, dk_ref, dv_ref};
    const size_t n[4] = {qn, qn, kn, kn};
    float most = 0.0f;
    for (int t = 0; t < 4; t++) {
        float e = rel_err(got[t], want[t], n[t]);
        most = fmaxf(most, e);
        cr_expect(e <= (bf16 ? BF16_ATTN_BOUND : 2e-5f),
                  "%s B %d T %d H %d Hkv %d hd %d window %d threads %d: %s rel err %g",
                  bf16 ? "bf16" : "fp32", s.B, s.T, s.H, s.Hkv, s.hd, s.window, s.threads, what[t],
                  e);
    }
    if (bf16) cr_expect(most > 1e-4f, "bf16: every output within float32 rounding: not bf16");
    free(q), free(k), free(v), free(dy), free(y_ref), free(y), free(P), free(scratch), free(lse);
    free(dq_ref), free(dk_ref), free(dv_ref), free(dq), free(dk), free(dv), free(work);
}

/* check(s) under every kernel path this CPU runs, each forced through
 * NIGHTSHIFT_ISA as a run forces it. */
static void check_isas(shape_t s) {
    for (int i = 0; i < 3; i++)
        if (tu_select_isa(tu_isas[i], 2) == 0) check(s);
    tu_select_isa_auto();
}

Test(attn, matches_reference_small_and_odd) {
    check_isas((shape_t){1, 1, 1, 1, 4, 1, 1});   /* one token */
    check_isas((shape_t){2, 5, 2, 1, 3, 2, 1});   /* odd head size, GQA, short window */
    check_isas((shape_t){3, 17, 3, 3, 5, 17, 2}); /* full window, T below a tile */
    check_isas((shape_t){2, 9, 4, 2, 6, 0, 2});   /* window 0: each query sees itself */
    check_isas((shape_t){1, 3, 2, 1, 16, 0, 1});  /* window 0 on a kernel's head size */
}

Test(attn, matches_reference_across_tiles) {
    check_isas((shape_t){2, 130, 4, 2, 8, 130, 2}); /* causal, three query tiles */
    check_isas((shape_t){1, 200, 2, 1, 16, 70, 2}); /* sliding window skips whole tiles */
    check_isas((shape_t){2, 128, 2, 2, 32, 64, 1}); /* tile-aligned, half window */
    check_isas((shape_t){1, 96, 6, 2, 12, 31, 3});  /* more threads than cores */
}

Test(attn, matches_reference_head_dim_64) {
    check_isas((shape_t){2, 256, 4, 2, 64, 256, 2}); /* bench L's shape, two sequences */
    check_isas((shape_t){1, 256, 4, 2, 64, 256, 1}); /* one thread */
    check_isas((shape_t){1, 150, 4, 2, 64, 150, 2}); /* T not a multiple of the tile */
    check_isas((shape_t){2, 150, 2, 1, 64, 37, 2});  /* window not a multiple of anything */
    check_isas((shape_t){1, 256, 4, 4, 64, 128, 1}); /* half window, no GQA */
    check_isas((shape_t){1, 100, 4, 2, 32, 99, 2});  /* window T-1 */
}

/* ------------------------------------------------------------------ bf16 */

static void run(float *out, shape_t s, const float *in);

static void check_bf16(shape_t s) {
    if (!tu_select_bf16(s.threads)) return;
    check_bounds(s, 1);
    if (gemm_bf16_uses_amx()) { /* the vdpbf16ps kernel too */
        gemm_bf16_set_amx(0);
        check_bounds(s, 1);
        gemm_bf16_set_amx(1);
    }
    tu_select_isa_auto();
}

Test(attn, bf16_within_rounding_bounds) {
    check_bf16((shape_t){2, 256, 4, 4, 32, 256, 2}); /* bench M's shape */
    check_bf16((shape_t){1, 256, 4, 2, 64, 256, 1}); /* L's */
    check_bf16((shape_t){2, 150, 4, 2, 64, 37, 2});  /* a short window, T not a tile's multiple */
    check_bf16((shape_t){1, 77, 2, 1, 32, 200, 2});  /* one partial tile, odd rows */
    check_bf16((shape_t){2, 200, 2, 2, 32, 70, 1});  /* sliding window skips whole tiles */
    check_bf16((shape_t){1, 1, 2, 1, 32, 1, 1});     /* one token */
    check_bf16((shape_t){2, 40, 2, 2, 32, 0, 2});    /* window 0: each query sees itself */
}

/* bf16 attention too gives the same bits on one thread and on two. */
Test(attn, bf16_same_bits_for_any_thread_count) {
    shape_t s = {3, 150, 4, 2, 64, 150, 1};
    const size_t N = (size_t)s.B * s.T, qn = N * s.H * s.hd, kn = N * s.Hkv * s.hd;
    const size_t nin = 2 * qn + 2 * kn, nout = 2 * qn + 2 * kn + (size_t)s.B * s.H * s.T;
    float *in = malloc(nin * 4), *a = malloc(nout * 4), *b = malloc(nout * 4);
    cr_assert(in && a && b);
    rng_t r;
    rng_seed(&r, 7);
    for (size_t i = 0; i < nin; i++) in[i] = rng_normal(&r);
    if (tu_select_bf16(1)) {
        s.threads = 1;
        run(a, s, in);
        cr_assert(tu_select_bf16(2));
        s.threads = 2;
        run(b, s, in);
        cr_expect(memcmp(a, b, nout * 4) == 0, "bf16: 1 and 2 threads differ");
        tu_select_isa_auto();
    }
    free(in), free(a), free(b);
}

/* The outputs of one run, for comparing bits across thread counts. */
static void run(float *out, shape_t s, const float *in) {
    const size_t N = (size_t)s.B * s.T, qn = N * s.H * s.hd, kn = N * s.Hkv * s.hd;
    const float *q = in, *k = q + qn, *v = k + kn, *dy = v + kn;
    float *y = out, *dq = y + qn, *dk = dq + qn, *dv = dk + kn, *lse = dv + kn;
    float *work = malloc(attn_work_floats(s.hd, s.T, s.threads) * 4);
    cr_assert(work);
    attn_forward(y, lse, q, k, v, s.B, s.T, s.H, s.Hkv, s.hd, s.window, work, s.threads);
    attn_backward(dq, dk, dv, dy, y, lse, q, k, v, s.B, s.T, s.H, s.Hkv, s.hd, s.window, work,
                  s.threads);
    free(work);
}

Test(attn, same_bits_for_any_thread_count) {
    shape_t s = {3, 150, 4, 2, 64, 150, 1};
    const size_t N = (size_t)s.B * s.T, qn = N * s.H * s.hd, kn = N * s.Hkv * s.hd;
    const size_t nin = 2 * qn + 2 * kn, nout = 2 * qn + 2 * kn + (size_t)s.B * s.H * s.T;
    float *in = malloc(nin * 4), *a = malloc(nout * 4), *b = malloc(nout * 4);
    cr_assert(in && a && b);
    rng_t r;
    rng_seed(&r, 7);
    for (size_t i = 0; i < nin; i++) in[i] = rng_normal(&r);
    for (int i = 0; i < 3; i++) {
        if (tu_select_isa(tu_isas[i], 2) != 0) continue;
        s.threads = 1;
        run(a, s, in);
        s.threads = 2;
        run(b, s, in);
        cr_expect(memcmp(a, b, nout * 4) == 0, "%s: 1 and 2 threads differ", tu_isas[i]);
    }
    tu_select_isa_auto();
    free(in), free(a), free(b);
}
