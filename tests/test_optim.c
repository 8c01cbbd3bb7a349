/* test_optim.c - the optimizers and schedules (engine/optim.c).
 *
 * Parity: one AdamW and one Muon step against tensors from
 * tests/torch/gen_optim_fixtures.py (tests/fixtures/optim/<case>.safetensors,
 * found through NIGHTSHIFT_SRC). Each output must be within 1e-5 of that tensor's
 * largest magnitude. Also: the three schedules at chosen points, the grouping
 * (learning rate and betas per tensor) of gpt_new models, and a few hundred
 * AdamW + Muon steps on a hand-made least-squares "model". */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gemm_bf16.h"
#include "engine/gpt.h"
#include "engine/optim.h"
#include "engine/rng.h"
#include "tests/testutil.h"

/* ------------------------------------------------ a tiny safetensors reader */

typedef struct {
    unsigned char *buf; /* the whole file */
    size_t len;
    size_t data_start; /* 8 + header length */
    cJSON *header;
} fixture_t;

static void fixture_open(fixture_t *f, const char *name) {
    const char *src = getenv("NIGHTSHIFT_SRC");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/optim/%s.safetensors", src ? src : ".", name);
    memset(f, 0, sizeof *f);
    f->buf = (unsigned char *)tu_read_all(path, &f->len);
    cr_assert_gt(f->len, 8, "%s is too short", path);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | f->buf[i];
    cr_assert_leq(hlen, f->len - 8, "%s: header length out of range", path);
    f->data_start = 8 + (size_t)hlen;
    f->header = cJSON_ParseWithLength((const char *)f->buf + 8, (size_t)hlen);
    cr_assert_not_null(f->header, "%s: header is not JSON", path);
}

static void fixture_close(fixture_t *f) {
    cJSON_Delete(f->header);
    free(f->buf);
}

/* A malloc'd copy of tensor `name` (caller frees); its element count in *n. */
static float *fixture_tensor(const fixture_t *f, const char *name, size_t *n) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(f->header, name);
    cr_assert_not_null(t, "fixture has no tensor %s", name);
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(t, "dtype");
    cr_assert(cJSON_IsString(dtype) && !strcmp(dtype->valuestring, "F32"), "%s: not F32", name);
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
    cr_assert(cJSON_IsArray(off) && cJSON_GetArraySize(off) == 2, "%s: bad offsets", name);
    size_t b = (size_t)cJSON_GetArrayItem(off, 0)->valuedouble;
    size_t e = (size_t)cJSON_GetArrayItem(off, 1)->valuedouble;
    cr_assert(b <= e && e <= f->len - f->data_start && (e - b) % 4 == 0, "%s: bad range", name);
    *n = (e - b) / 4;
    float *x = malloc((e - b) ? (e - b) : 1);
    cr_assert_not_null(x);
    /* The files are little-endian, like every machine this runs on. */
    memcpy(x, f->buf + f->data_start + b, e - b);
    return x;
}

static float fixture_scalar(const fixture_t *f, const char *name) {
    size_t n;
    float *x = fixture_tensor(f, name, &n);
    cr_assert_eq(n, 1, "%s: expected one element", name);
    float v = x[0];
    free(x);
    return v;
}

/* |got - want| <= 1e-5 * max|want| everywhere. */
static void expect_close(const char *what, const float *got, const float *want, size_t n) {
    float maxabs = 0.0f, maxerr = 0.0f;
    for (size_t i = 0; i < n; i++) {
        /* fmaxf drops a NaN: each float is checked on its own */
        cr_assert(isfinite(got[i]) && isfinite(want[i]), "%s: element %zu is %g, expected %g", what,
                  i, got[i], want[i]);
        maxabs = fmaxf(maxabs, fabsf(want[i]));
        maxerr = fmaxf(maxerr, fabsf(got[i] - want[i]));
    }
    cr_assert(maxerr <= 1e-5f * maxabs, "%s: max |error| %g exceeds 1e-5 * max |value| %g", what,
              maxerr, maxabs);
}

/* ----------------------------------------------------------- kernel parity */

static void check_adamw(const char *name) {
    fixture_t f;
    fixture_open(&f, name);
    size_t n, n2;
    float *p = fixture_tensor(&f, "param", &n);
    float *g = fixture_tensor(&f, "grad", &n2);
    cr_assert_eq(n, n2);
    float *m = fixture_tensor(&f, "exp_avg", &n2);
    float *v = fixture_tensor(&f, "exp_avg_sq", &n2);
    float *p_out = fixture_tensor(&f, "param_out", &n2);
    float *m_out = fixture_tensor(&f, "exp_avg_out", &n2);
    float *v_out = fixture_tensor(&f, "exp_avg_sq_out", &n2);
    cr_assert_eq(n, n2);
    optim_adamw_step(p, g, m, v, n, (int)fixture_scalar(&f, "step"), fixture_scalar(&f, "lr"),
                     fixture_scalar(&f, "beta1"), fixture_scalar(&f, "beta2"),
                     fixture_scalar(&f, "eps"), fixture_scalar(&f, "wd"));
    expect_close("param", p, p_out, n);
    expect_close("exp_avg", m, m_out, n);
    expect_close("exp_avg_sq", v, v_out, n);
    free(p), free(g), free(m), free(v), free(p_out), free(m_out), free(v_out);
    fixture_close(&f);
}

static void check_muon(const char *name, int rows, int cols) {
    fixture_t f;
    fixture_open(&f, name);
    size_t n, ns;
    float *p = fixture_tensor(&f, "param", &n);
    cr_assert_eq(n, (size_t)rows * cols);
    float *g = fixture_tensor(&f, "grad", &n);
    float *buf = fixture_tensor(&f, "momentum_buffer", &n);
    float *second = fixture_tensor(&f, "second_buffer", &ns);
    cr_assert_eq(ns, (size_t)(rows >= cols ? rows : cols), "second buffer size");
    float *p_out = fixture_tensor(&f, "param_out", &n);
    float *buf_out = fixture_tensor(&f, "momentum_buffer_out", &n);
    float *second_out = fixture_tensor(&f, "second_buffer_out", &ns);
    float *work = malloc(optim_muon_work_floats(rows, cols) * sizeof *work);
    cr_assert_not_null(work);
    int rc =
        optim_muon_step(p, g, buf, second, rows, cols, fixture_scalar(&f, "momentum"),
                        fixture_scalar(&f, "lr"), fixture_scalar(&f, "wd"),
                        fixture_scalar(&f, "beta2"), (int)fixture_scalar(&f, "ns_steps"), work);
    cr_assert_eq(rc, 0);
    expect_close("param", p, p_out, n);
    expect_close("momentum_buffer", buf, buf_out, n);
    expect_close("second_buffer", second, second_out, ns);
    free(p), free(g), free(buf), free(second), free(p_out), free(buf_out), free(second_out);
    free(work);
    fixture_close(&f);
}

Test(optim, adamw_step1) {
    check_adamw("adamw_step1");
}
Test(optim, adamw_step3) {
    check_adamw("adamw_step3");
}
Test(optim, muon_tall) {
    check_muon("muon_tall", 12, 5);
}
Test(optim, muon_wide) {
    check_muon("muon_wide", 5, 12);
}
Test(optim, muon_square) {
    check_muon("muon_square", 8, 8);
}

/* Muon's products run through the register-tiled kernel of each path
 * where it takes their width, through BLAS on the generic path (which the
 * fixtures above check against PyTorch): every path agrees with it, tall,
 * wide and square. */
Test(optim, muon_same_on_every_path) {
    static const int shapes[][2] = {{64, 32}, {32, 64}, {48, 48}, {128, 16}};
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        const int rows = shapes[k][0], cols = shapes[k][1];
        const size_t n = (size_t)rows * cols, l = (size_t)(rows > cols ? rows : cols);
        float *p0 = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float));
        float *want = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
        float *buf = malloc(n * sizeof(float)), *second = malloc(l * sizeof(float));
        float *work = malloc(optim_muon_work_floats(rows, cols) * sizeof(float));
        cr_assert(p0 && g && want && got && buf && second && work);
        for (size_t i = 0; i < n; i++) {
            p0[i] = 0.05f * (float)((i * 37) % 19) - 0.4f;
            g[i] = 0.01f * (float)((i * 13) % 23) - 0.1f;
        }
        for (int path = 2; path >= 0; path--) { /* generic first: the reference */
            if (tu_select_isa(tu_isas[path], 1) != 0) continue;
            float *out = path == 2 ? want : got;
            memcpy(out, p0, n * sizeof(float));
            memset(buf, 0, n * sizeof(float));
            memset(second, 0, l * sizeof(float));
            cr_assert_eq(optim_muon_step(out, g, buf, second, rows, cols, 0.95f, 0.02f, 0.2f, 0.95f,
                                         5, work),
                         0);
            if (path < 2) expect_close(tu_isas[path], got, want, n);
        }
        tu_select_isa_auto();
        free(p0), free(g), free(want), free(got), free(buf), free(second), free(work);
    }
}

/* Muon on a matrix and on its transpose: the tall one iterates on X^T X
 * (the Gram matrix's upper triangle mirrored into the lower one), the wide
 * one on X X^T of X^T (transposed first where the kernel reads it in place),
 * and NorMuon normalises the same axis; so the updates are each other's
 * transposes to rounding. A mirror or transpose that put a float in the
 * wrong place makes p(A) unsymmetric and the two disagree by far more.
 * s = 72: the kernels' symmetric products compute two blocks of rows, the
 * second from column 48 on, and a multiple of 8 but not of 16; every path.
 * 104 x 72 runs five plain steps, 160 x 72 three of them in the Gram space. */
static void check_transposed_update(int R, int C) {
    const int N = R * C;
    float *g = malloc(N * sizeof(float)), *gt = malloc(N * sizeof(float));
    float *p = malloc(N * sizeof(float)), *pt = malloc(N * sizeof(float));
    float *pt_t = malloc(N * sizeof(float)), *buf = malloc(N * sizeof(float));
    float *second = malloc(R * sizeof(float));
    float *work = malloc(optim_muon_work_floats(R, C) * sizeof(float));
    cr_assert(g && gt && p && pt && pt_t && buf && second && work);
    for (int i = 0; i < N; i++) g[i] = 0.01f * (float)((i * 13) % 23) - 0.1f + 0.002f * (i % 7);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) gt[c * R + r] = g[r * C + c];
    for (int path = 2; path >= 0; path--) {
        if (tu_select_isa(tu_isas[path], 1) != 0) continue;
        memset(p, 0, N * sizeof(float)), memset(buf, 0, N * sizeof(float));
        memset(second, 0, R * sizeof(float));
        cr_assert_eq(optim_muon_step(p, g, buf, second, R, C, 0.0f, 1.0f, 0.0f, 0.95f, 5, work), 0);
        memset(pt, 0, N * sizeof(float)), memset(buf, 0, N * sizeof(float));
        memset(second, 0, R * sizeof(float));
        cr_assert_eq(optim_muon_step(pt, gt, buf, second, C, R, 0.0f, 1.0f, 0.0f, 0.95f, 5, work),
                     0);
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++) pt_t[r * C + c] = pt[c * R + r];
        float maxabs = 0.0f, maxerr = 0.0f;
        for (int i = 0; i < N; i++) {
            cr_assert(isfinite(p[i]) && isfinite(pt_t[i]), "%s: element %d is %g and %g",
                      tu_isas[path], i, p[i], pt_t[i]);
            maxabs = fmaxf(maxabs, fabsf(p[i]));
            maxerr = fmaxf(maxerr, fabsf(pt_t[i] - p[i]));
        }
        cr_assert_gt(maxabs, 0.01f, "%s: no update", tu_isas[path]);
        /* rounding: the two sum in different orders. g's condition number is
         * 5e8, and on it each side is within 5e-5 of the largest value of
         * the float64 result (plain steps 4e-5), so they differ by up to 1e-4
         * of it; the kernels' sums make the two bit-identical. */
        cr_expect(maxerr <= 2e-4f * maxabs,
                  "%s, %d x %d: max |difference| %g against max |value| %g", tu_isas[path], R, C,
                  maxerr, maxabs);
    }
    tu_select_isa_auto();
    free(g), free(gt), free(p), free(pt), free(pt_t), free(buf), free(second), free(work);
}

Test(optim, muon_of_the_transpose_is_the_transposed_update) {
    check_transposed_update(104, 72);
    check_transposed_update(160, 72);
}

/* A uniform double in [0, 1) from a 64-bit LCG (Knuth's MMIX constants). */
static double uniform01(uint64_t *state) {
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(*state >> 11) * 0x1.0p-53;
}

/* Rows of M (rows, cols; rows <= cols) orthonormalised in place, in double
 * (modified Gram-Schmidt). */
static void orthonormal_rows(double *M, int rows, int cols) {
    for (int i = 0; i < rows; i++) {
        double *mi = M + (size_t)i * cols;
        for (int j = 0; j < i; j++) {
            const double *mj = M + (size_t)j * cols;
            double d = 0.0;
            for (int c = 0; c < cols; c++) d += mi[c] * mj[c];
            for (int c = 0; c < cols; c++) mi[c] -= d * mj[c];
        }
        double nn = 0.0;
        for (int c = 0; c < cols; c++) nn += mi[c] * mi[c];
        for (int c = 0; c < cols; c++) mi[c] /= sqrt(nn);
    }
}

/* Five plain polar-express steps on X (s, l), s <= l, in double: the
 * reference the float32 iterations are measured against. */
static void polar_express_f64(double *X, int s, int l) {
    static const double co[5][3] = {
        {8.156554524902461, -22.48329292557795, 15.878769915207462},
        {4.042929935166739, -2.808917465908714, 0.5000178451051316},
        {3.8916678022926607, -2.772484153217685, 0.5060648178503393},
        {3.285753657755655, -2.3681294933425376, 0.46449024233003106},
        {2.3465413258596377, -1.7097828382687081, 0.42323551169305323},
    };
    double *A = malloc((size_t)s * s * sizeof *A), *P = malloc((size_t)s * s * sizeof *P);
    double *Y = malloc((size_t)s * l * sizeof *Y);
    cr_assert(A && P && Y);
    for (int k = 0; k < 5; k++) {
        for (int i = 0; i < s; i++)
            for (int j = 0; j < s; j++) {
                double d = 0.0;
                for (int c = 0; c < l; c++) d += X[(size_t)i * l + c] * X[(size_t)j * l + c];
                A[(size_t)i * s + j] = d;
            }
        for (int i = 0; i < s; i++)
            for (int j = 0; j < s; j++) {
                double d = 0.0;
                for (int c = 0; c < s; c++) d += A[(size_t)i * s + c] * A[(size_t)c * s + j];
                P[(size_t)i * s + j] =
                    co[k][1] * A[(size_t)i * s + j] + co[k][2] * d + (i == j ? co[k][0] : 0.0);
            }
        for (int i = 0; i < s; i++)
            for (int c = 0; c < l; c++) {
                double d = 0.0;
                for (int j = 0; j < s; j++) d += P[(size_t)i * s + j] * X[(size_t)j * l + c];
                Y[(size_t)i * l + c] = d;
            }
        memcpy(X, Y, (size_t)s * l * sizeof *X);
    }
    free(A), free(P), free(Y);
}

/* The Gram-space steps of polar express (a matrix at least twice as long as
 * wide) against five plain steps in double, on a gradient whose singular
 * values run from 1 down to 1e-5 (U diag(sigma) V^T with random orthonormal
 * U and V): within 1e-4 of the largest value. Measured on the AVX2 and
 * AVX-512 paths: 2.8e-5 (five plain float32 steps: 1.7e-5); in the Gram
 * space from the second step 2.9e-4, from the first 1.4e-3, and 1.6e-4
 * with Q's products symmetrised (each checked by changing the code): the
 * error grows with the norm of Q, which the first steps' large
 * coefficients inflate. Every path, wide and tall. */
Test(optim, muon_in_the_gram_space_stays_close_to_float64) {
    enum { S = 48, L = 160, N = S * L };
    double *U = malloc(S * S * sizeof(double)), *V = malloc(N * sizeof(double));
    double *ref = malloc(N * sizeof(double));
    float *g = malloc(N * sizeof(float)), *gt = malloc(N * sizeof(float));
    float *p = malloc(N * sizeof(float)), *buf = malloc(N * sizeof(float)), second[L];
    float *work = malloc(optim_muon_work_floats(S, L) * sizeof(float));
    cr_assert(U && V && ref && g && gt && p && buf && work);
    uint64_t state = 12345;
    for (int i = 0; i < S * S; i++) U[i] = uniform01(&state) - 0.5;
    for (int i = 0; i < N; i++) V[i] = uniform01(&state) - 0.5;
    orthonormal_rows(U, S, S);
    orthonormal_rows(V, S, L);
    double ss = 0.0;
    for (int i = 0; i < S; i++)
        for (int c = 0; c < L; c++) {
            double d = 0.0;
            for (int j = 0; j < S; j++)
                d += U[i * S + j] * pow(1e-5, (double)j / (S - 1)) * V[j * L + c];
            g[i * L + c] = (float)d;
            gt[c * S + i] = (float)d;
            ss += (double)g[i * L + c] * g[i * L + c];
        }
    const double denom = (double)(sqrtf((float)ss) * 1.02f + 1e-6f);
    for (int i = 0; i < N; i++) ref[i] = g[i] / denom;
    polar_express_f64(ref, S, L);
    double maxabs = 0.0;
    for (int i = 0; i < N; i++) maxabs = fmax(maxabs, fabs(ref[i]));

    for (int path = 0; path < 3; path++) {
        if (tu_select_isa(tu_isas[path], 1) != 0) continue;
        for (int tall = 0; tall < 2; tall++) {
            const int rows = tall ? L : S, cols = tall ? S : L;
            /* no momentum, lr 1, no decay, a NorMuon scale of 1: p = -u */
            for (int i = 0; i < L; i++) second[i] = 1.0f;
            memset(p, 0, N * sizeof(float)), memset(buf, 0, N * sizeof(float));
            cr_assert_eq(optim_muon_step(p, tall ? gt : g, buf, second, rows, cols, 0.0f, 1.0f,
                                         0.0f, 1.0f, 5, work),
                         0);
            double maxerr = 0.0;
            for (int i = 0; i < S; i++)
                for (int c = 0; c < L; c++) {
                    const float u = -(tall ? p[c * S + i] : p[i * L + c]);
                    cr_assert(isfinite(u), "%s: element (%d, %d) is %g", tu_isas[path], i, c, u);
                    maxerr = fmax(maxerr, fabs(u - ref[i * L + c]));
                }
            cr_expect(maxerr <= 1e-4 * maxabs, "%s%s: max |error| %g against max |value| %g",
                      tu_isas[path], tall ? ", tall" : "", maxerr, maxabs);
        }
    }
    tu_select_isa_auto();
    free(U), free(V), free(ref), free(g), free(gt), free(p), free(buf), free(work);
}

Test(optim, muon_rejects_bad_ns_steps) {
    float p[4] = {1, 2, 3, 4}, g[4] = {1, 1, 1, 1}, b[4] = {0}, s[2] = {0};
    float work[128];
    cr_assert_geq(sizeof work / sizeof *work, optim_muon_work_floats(2, 2));
    cr_assert_eq(optim_muon_step(p, g, b, s, 2, 2, 0.9f, 0.1f, 0.0f, 0.95f, 6, work), -1);
    cr_assert_eq(optim_muon_step(p, g, b, s, 2, 2, 0.9f, 0.1f, 0.0f, 0.95f, -1, work), -1);
    cr_assert(p[0] == 1 && p[3] == 4 && g[0] == 1 && b[0] == 0, "changed on failure");
}

/* Muon's update is close to the orthogonal polar factor of the (momentum)
 * gradient: singular values 4, 1 and 1/4 all come out near 1 (polar express
 * leaves them in a band around 1, not exactly at 1). The parity fixtures check
 * the exact values; this checks the meaning. With beta2 = 1 and a constant
 * second buffer the NorMuon scale is 1, so from p = 0 with lr = 1, wd = 0 and
 * no momentum, p = -(polar factor). */
Test(optim, muon_orthogonalises) {
    enum { R = 6, C = 3 };
    /* orthonormal columns u0, u1, u2 scaled by 4, 1, 1/4 */
    const float u[C][R] = {{1, 1, 1, 1, 1, 1}, {1, -1, 1, -1, 1, -1}, {1, 1, -1, -1, 0, 0}};
    const float scale[C] = {4.0f / sqrtf(6), 1.0f / sqrtf(6), 0.25f / 2};
    float p[R * C] = {0}, g[R * C], b[R * C] = {0}, s[R], work[512];
    cr_assert_geq(sizeof work / sizeof *work, optim_muon_work_floats(R, C));
    for (int r = 0; r < R; r++) {
        s[r] = 1.0f;
        for (int c = 0; c < C; c++) g[r * C + c] = scale[c] * u[c][r];
    }
    cr_assert_eq(optim_muon_step(p, g, b, s, R, C, 0.0f, 1.0f, 0.0f, 1.0f, 5, work), 0);
    double gram[C][C] = {{0}};
    for (int r = 0; r < R; r++)
        for (int i = 0; i < C; i++)
            for (int j = 0; j < C; j++) gram[i][j] += (double)p[r * C + i] * p[r * C + j];
    for (int i = 0; i < C; i++) {
        const double sv = sqrt(gram[i][i]);
        cr_assert(sv > 0.7 && sv < 1.3, "singular value %d: %g, expected near 1", i, sv);
        for (int j = 0; j < i; j++)
            cr_assert_lt(fabs(gram[i][j]), 1e-5, "columns %d, %d not orthogonal: %g", i, j,
                         gram[i][j]);
        /* the direction is kept: column i of -p is along u_i */
        double dot = 0.0, un = 0.0;
        for (int r = 0; r < R; r++) {
            dot -= (double)p[r * C + i] * u[i][r];
            un += u[i][r] * u[i][r];
        }
        cr_assert_float_eq(dot / sqrt(un), sv, 1e-5, "column %d changed direction", i);
    }
}

/* -------------------------------------------------------------- schedules */

#define EPS 1e-12

Test(optim, lr_multiplier) {
    /* autoresearch defaults: no warmup, warmdown over the last half to 0 */
    cr_assert_float_eq(optim_lr_multiplier(0.0, 0.0, 0.5, 0.0), 1.0, EPS);
    cr_assert_float_eq(optim_lr_multiplier(0.3, 0.0, 0.5, 0.0), 1.0, EPS);
    cr_assert_float_eq(optim_lr_multiplier(0.5, 0.0, 0.5, 0.0), 1.0, EPS);
    cr_assert_float_eq(optim_lr_multiplier(0.75, 0.0, 0.5, 0.0), 0.5, EPS);
    cr_assert_float_eq(optim_lr_multiplier(1.0, 0.0, 0.5, 0.0), 0.0, EPS);
    /* clamped progress */
    cr_assert_float_eq(optim_lr_multiplier(1.5, 0.0, 0.5, 0.0), 0.0, EPS);
    cr_assert_float_eq(optim_lr_multiplier(-1.0, 0.0, 0.5, 0.0), 1.0, EPS);
    /* warmup, then a warmdown to a final fraction */
    cr_assert_float_eq(optim_lr_multiplier(0.0, 0.1, 0.2, 0.1), 0.0, EPS);
    cr_assert_float_eq(optim_lr_multiplier(0.05, 0.1, 0.2, 0.1), 0.5, EPS);
    cr_assert_float_eq(optim_lr_multiplier(0.1, 0.1, 0.2, 0.1), 1.0, EPS);
    cr_assert_float_eq(optim_lr_multiplier(0.8, 0.1, 0.2, 0.1), 1.0, EPS);
    cr_assert_float_eq(optim_lr_multiplier(0.9, 0.1, 0.2, 0.1), 0.55, EPS);
    cr_assert_float_eq(optim_lr_multiplier(1.0, 0.1, 0.2, 0.1), 0.1, EPS);
    /* no warmdown: 1 everywhere, including progress 1 (no division by zero) */
    cr_assert_float_eq(optim_lr_multiplier(0.99, 0.0, 0.0, 0.0), 1.0, EPS);
    cr_assert_float_eq(optim_lr_multiplier(1.0, 0.0, 0.0, 0.0), 1.0, EPS);
    /* warmdown over everything */
    cr_assert_float_eq(optim_lr_multiplier(0.0, 0.0, 1.0, 0.0), 1.0, EPS);
    cr_assert_float_eq(optim_lr_multiplier(0.25, 0.0, 1.0, 0.0), 0.75, EPS);
}

Test(optim, muon_momentum) {
    cr_assert_float_eq(optim_muon_momentum(0, 0.85, 0.95, 300), 0.85, EPS);
    cr_assert_float_eq(optim_muon_momentum(150, 0.85, 0.95, 300), 0.90, EPS);
    cr_assert_float_eq(optim_muon_momentum(300, 0.85, 0.95, 300), 0.95, EPS);
    cr_assert_float_eq(optim_muon_momentum(10000, 0.85, 0.95, 300), 0.95, EPS);
    cr_assert_float_eq(optim_muon_momentum(-5, 0.85, 0.95, 300), 0.85, EPS);
    cr_assert_float_eq(optim_muon_momentum(0, 0.85, 0.95, 0), 0.95, EPS);
}

Test(optim, weight_decay) {
    cr_assert_float_eq(optim_weight_decay(0.0, 0.2), 0.2, EPS);
    cr_assert_float_eq(optim_weight_decay(0.25, 0.2), 0.15, EPS);
    cr_assert_float_eq(optim_weight_decay(1.0, 0.2), 0.0, EPS);
    cr_assert_float_eq(optim_weight_decay(2.0, 0.2), 0.0, EPS);
    cr_assert_float_eq(optim_weight_decay(-1.0, 0.2), 0.2, EPS);
}

/* --------------------------------------------------------------- grouping */

/* autoresearch's defaults, with a distinct value per learning rate so a
 * tensor in the wrong group shows. */
static spec_train_t train_defaults(void) {
    spec_train_t tr;
    memset(&tr, 0, sizeof tr);
    tr.matrix_lr = 0.04;
    tr.embedding_lr = 0.6;
    tr.value_embedding_lr = 0.3;
    tr.unembedding_lr = 0.004;
    tr.scalar_lr = 0.5;
    tr.weight_decay = 0.2;
    tr.adam_beta1 = 0.8;
    tr.adam_beta2 = 0.95;
    tr.x0_beta1 = 0.96;
    tr.warmdown_ratio = 0.5;
    tr.muon_momentum_start = 0.85;
    tr.muon_momentum_end = 0.95;
    tr.muon_momentum_steps = 300;
    tr.ns_steps = 5;
    tr.muon_beta2 = 0.95;
    return tr;
}

/* The expected group of tensor t in a model of width D. */
static void expect_group(const optim_param_t *q, const gpt_tensor_t *t, const spec_train_t *tr,
                         int D, int tied) {
    const double scale = sqrt(768.0 / D);
    double lr = -1, beta1 = tr->adam_beta1;
    optim_kind kind = OPTIM_ADAMW;
    switch (t->kind) {
    case GPT_LM_HEAD:
        lr = tr->unembedding_lr * scale;
        break;
    case GPT_WTE:
        lr = (tied ? tr->unembedding_lr : tr->embedding_lr) * scale;
        break;
    case GPT_WPE:
        lr = tr->embedding_lr * scale;
        break;
    case GPT_VE:
        lr = tr->value_embedding_lr * scale;
        break;
    case GPT_RESID:
        lr = tr->scalar_lr * 0.01;
        break;
    case GPT_X0:
        lr = tr->scalar_lr;
        beta1 = tr->x0_beta1;
        break;
    default:
        kind = OPTIM_MUON;
        lr = tr->matrix_lr * sqrt(t->rows > t->cols ? (double)t->rows / t->cols : 1.0);
    }
    cr_assert_not_null(q, "%s: no optimizer entry", t->name);
    cr_assert_eq(q->kind, kind, "%s: wrong optimizer", t->name);
    cr_assert_float_eq(q->lr, lr, 1e-12, "%s: lr %g, expected %g", t->name, q->lr, lr);
    if (kind == OPTIM_ADAMW) {
        cr_assert_float_eq(q->beta1, beta1, 1e-15, "%s: beta1", t->name);
        cr_assert_float_eq(q->beta2, tr->adam_beta2, 1e-15, "%s: beta2", t->name);
        cr_assert_float_eq(q->eps, 1e-10, 1e-20, "%s: eps", t->name);
        cr_assert_eq(q->wd, 0.0, "%s: AdamW weight decay", t->name);
    }
}

static spec_model_t small_model(int tied, spec_pos_kind pos) {
    spec_model_t c;
    memset(&c, 0, sizeof c);
    c.vocab_size = 50;
    c.depth = 3;
    c.n_embd = 48;
    c.n_head = 4;
    c.n_kv_head = 2;
    c.head_dim = 12;
    c.mlp_ratio = 4;
    c.mlp_hidden = 192;
    c.mlp = MLP_SWIGLU;
    c.seq_len = 16;
    c.pos = pos;
    c.max_pos = 16;
    c.tie_embeddings = tied;
    c.softcap = 15;
    strcpy(c.window_pattern, "SSL");
    for (int l = 0; l < c.depth; l++) c.window[l] = 16;
    strcpy(c.ve_layers, "alternate");
    for (int l = 0; l < c.depth; l++) c.has_ve[l] = l % 2 == (c.depth - 1) % 2;
    c.ve_gate_channels = 8;
    return c;
}

static void check_model_groups(int tied, spec_pos_kind pos) {
    char err[256] = "";
    spec_model_t c = small_model(tied, pos);
    gpt_t *m = gpt_new(&c, err, sizeof err);
    cr_assert_not_null(m, "gpt_new: %s", err);
    spec_train_t tr = train_defaults();
    optim_t *o = optim_new(m, &tr, err, sizeof err);
    cr_assert_not_null(o, "optim_new: %s", err);
    int n_muon = 0, seen_wpe = 0;
    size_t state = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const gpt_tensor_t *t = &m->tensors[i];
        expect_group(optim_param(o, i), t, &tr, c.n_embd, tied);
        n_muon += optim_param(o, i)->kind == OPTIM_MUON;
        seen_wpe |= t->kind == GPT_WPE;
        state += optim_param(o, i)->kind == OPTIM_MUON
                     ? t->numel + (size_t)(t->rows >= t->cols ? t->rows : t->cols)
                     : 2 * t->numel;
    }
    cr_assert_null(optim_param(o, m->n_tensors));
    cr_assert_null(optim_param(o, -1));
    /* 6 matrices per layer, plus a gate in each value-embedding layer */
    int n_ve = 0;
    for (int l = 0; l < c.depth; l++) n_ve += c.has_ve[l];
    cr_assert_eq(n_ve, 2);
    cr_assert_eq(n_muon, 6 * c.depth + n_ve);
    cr_assert_eq(seen_wpe, pos == POS_LEARNED);
    cr_assert_geq(optim_state_bytes(o), state * sizeof(float));
    optim_free(o);
    gpt_free(m);
}

Test(optim, groups_untied_rope) {
    check_model_groups(0, POS_ROPE);
}
Test(optim, groups_tied_learned) {
    check_model_groups(1, POS_LEARNED);
}

/* Muon's FLOPs as the engine runs them, against hand counts: on a kernel
 * path a symmetric (96, 96) product computes two row blocks of 48 (96 and
 * then 48 columns wide: 6912 multiply-adds per step of depth), on the
 * generic path cblas_ssyrk's upper triangle (96 * 97 / 2 = 4656). A step is
 * the Gram matrix (depth: the longer side), c A^2 (depth 96) and p(A)
 * applied (96 * 96 * the longer side), 2 FLOPs per multiply-add. A model's
 * step counts exactly its Muon matrices: q, k, v, proj, fc, proj of the MLP
 * per layer and the gates of the value-embedding layers. */
Test(optim, flops_of_the_newton_schulz_iterations) {
    for (int path = 0; path < 3; path++) {
        if (tu_select_isa(tu_isas[path], 1) != 0) continue;
        const int generic = !strcmp(tu_isas[path], "generic");
        const double sym = generic ? 4656 : 6912;
        cr_expect_float_eq(optim_muon_flops(96, 96, 1), 2 * (sym * 96 * 2 + 96.0 * 96 * 96), 0.5,
                           "%s: square", tu_isas[path]);
        /* under twice as long as wide: five plain steps */
        const double plain = 2 * 5 * (sym * 160 + sym * 96 + 96.0 * 96 * 160);
        cr_expect_float_eq(optim_muon_flops(96, 160, 5), plain, 0.5, "%s: plain", tu_isas[path]);
        /* two plain steps, the Gram matrix, then three steps' p(R) (3) and
         * Z R Z (2 x 2) as symmetric products, Z Q (2) in full, and X = Q X_2 */
        const double wide = 2 * (2 * (sym * 256 + sym * 96 + 96.0 * 96 * 256) + sym * 256 +
                                 7 * sym * 96 + 2 * 96.0 * 96 * 96 + 96.0 * 96 * 256);
        cr_expect_float_eq(optim_muon_flops(96, 256, 5), wide, 0.5, "%s: wide", tu_isas[path]);
        cr_expect_float_eq(optim_muon_flops(256, 96, 5), wide, 0.5, "%s: tall", tu_isas[path]);
    }
    tu_select_isa_auto();

    char err[256] = "";
    spec_model_t c = small_model(0, POS_ROPE);
    gpt_t *m = gpt_new(&c, err, sizeof err);
    cr_assert_not_null(m, "gpt_new: %s", err);
    spec_train_t tr = train_defaults();
    optim_t *o = optim_new(m, &tr, err, sizeof err);
    cr_assert_not_null(o, "optim_new: %s", err);
    const int D = c.n_embd, q = c.n_head * c.head_dim, kv = c.n_kv_head * c.head_dim;
    const int shapes[][2] = {
        {q, D},           {kv, D}, {kv, D}, {D, q}, {2 * c.mlp_hidden, D}, /* SwiGLU */
        {D, c.mlp_hidden}};
    double want = 0;
    for (int l = 0; l < c.depth; l++) {
        for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++)
            want += optim_muon_flops(shapes[k][0], shapes[k][1], tr.ns_steps);
        if (c.has_ve[l]) want += optim_muon_flops(c.n_kv_head, c.ve_gate_channels, tr.ns_steps);
    }
    cr_expect_float_eq(optim_flops_per_step(o, m), want, 0.5 + 1e-12 * want);
    optim_free(o);
    gpt_free(m);
}

Test(optim, new_rejects_bad_hyperparameters) {
    char err[256] = "";
    spec_model_t c = small_model(0, POS_ROPE);
    gpt_t *m = gpt_new(&c, err, sizeof err);
    cr_assert_not_null(m, "gpt_new: %s", err);
    spec_train_t tr = train_defaults();
    tr.ns_steps = 6;
    cr_assert_null(optim_new(m, &tr, err, sizeof err));
    cr_assert(strstr(err, "ns_steps"), "message: %s", err);
    tr = train_defaults();
    tr.adam_beta2 = 1.0;
    cr_assert_null(optim_new(m, &tr, err, sizeof err));
    cr_assert(strstr(err, "adam_beta2"), "message: %s", err);
    tr = train_defaults();
    tr.matrix_lr = -0.1;
    cr_assert_null(optim_new(m, &tr, err, sizeof err));
    cr_assert(strstr(err, "matrix_lr"), "message: %s", err);
    gpt_free(m);
}

/* ------------------------------------------------- least squares, end to end */

/* A hand-made "model": y = W x + E[c] + b, with W (OUT, IN) updated by Muon,
 * the table E (NCLS, OUT) by AdamW as a token table, and b (OUT) by AdamW as
 * resid_lambdas. Loss = mean over samples of 0.5 * ||y - target||^2 with the
 * targets made by a hidden (W*, E*, b*). */
enum { IN = 16, OUT = 8, NCLS = 4, NS = 64 };

typedef struct {
    gpt_t m;
    gpt_tensor_t t[3];
    float x[NS][IN], target[NS][OUT];
    int cls[NS];
} lsq_t;

static void lsq_init(lsq_t *q) {
    memset(q, 0, sizeof *q);
    gpt_tensor_t *t = q->t;
    t[0] = (gpt_tensor_t){"w", GPT_MLP_FC, 0, 2, OUT, IN, 0, OUT * IN};
    t[1] = (gpt_tensor_t){"e", GPT_WTE, -1, 2, NCLS, OUT, OUT * IN, NCLS * OUT};
    t[2] = (gpt_tensor_t){"b", GPT_RESID, -1, 1, OUT, 1, OUT * IN + NCLS * OUT, OUT};
    q->m.cfg.n_embd = 768; /* AdamW scale 1 */
    q->m.n_tensors = 3;
    q->m.tensors = t;
    q->m.n_params = OUT * IN + NCLS * OUT + OUT;
    q->m.params = calloc(q->m.n_params, sizeof(float));
    q->m.grads = calloc(q->m.n_params, sizeof(float));
    cr_assert(q->m.params && q->m.grads);
    /* hidden parameters and data from a fixed formula (no RNG needed) */
    float w[OUT][IN], e[NCLS][OUT], b[OUT];
    for (int o = 0; o < OUT; o++) {
        b[o] = 0.3f * (float)cos(o);
        for (int i = 0; i < IN; i++) w[o][i] = 0.25f * (float)sin(1.7 * o + 0.9 * i + 0.3 * o * i);
    }
    for (int c = 0; c < NCLS; c++)
        for (int o = 0; o < OUT; o++) e[c][o] = 0.5f * (float)sin(2.1 * c + 1.3 * o);
    for (int s = 0; s < NS; s++) {
        q->cls[s] = s % NCLS;
        for (int i = 0; i < IN; i++) q->x[s][i] = (float)sin(0.37 * s * (i + 1) + i);
        for (int o = 0; o < OUT; o++) {
            float y = b[o] + e[q->cls[s]][o];
            for (int i = 0; i < IN; i++) y += w[o][i] * q->x[s][i];
            q->target[s][o] = y;
        }
    }
}

/* Loss at the current params; fills m.grads with its gradient. */
static double lsq_loss_grad(lsq_t *q) {
    const float *w = q->m.params, *e = w + OUT * IN, *b = e + NCLS * OUT;
    float *gw = q->m.grads, *ge = gw + OUT * IN, *gb = ge + NCLS * OUT;
    memset(q->m.grads, 0, q->m.n_params * sizeof(float));
    double loss = 0.0;
    for (int s = 0; s < NS; s++)
        for (int o = 0; o < OUT; o++) {
            float y = b[o] + e[q->cls[s] * OUT + o];
            for (int i = 0; i < IN; i++) y += w[o * IN + i] * q->x[s][i];
            const float r = y - q->target[s][o];
            loss += 0.5 * r * r / NS;
            gb[o] += r / NS;
            ge[q->cls[s] * OUT + o] += r / NS;
            for (int i = 0; i < IN; i++) gw[o * IN + i] += r * q->x[s][i] / NS;
        }
    return loss;
}

/* Run `steps` optimizer steps with the training schedules; returns the final
 * loss and copies the final params into out (n_params floats) if not NULL. */
static double lsq_run(int steps, double *first_loss, float *out) {
    static lsq_t q; /* big-ish; static keeps it off the stack */
    lsq_init(&q);
    char err[256] = "";
    spec_train_t tr = train_defaults();
    tr.scalar_lr = 2.0; /* bias lr = 0.02 */
    tr.embedding_lr = 0.02;
    optim_t *o = optim_new(&q.m, &tr, err, sizeof err);
    cr_assert_not_null(o, "optim_new: %s", err);
    cr_assert_eq(optim_param(o, 0)->kind, OPTIM_MUON);
    cr_assert_eq(optim_param(o, 1)->kind, OPTIM_ADAMW);
    double loss = lsq_loss_grad(&q);
    if (first_loss) *first_loss = loss;
    for (int step = 0; step < steps; step++) {
        const double progress = (double)step / steps;
        const float g0 = q.m.grads[0];
        optim_step(o, &q.m, optim_lr_multiplier(progress, 0.0, 0.5, 0.0),
                   optim_muon_momentum(step, 0.85, 0.95, 300),
                   optim_weight_decay(progress, tr.weight_decay));
        cr_assert_eq(q.m.grads[0], g0, "optim_step changed the gradients");
        loss = lsq_loss_grad(&q);
        cr_assert(isfinite(loss), "loss diverged at step %d", step);
    }
    cr_assert_eq(optim_param(o, 1)->step, steps, "AdamW step counter");
    if (out) memcpy(out, q.m.params, q.m.n_params * sizeof(float));
    optim_free(o);
    free(q.m.params);
    free(q.m.grads);
    return loss;
}

Test(optim, least_squares_converges) {
    double first;
    double last = lsq_run(400, &first, NULL);
    cr_assert_gt(first, 0.5, "the problem should start far from the optimum (loss %g)", first);
    cr_assert_lt(last, 1e-4 * first, "loss went from %g to only %g", first, last);
}

Test(optim, deterministic) {
    float a[OUT * IN + NCLS * OUT + OUT], b[OUT * IN + NCLS * OUT + OUT];
    lsq_run(50, NULL, a);
    lsq_run(50, NULL, b);
    cr_assert(!memcmp(a, b, sizeof a), "two identical runs differ");
}

/* The residual scalars' gradient at initialisation is rounding noise (every
 * block an identity, RMSNorm scale-invariant): AdamW's first step would make
 * it an update of up to the full learning rate in a direction set by
 * rounding, so a token-budgeted run's val_bpb would depend on the kernel
 * path (0.006 apart on the generic and AVX-512 paths after 10 steps of the
 * default spec). They sit out the first step, and start with the second. */
Test(optim, residual_scalars_sit_out_the_first_step) {
    char err[256] = "";
    spec_model_t c = small_model(0, POS_ROPE);
    gpt_t *m = gpt_new(&c, err, sizeof err);
    cr_assert_not_null(m, "gpt_new: %s", err);
    gpt_init_weights(m, 3);
    spec_train_t tr = train_defaults();
    optim_t *o = optim_new(m, &tr, err, sizeof err);
    cr_assert_not_null(o, "optim_new: %s", err);
    const int B = 2, T = c.seq_len, L = c.depth;
    int *in = malloc(sizeof(int) * B * T), *tg = malloc(sizeof(int) * B * T);
    cr_assert(in && tg);
    for (int i = 0; i < B * T; i++)
        in[i] = (i * 7 + 3) % c.vocab_size, tg[i] = (i * 5 + 1) % c.vocab_size;
    float loss, before[2 * SPEC_MAX_DEPTH];
    for (int step = 0; step < 2; step++) {
        gpt_zero_grad(m);
        cr_assert_eq(gpt_forward(m, in, tg, B, T, GPT_TRAIN, &loss), 0);
        gpt_backward(m, 1.0f);
        if (step == 0) {
            /* the premise: noise, next to the output layer's gradient */
            float gmax = 0.0f, smax = 0.0f;
            const gpt_tensor_t *head = gpt_find_tensor(m, "lm_head.weight");
            for (size_t j = 0; j < head->numel; j++)
                gmax = fmaxf(gmax, fabsf(m->grads[head->offset + j]));
            for (int l = 0; l < L; l++)
                smax = fmaxf(smax, fmaxf(fabsf(m->g.resid_lambdas[l]), fabsf(m->g.x0_lambdas[l])));
            cr_expect(smax <= 1e-5f * gmax, "scalar gradients %g against the head's %g", smax,
                      gmax);
        }
        for (int l = 0; l < L; l++) {
            before[l] = m->p.resid_lambdas[l];
            before[L + l] = m->p.x0_lambdas[l];
        }
        optim_step(o, m, 1.0, tr.muon_momentum_start, tr.weight_decay);
        for (int l = 0; l < L; l++) {
            if (step == 0) {
                cr_expect_eq(m->p.resid_lambdas[l], before[l], "resid_lambdas[%d] moved", l);
                cr_expect_eq(m->p.x0_lambdas[l], before[L + l], "x0_lambdas[%d] moved", l);
            } else {
                cr_expect_neq(m->p.resid_lambdas[l], before[l], "resid_lambdas[%d] stayed", l);
                cr_expect_neq(m->p.x0_lambdas[l], before[L + l], "x0_lambdas[%d] stayed", l);
            }
        }
    }
    for (int i = 0; i < m->n_tensors; i++) {
        const optim_param_t *q = optim_param(o, i);
        const gpt_tensor_kind k = m->tensors[i].kind;
        if (q->kind == OPTIM_ADAMW)
            cr_expect_eq(q->step, k == GPT_RESID || k == GPT_X0 ? 1 : 2, "%s", m->tensors[i].name);
    }
    free(in), free(tg);
    optim_free(o);
    gpt_free(m);
}

/* Steps of a bf16 model with its weights' packed forms cached (rounded and
 * packed once per optimiser step, gemm_bf16.h) give the bits of steps that
 * pack every call: optim_step invalidates what the last step packed. */
static void bf16_steps(int cached, float *losses, float *params_out, size_t *n_params) {
    char err[256] = "";
    spec_model_t c = small_model(0, POS_ROPE);
    gpt_t *m = gpt_new(&c, err, sizeof err);
    cr_assert_not_null(m, "gpt_new: %s", err);
    gpt_init_weights(m, 5);
    spec_train_t tr = train_defaults();
    optim_t *o = optim_new(m, &tr, err, sizeof err);
    cr_assert_not_null(o, "optim_new: %s", err);
    const int B = 4, T = 16;
    cr_assert_eq(gpt_reserve(m, B, T, err, sizeof err), 0, "%s", err);
    int in[4 * 16], tg[4 * 16];
    rng_t r;
    rng_seed(&r, 6);
    for (int i = 0; i < B * T; i++) {
        in[i] = (int)rng_below(&r, 50);
        tg[i] = (int)rng_below(&r, 50);
    }
    gemm_bf16_cache_weights(cached ? m->params : NULL, m->n_params);
    for (int s = 0; s < 3; s++) {
        gpt_zero_grad(m);
        cr_assert_eq(gpt_forward(m, in, tg, B, T, GPT_TRAIN, &losses[s]), 0);
        gpt_backward(m, 1.0f);
        optim_step(o, m, 1.0, 0.95, 0.2);
    }
    gemm_bf16_cache_weights(NULL, 0);
    memcpy(params_out, m->params, m->n_params * sizeof(float));
    *n_params = m->n_params;
    optim_free(o);
    gpt_free(m);
}

Test(optim, bf16_cached_weights_give_the_uncached_steps) {
    if (!tu_select_bf16(2)) return;
    float loss[2][3];
    size_t n[2];
    float *p[2] = {malloc(1 << 22), malloc(1 << 22)};
    cr_assert(p[0] && p[1]);
    bf16_steps(1, loss[0], p[0], &n[0]);
    bf16_steps(0, loss[1], p[1], &n[1]);
    tu_select_isa_auto();
    cr_assert_eq(n[0], n[1]);
    cr_assert_lt(n[0] * sizeof(float), (size_t)1 << 22);
    for (int s = 0; s < 3; s++)
        cr_expect_eq(loss[0][s], loss[1][s], "step %d: cached %.9g, uncached %.9g", s, loss[0][s],
                     loss[1][s]);
    cr_expect(loss[0][2] != loss[0][0], "the steps changed the weights");
    cr_expect(!memcmp(p[0], p[1], n[0] * sizeof(float)), "the weights after 3 steps differ");
    free(p[0]), free(p[1]);
}
