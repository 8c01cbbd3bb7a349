/* tpe.c - the TPE density ratio over a search space (see tpe.h). Pure
 * arithmetic on the observations: no state, no I/O; every draw from the
 * caller's rng, so a seed fixes the proposals. */
#include "experiments/agent/tpe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MIN_BW 0.05
#define MAX_BW 0.5

/* One side (good or bad) of the split, as indices into the observations. */
typedef struct {
    const tpe_obs_t *obs;
    const int *idx;
    int n;
} side_t;

static double uniform01(rng_t *rng) {
    return (double)(rng_next(rng) >> 11) * 0x1.0p-53;
}

static double norm_cdf(double z) {
    return 0.5 * erfc(-z / sqrt(2.0));
}

/* The points of a range axis on one side, on the unit scale; returns how
 * many (those not NAN) and their kernel bandwidth in *bw. */
static int unit_points(const space_t *sp, int a, const side_t *s, double *u, double *bw) {
    const space_axis_t *ax = &sp->axes[a];
    int m = 0;
    double sum = 0, sum2 = 0;
    for (int i = 0; i < s->n; i++) {
        double x = s->obs[s->idx[i]].x.v[a];
        if (isnan(x)) continue;
        double v = space_unit(ax, x);
        u[m++] = v;
        sum += v;
        sum2 += v * v;
    }
    double sd = m > 1 ? sqrt(fmax(0, (sum2 - sum * sum / m) / (m - 1))) : 0.25;
    double h = 1.06 * sd * pow(m > 0 ? m : 1, -0.2), lo = 1.0 / (m + 1 < 100 ? m + 1 : 100);
    if (lo < MIN_BW) lo = MIN_BW;
    *bw = h < lo ? lo : h > MAX_BW ? MAX_BW : h;
    return m;
}

/* The density of one side at unit position v of range axis a. */
static double range_density(const space_t *sp, int a, const side_t *s, double v) {
    double u[s->n > 0 ? s->n : 1], bw;
    int m = unit_points(sp, a, s, u, &bw);
    double p = 1.0; /* the uniform prior on [0, 1], weight one observation */
    for (int j = 0; j < m; j++) {
        double mass = norm_cdf((1 - u[j]) / bw) - norm_cdf(-u[j] / bw);
        double z = (v - u[j]) / bw;
        if (mass > 1e-12) p += exp(-0.5 * z * z) / (bw * sqrt(2 * M_PI)) / mass;
    }
    return p / (m + 1);
}

/* The smoothed frequency of value k of listed axis a on one side. */
static double list_density(const space_t *sp, int a, const side_t *s, int k) {
    int K = sp->axes[a].n_values, n = 0, c = 0;
    for (int i = 0; i < s->n; i++) {
        int x = (int)s->obs[s->idx[i]].x.v[a];
        if (x < 0 || x >= K) continue;
        n++;
        c += x == k;
    }
    return (c + 1.0) / (n + K);
}

/* The log density of x on one side, over the axes x has (an inactive axis
 * is not part of the point: its density is left out on both sides). */
static double log_density(const space_t *sp, const side_t *s, const space_point_t *x) {
    double lp = 0;
    for (int a = 0; a < sp->n_axes; a++) {
        const space_axis_t *ax = &sp->axes[a];
        if (ax->n_values ? x->v[a] < 0 || x->v[a] >= ax->n_values : isnan(x->v[a])) continue;
        if (ax->n_values)
            lp += log(list_density(sp, a, s, (int)x->v[a]));
        else
            lp += log(range_density(sp, a, s, space_unit(ax, x->v[a])));
    }
    return lp;
}

/* Draw one point from a side's densities, axis by axis; the axes the drawn
 * values make inactive are then left out (space_canon). */
static void draw(const space_t *sp, const side_t *s, rng_t *rng, space_point_t *x) {
    for (int a = 0; a < sp->n_axes; a++) {
        const space_axis_t *ax = &sp->axes[a];
        if (ax->n_values) {
            double r = uniform01(rng), acc = 0;
            int k = 0;
            for (; k < ax->n_values - 1; k++) {
                acc += list_density(sp, a, s, k);
                if (r < acc) break;
            }
            x->v[a] = k;
            continue;
        }
        double u[s->n > 0 ? s->n : 1], bw, v;
        int m = unit_points(sp, a, s, u, &bw);
        int pick = (int)rng_below(rng, (uint64_t)m + 1); /* m: the prior */
        if (pick == m) {
            v = uniform01(rng);
        } else {
            int tries = 0;
            do v = u[pick] + bw * rng_normal(rng);
            while ((v < 0 || v > 1) && ++tries < 32);
            v = v < 0 ? 0 : v > 1 ? 1 : v;
        }
        x->v[a] = space_from_unit(ax, v);
    }
    space_canon(sp, x);
}

/* Observation order: by y, then by index (a stable, seed-free order). */
static int by_y(const void *pa, const void *pb, void *obs) {
    int a = *(const int *)pa, b = *(const int *)pb;
    double ya = ((const tpe_obs_t *)obs)[a].y, yb = ((const tpe_obs_t *)obs)[b].y;
    if (ya != yb) return ya < yb ? -1 : 1;
    return a - b;
}

/* Split obs into good (the lowest ceil(gamma n), at least 1, finite only)
 * and bad; idx holds the order. */
static void split(const tpe_obs_t *obs, int n, double gamma, int *idx, side_t *good, side_t *bad) {
    int finite = 0;
    for (int i = 0; i < n; i++) {
        idx[i] = i;
        finite += isfinite(obs[i].y);
    }
    qsort_r(idx, (size_t)n, sizeof *idx, by_y, (void *)obs);
    int n_good = (int)ceil(gamma * n);
    if (n_good < 1) n_good = 1;
    if (n_good > finite) n_good = finite;
    if (n_good > n - 1) n_good = n - 1;
    *good = (side_t){obs, idx, n_good};
    *bad = (side_t){obs, idx + n_good, n - n_good};
}

/* A copy of obs with the inactive axes of each point left out (space_canon),
 * so that no density counts a value that is not part of its point; NULL
 * when out of memory (the caller frees). */
static tpe_obs_t *canon_obs(const space_t *sp, const tpe_obs_t *obs, int n) {
    tpe_obs_t *c = malloc((size_t)(n > 0 ? n : 1) * sizeof *c);
    for (int i = 0; c && i < n; i++) {
        c[i] = obs[i];
        space_canon(sp, &c[i].x);
    }
    return c;
}

double tpe_gamma(int n_obs) {
    if (n_obs <= 32) return TPE_DEFAULT_GAMMA;
    return (8 + 0.1 * (n_obs - 32)) / n_obs;
}

double tpe_score(const space_t *sp, const tpe_obs_t *obs_in, int n_obs, double gamma,
                 const space_point_t *x_in) {
    int idx[n_obs > 0 ? n_obs : 1];
    side_t good, bad;
    tpe_obs_t *obs = canon_obs(sp, obs_in, n_obs);
    space_point_t x = *x_in;
    if (!obs) return NAN;
    space_canon(sp, &x);
    split(obs, n_obs, gamma, idx, &good, &bad);
    double r = log_density(sp, &good, &x) - log_density(sp, &bad, &x);
    free(obs);
    return r;
}

int tpe_suggest(const space_t *sp, const tpe_obs_t *obs_in, int n_obs, double gamma,
                int n_candidates, rng_t *rng, space_point_t *out, double *score, int n_out) {
    if (n_obs < 2 || n_candidates < 1 || n_out < 1) return 0;
    tpe_obs_t *obs = canon_obs(sp, obs_in, n_obs);
    if (!obs) return 0;
    int idx[n_obs], n = 0;
    double r[n_out];
    side_t good, bad;
    split(obs, n_obs, gamma, idx, &good, &bad);
    for (int c = 0; c < n_candidates; c++) {
        space_point_t x;
        draw(sp, &good, rng, &x);
        double sc = log_density(sp, &good, &x) - log_density(sp, &bad, &x);
        /* insert into out, kept in decreasing score, at most n_out */
        int at = n;
        while (at > 0 && r[at - 1] < sc) at--;
        if (at >= n_out) continue;
        int keep = (n < n_out ? n : n_out - 1) - at; /* entries that move down one */
        memmove(out + at + 1, out + at, (size_t)keep * sizeof *out);
        memmove(r + at + 1, r + at, (size_t)keep * sizeof *r);
        out[at] = x;
        r[at] = sc;
        if (n < n_out) n++;
    }
    if (score) memcpy(score, r, (size_t)n * sizeof *r);
    free(obs);
    return n;
}
