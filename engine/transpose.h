/* transpose.h - float matrix transposes in 8 x 8 blocks held in vectors
 * (GCC's generic vectors: one AVX register, or two SSE ones on the generic
 * build), for the copies that turn rows into columns: gemm.c's packed W^T
 * and the optimiser's X^T and mirrored Gram triangles. Element by element
 * such a copy loads and stores each float on its own and was 1-2% of make
 * bench's L step; here 8 loads, 24 shuffles and 8 stores move 64 floats.
 * The floats are only moved, never changed. */
#ifndef NIGHTSHIFT_TRANSPOSE_H
#define NIGHTSHIFT_TRANSPOSE_H

#include <stddef.h>

typedef float transpose_v8 __attribute__((vector_size(32)));
typedef float transpose_v8u __attribute__((vector_size(32), aligned(4)));

/* Row r of dst (8 floats at dst + r*ds) = column r of the 8 x 8 block whose
 * row i is at src + i*ss: three rounds of interleaving row i with row i + 4,
 * each rotating the bits of (row, column) by one place. */
__attribute__((always_inline)) static inline void transpose_8x8(float *dst, ptrdiff_t ds,
                                                                const float *src, ptrdiff_t ss) {
    transpose_v8 r[8], t[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) r[i] = *(const transpose_v8u *)(src + i * ss);
#pragma GCC unroll 3
    for (int round = 0; round < 3; round++) {
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            t[2 * i] = __builtin_shufflevector(r[i], r[i + 4], 0, 8, 1, 9, 2, 10, 3, 11);
            t[2 * i + 1] = __builtin_shufflevector(r[i], r[i + 4], 4, 12, 5, 13, 6, 14, 7, 15);
        }
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) r[i] = t[i];
    }
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) *(transpose_v8u *)(dst + i * ds) = r[i];
}

/* dst (cols, rows; row stride ds) = src (rows, cols; row stride ss)
 * transposed: 8 x 8 blocks where whole, the ragged edges float by float. */
static inline void transpose_matrix(float *dst, ptrdiff_t ds, const float *src, ptrdiff_t ss,
                                    int rows, int cols) {
    const int r8 = rows - rows % 8, c8 = cols - cols % 8;
    for (int r0 = 0; r0 < r8; r0 += 8)
        for (int c0 = 0; c0 < c8; c0 += 8)
            transpose_8x8(dst + c0 * ds + r0, ds, src + r0 * ss + c0, ss);
    for (int r = 0; r < rows; r++)
        for (int c = r < r8 ? c8 : 0; c < cols; c++) dst[c * ds + r] = src[r * ss + c];
}

#endif
