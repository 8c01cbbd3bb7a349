/* test_ops.c - unit tests of single layers (ops.c) on hand-checkable inputs. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "fastmath.h"
#include "ops.h"

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
