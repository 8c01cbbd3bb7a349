/* ops.c - forward/backward kernels of the GPT's layers (see ops.h for the
 * conventions). Matrix products use cblas_sgemm; everything else is plain
 * loops written to be read top to bottom. Sums that decide the loss are
 * accumulated in double. */
#include "engine/ops.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "engine/fastmath.h"
#include "engine/prof.h"

/* Loops over fewer floats than this stay on one thread: waking the team costs
 * more than it saves. */
#define OPS_PAR(floats) ((floats) >= 16384)

/* ---------------------------------------------------------------- embedding */

void ops_embedding_forward(float *out, const float *table, const int *ids, int n, int D) {
#pragma omp parallel for schedule(static) if (OPS_PAR((size_t)n * D))
    for (int i = 0; i < n; i++)
        memcpy(out + (size_t)i * D, table + (size_t)ids[i] * D, D * sizeof(float));
}

void ops_embedding_backward(float *dtable, const float *dout, const int *ids, int n, int D) {
    /* Threads own column slices, so repeated ids never race; each column
     * still sums its rows in order. */
    int slices = D >= 64 ? D / 16 : 1;
#pragma omp parallel for schedule(static) if (OPS_PAR((size_t)n * D))
    for (int sl = 0; sl < slices; sl++) {
        int j0 = (int)((long)D * sl / slices), j1 = (int)((long)D * (sl + 1) / slices);
        for (int i = 0; i < n; i++) {
            float *row = dtable + (size_t)ids[i] * D;
            const float *d = dout + (size_t)i * D;
            for (int j = j0; j < j1; j++) row[j] += d[j];
        }
    }
}

/* --------------------------------------------------------- residual stream */

void ops_mix_forward(float *x, const float *res, const float *x0, float rl, float xl, size_t n) {
#pragma omp parallel for schedule(static) if (OPS_PAR(n))
    for (size_t i = 0; i < n; i++) x[i] = rl * res[i] + xl * x0[i];
}

void ops_add(float *x, const float *d, size_t n) {
#pragma omp parallel for schedule(static) if (OPS_PAR(n))
    for (size_t i = 0; i < n; i++) x[i] += d[i];
}

void ops_mix_backward(float *dres, float *dx0, const float *res, const float *x0, float rl,
                      float xl, size_t n, double *drl, double *dxl) {
    double pr[OPS_CHUNKS], px[OPS_CHUNKS];
#pragma omp parallel for schedule(static) if (OPS_PAR(n))
    for (int c = 0; c < OPS_CHUNKS; c++) {
        double a = 0.0, b = 0.0;
        for (size_t i = n * c / OPS_CHUNKS; i < n * (c + 1) / OPS_CHUNKS; i++) {
            a += (double)dres[i] * res[i];
            b += (double)dres[i] * x0[i];
            dx0[i] += xl * dres[i];
            dres[i] *= rl;
        }
        pr[c] = a;
        px[c] = b;
    }
    *drl = *dxl = 0.0;
    for (int c = 0; c < OPS_CHUNKS; c++) {
        *drl += pr[c];
        *dxl += px[c];
    }
}

/* ------------------------------------------------------------------ rmsnorm */

void ops_rmsnorm_forward(float *out, float *rstd, const float *x, int N, int D) {
#pragma omp parallel for schedule(static) if (OPS_PAR((size_t)N * D))
    for (int i = 0; i < N; i++) {
        const float *xi = x + (size_t)i * D;
        float *oi = out + (size_t)i * D;
        double ss = dot_f64(xi, xi, D);
        float r = (float)(1.0 / sqrt(ss / D + FLT_EPSILON));
        for (int j = 0; j < D; j++) oi[j] = xi[j] * r;
        rstd[i] = r;
    }
}

/* dx = (acc ? dx : 0) + rstd * (dout - out * mean(dout * out)). */
static void rmsnorm_backward(float *dx, const float *dout, const float *out, const float *rstd,
                             int N, int D, int acc) {
#pragma omp parallel for schedule(static) if (OPS_PAR((size_t)N * D))
    for (int i = 0; i < N; i++) {
        const float *dy = dout + (size_t)i * D, *y = out + (size_t)i * D;
        float *dxi = dx + (size_t)i * D;
        double dot = dot_f64(dy, y, D);
        float mean = (float)(dot / D), r = rstd[i];
        if (acc)
            for (int j = 0; j < D; j++) dxi[j] += r * (dy[j] - y[j] * mean);
        else
            for (int j = 0; j < D; j++) dxi[j] = r * (dy[j] - y[j] * mean);
    }
}

void ops_rmsnorm_backward_acc(float *dx, const float *dout, const float *out, const float *rstd,
                              int N, int D) {
    rmsnorm_backward(dx, dout, out, rstd, N, D, 1);
}

void ops_rmsnorm_backward(float *dx, const float *dout, const float *out, const float *rstd, int N,
                          int D) {
    rmsnorm_backward(dx, dout, out, rstd, N, D, 0);
}

/* ------------------------------------------------------- fused norm + mix */

void ops_mix_rmsnorm_forward(float *x, float *xn, float *rstd, float *res, const float *d,
                             const float *x0, float rl, float xl, int N, int D) {
#pragma omp parallel for schedule(static) if (OPS_PAR((size_t)N * D))
    for (int i = 0; i < N; i++) {
        const size_t o = (size_t)i * D;
        float *xi = x + o, *oi = xn + o, *ri = res + o;
        if (d)
            for (int j = 0; j < D; j++) ri[j] += d[o + j];
        for (int j = 0; j < D; j++) xi[j] = rl * ri[j] + xl * x0[o + j];
        double ss = dot_f64(xi, xi, D);
        float r = (float)(1.0 / sqrt(ss / D + FLT_EPSILON));
        for (int j = 0; j < D; j++) oi[j] = xi[j] * r;
        rstd[i] = r;
    }
}

void ops_add_rmsnorm_forward(float *x, float *xn, float *rstd, const float *d, int N, int D) {
#pragma omp parallel for schedule(static) if (OPS_PAR((size_t)N * D))
    for (int i = 0; i < N; i++) {
        const size_t o = (size_t)i * D;
        float *xi = x + o, *oi = xn + o;
        for (int j = 0; j < D; j++) xi[j] += d[o + j];
        double ss = dot_f64(xi, xi, D);
        float r = (float)(1.0 / sqrt(ss / D + FLT_EPSILON));
        for (int j = 0; j < D; j++) oi[j] = xi[j] * r;
        rstd[i] = r;
    }
}

void ops_rmsnorm_mix_backward(float *dres, float *dx0, const float *dxn, const float *xn,
                              const float *rstd, const float *res, const float *x0, float rl,
                              float xl, int N, int D, double *drl, double *dxl) {
    double pr[OPS_CHUNKS], px[OPS_CHUNKS];
#pragma omp parallel for schedule(static) if (OPS_PAR((size_t)N * D))
    for (int c = 0; c < OPS_CHUNKS; c++) {
        double a = 0.0, b = 0.0;
        for (int i = (int)((long)N * c / OPS_CHUNKS); i < (int)((long)N * (c + 1) / OPS_CHUNKS);
             i++) {
            const size_t o = (size_t)i * D;
            const float *dy = dxn + o, *y = xn + o;
            float *d = dres + o, *d0 = dx0 + o;
            float mean = (float)(dot_f64(dy, y, D) / D), r = rstd[i];
            for (int j = 0; j < D; j++) d[j] += r * (dy[j] - y[j] * mean);
            a += dot_f64(d, res + o, D);
            b += dot_f64(d, x0 + o, D);
            for (int j = 0; j < D; j++) {
                d0[j] += xl * d[j];
                d[j] *= rl;
            }
        }
        pr[c] = a;
        px[c] = b;
    }
    *drl = *dxl = 0.0;
    for (int c = 0; c < OPS_CHUNKS; c++) {
        *drl += pr[c];
        *dxl += px[c];
    }
}

/* ------------------------------------------------------------------- linear */

void ops_linear_forward(float *y, const float *x, int ldx, const float *W, int N, int in, int out) {
    double t0 = prof_begin();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, out, in, 1.0f, x, ldx, W, in, 0.0f, y,
                out);
    prof_end(PROF_MATMUL, t0);
}

void ops_linear_backward(float *dx, int ldx, float beta, float *dW, const float *dy, const float *x,
                         const float *W, int N, int in, int out) {
    double t0 = prof_begin();
    /* dW (out, in) += dy^T (out, N) x (N, in) */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, N, 1.0f, dy, out, x, ldx, 1.0f,
                dW, in);
    /* dx (N, in) = dy (N, out) W (out, in) */
    if (dx)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, in, out, 1.0f, dy, out, W, in,
                    beta, dx, ldx);
    prof_end(PROF_MATMUL, t0);
}

/* --------------------------------------------------------------------- rope */

/* Halves convention: x1 = x[:hd/2], x2 = x[hd/2:];
 * y1 = x1*cos + x2*sin, y2 = x2*cos - x1*sin. */
void ops_rope_forward(float *x, const float *cos, const float *sin, int N, int T, int nh, int hd) {
    int half = hd / 2;
#pragma omp parallel for schedule(static) if (OPS_PAR((size_t)N * nh * hd))
    for (int i = 0; i < N; i++) {
        const float *c = cos + (size_t)(i % T) * half, *s = sin + (size_t)(i % T) * half;
        for (int h = 0; h < nh; h++) {
            float *x1 = x + ((size_t)i * nh + h) * hd, *x2 = x1 + half;
            for (int j = 0; j < half; j++) {
                float a = x1[j], b = x2[j];
                x1[j] = a * c[j] + b * s[j];
                x2[j] = b * c[j] - a * s[j];
            }
        }
    }
}

void ops_rope_backward(float *dx, const float *cos, const float *sin, int N, int T, int nh,
                       int hd) {
    int half = hd / 2;
#pragma omp parallel for schedule(static) if (OPS_PAR((size_t)N * nh * hd))
    for (int i = 0; i < N; i++) {
        const float *c = cos + (size_t)(i % T) * half, *s = sin + (size_t)(i % T) * half;
        for (int h = 0; h < nh; h++) {
            float *d1 = dx + ((size_t)i * nh + h) * hd, *d2 = d1 + half;
            for (int j = 0; j < half; j++) {
                float a = d1[j], b = d2[j];
                d1[j] = a * c[j] - b * s[j];
                d2[j] = a * s[j] + b * c[j];
            }
        }
    }
}

/* Rows of a strided q/k slice asked for this many rows ahead of their use:
 * its rows are ld apart in the fused q, k, v buffer (or its gradient), a
 * pattern the hardware prefetchers follow late, so without it a row's first
 * touch waits on L3. */
#define OPS_AHEAD 8

/* The nf floats at x, asked for ahead of their use (write: to be written). */
static inline void prefetch_floats(const float *x, int nf, int write) {
    for (int d = 0; d < nf; d += 16) {
        if (write)
            __builtin_prefetch(x + d, 1);
        else
            __builtin_prefetch(x + d, 0);
    }
}

/* Heads per group of ops_rope_rmsnorm_forward: their sums of squares are
 * taken first, then their square roots, which do not wait on one another. */
#define OPS_HEADS 8

/* RoPE then the head's rmsnorm, a row's heads at a time while they are in
 * L1. */
void ops_rope_rmsnorm_forward(float *x, const float *in, int ld_in, float *rstd, const float *cos,
                              const float *sin, int N, int T, int nh, int hd) {
    int half = hd / 2;
#pragma omp parallel for schedule(static) if (OPS_PAR((size_t)N * nh * hd))
    for (int i = 0; i < N; i++) {
        const float *c = cos + (size_t)(i % T) * half, *s = sin + (size_t)(i % T) * half;
        if (i + OPS_AHEAD < N) prefetch_floats(in + (size_t)(i + OPS_AHEAD) * ld_in, nh * hd, 0);
        for (int h0 = 0; h0 < nh; h0 += OPS_HEADS) {
            const int h1 = nh - h0 < OPS_HEADS ? nh : h0 + OPS_HEADS;
            double ss[OPS_HEADS];
            for (int h = h0; h < h1; h++) {
                const float *in1 = in + (size_t)i * ld_in + (size_t)h * hd, *in2 = in1 + half;
                float *x1 = x + ((size_t)i * nh + h) * hd, *x2 = x1 + half;
                for (int j = 0; j < half; j++) {
                    float a = in1[j], b = in2[j];
                    x1[j] = a * c[j] + b * s[j];
                    x2[j] = b * c[j] - a * s[j];
                }
                ss[h - h0] = dot_f64(x1, x1, hd);
            }
            for (int h = h0; h < h1; h++) {
                float *x1 = x + ((size_t)i * nh + h) * hd;
                float r = (float)(1.0 / sqrt(ss[h - h0] / hd + FLT_EPSILON));
                for (int j = 0; j < hd; j++) x1[j] *= r;
                rstd[(size_t)i * nh + h] = r;
            }
        }
    }
}

void ops_rmsnorm_rope_backward(float *dx, int ld_dx, const float *dout, const float *out,
                               const float *rstd, const float *cos, const float *sin, int N, int T,
                               int nh, int hd) {
    int half = hd / 2;
#pragma omp parallel for schedule(static) if (OPS_PAR((size_t)N * nh * hd))
    for (int i = 0; i < N; i++) {
        const float *c = cos + (size_t)(i % T) * half, *s = sin + (size_t)(i % T) * half;
        if (i + OPS_AHEAD < N) prefetch_floats(dx + (size_t)(i + OPS_AHEAD) * ld_dx, nh * hd, 1);
        for (int h = 0; h < nh; h++) {
            const size_t o = ((size_t)i * nh + h) * hd;
            const float *dy = dout + o, *y = out + o;
            float *d1 = dx + (size_t)i * ld_dx + (size_t)h * hd, *d2 = d1 + half;
            float mean = (float)(dot_f64(dy, y, hd) / hd), r = rstd[(size_t)i * nh + h];
            for (int j = 0; j < hd; j++) d1[j] = r * (dy[j] - y[j] * mean);
            for (int j = 0; j < half; j++) {
                float a = d1[j], b = d2[j];
                d1[j] = a * c[j] - b * s[j];
                d2[j] = a * s[j] + b * c[j];
            }
        }
    }
}

/* ---------------------------------------------------------------- attention */

/* First key visible from query i. */
static inline int window_start(int i, int window) {
    return i - window > 0 ? i - window : 0;
}

void ops_attention_forward(float *y, float *P, const float *q, const float *k, const float *v,
                           int B, int T, int H, int Hkv, int hd, int window) {
    int group = H / Hkv, qs = H * hd, ks = Hkv * hd;
    float scale = 1.0f / sqrtf((float)hd);
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < H; h++) {
            const float *qb = q + (size_t)b * T * qs + h * hd;
            const float *kb = k + (size_t)b * T * ks + (h / group) * hd;
            const float *vb = v + (size_t)b * T * ks + (h / group) * hd;
            float *Pbh = P + ((size_t)b * H + h) * T * T;
            /* scores (T, T) = scale * Q K^T; the upper triangle is masked below */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, scale, qb, qs, kb, ks,
                        0.0f, Pbh, T);
            for (int i = 0; i < T; i++) {
                float *row = Pbh + (size_t)i * T;
                int j0 = window_start(i, window);
                float mx = -INFINITY;
                for (int j = j0; j <= i; j++) mx = row[j] > mx ? row[j] : mx;
                double sum = 0.0;
                for (int j = j0; j <= i; j++) {
                    row[j] = expf(row[j] - mx);
                    sum += row[j];
                }
                float inv = (float)(1.0 / sum);
                for (int j = 0; j < j0; j++) row[j] = 0.0f;
                for (int j = j0; j <= i; j++) row[j] *= inv;
                for (int j = i + 1; j < T; j++) row[j] = 0.0f;
            }
            /* y (T, hd) = P V */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, 1.0f, Pbh, T, vb, ks,
                        0.0f, y + (size_t)b * T * qs + h * hd, qs);
        }
    }
}

void ops_attention_backward(float *dq, float *dk, float *dv, const float *dy, const float *P,
                            const float *q, const float *k, const float *v, int B, int T, int H,
                            int Hkv, int hd, int window, float *scratch) {
    int group = H / Hkv, qs = H * hd, ks = Hkv * hd;
    float scale = 1.0f / sqrtf((float)hd);
    memset(dk, 0, (size_t)B * T * ks * sizeof(float));
    memset(dv, 0, (size_t)B * T * ks * sizeof(float));
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < H; h++) {
            size_t qo = (size_t)b * T * qs + h * hd, ko = (size_t)b * T * ks + (h / group) * hd;
            const float *Pbh = P + ((size_t)b * H + h) * T * T;
            float *dS = scratch;
            /* dP (T, T) = dY V^T */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, 1.0f, dy + qo, qs,
                        v + ko, ks, 0.0f, dS, T);
            /* dV += P^T dY */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, 1.0f, Pbh, T, dy + qo,
                        qs, 1.0f, dv + ko, ks);
            /* dS = P * (dP - sum_j P dP), zero outside the window */
            for (int i = 0; i < T; i++) {
                const float *p = Pbh + (size_t)i * T;
                float *d = dS + (size_t)i * T;
                int j0 = window_start(i, window);
                double dot = 0.0;
                for (int j = j0; j <= i; j++) dot += (double)p[j] * d[j];
                for (int j = 0; j < j0; j++) d[j] = 0.0f;
                for (int j = j0; j <= i; j++) d[j] = p[j] * (d[j] - (float)dot);
                for (int j = i + 1; j < T; j++) d[j] = 0.0f;
            }
            /* dQ = scale dS K;  dK += scale dS^T Q */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, scale, dS, T, k + ko,
                        ks, 0.0f, dq + qo, qs);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, scale, dS, T, q + qo, qs,
                        1.0f, dk + ko, ks);
        }
    }
}

/* ---------------------------------------------------------------------- mlp */

static inline float gelu(float x) {
    return 0.5f * x * (1.0f + erff(x * (float)M_SQRT1_2));
}

static inline float gelu_grad(float x) {
    float cdf = 0.5f * (1.0f + erff(x * (float)M_SQRT1_2));
    float pdf = expf(-0.5f * x * x) * (float)(0.5 * M_2_SQRTPI * M_SQRT1_2); /* 1/sqrt(2 pi) */
    return cdf + x * pdf;
}

static inline float sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}

void ops_mlp_act_forward(float *a, const float *h, int N, int hidden, spec_mlp_kind kind) {
#pragma omp parallel for schedule(static) if (OPS_PAR((size_t)N * hidden))
    for (int i = 0; i < N; i++) {
        float *ai = a + (size_t)i * hidden;
        switch (kind) {
        case MLP_RELU2: {
            const float *hi = h + (size_t)i * hidden;
            for (int j = 0; j < hidden; j++) ai[j] = hi[j] > 0.0f ? hi[j] * hi[j] : 0.0f;
            break;
        }
        case MLP_GELU: {
            const float *hi = h + (size_t)i * hidden;
            for (int j = 0; j < hidden; j++) ai[j] = gelu(hi[j]);
            break;
        }
        case MLP_SWIGLU:
        case MLP_GEGLU: {
            const float *gate = h + (size_t)i * 2 * hidden, *up = gate + hidden;
            for (int j = 0; j < hidden; j++) {
                float g = kind == MLP_SWIGLU ? gate[j] * sigmoid(gate[j]) : gelu(gate[j]);
                ai[j] = g * up[j];
            }
            break;
        }
        }
    }
}

void ops_mlp_act_backward(float *dh, const float *da, const float *h, int N, int hidden,
                          spec_mlp_kind kind) {
#pragma omp parallel for schedule(static) if (OPS_PAR((size_t)N * hidden))
    for (int i = 0; i < N; i++) {
        const float *dai = da + (size_t)i * hidden;
        switch (kind) {
        case MLP_RELU2: {
            const float *hi = h + (size_t)i * hidden;
            float *dhi = dh + (size_t)i * hidden;
            for (int j = 0; j < hidden; j++) dhi[j] = hi[j] > 0.0f ? 2.0f * hi[j] * dai[j] : 0.0f;
            break;
        }
        case MLP_GELU: {
            const float *hi = h + (size_t)i * hidden;
            float *dhi = dh + (size_t)i * hidden;
            for (int j = 0; j < hidden; j++) dhi[j] = gelu_grad(hi[j]) * dai[j];
            break;
        }
        case MLP_SWIGLU:
        case MLP_GEGLU: {
            const float *gate = h + (size_t)i * 2 * hidden, *up = gate + hidden;
            float *dgate = dh + (size_t)i * 2 * hidden, *dup = dgate + hidden;
            for (int j = 0; j < hidden; j++) {
                float x = gate[j], g, dg;
                if (kind == MLP_SWIGLU) {
                    float s = sigmoid(x);
                    g = x * s;
                    dg = s * (1.0f + x * (1.0f - s));
                } else {
                    g = gelu(x);
                    dg = gelu_grad(x);
                }
                dup[j] = dai[j] * g;
                dgate[j] = dai[j] * up[j] * dg;
            }
            break;
        }
        }
    }
}

/* ---------------------------------------------------- softcap + cross-entropy */

double ops_softcap_ce_rows(float *logits, float *lse, float *losses, const int *targets, int i0,
                           int i1, int V, float softcap, int *n) {
    double total = 0.0;
    for (int i = i0; i < i1; i++) {
        float *z = logits + (size_t)(i - i0) * V;
        if (softcap > 0.0f) {
            const float inv = 1.0f / softcap;
            for (int j = 0; j < V; j++) z[j] = softcap * fast_tanhf(z[j] * inv);
        }
        float mx = max_f32(z, V);
        /* float exponentials (z - mx <= 0 cannot overflow), double sum */
        double sum = sum_exp_f64(z, mx, V);
        double l = mx + log(sum);
        lse[i] = (float)l;
        losses[i] = 0.0f;
        if (targets && targets[i] >= 0) {
            double li = l - z[targets[i]];
            losses[i] = (float)li;
            total += li;
            (*n)++;
        }
    }
    return total;
}

double ops_softcap_ce_forward(float *logits, float *lse, float *losses, const int *targets, int N,
                              int V, float softcap, int *count) {
    /* A fixed number of row chunks whatever the thread count, summed in
     * order: the loss does not depend on how many threads ran. */
    double part[OPS_CHUNKS];
    int cnt[OPS_CHUNKS];
#pragma omp parallel for schedule(static) if (OPS_PAR((size_t)N * V))
    for (int c = 0; c < OPS_CHUNKS; c++) {
        cnt[c] = 0;
        const int i0 = (int)((long)N * c / OPS_CHUNKS), i1 = (int)((long)N * (c + 1) / OPS_CHUNKS);
        part[c] = ops_softcap_ce_rows(logits + (size_t)i0 * V, lse, losses, targets, i0, i1, V,
                                      softcap, &cnt[c]);
    }
    double total = 0.0;
    int n = 0;
    for (int c = 0; c < OPS_CHUNKS; c++) {
        total += part[c];
        n += cnt[c];
    }
    if (count) *count = n;
    return total;
}

void ops_softcap_ce_backward(float *dlogits, const float *logits, const float *lse,
                             const int *targets, int N, int V, float softcap, float scale) {
#pragma omp parallel for schedule(static) if (OPS_PAR((size_t)N * V))
    for (int i = 0; i < N; i++) {
        float *d = dlogits + (size_t)i * V;
        const float *z = logits + (size_t)i * V;
        if (targets[i] < 0) {
            memset(d, 0, V * sizeof(float));
            continue;
        }
        for (int j = 0; j < V; j++) d[j] = scale * fast_expf(z[j] - lse[i]);
        d[targets[i]] -= scale;
        /* z = c tanh(l/c)  =>  dz/dl = 1 - (z/c)^2 */
        if (softcap > 0.0f)
            for (int j = 0; j < V; j++) {
                float t = z[j] / softcap;
                d[j] *= 1.0f - t * t;
            }
    }
}
