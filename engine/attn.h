/* attn.h - fused causal attention: flash-style tiles, a stored log-sum-exp.
 *
 * The same function as ops_attention_forward/backward (ops.h, the plain
 * reference the tests compare against): key j is visible from query i iff
 * i-w <= j <= i; q (N, H*hd), k and v (N, Hkv*hd) with N = B*T rows; query
 * head h reads kv head h / (H/Hkv). No (T, T) matrix is ever stored: the
 * forward keeps one log-sum-exp per query row and head, and the backward
 * recomputes the probabilities a query tile at a time. Keys outside every
 * row's window of a tile are skipped. Products run through gemm.c's
 * register-tiled kernel where the CPU has one (gemm_current; hd a multiple
 * of 8), else through BLAS; in bf16 where the run's precision is bf16 and
 * hd a multiple of 32 (attn_bf16.c: bf16 operands, float32 accumulation, the
 * softmax in float32). Work is spread over the OpenMP team by (batch,
 * kv head) (the BLAS path's forward: by batch, head and query tile); each
 * output float is summed by one thread in a fixed order, so results do not
 * depend on the thread count. */
#ifndef NIGHTSHIFT_ATTN_H
#define NIGHTSHIFT_ATTN_H

#include <stddef.h>

/* Scratch floats attn_forward/attn_backward need for head_dim hd, sequences
 * of up to T tokens and up to `threads` OpenMP threads. */
size_t attn_work_floats(int hd, int T, int threads);

/* y (N, H*hd) = softmax(scale q k^T, masked) v with scale = 1/sqrt(hd);
 * lse (B, H, T) = the log-sum-exp of each query row's scaled scores. work:
 * attn_work_floats(hd, T, threads) floats; at most `threads` threads run. */
void attn_forward(float *y, float *lse, const float *q, const float *k, const float *v, int B,
                  int T, int H, int Hkv, int hd, int window, float *work, int threads);

/* dq (N, H*hd), dk and dv (N, Hkv*hd), overwritten, from dy and the forward's
 * y and lse. */
void attn_backward(float *dq, float *dk, float *dv, const float *dy, const float *y,
                   const float *lse, const float *q, const float *k, const float *v, int B, int T,
                   int H, int Hkv, int hd, int window, float *work, int threads);

#endif
