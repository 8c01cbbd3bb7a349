/* test_ops.c - unit tests of single layers (ops.c) on hand-checkable inputs. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/fastmath.h"
#include "engine/ops.h"

/* Gradients into a row that several ids look up are summed. */
Test(ops, embedding_repeated_ids_sum_gradients) {
    const float table[3 * 2] = {1, 0, 0, 1, 0.5f, 0.5f};
    const int ids[3] = {2, 0, 2};
    const float upstream[3 * 2] = {1, 2, 3, 4, 5, 6};
    float out[3 * 2], dtable[3 * 2] = {0};

    ops_embedding_forward(out, table, ids, 3, 2);
    const float want_out[6] = {0.5f, 0.5f, 1, 0, 0.5f, 0.5f};
    for (int i = 0; i < 6; i++) cr_expect_eq(out[i], want_out[i], "lookup[%d] = %g", i, out[i]);

    ops_embedding_backward(dtable, upstream, ids, 3, 2);
    const float want_grad[6] = {3, 4, 0, 0, 6, 8};
    for (int i = 0; i < 6; i++)
        cr_expect_eq(dtable[i], want_grad[i], "grad[%d] = %g", i, dtable[i]);
}

Test(ops, rmsnorm_has_unit_rms) {
    float x[2 * 4] = {1, 2, 3, 4, -0.5f, 0.25f, 8, 0}, y[8], rstd[2];
    ops_rmsnorm_forward(y, rstd, x, 2, 4);
    for (int r = 0; r < 2; r++) {
        double ss = 0;
        for (int j = 0; j < 4; j++) ss += y[r * 4 + j] * y[r * 4 + j];
        cr_expect(fabs(ss / 4 - 1.0) < 1e-5, "row %d mean square %g", r, ss / 4);
    }
}

/* RoPE is a rotation: its backward is the inverse, and it keeps norms. */
Test(ops, rope_backward_inverts_forward) {
    enum { T = 3, HD = 4 };
    float cos[T * 2], sin[T * 2];
    for (int t = 0; t < T; t++)
        for (int j = 0; j < 2; j++) {
            float f = t * powf(10000.0f, -2.0f * j / HD);
            cos[t * 2 + j] = cosf(f);
            sin[t * 2 + j] = sinf(f);
        }
    float x[T * HD], orig[T * HD];
    for (int i = 0; i < T * HD; i++) orig[i] = x[i] = 0.1f * (float)(i + 1);
    ops_rope_forward(x, cos, sin, T, T, 1, HD);
    /* position 0 is the identity */
    for (int j = 0; j < HD; j++) cr_expect_float_eq(x[j], orig[j], 1e-7);
    ops_rope_backward(x, cos, sin, T, T, 1, HD);
    for (int i = 0; i < T * HD; i++) cr_expect_float_eq(x[i], orig[i], 1e-6);
}

/* With a window of w, query i sees exactly keys i-w..i, and the output is
 * softmax(q k^T / sqrt(hd)) v over them: distinct q, k and v, two query heads
 * sharing one kv head, checked against the formula in double precision. */
Test(ops, attention_window_masks_old_keys) {
    enum { T = 5, H = 2, HD = 4, W = 2 };
    float q[T * H * HD], k[T * HD], v[T * HD], y[T * H * HD], P[H * T * T];
    for (int i = 0; i < T * H * HD; i++) q[i] = sinf(0.7f * (float)i + 0.3f);
    for (int i = 0; i < T * HD; i++) {
        k[i] = cosf(1.3f * (float)i - 0.2f);
        v[i] = 0.5f * (float)(i % 7) - 1.0f;
    }
    ops_attention_forward(y, P, q, k, v, 1, T, H, 1, HD, W);
    for (int h = 0; h < H; h++)
        for (int i = 0; i < T; i++) {
            const float *qi = q + (i * H + h) * HD;
            double s[T], mx = -INFINITY, sum = 0.0;
            for (int j = 0; j < T; j++) {
                s[j] = 0.0;
                for (int d = 0; d < HD; d++) s[j] += (double)qi[d] * k[j * HD + d];
                s[j] /= sqrt((double)HD);
                if (j <= i && j >= i - W) mx = fmax(mx, s[j]);
            }
            for (int j = 0; j < T; j++) sum += j <= i && j >= i - W ? exp(s[j] - mx) : 0.0;
            double want_y[HD] = {0};
            for (int j = 0; j < T; j++) {
                int visible = j <= i && j >= i - W;
                double p = visible ? exp(s[j] - mx) / sum : 0.0;
                float got = P[(h * T + i) * T + j];
                cr_expect(fabs(got - p) < 1e-6, "head %d P[%d][%d] = %g, want %g", h, i, j, got, p);
                for (int d = 0; d < HD; d++) want_y[d] += p * v[j * HD + d];
            }
            for (int d = 0; d < HD; d++) {
                float got = y[(i * H + h) * HD + d];
                cr_expect(fabs(got - want_y[d]) < 1e-5, "head %d y[%d][%d] = %g, want %g", h, i, d,
                          got, want_y[d]);
            }
        }
}

Test(ops, softcap_ce_ignores_negative_targets) {
    float logits[2 * 3] = {0, 0, 0, 100, 0, 0}, lse[2], losses[2];
    const int targets[2] = {1, -1};
    int count = 0;
    double sum = ops_softcap_ce_forward(logits, lse, losses, targets, 2, 3, 15.0f, &count);
    cr_expect_eq(count, 1);
    cr_expect(fabs(sum - log(3.0)) < 1e-6, "loss %g", sum);
    cr_expect_float_eq(logits[3], 15.0f * tanhf(100.0f / 15.0f), 1e-5);
    float d[6];
    ops_softcap_ce_backward(d, logits, lse, targets, 2, 3, 15.0f, 1.0f);
    for (int j = 0; j < 3; j++) cr_expect_eq(d[3 + j], 0.0f);
    cr_expect_float_eq(d[1], 1.0f / 3 - 1.0f, 1e-6);
}

/* fastmath.h against libm (the reference) over the ranges the kernels use:
 * exp of non-positive arguments, tanh of logits over the softcap. */
Test(ops, fast_exp_and_tanh_match_libm) {
    double worst_exp = 0.0, worst_tanh = 0.0;
    for (float x = -80.0f; x <= 0.5f; x += 1e-3f) {
        double want = exp((double)x);
        worst_exp = fmax(worst_exp, fabs(fast_expf(x) - want) / want);
    }
    for (float x = -12.0f; x <= 12.0f; x += 1e-3f) {
        double want = tanh((double)x);
        worst_tanh = fmax(worst_tanh, fabs(fast_tanhf(x) - want) / fmax(fabs(want), 1e-30));
    }
    cr_expect(worst_exp < 5e-7, "fast_expf worst relative error %g", worst_exp);
    cr_expect(worst_tanh < 1e-6, "fast_tanhf worst relative error %g", worst_tanh);
    cr_expect_eq(fast_tanhf(0.0f), 0.0f);
    cr_expect_float_eq(fast_tanhf(100.0f), 1.0f, 1e-7);
    cr_expect_float_eq(fast_tanhf(-100.0f), -1.0f, 1e-7);
}

/* ------------------------------------------------- fused kernels vs plain */

/* Deterministic values in [-1, 1) that are not all alike. */
static void fill(float *x, int n, float phase) {
    for (int i = 0; i < n; i++) x[i] = sinf(0.37f * (float)i + phase);
}

static void expect_same(const char *what, const float *got, const float *want, int n, float tol) {
    for (int i = 0; i < n; i++)
        cr_expect(fabsf(got[i] - want[i]) <= tol * fmaxf(1.0f, fabsf(want[i])),
                  "%s[%d] = %.9g, plain kernels give %.9g", what, i, got[i], want[i]);
}

/* The mix and the norm fused in one pass give the floats of (ops_add,)
 * ops_mix_forward then ops_rmsnorm_forward; the fused backward those of
 * ops_rmsnorm_backward_acc then ops_mix_backward (its two sums in another
 * order). D = 21 leaves a tail after the eight-lane blocks. */
Test(ops, fused_mix_rmsnorm_matches_plain_kernels) {
    enum { N = 7, D = 21, ND = N * D };
    float res[ND], x0[ND], dxn[ND], dres0[ND], dx00[ND];
    fill(res, ND, 0.1f), fill(x0, ND, 1.7f), fill(dxn, ND, 2.9f), fill(dres0, ND, 0.6f);
    fill(dx00, ND, 4.2f);
    const float rl = 0.9f, xl = 0.15f;

    float x_ref[ND], xn_ref[ND], rstd_ref[N], x[ND], xn[ND], rstd[N];
    ops_mix_forward(x_ref, res, x0, rl, xl, ND);
    ops_rmsnorm_forward(xn_ref, rstd_ref, x_ref, N, D);
    ops_mix_rmsnorm_forward(x, xn, rstd, res, NULL, x0, rl, xl, N, D);
    expect_same("x", x, x_ref, ND, 0.0f);
    expect_same("xn", xn, xn_ref, ND, 0.0f);
    expect_same("rstd", rstd, rstd_ref, N, 0.0f);

    /* with a block output d joining res first */
    float res2[ND], res2_ref[ND], d[ND];
    fill(res2, ND, 5.1f), fill(d, ND, 0.45f);
    memcpy(res2_ref, res2, sizeof res2);
    ops_add(res2_ref, d, ND);
    ops_mix_forward(x_ref, res2_ref, x0, rl, xl, ND);
    ops_rmsnorm_forward(xn_ref, rstd_ref, x_ref, N, D);
    ops_mix_rmsnorm_forward(x, xn, rstd, res2, d, x0, rl, xl, N, D);
    expect_same("res after the add", res2, res2_ref, ND, 0.0f);
    expect_same("x after the add", x, x_ref, ND, 0.0f);
    expect_same("xn after the add", xn, xn_ref, ND, 0.0f);

    float dres_ref[ND], dx0_ref[ND], dres[ND], dx0[ND];
    memcpy(dres_ref, dres0, sizeof dres0), memcpy(dres, dres0, sizeof dres0);
    memcpy(dx0_ref, dx00, sizeof dx00), memcpy(dx0, dx00, sizeof dx00);
    double drl_ref, dxl_ref, drl, dxl;
    ops_rmsnorm_backward_acc(dres_ref, dxn, xn_ref, rstd_ref, N, D);
    ops_mix_backward(dres_ref, dx0_ref, res, x0, rl, xl, ND, &drl_ref, &dxl_ref);
    ops_rmsnorm_mix_backward(dres, dx0, dxn, xn, rstd, res, x0, rl, xl, N, D, &drl, &dxl);
    expect_same("dres", dres, dres_ref, ND, 0.0f);
    expect_same("dx0", dx0, dx0_ref, ND, 0.0f);
    cr_expect(fabs(drl - drl_ref) <= 1e-12 * fmax(1.0, fabs(drl_ref)), "drl %.17g vs %.17g", drl,
              drl_ref);
    cr_expect(fabs(dxl - dxl_ref) <= 1e-12 * fmax(1.0, fabs(dxl_ref)), "dxl %.17g vs %.17g", dxl,
              dxl_ref);
}

/* RoPE and the per-head norm fused give the floats of ops_rope_forward then
 * ops_rmsnorm_forward, and the fused backward those of ops_rmsnorm_backward
 * then ops_rope_backward; positions wrap at T (N / T sequences of T rows).
 * Through rows of a wider matrix too (the fused q, k, v rows): the forward
 * reads them, the backward writes them, nothing else is touched. */
static void check_fused_rope_rmsnorm(int T, int N, int NH, int HD) {
    const int HALF = HD / 2, NX = N * NH * HD, LD = NH * HD + 7;
    float *cos = malloc(T * HALF * sizeof *cos), *sin = malloc(T * HALF * sizeof *sin);
    float *x_ref = malloc(NX * sizeof *x_ref), *x = malloc(NX * sizeof *x);
    float *x_ref_in = malloc(NX * sizeof *x_ref_in), *dout = malloc(NX * sizeof *dout);
    float *rstd_ref = malloc(N * NH * sizeof *rstd_ref), *rstd = malloc(N * NH * sizeof *rstd);
    float *dx_ref = malloc(NX * sizeof *dx_ref), *dx = malloc(NX * sizeof *dx);
    float *wide = malloc(N * LD * sizeof *wide), *x2 = malloc(NX * sizeof *x2);
    cr_assert(cos && sin && x_ref && x && x_ref_in && dout && rstd_ref && rstd && dx_ref && dx &&
              wide && x2);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < HALF; j++) {
            float f = t * powf(10000.0f, -2.0f * j / HD);
            cos[t * HALF + j] = cosf(f);
            sin[t * HALF + j] = sinf(f);
        }
    fill(x_ref, NX, 0.3f), fill(dout, NX, 2.2f);
    memcpy(x, x_ref, NX * sizeof *x);
    memcpy(x_ref_in, x_ref, NX * sizeof *x_ref_in);
    ops_rope_forward(x_ref, cos, sin, N, T, NH, HD);
    ops_rmsnorm_forward(x_ref, rstd_ref, x_ref, N * NH, HD);
    ops_rope_rmsnorm_forward(x, x, NH * HD, rstd, cos, sin, N, T, NH, HD);
    expect_same("x", x, x_ref, NX, 0.0f);
    expect_same("rstd", rstd, rstd_ref, N * NH, 0.0f);

    ops_rmsnorm_backward(dx_ref, dout, x_ref, rstd_ref, N * NH, HD);
    ops_rope_backward(dx_ref, cos, sin, N, T, NH, HD);
    ops_rmsnorm_rope_backward(dx, NH * HD, dout, x, rstd, cos, sin, N, T, NH, HD);
    expect_same("dx", dx, dx_ref, NX, 0.0f);

    for (int i = 0; i < N * LD; i++) wide[i] = -1.0f;
    for (int i = 0; i < N; i++) memcpy(wide + i * LD, x_ref_in + i * NH * HD, NH * HD * 4);
    ops_rope_rmsnorm_forward(x2, wide, LD, rstd, cos, sin, N, T, NH, HD);
    expect_same("x from wide rows", x2, x_ref, NX, 0.0f);
    ops_rmsnorm_rope_backward(wide, LD, dout, x, rstd, cos, sin, N, T, NH, HD);
    for (int i = 0; i < N; i++) {
        expect_same("dx into wide rows", wide + i * LD, dx_ref + i * NH * HD, NH * HD, 0.0f);
        for (int j = NH * HD; j < LD; j++) cr_assert_eq(wide[i * LD + j], -1.0f);
    }
    free(cos), free(sin), free(x_ref), free(x), free(x_ref_in), free(dout), free(rstd_ref);
    free(rstd), free(dx_ref), free(dx), free(wide), free(x2);
}

Test(ops, fused_rope_rmsnorm_matches_plain_kernels) {
    check_fused_rope_rmsnorm(3, 6, 3, 10);
    /* more heads than a group of the forward's square roots, more rows than
     * the distance rows are prefetched ahead */
    check_fused_rope_rmsnorm(5, 20, 11, 8);
}

/* The residual add and the norm fused give the floats of ops_add then
 * ops_rmsnorm_forward. */
Test(ops, fused_add_rmsnorm_matches_plain_kernels) {
    enum { N = 5, D = 19, ND = N * D };
    float x_ref[ND], x[ND], d[ND], xn_ref[ND], xn[ND], rstd_ref[N], rstd[N];
    fill(x_ref, ND, 0.8f), fill(d, ND, 3.3f);
    memcpy(x, x_ref, sizeof x);
    ops_add(x_ref, d, ND);
    ops_rmsnorm_forward(xn_ref, rstd_ref, x_ref, N, D);
    ops_add_rmsnorm_forward(x, xn, rstd, d, N, D);
    expect_same("x", x, x_ref, ND, 0.0f);
    expect_same("xn", xn, xn_ref, ND, 0.0f);
    expect_same("rstd", rstd, rstd_ref, N, 0.0f);
}
