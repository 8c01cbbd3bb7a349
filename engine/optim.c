/* optim.c - AdamW, Muon (polar express + NorMuon + cautious weight decay), the
 * LR/momentum/weight-decay schedules, and the grouped optimizer over a gpt_t.
 *
 * The update rules follow autoresearch's train.py (adamw_step_fused,
 * muon_step_fused, setup_optimizer, get_lr_multiplier, get_muon_momentum,
 * get_weight_decay). One deliberate difference: autoresearch runs the
 * polar-express iteration in bfloat16 on the GPU; here everything, including
 * that iteration, is float32 on the CPU, and on matrices at least twice as
 * long as wide its last three steps run in the Gram space (polar_express
 * says what that costs in accuracy). Muon's matrix products go through
 * gemm.c's kernel (else cblas_ssyrk and cblas_sgemm). autoresearch stacks
 * same-shape matrices and updates them together; every quantity in its Muon
 * step is per matrix (the norms and sums run over dims (-2, -1) of each
 * stacked matrix), so updating one matrix at a time, each on one thread of
 * the team, is the same computation. */
#include "engine/optim.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gemm.h"
#include "engine/gemm_bf16.h"
#include "engine/threads.h"
#include "engine/transpose.h"
#include "engine/util.h"

/* Polar-express coefficients (a, b, c) of the five published iterations. */
static const float polar_express_coeffs[5][3] = {
    {8.156554524902461f, -22.48329292557795f, 15.878769915207462f},
    {4.042929935166739f, -2.808917465908714f, 0.5000178451051316f},
    {3.8916678022926607f, -2.772484153217685f, 0.5060648178503393f},
    {3.285753657755655f, -2.3681294933425376f, 0.46449024233003106f},
    {2.3465413258596377f, -1.7097828382687081f, 0.42323551169305323f},
};
#define OPTIM_MAX_NS_STEPS 5

/* Element-wise loops over fewer floats stay on one thread. Reductions are
 * split into OPTIM_CHUNKS fixed chunks summed in order, so results do not
 * depend on the thread count. */
#define OPTIM_PAR(n) ((n) >= 32768)
#define OPTIM_CHUNKS 64

/* Floats past each row of gram()'s X^T. With rows a power of two, X^T's
 * row stride would map the transpose's 8 rows, and the product's column
 * panel of it, onto a few L1 sets: at 256 x 1024 the transpose took 4x as
 * long (0.18 against 0.044 ms, Zen 5, one thread). */
#define GRAM_T_PAD 16

/* AdamW epsilon of every group (autoresearch's setup_optimizer). */
#define OPTIM_ADAM_EPS 1e-10

/* a + w*(b - a), evaluated as PyTorch's CPU lerp does (the form depends on w). */
static inline float lerpf(float a, float b, float w) {
    return fabsf(w) < 0.5f ? a + w * (b - a) : b - (b - a) * (1.0f - w);
}

/* ---------------------------------------------------------------- AdamW */

void optim_adamw_step(float *p, const float *g, float *m, float *v, size_t n, int step, float lr,
                      float beta1, float beta2, float eps, float wd) {
    const float w1 = 1.0f - beta1, w2 = 1.0f - beta2;
    const float bias1 = 1.0f - powf(beta1, (float)step);
    const float bias2 = 1.0f - powf(beta2, (float)step);
    const float step_size = lr / bias1;
    const float decay = 1.0f - lr * wd;
#pragma omp parallel for schedule(static) if (OPTIM_PAR(n))
    for (size_t i = 0; i < n; i++) {
        const float gi = g[i];
        const float pi = p[i] * decay;
        const float mi = lerpf(m[i], gi, w1);
        const float vi = lerpf(v[i], gi * gi, w2);
        const float denom = sqrtf(vi / bias2) + eps;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - step_size * (mi / denom);
    }
}

/* ----------------------------------------------------------------- Muon */

/* Scratch layout for a (rows, cols) matrix with s = min(rows, cols) and
 * l = max(rows, cols): l doubles (2 l floats, first so they are aligned) of
 * per-column sums, four (s, s) matrices (the Gram matrix, the polynomial in
 * it, and polar_express's Q and a temporary), X and Y (rows, cols) the
 * iterates, each with GRAM_T_PAD l floats more (the other's gram() scratch),
 * fs (l) NorMuon per-row or per-column scale. */
size_t optim_muon_work_floats(int rows, int cols) {
    const size_t r = (size_t)rows, c = (size_t)cols;
    const size_t s = r < c ? r : c, l = r < c ? c : r;
    return 4 * s * s + 2 * (r * c + GRAM_T_PAD * l) + 3 * l;
}

/* Copy the upper triangle of the (s, s) row-major matrix A into its lower
 * one (cblas_ssyrk and sym_product fill only the upper triangle): the
 * blocks below the diagonal as transposed 8 x 8 blocks, the diagonal's
 * blocks and the last s % 8 rows float by float. */
static void mirror_upper(float *A, int s) {
    const int s8 = s - s % 8;
    for (int i0 = 8; i0 < s8; i0 += 8)
        for (int j0 = 0; j0 < i0; j0 += 8)
            transpose_8x8(A + (size_t)i0 * s + j0, s, A + (size_t)j0 * s + i0, s);
    for (int i = 0; i < s; i++)
        for (int j = i < s8 ? i - i % 8 : 0; j < i; j++)
            A[(size_t)i * s + j] = A[(size_t)j * s + i];
}

/* The products below run through gemm.c's register-tiled kernel on the
 * calling thread where it takes their width (a whole number of vectors),
 * else through BLAS: the kernel does not depend on OpenBLAS knowing the CPU
 * (0.3.21 runs its SSE3 kernels on CPUs newer than it), and with a
 * (rows, cols) matrix per thread the products are small. */

/* C (s, s) = a symmetric product by kernel k (taking width s): C's rows in
 * blocks of SYM_ROWS, each from its first column rounded down to a whole
 * vector, so only the upper triangle and the blocks on the diagonal are
 * computed, then the lower triangle is mirrored from the upper. Element
 * (j, i) is the same products as (i, j) summed in the same order, so C is
 * the full product's, bit for bit, for about 60% of its work at s = 256. A
 * (s, K) element (i, p) at A[i*ars + p*acs], B (K, s) row p at B + p*ldb. */
#define SYM_ROWS (8 * GEMM_MR)

/* The first column of sym_product's row block from row m0: m0 rounded down
 * to a whole vector of gemm_rows_for(s)'s width (which divides s). */
static int sym_first_col(int s, int m0) {
    return m0 - m0 % (s % 16 == 0 ? 16 : 8);
}

static void sym_product(gemm_rows_fn *k, int s, int K, const float *A, ptrdiff_t ars, ptrdiff_t acs,
                        const float *B, ptrdiff_t ldb, float *C) {
    for (int m0 = 0; m0 < s; m0 += SYM_ROWS) {
        const int m1 = s - m0 < SYM_ROWS ? s : m0 + SYM_ROWS, j0 = sym_first_col(s, m0);
        k(m0, m1, s - j0, K, A, ars, acs, B + j0, ldb, C + j0, s, 0);
    }
    mirror_upper(C, s);
}

/* Multiply-adds of a symmetric (s, s) product over depth K as it runs:
 * sym_product's row blocks where the kernel takes width s, else the upper
 * triangle cblas_ssyrk computes. */
static double sym_product_fmas(int s, int K) {
    if (!gemm_rows_for(s)) return (double)s * (s + 1) / 2 * K;
    double fmas = 0;
    for (int m0 = 0; m0 < s; m0 += SYM_ROWS) {
        const int m1 = s - m0 < SYM_ROWS ? s : m0 + SYM_ROWS;
        fmas += (double)(m1 - m0) * (s - sym_first_col(s, m0)) * K;
    }
    return fmas;
}

/* A (s, s) = the Gram matrix of X (rows, cols) on its smaller side: X^T X
 * when tall, X X^T otherwise. Symmetric, both triangles filled. T:
 * cols x (rows + GRAM_T_PAD) floats of scratch. */
static void gram(float *A, const float *X, int rows, int cols, float *T) {
    const int tall = rows > cols, s = tall ? cols : rows;
    gemm_rows_fn *k = gemm_rows_for(s);
    if (k && tall) {
        sym_product(k, s, rows, X, 1, cols, X, cols, A); /* X^T read in place */
        return;
    }
    if (k) {
        const int ldt = rows + GRAM_T_PAD;
        transpose_matrix(T, ldt, X, cols, rows, cols); /* X^T, so its rows are contiguous */
        sym_product(k, s, cols, X, cols, 1, T, ldt, A);
        return;
    }
    cblas_ssyrk(CblasRowMajor, CblasUpper, tall ? CblasTrans : CblasNoTrans, s, tall ? rows : cols,
                1.0f, X, cols, 0.0f, A, s);
    mirror_upper(A, s);
}

/* P (s, s) = a I + b A + c A^2 for a symmetric A (A^2 = A A^T). */
static void poly(float *P, const float *A, int s, float a, float b, float c) {
    gemm_rows_fn *k = gemm_rows_for(s);
    if (k) {
        sym_product(k, s, s, A, s, 1, A, s, P);
        for (size_t i = 0; i < (size_t)s * s; i++) P[i] = c * P[i] + b * A[i];
        for (int i = 0; i < s; i++) P[(size_t)i * s + i] += a;
        return;
    }
    memcpy(P, A, (size_t)s * s * sizeof *P);
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, s, s, c, A, s, b, P, s);
    for (int i = 0; i < s; i++) P[(size_t)i * s + i] += a;
    mirror_upper(P, s);
}

/* Y (rows, cols) = X P (tall) or P X (wide or square), P (s, s). */
static void apply_right_or_left(float *Y, const float *X, const float *P, int rows, int cols) {
    gemm_rows_fn *k = gemm_rows_for(cols);
    if (k && rows > cols)
        k(0, rows, cols, cols, X, cols, 1, P, cols, Y, cols, 0);
    else if (k)
        k(0, rows, cols, rows, P, rows, 1, X, cols, Y, cols, 0);
    else if (rows > cols)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, cols, cols, 1.0f, X, cols, P,
                    cols, 0.0f, Y, cols);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, cols, rows, 1.0f, P, rows, X,
                    cols, 0.0f, Y, cols);
}

/* C (s, s) = A B. sym: A and B are symmetric and commute (polynomials in
 * one matrix), so C is symmetric too and only its upper triangle is
 * computed. */
static void square_product(float *C, const float *A, const float *B, int s, int sym) {
    gemm_rows_fn *k = gemm_rows_for(s);
    if (k && sym)
        sym_product(k, s, s, A, s, 1, B, s, C);
    else if (k)
        k(0, s, s, s, A, s, 1, B, s, C, s, 0);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s, s, s, 1.0f, A, s, B, s, 0.0f, C,
                    s);
    if (!k && sym) mirror_upper(C, s);
}

/* Polar express's first PLAIN_STEPS iterations run on X itself; the rest run
 * in the Gram space when X is at least GRAM_ASPECT times as long as it is
 * wide, where they cost less (below). */
#define PLAIN_STEPS 2
#define GRAM_ASPECT 2

/* Whether polar_express runs its iterations from PLAIN_STEPS on in the Gram
 * space for a (rows, cols) matrix over ns_steps iterations: at least two of
 * them left (one alone is a plain step) and the long side GRAM_ASPECT times
 * the short one. */
static int gram_space_steps(int rows, int cols, int ns_steps) {
    const int s = rows < cols ? rows : cols, l = rows < cols ? cols : rows;
    return ns_steps - PLAIN_STEPS >= 2 && l >= GRAM_ASPECT * s;
}

/* The polar-express approximation of the orthogonal polar factor of X
 * (rows, cols), computed on the smaller Gram side: each plain step is
 * X <- X p(A) (tall) or p(A) X with A the Gram matrix of X and
 * p(A) = a I + b A + c A^2, two symmetric products and one (rows, cols)
 * product.
 *
 * Every iterate is X_k = Q_k X_j (wide; X_j Q_k tall) with Q_k a polynomial
 * in R_j = the Gram matrix of X_j, and the Gram matrix of X_k is
 * R_k = Q_k R_j Q_k: all of them are symmetric and commute. So from step j
 * on, the iteration runs on (s, s) matrices only (Gram Newton-Schulz):
 * Z = p(R), Q <- Z Q, R <- Z R Z, and X = Q X_j once at the end (tall:
 * Q <- Q Z and X = X_j Q). On a matrix four times as long as wide, with
 * j = 2 this is 24% fewer multiply-adds than five plain steps
 * (optim_muon_flops), and make bench's L steps 0.966x the time on the AVX2
 * path. The price is accuracy: Q's rounding error is amplified by its norm,
 * which grows with each step's coefficient a (8.2 in the first). Against a
 * float64 plain iteration, on a gradient with singular values down to 1e-5,
 * the largest error is 2.8e-5 of the largest value from j = 2 (five plain
 * float32 steps: 1.7e-5; j = 1: 2.9e-4; j = 0: 1.4e-3; test
 * optim::muon_in_the_gram_space_stays_close_to_float64). autoresearch runs
 * the iteration in bfloat16, whose rounding alone is 4e-3. The Z's commute
 * only to rounding, so Q is accumulated in full, in the order the plain
 * steps would apply them: with only Z Q's upper triangle computed, the
 * error above was 1.6e-4, and on a gradient of rank 23 (32 x 64) the paths
 * disagreed by 3e-3 (optim::muon_same_on_every_path).
 *
 * X and Y are the iterates' buffers (both overwritten); returns the one
 * holding the result. R, Z, Q and T are (s, s) scratch. */
static const float *polar_express(float *X, float *Y, int rows, int cols, int ns_steps, float *R,
                                  float *Z, float *Q, float *T) {
    const int s = rows < cols ? rows : cols;
    const int plain = gram_space_steps(rows, cols, ns_steps) ? PLAIN_STEPS : ns_steps;
    for (int k = 0; k < plain; k++) {
        const float *co = polar_express_coeffs[k];
        gram(R, X, rows, cols, Y); /* Y is free until apply_right_or_left */
        poly(Z, R, s, co[0], co[1], co[2]);
        apply_right_or_left(Y, X, Z, rows, cols);
        float *t = X;
        X = Y;
        Y = t;
    }
    if (plain == ns_steps) return X;
    gram(R, X, rows, cols, Y);
    for (int k = plain; k < ns_steps; k++) {
        const float *co = polar_express_coeffs[k];
        poly(Z, R, s, co[0], co[1], co[2]);
        if (k == plain) {
            memcpy(Q, Z, (size_t)s * s * sizeof *Q); /* Q was I */
        } else {
            if (rows > cols) /* Q <- Q Z: the order the plain steps apply them */
                square_product(T, Q, Z, s, 0);
            else
                square_product(T, Z, Q, s, 0);
            float *t = Q;
            Q = T;
            T = t;
        }
        if (k + 1 < ns_steps) { /* R <- Z (Z R) */
            square_product(T, Z, R, s, 1);
            square_product(R, Z, T, s, 1);
        }
    }
    apply_right_or_left(Y, X, Q, rows, cols);
    return Y;
}

double optim_muon_flops(int rows, int cols, int ns_steps) {
    const int s = rows < cols ? rows : cols, l = rows < cols ? cols : rows;
    /* a plain step: the Gram matrix (depth l), c A^2 (depth s), p(A) applied */
    const double plain = sym_product_fmas(s, l) + sym_product_fmas(s, s) + (double)s * s * l;
    if (!gram_space_steps(rows, cols, ns_steps)) return 2.0 * ns_steps * plain;
    /* then the Gram matrix once; per step p(R) and Z R Z (not the last),
     * symmetric products of depth s, and Z Q in full (not the first);
     * X = Q X_j once */
    const int g = ns_steps - PLAIN_STEPS;
    const double sym = sym_product_fmas(s, s);
    const double gram_space =
        sym_product_fmas(s, l) + (g + 2.0 * (g - 1)) * sym + (g - 1.0) * s * s * s;
    return 2.0 * (PLAIN_STEPS * plain + gram_space + (double)s * s * l);
}

/* fs[j] = the mean of u^2 over row j (per_row) or column j of u (rows, cols),
 * each a double sum in index order. The column sums run row by row over
 * acc (cols doubles) so u is read along its rows. */
static void normuon_means(float *fs, const float *u, int rows, int cols, int per_row, double *acc) {
    const size_t n = (size_t)rows * cols;
    if (per_row) {
#pragma omp parallel for schedule(static) if (OPTIM_PAR(n))
        for (int r = 0; r < rows; r++) {
            const float *ur = u + (size_t)r * cols;
            double a = 0.0;
            for (int c = 0; c < cols; c++) a += (double)ur[c] * ur[c];
            fs[r] = (float)(a / cols);
        }
        return;
    }
    for (int c = 0; c < cols; c++) acc[c] = 0.0;
    for (int r = 0; r < rows; r++) {
        const float *ur = u + (size_t)r * cols;
        for (int c = 0; c < cols; c++) acc[c] += (double)ur[c] * ur[c];
    }
    for (int c = 0; c < cols; c++) fs[c] = (float)(acc[c] / rows);
}

/* *p -= lr*v + lr_wd*p*(v*p >= 0): the update v with cautious weight decay. */
static inline void cautious_update(float *p, float v, float lr, float lr_wd) {
    float d = lr * v;
    if (v * *p >= 0.0f) d += lr_wd * *p;
    *p -= d;
}

int optim_muon_step(float *p, const float *g, float *momentum_buf, float *second_buf, int rows,
                    int cols, float momentum, float lr, float wd, float beta2, int ns_steps,
                    float *work) {
    if (ns_steps < 0 || ns_steps > OPTIM_MAX_NS_STEPS || rows <= 0 || cols <= 0) return -1;
    const size_t n = (size_t)rows * cols;
    const size_t s = (size_t)(rows < cols ? rows : cols);
    const size_t l = (size_t)(rows < cols ? cols : rows);
    double *acc = (double *)work;
    float *R = work + 2 * l, *Z = R + s * s, *Q = Z + s * s, *T = Q + s * s;
    float *X = T + s * s, *Y = X + n + GRAM_T_PAD * l, *fs = Y + n + GRAM_T_PAD * l;

    /* Nesterov momentum: buf = lerp(buf, g, 1-mu); X = lerp(g, buf, mu); in
     * the same pass the sum of squares for X /= ||X||_F * 1.02 + 1e-6. */
    const float wm = 1.0f - momentum;
    double part[OPTIM_CHUNKS];
#pragma omp parallel for schedule(static) if (OPTIM_PAR(n))
    for (int c = 0; c < OPTIM_CHUNKS; c++) {
        double a = 0.0;
        for (size_t i = n * c / OPTIM_CHUNKS; i < n * (c + 1) / OPTIM_CHUNKS; i++) {
            momentum_buf[i] = lerpf(momentum_buf[i], g[i], wm);
            X[i] = lerpf(g[i], momentum_buf[i], momentum);
            a += (double)X[i] * X[i];
        }
        part[c] = a;
    }
    double ss = 0.0;
    for (int c = 0; c < OPTIM_CHUNKS; c++) ss += part[c];
    const float denom = sqrtf((float)ss) * 1.02f + 1e-6f;
#pragma omp parallel for schedule(static) if (OPTIM_PAR(n))
    for (size_t i = 0; i < n; i++) X[i] /= denom;

    const float *u = polar_express(X, Y, rows, cols, ns_steps, R, Z, Q, T);

    /* NorMuon. rows >= cols: v_mean is the mean of u^2 over each row (the
     * reduced dim is the last, of size cols), one entry per row; otherwise the
     * mean over each column (dim -2, size rows), one entry per column. */
    const int per_row = rows >= cols;
    const int nv = per_row ? rows : cols;
    const int red = per_row ? cols : rows;
    normuon_means(fs, u, rows, cols, per_row, acc);
    /* v_norm = sqrt(sum(v_mean) * red): the Frobenius norm of u.
     * v_norm_new: the same after scaling by step_size = rsqrt(second_buf). */
    const float w2 = 1.0f - beta2;
    double vsum = 0.0, scaled_sum = 0.0;
    for (int j = 0; j < nv; j++) {
        const float vm = fs[j];
        vsum += vm;
        second_buf[j] = lerpf(second_buf[j], vm, w2);
        const float step_size = 1.0f / sqrtf(fmaxf(second_buf[j], 1e-10f));
        scaled_sum += (double)(vm * (float)red) * step_size * step_size;
        fs[j] = step_size; /* v_mean[j] is no longer needed */
    }
    const float v_norm = sqrtf((float)vsum * (float)red);
    const float v_norm_new = sqrtf((float)scaled_sum);
    const float ratio = v_norm / fmaxf(v_norm_new, 1e-10f);
    for (int j = 0; j < nv; j++) fs[j] *= ratio;

    /* The scaled update, then cautious weight decay: decay only where the
     * update and the parameter agree in sign. p -= lr*v + lr*wd*p*(v*p >= 0)
     * with v = u * fs. */
    const float lr_wd = lr * wd;
#pragma omp parallel for schedule(static) if (OPTIM_PAR(n))
    for (int r = 0; r < rows; r++) {
        const float *ur = u + (size_t)r * cols;
        float *pr = p + (size_t)r * cols;
        if (per_row)
            for (int c = 0; c < cols; c++) cautious_update(pr + c, ur[c] * fs[r], lr, lr_wd);
        else
            for (int c = 0; c < cols; c++) cautious_update(pr + c, ur[c] * fs[c], lr, lr_wd);
    }
    return 0;
}

/* ------------------------------------------------------------ schedules */

static double clamp01(double x) {
    return x < 0.0 ? 0.0 : x > 1.0 ? 1.0 : x;
}

double optim_lr_multiplier(double progress, double warmup_ratio, double warmdown_ratio,
                           double final_lr_frac) {
    progress = clamp01(progress);
    if (progress < warmup_ratio) return warmup_ratio > 0.0 ? progress / warmup_ratio : 1.0;
    if (progress < 1.0 - warmdown_ratio) return 1.0;
    if (warmdown_ratio <= 0.0) return 1.0; /* only progress == 1 gets here */
    const double cooldown = (1.0 - progress) / warmdown_ratio;
    return cooldown * 1.0 + (1.0 - cooldown) * final_lr_frac;
}

double optim_muon_momentum(int step, double start, double end, int ramp_steps) {
    double frac = ramp_steps > 0 ? (double)step / ramp_steps : 1.0;
    frac = clamp01(frac);
    return (1.0 - frac) * start + frac * end;
}

double optim_weight_decay(double progress, double wd) {
    return wd * (1.0 - clamp01(progress));
}

/* ------------------------------------------------- the grouped optimizer */

struct optim {
    int n;                 /* tensors, = the model's n_tensors */
    optim_param_t *params; /* n entries: how each tensor is updated */
    size_t *state_off;     /* n entries: offset of each tensor's state in state */
    float *state;          /* AdamW: m then v (numel each); Muon: momentum (numel)
                            * then the NorMuon second moment (rows or cols) */
    size_t state_floats;
    int *order;  /* n tensor indices, the costliest update first */
    float *work; /* work_threads slices of Muon scratch, work_floats each
                  * (the largest optim_muon_work_floats) */
    size_t work_floats;
    int work_threads;
    int ns_steps;
    float muon_beta2;
};

/* DESIGN's optimizer groups (see optim_new in optim.h): each tensor kind's
 * update, the spec_train_t member holding its base learning rate, and how
 * that rate is scaled. */
typedef enum {
    LR_AS_IS,     /* the spec's rate */
    LR_WIDTH,     /* x (n_embd/768)^-0.5: AdamW rates tuned at width 768 */
    LR_HUNDREDTH, /* x 0.01 */
    LR_ASPECT,    /* x max(1, rows/cols)^0.5 (Muon) */
} lr_scale_t;

#define TRAIN_FIELD(f) offsetof(spec_train_t, f)

typedef struct {
    gpt_tensor_kind kind;
    optim_kind update;
    size_t lr; /* offset of the base learning rate (a double) in spec_train_t */
    lr_scale_t scale;
    size_t beta1; /* offset of AdamW's beta1 in spec_train_t (unused by Muon) */
} optim_group_t;

static const optim_group_t optim_groups[] = {
    {GPT_ATTN_Q, OPTIM_MUON, TRAIN_FIELD(matrix_lr), LR_ASPECT, 0},
    {GPT_ATTN_K, OPTIM_MUON, TRAIN_FIELD(matrix_lr), LR_ASPECT, 0},
    {GPT_ATTN_V, OPTIM_MUON, TRAIN_FIELD(matrix_lr), LR_ASPECT, 0},
    {GPT_ATTN_PROJ, OPTIM_MUON, TRAIN_FIELD(matrix_lr), LR_ASPECT, 0},
    {GPT_VE_GATE, OPTIM_MUON, TRAIN_FIELD(matrix_lr), LR_ASPECT, 0},
    {GPT_MLP_FC, OPTIM_MUON, TRAIN_FIELD(matrix_lr), LR_ASPECT, 0},
    {GPT_MLP_PROJ, OPTIM_MUON, TRAIN_FIELD(matrix_lr), LR_ASPECT, 0},
    {GPT_LM_HEAD, OPTIM_ADAMW, TRAIN_FIELD(unembedding_lr), LR_WIDTH, TRAIN_FIELD(adam_beta1)},
    /* When tied (no lm_head tensor) the table is also the output layer, the
     * use where the rate matters for stability: it takes unembedding_lr. */
    {GPT_WTE, OPTIM_ADAMW, TRAIN_FIELD(embedding_lr), LR_WIDTH, TRAIN_FIELD(adam_beta1)},
    {GPT_WPE, OPTIM_ADAMW, TRAIN_FIELD(embedding_lr), LR_WIDTH, TRAIN_FIELD(adam_beta1)},
    {GPT_VE, OPTIM_ADAMW, TRAIN_FIELD(value_embedding_lr), LR_WIDTH, TRAIN_FIELD(adam_beta1)},
    {GPT_RESID, OPTIM_ADAMW, TRAIN_FIELD(scalar_lr), LR_HUNDREDTH, TRAIN_FIELD(adam_beta1)},
    {GPT_X0, OPTIM_ADAMW, TRAIN_FIELD(scalar_lr), LR_AS_IS, TRAIN_FIELD(x0_beta1)},
};

static const optim_group_t *group_of(gpt_tensor_kind k) {
    for (size_t i = 0; i < sizeof optim_groups / sizeof optim_groups[0]; i++)
        if (optim_groups[i].kind == k) return &optim_groups[i];
    return NULL;
}

static double train_double(const spec_train_t *tr, size_t offset) {
    return *(const double *)((const char *)tr + offset);
}

/* The base learning rate of tensor t in group g; width_scale is
 * (n_embd/768)^-0.5, tied whether the model has no lm_head tensor. */
static double group_lr(const optim_group_t *g, const gpt_tensor_t *t, const spec_train_t *tr,
                       double width_scale, int tied) {
    double lr = g->kind == GPT_WTE && tied ? tr->unembedding_lr : train_double(tr, g->lr);
    switch (g->scale) {
    case LR_WIDTH:
        return lr * width_scale;
    case LR_HUNDREDTH:
        return lr * 0.01;
    case LR_ASPECT:
        return lr * sqrt(fmax(1.0, (double)t->rows / t->cols));
    default:
        return lr;
    }
}

/* Floats of NorMuon second moment for a (rows, cols) matrix. */
static size_t muon_second_floats(int rows, int cols) {
    return (size_t)(rows >= cols ? rows : cols);
}

static int check_beta(const char *name, double b, char *err, size_t errlen) {
    if (!(b >= 0.0 && b < 1.0)) {
        snprintf(err, errlen, "train.%s: %g is not in [0, 1)", name, b);
        return -1;
    }
    return 0;
}

static int check_lr(const char *name, double lr, char *err, size_t errlen) {
    if (!(lr >= 0.0 && isfinite(lr))) {
        snprintf(err, errlen, "train.%s: %g is not a finite non-negative learning rate", name, lr);
        return -1;
    }
    return 0;
}

/* Rough cost of tensor i's update, for ordering: Muon's products' FLOPs,
 * AdamW one pass over numel. */
static double update_cost(const optim_t *o, const gpt_t *m, int i) {
    const gpt_tensor_t *t = &m->tensors[i];
    if (o->params[i].kind == OPTIM_ADAMW) return (double)t->numel;
    return optim_muon_flops(t->rows, t->cols, o->ns_steps);
}

double optim_flops_per_step(const optim_t *o, const gpt_t *m) {
    double flops = 0;
    for (int i = 0; i < m->n_tensors; i++)
        if (o->params[i].kind == OPTIM_MUON)
            flops += optim_muon_flops(m->tensors[i].rows, m->tensors[i].cols, o->ns_steps);
    return flops;
}

/* The settings optim_new takes from tr and m, checked. */
static int check_settings(const gpt_t *m, const spec_train_t *tr, char *err, size_t errlen) {
    if (m->cfg.n_embd <= 0)
        return util_errorf(err, errlen, "optim: model width %d is not positive", m->cfg.n_embd);
    if (check_lr("matrix_lr", tr->matrix_lr, err, errlen) ||
        check_lr("embedding_lr", tr->embedding_lr, err, errlen) ||
        check_lr("value_embedding_lr", tr->value_embedding_lr, err, errlen) ||
        check_lr("unembedding_lr", tr->unembedding_lr, err, errlen) ||
        check_lr("scalar_lr", tr->scalar_lr, err, errlen) ||
        check_beta("adam_beta1", tr->adam_beta1, err, errlen) ||
        check_beta("adam_beta2", tr->adam_beta2, err, errlen) ||
        check_beta("x0_beta1", tr->x0_beta1, err, errlen) ||
        check_beta("muon_beta2", tr->muon_beta2, err, errlen))
        return -1;
    /* The spec's rule (spec_validate): at least one polar-express step. */
    if (tr->ns_steps < 1 || tr->ns_steps > OPTIM_MAX_NS_STEPS)
        return util_errorf(err, errlen, "train.ns_steps: %d is not in 1..%d", tr->ns_steps,
                           OPTIM_MAX_NS_STEPS);
    return 0;
}

/* Each tensor's group settings into o->params, and the state and scratch
 * it needs counted (o->state_off, o->state_floats, o->work_floats). */
static int group_tensors(optim_t *o, const gpt_t *m, const spec_train_t *tr, char *err,
                         size_t errlen) {
    const double scale = pow(m->cfg.n_embd / 768.0, -0.5);
    int tied = 1;
    for (int i = 0; i < m->n_tensors; i++)
        if (m->tensors[i].kind == GPT_LM_HEAD) tied = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const gpt_tensor_t *t = &m->tensors[i];
        const optim_group_t *g = group_of(t->kind);
        if (!g)
            return util_errorf(err, errlen, "optim: %s has no optimizer group (kind %d)", t->name,
                               (int)t->kind);
        if (g->update == OPTIM_MUON &&
            (t->ndim != 2 || t->rows <= 0 || t->cols <= 0 || (size_t)t->rows * t->cols != t->numel))
            return util_errorf(err, errlen, "optim: %s is not a (rows, cols) matrix", t->name);
        optim_param_t *q = &o->params[i];
        q->kind = g->update;
        q->lr = group_lr(g, t, tr, scale, tied);
        q->wd = 0.0;
        o->state_off[i] = o->state_floats;
        if (g->update == OPTIM_MUON) {
            q->beta2 = tr->muon_beta2;
            q->beta1 = q->eps = 0.0;
            o->state_floats += t->numel + muon_second_floats(t->rows, t->cols);
            const size_t w = optim_muon_work_floats(t->rows, t->cols);
            if (w > o->work_floats) o->work_floats = w;
        } else {
            q->beta1 = train_double(tr, g->beta1);
            q->beta2 = tr->adam_beta2;
            q->eps = OPTIM_ADAM_EPS;
            q->skip = t->kind == GPT_RESID || t->kind == GPT_X0;
            o->state_floats += 2 * t->numel;
        }
    }
    return 0;
}

optim_t *optim_new(const gpt_t *m, const spec_train_t *tr, char *err, size_t errlen) {
    optim_t *o = NULL;
    if (check_settings(m, tr, err, errlen)) goto fail;
    o = calloc(1, sizeof *o);
    if (!o) goto oom;
    o->n = m->n_tensors;
    o->ns_steps = tr->ns_steps;
    o->muon_beta2 = (float)tr->muon_beta2;
    o->params = calloc((size_t)(o->n > 0 ? o->n : 1), sizeof *o->params);
    o->state_off = calloc((size_t)(o->n > 0 ? o->n : 1), sizeof *o->state_off);
    o->order = calloc((size_t)(o->n > 0 ? o->n : 1), sizeof *o->order);
    if (!o->params || !o->state_off || !o->order) goto oom;
    if (group_tensors(o, m, tr, err, errlen)) goto fail;
    if (o->state_floats) {
        o->state = util_calloc_huge(o->state_floats * sizeof *o->state);
        if (!o->state) goto oom;
    }
    /* Insertion sort by cost, descending; ties keep table order. */
    for (int i = 0; i < o->n; i++) {
        int j = i;
        const double ci = update_cost(o, m, i);
        for (; j > 0 && update_cost(o, m, o->order[j - 1]) < ci; j--) o->order[j] = o->order[j - 1];
        o->order[j] = i;
    }
    /* One scratch slice per thread of the team optim_step will run on. */
    o->work_threads = omp_get_max_threads();
    if (o->work_floats) {
        o->work = util_calloc_huge(o->work_floats * (size_t)o->work_threads * sizeof *o->work);
        if (!o->work) goto oom;
    }
    return o;

oom:
    snprintf(err, errlen, "optim: out of memory");
fail:
    optim_free(o);
    return NULL;
}

/* The tensors' updates are independent: the team takes them one at a time,
 * costliest first, each on one thread with its own scratch slice. Inside the
 * parallel region OpenBLAS runs single-threaded and the kernels' own loops
 * are not split again, so each small product runs without a fork and join,
 * and every tensor's result is what a one-thread run computes. */
void optim_step(optim_t *o, gpt_t *m, double lr_mult, double muon_momentum, double muon_wd) {
    int team = omp_get_max_threads();
    if (team > o->work_threads) team = o->work_threads;
#pragma omp parallel num_threads(team) if (team > 1)
    {
        threads_blas_single();
#pragma omp for schedule(dynamic, 1)
        for (int j = 0; j < o->n; j++) {
            const int i = o->order[j];
            const gpt_tensor_t *t = &m->tensors[i];
            optim_param_t *q = &o->params[i];
            float *p = m->params + t->offset;
            const float *g = m->grads + t->offset;
            float *st = o->state + o->state_off[i];
            const float lr = (float)(q->lr * lr_mult);
            if (q->kind == OPTIM_ADAMW && q->skip > 0) {
                q->skip--; /* optim.h: the scalars' first gradient is rounding noise */
            } else if (q->kind == OPTIM_ADAMW) {
                q->step++;
                optim_adamw_step(p, g, st, st + t->numel, t->numel, q->step, lr, (float)q->beta1,
                                 (float)q->beta2, (float)q->eps, (float)q->wd);
            } else {
                float *work = o->work + (size_t)omp_get_thread_num() * o->work_floats;
                optim_muon_step(p, g, st, st + t->numel, t->rows, t->cols, (float)muon_momentum, lr,
                                (float)muon_wd, o->muon_beta2, o->ns_steps, work);
            }
        }
    }
    gemm_bf16_weights_changed();
}

void optim_free(optim_t *o) {
    if (!o) return;
    free(o->params);
    free(o->state_off);
    free(o->order);
    free(o->state);
    free(o->work);
    free(o);
}

size_t optim_state_bytes(const optim_t *o) {
    return (o->state_floats + o->work_floats * (size_t)o->work_threads) * sizeof(float) +
           (size_t)o->n * (sizeof *o->params + sizeof *o->state_off + sizeof *o->order);
}

const optim_param_t *optim_param(const optim_t *o, int i) {
    if (i < 0 || i >= o->n) return NULL;
    return &o->params[i];
}
