/* test_gemm.c - the linear layers' kernels (gemm.c) against a plain
 * double-precision reference: every kernel this CPU has and BLAS, row counts
 * that end in a partial tile, a strided x, column counts that end in a
 * partial panel, beta 0 and 1, shapes that fall back to BLAS, one and two
 * threads, and the same bits whatever the thread count. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gemm.h"
#include "engine/gemm_bf16.h"
#include "engine/rng.h"
#include "engine/transpose.h"
#include "tests/testutil.h"

typedef struct {
    int N, in, out, ldx;
} shape_t;

/* y (N, out) = x W^T; dW += dy^T x; dx = beta dx + dy W, all in double. */
static void reference(double *y, double *dW, double *dx, const float *x, const float *W,
                      const float *dy, const float *dW0, const float *dx0, float beta, shape_t s) {
    for (int i = 0; i < s.N; i++)
        for (int o = 0; o < s.out; o++) {
            double a = 0;
            for (int p = 0; p < s.in; p++) a += (double)x[(size_t)i * s.ldx + p] * W[o * s.in + p];
            y[(size_t)i * s.out + o] = a;
        }
    for (int o = 0; o < s.out; o++)
        for (int p = 0; p < s.in; p++) {
            double a = dW0[o * s.in + p];
            for (int i = 0; i < s.N; i++)
                a += (double)dy[(size_t)i * s.out + o] * x[(size_t)i * s.ldx + p];
            dW[o * s.in + p] = a;
        }
    for (int i = 0; i < s.N; i++)
        for (int p = 0; p < s.in; p++) {
            double a = beta * (double)dx0[(size_t)i * s.ldx + p];
            for (int o = 0; o < s.out; o++)
                a += (double)dy[(size_t)i * s.out + o] * W[o * s.in + p];
            dx[(size_t)i * s.in + p] = a;
        }
}

/* Largest |got - want| over max |want|. */
static double rel_err(const float *got, size_t gstride, const double *want, int rows, int cols) {
    double e = 0, m = 0;
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            e = fmax(e, fabs(got[(size_t)i * gstride + j] - want[(size_t)i * cols + j]));
            m = fmax(m, fabs(want[(size_t)i * cols + j]));
        }
    return e / (m > 0 ? m : 1);
}

static float *randn(rng_t *r, size_t n) {
    float *x = malloc(n * sizeof *x);
    cr_assert(x);
    for (size_t i = 0; i < n; i++) x[i] = rng_normal(r);
    return x;
}

static void check(const char *isa, shape_t s, float beta, int threads) {
    rng_t r;
    rng_seed(&r, (uint64_t)(s.N * 31 + s.in * 7 + s.out));
    size_t xn = (size_t)s.N * s.ldx;
    float *x = randn(&r, xn), *W = randn(&r, (size_t)s.out * s.in);
    float *dy = randn(&r, (size_t)s.N * s.out), *dW0 = randn(&r, (size_t)s.out * s.in);
    float *dx0 = randn(&r, xn), *y = malloc((size_t)s.N * s.out * sizeof *y);
    float *dW = malloc((size_t)s.out * s.in * sizeof *dW), *dx = malloc(xn * sizeof *dx);
    double *y_ref = malloc((size_t)s.N * s.out * sizeof *y_ref);
    double *dW_ref = malloc((size_t)s.out * s.in * sizeof *dW_ref);
    double *dx_ref = malloc((size_t)s.N * s.in * sizeof *dx_ref);
    cr_assert(y && dW && dx && y_ref && dW_ref && dx_ref);
    reference(y_ref, dW_ref, dx_ref, x, W, dy, dW0, dx0, beta, s);

    cr_assert_eq(tu_select_isa(isa, threads), 0);
    for (size_t i = 0; i < (size_t)s.N * s.out; i++) y[i] = NAN; /* must be overwritten */
    memcpy(dW, dW0, (size_t)s.out * s.in * sizeof *dW);
    memcpy(dx, dx0, xn * sizeof *dx);
    if (beta == 0.0f)
        for (int i = 0; i < s.N; i++)
            for (int p = 0; p < s.in; p++) dx[(size_t)i * s.ldx + p] = NAN;
    gemm_linear_forward(y, x, s.ldx, W, s.N, s.in, s.out);
    gemm_linear_backward(dx, s.ldx, beta, dW, dy, x, W, s.N, s.in, s.out);

    double ey = rel_err(y, s.out, y_ref, s.N, s.out), edw = rel_err(dW, s.in, dW_ref, s.out, s.in);
    double edx = rel_err(dx, s.ldx, dx_ref, s.N, s.in);
    cr_expect(ey < 1e-5 && edw < 1e-5 && edx < 1e-5,
              "isa %s N %d in %d out %d ldx %d beta %g threads %d: rel err y %g dW %g dx %g", isa,
              s.N, s.in, s.out, s.ldx, beta, threads, ey, edw, edx);
    /* the columns of x past `in` are not the product's */
    for (int i = 0; i < s.N; i++)
        for (int p = s.in; p < s.ldx; p++)
            cr_expect_eq(dx[(size_t)i * s.ldx + p], dx0[(size_t)i * s.ldx + p]);
    free(x), free(W), free(dy), free(dW0), free(dx0), free(y), free(dW), free(dx);
    free(y_ref), free(dW_ref), free(dx_ref);
}

static const shape_t shapes[] = {
    {1, 8, 8, 8},         /* one row */
    {13, 16, 48, 16},     /* partial row tile, one partial AVX-512 panel */
    {100, 64, 192, 64},   /* S's fused q, k, v */
    {67, 64, 64, 192},    /* x read with a wider row stride */
    {600, 256, 64, 256},  /* S's MLP projection; past one chunk of the weight gradient */
    {40, 32, 2, 64},      /* the value-embedding gate: out 2 goes to BLAS forward */
    {30, 12, 24, 12},     /* in 12: not a whole vector, BLAS */
    {50, 384, 128, 384},  /* the forward's depth in chunks (AVX-512) */
    {20, 1280, 32, 1280}, /* the forward's depth in chunks, both kernels */
    {130, 64, 800, 64},   /* the backward's dx depth in chunks; row blocks of A */
    {450, 264, 280, 272}, /* dW with its operands packed (AVX2), split by rows (in <= out):
                           * 138+ rows a thread, partial tile, two depth chunks, x's stride
                           * not a power of 2 */
    {450, 264, 262, 280}, /* dW split by columns (in > out): every row, packed, a thread's
                           * columns in whole panels but the last (partial) one */
};

/* Every shape on kernel path `isa`, forced through NIGHTSHIFT_ISA as a run
 * forces it. */
static void check_isa(const char *isa) {
    if (tu_select_isa(isa, 1) != 0) return; /* this CPU cannot run it */
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        check(isa, shapes[i], 0.0f, 1);
        check(isa, shapes[i], 1.0f, 2);
    }
    tu_select_isa_auto();
}

Test(gemm, generic_matches_reference) {
    check_isa("generic");
}

Test(gemm, avx2_matches_reference) {
    check_isa("avx2");
}

Test(gemm, avx512_matches_reference) {
    check_isa("avx512");
}

/* Each output is summed by one thread in a fixed order: the thread count
 * does not change a bit. The weight gradient split by rows (in <= out) and
 * by columns; the generic path only by rows: there each thread's share is
 * one OpenBLAS call, and 0.3.21's Haswell kernels sum a column half of dW in
 * another order than the whole (441 of 12,288 floats differ at 500 x 192 x
 * 64; its SkylakeX kernels agree). */
static void check_same_bits(shape_t s) {
    rng_t r;
    rng_seed(&r, 5);
    float *x = randn(&r, (size_t)s.N * s.in), *W = randn(&r, (size_t)s.out * s.in);
    float *dy = randn(&r, (size_t)s.N * s.out);
    float *y[2], *dW[2], *dx[2];
    for (int t = 0; t < 2; t++) {
        y[t] = malloc((size_t)s.N * s.out * sizeof(float));
        dW[t] = malloc((size_t)s.out * s.in * sizeof(float));
        dx[t] = malloc((size_t)s.N * s.in * sizeof(float));
        cr_assert(y[t] && dW[t] && dx[t]);
    }
    for (int i = 0; i < 3; i++) {
        if (s.in > s.out && !strcmp(tu_isas[i], "generic")) continue;
        for (int t = 0; t < 2; t++) {
            if (tu_select_isa(tu_isas[i], t + 1) != 0) break;
            memset(dW[t], 0, (size_t)s.out * s.in * sizeof(float));
            gemm_linear_forward(y[t], x, s.in, W, s.N, s.in, s.out);
            gemm_linear_backward(dx[t], s.in, 0.0f, dW[t], dy, x, W, s.N, s.in, s.out);
            if (t == 0) continue;
            cr_expect(!memcmp(y[0], y[1], (size_t)s.N * s.out * sizeof(float)), "%s: y",
                      tu_isas[i]);
            cr_expect(!memcmp(dW[0], dW[1], (size_t)s.out * s.in * sizeof(float)), "%s: dW",
                      tu_isas[i]);
            cr_expect(!memcmp(dx[0], dx[1], (size_t)s.N * s.in * sizeof(float)), "%s: dx",
                      tu_isas[i]);
        }
    }
    tu_select_isa_auto();
    free(x), free(W), free(dy);
    for (int t = 0; t < 2; t++) free(y[t]), free(dW[t]), free(dx[t]);
}

Test(gemm, same_bits_for_any_thread_count) {
    check_same_bits((shape_t){500, 64, 192, 64});
    check_same_bits((shape_t){500, 192, 64, 192});
}

/* ------------------------------------------------------------------ bf16 */

/* bf16's unit roundoff (8 significant bits) and float32's. */
#define U_BF16 0x1p-8
#define U_F32  0x1p-24

/* One product's output against two references, in double: `exact` sums the
 * float32 operands' products, `rounded` the bf16-rounded operands' (exact
 * in float32: 8 x 8 significant bits), `mag` sums their magnitudes. */
typedef struct {
    double exact, rounded, mag;
} ref_t;

/* The bounds of bf16 products, output by output: against `rounded` only the
 * float32 accumulation errs (K additions, each within U_F32 of the partial
 * sum, which is at most `mag`); against `exact` each operand's rounding adds
 * a relative error of at most U_BF16, so a product's at most
 * 2 U_BF16 + U_BF16^2. A tiny absolute slack covers float32 underflow. Sets
 * *moved when the output differs from `exact` by more than float32 would
 * (the operands were rounded at all). */
static void check_bound(float got, ref_t r, int K, const char *what, int *bad, int *moved) {
    const double acc = (K + 2) * U_F32 * r.mag + 1e-30;
    const double round = (2 * U_BF16 + U_BF16 * U_BF16) * r.mag;
    if (!(fabs(got - r.rounded) <= acc) || !(fabs(got - r.exact) <= round + acc)) {
        if (*bad < 5)
            cr_log_error(
                "%s: got %.9g, rounded operands %.9g (bound %.3g), exact %.9g (bound %.3g)", what,
                got, r.rounded, acc, r.exact, round + acc);
        (*bad)++;
    }
    if (fabs(got - r.exact) > 4 * K * U_F32 * r.mag) *moved = 1;
}

static ref_t dot_ref(const float *a, ptrdiff_t as, const float *b, ptrdiff_t bs, int K, double c0) {
    ref_t r = {c0, c0, fabs(c0)};
    for (int k = 0; k < K; k++) {
        const double x = a[k * as], y = b[k * bs];
        r.exact += x * y;
        r.rounded += (double)gemm_bf16_round(a[k * as]) * gemm_bf16_round(b[k * bs]);
        r.mag += fabs(x * y);
    }
    return r;
}

/* The three products of shape s with bf16 operands on `threads` threads,
 * every output within check_bound's bounds. */
static int check_bf16(shape_t s, float beta, int threads) {
    rng_t r;
    rng_seed(&r, (uint64_t)(s.N * 37 + s.in * 5 + s.out));
    const size_t xn = (size_t)s.N * s.ldx;
    float *x = randn(&r, xn), *W = randn(&r, (size_t)s.out * s.in);
    float *dy = randn(&r, (size_t)s.N * s.out), *dW0 = randn(&r, (size_t)s.out * s.in);
    float *dx0 = randn(&r, xn), *y = malloc((size_t)s.N * s.out * sizeof *y);
    float *dW = malloc((size_t)s.out * s.in * sizeof *dW), *dx = malloc(xn * sizeof *dx);
    cr_assert(y && dW && dx);
    if (!tu_select_bf16(threads)) {
        free(x), free(W), free(dy), free(dW0), free(dx0), free(y), free(dW), free(dx);
        return 0;
    }
    memcpy(dW, dW0, (size_t)s.out * s.in * sizeof *dW);
    memcpy(dx, dx0, xn * sizeof *dx);
    gemm_linear_forward(y, x, s.ldx, W, s.N, s.in, s.out);
    gemm_linear_backward(dx, s.ldx, beta, dW, dy, x, W, s.N, s.in, s.out);
    tu_select_isa_auto();

    int bad = 0, moved = 0;
    char what[128];
    snprintf(what, sizeof what, "N %d in %d out %d ldx %d beta %g threads %d", s.N, s.in, s.out,
             s.ldx, beta, threads);
    for (int i = 0; i < s.N; i++)
        for (int o = 0; o < s.out; o++)
            check_bound(y[(size_t)i * s.out + o],
                        dot_ref(x + (size_t)i * s.ldx, 1, W + (size_t)o * s.in, 1, s.in, 0), s.in,
                        what, &bad, &moved);
    for (int o = 0; o < s.out; o++)
        for (int p = 0; p < s.in; p++)
            check_bound(dW[(size_t)o * s.in + p],
                        dot_ref(dy + o, s.out, x + p, s.ldx, s.N, dW0[(size_t)o * s.in + p]), s.N,
                        what, &bad, &moved);
    for (int i = 0; i < s.N; i++)
        for (int p = 0; p < s.in; p++)
            check_bound(dx[(size_t)i * s.ldx + p],
                        dot_ref(dy + (size_t)i * s.out, 1, W + p, s.in, s.out,
                                beta * dx0[(size_t)i * s.ldx + p]),
                        s.out, what, &bad, &moved);
    cr_expect_eq(bad, 0, "%s: %d outputs out of bounds", what, bad);
    cr_expect(moved, "%s: no output moved by more than float32 rounding: not bf16", what);
    for (int i = 0; i < s.N; i++)
        for (int p = s.in; p < s.ldx; p++)
            cr_expect_eq(dx[(size_t)i * s.ldx + p], dx0[(size_t)i * s.ldx + p]);
    free(x), free(W), free(dy), free(dW0), free(dx0), free(y), free(dW), free(dx);
    return 1;
}

/* Every shape of the float32 tests (odd depths, widths that are not whole
 * vectors, strided x, both splits of dW, depth chunks) with bf16 operands. */
Test(gemm, bf16_within_rounding_bounds) {
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        if (!check_bf16(shapes[i], 0.0f, 1) || !check_bf16(shapes[i], 1.0f, 2)) return;
    check_bf16((shape_t){7, 3, 5, 3}, 1.0f, 1); /* odd everything, one partial vector */
}

/* The rounding the kernels apply is gemm_bf16_round's: nearest, ties to
 * even (1 + 2^-8 is a tie between 1 and 1 + 2^-7: it goes to 1, and
 * 1 + 3 * 2^-8 to 1 + 2^-6), denormals to zero, NaN kept. */
Test(gemm, bf16_round_is_nearest_even) {
    cr_expect_eq(gemm_bf16_round(1.0f + 0x1p-8f), 1.0f);
    cr_expect_eq(gemm_bf16_round(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);
    cr_expect_eq(gemm_bf16_round(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);
    cr_expect_eq(gemm_bf16_round(-3.0f), -3.0f);
    cr_expect_eq(gemm_bf16_round(0x1p-130f), 0.0f);
    cr_expect(isnan(gemm_bf16_round(NAN)));
    /* the kernel's rounding of a 1 x 1 x 1 product agrees */
    if (!tu_select_bf16(1)) return;
    const float xs[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 3.14159f, -2.71828f, 1e-3f};
    for (size_t i = 0; i < sizeof xs / sizeof *xs; i++) {
        float one = 1.0f, y = 0;
        gemm_linear_forward(&y, &xs[i], 1, &one, 1, 1, 1);
        cr_expect_eq(y, gemm_bf16_round(xs[i]), "%.9g: kernel %.9g, reference %.9g", xs[i], y,
                     gemm_bf16_round(xs[i]));
    }
    tu_select_isa_auto();
}

/* bf16 products too are summed by one thread in a fixed order. */
Test(gemm, bf16_same_bits_for_any_thread_count) {
    const shape_t shp[] = {{500, 64, 192, 64}, {500, 192, 64, 192}, {451, 200, 130, 200}};
    for (size_t k = 0; k < sizeof shp / sizeof *shp; k++) {
        const shape_t s = shp[k];
        rng_t r;
        rng_seed(&r, 9);
        float *x = randn(&r, (size_t)s.N * s.in), *W = randn(&r, (size_t)s.out * s.in);
        float *dy = randn(&r, (size_t)s.N * s.out);
        float *out[2][3];
        for (int t = 0; t < 2; t++) {
            out[t][0] = malloc((size_t)s.N * s.out * sizeof(float));
            out[t][1] = calloc((size_t)s.out * s.in, sizeof(float));
            out[t][2] = malloc((size_t)s.N * s.in * sizeof(float));
            cr_assert(out[t][0] && out[t][1] && out[t][2]);
            if (!tu_select_bf16(t + 1)) return; /* (a skip: the buffers go with the process) */
            gemm_linear_forward(out[t][0], x, s.in, W, s.N, s.in, s.out);
            gemm_linear_backward(out[t][2], s.in, 0.0f, out[t][1], dy, x, W, s.N, s.in, s.out);
        }
        tu_select_isa_auto();
        const size_t n[3] = {(size_t)s.N * s.out, (size_t)s.out * s.in, (size_t)s.N * s.in};
        for (int j = 0; j < 3; j++)
            cr_expect(!memcmp(out[0][j], out[1][j], n[j] * sizeof(float)), "shape %zu: %s", k,
                      (const char *[]){"y", "dW", "dx"}[j]);
        free(x), free(W), free(dy);
        for (int t = 0; t < 2; t++)
            for (int j = 0; j < 3; j++) free(out[t][j]);
    }
}

/* y, dW and dx of shape s (dW from zero, dx with beta 1 from dx0) into
 * out[3], the backward reading xb (x's values at the backward: x itself, or
 * another array of its shape when `change` overwrites x with them after the
 * forward, keeping its address). keep: gemm_keep_inputs before the forward;
 * drop: gemm_keep_inputs(0) between the forward and the backward. */
static void bf16_products(shape_t s, float *x, const float *xb, const float *W, const float *dy,
                          const float *dx0, int keep, int drop, float *out[3]) {
    const size_t xn = (size_t)s.N * s.ldx;
    memset(out[1], 0, (size_t)s.out * s.in * sizeof(float));
    memcpy(out[2], dx0, xn * sizeof(float));
    gemm_keep_inputs(keep);
    gemm_linear_forward(out[0], x, s.ldx, W, s.N, s.in, s.out);
    if (drop) gemm_keep_inputs(0);
    if (xb != x) memcpy(x, xb, xn * sizeof *x);
    gemm_linear_backward(out[2], s.ldx, 1.0f, out[1], dy, x, W, s.N, s.in, s.out);
    gemm_keep_inputs(0);
}

/* A forward that keeps its input's paired form for the backward
 * (gemm_keep_inputs) gives the backward the bits pairing x again gives, for
 * every shape (strided x, both sides of dW's split, odd sizes); once
 * gemm_keep_inputs drops what was kept, a backward after x changed pairs
 * the new values, not the kept ones. */
Test(gemm, bf16_kept_inputs_give_the_same_bits) {
    if (!tu_select_bf16(2)) return;
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        const shape_t s = shapes[k];
        const size_t xn = (size_t)s.N * s.ldx,
                     n[3] = {(size_t)s.N * s.out, (size_t)s.out * s.in, xn};
        rng_t r;
        rng_seed(&r, 11 + k);
        float *x = randn(&r, xn), *x2 = randn(&r, xn), *W = randn(&r, (size_t)s.out * s.in);
        float *dy = randn(&r, (size_t)s.N * s.out), *dx0 = randn(&r, xn);
        float *fresh[3], *kept[3];
        for (int j = 0; j < 3; j++) {
            fresh[j] = malloc(n[j] * sizeof(float));
            kept[j] = malloc(n[j] * sizeof(float));
            cr_assert(fresh[j] && kept[j]);
        }
        const char *names[3] = {"y", "dW", "dx"};
        bf16_products(s, x, x, W, dy, dx0, 0, 0, fresh);
        bf16_products(s, x, x, W, dy, dx0, 1, 0, kept);
        for (int j = 1; j < 3; j++)
            cr_expect(!memcmp(fresh[j], kept[j], n[j] * sizeof(float)),
                      "N %d in %d out %d ldx %d: %s with x kept differs", s.N, s.in, s.out, s.ldx,
                      names[j]);
        /* x changes after a forward whose kept pairing was dropped */
        bf16_products(s, x, x2, W, dy, dx0, 1, 1, kept);
        bf16_products(s, x, x2, W, dy, dx0, 0, 0, fresh); /* x is x2 from here */
        for (int j = 1; j < 3; j++)
            cr_expect(!memcmp(fresh[j], kept[j], n[j] * sizeof(float)),
                      "N %d in %d out %d ldx %d: %s read a dropped pairing", s.N, s.in, s.out,
                      s.ldx, names[j]);
        free(x), free(x2), free(W), free(dy), free(dx0);
        for (int j = 0; j < 3; j++) free(fresh[j]), free(kept[j]);
    }
    tu_select_isa_auto();
}

/* A path without bf16 refuses it with the reason, and leaving the avx512
 * path drops back to float32 products. */
Test(gemm, bf16_refused_off_the_avx512_path) {
    char why[256] = "";
    if (tu_select_isa("avx2", 1) != 0) cr_skip_test("this CPU lacks AVX2");
    cr_expect_eq(gemm_set_precision(GEMM_BF16, why, sizeof why), -1);
    cr_expect(strstr(why, gemm_bf16_cpu() ? "NIGHTSHIFT_ISA=avx2" : "AVX512_BF16"), "%s", why);
    cr_expect_eq(gemm_current_precision(), GEMM_FP32);
    if (gemm_bf16_cpu() && gemm_select(GEMM_AVX512) == 0) {
        cr_assert_eq(gemm_set_precision(GEMM_BF16, why, sizeof why), 0, "%s", why);
        cr_assert_eq(gemm_current_precision(), GEMM_BF16);
        cr_assert_eq(tu_select_isa("avx2", 1), 0);
        cr_expect_eq(gemm_current_precision(), GEMM_FP32);
    }
    tu_select_isa_auto();
}

/* transpose.h's blocked transpose moves every float to its transposed place
 * and writes nothing else: every shape from 1 x 1 to 19 x 19 (whole 8 x 8
 * blocks, ragged edges, both), with row strides wider than the rows. */
Test(gemm, transpose_moves_each_float_to_its_place) {
    enum { MAX = 19, PAD = 3 };
    float src[MAX * (MAX + PAD)], dst[MAX * (MAX + PAD)];
    for (int i = 0; i < MAX * (MAX + PAD); i++) src[i] = (float)i;
    for (int rows = 1; rows <= MAX; rows++)
        for (int cols = 1; cols <= MAX; cols++) {
            const int ss = cols + PAD, ds = rows + PAD;
            for (int i = 0; i < MAX * (MAX + PAD); i++) dst[i] = -1.0f;
            transpose_matrix(dst, ds, src, ss, rows, cols);
            for (int c = 0; c < MAX; c++)
                for (int r = 0; r < ds; r++) {
                    const float want = c < cols && r < rows ? src[r * ss + c] : -1.0f;
                    if (dst[c * ds + r] != want)
                        cr_assert_fail("%d x %d: dst[%d][%d] = %g, expected %g", rows, cols, c, r,
                                       dst[c * ds + r], want);
                }
        }
}
