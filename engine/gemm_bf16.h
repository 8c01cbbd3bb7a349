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

/* Inputs kept for the backward: while on, each forward also writes the
 * paired form of its x that the backward of the same (x, ldx, N, in, out)
 * reads instead of pairing x again (x must not change in between). Every
 * call, on or off, drops what was kept. Process-wide, from the thread that
 * drives the products (gpt_forward turns it on for a training pass). */
void gemm_bf16_keep_inputs(int on);

/* The floats the bf16 products of a model allocate at most, training on N
 * rows: the kept inputs of its n linear layers (in, out), the weights'
 * cache, and the scratch of the largest product (the buffers are reused).
 * For the memory a run needs (cost.c). */
size_t gemm_bf16_memory_floats(int N, const int (*linears)[2], int n);

/* The pieces the fused attention's bf16 path (attn_bf16.c) lays its own
 * products out with. A pair is two bf16 in one 32-bit slot of a float
 * array, the first in the low half.
 *
 * gemm_bf16_rows: C rows [m0, m1) over n columns (n a multiple of 16)
 * (+)= A B over K2 pairs of depth, A's pair (i, p) at A[i*lda + p], B's
 * pair row p (n lanes) at B + p*ldb. Whole 16-row tiles run on AMX where
 * gemm_bf16_uses_amx and K2 is a multiple of 16, the rest on vdpbf16ps; on
 * the calling thread, each output summed over p = 0, 1, ... in order.
 * acc_in: add to C instead of overwriting it. */
void gemm_bf16_rows(int m0, int m1, int n, int K2, const float *A, ptrdiff_t lda, const float *B,
                    ptrdiff_t ldb, float *C, ptrdiff_t ldc, int acc_in);

/* Rows [r0, r1) of src (row stride lds, K floats each) rounded into dst's
 * rows (ldd floats = 2*ldd bf16 each, ldd a multiple of 8 and >= K/2):
 * pairs along the row, zero from K to the row's end. */
void gemm_bf16_round_rows(float *dst, ptrdiff_t ldd, const float *src, ptrdiff_t lds, int r0,
                          int r1, int K);

/* Pair rows [p0, p1) of dst (ldd floats apart): lane c of pair row p is
 * (src[2p][c], src[2p+1][c]) rounded, src K rows of n floats (row stride
 * lds), zero past row K - 1 and in lanes n to n rounded up to 16. */
void gemm_bf16_pair_rows(float *dst, ptrdiff_t ldd, const float *src, ptrdiff_t lds, int K, int n,
                         int p0, int p1);

/* Rows [c0, c1) of dst (ldd floats apart; c0 a multiple of 16): row c is
 * column c of src (K rows, row stride lds) as pairs (src[2p][c],
 * src[2p+1][c]) rounded, K/2 rounded up to 16 of them, zero past row K - 1.
 * Where rows is not NULL, src's rows are also rounded into it as
 * gemm_bf16_round_rows rounds them (row r at rows + r*ldr floats; columns
 * c0 to c0 + c1 - c0 rounded up to 16 written, zero from c1). */
void gemm_bf16_pair_cols(float *dst, ptrdiff_t ldd, const float *src, ptrdiff_t lds, int K, int c0,
                         int c1, float *rows, ptrdiff_t ldr);

/* f rounded to bfloat16 as the kernels round it (nearest, ties to even;
 * NaN stays NaN), widened back to float: the reference for tests. */
float gemm_bf16_round(float f);

#endif
