/* attn_kern.h - private to the fused attention (attn.c): the tiling both
 * paths share, and the kernel path, compiled once per instruction set from
 * attn_kern.c (attn_kern_forward_avx2, ..._avx512; the Makefile builds it
 * with -DATTN_KERN_AVX2 or -DATTN_KERN_AVX512 and that set's flags), so each
 * runs its own vector width and no AVX-512 instruction reaches the AVX2
 * path, whatever -march the rest of the engine is built with. */
#ifndef NIGHTSHIFT_ATTN_KERN_H
#define NIGHTSHIFT_ATTN_KERN_H

#include <stddef.h>

#include "engine/gemm.h"

/* Query rows per tile. */
#define BQ 64

/* The kernel path's score columns start at a multiple of KA keys, and its
 * scratch rows end LPAD floats past their width: a power-of-two row stride
 * (1 KB at T 256) puts a column panel's rows in a few L1 sets. */
#define KA   16
#define LPAD 16

static inline size_t round_up(size_t x, size_t m) {
    return (x + m - 1) / m * m;
}

static inline int imax(int a, int b) {
    return a > b ? a : b;
}

static inline int imin(int a, int b) {
    return a < b ? a : b;
}

/* Visible keys of query `row`: [row - window, row], clipped at 0. */
static inline int first_key(int row, int window) {
    return imax(row - window, 0);
}

/* Scratch floats per thread of either path (attn.c). */
size_t attn_thread_floats(int hd, int T);

/* The kernel path's forward and backward: attn_forward's and
 * attn_backward's contracts, with the register-tiled products rows_s (for
 * score columns, KA wide) and rows_h (head_dim wide) of the same
 * instruction set, and window <= T. */
#define ATTN_KERN_DECLARE(SUFFIX)                                                                  \
    void attn_kern_forward_##SUFFIX(gemm_rows_fn *rows_s, gemm_rows_fn *rows_h, float *y,          \
                                    float *lse, const float *q, const float *k, const float *v,    \
                                    int B, int T, int H, int Hkv, int hd, int window, float *work, \
                                    int threads);                                                  \
    void attn_kern_backward_##SUFFIX(gemm_rows_fn *rows_s, gemm_rows_fn *rows_h, float *dq,        \
                                     float *dk, float *dv, const float *dy, const float *y,        \
                                     const float *lse, const float *q, const float *k,             \
                                     const float *v, int B, int T, int H, int Hkv, int hd,         \
                                     int window, float *work, int threads);
/* The bf16 path (attn_bf16.c; hd a multiple of 32, a CPU with AVX512_BF16):
 * attn_forward's and attn_backward's contracts with the products in bf16,
 * and its scratch floats per thread. */
void attn_bf16_forward(float *y, float *lse, const float *q, const float *k, const float *v, int B,
                       int T, int H, int Hkv, int hd, int window, float *work, int threads);
void attn_bf16_backward(float *dq, float *dk, float *dv, const float *dy, const float *y,
                        const float *lse, const float *q, const float *k, const float *v, int B,
                        int T, int H, int Hkv, int hd, int window, float *work, int threads);
size_t attn_bf16_thread_floats(int hd, int T);

ATTN_KERN_DECLARE(avx2)
ATTN_KERN_DECLARE(avx512)
#undef ATTN_KERN_DECLARE

#endif
