/* rng.c - xoshiro256** (Blackman & Vigna), seeded through splitmix64.
 * Written out here because it is a dozen lines and must never change: runs
 * are reproducible from a seed only while this sequence stays the same. */
#include "engine/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void rng_seed(rng_t *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

uint64_t rng_next(rng_t *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float rng_uniform(rng_t *r) {
    return (float)(rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

float rng_normal(rng_t *r) {
    /* 1 - u keeps the logarithm's argument in (0, 1]. */
    double u1 = 1.0 - (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
    double u2 = (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

uint64_t rng_below(rng_t *r, uint64_t n) {
    /* Rejection sampling removes the modulo bias. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = rng_next(r);
    while (x >= limit);
    return x % n;
}
