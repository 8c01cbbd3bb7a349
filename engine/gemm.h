/* gemm.h - the linear layers' matrix products without BLAS's packing.
 *
 * The same contracts as ops_linear_forward/backward (ops.h), which stay the
 * reference and the fallback. A small model's products have one long side
 * (N = B*T rows) and two short ones (n_embd, hidden, the fused q/k/v width),
 * where OpenBLAS spends much of its time packing both operands, clearing C
 * for beta = 0 and synchronising its threads. Here one register-tiled kernel
 * (MR rows by up to NV vectors of columns, A broadcast straight from memory)
 * streams the long side; only the forward's weight is repacked (transposed,
 * out x in floats). Rows are split over the OpenMP team; each output float is
 * summed by one thread in a fixed order, so results do not depend on the
 * thread count. The kernel is picked at run time by CPU feature (AVX-512F,
 * else AVX2+FMA) unless NIGHTSHIFT_ISA forces a path; blocked as Goto's
 * GEMM is, it takes products of any size. Shapes it does not take (a result
 * width that is not a whole number of vectors) and the generic path go to
 * BLAS, split over the team the same way with one single-threaded BLAS call
 * per thread. */
#ifndef NIGHTSHIFT_GEMM_H
#define NIGHTSHIFT_GEMM_H

#include <stddef.h>

/* The kernel path: the register-tiled kernels of one instruction set, or
 * generic (every product through BLAS, the attention on its BLAS path: for
 * CPUs without AVX2, and a reference for the others). */
typedef enum { GEMM_AUTO, GEMM_GENERIC, GEMM_AVX2, GEMM_AVX512 } gemm_isa;

/* Use `isa` from now on (GEMM_AUTO: the widest this CPU has). Returns 0, or
 * -1 (and changes nothing) when the CPU lacks it. For tests and benchmarks;
 * the process-wide choice is not thread-safe. */
int gemm_select(gemm_isa isa);

/* The path NIGHTSHIFT_ISA names ("avx512", "avx2", "generic"; unset, empty
 * or "auto": the widest this CPU has), selected. Returns 0, or -1 with err
 * when the value is not a path or the CPU lacks it (running its kernels
 * would die of SIGILL). */
int gemm_select_env(char *err, size_t errlen);

/* The kernel in use (never GEMM_AUTO); before any selection, NIGHTSHIFT_ISA's
 * path when the CPU runs it, else the widest. */
gemm_isa gemm_current(void);

/* "generic", "avx2" or "avx512" for a path; "auto" for GEMM_AUTO. */
const char *gemm_isa_name(gemm_isa isa);

/* The paths this CPU can run, widest first, as "avx512 avx2 generic". */
const char *gemm_isa_supported(void);

/* The precision of the linear layers' products: float32 throughout, or
 * bfloat16 operands into float32 accumulators (gemm_bf16.h; AVX512_BF16 and
 * the avx512 path). The attention's products follow it where the head size
 * is a multiple of 32 (attn_bf16.c); the optimiser's (gemm_rows_for) stay
 * float32 whatever it is. */
typedef enum { GEMM_FP32, GEMM_BF16 } gemm_precision;

/* Use `p` for gemm_linear_forward/backward from now on. Returns 0, or -1 with
 * err (and changes nothing) for bf16 where the CPU or the kernel path in use
 * cannot run it. Not thread-safe, like gemm_select. */
int gemm_set_precision(gemm_precision p, char *err, size_t errlen);

/* The precision train.precision names ("fp32", "bf16" or "auto": bf16
 * where gemm_bf16_available, else fp32), selected for the path in use (call
 * it after gemm_select_env). Returns 0, or -1 with err ("train.precision:
 * bf16: " and the reason, naming the CPU feature or the forced path). */
int gemm_set_precision_named(const char *name, char *err, size_t errlen);

/* The precision in use (GEMM_FP32 until set). */
gemm_precision gemm_current_precision(void);

/* "fp32" or "bf16". */
const char *gemm_precision_name(gemm_precision p);

/* Whether bf16 runs here: the CPU has AVX512_BF16 and the path in use is
 * avx512. 0 with a reason in why (naming the CPU feature or the forced path)
 * when not. */
int gemm_bf16_available(char *why, size_t len);

/* y (N, out) = x (N, in; row stride ldx >= in) W^T with W (out, in). */
/* Whether the next forward products keep their inputs' paired form for the
 * backward (bf16: gemm_bf16_keep_inputs; nothing in float32). Each call
 * drops what was kept. */
void gemm_keep_inputs(int on);

void gemm_linear_forward(float *y, const float *x, int ldx, const float *W, int N, int in, int out);

/* dW (out, in) += dy^T x with dy (N, out), x (N, in; row stride ldx). If dx
 * is not NULL: dx (N, in; row stride ldx) = dy W (beta 0) or += (beta 1). */
void gemm_linear_backward(float *dx, int ldx, float beta, float *dW, const float *dy,
                          const float *x, const float *W, int N, int in, int out);

/* The register-tiled kernel itself, for callers that lay out their own
 * products (the fused attention): C rows [m0, m1) over n columns (+)= A B,
 * with C (M, n) at C[i*ldc + c], A (M, K) element (i, p) at A[i*ars + p*acs]
 * (a transpose may be read in place), B (K, n) row p contiguous at B + p*ldb
 * (ldb > 0). acc_in: add to C instead of overwriting it. Runs on the calling
 * thread, summing each output over p = 0, 1, ... K-1 in order. C is written
 * in tiles of GEMM_MR rows. */
typedef void gemm_rows_fn(int m0, int m1, int n, int K, const float *A, ptrdiff_t ars,
                          ptrdiff_t acs, const float *B, ptrdiff_t ldb, float *C, ptrdiff_t ldc,
                          int acc_in);

/* W (out, in) packed as gemm_linear_forward packs it, by the calling thread
 * into its own pack buffer (valid until its next gemm call; other threads
 * may read it meanwhile), for callers that take the product y = x W^T a
 * few rows at a time: rows(m0, m1, out, in, x, ldx, 1, packed, 0, y, out,
 * 0) computes rows [m0, m1) of it. NULL (and *rows NULL) when the kernel
 * does not take width out or memory is short. */
const float *gemm_pack_forward(const float *W, int in, int out, gemm_rows_fn **rows);
/* (NULL too while the precision is GEMM_BF16: such callers then take
 * gemm_linear_forward.) */

/* Rows per register tile of gemm_rows_fn. */
#define GEMM_MR 6

/* The kernel in use (gemm_current) for products with n columns, or NULL when
 * that is the generic path or n is not a whole number of the kernel's vectors (16 floats
 * for AVX-512, which falls back to AVX2's 8). */
gemm_rows_fn *gemm_rows_for(int n);

#endif
