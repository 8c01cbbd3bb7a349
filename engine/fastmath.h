/* fastmath.h - exp and tanh written so the compiler can vectorise loops that
 * call them (libm's expf and tanhf are scalar calls). Both are within a few
 * float ulps of libm over the ranges the kernels use (tests/test_ops.c).
 * Also double-precision sums in a vectorisable lane order. */
#ifndef NIGHTSHIFT_FASTMATH_H
#define NIGHTSHIFT_FASTMATH_H

#include <math.h>
#include <string.h>

/* Cephes' expf in steps any float type can take (a float, or a GCC vector
 * of floats: attn.c's 16-lane softmax runs the same ones): x = n ln2 + r with
 * n = round(x / ln 2), then e^r by a degree-6 polynomial. The caller clamps
 * x and builds 2^n from the exponent bits. */
/* clang-format off */
#define FAST_EXP_ROUND(x) (((x) * 1.44269504088896341f + 12582912.0f) - 12582912.0f)
#define FAST_EXP_REDUCE(x, n) ((x) - (n) * 0.693359375f - (n) * -2.12194440e-4f)
#define FAST_EXP_POLY(r)                  \
    (((((( 1.9875691500e-4f  * (r)        \
         + 1.3981999507e-3f) * (r)        \
         + 8.3334519073e-3f) * (r)        \
         + 4.1665795894e-2f) * (r)        \
         + 1.6666665459e-1f) * (r)        \
         + 5.0000001201e-1f) * (r) * (r) + (r) + 1.0f)
/* clang-format on */

/* e^x for x <= ~88; inputs below -87 give e^-87 (callers pass a score minus
 * its row's maximum or log-sum-exp, where that is 0 to float precision). */
static inline float fast_expf(float x) {
    x = x < -87.0f ? -87.0f : x;
    const float n = FAST_EXP_ROUND(x), r = FAST_EXP_REDUCE(x, n);
    const float p = FAST_EXP_POLY(r);
    int bits = ((int)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* tanh(x): Eigen's rational approximation (odd degree 13 over even degree
 * 6), clamped where float tanh is +-1. */
static inline float fast_tanhf(float x) {
    const float c = 7.90531110763549805f;
    x = x > c ? c : x < -c ? -c : x;
    const float x2 = x * x;
    float p = -2.76076847742355e-16f;
    p = p * x2 + 2.00018790482477e-13f;
    p = p * x2 + -8.60467152213735e-11f;
    p = p * x2 + 5.12229709037114e-08f;
    p = p * x2 + 1.48572235717979e-05f;
    p = p * x2 + 6.37261928875436e-04f;
    p = p * x2 + 4.89352455891786e-03f;
    p = p * x;
    float q = 1.19825839466702e-06f;
    q = q * x2 + 1.18534705686654e-04f;
    q = q * x2 + 2.26843463243900e-03f;
    q = q * x2 + 4.89352518554385e-03f;
    return p / q;
}

/* sum a[j] * b[j] over j < n in double. Eight lanes, added in a fixed order,
 * so the loop vectorises (a plain double sum is a serial chain the compiler
 * may not reorder) and the result does not depend on anything but the data. */
static inline double dot_f64(const float *a, const float *b, int n) {
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, tail = 0.0;
    int j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; k++) acc[k] += (double)a[j + k] * b[j + k];
    for (; j < n; j++) tail += (double)a[j] * b[j];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

/* sum of x[j] over j < n in double, in the lanes of dot_f64. */
static inline double sum_f64(const float *x, int n) {
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, tail = 0.0;
    int j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; k++) acc[k] += (double)x[j + k];
    for (; j < n; j++) tail += (double)x[j];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

/* max of x[j] over j < n (-INFINITY when n <= 0), in 16 lanes. */
static inline float max_f32(const float *x, int n) {
    float acc[16];
    for (int k = 0; k < 16; k++) acc[k] = -INFINITY;
    int j = 0;
    for (; j + 16 <= n; j += 16)
        for (int k = 0; k < 16; k++) acc[k] = x[j + k] > acc[k] ? x[j + k] : acc[k];
    for (; j < n; j++) acc[0] = x[j] > acc[0] ? x[j] : acc[0];
    float m = acc[0];
    for (int k = 1; k < 16; k++) m = acc[k] > m ? acc[k] : m;
    return m;
}

/* sum of fast_expf(z[j] - mx) over j < n in double, in the lanes of dot_f64. */
static inline double sum_exp_f64(const float *z, float mx, int n) {
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, tail = 0.0;
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        /* the exponentials first, as one block of floats: fused into the
         * double adds, the loop is not vectorised */
        float e[8];
        for (int k = 0; k < 8; k++) e[k] = fast_expf(z[j + k] - mx);
        for (int k = 0; k < 8; k++) acc[k] += (double)e[k];
    }
    for (; j < n; j++) tail += (double)fast_expf(z[j] - mx);
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

#endif
