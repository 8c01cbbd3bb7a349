/* gemm_bf16.h - the linear layers' products with bfloat16 operands and
 * float32 accumulation, as PyTorch's CPU bf16 autocast multiplies.
 *
 * The same contracts as gemm_linear_forward/backward (gemm.h), which call
 * these when the precision is GEMM_BF16: every operand of a product (the
 * weight, the activation, the gradient flowing back) is rounded to bfloat16
 * (round to nearest even, as vcvtneps2bf16 does) as it is packed, pairs of
 * them are multiplied and summed into float32 accumulators by vdpbf16ps
 * (AVX512_BF16), and the results stay float32 (the caller's arrays, the
 * master weights and their gradients, are float32 throughout). The weights
 * change only in the optimiser's step, so rounding them at every pack gives
 * the values rounding them once a step would (and the weights' cache below
 * packs them once a step). Each output float is summed by
 * one thread over the depth in a fixed order (in pairs, p = 0, 1, ...), so
 * results do not depend on the thread count. */
#ifndef NIGHTSHIFT_GEMM_BF16_H
#define NIGHTSHIFT_GEMM_BF16_H

#include <stddef.h>

/* Whether this CPU runs the kernels: AVX512F and AVX512_BF16 (the OS saving
 * the AVX-512 registers included). */
int gemm_bf16_cpu(void);

/* Whether this CPU has AMX-BF16 tiles and Linux let the process use them
 * (asked once, with arch_prctl). */
int gemm_bf16_amx_cpu(void);

/* Whether the products run on AMX tiles where a product's width is a whole
 * number of 16-column tiles (the rest on vdpbf16ps): where the CPU has them,
 * unless turned off with gemm_bf16_set_amx(0) (tests and benchmarks;
 * process-wide, not thread-safe). */
int gemm_bf16_uses_amx(void);
void gemm_bf16_set_amx(int on);

/* y (N, out) = bf16(x) (N, in; row stride ldx) bf16(W)^T with W (out, in). */
void gemm_bf16_forward(float *y, const float *x, int ldx, const float *W, int N, int in, int out);

/* dW (out, in) += bf16(dy)^T bf16(x) with dy (N, out), x (N, in; row stride
 * ldx). If dx is not NULL: dx (N, in; row stride ldx) = bf16(dy) bf16(W)
 * (beta 0) or += (beta 1). */
void gemm_bf16_backward(float *dx, int ldx, float beta, float *dW, const float *dy, const float *x,
                        const float *W, int N, int in, int out);

/* The weights' cache. A model's weights change only in the optimiser's
 * step, yet each product rounded and packed its W again (the forward's
 * transposed panels, dx's paired rows). Once the caller names the block its
 * model's weights live in (lo, n floats), a W inside it is rounded and
 * packed once and reused until gemm_bf16_weights_changed, which whatever
 * writes those weights must call after writing them (optim_step does);
 * products of any other W pack it at every call. lo NULL names no block.
 * Either call drops what was packed (the cache owns it). Process-wide, from
 * the thread that drives the products. */
void gemm_bf16_cache_weights(const float *lo, size_t n);
void gemm_bf16_weights_changed(void);

/* f rounded to bfloat16 as the kernels round it (nearest, ties to even;
 * NaN stays NaN), widened back to float: the reference for tests. */
float gemm_bf16_round(float f);

#endif
