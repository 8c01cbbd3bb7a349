/* ops.h - the layers of the GPT as forward/backward pairs over float arrays.
 *
 * Conventions: N = B*T rows; row-major; a weight W of a linear layer is
 * (out, in) as in PyTorch, so y = x W^T. Every backward ACCUMULATES into its
 * parameter gradients (+=), and into its input gradient only where the name
 * says so (`_acc`); otherwise it overwrites. Matrix products go through
 * cblas_sgemm. Nothing here allocates except where noted. */
#ifndef NIGHTSHIFT_OPS_H
#define NIGHTSHIFT_OPS_H

#include <stddef.h>

#include "engine/spec.h"

/* Reductions are split into this many fixed chunks, summed in order, so
 * results do not depend on the thread count. */
#define OPS_CHUNKS 64

/* out (n, D) = table[ids[i]] rows. */
void ops_embedding_forward(float *out, const float *table, const int *ids, int n, int D);
/* dtable (V, D) += dout rows scattered by ids; repeated ids sum. */
void ops_embedding_backward(float *dtable, const float *dout, const int *ids, int n, int D);

/* x (n) = rl * res + xl * x0: the block's input mix. This and
 * ops_mix_backward are the plain references of the fused mix + norm kernels
 * below (the model runs those). */
void ops_mix_forward(float *x, const float *res, const float *x0, float rl, float xl, size_t n);
/* x (n) += d. */
void ops_add(float *x, const float *d, size_t n);
/* Through the mix: *drl = sum dres*res, *dxl = sum dres*x0 (in double, in a
 * fixed order), then dx0 += xl * dres and dres *= rl. */
void ops_mix_backward(float *dres, float *dx0, const float *res, const float *x0, float rl,
                      float xl, size_t n, double *drl, double *dxl);

/* Fused, one pass over each row: res (N, D) += d when d is not NULL (the
 * previous block's output joining the stream), x (N, D) = rl * res + xl * x0
 * (the mix), then xn (N, D) = rmsnorm(x) with rstd (N). The same floats as
 * ops_add, ops_mix_forward then ops_rmsnorm_forward. */
void ops_mix_rmsnorm_forward(float *x, float *xn, float *rstd, float *res, const float *d,
                             const float *x0, float rl, float xl, int N, int D);
/* Fused, one pass over each row: x (N, D) += d, then xn (N, D) = rmsnorm(x)
 * with rstd (N). The same floats as ops_add then ops_rmsnorm_forward. */
void ops_add_rmsnorm_forward(float *x, float *xn, float *rstd, const float *d, int N, int D);
/* Fused backward of the mix and the norm: dres (N, D) += the rmsnorm pull of dxn (as
 * ops_rmsnorm_backward_acc with xn, rstd), then through the mix as
 * ops_mix_backward (dx0 += xl * dres, dres *= rl, *drl and *dxl the sums in
 * double, in a fixed order of rows). */
void ops_rmsnorm_mix_backward(float *dres, float *dx0, const float *dxn, const float *xn,
                              const float *rstd, const float *res, const float *x0, float rl,
                              float xl, int N, int D, double *drl, double *dxl);

/* out (N, D) = x / sqrt(mean(x^2) + eps), eps = FLT_EPSILON; rstd (N) keeps
 * 1/sqrt(...). out may alias x. */
void ops_rmsnorm_forward(float *out, float *rstd, const float *x, int N, int D);
/* dx (N, D) += rstd * (dout - out * mean(dout * out)), from the forward's out. */
void ops_rmsnorm_backward_acc(float *dx, const float *dout, const float *out, const float *rstd,
                              int N, int D);
/* The same, overwriting dx. */
void ops_rmsnorm_backward(float *dx, const float *dout, const float *out, const float *rstd, int N,
                          int D);

/* y (N, out) = x (N, in) W^T with W (out, in); x has row stride ldx >= in. */
void ops_linear_forward(float *y, const float *x, int ldx, const float *W, int N, int in, int out);
/* dW (out, in) += dy^T x. If dx is not NULL: dx (N, in; row stride ldx)
 * = dy W (beta 0) or += (beta 1). */
void ops_linear_backward(float *dx, int ldx, float beta, float *dW, const float *dy, const float *x,
                         const float *W, int N, int in, int out);

/* In place on x (N rows of nh heads of hd): rotate halves by position t = row % T.
 * cos, sin: (>= T, hd/2). This and ops_rope_backward are the plain references
 * of the fused RoPE + norm kernels below (the model runs those). */
void ops_rope_forward(float *x, const float *cos, const float *sin, int N, int T, int nh, int hd);
/* In place on dx: the transpose rotation. */
void ops_rope_backward(float *dx, const float *cos, const float *sin, int N, int T, int nh, int hd);

/* Fused, one pass over each head: RoPE (as ops_rope_forward) then the
 * per-head rmsnorm (as ops_rmsnorm_forward over N*nh rows of hd), from in
 * (N rows of nh*hd at row stride ld_in, e.g. the q or k columns of the fused
 * q, k, v projection; may be x itself with ld_in nh*hd) into x (N, nh*hd);
 * rstd (N*nh). The same floats as the two calls. */
void ops_rope_rmsnorm_forward(float *x, const float *in, int ld_in, float *rstd, const float *cos,
                              const float *sin, int N, int T, int nh, int hd);
/* Its backward: dx (N rows of nh*hd at row stride ld_dx) = the per-head
 * rmsnorm backward of dout (as ops_rmsnorm_backward with the forward's out
 * and rstd) followed by the inverse rotation (as ops_rope_backward). dx must
 * not alias dout. */
void ops_rmsnorm_rope_backward(float *dx, int ld_dx, const float *dout, const float *out,
                               const float *rstd, const float *cos, const float *sin, int N, int T,
                               int nh, int hd);

/* Causal attention with a window: key j visible from query i iff i-w <= j <= i.
 * The plain reference of attn.h's fused kernels (the model runs those).
 * q (N, H*hd), k and v (N, Hkv*hd), y (N, H*hd); query head h reads kv head
 * h / (H/Hkv). P (B, H, T, T) keeps the probabilities (zero outside the window). */
void ops_attention_forward(float *y, float *P, const float *q, const float *k, const float *v,
                           int B, int T, int H, int Hkv, int hd, int window);
/* dq = ..., dk, dv = ... (overwritten), from dy and the forward's P, q, k, v.
 * scratch: T*T floats. */
void ops_attention_backward(float *dq, float *dk, float *dv, const float *dy, const float *P,
                            const float *q, const float *k, const float *v, int B, int T, int H,
                            int Hkv, int hd, int window, float *scratch);

/* MLP activation: h (N, fc_rows) -> a (N, hidden). relu2: relu(h)^2; gelu:
 * exact erf form; swiglu/geglu: act(gate) * up with gate = h[:, :hidden] and
 * up = h[:, hidden:] (fc_rows = 2*hidden). */
void ops_mlp_act_forward(float *a, const float *h, int N, int hidden, spec_mlp_kind kind);
/* dh (N, fc_rows) = da pulled back through the activation at h. Without a
 * gate (fc_rows == hidden) dh may be da itself. */
void ops_mlp_act_backward(float *dh, const float *da, const float *h, int N, int hidden,
                          spec_mlp_kind kind);

/* In place: logits (N, V) -> c*tanh(logits/c) when c > 0; then per row the
 * log-sum-exp (lse, N) and the loss in nats (losses, N; 0 where target < 0).
 * Returns the summed loss over rows with target >= 0; *count gets their number. */
double ops_softcap_ce_forward(float *logits, float *lse, float *losses, const int *targets, int N,
                              int V, float softcap, int *count);
/* Rows [i0, i1) of ops_softcap_ce_forward, with logits pointing at row i0
 * (lse, losses and targets indexed by row): returns their summed loss and
 * adds their counted rows to *count. For callers that compute the logits a
 * few rows at a time. */
double ops_softcap_ce_rows(float *logits, float *lse, float *losses, const int *targets, int i0,
                           int i1, int V, float softcap, int *count);
/* dlogits (N, V) = scale * d(sum of losses)/d(pre-cap logits), from the
 * forward's capped logits and lse. Rows with target < 0 get 0. */
void ops_softcap_ce_backward(float *dlogits, const float *logits, const float *lse,
                             const int *targets, int N, int V, float softcap, float scale);

#endif
